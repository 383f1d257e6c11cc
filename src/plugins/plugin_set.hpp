#pragma once
// Which plugins a Runtime uses, in the order the partitioner asks them.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "plugins/plugin_library.hpp"

namespace kiln::plugins {

// The plugins of `paths` (files or directories; a plugin that cannot be
// loaded is an error) and of `env_list` (KILN_PLUGIN_PATH: one that cannot
// be loaded costs a warning), each file once, highest priority first (ties
// in the order given).
std::vector<std::shared_ptr<const PluginLibrary>> find_plugins(const std::vector<std::string>& paths, const std::string& env_list,
                                                               const std::function<void(const std::string&)>& warn);

}  // namespace kiln::plugins
