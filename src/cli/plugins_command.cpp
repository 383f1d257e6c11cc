// kiln plugins [--plugin PATH]... [--json]: the backend plugins a Runtime
// would use (those of $KILN_PLUGIN_PATH and --plugin), in the order it asks them.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "kiln/kiln.hpp"

namespace kiln::cli {

namespace {

struct PluginsArgs {
  std::vector<std::string> plugins;
  bool json = false;
};

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
  if (plugins.empty()) {
    std::cout << "no plugins (give them with --plugin PATH or KILN_PLUGIN_PATH)\n";
    return;
  }
  for (const auto& p : plugins) {
    std::cout << p.name << "  (" << p.path << ")\n";
    std::cout << "  ABI version " << p.abi_version << ", priority " << p.priority << "\n";
    std::cout << "  identity   " << p.identity << "\n";
    std::cout << "  operators  " << p.operators.size() << ":";
    for (const auto& op : p.operators) std::cout << " " << op;
    std::cout << "\n";
  }
}

}  // namespace

void add_plugins_command(CLI::App& app) {
  auto args = std::make_shared<PluginsArgs>();
  auto* cmd = app.add_subcommand("plugins", "List the backend plugins found ($KILN_PLUGIN_PATH and --plugin), in the order they are asked");
  cmd->add_option("--plugin", args->plugins, "a plugin, or a directory of them (repeatable)");
  cmd->add_flag("--json", args->json, "print JSON");
  cmd->callback([args] { list_plugins(*args); });
}

}  // namespace kiln::cli
