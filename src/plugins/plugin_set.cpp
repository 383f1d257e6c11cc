#include "plugins/plugin_set.hpp"

#include <algorithm>

#include "runtime/ir/error.hpp"

namespace kiln::plugins {

std::vector<std::shared_ptr<const PluginLibrary>> find_plugins(const std::vector<std::string>& paths, const std::string& env_list,
                                                               const std::function<void(const std::string&)>& warn) {
  std::vector<std::shared_ptr<const PluginLibrary>> found;
  auto add = [&](std::shared_ptr<const PluginLibrary> lib) {
    if (std::none_of(found.begin(), found.end(), [&](const auto& l) { return l == lib; })) found.push_back(std::move(lib));
  };
  for (const auto& path : paths)
    for (const auto& file : plugin_files(path)) add(load_plugin(file));
  for (const auto& file : plugin_files(env_list)) {
    try {
      add(load_plugin(file));
    } catch (const ir::Error& e) {
      warn(std::string(e.what()) + " (from KILN_PLUGIN_PATH; not used)");
    }
  }
  std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a->priority > b->priority; });
  return found;
}

}  // namespace kiln::plugins
