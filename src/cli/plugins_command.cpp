// kiln plugins [--plugin PATH]... [--json]: the backend plugins a Runtime
// would use (those of $KILN_PLUGIN_PATH and --plugin), in the order it asks
// them, and where the plugins installed with this kiln are.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "kiln/kiln.hpp"

namespace kiln::cli {

namespace {

namespace fs = std::filesystem;

struct PluginsArgs {
  std::vector<std::string> plugins;
  bool json = false;
};

// The plugin folder of the prefix this kiln is installed in
// (KILN_BIN_TO_PLUGINDIR, from cmake/KilnInstall.cmake, leads there from the
// command's folder), or "" when there is none, as in a build tree. Its
// plugins are only named: each one is opt-in, loading one by default would
// change what every run computes and how fast.
std::string installed_plugin_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  const fs::path dir = fs::weakly_canonical(exe.parent_path() / KILN_BIN_TO_PLUGINDIR, ec);
  return !ec && fs::is_directory(dir, ec) ? dir.string() : "";
}

void print_installed_plugins() {
  const std::string dir = installed_plugin_dir();
  if (dir.empty()) return;
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().extension() == ".so") files.push_back(entry.path().filename().string());
  std::sort(files.begin(), files.end());
  std::cout << "installed with this kiln in " << dir << " (loaded only when named: --plugin or KILN_PLUGIN_PATH):";
  for (const auto& f : files) std::cout << " " << f;
  std::cout << "\n";
}

void list_plugins(const PluginsArgs& args) {
  RuntimeOptions opts;
  opts.plugins = args.plugins;
  opts.cache = false;
  const Runtime runtime(opts);
  const std::vector<PluginInfo> plugins = runtime.plugins();
  if (args.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& p : plugins)
      j.push_back({{"name", p.name},
                   {"path", p.path},
                   {"abi_version", p.abi_version},
                   {"identity", p.identity},
                   {"priority", p.priority},
                   {"operators", p.operators}});
    std::cout << j.dump(2) << "\n";
    return;
  }
  if (plugins.empty()) std::cout << "no plugins (give them with --plugin PATH or KILN_PLUGIN_PATH)\n";
  for (const auto& p : plugins) {
    std::cout << p.name << "  (" << p.path << ")\n";
    std::cout << "  ABI version " << p.abi_version << ", priority " << p.priority << "\n";
    std::cout << "  identity   " << p.identity << "\n";
    std::cout << "  operators  " << p.operators.size() << ":";
    for (const auto& op : p.operators) std::cout << " " << op;
    std::cout << "\n";
  }
  print_installed_plugins();
}

}  // namespace

void add_plugins_command(CLI::App& app) {
  auto args = std::make_shared<PluginsArgs>();
  auto* cmd = app.add_subcommand("plugins",
                                 "List the backend plugins found ($KILN_PLUGIN_PATH and --plugin), in the order they are asked");
  cmd->add_option("--plugin", args->plugins, "a plugin, or a directory of them (repeatable)");
  cmd->add_flag("--json", args->json, "print JSON");
  cmd->callback([args] { list_plugins(*args); });
}

}  // namespace kiln::cli
