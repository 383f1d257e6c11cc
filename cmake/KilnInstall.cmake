# What `cmake --install` puts in a prefix, and CPack's .deb and .tar.gz of the
# same (docs/install.md): the public headers, libkiln, the kiln command, the
# plugins built with Kiln, KilnConfig.cmake (find_package(Kiln) -> Kiln::kiln)
# and kiln.pc. Everything finds the rest relative to itself, so a prefix can
# be moved; libkiln needs no other file at run time (its kernel bitcode is
# embedded).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(DIRECTORY include/kiln DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS kiln EXPORT KilnTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS kiln_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
file(RELATIVE_PATH KILN_BIN_TO_LIB /${CMAKE_INSTALL_BINDIR} /${CMAKE_INSTALL_LIBDIR})
set_target_properties(kiln_cli PROPERTIES INSTALL_RPATH "$ORIGIN/${KILN_BIN_TO_LIB}")

# The plugins, in a folder of their own that nothing loads by itself: a
# plugin takes nodes from the cpu backend (the reference plugin all it can),
# so each is opt-in, through --plugin, KILN_PLUGIN_PATH or
# RuntimeOptions::plugins (docs/plugins.md, "Installed plugins"). kiln.pc and
# KilnConfig.cmake say where it is, and `kiln plugins` shows it.
set(KILN_INSTALL_PLUGINDIR ${CMAKE_INSTALL_LIBDIR}/kiln/plugins)
set(kiln_plugin_targets kiln_reference_plugin)
if(TARGET kiln_xnnpack_plugin)
  list(APPEND kiln_plugin_targets kiln_xnnpack_plugin)
endif()
install(TARGETS ${kiln_plugin_targets} LIBRARY DESTINATION ${KILN_INSTALL_PLUGINDIR})
file(RELATIVE_PATH KILN_BIN_TO_PLUGINDIR /${CMAKE_INSTALL_BINDIR} /${KILN_INSTALL_PLUGINDIR})
target_compile_definitions(kiln_cli PRIVATE KILN_BIN_TO_PLUGINDIR="${KILN_BIN_TO_PLUGINDIR}")

set(KILN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Kiln)
install(EXPORT KilnTargets NAMESPACE Kiln:: DESTINATION ${KILN_CMAKE_DIR})
configure_package_config_file(cmake/KilnConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/KilnConfig.cmake
  INSTALL_DESTINATION ${KILN_CMAKE_DIR} PATH_VARS KILN_INSTALL_PLUGINDIR)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/KilnConfig.cmake DESTINATION ${KILN_CMAKE_DIR})
# SONAME libkiln.so.0: every 0.x is compatible with the one it was built against.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/KilnConfigVersion.cmake COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/KilnConfigVersion.cmake DESTINATION ${KILN_CMAKE_DIR})

file(RELATIVE_PATH KILN_PC_TO_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" KILN_PC_TO_PREFIX "${KILN_PC_TO_PREFIX}")
configure_file(cmake/kiln.pc.in ${CMAKE_CURRENT_BINARY_DIR}/kiln.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/kiln.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

set(CPACK_PACKAGE_NAME kiln)
set(CPACK_PACKAGE_VENDOR Kiln)
set(CPACK_PACKAGE_CONTACT "Kiln developers")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "ONNX models compiled to native code: libkiln, its headers and the kiln command")
set(CPACK_GENERATOR DEB TGZ)
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/packages)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
# The Debian packages of the shared libraries libkiln and kiln link, from dpkg-shlibdeps.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
include(CPack)
