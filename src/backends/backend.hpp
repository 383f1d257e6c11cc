#pragma once
// The contract between the runtime and a backend. A backend says which nodes
// it can take and compiles a specialization (a graph with every input shape
// fixed) into an Executable that the runtime calls for each run. The plugin
// C ABI of a later issue wraps exactly this shape: claim, compile, run.
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/ir/graph.hpp"
#include "runtime/ir/shape_inference.hpp"

namespace kiln::backends {

// What a compiled specialization is made of, for stats.
struct ExecutableStats {
  int64_t nodes = 0;           // nodes of the specialized graph
  int64_t compiled_nodes = 0;  // nodes the backend compiled itself
  int64_t fallback_nodes = 0;  // nodes it hands to the reference kernels
  int64_t arena_bytes = 0;
  int64_t intermediate_bytes = 0;
};

// A compiled specialization as the on-disk cache stores it. The cache writes
// and checks the files; what is inside is the backend's own business.
struct Artifact {
  std::string object;                                   // relocatable object code
  std::string program;                                  // everything else the backend needs to load it again
  std::vector<std::pair<const void*, size_t>> weights;  // one file, each chunk at its offset
  std::vector<int64_t> weight_offsets;                  // per chunk, multiples of 64
  int64_t weights_bytes = 0;
  std::string summary;  // JSON object for the manifest, for people reading it
};

// A check of a loaded artifact that the loader may run beside its own work,
// on its own threads (the cache's checksum of the weights: 8 ms of
// resnet50's warm start). It runs once, in whichever call comes first; the
// runtime calls it after every load and before any run.
class LoadCheck {
 public:
  explicit LoadCheck(std::function<std::string()> check) : check_(std::move(check)) {}
  // What is wrong, "" if nothing.
  const std::string& run() {
    std::call_once(once_, [this] { problem_ = check_(); });
    return problem_;
  }

 private:
  std::function<std::string()> check_;
  std::once_flag once_;
  std::string problem_;
};

// The same, read back: views into mapped files kept alive by `keep_alive`.
struct LoadedArtifact {
  std::string_view object;
  std::string_view program;
  const char* weights = nullptr;  // 64-byte aligned
  size_t weights_bytes = 0;
  std::shared_ptr<void> keep_alive;
  std::shared_ptr<LoadCheck> check;  // may be null
};

// `artifact` as the cache would hand it back, but from memory: its files
// copied into one 64-byte aligned block that the result keeps alive. For a
// save-then-load round trip without a cache directory.
LoadedArtifact copy_to_memory(const Artifact& artifact);

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
  // The same with values of any kind (sequences and optionals too). By
  // default the tensors go to run(), and any other value is an error: only
  // backends that run_any_value() are given graphs with such values.
  virtual std::vector<ir::Value> run_values(const std::map<std::string, ir::Value>& inputs) const;
  // What Backend::load needs to make this executable again in another
  // process. The artifact may point into the executable, which must outlive
  // it. Throws ir::Error(Unsupported) saying why it cannot be saved.
  virtual Artifact save() const;
};

// A Runtime's threads as a backend that does not own them uses them (a
// plugin): its runs take their turn with the owner's, and its loops run on
// the owner's threads, so the Runtime never has more busy threads than its
// budget.
class HostThreads {
 public:
  virtual ~HostThreads() = default;
  virtual int count() const = 0;
  // Runs `f` as a run of the Runtime, in turn with every other (at once if
  // called from inside a run).
  virtual void run_in_turn(const std::function<void()>& f) = 0;
  // body(begin, end) over pieces of [0, n), on the Runtime's threads.
  virtual void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& body) = 0;
};

struct CompileOptions {
  int threads = 1;
  // The cpu backend's kernel family: "native" (oneDNN) or "portable" (the
  // kernel library compiled into the object itself).
  std::string kernels = "native";
  // The cpu backend's tuning, for tests and experiments; each enters its
  // identity (so the cache key). Unset: KILN_WINOGRAD,
  // KILN_CHANNEL_BLOCKS_FROM and KILN_IMPLEMENTATION_TRIALS, else the
  // defaults (the README's table).
  std::optional<bool> winograd;
  std::optional<int64_t> channel_blocks_from;
  std::optional<std::string> implementation_trials;  // off, timed or other
  // Convolutions and products in "fp32" or "bf16" (RuntimeOptions::precision).
  std::string precision = "fp32";
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Identifies the code a backend produces, for cache keys.
  virtual std::string version() const = 0;
  // Whether the backend compiles this operator itself (the operator suites
  // run a case on every backend that supports its operators).
  virtual bool supports(const ir::Node& node) const = 0;
  // Whether it will run `node` in this specialization, by any means of its
  // own: the partitioner's question. By default, what it supports.
  virtual bool takes(const ir::Node& node, const ir::Specialization& spec) const {
    (void)spec;
    return supports(node);
  }
  // Which nodes of `graph` it takes, in groups that it compiles together
  // where the graph allows: per node, a group number, or -1 for a node it
  // leaves. By default every node it takes(), in group 0.
  virtual std::vector<int64_t> claim(const ir::Graph& graph, const ir::Specialization& spec) const;
  // Whether it runs nodes whose values are not plain tensors of numbers
  // (sequences, optionals, strings). The partitioner gives such nodes only
  // to backends that do: the reference kernels' (reference, interpreter).
  virtual bool runs_any_value() const { return false; }
  // Whether a part it fails to compile may go to the backends after it
  // instead of failing the compile (a plugin's may; the built-ins' errors
  // are the model's).
  virtual bool may_decline() const { return false; }
  // Its threads for the backends that run beside it (null: it has none to share).
  virtual std::shared_ptr<HostThreads> host_threads() const { return nullptr; }
  // The backend for the nodes this one does not take, sharing its threads
  // where it can: by default the reference backend. Null: none.
  virtual std::unique_ptr<Backend> fallback() const;
  // `spec` holds the concrete shape of every value. Throws ir::Error.
  virtual std::unique_ptr<Executable> compile(std::shared_ptr<const ir::Graph> graph, const ir::Specialization& spec,
                                              const CompileOptions& options) const = 0;
  // An executable from an artifact that save() made for the same key (the
  // cache checked that). `graph` is the model's. No optimisation or code
  // generation may run. Throws ir::Error (InvalidModel if the artifact is
  // inconsistent, Unsupported if this backend does not load artifacts).
  virtual std::unique_ptr<Executable> load(const LoadedArtifact& artifact, std::shared_ptr<const ir::Graph> graph,
                                           const CompileOptions& options) const;
  // Everything about this backend and machine that changes the code it
  // produces (version, target, CPU and features, libraries): part of cache keys.
  virtual std::string identity(const CompileOptions& options) const;
  // Why this backend cannot compute in `precision` here, or "" if it can.
  virtual std::string refuses_precision(const std::string& precision) const {
    return precision == "fp32" ? "" : name() + " computes in fp32 only";
  }
  // Codegen runs so far (a warm cache keeps this unchanged).
  virtual int64_t codegen_runs() const { return 0; }
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
