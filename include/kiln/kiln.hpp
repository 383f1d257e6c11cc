#pragma once
// Kiln: load an ONNX model and run it.
//
//   kiln::Runtime runtime;                                  // options: threads, cache dir, logging
//   kiln::Model model = kiln::Model::load(runtime, "net.onnx");
//   kiln::Tensor x = kiln::Tensor::view(kiln::DType::Float32, {1, 64}, pixels);
//   std::vector<kiln::Tensor> y = model.run({{"input", x}});
//
// Every failure throws kiln::Error whose message says what, where (model,
// node, input name) and what was expected. A Model may be run from several
// threads at once (see Model::run).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

// libkiln is built with hidden visibility and exports only what this header
// and kiln.h declare (its typeinfo too: kiln::Error is caught by callers).
#pragma GCC visibility push(default)

namespace kiln {

// Element types; the values equal ONNX's TensorProto.DataType. A String
// tensor's elements are std::string objects (data_as<std::string>()); only
// the operators on strings (StringNormalizer, Cast, CastLike, Identity...)
// take them, on the reference kernels.
enum class DType : int32_t {
  Float32 = 1,
  UInt8 = 2,
  Int8 = 3,
  UInt16 = 4,
  Int16 = 5,
  Int32 = 6,
  Int64 = 7,
  String = 8,
  Bool = 9,
  Float16 = 10,
  Float64 = 11,
  UInt32 = 12,
  UInt64 = 13,
  BFloat16 = 16,
};
const char* dtype_name(DType t);  // "float32"
size_t dtype_size(DType t);       // bytes per element (String: sizeof(std::string))

enum class ErrorCode : int32_t {
  InvalidArgument = 1,  // wrong input from the caller: name, dtype, shape
  InvalidModel = 2,     // malformed or inconsistent model file
  Unsupported = 3,      // valid ONNX that Kiln does not implement
  Io = 4,               // file system
  Internal = 5,
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

using Shape = std::vector<int64_t>;
std::string shape_to_string(const Shape& s);  // "1x3x224x224"

// A dense row-major tensor: either owning (allocated, 64-byte aligned) or a
// view of memory the caller owns and keeps alive. Copies share the data.
class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, Shape shape);  // owning, zero-filled
  static Tensor view(DType dtype, Shape shape, void* data);
  // Shares ownership of `owner`, which keeps `data` alive.
  static Tensor view(DType dtype, Shape shape, void* data, std::shared_ptr<void> owner);
  template <typename T>
  static Tensor from_vector(DType dtype, Shape shape, const std::vector<T>& values);

  bool defined() const { return data_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const;
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  void* data() { return data_; }
  const void* data() const { return data_; }
  // Typed access; throws if sizeof(T) does not match the dtype.
  template <typename T>
  T* data_as() {
    check_size(sizeof(T));
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data_as() const {
    check_size(sizeof(T));
    return static_cast<const T*>(data_);
  }
  const std::shared_ptr<void>& owner() const { return owner_; }

 private:
  void check_size(size_t element_size) const;
  DType dtype_ = DType::Float32;
  Shape shape_;
  std::shared_ptr<void> owner_;
  void* data_ = nullptr;
};

// What a model's input or output is: a tensor (nearly always), a sequence of
// tensors, or an optional holding a tensor or a sequence, or nothing.
enum class ValueKind : int32_t { Tensor = 0, Sequence = 1, Optional = 2 };
const char* value_kind_name(ValueKind k);  // "tensor", "sequence", "optional"

// A value for Model::run_values: a tensor, a sequence of tensors, or an
// optional. Copies share the tensors' data, as Tensor's do.
class Value {
 public:
  Value() = default;                                    // an undefined tensor
  Value(Tensor tensor) : tensor_(std::move(tensor)) {}  // NOLINT: a tensor is a value
  static Value sequence(std::vector<Tensor> tensors);
  static Value optional(Value element);  // holding a tensor or a sequence
  static Value empty_optional(ValueKind element_kind = ValueKind::Tensor);

  ValueKind kind() const { return kind_; }
  // Each of these throws InvalidArgument unless the value is of that kind.
  const Tensor& tensor() const;
  const std::vector<Tensor>& tensors() const;  // a sequence's
  bool has_element() const;                    // an optional's
  const Value& element() const;                // a non-empty optional's
  ValueKind element_kind() const;              // an optional's: Tensor or Sequence

 private:
  ValueKind kind_ = ValueKind::Tensor;
  Tensor tensor_;
  std::vector<Tensor> tensors_;
  std::shared_ptr<const Value> element_;
  ValueKind element_kind_ = ValueKind::Tensor;
};

// One dimension of a declared shape: a size, a symbol ("batch") or unknown.
struct Dim {
  int64_t value = -1;  // -1 when not a fixed size
  std::string symbol;  // set for named dynamic dims
  bool is_fixed() const { return value >= 0; }
};

struct TensorInfo {
  std::string name;
  DType dtype = DType::Float32;
  std::vector<Dim> shape;
  bool rank_known = true;
  bool has_default = false;          // an initializer backs it: the input may be omitted
  std::string shape_string() const;  // "[batch,3,224,224]"
  // A sequence's or an optional's dtype and shape are those of its tensors.
  // Models with values that are not tensors run through Model::run_values.
  ValueKind kind = ValueKind::Tensor;
  ValueKind element_kind = ValueKind::Tensor;  // an optional's: Tensor or Sequence
};

enum class LogLevel { Debug = 0, Info = 1, Warning = 2, Error = 3, Off = 4 };

struct RuntimeOptions {
  // Which backend compiles specializations: "cpu" (native code) or
  // "reference" (the interpreter every backend is tested against). The name
  // of a loaded plugin forces that plugin: it takes every node it can, the
  // reference interpreter the rest.
  std::string backend = "cpu";
  // Backend plugins (include/kiln/backend.h): shared libraries, or
  // directories of them (*.so), besides those of $KILN_PLUGIN_PATH (the same,
  // colon-separated). Each node goes to the first plugin, by priority, that
  // takes it; the backend takes the rest. A plugin named here that cannot be
  // loaded is an error; one from the environment, a warning.
  std::vector<std::string> plugins;
  // Plugins (by name) that this Runtime loads but never asks.
  std::vector<std::string> excluded_plugins;
  int threads = 0;  // thread budget, 0: every usable core. The cpu backend never has more
                    // busy threads than this; the reference backend runs on one.
  // The cpu backend's kernels: "native" (oneDNN primitives, the fastest on
  // this machine) or "portable" (Kiln's own kernel library compiled into the
  // generated code: what bundles use). "" = $KILN_KERNELS, else "native".
  std::string kernels;
  // The on-disk cache of compiled specializations: a new process loads what
  // any earlier one compiled instead of compiling it again. Off if `cache`
  // is false or the environment says KILN_CACHE=off. A directory that cannot
  // be written, or that Kiln does not trust (README "What Kiln trusts"),
  // costs one warning and compiling in memory, never an error.
  bool cache = true;
  std::string cache_dir;        // "" = $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln
  int64_t cache_max_bytes = 0;  // 0 = $KILN_CACHE_MAX_BYTES, else 1 GiB; least recently used entries go first
  // A shared cache's key: a file of 16 to 4096 secret bytes. Without one the
  // cache directory must be private to this user; with one it may be shared
  // (e.g. by a group), and only entries made with the same key are loaded.
  std::string cache_key_file;  // "" = $KILN_CACHE_KEY_FILE
  // A fleet's shared tier behind the cache directory (docs/cache.md#a-fleets-cache-on-redis):
  // "redis://HOST[:PORT][/DB]" or "unix://PATH[?db=N]"; "" = $KILN_REMOTE_CACHE, else none.
  // It needs the cache's key (cache_key_file): only entries tagged with it
  // are loaded. On a local miss an entry is fetched, checked and stored
  // locally; what this host compiles is uploaded; while another host
  // compiles the same specialization, this one waits for it (at most
  // remote_cache_wait_ms). A store that fails costs one warning, never a run.
  std::string remote_cache;
  bool remote_cache_read_only = false;  // fetch, never upload (canaries, CI); also $KILN_REMOTE_CACHE_READ_ONLY=1
  int remote_cache_timeout_ms = 0;      // bound on every call to the store; 0 = 2000
  int remote_cache_wait_ms = 0;         // bound on waiting for another host's compile; 0 = 60000
  int remote_cache_lease_ms = 0;        // a compiling host's lease, after which another may take over; 0 = 30000
  // Each 0 above: $KILN_REMOTE_CACHE_TIMEOUT_MS, _WAIT_MS, _LEASE_MS, else the default.
  // The precision of convolutions and matrix products: "fp32", or "bf16"
  // (bfloat16 weights and activations, float32 accumulation, everything
  // else in float32; OpenVINO's inference precision hint). "" = fp32.
  // bf16 is refused with the reason where it cannot run: oneDNN 2.6 has no
  // bf16 kernels for CPUs without AVX-512, and Kiln does not compile bf16
  // yet on those with them (docs/cpu-backend.md#quantized-models).
  std::string precision;
  LogLevel log_level = LogLevel::Warning;
  // Receives every message at or above log_level; default: stderr. Called
  // from the thread that logs, never from two threads at once; it may run
  // models. What a compile logs comes once the compile is over.
  std::function<void(LogLevel, const std::string&)> logger;
};

// Where a node of a specialization runs (Model::placement).
struct NodePlacement {
  std::string node;     // its name
  std::string op_type;  // "Conv", or "domain.Op" outside ONNX's operators
  std::string backend;  // "cpu", "interpreter", "reference" or a plugin's name
};

// A loaded backend plugin.
struct PluginInfo {
  std::string name;
  std::string path;
  std::string identity;  // what enters cache keys: its version, libraries, target
  int abi_version = 0;
  int priority = 0;
  std::vector<std::string> operators;  // what it may take ("Conv", ...)
};

// What the on-disk cache did for a specialization. Entries are written in
// the background: a Miss becomes NotCached (or Off) if storing it fails, and
// is final after Runtime::wait_for_cache().
enum class CacheOutcome {
  Off,        // no cache (turned off, or its directory is unusable)
  Hit,        // loaded from the cache: no compilation at all
  Miss,       // compiled, then stored
  Rebuild,    // the cache held an unusable entry (corrupt, truncated, foreign): compiled and replaced
  NotCached,  // compiled; this specialization cannot be cached (cache_note says why)
  RemoteHit,  // fetched from the remote cache (and stored locally): no compilation at all
};
const char* cache_outcome_name(CacheOutcome o);  // "hit", "miss", ...

// One compiled specialization of a model: the input shapes it was compiled
// for, what the compile cost and how often it ran.
struct SpecializationStats {
  std::string key;  // "image:float32:1x1x8x8"
  // What runs it: "cpu", or "cpu+interpreter" when nodes the cpu backend
  // cannot compile (their shapes depend on the data) run on its interpreter.
  std::string backend;
  int64_t parts = 1;               // pieces of the graph that run one after another, each on one backend
  int64_t nodes = 0;               // nodes left after the graph passes (constants folded, BatchNormalization fused...)
  int64_t compiled_nodes = 0;      // of those, nodes the backend compiled (cpu: oneDNN primitives, generated loops)
  int64_t fallback_nodes = 0;      // nodes run by their reference kernel, in a compiled part or by the interpreter
  int64_t arena_bytes = 0;         // scratch memory per run in flight
  int64_t intermediate_bytes = 0;  // what the intermediates would take without reuse
  double compile_ms = 0;           // compiling, or loading from the cache on a hit
  int64_t runs = 0;
  CacheOutcome cache = CacheOutcome::Off;
  std::string cache_key;   // the entry's name in the cache directory
  std::string cache_note;  // why an entry was rebuilt or why nothing was stored
  double store_ms = 0;     // handing the entry to the cache on the run's path (it is made and written in the background)
};

class Runtime {
 public:
  explicit Runtime(RuntimeOptions options = {});
  const RuntimeOptions& options() const;
  int threads() const;            // the resolved thread count
  std::string cache_dir() const;  // the resolved cache directory, "" when there is no cache
  // Modules the backend and the plugins have optimised and compiled so far,
  // in this Runtime (a plugin's count is its process-wide compile_count).
  // Cache hits add nothing.
  int64_t codegen_runs() const;
  // The plugins this Runtime asks, in order.
  std::vector<PluginInfo> plugins() const;
  // Compiled specializations are written to the cache in the background;
  // this blocks until every pending entry is stored (the Runtime's
  // destructor does the same).
  void wait_for_cache() const;
  void log(LogLevel level, const std::string& message) const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
  friend class Model;
  friend class Cache;
};

// One entry of the on-disk cache.
struct CacheEntry {
  std::string key;          // the entry's directory name
  std::string model;        // the model file it was compiled from, when it was
  std::string shapes;       // the specialization key: "image:float32:1x3x224x224"
  std::string backend;      // backend, version, options, target and CPU
  std::string created;      // ISO 8601, UTC
  int64_t bytes = 0;        // on disk
  int64_t last_use = 0;     // Unix time
  std::string problem;      // "" if the entry is usable
  std::string not_removed;  // Cache::verify(): why an unusable entry is still there ("" once removed)
};

// The cache directory a Runtime uses, for inspection and upkeep. Safe while
// other processes use the same directory: entries in use are never removed.
// Works only on a directory that Kiln made (it carries Kiln's CACHEDIR.TAG)
// and never follows a symbolic link inside it.
class Cache {
 public:
  // Throws InvalidArgument if the runtime has no cache, and Io naming the
  // reason if its directory is not a Kiln cache or is not trusted.
  explicit Cache(const Runtime& runtime);
  const std::string& dir() const;
  // With `check_files`, every file's digest is verified too.
  std::vector<CacheEntry> list(bool check_files = false) const;
  // Checks every entry (manifest, tag, sizes, digests) and every remembered
  // model hash, and removes the unusable ones.
  struct VerifyResult {
    std::vector<CacheEntry> entries;  // unusable; removed unless not_removed says why not
    std::vector<std::string> hashes;  // remembered hashes removed: "NAME: what was wrong"
    bool all_removed() const;
  };
  VerifyResult verify() const;
  // Removes least recently used entries until at most `max_bytes` remain; returns how many went.
  int64_t prune(int64_t max_bytes) const;
  // Removes every entry not in use; returns how many went.
  int64_t clear() const;

  // The remote tier (RuntimeOptions::remote_cache). Each throws
  // InvalidArgument if the runtime has none, and Io if the store fails.
  struct Remote {
    std::string url;
    std::vector<CacheEntry> entries;  // bytes: what a host fetches; last_use is 0
    int64_t refused = 0;              // entries hosts of the fleet refused (they did not verify) since the store began
  };
  // With `check_files`, every entry is fetched and checked whole; one that
  // does not verify is then removed (and counted as refused).
  Remote remote(bool check_files = false) const;
  // Removes remote entries whose manifest does not verify or is another
  // Kiln build's, and chunks no entry refers to (left by an upload that
  // died); returns how many entries and chunks went.
  int64_t prune_remote() const;
  // Uploads every usable local entry the remote tier lacks; returns how many.
  int64_t push() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

class Model {
 public:
  // The file stays mapped: weights are read from it when a specialization
  // is first compiled. Replace model files by renaming, not in place.
  static Model load(const Runtime& runtime, const std::string& path);
  struct LoadOptions {
    // Its specializations are cached on this host only, never uploaded to a
    // remote cache (models loaded from memory never are either).
    bool private_weights = false;
  };
  static Model load(const Runtime& runtime, const std::string& path, const LoadOptions& options);
  // `external_data_dir` is where external weight files live, if the model has any.
  // Not cached (see MemoryLoadOptions::cache).
  static Model load_from_memory(const Runtime& runtime, const void* data, size_t size, const std::string& external_data_dir = "");
  struct MemoryLoadOptions {
    std::string external_data_dir;
    // A model that an application holds in memory is often one it decrypted:
    // its specializations go to the on-disk cache, which keeps the processed
    // weights in the clear, only if this is set.
    bool cache = false;
  };
  static Model load_from_memory(const Runtime& runtime, const void* data, size_t size, const MemoryLoadOptions& options);

  const std::vector<TensorInfo>& inputs() const;  // inputs with defaults come last
  const std::vector<TensorInfo>& outputs() const;
  int64_t opset() const;                             // the ai.onnx opset imported
  std::string producer() const;                      // "pytorch 2.1"
  std::string source() const;                        // path, or "<memory>"
  std::map<std::string, int> op_histogram() const;   // op type -> node count, subgraphs included
  std::vector<std::string> unsupported_ops() const;  // op types no backend can run

  // Runs the model. Inputs by name; inputs with defaults may be omitted.
  // Outputs come in the order of outputs(). The first run with new input
  // shapes compiles that specialization (once, even if several threads ask
  // at the same time); later runs with those shapes reuse it.
  //
  // Any thread may call run, at the same time as others. The cpu backend
  // executes the runs of all models of one Runtime on one thread of the
  // Runtime's own, one run at a time in the order the calls arrive, each
  // with the whole thread budget, while the calling thread waits: a run is
  // as fast from whichever thread calls it, and two calls never add up to
  // more busy threads than the budget. A run takes its specialization's
  // scratch arena when its turn comes, so runs waiting for their turn hold
  // no memory. Compiles run on the calling threads, several at a time.
  //
  // A model whose inputs or outputs are sequences or optionals runs through
  // run_values only: run() refuses it with InvalidArgument.
  std::vector<Tensor> run(const std::vector<std::pair<std::string, Tensor>>& inputs) const;
  // Runs any model, with values of the kinds that inputs() and outputs()
  // declare: tensors, sequences of tensors, optionals (empty ones too). A
  // value of another kind is an InvalidArgument error naming the input. The
  // specialization is chosen by the tensor inputs' shapes; the nodes that
  // touch sequences, optionals or strings run on the reference kernels.
  std::vector<Value> run_values(const std::vector<std::pair<std::string, Value>>& inputs) const;
  // The same, writing into the caller's buffers (one per output, in the
  // order of outputs(), each of the dtype and shape this run produces): a
  // compiled specialization then allocates nothing at all. A buffer of the
  // wrong dtype or shape is an InvalidArgument error naming the output.
  void run(const std::vector<std::pair<std::string, Tensor>>& inputs, std::vector<Tensor>& outputs) const;

  // Compiles (or loads from the cache) the specialization for these input
  // shapes without running it, e.g. to warm the cache. Inputs with defaults
  // may be left out. Returns its stats.
  SpecializationStats prepare(const std::vector<std::pair<std::string, Shape>>& shapes) const;
  // Which backend takes each node for these input shapes (after the graph
  // passes, in the order the parts run), compiling nothing: what `kiln
  // inspect --dim`/`--shape` prints. Inputs with defaults may be left out.
  std::vector<NodePlacement> placement(const std::vector<std::pair<std::string, Shape>>& shapes) const;
  // Every specialization compiled so far, in the order they were made.
  std::vector<SpecializationStats> specializations() const;

  // Freezes the model into a bundle (what `kiln aot-freeze` does): see
  // FreezeOptions. Throws Error: InvalidArgument for bad options,
  // Unsupported naming the nodes a bundle cannot run, Io if the files cannot
  // be written.
  struct FreezeOptions;
  struct FreezeResult;
  FreezeResult freeze(const FreezeOptions& options) const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// A bundle: DIR/NAME.h, DIR/NAME.o (or libNAME.a), DIR/NAME.weights.bin
// (unless embedded) and DIR/README.md, linking into a C, C++ or Rust program
// with nothing but libc and libm, or with libdnnl too for native kernels
// (README "Bundles").
struct Model::FreezeOptions {
  std::string output_dir;
  std::string name;                                   // C identifier; "" = the model file's stem
  std::vector<std::pair<std::string, Shape>> shapes;  // inputs' shapes (the batch axis of a batched input is replaced)
  std::map<std::string, int64_t> dims;                // values of symbolic dims other than the batch
  std::vector<int64_t> batch_sizes{1};                // compiled batch sizes; run() takes any
  // Inputs and outputs whose batch is not axis 0, e.g. {"h0", 1} for a
  // recurrent state [directions, batch, hidden]. Other inputs are batched
  // on axis 0 if it is symbolic, other outputs if their axis 0 follows it.
  std::map<std::string, int64_t> batch_axes;
  // Inputs fixed to these values: the bundle does not take them, and what
  // depends on them only is computed while freezing (an If on a sample
  // rate keeps only the branch taken).
  std::vector<std::pair<std::string, Tensor>> constants;
  std::string target;  // LLVM triple; "" = this machine
  // Target CPU, e.g. "x86-64-v3", or several, best first, for a bundle with
  // a version of the code per CPU: "host,x86-64-v3,x86-64-v2" (NAME_create
  // runs the first the CPU fits). "" = this CPU (host target) or generic;
  // "host" = this CPU.
  std::string cpu;
  bool embed_weights = false;        // weights inside the object instead of a file
  std::string kernels = "portable";  // "portable" (libc only) or "native" (oneDNN: links libdnnl, this machine only)
  std::string format = "object";     // "object" (NAME.o) or "static" (libNAME.a)
  std::function<void(const std::string&)> progress;  // one line per stage of a long freeze
};

struct Model::FreezeResult {
  std::string name, target, cpu;
  std::vector<int64_t> batch_sizes;
  std::vector<std::string> files;
  int64_t object_bytes = 0;
  int64_t weights_bytes = 0;
  double seconds = 0;
  // The compiled object is cached like a specialization (hit: no compiling);
  // Off when the Runtime has no cache or it cannot be written (cache_note says why).
  CacheOutcome cache = CacheOutcome::Off;
  std::string cache_key;
  std::string cache_note;
};

template <typename T>
Tensor Tensor::from_vector(DType dtype, Shape shape, const std::vector<T>& values) {
  Tensor t(dtype, std::move(shape));
  if (sizeof(T) != dtype_size(dtype) || values.size() != size_t(t.numel()))
    throw Error(ErrorCode::InvalidArgument, "Tensor::from_vector: " + std::to_string(values.size()) + " values of " +
                                                std::to_string(sizeof(T)) + " bytes do not fill a " + dtype_name(dtype) +
                                                " tensor of shape " + shape_to_string(t.shape()));
  T* out = t.data_as<T>();
  for (size_t i = 0; i < values.size(); ++i) out[i] = values[i];
  return t;
}

}  // namespace kiln

#pragma GCC visibility pop
