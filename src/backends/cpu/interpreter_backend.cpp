#include "backends/cpu/interpreter_backend.hpp"

#include <oneapi/dnnl/dnnl.hpp>

#include <mutex>
#include <numeric>
#include <optional>
#include <unordered_map>

#include "backends/cpu/onednn_kernel.hpp"
#include "backends/cpu/program.hpp"
#include "backends/reference/kernel_registry.hpp"
#include "backends/reference/reference_executor.hpp"
#include "runtime/ir/serialize.hpp"

namespace kiln::backends {

namespace {

using dnnl::memory;
using nlohmann::json;
using ir::Dims;
using ir::DType;
using ir::Tensor;

// The budget of the run on this thread: kernels are plain functions, and
// the interpreter sets this around each run.
thread_local cpu::ThreadBudget* t_budget = nullptr;

class BudgetScope {
 public:
  explicit BudgetScope(cpu::ThreadBudget* b) : saved_(t_budget) { t_budget = b; }
  ~BudgetScope() { t_budget = saved_; }
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

 private:
  cpu::ThreadBudget* saved_;
};

void run_reference(const char* op, ref::KernelContext& ctx) { ref::KernelRegistry::instance().find(op)(ctx); }

// dst = alpha * src x weights (+ addend), every operand described with its
// own strides (transposes are strides), run on the budget's threads. The
// addend is a post-op, not a bias: oneDNN scales the bias with alpha.
void matmul(const memory::desc& src, const void* a, const memory::desc& weights, const void* b, const memory::desc* addend,
            const void* c, const memory::desc& dst, void* out, float alpha) {
  const dnnl::engine& engine = cpu::cpu_engine();
  std::unique_lock<std::mutex> lock;
  std::optional<cpu::OmpThreads> omp;
  if (t_budget) {
    lock = std::unique_lock<std::mutex>(t_budget->running);
    omp.emplace(t_budget->threads);
  }
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (addend) {
    dnnl::post_ops ops;
    ops.append_binary(dnnl::algorithm::binary_add, *addend);
    attr.set_post_ops(ops);
  }
  // oneDNN keeps made primitives in its own cache, keyed by shapes and
  // attributes: a product seen before costs a look-up.
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, weights, dst), attr, engine);
  dnnl::stream stream(engine);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(src, engine, const_cast<void*>(a))},
                                       {DNNL_ARG_WEIGHTS, memory(weights, engine, const_cast<void*>(b))},
                                       {DNNL_ARG_DST, memory(dst, engine, out)}};
  if (addend) args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, memory(*addend, engine, const_cast<void*>(c)));
  dnnl::matmul(pd).execute(stream, args);
  stream.wait();
}

memory::desc desc(const Dims& dims, const Dims& strides) {
  return memory::desc(memory::dims(dims.begin(), dims.end()), memory::data_type::f32,
                      memory::dims(strides.begin(), strides.end()));
}

bool all_f32(const ref::KernelContext& ctx) {
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i) && ctx.input(i).dtype() != DType::Float32) return false;
  return true;
}

// Y = alpha * A' B' + C, with C broadcast along rows, columns or both. Other
// cases (beta other than 1, other dtypes, empty products) are the
// reference kernel's.
void gemm_kernel(ref::KernelContext& ctx) {
  const bool has_c = ctx.has_input(2);
  if (!all_f32(ctx) || ctx.input(0).rank() != 2 || ctx.input(1).rank() != 2 ||
      (has_c && (ctx.attr_float("beta", 1.0f) != 1.0f || ctx.input(2).rank() > 2)))
    return run_reference("Gemm", ctx);
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const bool ta = ctx.attr_int("transA", 0) != 0, tb = ctx.attr_int("transB", 0) != 0;
  const int64_t m = a.dim(ta ? 1 : 0), k = a.dim(ta ? 0 : 1), n = b.dim(tb ? 0 : 1);
  if (b.dim(tb ? 1 : 0) != k || m == 0 || n == 0 || k == 0) return run_reference("Gemm", ctx);
  Dims c_dims;
  if (has_c) {
    const Tensor& c = ctx.input(2);
    const int64_t cm = c.rank() == 2 ? c.dim(0) : 1, cn = c.rank() >= 1 ? c.dim(-1) : 1;
    if ((cm != 1 && cm != m) || (cn != 1 && cn != n)) return run_reference("Gemm", ctx);  // names the mismatch
    c_dims = {cm, cn};
  }
  Tensor out(DType::Float32, {m, n});
  const memory::desc src = desc({m, k}, ta ? Dims{1, m} : Dims{k, 1});
  const memory::desc weights = desc({k, n}, tb ? Dims{1, k} : Dims{n, 1});
  const memory::desc addend = has_c ? desc(c_dims, {c_dims[1], 1}) : memory::desc();
  matmul(src, a.raw(), weights, b.raw(), has_c ? &addend : nullptr, has_c ? ctx.input(2).raw() : nullptr,
         desc({m, n}, {n, 1}), out.raw(), ctx.attr_float("alpha", 1.0f));
  ctx.set_output(0, std::move(out));
}

// [..., m, k] x [k, n], and stacks of equal batch shape. Broadcasting
// batches and vectors are the reference kernel's.
void matmul_kernel(ref::KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  if (!all_f32(ctx) || a.rank() < 2 || b.rank() < 2 || a.dim(-1) != b.dim(-2)) return run_reference("MatMul", ctx);
  const int64_t m = a.dim(-2), k = a.dim(-1), n = b.dim(-1);
  const Dims batch_a(a.dims().begin(), a.dims().end() - 2), batch_b(b.dims().begin(), b.dims().end() - 2);
  if (!batch_b.empty() && batch_b != batch_a) return run_reference("MatMul", ctx);
  const int64_t batch = std::accumulate(batch_a.begin(), batch_a.end(), int64_t(1), std::multiplies<>());
  if (m == 0 || n == 0 || k == 0 || batch == 0) return run_reference("MatMul", ctx);
  Dims out_dims = batch_a;
  out_dims.insert(out_dims.end(), {m, n});
  Tensor out(DType::Float32, out_dims);
  if (batch_b.empty()) {  // one weight matrix: the stack is one taller product
    matmul(desc({batch * m, k}, {k, 1}), a.raw(), desc({k, n}, {n, 1}), b.raw(), nullptr, nullptr,
           desc({batch * m, n}, {n, 1}), out.raw(), 1.0f);
  } else {
    matmul(desc({batch, m, k}, {m * k, k, 1}), a.raw(), desc({batch, k, n}, {k * n, n, 1}), b.raw(), nullptr, nullptr,
           desc({batch, m, n}, {m * n, n, 1}), out.raw(), 1.0f);
  }
  ctx.set_output(0, std::move(out));
}

const ref::KernelRegistry& interpreter_kernels() {
  static const ref::KernelRegistry kernels = [] {
    ref::KernelRegistry r = ref::KernelRegistry::instance();
    r.add("Gemm", &gemm_kernel);
    r.add("MatMul", &matmul_kernel);
    return r;
  }();
  return kernels;
}

constexpr int kFormat = 1;

// An executable's artifact is its graph: the nodes as CBOR, the
// initializers in the weights file, where a warm load leaves them.
class InterpreterExecutable : public Executable {
 public:
  // `unsaved`: why save() must refuse, if it must.
  InterpreterExecutable(std::shared_ptr<const ir::Graph> graph, std::shared_ptr<cpu::ThreadBudget> budget, std::string unsaved = {})
      : graph_(std::move(graph)), budget_(std::move(budget)), unsaved_(std::move(unsaved)) {}
  ExecutableStats stats() const override { return {int64_t(graph_->nodes.size())}; }
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs) const override {
    BudgetScope scope(budget_.get());
    return ref::run_graph(*graph_, inputs, &interpreter_kernels());
  }

  Artifact save() const override {
    if (!unsaved_.empty()) ir::fail(ir::ErrorKind::Unsupported, unsaved_);
    ir::Graph nodes = *graph_;
    nodes.initializers.clear();
    cpu::WeightsWriter weights;
    json initializers = json::array();
    for (const auto& [name, t] : graph_->initializers)
      initializers.push_back({{"name", name}, {"dtype", int(t.dtype())}, {"dims", t.dims()}, {"offset", weights.add(t.raw(), t.nbytes())}});
    const std::vector<uint8_t> cbor =
        json::to_cbor({{"format", kFormat}, {"graph", ir::graph_to_json(nodes)}, {"initializers", initializers}});
    Artifact a;
    a.program.assign(cbor.begin(), cbor.end());
    for (const auto& [offset, chunk] : weights.chunks()) {
      a.weight_offsets.push_back(offset);
      a.weights.push_back(chunk);
    }
    a.weights_bytes = weights.size();
    a.summary = json({{"interpreted_nodes", graph_->nodes.size()}, {"initializers", graph_->initializers.size()}}).dump();
    return a;
  }

  static std::unique_ptr<Executable> load(const LoadedArtifact& artifact, std::shared_ptr<cpu::ThreadBudget> budget) {
    const std::string what = "cached interpreter graph";
    try {
      const json j = json::from_cbor(artifact.program.begin(), artifact.program.end());
      if (ir::json_field<int>(j, "format", what) != kFormat) ir::fail(ir::ErrorKind::InvalidModel, what + ": unknown format");
      auto graph = std::make_shared<ir::Graph>(ir::graph_from_json(ir::json_field<json>(j, "graph", what)));
      const cpu::WeightsReader weights(artifact.weights, artifact.weights_bytes);
      for (const json& init : ir::json_field<json>(j, "initializers", what)) {
        const auto name = ir::json_field<std::string>(init, "name", what);
        const auto dtype = DType(ir::json_field<int>(init, "dtype", what));
        if (!ir::dtype_supported(dtype)) ir::fail(ir::ErrorKind::InvalidModel, what + ": initializer '" + name + "' has an unsupported dtype");
        const auto dims = ir::json_field<Dims>(init, "dims", what);
        const void* data = weights.at(ir::json_field<int64_t>(init, "offset", what),
                                      ir::checked_numel(dims) * int64_t(ir::dtype_size(dtype)), what + " initializer '" + name + "'");
        // Read only: kernels never write their inputs, and the runtime
        // copies an output that is not the caller's own.
        graph->initializers[name] = Tensor::view(dtype, dims, const_cast<void*>(data), artifact.keep_alive);
      }
      return std::make_unique<InterpreterExecutable>(std::move(graph), std::move(budget));
    } catch (const json::exception& e) {
      ir::fail(ir::ErrorKind::InvalidModel, what + " is malformed: " + e.what());
    }
  }

 private:
  std::shared_ptr<const ir::Graph> graph_;
  std::shared_ptr<cpu::ThreadBudget> budget_;
  std::string unsaved_;
};

class InterpreterBackend : public Backend {
 public:
  explicit InterpreterBackend(std::shared_ptr<cpu::ThreadBudget> budget) : budget_(std::move(budget)) {}
  std::string name() const override { return "interpreter"; }
  std::string version() const override { return "interpreter-1"; }
  bool supports(const ir::Node& node) const override { return ref::has_kernel(node.domain, node.op_type); }
  std::unique_ptr<Executable> compile(std::shared_ptr<const ir::Graph> graph, const ir::Specialization&,
                                      const CompileOptions&) const override {
    return std::make_unique<InterpreterExecutable>(std::move(graph), budget_);
  }
  std::unique_ptr<Executable> load(const LoadedArtifact& artifact, std::shared_ptr<const ir::Graph>,
                                   const CompileOptions&) const override {
    return InterpreterExecutable::load(artifact, budget_);
  }

 private:
  std::shared_ptr<cpu::ThreadBudget> budget_;
};

}  // namespace

std::unique_ptr<Backend> make_interpreter_backend(std::shared_ptr<cpu::ThreadBudget> budget) {
  return std::make_unique<InterpreterBackend>(std::move(budget));
}

std::unique_ptr<Executable> interpret_uncached(std::shared_ptr<const ir::Graph> graph, std::shared_ptr<cpu::ThreadBudget> budget,
                                               std::string why) {
  return std::make_unique<InterpreterExecutable>(std::move(graph), std::move(budget), std::move(why));
}

}  // namespace kiln::backends
