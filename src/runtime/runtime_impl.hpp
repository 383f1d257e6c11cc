#pragma once
// What a Runtime holds: its backend, its thread budget, its cache and the
// thread that writes cache entries. Internal: shared by the files that
// implement the public API.
#include <atomic>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "cache/cache_key.hpp"
#include "cache/remote_store.hpp"
#include "cache/store.hpp"
#include "kiln/kiln.hpp"
#include "plugins/plugin_library.hpp"
#include "runtime/cache_writer.hpp"
#include "runtime/ir/error.hpp"

namespace kiln {

// Hidden: a nested class takes the visibility of the public class around it,
// and libkiln exports the public API only.
struct __attribute__((visibility("hidden"))) Runtime::Impl {
  RuntimeOptions options;
  int threads = 1;
  std::unique_ptr<backends::Backend> backend;
  // The backend behind it, for nodes it does not take: its own fallback, or
  // the reference (none when the chosen backend is the reference).
  std::unique_ptr<backends::Backend> fallback;
  std::vector<std::shared_ptr<const plugins::PluginLibrary>> plugin_libraries;  // the ones asked
  std::vector<std::unique_ptr<backends::Backend>> plugins;
  // Who is asked for each node, in order: the plugins, the backend, its fallback.
  std::vector<const backends::Backend*> order;
  std::shared_ptr<const cache::Store> store;         // null: no cache
  std::string cache_refused;                         // why a configured cache is not used
  std::shared_ptr<const cache::RemoteStore> remote;  // null: no remote tier
  mutable std::atomic<bool> store_writable{true};
  // Recursive: a logger may run a model, whose compile logs.
  mutable std::recursive_mutex log_mutex;

  // Holds what this thread logs for its lifetime (a specialization's
  // compile) and logs it afterwards: a logger may run models, and a run of
  // the specialization being compiled would wait for itself.
  class HoldMessages {
   public:
    HoldMessages() : outermost_(!held_) {
      if (outermost_) held_ = &messages_;
    }
    ~HoldMessages() {
      if (!outermost_) return;
      held_ = nullptr;
      for (const auto& m : messages_) {
        try {
          m.runtime->log(m.level, m.text);
        } catch (...) {  // a logger that throws cannot throw out of a destructor
        }
      }
    }
    HoldMessages(const HoldMessages&) = delete;
    HoldMessages& operator=(const HoldMessages&) = delete;
    // Whether `message` was held.
    static bool hold(const Impl* runtime, LogLevel level, const std::string& message) {
      if (held_) held_->push_back({runtime, level, message});
      return held_;
    }

   private:
    struct Message {
      const Impl* runtime;
      LogLevel level;
      std::string text;
    };
    bool outermost_;
    std::vector<Message> messages_;
    static inline thread_local std::vector<Message>* held_ = nullptr;
  };

  void log(LogLevel level, const std::string& message) const {
    if (level == LogLevel::Off || level < options.log_level) return;
    if (HoldMessages::hold(this, level, message)) return;
    std::lock_guard<std::recursive_mutex> lock(log_mutex);
    if (options.logger) {
      options.logger(level, message);
      return;
    }
    static const char* names[] = {"debug", "info", "warning", "error"};
    std::cerr << "kiln " << names[int(level)] << ": " << message << "\n";
  }

  // Saves a specialization's executable and puts it in the store, on the
  // writer's thread; says what came of it through job.settle.
  void write_entry(const CacheWriter::Job& job) const;

  // Last, so that it is destroyed first: its thread uses the members above.
  mutable CacheWriter writer{[this](const CacheWriter::Job& job) { write_entry(job); }};
};

}  // namespace kiln
