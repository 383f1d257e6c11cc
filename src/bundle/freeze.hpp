#pragma once
// `kiln aot-freeze`: a model's specializations for several batch sizes,
// compiled with the portable kernels for a target machine into a bundle
// that needs nothing but libc and libm (or, with native kernels, for this
// machine into one that also links libdnnl): DIR/NAME.h, DIR/NAME.o (or
// DIR/libNAME.a), DIR/NAME.weights.bin (unless embedded), DIR/README.md.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backends/cpu/jit.hpp"
#include "runtime/ir/graph.hpp"

namespace kiln::cache {
class Store;
}  // namespace kiln::cache

namespace kiln::bundle {

struct FreezeRequest {
  std::string output_dir;
  std::string name;  // C identifier prefixing every symbol; "" = the model file's stem
  // Input shapes; a batched input's batch axis is replaced by each batch size.
  std::map<std::string, ir::Dims> shapes;
  // Inputs and outputs whose batch is not axis 0 (a recurrent state
  // [directions, batch, hidden]: 1); an input not named here is batched on
  // axis 0 if that is symbolic, an output if its axis 0 follows the batch.
  std::map<std::string, int64_t> batch_axes;
  std::map<std::string, int64_t> dims;  // values of symbolic dims other than the batch
  std::vector<int64_t> batch_sizes{1};
  std::map<std::string, ir::Tensor> constants;  // inputs fixed to these values
  std::string triple;                           // "": this machine's
  // A code version per CPU, best first (NAME_create runs the first the CPU
  // it is on fits). Empty: this CPU for this machine's triple, else generic;
  // "host": this CPU.
  std::vector<std::string> cpus;
  bool embed_weights = false;
  bool static_library = false;  // libNAME.a instead of NAME.o
  // oneDNN primitives where the JIT uses them, for this machine: the bundle
  // links libdnnl (KernelFamily::NativeBundle). Host target only.
  bool native_kernels = false;
  std::function<void(const std::string&)> progress;  // one line per stage
  // The compiled object is looked up in, and stored into, this cache (none
  // if null). A cache that cannot be written is reported through `warn`
  // and the freeze goes on.
  const cache::Store* store = nullptr;
  std::function<void(const std::string&)> warn;
};

enum class FreezeCache { Off, Hit, Miss, Rebuild };

struct FreezeResult {
  std::string name, triple;
  std::string cpu;  // the CPUs of the code versions, best first: "x86-64-v3,x86-64-v2"
  std::vector<int64_t> batch_sizes;
  std::vector<std::string> files;
  int64_t object_bytes = 0;   // NAME.o (or the archive), embedded weights included
  int64_t weights_bytes = 0;  // the weights data
  double seconds = 0;
  FreezeCache cache = FreezeCache::Off;
  std::string cache_key;
  std::string cache_note;  // why an entry was rebuilt, or why nothing was stored
};

// Throws ir::Error: InvalidArgument for a bad request (unknown input, shape,
// target or CPU, a name that is not a C identifier, native kernels for
// another target or for several CPUs), Unsupported naming the nodes the bundle's kernels cannot run, Io
// when the files cannot be written.
FreezeResult freeze(const ir::Model& model, const FreezeRequest& request);

}  // namespace kiln::bundle
