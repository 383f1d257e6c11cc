#include "plugins/plugin_library.hpp"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>

#include "cache/cache_dir.hpp"
#include "plugins/graph_view.hpp"
#include "runtime/ir/graph.hpp"

namespace kiln::plugins {

namespace {

thread_local const LogSink* current_sink = nullptr;

void host_log(void*, int32_t level, const char* text) {
  const std::string message = text ? text : "";
  if (current_sink && *current_sink) {
    (*current_sink)(level, message);
    return;
  }
  static const char* names[] = {"debug", "info", "warning", "error"};
  std::fprintf(stderr, "kiln plugin [%s] %s\n", names[std::clamp(level, 0, 3)], message.c_str());
}

void* host_allocate(void*, size_t bytes, size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) || alignment > 4096) return nullptr;
  alignment = std::max(alignment, sizeof(void*));
  void* p = nullptr;
  return ::posix_memalign(&p, alignment, bytes ? bytes : 1) == 0 ? p : nullptr;
}

void host_release(void*, void* memory) { std::free(memory); }

const kiln_backend_host kHost = {
    sizeof(kiln_backend_host), KILN_BACKEND_ABI_VERSION, nullptr, host_log, host_allocate, host_release, &graph_api()};

[[noreturn]] void refuse(const std::string& path, const std::string& why) {
  ir::fail(ir::ErrorKind::InvalidArgument, "plugin " + path + ": " + why);
}

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

// A string the plugin returned, bounded (it may not be terminated).
std::string bounded(const char* s, size_t max, const std::string& path, const char* field) {
  if (!s) return "";
  const void* end = std::memchr(s, '\0', max + 1);
  if (!end) refuse(path, std::string("its ") + field + " is longer than " + std::to_string(max) + " bytes");
  return std::string(s, static_cast<const char*>(end));
}

// The fields of ABI version 1 end with compile_count.
constexpr size_t kApiV1Bytes = offsetof(kiln_backend_api, compile_count) + sizeof(void*);

std::shared_ptr<PluginLibrary> open_plugin(const std::string& path, cache::Fd& fd) {
  // dlopen of the descriptor's /proc path loads the file checked, whatever
  // happens to the path meanwhile. Once loaded, the descriptor stays open
  // for good, even if the plugin is then refused: glibc takes a path it has
  // loaded before for the same library, and the number of a descriptor kept
  // open is never another file's.
  const std::string proc = "/proc/self/fd/" + std::to_string(fd.get());
  void* handle = ::dlopen(proc.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* e = ::dlerror();
    refuse(path, std::string("cannot be loaded: ") + (e ? e : "dlopen failed"));
  }
  (void)fd.release();
  // Never dlclosed: compiled partitions and tables point into it.
  auto entry = reinterpret_cast<kiln_backend_entry_fn>(::dlsym(handle, KILN_BACKEND_ENTRY_POINT));
  if (!entry) refuse(path, "exports no " KILN_BACKEND_ENTRY_POINT " (is it a Kiln backend plugin?)");
  const kiln_backend_api* api = nullptr;
  Message message;
  kiln_backend_status status;
  try {
    status = entry(KILN_BACKEND_ABI_VERSION, &kHost, &api, message.text);
  } catch (...) {
    refuse(path, "its entry point threw an exception across the C ABI");
  }
  if (status != KILN_BACKEND_OK) refuse(path, "refused to start (status " + std::to_string(int(status)) + "): " + message.str());
  if (!api) refuse(path, "its entry point returned no function table");
  if (api->struct_size < kApiV1Bytes)
    refuse(path, "its function table is " + std::to_string(api->struct_size) + " bytes, ABI version 1 has " +
                     std::to_string(kApiV1Bytes));
  if (api->abi_version < 1 || api->abi_version > KILN_BACKEND_ABI_VERSION)
    refuse(path, "it was built for backend ABI version " + std::to_string(api->abi_version) + ", this Kiln speaks 1 to " +
                     std::to_string(KILN_BACKEND_ABI_VERSION));
  auto lib = std::make_shared<PluginLibrary>();
  lib->path = path;
  lib->api = api;
  lib->abi_version = api->abi_version;
  lib->priority = api->priority;
  lib->name = bounded(api->name, 64, path, "name");
  if (!valid_name(lib->name)) refuse(path, "its name '" + lib->name + "' is not 1 to 64 letters, digits, '_' or '-'");
  if (lib->name == "cpu" || lib->name == "reference" || lib->name == "interpreter")
    refuse(path, "its name '" + lib->name + "' is a built-in backend's");
  lib->identity = bounded(api->identity, 4096, path, "identity");
  if (lib->identity.empty()) refuse(path, "its identity is empty (it enters cache keys: say what changes its code)");
  std::stringstream operators(bounded(api->operators, 1 << 16, path, "operator list"));
  for (std::string op; std::getline(operators, op, ',');)
    if (!op.empty()) lib->operators.push_back(op);
  const std::pair<const void*, const char*> functions[] = {
      {reinterpret_cast<const void*>(api->get_capability), "get_capability"},
      {reinterpret_cast<const void*>(api->compile), "compile"},
      {reinterpret_cast<const void*>(api->run), "run"},
      {reinterpret_cast<const void*>(api->serialize), "serialize"},
      {reinterpret_cast<const void*>(api->deserialize), "deserialize"},
      {reinterpret_cast<const void*>(api->release_compiled), "release_compiled"},
      {reinterpret_cast<const void*>(api->compile_count), "compile_count"}};
  for (const auto& [f, what] : functions)
    if (!f) refuse(path, std::string("its function table has no ") + what);
  return lib;
}

}  // namespace

LogScope::LogScope(const LogSink* sink) : saved_(current_sink) { current_sink = sink; }
LogScope::~LogScope() { current_sink = saved_; }

std::shared_ptr<const PluginLibrary> load_plugin(const std::string& path) {
  cache::Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd) refuse(path, std::string("cannot be opened: ") + std::strerror(errno));
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) refuse(path, "is not a regular file");
  // Its code runs in this process: like the cache's entries, only a file
  // that no one else can change.
  if (std::string why = cache::not_private(st); !why.empty())
    refuse(path, why + " (a plugin must belong to you or root and be writable by no one else)");

  static std::mutex mutex;
  static std::map<std::pair<dev_t, ino_t>, std::shared_ptr<PluginLibrary>> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = loaded[{st.st_dev, st.st_ino}];
  if (slot) return slot;
  auto lib = open_plugin(path, fd);
  for (const auto& [key, other] : loaded)
    if (other && other->name == lib->name) refuse(path, "its name '" + lib->name + "' is taken by plugin " + other->path);
  slot = lib;
  return slot;
}

std::vector<std::string> plugin_files(const std::string& list) {
  std::vector<std::string> files;
  std::stringstream items(list);
  std::string item;
  while (std::getline(items, item, ':')) {
    if (item.empty()) continue;
    struct stat st{};
    if (::stat(item.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      std::vector<std::string> found;
      if (DIR* d = ::opendir(item.c_str())) {
        while (const dirent* e = ::readdir(d)) {
          const std::string name = e->d_name;
          if (name.size() > 3 && name.compare(name.size() - 3, 3, ".so") == 0) found.push_back(item + "/" + name);
        }
        ::closedir(d);
      }
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      files.push_back(item);  // load_plugin says what is wrong with it
    }
  }
  return files;
}

}  // namespace kiln::plugins
