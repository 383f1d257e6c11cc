#pragma once
// The thread that makes and writes a Runtime's cache entries, so that
// serialising the program (3-6 ms for a convolutional network, 5-10% of its
// compile) and writing and flushing the files (about as long as compiling,
// for a large model) stay off the first run. It starts on the first job and
// finishes the queue before it is destroyed.
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "backends/backend.hpp"
#include "cache/cache_key.hpp"
#include "cache/store.hpp"
#include "kiln/kiln.hpp"

namespace kiln {

class CacheWriter {
 public:
  struct Job {
    cache::Key key;
    std::shared_ptr<const backends::Executable> executable;
    double compile_ms = 0;
    // Upload what is stored to the remote tier too.
    bool push = false;
    // Instead of an executable: an entry fetched from the remote tier, to store as it is.
    std::shared_ptr<const cache::RawEntry> fetched;
    // Held until the job is done (the lease of a host compiling for its fleet).
    std::shared_ptr<void> hold;
    // Told when nothing could be stored: the outcome (NotCached, or Off for
    // a directory that cannot be written) and why.
    std::function<void(CacheOutcome, const std::string&)> settle;
  };

  explicit CacheWriter(std::function<void(const Job&)> write) : write_(std::move(write)) {}
  ~CacheWriter();
  CacheWriter(const CacheWriter&) = delete;
  CacheWriter& operator=(const CacheWriter&) = delete;

  void enqueue(Job job);
  // Until every job enqueued so far is written.
  void wait() const;

 private:
  void work();

  std::function<void(const Job&)> write_;
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  std::deque<Job> queue_;
  int in_flight_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace kiln
