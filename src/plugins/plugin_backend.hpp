#pragma once
// A loaded plugin as one of a Runtime's backends: the partitioner asks it
// for its groups of nodes, compiles its parts through it, and the cache
// keeps what it serializes. Every answer of the plugin is checked; a wrong
// capability answer or a failed compile costs one warning and leaves its
// nodes to the backends after it, a failed run or a refused blob is an
// error naming the plugin.
#include <memory>

#include "backends/backend.hpp"
#include "plugins/plugin_library.hpp"

namespace kiln::plugins {

// `threads`: the Runtime's threads (null: the calling thread alone);
// `log`: where the plugin's messages and the warnings about it go.
std::unique_ptr<backends::Backend> make_plugin_backend(std::shared_ptr<const PluginLibrary> library,
                                                       std::shared_ptr<backends::HostThreads> threads, LogSink log);

}  // namespace kiln::plugins
