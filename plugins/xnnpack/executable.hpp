// A program as XNNPACK runs it: its static tensors made, its subgraph
// defined and made into XNNPACK runtimes, one per run in flight (an XNNPACK
// runtime holds the buffers of one run, so concurrent runs each take their
// own; the first is made up front, more only when runs overlap).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "graph.hpp"
#include "program.hpp"

namespace kiln_xnnpack {

// XNNPACK reads up to this many bytes past a buffer (XNN_EXTRA_BYTES).
constexpr size_t kOverread = 16;

struct Aligned {
  void operator()(void* p) const;
};
using Buffer = std::unique_ptr<float, Aligned>;
Buffer allocate(size_t bytes);  // 64-byte aligned, kOverread bytes more; throws std::bad_alloc

// Defines the program's subgraph in XNNPACK without making a runtime, to
// learn whether XNNPACK takes it (get_capability asks this of each node).
void check_definable(const Program& p, const Graph& g);

class Executable {
 public:
  // `threaded`: whether XNNPACK's pthreadpool calls reach the host's
  // threads (thread_pool.hpp); if not, runs give XNNPACK no pool.
  Executable(Program program, const Graph& partition, bool threaded);
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  void run(const void* const* inputs, size_t input_count, void* const* outputs, size_t output_count,
           const kiln_backend_threads* threads);
  const std::string& blob() const { return blob_; }

 private:
  struct Instance;
  std::unique_ptr<Instance> make_instance();

  Program program_;
  std::string blob_;
  bool threaded_;
  std::vector<Buffer> statics_;       // per tensor, static tensors only
  std::vector<uint32_t> externals_;   // tensors the host's buffers feed or receive, in external id order
  std::mutex mutex_;
  std::vector<std::unique_ptr<Instance>> idle_;
};

}  // namespace kiln_xnnpack
