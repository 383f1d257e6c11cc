// A program as XNNPACK runs it: its static tensors made, its subgraph
// defined and made into one XNNPACK runtime. A runtime holds the buffers of
// one run, so runs of the same compiled partition take turns (the host
// already runs a Runtime's runs in turn); a second runtime would need a
// second copy of the packed weights.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <xnnpack.h>

#include "graph.hpp"
#include "program.hpp"
#include "thread_pool.hpp"

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
  Program program_;
  std::string blob_;
  // Per tensor, static tensors XNNPACK reads when it runs (filters and
  // biases are packed into the runtime and freed once it is made).
  std::vector<Buffer> statics_;
  std::vector<uint32_t> externals_;  // tensors the host's buffers feed or receive, in external id order
  std::vector<Buffer> scratch_;      // per external: NHWC copies, and inputs XNNPACK could read past
  std::vector<size_t> bytes_;        // per external
  std::mutex mutex_;                 // one run at a time: everything below
  pthreadpool pool_;
  xnn_runtime_t runtime_ = nullptr;
  std::vector<void*> bound_;  // the buffers of the last xnn_setup_runtime
};

}  // namespace kiln_xnnpack
