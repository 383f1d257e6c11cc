#pragma once
// What a Runtime holds: its backend, its thread budget, its cache and the
// thread that writes cache entries. Internal: shared by the files that
// implement the public API (runtime.cpp, cache_api.cpp).
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend.hpp"
#include "cache/cache_key.hpp"
#include "cache/store.hpp"
#include "kiln/kiln.hpp"
#include "plugins/plugin_library.hpp"
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
  std::shared_ptr<const cache::Store> store;  // null: no cache
  std::string cache_refused;                   // why a configured cache is not used
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

  // Entries are made and written by one background thread, so that
  // serialising the program (3-6 ms for a convolutional network, 5-10% of
  // its compile) and writing and flushing the files (about as long as
  // compiling, for a large model) stay off the first run. It is started on
  // the first store and drained on destruction.
  struct PendingStore {
    cache::Key key;
    std::shared_ptr<const backends::Executable> executable;
    double compile_ms = 0;
    // Told when nothing could be stored: the outcome (NotCached, or Off for
    // a directory that cannot be written) and why.
    std::function<void(CacheOutcome, const std::string&)> settle;
  };
  mutable std::mutex store_mutex;
  mutable std::condition_variable store_cv;
  mutable std::deque<PendingStore> store_queue;
  mutable int stores_in_flight = 0;
  mutable bool stopping = false;
  mutable std::thread store_thread;

  void enqueue_store(PendingStore p) const {
    std::lock_guard<std::mutex> lock(store_mutex);
    store_queue.push_back(std::move(p));
    ++stores_in_flight;
    if (!store_thread.joinable()) store_thread = std::thread([this] { write_entries(); });
    store_cv.notify_all();
  }

  void write_entries() const {
    // The lowest priority: the first runs after a compile, which this
    // thread would otherwise slow by copying the weights (resnet50's first
    // run took twice as long), come first. Linux priorities are per thread.
    ::setpriority(PRIO_PROCESS, pid_t(::syscall(SYS_gettid)), 19);
    std::unique_lock<std::mutex> lock(store_mutex);
    while (true) {
      store_cv.wait(lock, [&] { return stopping || !store_queue.empty(); });
      if (store_queue.empty()) return;
      PendingStore p = std::move(store_queue.front());
      store_queue.pop_front();
      lock.unlock();
      write_entry(p);
      p = PendingStore();
      lock.lock();
      --stores_in_flight;
      store_cv.notify_all();
    }
  }

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

  void write_entry(const PendingStore& p) const {
    backends::Artifact artifact;
    try {
      artifact = p.executable->save();
    } catch (const ir::Error& e) {
      p.settle(CacheOutcome::NotCached, e.what());  // not an error: some specializations keep no compiled code
      return;
    }
    try {
      store->put(p.key.hex, p.key.readable, artifact, p.compile_ms);
    } catch (const ir::Error& e) {
      const bool io = e.kind() == ir::ErrorKind::Io;
      if (!io || store_writable.exchange(false))
        log(LogLevel::Warning, std::string(e.what()) + (io ? "; compiling in memory only from now on" : ""));
      p.settle(io ? CacheOutcome::Off : CacheOutcome::NotCached, e.what());
    } catch (const std::exception& e) {
      log(LogLevel::Warning, std::string("cache: storing an entry failed: ") + e.what());
      p.settle(CacheOutcome::NotCached, std::string("storing the entry failed: ") + e.what());
    }
  }

  void wait_for_stores() const {
    std::unique_lock<std::mutex> lock(store_mutex);
    store_cv.wait(lock, [&] { return stores_in_flight == 0; });
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(store_mutex);
      stopping = true;
      store_cv.notify_all();
    }
    if (store_thread.joinable()) store_thread.join();
  }
};

}  // namespace kiln
