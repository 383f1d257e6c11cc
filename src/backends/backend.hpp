#pragma once
// The contract between the runtime and a backend. A backend says which nodes
// it can take and compiles a specialization (a graph with every input shape
// fixed) into an Executable that the runtime calls for each run. The plugin
// C ABI of a later issue wraps exactly this shape: claim, compile, run.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/ir/graph.hpp"
#include "runtime/ir/shape_inference.hpp"

namespace kiln::backends {

// What a compiled specialization is made of, for stats.
struct ExecutableStats {
  int64_t compiled_nodes = 0;  // nodes the backend compiled itself
  int64_t fallback_nodes = 0;  // nodes it hands to the reference kernels
  int64_t arena_bytes = 0;
  int64_t intermediate_bytes = 0;
};

// One compiled specialization. run() must be safe to call from several
// threads at once.
class Executable {
 public:
  virtual ~Executable() = default;
  virtual ExecutableStats stats() const = 0;
  // Inputs by name (every required input, optionally inputs with defaults);
  // outputs in the order of the graph's outputs.
  virtual std::vector<ir::Tensor> run(const std::map<std::string, ir::Tensor>& inputs) const = 0;
  // The same into the caller's tensors, which must have the dtype and shape
  // of each output (else InvalidArgument naming it). By default: run, then copy.
  virtual void run_into(const std::map<std::string, ir::Tensor>& inputs, std::vector<ir::Tensor>& outputs) const;
};

struct CompileOptions {
  int threads = 1;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Identifies the code a backend produces, for cache keys.
  virtual std::string version() const = 0;
  virtual bool supports(const ir::Node& node) const = 0;
  // `spec` holds the concrete shape of every value. Throws ir::Error.
  virtual std::unique_ptr<Executable> compile(std::shared_ptr<const ir::Graph> graph, const ir::Specialization& spec,
                                              const CompileOptions& options) const = 0;
};

// Fails with InvalidArgument unless each of `outputs` has the dtype and
// dims of the corresponding entry of `want`.
void check_output_buffers(const std::vector<ir::Tensor>& outputs, const std::vector<ir::DType>& dtypes,
                          const std::vector<ir::Dims>& dims, const std::vector<std::string>& names);

// The backends built into libkiln, by name ("cpu", "reference"); nullptr if
// unknown. `threads` is the Runtime's thread budget.
std::unique_ptr<Backend> make_backend(const std::string& name, int threads);
std::vector<std::string> backend_names();

}  // namespace kiln::backends
