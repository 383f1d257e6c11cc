#include "runtime/cache_writer.hpp"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace kiln {

CacheWriter::~CacheWriter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void CacheWriter::enqueue(Job job) {
  std::lock_guard<std::mutex> lock(mutex_);
  queue_.push_back(std::move(job));
  ++in_flight_;
  if (!thread_.joinable()) thread_ = std::thread([this] { work(); });
  cv_.notify_all();
}

void CacheWriter::wait() const {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return in_flight_ == 0; });
}

void CacheWriter::work() {
  // The lowest priority: the first runs after a compile, which this thread
  // would otherwise slow by copying the weights (resnet50's first run took
  // twice as long), come first. Linux priorities are per thread.
  ::setpriority(PRIO_PROCESS, pid_t(::syscall(SYS_gettid)), 19);
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;
    Job job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    write_(job);
    job = Job();  // the executable goes before the count says the job is done
    lock.lock();
    --in_flight_;
    cv_.notify_all();
  }
}

}  // namespace kiln
