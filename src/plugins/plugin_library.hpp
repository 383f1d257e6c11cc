#pragma once
// A backend plugin's shared library, loaded once per process: the checks a
// file must pass before its code runs, the entry point's call, and the
// checks of the table it returns (include/kiln/backend.h).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/backend.h"

namespace kiln::plugins {

struct PluginLibrary {
  std::string path;  // as given
  std::string name;
  std::string identity;
  std::string operators;
  int32_t priority = 0;
  uint32_t abi_version = 0;
  const kiln_backend_api* api = nullptr;
};

// The plugin in `path`, loaded and checked, or the one loaded before from
// the same file. Throws ir::Error(InvalidArgument) naming the file and what
// is wrong: not a regular file, writable by others, no entry point, a
// refusal, an ABI version or a table the host cannot use.
std::shared_ptr<const PluginLibrary> load_plugin(const std::string& path);

// The plugin files of a list like KILN_PLUGIN_PATH: colon-separated files
// and directories (a directory's *.so files, sorted by name).
std::vector<std::string> plugin_files(const std::string& list);

// Where a plugin's log messages go while this thread calls into it (the
// Runtime's logger); without one, stderr.
using LogSink = std::function<void(int level, const std::string& text)>;
class LogScope {
 public:
  explicit LogScope(const LogSink* sink);
  ~LogScope();
  LogScope(const LogScope&) = delete;
  LogScope& operator=(const LogScope&) = delete;

 private:
  const LogSink* saved_;
};

// A plugin's message buffer: zeroed before the call, terminated after.
struct Message {
  char text[KILN_BACKEND_MESSAGE_BYTES] = {};
  std::string str() {
    text[sizeof text - 1] = '\0';
    return text[0] ? std::string(text) : std::string("(no message)");
  }
};

}  // namespace kiln::plugins
