#pragma once
// Libraries compiled to LLVM bitcode at build time by clang-19, one copy per
// target architecture, embedded in libkiln's read-only data (each owner's
// .incbin), and how such a library is linked into a module.
#include <llvm/ADT/STLFunctionalExtras.h>
#include <llvm/ADT/StringRef.h>

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace llvm {
class Function;
class Module;
}  // namespace llvm

namespace kiln::cpu {

// One architecture's copy of an embedded library.
struct EmbeddedBitcode {
  std::string_view arch;  // as llvm::Triple names it: "x86_64", "aarch64"
  std::string_view bytes;
};

// The bytes between an .incbin's start and end symbols.
inline std::string_view embedded_bytes(const char* begin, const char* end) { return {begin, size_t(end - begin)}; }

// The copy among `copies` for the module's target architecture. Throws
// ir::Error(Unsupported), naming `library` and the architectures it was built
// for, if there is none.
std::string_view bitcode_for(const llvm::Module& m, std::span<const EmbeddedBitcode> copies, std::string_view library);

// `bitcode` parsed into the module's context; `lazy`: function bodies are not
// read (declarations suffice). Throws ir::Error(Internal) if it does not load.
std::unique_ptr<llvm::Module> parse_bitcode(const llvm::Module& m, std::string_view bitcode, std::string_view library, bool lazy);

// Links `bitcode` (of `library`, for messages) into `m`, retargeted to the
// module's triple and data layout. What it defines becomes internal, so that
// what nothing calls is dropped, except the functions `keep_external` accepts.
// `only_needed`: only what `m` declares, and what that calls, is read and
// linked. Returns the functions it defined, as they are in `m`. Throws
// ir::Error(Internal) if it does not load or link.
std::vector<llvm::Function*> link_bitcode(llvm::Module& m, std::string_view bitcode, std::string_view library,
                                          llvm::function_ref<bool(llvm::StringRef)> keep_external = nullptr,
                                          bool only_needed = false);

}  // namespace kiln::cpu
