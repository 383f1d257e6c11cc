#include "backends/cpu/lowering.hpp"

#include <algorithm>
#include <new>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <string_view>

#include "backends/cpu/host_kernels.hpp"
#include "backends/cpu/onednn_kernel.hpp"
#include "backends/cpu/portable/kernels.h"
#include "backends/cpu/recurrent_kernel.hpp"
#include "backends/cpu/thread_budget.hpp"
#include "backends/reference/kernel_context.hpp"
#include "backends/reference/ops/op_util.hpp"
#include "backends/reference/reference_executor.hpp"
#include "backends/reference/resize_plan.hpp"
#include "runtime/ir/huge_pages.hpp"
#include "runtime/passes/memory_plan.hpp"

namespace kiln::cpu {

namespace {

using ir::DType;
using ir::Dims;
using md = dnnl::memory::desc;
using dt = dnnl::memory::data_type;
using Op = Loop::Op;

dnnl::memory::dims to_dnnl(const Dims& d) {
  if (d.empty()) return {1};  // oneDNN has no rank 0
  return dnnl::memory::dims(d.begin(), d.end());
}

md plain_md(const Dims& dims) {
  const Dims d = dims.empty() ? Dims{1} : dims;
  auto strides = ref::strides_of(d);
  return md(to_dnnl(d), dt::f32, dnnl::memory::dims(strides.begin(), strides.end()));
}

bool is_plain(const md& m, const Dims& dims) { return m == plain_md(dims); }

// A convolution's SiLU runs as a loop after it from this many output values
// (see lower_conv).
constexpr int64_t kSiluLoopFrom = 65536;

// One axis along which a layout stores its values: the logical dim it walks
// and its length.
struct PhysicalAxis {
  size_t dim;
  int64_t size;
};
// The axes of a oneDNN layout with no padding and no gaps (channels-last,
// channel blocks), outermost first, axes of length 1 left out: the layout's
// bytes are the dense array of these axes. Nothing for any other layout.
std::optional<std::vector<PhysicalAxis>> physical_axes(const md& m) {
  const dnnl_memory_desc_t& d = m.data;
  if (d.format_kind != dnnl_blocked || d.data_type != dnnl_f32 || d.offset0 != 0) return std::nullopt;
  const auto& blocking = d.format_desc.blocking;
  const size_t rank = size_t(d.ndims);
  std::vector<int64_t> inner(rank, 1);
  for (int k = 0; k < blocking.inner_nblks; ++k) inner[size_t(blocking.inner_idxs[k])] *= blocking.inner_blks[k];
  std::vector<std::pair<int64_t, PhysicalAxis>> outer;  // (stride, axis)
  for (size_t i = 0; i < rank; ++i) {
    if (d.padded_dims[i] != d.dims[i]) return std::nullopt;
    if (d.dims[i] / inner[i] > 1) outer.push_back({blocking.strides[i], {i, d.dims[i] / inner[i]}});
  }
  std::stable_sort(outer.begin(), outer.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<PhysicalAxis> axes;
  for (const auto& [stride, axis] : outer) axes.push_back(axis);
  for (int k = 0; k < blocking.inner_nblks; ++k)
    if (blocking.inner_blks[k] > 1) axes.push_back({size_t(blocking.inner_idxs[k]), blocking.inner_blks[k]});
  // Dense: each outer axis's stride is what the axes inside it hold.
  int64_t held = 1;
  for (const auto& a : axes) held *= a.size;
  for (const auto& [stride, axis] : outer) {
    held /= axis.size;
    if (stride != held) return std::nullopt;
  }
  return axes;
}

// Whether oneDNN fell back to its reference implementation ("ref:any"),
// which is never worth taking where the lowering has another way.
bool reference_kernel(const dnnl::primitive_desc_base& pd) { return std::string_view(pd.impl_info_str()).substr(0, 3) == "ref"; }

// A dense layout of dims `whole` with its axes in the order of `like` (a
// layout without blocking), and a view of it with dims `part` that takes
// every stride-th element of each spatial axis (those after N and C).
// Nothing when `like` is blocked.
std::optional<std::pair<md, md>> strided_view(const md& like, const Dims& whole, const Dims& part, const Dims& strides) {
  const dnnl_memory_desc_t& d = like.data;
  if (d.format_kind != dnnl_blocked || d.format_desc.blocking.inner_nblks != 0 || size_t(d.ndims) != whole.size() ||
      part.size() != whole.size() || strides.size() + 2 != whole.size())
    return std::nullopt;
  std::vector<size_t> order(whole.size());  // outermost first
  std::iota(order.begin(), order.end(), 0);
  const auto* like_strides = d.format_desc.blocking.strides;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return like_strides[a] > like_strides[b]; });
  dnnl::memory::dims whole_strides(whole.size()), view_strides(whole.size());
  int64_t step = 1;
  for (size_t k = order.size(); k-- > 0;) {
    whole_strides[order[k]] = step;
    step *= whole[order[k]];
  }
  for (size_t i = 0; i < whole.size(); ++i) view_strides[i] = whole_strides[i] * (i < 2 ? 1 : strides[i - 2]);
  return std::make_pair(md(to_dnnl(whole), dt::f32, whole_strides), md(to_dnnl(part), dt::f32, view_strides));
}

// A ConvTranspose whose kernel equals its stride, lowered as a 1x1
// convolution to taps x C channels (tap t's channel c at t * C + c, the taps
// in row-major order of the kernel), then one copy: views of that output
// (`taps`) and of the ConvTranspose's (`out`) with the same dims
// [N, C/B, X1, k1, ..., Xs, ks, B], where X are the input's spatial axes,
// k the kernel's and B the channel block (none when 1). Both layouts must be
// plain strided or in the same channel blocks, with C a multiple of them.
std::optional<std::pair<md, md>> tap_views(const md& taps, const md& out, const Dims& kernel, int64_t channels) {
  auto block_of = [](const dnnl_memory_desc_t& d) -> int64_t {
    if (d.format_kind != dnnl_blocked || d.offset0 != 0 || d.extra.flags != 0) return -1;
    const auto& b = d.format_desc.blocking;
    if (b.inner_nblks == 0) return 1;
    return b.inner_nblks == 1 && b.inner_idxs[0] == 1 ? b.inner_blks[0] : -1;
  };
  const int64_t block = block_of(taps.data);
  const size_t spatial = kernel.size();
  if (block < 1 || block != block_of(out.data) || channels % block || size_t(taps.data.ndims) != spatial + 2 ||
      size_t(out.data.ndims) != spatial + 2)
    return std::nullopt;
  const auto* ts = taps.data.format_desc.blocking.strides;
  const auto* os = out.data.format_desc.blocking.strides;
  dnnl::memory::dims view = {taps.data.dims[0], channels / block}, from = {ts[0], ts[1]}, to = {os[0], os[1]};
  int64_t later_taps = 1;  // taps of the kernel axes after this one
  for (size_t d = spatial; d-- > 0;) {
    view.insert(view.begin() + 2, {taps.data.dims[2 + d], kernel[d]});
    from.insert(from.begin() + 2, {ts[2 + d], ts[1] * (channels / block) * later_taps});
    to.insert(to.begin() + 2, {os[2 + d] * kernel[d], os[2 + d]});
    later_taps *= kernel[d];
  }
  if (block > 1) {
    view.push_back(block);
    from.push_back(1);
    to.push_back(1);
  }
  return std::make_pair(md(view, dt::f32, from), md(view, dt::f32, to));
}

// A eltwise post-op: oneDNN algorithm and its two parameters.
struct PostOp {
  dnnl::algorithm alg;
  float alpha = 0, beta = 0;
};

// Elementwise ops a generated loop computes: unary (one input) or binary.
struct LoopOpInfo {
  Op op;
  int arity;
};
const std::map<std::string, LoopOpInfo>& loop_ops() {
  static const std::map<std::string, LoopOpInfo> ops = {
      {"Add", {Op::Add, 2}},         {"Sub", {Op::Sub, 2}},           {"Mul", {Op::Mul, 2}},
      {"Div", {Op::Div, 2}},         {"Pow", {Op::Pow, 2}},           {"Max", {Op::Max, 2}},
      {"Min", {Op::Min, 2}},         {"PRelu", {Op::PRelu, 2}},   {"Neg", {Op::Neg, 1}},
      {"Abs", {Op::Abs, 1}},         {"Relu", {Op::Relu, 1}},         {"LeakyRelu", {Op::LeakyRelu, 1}},
      {"Sigmoid", {Op::Sigmoid, 1}}, {"Tanh", {Op::Tanh, 1}},         {"Exp", {Op::Exp, 1}},
      {"Log", {Op::Log, 1}},         {"Sqrt", {Op::Sqrt, 1}},         {"Erf", {Op::Erf, 1}},
      {"Reciprocal", {Op::Reciprocal, 1}}, {"Floor", {Op::Floor, 1}}, {"Ceil", {Op::Ceil, 1}},
      {"Clip", {Op::Clip, 1}},       {"HardSigmoid", {Op::HardSigmoid, 1}}, {"HardSwish", {Op::HardSwish, 1}},
      {"Softplus", {Op::Softplus, 1}}, {"Elu", {Op::Elu, 1}},         {"Selu", {Op::Selu, 1}},
      {"Softsign", {Op::Softsign, 1}},
  };
  return ops;
}

const std::set<std::string>& alias_ops() {
  static const std::set<std::string> ops = {"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze"};
  return ops;
}

const std::set<std::string>& primitive_ops() {
  static const std::set<std::string> ops = {"Conv", "ConvTranspose", "Gemm", "MatMul", "MaxPool", "AveragePool", "GlobalAveragePool",
                                            "GlobalMaxPool", "Softmax", "LogSoftmax", "LayerNormalization", "BatchNormalization",
                                            "Transpose", "Concat", "Slice", "Gather", "RNN", "GRU", "LSTM",
                                            "InstanceNormalization"};
  return ops;
}

// A value the lowering can plan: a concrete shape and a fixed-size dtype.
// (A value whose shape depends on the data has no concrete shape.) Its
// buffers are described to oneDNN, which takes at most DNNL_MAX_NDIMS dims
// and sizes them in size_t, blocked layouts padded: values of a higher rank
// (ONNX has no limit) or of more than 2^48 bytes (no machine holds one; its
// padded size could wrap) are the interpreter's, which refuses the latter.
bool is_static(const ir::Specialization& spec, const std::string& name) {
  auto it = spec.result.values.find(name);
  if (it == spec.result.values.end() || !it->second.shape.is_concrete() || it->second.shape.rank() > DNNL_MAX_NDIMS ||
      !ir::dtype_supported(it->second.dtype) || it->second.dtype == DType::String)
    return false;
  __int128 bytes = __int128(ir::dtype_size(it->second.dtype));
  for (int64_t d : it->second.shape.concrete()) bytes = std::min(bytes * d, __int128(1) << 49);
  return bytes <= __int128(1) << 48;
}

class Lowering {
 public:
  Lowering(const ir::Graph& graph, const ir::Specialization& spec, KernelFamily family, DeferredWork& deferred,
           std::vector<ImplementationTrial>* trials)
      : g_(graph),
        spec_(spec),
        portable_(family == KernelFamily::Portable),
        host_kernels_(family == KernelFamily::Native),
        deferred_(deferred),
        trials_(family == KernelFamily::Native ? trials : nullptr) {
    p_.family = family;
  }

  Program run() {
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      for (const auto& name : ir::values_read(g_.nodes[i])) consumers_[name].push_back(i);
      for (const auto& out : g_.nodes[i].outputs)
        if (!out.empty()) {
          producer_[out] = i;
          check_static(out);
        }
    }
    // Inputs with an initializer are inputs too: the caller may override them.
    for (const auto& in : g_.inputs) {
      p_.inputs.push_back(in.name);
      auto init = g_.initializers.find(in.name);
      p_.input_defaults.push_back(init == g_.initializers.end() ? ir::Tensor() : init->second);
      input_index_[in.name] = int(p_.inputs.size()) - 1;
    }
    for (size_t k = 0; k < g_.outputs.size(); ++k) {
      const std::string& name = g_.outputs[k].name;
      check_static(name);
      p_.outputs.push_back(name);
      p_.output_dtypes.push_back(dtype(name));
      p_.output_dims.push_back(dims(name));
      output_buffer_.push_back(add_buffer(Buffer::Kind::Output, int(k), bytes_of(name), name));
      output_of_.emplace(name, int(k));
    }

    absorbed_.assign(g_.nodes.size(), 0);
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (absorbed_[i]) continue;
      node_ = i;
      const size_t steps_before = p_.steps.size();
      bool native = false;
      try {
        native = lower_node(g_.nodes[i]);
      } catch (const dnnl::error&) {
        native = false;  // oneDNN has no implementation for this case: the reference kernel runs it
      } catch (const std::bad_alloc&) {  // a table the node's sizes ask for (a resize's taps)
        ir::fail(ir::ErrorKind::Internal, g_.nodes[i].describe() + ": out of memory allocating what its compile needs");
      }
      if (!native) {
        if (p_.steps.size() != steps_before) ir::fail(ir::ErrorKind::Internal, "lowering left a partial step");
        fallback(g_.nodes[i]);
      }
    }
    for (size_t k = 0; k < g_.outputs.size(); ++k) finish_output(int(k));
    sum_in_place();
    plan();
    return std::move(p_);
  }

 private:
  struct Val {
    int buffer = -1;
    md layout;  // f32 values: the layout the buffer holds
    bool blocked = false;
    std::vector<std::pair<md, int>> copies;  // the value in other layouts, made on demand
  };

  // ---- values ---------------------------------------------------------------
  void check_static(const std::string& name) {
    if (!is_static(spec_, name))
      ir::fail(ir::ErrorKind::Unsupported, "value '" + name + "' has no static shape and fixed-size type");
  }
  const ir::ValueInfo& info(const std::string& name) const {
    auto it = spec_.result.values.find(name);
    if (it == spec_.result.values.end()) ir::fail(ir::ErrorKind::Internal, "lowering: no type for '" + name + "'");
    return it->second;
  }
  Dims dims(const std::string& name) const { return info(name).shape.concrete(); }
  DType dtype(const std::string& name) const { return info(name).dtype; }
  int64_t bytes_of(const std::string& name) const {
    return ir::checked_numel(dims(name)) * int64_t(ir::dtype_size(dtype(name)));
  }
  bool is_f32(const std::string& name) const { return !name.empty() && dtype(name) == DType::Float32; }
  // A weight: an initializer the caller cannot override.
  const ir::Tensor* constant(const std::string& name) const { return input_index_.count(name) ? nullptr : g_.constant(name); }
  std::optional<float> scalar_constant(const std::string& name) const {
    const ir::Tensor* t = constant(name);
    if (!t || t->numel() != 1 || t->dtype() != DType::Float32) return std::nullopt;
    return t->data<float>()[0];
  }
  // Available when the current step runs: a graph input, a weight, or
  // produced by a node before it.
  bool available(const std::string& name) const {
    auto it = producer_.find(name);
    return it == producer_.end() || it->second < node_;
  }
  bool single_use(const std::string& name) const {
    auto it = consumers_.find(name);
    return it != consumers_.end() && it->second.size() == 1 && !output_of_.count(name);
  }
  // Whether only a node's first output is read: the kernels here make no
  // other (MaxPool's Indices, LayerNormalization's Mean and
  // InvStdDev, BatchNormalization's training statistics). One the exporter
  // named but nothing reads needs none.
  bool only_first_output_wanted(const ir::Node& n) const {
    for (size_t i = 1; i < n.outputs.size(); ++i) {
      const std::string& name = n.outputs[i];
      if (!name.empty() && (consumers_.count(name) || output_of_.count(name))) return false;
    }
    return true;
  }
  const std::vector<size_t>& consumers(const std::string& name) const {
    static const std::vector<size_t> none;
    auto it = consumers_.find(name);
    return it == consumers_.end() ? none : it->second;
  }

  int add_buffer(Buffer::Kind kind, int index, int64_t bytes, const std::string& name) {
    Buffer b;
    b.kind = kind;
    b.index = index;
    b.bytes = bytes;
    b.name = name;
    p_.buffers.push_back(b);
    return int(p_.buffers.size()) - 1;
  }

  Val& val(const std::string& name) {
    auto it = vals_.find(name);
    if (it != vals_.end()) return it->second;
    Val v;
    if (auto in = input_index_.find(name); in != input_index_.end()) {
      v.buffer = add_buffer(Buffer::Kind::Input, in->second, bytes_of(name), name);
    } else if (const ir::Tensor* t = constant(name)) {
      p_.constants.push_back(*t);
      v.buffer = add_buffer(Buffer::Kind::Constant, int(p_.constants.size()) - 1, int64_t(t->nbytes()), name);
    } else {
      ir::fail(ir::ErrorKind::Internal, "lowering: '" + name + "' is read before it is computed");
    }
    if (dtype(name) == DType::Float32) v.layout = plain_md(dims(name));
    return vals_[name] = v;
  }

  // A new value's buffer: the caller's output buffer when the value is a
  // graph output in plain layout, else an arena slot. A plain value's layout
  // is its own row-major one (`layout` may view the same bytes with other
  // dims, e.g. a matmul's [rows, n]).
  int define(const std::string& name, const md& layout, bool plain) {
    int buffer = -1;
    auto out = output_of_.find(name);
    if (plain && out != output_of_.end()) {
      buffer = output_buffer_[size_t(out->second)];
    } else {
      const int64_t bytes = dtype(name) == DType::Float32 ? int64_t(layout.get_size()) : bytes_of(name);
      buffer = add_buffer(Buffer::Kind::Arena, 0, bytes, name);
    }
    Val v;
    v.buffer = buffer;
    v.layout = plain && dtype(name) == DType::Float32 ? plain_md(dims(name)) : layout;
    v.blocked = !plain;
    vals_[name] = v;
    return buffer;
  }
  int define_plain(const std::string& name) {
    return define(name, dtype(name) == DType::Float32 ? plain_md(dims(name)) : md(), true);
  }

  // The value's buffer in layout `want`, reordered on first demand.
  int as_layout(const std::string& name, const md& want) {
    Val& v = val(name);
    if (v.layout == want) return v.buffer;
    for (const auto& [layout, buffer] : v.copies)
      if (layout == want) return buffer;
    const int buffer = add_buffer(Buffer::Kind::Arena, 0, int64_t(want.get_size()), name + "#layout");
    add_reorder("reorder " + name, v.buffer, buffer, v.layout, want);
    vals_[name].copies.emplace_back(want, buffer);
    return buffer;
  }
  int plain(const std::string& name) {
    const Val& v = val(name);
    if (!v.blocked) return v.buffer;
    return as_layout(name, plain_md(dims(name)));
  }

  void add_kernel(const std::string& label, std::vector<int> args, std::vector<char> writes,
                  std::unique_ptr<Kernel> kernel) {
    Step s;
    s.label = label;
    s.args = std::move(args);
    s.writes = std::move(writes);
    s.kernel = std::move(kernel);
    p_.steps.push_back(std::move(s));
  }
  // A step running a oneDNN primitive: `args` are the step's buffers, each
  // bound to the DNNL_ARG_* of `rt_args` at the same position. A scratchpad
  // the primitive needs is one more buffer, live for this step only. The
  // primitive's own code is compiled later (see DeferredWork), with the
  // OpenMP thread count of now, the one its descriptor was made with.
  void add_primitive(const std::string& label, const dnnl::primitive_desc_base& pd, std::vector<int> args,
                     std::vector<char> writes, std::vector<std::pair<int, md>> rt_args,
                     std::unordered_map<int, dnnl::memory> constants, int sum_from = -1) {
    const md scratch = pd.query_md(dnnl::query::scratchpad_md);
    if (scratch.get_size() > 0) {
      args.push_back(add_buffer(Buffer::Kind::Arena, 0, int64_t(scratch.get_size()), label + "#scratchpad"));
      writes.push_back(1);
      rt_args.push_back({DNNL_ARG_SCRATCHPAD, scratch});
    }
    auto kernel = std::make_unique<OneDnnKernel>(pd, std::move(rt_args), std::move(constants), sum_from);
    OneDnnKernel* k = kernel.get();
    add_kernel(label, std::move(args), std::move(writes), std::move(kernel));
    // A native bundle makes its primitives again from their descriptors.
    if (p_.family != KernelFamily::NativeBundle) defer_creation(k, label, omp_get_max_threads());
  }
  // The primitive's code compiled with the deferred work, on `threads`
  // OpenMP threads: the count its descriptor was made with.
  void defer_creation(OneDnnKernel* k, const std::string& label, int threads) {
    deferred_.push_back([k, label, threads] {
      OmpThreads scope(threads);
      try {
        k->create_primitive();
      } catch (const dnnl::error& e) {
        ir::fail(ir::ErrorKind::Internal, label + ": oneDNN could not create the primitive it described: " + e.what());
      }
    });
  }

  // A step copying buffer `src` of layout `from` into `dst` of layout `to`.
  void add_reorder(const std::string& label, int src, int dst, const md& from, const md& to) {
    const dnnl::reorder::primitive_desc pd(cpu_engine(), from, cpu_engine(), to, user_scratchpad());
    add_primitive(label, pd, {src, dst}, {0, 1}, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}}, {});
  }

  // A weight in the layout `want`: the memory now, its bytes once the
  // deferred work has run. `data` must live until then: a tensor of the
  // graph or the specialization does; `keep` holds anything else.
  dnnl::memory constant_memory(const md& user, const void* data, const md& want, std::shared_ptr<const void> keep = nullptr) {
    dnnl::memory dst(want, cpu_engine());
    // Before the reorder first touches it (see huge_pages.hpp).
    ir::advise_huge_pages(dst.get_data_handle(), want.get_size());
    deferred_.push_back([user, data, dst, keep = std::move(keep)] {
      try {
        reorder_constant(user, data, dst);
      } catch (const dnnl::error& e) {
        ir::fail(ir::ErrorKind::Internal, std::string("reordering a weight for oneDNN failed: ") + e.what());
      }
    });
    return dst;
  }

  // ---- dispatch ---------------------------------------------------------------
  // A value with no elements (a batch of 0) leaves nothing to compute, but
  // oneDNN 2.6 divides by zero describing some primitives over one (a
  // matmul: SIGFPE). Such a node runs its reference kernel, which knows
  // empty tensors.
  bool touches_empty(const ir::Node& n) {
    auto empty = [&](const std::string& name) { return !name.empty() && ir::checked_numel(dims(name)) == 0; };
    const auto read = ir::values_read(n);
    return std::any_of(read.begin(), read.end(), empty) || std::any_of(n.outputs.begin(), n.outputs.end(), empty);
  }

  bool lower_node(const ir::Node& n) {
    if (!n.domain.empty() && n.domain != "ai.onnx") return false;
    const std::string& op = n.op_type;
    if (alias_ops().count(op)) return lower_alias(n);
    if (touches_empty(n)) return false;
    if (portable_) {
      if (op == "Conv") return portable_conv(n);
      if (op == "Gemm") return portable_gemm(n);
      if (op == "MatMul") return portable_matmul(n);
      if (op == "MaxPool" || op == "AveragePool") return portable_pool(n);
      if (op == "GlobalAveragePool" || op == "GlobalMaxPool") return portable_global_pool(n);
      if (op == "Softmax" || op == "LogSoftmax") return portable_softmax(n);
      if (op == "LayerNormalization") return portable_layer_norm(n);
      if (op == "Transpose") return portable_transpose(n);
      if (op == "Concat") return portable_concat(n);
      if (op == "Slice") return portable_slice(n);
      if (op == "Gather") return portable_gather(n);
      if (op == "LSTM" || op == "GRU" || op == "RNN") return portable_recurrent(n);
      if (loop_ops().count(op)) return lower_elementwise(n);
      return false;
    }
    if (op == "Conv") return lower_conv(n);
    if (op == "ConvTranspose") return lower_conv_transpose(n);
    if (op == "Gemm") return lower_gemm(n);
    if (op == "MatMul") return lower_matmul(n);
    if (op == "MaxPool" || op == "AveragePool" || op == "GlobalAveragePool" || op == "GlobalMaxPool") return lower_pool(n);
    if (op == "Softmax" || op == "LogSoftmax") return lower_softmax(n);
    if (op == "LayerNormalization") return lower_layer_norm(n);
    if (op == "BatchNormalization") return lower_batch_norm(n);
    if (op == "InstanceNormalization") return lower_instance_norm(n);
    if (op == "Resize" || op == "Upsample") return lower_resize(n);
    if (op == "Transpose") return lower_transpose(n) || (!host_kernels_ && portable_transpose(n));
    if (op == "Concat") return lower_concat(n);
    if (op == "Slice") return host_kernels_ ? lower_slice(n) : portable_slice(n);
    if (op == "Gather") return host_kernels_ ? lower_gather(n) : portable_gather(n);
    if (op == "LSTM" || op == "GRU" || op == "RNN") return host_kernels_ ? lower_recurrent(n) : portable_recurrent(n);
    if (loop_ops().count(op) && n.outputs.size() == 1 && loop_layout(n, dims(n.outputs[0])) && lower_elementwise(n)) return true;
    if (binary_algorithm(op) && lower_blocked_binary(n)) return true;
    if (loop_ops().count(op)) return lower_elementwise(n);
    return false;
  }

  void fallback(const ir::Node& n) {
    std::vector<int> args;
    std::vector<char> writes;
    std::vector<ReferenceKernel::Value> reads, outs;
    for (const auto& name : ir::values_read(n)) {
      args.push_back(plain(name));
      writes.push_back(0);
      reads.push_back({name, dtype(name), dims(name)});
    }
    for (const auto& name : n.outputs) {
      if (name.empty()) continue;
      args.push_back(define_plain(name));
      writes.push_back(1);
      outs.push_back({name, dtype(name), dims(name)});
    }
    add_kernel(n.describe(), std::move(args), std::move(writes), std::make_unique<ReferenceKernel>(n, reads, outs));
    p_.fallback_nodes++;
  }

  void compiled(int nodes = 1) { p_.compiled_nodes += nodes; }

  // ---- views: no work, the output names the input's plain bytes -------------
  bool lower_alias(const ir::Node& n) {
    if (n.inputs.empty() || n.inputs[0].empty() || n.outputs.empty()) return false;
    if (!only_first_output_wanted(n)) return false;
    const std::string &in = n.inputs[0], &out = n.outputs[0];
    if (dtype(in) != dtype(out) || bytes_of(in) != bytes_of(out)) return false;
    Val v;
    v.buffer = plain(in);
    if (dtype(out) == DType::Float32) v.layout = plain_md(dims(out));
    vals_[out] = v;
    compiled();
    return true;
  }

  // ---- fusion of what follows a convolution or matmul -----------------------
  struct Fused {
    std::string value;             // the chain's final value
    std::vector<PostOp> eltwise;   // in order, interleaved with the sum below
    int sum_position = -1;         // index in `eltwise` before which the residual is added
    std::string residual;
    std::vector<size_t> nodes;
  };

  // Follows `value` through activations and (if allowed) one residual Add
  // that only it consumes.
  Fused fuse_after(const std::string& value, bool allow_sum) {
    Fused f = fuse_chain(value, allow_sum);
    // oneDNN 2.6 applies the parameters of the first post-op of an
    // algorithm to every later one of the same algorithm (linear(2,0) then
    // linear(1,0.25) computes 4x): the chain ends before a repeated algorithm.
    for (size_t i = 1; i < f.eltwise.size(); ++i)
      for (size_t k = 0; k < i; ++k)
        if (f.eltwise[k].alg == f.eltwise[i].alg) return fuse_chain(value, allow_sum, i);
    return f;
  }

  Fused fuse_chain(const std::string& value, bool allow_sum, size_t max_eltwise = SIZE_MAX) {
    Fused f;
    f.value = value;
    for (;;) {
      if (f.eltwise.size() >= max_eltwise) break;
      const std::string v = f.value;
      if (auto silu = match_gated(v, "Sigmoid")) {
        f.eltwise.push_back({dnnl::algorithm::eltwise_swish, 1.0f, 0});
        f.nodes.insert(f.nodes.end(), silu->second.begin(), silu->second.end());
        f.value = silu->first;
        continue;
      }
      // Before opset 14 PyTorch exports Hardswish as x * HardSigmoid(x)
      // (alpha 1/6, beta 1/2): MobileNetV3 has one after most convolutions.
      if (auto hard_swish = match_gated(v, "HardSigmoid")) {
        f.eltwise.push_back({dnnl::algorithm::eltwise_hardswish, 0, 0});
        f.nodes.insert(f.nodes.end(), hard_swish->second.begin(), hard_swish->second.end());
        f.value = hard_swish->first;
        continue;
      }
      if (auto gelu = match_gelu(v)) {
        f.eltwise.push_back({dnnl::algorithm::eltwise_gelu_erf, 0, 0});
        f.nodes.insert(f.nodes.end(), gelu->second.begin(), gelu->second.end());
        f.value = gelu->first;
        continue;
      }
      if (!single_use(v)) break;
      const size_t c = consumers(v)[0];
      const ir::Node& n = g_.nodes[c];
      if (!n.domain.empty() || n.outputs.size() != 1 || !is_f32(n.outputs[0]) || dims(n.outputs[0]) != dims(v)) break;
      std::optional<PostOp> post = activation(n);
      if (post) {
        f.eltwise.push_back(*post);
      } else if (n.op_type == "HardSigmoid") {
        // max(0, min(1, alpha x + beta)); oneDNN 2.6 has no such eltwise, so two.
        if (f.eltwise.size() + 2 > max_eltwise) break;
        ref::KernelContext ctx(n, {}, nullptr);
        f.eltwise.push_back({dnnl::algorithm::eltwise_linear, ctx.attr_float("alpha", 0.2f), ctx.attr_float("beta", 0.5f)});
        f.eltwise.push_back({dnnl::algorithm::eltwise_clip_v2, 0, 1});
      } else if ((n.op_type == "Add" || n.op_type == "Mul" || n.op_type == "Sub" || n.op_type == "Div") &&
                 n.inputs.size() == 2) {
        const bool first = n.inputs[0] == v;
        const std::string other = first ? n.inputs[1] : n.inputs[0];
        if (other == v) break;
        if (auto c_value = scalar_constant(other)) {  // x op c is linear
          const float k = *c_value;
          if (n.op_type == "Add") f.eltwise.push_back({dnnl::algorithm::eltwise_linear, 1, k});
          else if (n.op_type == "Mul") f.eltwise.push_back({dnnl::algorithm::eltwise_linear, k, 0});
          else if (n.op_type == "Sub") f.eltwise.push_back({dnnl::algorithm::eltwise_linear, first ? 1.0f : -1.0f, first ? -k : k});
          else if (first) f.eltwise.push_back({dnnl::algorithm::eltwise_linear, 1 / k, 0});
          else break;
        } else if (n.op_type == "Add" && allow_sum && f.sum_position < 0 && is_f32(other) && dims(other) == dims(v) &&
                   available(other)) {
          f.sum_position = int(f.eltwise.size());
          f.residual = other;
        } else {
          break;
        }
      } else {
        break;
      }
      f.nodes.push_back(c);
      f.value = n.outputs[0];
    }
    return f;
  }

  std::optional<PostOp> activation(const ir::Node& n) {
    ref::KernelContext ctx(n, {}, nullptr);
    const std::string& op = n.op_type;
    if (op == "Relu") return PostOp{dnnl::algorithm::eltwise_relu, 0, 0};
    if (op == "LeakyRelu") return PostOp{dnnl::algorithm::eltwise_relu, ctx.attr_float("alpha", 0.01f), 0};
    if (op == "Sigmoid") return PostOp{dnnl::algorithm::eltwise_logistic, 0, 0};
    if (op == "Tanh") return PostOp{dnnl::algorithm::eltwise_tanh, 0, 0};
    if (op == "HardSwish") return PostOp{dnnl::algorithm::eltwise_hardswish, 0, 0};
    if (op == "Elu") return PostOp{dnnl::algorithm::eltwise_elu, ctx.attr_float("alpha", 1.0f), 0};
    if (op == "Clip") {
      auto bounds = clip_bounds(n);
      if (!bounds) return std::nullopt;
      return PostOp{dnnl::algorithm::eltwise_clip_v2, bounds->first, bounds->second};
    }
    return std::nullopt;
  }

  std::optional<std::pair<float, float>> clip_bounds(const ir::Node& n) {
    ref::KernelContext ctx(n, {}, nullptr);
    float lo = -INFINITY, hi = INFINITY;
    if (n.opset < 11) {
      lo = ctx.attr_float("min", lo);
      hi = ctx.attr_float("max", hi);
    } else {
      for (int i : {1, 2}) {
        if (n.inputs.size() <= size_t(i) || n.inputs[size_t(i)].empty()) continue;
        auto c = scalar_constant(n.inputs[size_t(i)]);
        if (!c) return std::nullopt;
        (i == 1 ? lo : hi) = *c;
      }
    }
    return std::make_pair(lo, hi);
  }

  // The single consumer of `v` with op `op`, or nullptr.
  const ir::Node* only_consumer(const std::string& v, const char* op) {
    if (!single_use(v)) return nullptr;
    const ir::Node& n = g_.nodes[consumers(v)[0]];
    return n.op_type == op && n.domain.empty() ? &n : nullptr;
  }
  size_t index_of(const ir::Node* n) const { return size_t(n - g_.nodes.data()); }

  // x * gate(x), x read by nothing else: SiLU (gate Sigmoid) and Hardswish
  // (gate HardSigmoid with alpha 1/6 and beta 1/2, what PyTorch writes).
  std::optional<std::pair<std::string, std::vector<size_t>>> match_gated(const std::string& x, const char* gate_op) {
    const auto& cs = consumers(x);
    if (cs.size() != 2 || output_of_.count(x)) return std::nullopt;
    for (int s = 0; s < 2; ++s) {
      const ir::Node& gate = g_.nodes[cs[size_t(s)]];
      const ir::Node& mul = g_.nodes[cs[size_t(1 - s)]];
      if (gate.op_type != gate_op || mul.op_type != "Mul" || !gate.domain.empty() || !mul.domain.empty()) continue;
      if (!only_consumer(gate.outputs[0], "Mul") || index_of(only_consumer(gate.outputs[0], "Mul")) != cs[size_t(1 - s)])
        continue;
      if (gate.op_type == "HardSigmoid") {
        ref::KernelContext ctx(gate, {}, nullptr);
        if (std::fabs(ctx.attr_float("alpha", 0.2f) - 1.0f / 6) > 1e-6f || ctx.attr_float("beta", 0.5f) != 0.5f) continue;
      }
      return std::make_pair(mul.outputs[0], std::vector<size_t>{cs[size_t(s)], cs[size_t(1 - s)]});
    }
    return std::nullopt;
  }

  // The erf form of GELU as exporters write it:
  // 0.5 * x * (1 + Erf(x / sqrt(2))), the 0.5 applied first or last.
  std::optional<std::pair<std::string, std::vector<size_t>>> match_gelu(const std::string& x) {
    const auto& cs = consumers(x);
    if (cs.size() != 2 || output_of_.count(x)) return std::nullopt;
    for (int s = 0; s < 2; ++s) {
      const ir::Node& scale = g_.nodes[cs[size_t(s)]];
      const ir::Node& mul = g_.nodes[cs[size_t(1 - s)]];
      if (scale.inputs.size() != 2 || scale.inputs[0] != x || mul.op_type != "Mul") continue;
      auto k = scalar_constant(scale.inputs[1]);
      if (!k) continue;
      const float inv_sqrt2 = scale.op_type == "Div" ? 1 / *k : scale.op_type == "Mul" ? *k : 0;
      if (std::fabs(inv_sqrt2 - 0.70710678f) > 1e-4f) continue;
      const ir::Node* erf = only_consumer(scale.outputs[0], "Erf");
      if (!erf) continue;
      const ir::Node* add = only_consumer(erf->outputs[0], "Add");
      if (!add) continue;
      const std::string& one = add->inputs[0] == erf->outputs[0] ? add->inputs[1] : add->inputs[0];
      if (scalar_constant(one) != 1.0f) continue;
      const ir::Node* prod = only_consumer(add->outputs[0], "Mul");
      if (!prod || index_of(prod) != cs[size_t(1 - s)]) continue;
      std::string other = prod->inputs[0] == add->outputs[0] ? prod->inputs[1] : prod->inputs[0];
      std::vector<size_t> nodes{cs[size_t(s)], index_of(erf), index_of(add), index_of(prod)};
      const ir::Node* half = nullptr;
      if (other == x) {
        half = only_consumer(prod->outputs[0], "Mul");
      } else {
        // 0.5 * x computed first: other = Mul(x, 0.5) -- but then x has a third consumer.
        continue;
      }
      if (!half) continue;
      const std::string& h = half->inputs[0] == prod->outputs[0] ? half->inputs[1] : half->inputs[0];
      if (scalar_constant(h) != 0.5f) continue;
      nodes.push_back(index_of(half));
      return std::make_pair(half->outputs[0], nodes);
    }
    return std::nullopt;
  }

  dnnl::primitive_attr post_op_attr(const Fused& f) {
    dnnl::post_ops ops;
    for (size_t i = 0; i <= f.eltwise.size(); ++i) {
      if (int(i) == f.sum_position) ops.append_sum(1.0f);
      if (i < f.eltwise.size()) ops.append_eltwise(1.0f, f.eltwise[i].alg, f.eltwise[i].alpha, f.eltwise[i].beta);
    }
    dnnl::primitive_attr attr = user_scratchpad();
    attr.set_post_ops(ops);
    return attr;
  }

  void absorb(const Fused& f) {
    for (size_t n : f.nodes) absorbed_[n] = 1;
    compiled(int(f.nodes.size()));
  }

  // Emits a primitive whose destination is the fused chain's final value.
  // `dst_plain`: dst_md is row-major (possibly with other dims than the value).
  void emit_with_dst(const std::string& label, const dnnl::primitive_desc_base& pd, std::vector<std::pair<int, md>> rt_args,
                     std::vector<int> buffers, std::unordered_map<int, dnnl::memory> constants, const Fused& f,
                     const md& dst_md, bool dst_plain) {
    int sum_from = -1;
    if (f.sum_position >= 0) {
      const md residual_md = dst_plain ? plain_md(dims(f.residual)) : dst_md;
      buffers.push_back(as_layout(f.residual, residual_md));
      rt_args.push_back({OneDnnKernel::kNotBound, residual_md});
      sum_from = int(buffers.size()) - 1;
    }
    buffers.push_back(define(f.value, dst_md, dst_plain));
    rt_args.push_back({DNNL_ARG_DST, dst_md});
    if (sum_from >= 0) sum_steps_.push_back({p_.steps.size(), size_t(sum_from), buffers.size() - 1});
    std::vector<char> writes(buffers.size(), 0);
    writes.back() = 1;
    add_primitive(label, pd, std::move(buffers), std::move(writes), std::move(rt_args), std::move(constants), sum_from);
    absorb(f);
  }

  // ---- Conv ---------------------------------------------------------------------
  // Channels in blocks of `block` (16, 8 or 4) innermost, for rank 3 to 5.
  static dnnl::memory::format_tag channel_blocked_tag(size_t rank, int block = 16) {
    using tag = dnnl::memory::format_tag;
    static const tag tags[3][3] = {{tag::aBc16b, tag::aBcd16b, tag::aBcde16b},
                                   {tag::aBc8b, tag::aBcd8b, tag::aBcde8b},
                                   {tag::aBc4b, tag::aBcd4b, tag::aBcde4b}};
    return tags[block == 16 ? 0 : block == 8 ? 1 : 2][rank - 3];
  }
  // The channel block of `m` when it is one of those layouts of its dims
  // (oneDNN picks 8-channel blocks for RegNet's grouped convolutions), else 0.
  static int channel_block(const md& m) {
    const size_t rank = m.dims().size();
    if (rank < 3 || rank > 5) return 0;
    for (int block : {16, 8, 4})
      if (m == md(m.dims(), dt::f32, channel_blocked_tag(rank, block))) return block;
    return 0;
  }
  // Left to choose (`any`), oneDNN 2.6 on AVX-512 takes channels-last and its
  // brgemm kernels, the faster ones while the activations stay in cache. On
  // large activations its 1x1 kernels in 16-channel blocks are faster, most of
  // all with a residual sum or an eltwise post-op to apply (resnet50's 64->256
  // 1x1 at 56x56, batch 8: 2.6 against 4.0 ms with the sum), while its 3x3
  // kernels lose less there than on small ones. So a convolution whose input
  // or output is large computes in blocks of 16 channels.
  static bool prefers_channel_blocks(const Dims& in, const Dims& out) {
    return 4 * std::max(ir::checked_numel(in), ir::checked_numel(out)) >= channel_blocks_threshold();
  }

  bool lower_conv(const ir::Node& n) {
    if (n.inputs.size() < 2 || !is_f32(n.inputs[0]) || n.outputs.size() != 1) return false;
    const ir::Tensor* w = constant(n.inputs[1]);
    const ir::Tensor* b = n.inputs.size() > 2 && !n.inputs[2].empty() ? constant(n.inputs[2]) : nullptr;
    if (!w || w->dtype() != DType::Float32 || (n.inputs.size() > 2 && !n.inputs[2].empty() && !b)) return false;
    const Dims in = dims(n.inputs[0]), out = dims(n.outputs[0]);
    const size_t rank = in.size();
    if (rank < 3 || rank > 5 || w->rank() != int(rank)) return false;
    ref::KernelContext ctx(n, {}, nullptr);
    const int64_t group = ctx.attr_int("group", 1);
    // A group that does not split the channels evenly is the reference kernel's to refuse.
    if (group < 1 || in[1] != w->dims()[1] * group || w->dims()[0] % group) return false;
    Dims kernel(w->dims().begin() + 2, w->dims().end());
    ref::Geometry geo = ref::forward_geometry(ctx, Dims(in.begin() + 2, in.end()), kernel, false);
    if (Dims(out.begin() + 2, out.end()) != geo.out) return false;

    Dims wdims = w->dims();
    dnnl::memory::dims wei;
    if (group > 1) {
      wei = {group, wdims[0] / group};
      wei.insert(wei.end(), wdims.begin() + 1, wdims.end());
    } else {
      wei = to_dnnl(wdims);
    }
    dnnl::memory::dims dil;
    for (int64_t d : geo.dilations) dil.push_back(d - 1);  // oneDNN counts the gaps
    Fused f = fuse_after(n.outputs[0], true);
    // oneDNN 2.6's swish post-op costs about 0.4 ns per value, more than
    // the convolution itself on a large activation (EfficientNet-B0's 32
    // channels at 112x112, depthwise: 0.07 ms alone, 0.23-0.35 with it). A
    // generated loop on the same threads, in place, costs about 0.1 ns per
    // value (as measured in the model: 0.70 -> 0.28 + 0.36 ms on its 1x1 16->96
    // convolution at 112x112). On small activations the two cost about
    // the same, and the extra step is not worth it.
    Fused silu;
    if (f.eltwise.size() == 1 && f.eltwise[0].alg == dnnl::algorithm::eltwise_swish && f.sum_position < 0 &&
        ir::checked_numel(out) >= kSiluLoopFrom) {
      silu = std::exchange(f, Fused{});
      f.value = n.outputs[0];
    }
    md bias_md = b ? md({wdims[0]}, dt::f32, dnnl::memory::format_tag::x) : md();
    auto describe = [&](const Dims& src, const Dims& strides) {
      auto with = [&](bool blocked, dnnl::algorithm alg = dnnl::algorithm::convolution_direct) {
        // An image's 3 channels are not padded to 16: oneDNN reads them as they are.
        auto layout = [&](const Dims& d) {
          return md(to_dnnl(d), dt::f32, blocked && d[1] >= 16 ? channel_blocked_tag(d.size()) : dnnl::memory::format_tag::any);
        };
        dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, alg, layout(src),
                                             md(wei, dt::f32, dnnl::memory::format_tag::any), bias_md, layout(out),
                                             to_dnnl(strides), dil, to_dnnl(geo.pad_begin), to_dnnl(geo.pad_end));
        return dnnl::convolution_forward::primitive_desc(desc, post_op_attr(f), cpu_engine());
      };
      // oneDNN 2.6's Winograd kernels (AVX-512 only, in 16-channel blocks)
      // run ResNet's 3x3 convolutions 1.3-2.1x faster than its direct ones,
      // at batch 1 and 8 alike (relative error 2e-6). Channels in whole
      // blocks: winograd_weights.hpp transforms only unpadded weights.
      const bool square3 = kernel == Dims{3, 3} && std::all_of(strides.begin(), strides.end(), [](int64_t s) { return s == 1; }) &&
                           std::all_of(geo.dilations.begin(), geo.dilations.end(), [](int64_t d) { return d == 1; });
      if (square3 && group == 1 && in[1] % 16 == 0 && out[1] % 16 == 0 && winograd_enabled()) {
        try {
          return with(true, dnnl::algorithm::convolution_winograd);
        } catch (const dnnl::error&) {  // not on this CPU, or not for these pads
        }
      }
      if (prefers_channel_blocks(in, out)) {
        // Only where oneDNN has a fast kernel for the blocks (not for some
        // grouped shapes, for one): its reference kernel is never worth it.
        auto pd = with(true);
        if (!reference_kernel(pd)) return pd;
      }
      return with(false);
    };
    auto emit = [&](const dnnl::convolution_forward::primitive_desc& pd, int src) {
      emit_conv(n, pd, src, w, b, wei, bias_md, group, f);
      if (!silu.nodes.empty()) emit_silu(n.describe(), n.outputs[0], silu);
      return true;
    };
    // A strided 1x1 convolution reads only every stride-th pixel. oneDNN 2.6
    // runs some of these 1.5-3.4x slower than a copy of those pixels (1/stride^2
    // of the input) followed by a unit-stride convolution: resnet50's 512->1024
    // projection; its others, and resnet18's, cost about the same either way.
    // So the lowering subsamples first where the layouts allow. oneDNN accepts
    // a strided view only when stride x length stays within each axis: every
    // axis's length must be a multiple of its stride.
    bool subsample = std::any_of(geo.strides.begin(), geo.strides.end(), [](int64_t s) { return s > 1; });
    for (size_t i = 0; i < kernel.size(); ++i)
      subsample &= kernel[i] == 1 && geo.pad_begin[i] == 0 && geo.pad_end[i] == 0 && in[i + 2] % geo.strides[i] == 0;
    if (subsample) {
      Dims picked = in;
      std::copy(geo.out.begin(), geo.out.end(), picked.begin() + 2);
      const auto pd = describe(picked, Dims(geo.strides.size(), 1));
      // Read the input in the layout it has where that is unblocked, else in the convolution's.
      const md& current = val(n.inputs[0]).layout;
      auto view = current.dims() == to_dnnl(in) ? strided_view(current, in, picked, geo.strides) : std::nullopt;
      if (!view) view = strided_view(pd.src_desc(), in, picked, geo.strides);
      if (view) {
        const int whole = as_layout(n.inputs[0], view->first);
        const int src = add_buffer(Buffer::Kind::Arena, 0, int64_t(pd.src_desc().get_size()), n.inputs[0] + "#subsampled");
        add_reorder("subsample " + n.inputs[0], whole, src, view->second, pd.src_desc());
        return emit(pd, src);
      }
    }
    const auto pd = describe(in, geo.strides);
    return emit(pd, as_layout(n.inputs[0], pd.src_desc()));
  }

  // x * sigmoid(x) over every value of `from`'s buffer, whatever its layout
  // (the padding of a channel block stays 0), which then holds `f.value`.
  void emit_silu(const std::string& label, const std::string& from, const Fused& f) {
    const Val v = val(from);
    auto loop = std::make_unique<Loop>();
    loop->shape = {int64_t(v.layout.get_size() / 4)};
    loop->operands.push_back({0, {1}});
    loop->code = {{Loop::Op::Load, 0, -1, 0, 0}, {Loop::Op::Sigmoid, 0, -1, 0, 0}, {Loop::Op::Mul, 0, 1, 0, 0}};
    loop->stores = {{2, 0}};
    Step s;
    s.label = "SiLU in place after " + label;
    s.args = {v.buffer};
    s.writes = {1};
    s.loop = std::move(loop);
    vals_[f.value] = v;
    p_.steps.push_back(std::move(s));
    absorb(f);
  }

  void emit_conv(const ir::Node& n, const dnnl::convolution_forward::primitive_desc& pd, int src, const ir::Tensor* w,
                 const ir::Tensor* b, const dnnl::memory::dims& wei, const md& bias_md, int64_t group, const Fused& f) {
    const Dims wdims = w->dims();
    const size_t rank = wdims.size();
    md user_wei = group > 1 ? md(wei, dt::f32, rank == 3 ? dnnl::memory::format_tag::goiw : rank == 4 ? dnnl::memory::format_tag::goihw : dnnl::memory::format_tag::goidhw)
                            : plain_md(wdims);
    emit_weighted(n, pd, src, user_wei, w, b, bias_md, f);
  }

  // A convolution's step (either direction): its weights reordered once into
  // the layout the primitive chose, the source read in the layout it wants.
  void emit_weighted(const ir::Node& n, const dnnl::primitive_desc_base& pd, int src, const md& user_wei, const ir::Tensor* w,
                     const ir::Tensor* b, const md& bias_md, const Fused& f) {
    std::unordered_map<int, dnnl::memory> constants{{DNNL_ARG_WEIGHTS, constant_memory(user_wei, w->raw(), pd.weights_desc(0))}};
    if (b) constants[DNNL_ARG_BIAS] = constant_memory(bias_md, b->raw(), bias_md);
    compiled();
    emit_with_dst(n.describe(), pd, {{DNNL_ARG_SRC, pd.src_desc(0)}}, {src}, std::move(constants), f, pd.dst_desc(0),
                  is_plain(pd.dst_desc(0), dims(f.value)));
    if (trials_) trials_->push_back({p_.steps.size() - 1, user_wei, w->raw()});
  }

  // ---- ConvTranspose: oneDNN deconvolution ---------------------------------------
  bool lower_conv_transpose(const ir::Node& n) {
    if (n.inputs.size() < 2 || !is_f32(n.inputs[0]) || n.outputs.size() != 1) return false;
    const ir::Tensor* w = constant(n.inputs[1]);
    const bool has_bias = n.inputs.size() > 2 && !n.inputs[2].empty();
    const ir::Tensor* b = has_bias ? constant(n.inputs[2]) : nullptr;
    if (!w || w->dtype() != DType::Float32 || (has_bias && (!b || b->dtype() != DType::Float32))) return false;
    const Dims in = dims(n.inputs[0]), out = dims(n.outputs[0]), wdims = w->dims();
    const size_t rank = in.size();
    if (rank < 3 || rank > 5 || wdims.size() != rank || out.size() != rank) return false;
    ref::KernelContext ctx(n, {}, nullptr);
    const int64_t group = ctx.attr_int("group", 1);
    if (group < 1 || in[1] % group || wdims[0] != in[1] || out[1] != wdims[1] * group) return false;
    const ref::Geometry geo = ref::transposed_geometry(ctx, Dims(in.begin() + 2, in.end()),
                                                       ref::kernel_shape_of(ctx, Dims(wdims.begin() + 2, wdims.end())));
    if (geo.out != Dims(out.begin() + 2, out.end())) return false;
    // oneDNN's size rule has no output padding: it is the geometry's end padding
    // already. oneDNN takes no negative padding; the reference kernel does.
    auto negative = [](const Dims& pads) { return std::any_of(pads.begin(), pads.end(), [](int64_t p) { return p < 0; }); };
    if (negative(geo.pad_begin) || negative(geo.pad_end)) return false;
    dnnl::memory::dims dil;
    for (int64_t d : geo.dilations) dil.push_back(d - 1);  // oneDNN counts the gaps
    // ONNX's weights are [C_in, C_out / group, kernel...]; oneDNN names them
    // the other way round, so they are described by strides as they lie.
    const int64_t per_group_in = in[1] / group, per_group_out = wdims[1];
    int64_t window = 1;
    for (size_t d = 2; d < rank; ++d) window *= wdims[d];
    dnnl::memory::dims wei = {per_group_out, per_group_in}, wei_strides = {window, per_group_out * window};
    if (group > 1) {
      wei.insert(wei.begin(), group);
      wei_strides.insert(wei_strides.begin(), per_group_in * per_group_out * window);
    }
    for (size_t d = 2, stride = size_t(window); d < rank; ++d) {
      stride /= size_t(wdims[d]);
      wei.push_back(wdims[d]);
      wei_strides.push_back(int64_t(stride));
    }
    const md user_wei(wei, dt::f32, wei_strides);
    const md bias_md = b ? md({out[1]}, dt::f32, dnnl::memory::format_tag::x) : md();
    const Dims kernel(wdims.begin() + 2, wdims.end());
    bool by_taps = group == 1;
    for (size_t d = 0; d < kernel.size(); ++d)
      by_taps &= geo.strides[d] == kernel[d] && geo.dilations[d] == 1 && geo.pad_begin[d] == 0 && geo.pad_end[d] == 0;
    if (by_taps && lower_conv_transpose_by_taps(n, w, b, in, out, kernel)) return true;
    Fused f = fuse_after(n.outputs[0], true);
    auto any = [](const Dims& d) { return md(to_dnnl(d), dt::f32, dnnl::memory::format_tag::any); };
    dnnl::deconvolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct, any(in),
                                           md(wei, dt::f32, dnnl::memory::format_tag::any), bias_md, any(out), to_dnnl(geo.strides), dil,
                                           to_dnnl(geo.pad_begin), to_dnnl(geo.pad_end));
    dnnl::deconvolution_forward::primitive_desc pd(desc, post_op_attr(f), cpu_engine());
    emit_weighted(n, pd, as_layout(n.inputs[0], pd.src_desc()), user_wei, w, b, bias_md, f);
    return true;
  }

  // A kernel as large as its stride puts each input pixel's products with
  // the kernel's taps side by side in the output, none overlapping: a 1x1
  // convolution to taps x C_out channels computes them all, and one copy
  // moves each tap's channels to its pixel (tap_views). oneDNN 2.6's
  // deconvolution took 6-10x as long as the two for a U-Net's 2x2
  // upsampling (32 -> 16 channels, 64x64 -> 128x128, batch 8: 6.8 ms against
  // 0.67 + 0.44). Activations fuse into the convolution; a residual sum does
  // not (its layout is the output's).
  bool lower_conv_transpose_by_taps(const ir::Node& n, const ir::Tensor* w, const ir::Tensor* b, const Dims& in,
                                    const Dims& out, const Dims& kernel) {
    const int64_t taps = ir::checked_numel(kernel), channels = out[1], in_channels = in[1], wide = taps * channels;
    // In channel blocks where a convolution would compute so, or where the input already is.
    const bool blocked =
        channels % 16 == 0 && (prefers_channel_blocks(in, out) || channel_block(val(n.inputs[0]).layout) == 16);
    auto layout = [&](const Dims& d) { return blocked ? md(to_dnnl(d), dt::f32, channel_blocked_tag(d.size())) : channels_last(d); };
    Dims taps_dims = in;
    taps_dims[1] = wide;
    const md taps_md = layout(taps_dims);
    Fused f = fuse_after(n.outputs[0], false);
    const bool to_output = output_of_.count(f.value) > 0;
    const md out_md = to_output ? plain_md(out) : layout(out);
    const auto views = tap_views(taps_md, out_md, kernel, channels);
    if (!views) return false;

    Dims wei_dims = {wide, in_channels};
    wei_dims.resize(in.size(), 1);
    const md bias_md = b ? md({wide}, dt::f32, dnnl::memory::format_tag::x) : md();
    const dnnl::memory::dims ones(kernel.size(), 1), zeros(kernel.size(), 0);
    dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                         md(to_dnnl(in), dt::f32, dnnl::memory::format_tag::any),
                                         md(to_dnnl(wei_dims), dt::f32, dnnl::memory::format_tag::any), bias_md, taps_md, ones,
                                         zeros, zeros, zeros);
    dnnl::convolution_forward::primitive_desc pd(desc, post_op_attr(f), cpu_engine());
    if (reference_kernel(pd) || pd.dst_desc() != taps_md) return false;

    // ONNX's weights [C_in, C_out, taps] as the convolution's [taps x C_out, C_in], the bias once per tap.
    auto weights = std::make_shared<std::vector<float>>(size_t(wide * in_channels));
    const float* from = w->data<float>();
    for (int64_t i = 0; i < in_channels; ++i)
      for (int64_t c = 0; c < channels; ++c)
        for (int64_t t = 0; t < taps; ++t) (*weights)[size_t((t * channels + c) * in_channels + i)] = *from++;
    std::unordered_map<int, dnnl::memory> constants{
        {DNNL_ARG_WEIGHTS, constant_memory(plain_md(wei_dims), weights->data(), pd.weights_desc(), weights)}};
    if (b) {
      auto bias = std::make_shared<std::vector<float>>(size_t(wide));
      for (int64_t t = 0; t < taps; ++t) std::copy_n(b->data<float>(), channels, bias->begin() + t * channels);
      constants[DNNL_ARG_BIAS] = constant_memory(bias_md, bias->data(), bias_md, bias);
    }
    compiled();
    const int src = as_layout(n.inputs[0], pd.src_desc());
    const int products = add_buffer(Buffer::Kind::Arena, 0, int64_t(taps_md.get_size()), n.outputs[0] + "#taps");
    add_primitive(n.describe(), pd, {src, products}, {0, 1}, {{DNNL_ARG_SRC, pd.src_desc()}, {DNNL_ARG_DST, taps_md}},
                  std::move(constants));
    add_reorder("taps to pixels " + f.value, products, define(f.value, out_md, to_output), views->first, views->second);
    absorb(f);
    return true;
  }

  // ---- Gemm and MatMul: oneDNN matmul ---------------------------------------------
  bool lower_gemm(const ir::Node& n) {
    if (n.inputs.size() < 2 || n.outputs.size() != 1 || !is_f32(n.inputs[0]) || !is_f32(n.inputs[1])) return false;
    ref::KernelContext ctx(n, {}, nullptr);
    const bool ta = ctx.attr_int("transA", 0) != 0, tb = ctx.attr_int("transB", 0) != 0;
    const float alpha = ctx.attr_float("alpha", 1.0f), beta = ctx.attr_float("beta", 1.0f);
    const Dims a = dims(n.inputs[0]), bdims = dims(n.inputs[1]), out = dims(n.outputs[0]);
    if (a.size() != 2 || bdims.size() != 2 || out.size() != 2) return false;
    const int64_t m = out[0], nn = out[1], k = ta ? a[0] : a[1];
    const ir::Tensor* bw = constant(n.inputs[1]);
    if (!bw) return false;

    // alpha folds into the weights, beta * C into the bias (or a residual).
    std::vector<float> bias;
    std::string residual;
    if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
      const std::string& c = n.inputs[2];
      const ir::Tensor* ct = constant(c);
      const Dims cd = dims(c);
      if (ct && ct->dtype() == DType::Float32 && (ct->numel() == 1 || (ct->numel() == nn && cd.back() == nn))) {
        for (int64_t j = 0; j < nn; ++j) bias.push_back(beta * ct->data<float>()[ct->numel() == 1 ? 0 : j]);
      } else if (cd == out && beta == 1.0f && is_f32(c)) {
        residual = c;
      } else {
        return false;
      }
    }
    const float* weights = bw->data<float>();
    std::shared_ptr<std::vector<float>> scaled;
    if (alpha != 1.0f) {
      scaled = std::make_shared<std::vector<float>>(weights, weights + bw->numel());
      for (float& x : *scaled) x *= alpha;
      weights = scaled->data();
    }
    md src_md(to_dnnl({m, k}), dt::f32, ta ? dnnl::memory::dims{1, m} : dnnl::memory::dims{k, 1});
    md user_wei(to_dnnl({k, nn}), dt::f32, tb ? dnnl::memory::dims{1, k} : dnnl::memory::dims{nn, 1});
    return emit_matmul(n, n.inputs[0], src_md, user_wei, weights, scaled, bias, residual, out);
  }

  bool lower_matmul(const ir::Node& n) {
    if (n.inputs.size() != 2 || n.outputs.size() != 1 || !is_f32(n.inputs[0]) || !is_f32(n.inputs[1])) return false;
    const Dims a = dims(n.inputs[0]), b = dims(n.inputs[1]), out = dims(n.outputs[0]);
    if (a.size() < 2 || b.size() < 2) return false;
    const ir::Tensor* bw = constant(n.inputs[1]);
    if (bw && b.size() == 2) {
      // A stack of rows times one matrix: a single 2-D product.
      int64_t rows = 1;
      for (size_t i = 0; i + 1 < a.size(); ++i) rows *= a[i];
      const int64_t k = a.back(), nn = b[1];
      return emit_matmul(n, n.inputs[0], plain_md({rows, k}), plain_md({k, nn}), bw->data<float>(), nullptr, {}, "", out);
    }
    // Batched: both operands at runtime (or batched weights), batch dims broadcast.
    const size_t rank = std::max(a.size(), b.size());
    if (rank > 6) return false;
    auto widen = [&](Dims d) {
      d.insert(d.begin(), rank - d.size(), 1);
      return d;
    };
    const Dims aw = widen(a), bwd = widen(b), ow = widen(out);
    Fused f = fuse_after(n.outputs[0], true);
    if (dims(f.value) != out) return false;
    md a_md = plain_md(aw), b_md = plain_md(bwd), o_md = plain_md(ow);
    dnnl::matmul::desc desc(a_md, b_md, o_md);
    dnnl::matmul::primitive_desc pd(desc, post_op_attr(f), cpu_engine());
    std::vector<std::pair<int, md>> rt{{DNNL_ARG_SRC, a_md}};
    std::unordered_map<int, dnnl::memory> constants;
    std::vector<int> bufs{plain(n.inputs[0])};
    if (bw) {
      constants[DNNL_ARG_WEIGHTS] = constant_memory(b_md, bw->raw(), b_md);
    } else {
      rt.push_back({DNNL_ARG_WEIGHTS, b_md});
      bufs.push_back(plain(n.inputs[1]));
    }
    compiled();
    emit_with_dst(n.describe(), pd, std::move(rt), std::move(bufs), std::move(constants), f, o_md, true);
    return true;
  }

  // [rows, k] x constant [k, n] (+ bias) with fused post-ops; the bias may
  // also come from an Add of a constant row vector that follows.
  // `keep` holds `weights` if the graph does not.
  bool emit_matmul(const ir::Node& n, const std::string& a, const md& src_md, const md& user_wei, const float* weights,
                   std::shared_ptr<const void> keep, std::vector<float> bias, const std::string& residual, const Dims& out) {
    const int64_t rows = src_md.dims()[0], k = src_md.dims()[1], nn = user_wei.dims()[1];
    std::string value = n.outputs[0];
    std::vector<size_t> bias_nodes;
    if (bias.empty() && residual.empty() && single_use(value)) {
      const ir::Node& c = g_.nodes[consumers(value)[0]];
      if (c.op_type == "Add" && c.domain.empty() && c.inputs.size() == 2) {
        const std::string& other = c.inputs[0] == value ? c.inputs[1] : c.inputs[0];
        const ir::Tensor* t = constant(other);
        // A bias runs along the last axis: [n], [1, n], [1, ..., 1, n] (an
        // [n, 1] column would broadcast the other way).
        const Dims bd = t ? dims(other) : Dims{};
        const bool row = !bd.empty() && bd.back() == nn && ir::checked_numel(bd) == nn;
        if (t && t->dtype() == DType::Float32 && row && dims(c.outputs[0]) == out) {
          bias.assign(t->data<float>(), t->data<float>() + nn);
          bias_nodes.push_back(consumers(value)[0]);
          value = c.outputs[0];
        }
      }
    }
    Fused f = fuse_after(value, residual.empty());
    if (!residual.empty()) {
      f.sum_position = 0;
      f.residual = residual;
    }
    f.nodes.insert(f.nodes.begin(), bias_nodes.begin(), bias_nodes.end());
    if (dims(f.value) != out || rows * nn * 4 != bytes_of(f.value)) return false;
    const md dst_md = plain_md({rows, nn});
    md bias_md = bias.empty() ? md() : plain_md({1, nn});
    dnnl::matmul::desc desc(src_md, md({k, nn}, dt::f32, dnnl::memory::format_tag::any), bias_md, dst_md);
    dnnl::matmul::primitive_desc pd(desc, post_op_attr(f), cpu_engine());
    std::unordered_map<int, dnnl::memory> constants{
        {DNNL_ARG_WEIGHTS, constant_memory(user_wei, weights, pd.weights_desc(), std::move(keep))}};
    if (!bias.empty()) {
      auto held = std::make_shared<const std::vector<float>>(std::move(bias));
      constants[DNNL_ARG_BIAS] = constant_memory(bias_md, held->data(), bias_md, held);
    }
    const int src = plain(a);
    compiled();
    // The destination is [rows, n]: the same bytes as the value's own shape.
    emit_with_dst(n.describe(), pd, {{DNNL_ARG_SRC, src_md}}, {src}, std::move(constants), f, dst_md, true);
    return true;
  }

  // ---- pooling ---------------------------------------------------------------
  static md channels_last(const Dims& d) {
    using tag = dnnl::memory::format_tag;
    return md(to_dnnl(d), dt::f32, d.size() == 3 ? tag::nwc : d.size() == 4 ? tag::nhwc : tag::ndhwc);
  }

  bool lower_pool(const ir::Node& n) {
    if (n.inputs.empty() || !is_f32(n.inputs[0])) return false;
    if (!only_first_output_wanted(n)) return false;
    const Dims in = dims(n.inputs[0]), out = dims(n.outputs[0]);
    if (in.size() < 3 || in.size() > 5) return false;
    ref::KernelContext ctx(n, {}, nullptr);
    const Dims spatial(in.begin() + 2, in.end());
    const bool global = n.op_type.rfind("Global", 0) == 0;
    dnnl::algorithm alg = dnnl::algorithm::pooling_max;
    ref::Geometry geo;
    if (global) {
      geo.kernel = spatial;
      geo.strides.assign(spatial.size(), 1);
      geo.dilations.assign(spatial.size(), 1);
      geo.pad_begin.assign(spatial.size(), 0);
      geo.pad_end.assign(spatial.size(), 0);
      geo.out.assign(spatial.size(), 1);
      if (n.op_type == "GlobalAveragePool") alg = dnnl::algorithm::pooling_avg_exclude_padding;
    } else {
      if (ctx.attr_int("storage_order", 0) != 0 && n.outputs.size() > 1) return false;
      if (n.op_type == "AveragePool")
        alg = ctx.attr_int("count_include_pad", 0) ? dnnl::algorithm::pooling_avg_include_padding
                                                   : dnnl::algorithm::pooling_avg_exclude_padding;
      geo = ref::forward_geometry(ctx, spatial, ctx.attr_ints("kernel_shape"), ctx.attr_int("ceil_mode", 0) != 0);
      // ceil_mode: oneDNN sizes its output by floor, so the extra window is end padding.
      for (size_t d = 0; d < spatial.size(); ++d)
        geo.pad_end[d] = std::max(geo.pad_end[d], (geo.out[d] - 1) * geo.strides[d] + geo.extent(d) - spatial[d] - geo.pad_begin[d]);
      if (alg == dnnl::algorithm::pooling_avg_include_padding && ctx.attr_int("ceil_mode", 0)) return false;
    }
    if (Dims(out.begin() + 2, out.end()) != geo.out) return false;
    const md src_md = val(n.inputs[0]).layout;
    // One channels-last image: a pixel split (ChannelsLastMeanKernel) beats
    // oneDNN's split by channel block. Across images oneDNN splits by image,
    // which was faster (efficientnet_v2_s at batch 8: 2.1 against 4.1 ms).
    if (n.op_type == "GlobalAveragePool" && host_kernels_ && in[0] == 1 && src_md == channels_last(in)) {
      const int64_t pixels = ir::checked_numel(spatial);
      auto kernel = std::make_unique<ChannelsLastMeanKernel>(pixels, in[1], std::min<int64_t>(omp_get_max_threads(), pixels));
      const int scratch = add_buffer(Buffer::Kind::Arena, 0, kernel->scratch_bytes(), n.outputs[0] + "#partial sums");
      // [N, C, 1, ...]: channels-last bytes, which the convolution after a
      // squeeze-and-excitation pooling reads as they are.
      const int dst = define(n.outputs[0], channels_last(out), false);
      add_kernel(n.describe(), {val(n.inputs[0]).buffer, dst, scratch}, {0, 1, 1}, std::move(kernel));
      compiled();
      return true;
    }
    dnnl::memory::dims dil;
    for (int64_t d : geo.dilations) dil.push_back(d - 1);
    auto describe = [&](const md& src) {
      dnnl::pooling_v2_forward::desc desc(dnnl::prop_kind::forward_inference, alg, src,
                                          md(to_dnnl(out), dt::f32, dnnl::memory::format_tag::any), to_dnnl(geo.strides),
                                          to_dnnl(geo.kernel), dil, to_dnnl(geo.pad_begin), to_dnnl(geo.pad_end));
      return dnnl::pooling_v2_forward::primitive_desc(desc, user_scratchpad(), cpu_engine());
    };
    dnnl::pooling_v2_forward::primitive_desc pd = describe(src_md);
    int src = val(n.inputs[0]).buffer;
    // On plain (channels-first) input oneDNN 2.6 pools with a simple C++
    // loop: after a GroupNorm in a 1-D conv net, 0.56 ms against 0.065 for
    // its channels-last kernel. A reorder there costs less than the
    // difference.
    if (src_md == plain_md(in) && !global && std::string_view(pd.impl_info_str()).rfind("jit", 0) != 0) {
      const md cl = channels_last(in);
      if (auto other = describe(cl); std::string_view(other.impl_info_str()).rfind("jit", 0) == 0) {
        pd = other;
        src = as_layout(n.inputs[0], cl);
      }
    }
    Fused f;
    f.value = n.outputs[0];
    compiled();
    emit_with_dst(n.describe(), pd, {{DNNL_ARG_SRC, pd.src_desc()}}, {src}, {}, f, pd.dst_desc(), is_plain(pd.dst_desc(), out));
    return true;
  }

  // ---- Resize ------------------------------------------------------------------
  // A float Resize or Upsample of the spatial axes whose plan of taps (the
  // reference kernel's own) is what oneDNN's resampling computes: FPN's
  // nearest upsampling by whole factors, a detector's bilinear image resize.
  // It then runs in the activations' blocked layout; as a reference-kernel
  // step it needed them plain, with reorders on both sides.
  bool lower_resize(const ir::Node& n) {
    if (n.inputs.empty() || !is_f32(n.inputs[0]) || !only_first_output_wanted(n)) return false;
    const Dims in = dims(n.inputs[0]), out = dims(n.outputs[0]);
    if (in.size() < 3 || in.size() > 5 || in[0] != out[0] || in[1] != out[1]) return false;
    if (ir::checked_numel(in) == 0 || ir::checked_numel(out) == 0) return false;
    // The plan reads the other inputs' values (constants here) and only the shape of X.
    static const char shape_only = 0;
    const ir::Tensor x = ir::Tensor::view(DType::Float32, in, const_cast<char*>(&shape_only));
    std::vector<const ir::Tensor*> inputs{&x};
    for (size_t i = 1; i < n.inputs.size(); ++i) {
      inputs.push_back(n.inputs[i].empty() ? nullptr : constant(n.inputs[i]));
      if (!n.inputs[i].empty() && !inputs.back()) return false;
    }
    const ref::KernelContext ctx(n, inputs, nullptr);
    const std::string mode = ctx.attr_string("mode", "nearest");
    if (mode != "nearest" && mode != "linear") return false;
    ref::ResizePlan plan;
    try {
      plan = ref::resize_plan(ctx);
    } catch (const ir::Error&) {
      return false;  // the reference kernel reports it at run time
    }
    if (plan.out_dims != out) return false;
    for (size_t d = 0; d < in.size(); ++d)
      if (!onednn_takes_these_taps(plan.taps[d], in[d], mode == "linear")) return false;
    const md src_md = val(n.inputs[0]).layout;
    dnnl::resampling_forward::desc desc(dnnl::prop_kind::forward_inference,
                                        mode == "linear" ? dnnl::algorithm::resampling_linear : dnnl::algorithm::resampling_nearest,
                                        src_md, md(to_dnnl(out), dt::f32, dnnl::memory::format_tag::any));
    dnnl::resampling_forward::primitive_desc pd(desc, user_scratchpad(), cpu_engine());
    Fused f;
    f.value = n.outputs[0];
    compiled();
    emit_with_dst(n.describe(), pd, {{DNNL_ARG_SRC, src_md}}, {val(n.inputs[0]).buffer}, {}, f, pd.dst_desc(),
                  is_plain(pd.dst_desc(), out));
    return true;
  }

  // Whether oneDNN's resampling reads these taps along an axis of `in`
  // samples (one list per output coordinate). Its mapping, in float: source
  // s = (o + 0.5) * in / out - 0.5; nearest takes round(s), halves away from
  // zero; linear floor(s) and floor(s) + 1 weighted by the distance, indices
  // clamped to the axis. An axis that keeps its length maps o to o. The
  // reference works in double: linear weights may differ by the rounding of
  // s in float (a few ulp of `in`; RetinaNet's 320 -> 800 image resize).
  static bool onednn_takes_these_taps(const std::vector<std::vector<ref::ResizeTap>>& taps, int64_t in, bool linear) {
    const int64_t out = int64_t(taps.size());
    const double tolerance = 1e-6 + 4 * double(std::numeric_limits<float>::epsilon()) * double(in);
    auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i, 0, in - 1); };
    for (int64_t o = 0; o < out; ++o) {
      const float s = (float(o) + 0.5f) * float(in) / float(out) - 0.5f;
      std::map<int64_t, double> want, have;
      if (linear) {
        const float lo = std::floor(s);
        want[clamp(int64_t(lo))] += 1.0 - double(s - lo);
        want[clamp(int64_t(lo) + 1)] += double(s - lo);
      } else {
        want[clamp(int64_t(std::round(s)))] = 1;
      }
      for (const ref::ResizeTap& t : taps[size_t(o)]) have[t.index] += t.weight;
      for (auto* m : {&want, &have})
        for (auto it = m->begin(); it != m->end();) it = std::fabs(it->second) < 1e-6 ? m->erase(it) : std::next(it);
      if (want.size() != have.size()) return false;
      for (auto w = want.begin(), h = have.begin(); w != want.end(); ++w, ++h)
        if (w->first != h->first || std::fabs(w->second - h->second) > tolerance) return false;
    }
    return true;
  }

  // ---- Softmax, LayerNormalization ------------------------------------------------
  bool lower_softmax(const ir::Node& n) {
    if (n.inputs.size() != 1 || !is_f32(n.inputs[0])) return false;
    Dims d = dims(n.inputs[0]);
    if (d.empty()) return false;
    ref::KernelContext ctx(n, {}, nullptr);
    int64_t axis = ctx.attr_int("axis", n.opset >= 13 ? -1 : 1);
    if (axis < 0) axis += int64_t(d.size());
    if (axis < 0 || axis >= int64_t(d.size())) return false;
    if (n.opset < 13) {  // the input is coerced to 2-D around the axis
      int64_t outer = 1, inner = 1;
      for (size_t i = 0; i < d.size(); ++i) (int64_t(i) < axis ? outer : inner) *= d[i];
      d = {outer, inner};
      axis = 1;
    }
    const md m = plain_md(d);
    dnnl::softmax_v2_forward::desc desc(dnnl::prop_kind::forward_inference,
                                        n.op_type == "Softmax" ? dnnl::algorithm::softmax_accurate : dnnl::algorithm::softmax_log,
                                        m, m, int(axis));
    dnnl::softmax_v2_forward::primitive_desc pd(desc, user_scratchpad(), cpu_engine());
    Fused f;
    f.value = n.outputs[0];
    const int src = plain(n.inputs[0]);
    compiled();
    emit_with_dst(n.describe(), pd, {{DNNL_ARG_SRC, m}}, {src}, {}, f, m, true);
    return true;
  }

  bool lower_layer_norm(const ir::Node& n) {
    if (n.inputs.size() < 2 || !is_f32(n.inputs[0])) return false;
    if (!only_first_output_wanted(n)) return false;
    const Dims d = dims(n.inputs[0]);
    ref::KernelContext ctx(n, {}, nullptr);
    int64_t axis = ctx.attr_int("axis", -1);
    if (axis < 0) axis += int64_t(d.size());
    if (axis < 0 || axis >= int64_t(d.size())) return false;
    int64_t outer = 1, inner = 1;
    for (size_t i = 0; i < d.size(); ++i) (int64_t(i) < axis ? outer : inner) *= d[i];
    const ir::Tensor* scale = constant(n.inputs[1]);
    const ir::Tensor* shift = n.inputs.size() > 2 && !n.inputs[2].empty() ? constant(n.inputs[2]) : nullptr;
    if (!scale || scale->dtype() != DType::Float32 || scale->numel() != inner) return false;
    if (n.inputs.size() > 2 && !n.inputs[2].empty() && (!shift || shift->dtype() != DType::Float32 || shift->numel() != inner))
      return false;
    const md m = plain_md({outer, inner});
    auto flags = dnnl::normalization_flags::use_scale;
    if (shift) flags = flags | dnnl::normalization_flags::use_shift;
    dnnl::layer_normalization_forward::desc desc(dnnl::prop_kind::forward_inference, m, ctx.attr_float("epsilon", 1e-5f), flags);
    dnnl::layer_normalization_forward::primitive_desc pd(desc, user_scratchpad(), cpu_engine());
    const md vec = plain_md({inner});
    std::unordered_map<int, dnnl::memory> constants{{DNNL_ARG_SCALE, constant_memory(vec, scale->raw(), vec)}};
    if (shift) constants[DNNL_ARG_SHIFT] = constant_memory(vec, shift->raw(), vec);
    Fused f;
    f.value = n.outputs[0];
    const int src = plain(n.inputs[0]);
    compiled();
    emit_with_dst(n.describe(), pd, {{DNNL_ARG_SRC, m}}, {src}, std::move(constants), f, m,
                  true);
    return true;
  }

  // A BatchNormalization the graph passes left: on [N, C], which has no
  // spatial axes for a depthwise Conv (the passes make the others one, 8x
  // faster than this kernel on densenet121). oneDNN's inference kernel, in
  // the layout its input is in, with a Relu that follows fused.
  bool lower_batch_norm(const ir::Node& n) {
    if (n.inputs.size() != 5 || !is_f32(n.inputs[0])) return false;
    if (!only_first_output_wanted(n)) return false;
    const Dims d = dims(n.inputs[0]);
    if (d.size() < 2 || d.size() > 5) return false;
    ref::KernelContext ctx(n, {}, nullptr);
    if (ctx.attr_int("training_mode", 0) != 0) return false;
    if (n.opset < 9 && ctx.attr_int("spatial", 1) == 0) return false;  // statistics per element, not per channel
    const ir::Tensor* params[4];  // scale, B, mean, var
    for (size_t i = 0; i < 4; ++i) {
      params[i] = constant(n.inputs[i + 1]);
      if (!params[i] || params[i]->dtype() != DType::Float32 || params[i]->numel() != d[1]) return false;
    }
    const Val& x = val(n.inputs[0]);
    auto flags = dnnl::normalization_flags::use_global_stats | dnnl::normalization_flags::use_scale |
                 dnnl::normalization_flags::use_shift;
    // oneDNN 2.6 takes no post-ops here, only a Relu of its own.
    Fused f = fuse_chain(n.outputs[0], false, 1);
    if (f.eltwise.size() == 1 && f.eltwise[0].alg == dnnl::algorithm::eltwise_relu && f.eltwise[0].alpha == 0)
      flags = flags | dnnl::normalization_flags::fuse_norm_relu;
    else
      f = fuse_chain(n.outputs[0], false, 0);
    dnnl::batch_normalization_forward::desc desc(dnnl::prop_kind::forward_inference, x.layout, ctx.attr_float("epsilon", 1e-5f), flags);
    dnnl::batch_normalization_forward::primitive_desc pd(desc, user_scratchpad(), cpu_engine());
    const md vec = plain_md({d[1]});
    std::unordered_map<int, dnnl::memory> constants;
    const int args[4] = {DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE};
    for (size_t i = 0; i < 4; ++i) constants[args[i]] = constant_memory(vec, params[i]->raw(), vec);
    compiled();
    emit_with_dst(n.describe(), pd, {{DNNL_ARG_SRC, x.layout}}, {x.buffer}, std::move(constants), f, pd.dst_desc(),
                  is_plain(pd.dst_desc(), d));
    return true;
  }

  // InstanceNormalization with constant scale and B: a host kernel
  // (oneDNN 2.6 has no instance normalization; its batch normalization over
  // [1, N * C, spatial] picks the reference kernel, 3 ms against 0.1).
  bool lower_instance_norm(const ir::Node& n) {
    if (!host_kernels_ || n.inputs.size() != 3 || !is_f32(n.inputs[0]) || n.outputs.size() != 1) return false;
    const Dims d = dims(n.inputs[0]);
    if (d.size() < 3) return false;
    for (size_t i : {1, 2}) {
      const ir::Tensor* t = constant(n.inputs[i]);
      if (!t || t->dtype() != DType::Float32 || t->dims() != Dims{d[1]}) return false;
    }
    const int64_t length = ir::checked_numel(d) / (d[0] * d[1]);
    ref::KernelContext ctx(n, {}, nullptr);
    auto kernel = std::make_unique<InstanceNormKernel>(d[0] * d[1], d[1], length, ctx.attr_float("epsilon", 1e-5f));
    const int src = plain(n.inputs[0]), scale = plain(n.inputs[1]), shift = plain(n.inputs[2]);
    add_kernel(n.describe(), {src, scale, shift, define_plain(n.outputs[0])}, {0, 0, 0, 1}, std::move(kernel));
    compiled();
    return true;
  }

  // ---- RNN, GRU, LSTM: a host kernel, the weights rearranged once ---------------------
  int add_constant(ir::Tensor t, const std::string& name) {
    p_.constants.push_back(std::move(t));
    return add_buffer(Buffer::Kind::Constant, int(p_.constants.size()) - 1, int64_t(p_.constants.back().nbytes()), name);
  }

  // The layer a recurrent node describes (its outputs not yet marked), or
  // nullopt where the node is malformed or outside what the kernels take:
  // its reference kernel then runs it, and reports what is wrong.
  std::optional<RecurrentLayer> read_recurrent(const ir::Node& n) {
    using Cell = RecurrentLayer::Cell;
    RecurrentLayer l;
    l.cell = n.op_type == "LSTM" ? Cell::Lstm : n.op_type == "GRU" ? Cell::Gru : Cell::Rnn;
    const bool lstm = l.cell == Cell::Lstm;
    const size_t max_inputs = lstm ? 8 : 6, max_outputs = lstm ? 3 : 2;
    if (n.inputs.size() < 3 || n.inputs.size() > max_inputs || n.outputs.size() > max_outputs) return std::nullopt;
    auto in = [&](size_t i) { return i < n.inputs.size() ? n.inputs[i] : std::string(); };
    if (!is_f32(in(0)) || !is_f32(in(1)) || !is_f32(in(2)) || (!in(3).empty() && !is_f32(in(3)))) return std::nullopt;
    const Dims wd = dims(in(1)), rd = dims(in(2));

    ref::KernelContext ctx(n, {}, nullptr);
    const Dims x = dims(in(0));
    const int64_t layout = n.opset >= 14 ? ctx.attr_int("layout", 0) : 0;
    const std::string direction = ctx.attr_string("direction", "forward");
    if (x.size() != 3 || (layout != 0 && layout != 1)) return std::nullopt;
    if (direction != "forward" && direction != "reverse" && direction != "bidirectional") return std::nullopt;
    l.batch_major = layout == 1;
    l.seq = l.batch_major ? x[1] : x[0];
    l.batch = l.batch_major ? x[0] : x[1];
    l.input = x[2];
    l.reverse = direction == "reverse";
    l.directions = direction == "bidirectional" ? 2 : 1;
    const int64_t D = l.directions, G = l.gates();
    if (wd.size() != 3 || wd[0] != D || wd[1] % G != 0 || wd[2] != l.input) return std::nullopt;
    l.hidden = ctx.attr_int("hidden_size", wd[1] / G);
    const int64_t H = l.hidden;
    if (H < 1 || wd[1] != G * H || rd != Dims{D, G * H, H} || (!in(3).empty() && dims(in(3)) != Dims{D, 2 * G * H}))
      return std::nullopt;
    const Dims state = l.state_dims();
    if (!in(4).empty() && (dims(in(4)) != Dims{l.batch} || (dtype(in(4)) != DType::Int32 && dtype(in(4)) != DType::Int64)))
      return std::nullopt;
    for (size_t i : {5, 6})
      if (!in(i).empty() && (!is_f32(in(i)) || dims(in(i)) != state)) return std::nullopt;
    if (!in(7).empty() && (!is_f32(in(7)) || dims(in(7)) != Dims{D, 3 * H})) return std::nullopt;
    l.sequence_lens_int64 = !in(4).empty() && dtype(in(4)) == DType::Int64;
    l.linear_before_reset = l.cell == Cell::Gru && ctx.attr_int("linear_before_reset", 0) != 0;
    l.input_forget = lstm && ctx.attr_int("input_forget", 0) != 0;
    l.clip = ctx.has_attr("clip") ? ctx.attr_float("clip", 0) : 0;
    static const std::vector<std::string> defaults[] = {{"Tanh"}, {"Sigmoid", "Tanh"}, {"Sigmoid", "Tanh", "Tanh"}};
    std::vector<ref::RecurrentActivation> acts;
    try {
      acts = ref::recurrent_activations(ctx, defaults[int(l.cell)], D);
    } catch (const ir::Error&) {
      return std::nullopt;
    }
    for (const auto& a : acts) {
      RecurrentLayer::Activation k{};
      if (!RecurrentKernel::activation_named(a.name, k.act)) return std::nullopt;
      k.alpha = float(a.alpha);
      k.beta = float(a.beta);
      l.activations.push_back(k);
    }
    l.sequence_lens = !in(4).empty();
    return l;
  }

  bool lower_recurrent(const ir::Node& n) {
    using Cell = RecurrentLayer::Cell;
    std::optional<RecurrentLayer> read = read_recurrent(n);
    if (!read) return false;
    RecurrentLayer l = std::move(*read);
    const bool lstm = l.cell == Cell::Lstm;
    auto in = [&](size_t i) { return i < n.inputs.size() ? n.inputs[i] : std::string(); };
    const ir::Tensor* w = constant(in(1));
    const ir::Tensor* r = constant(in(2));
    const ir::Tensor* b = in(3).empty() ? nullptr : constant(in(3));
    if (!w || !r || (!in(3).empty() && !b)) return false;
    const int64_t D = l.directions, G = l.gates(), H = l.hidden;
    const Dims state = l.state_dims();
    // Directions first, then groups of batch rows, over the threads.
    l.chunks = std::clamp<int64_t>(omp_get_max_threads() / D, 1, l.batch);

    // The products: weights as oneDNN packs them, W's and R's biases added
    // into the projection's (but R's of a GRU's hidden gate when the reset
    // multiplies it: that one is an operand, rbh).
    auto bias = std::make_shared<ir::Tensor>(DType::Float32, Dims{1, D * G * H});
    ir::Tensor rbh(DType::Float32, {D, H});
    if (b) {
      const float* bs = b->data<float>();
      for (int64_t d = 0; d < D; ++d)
        for (int64_t k = 0; k < G * H; ++k) {
          const float wb = bs[d * 2 * G * H + k], rb = bs[d * 2 * G * H + G * H + k];
          const bool separate = l.linear_before_reset && k >= 2 * H;
          bias->data<float>()[d * G * H + k] = separate ? wb : wb + rb;
          if (separate) rbh.data<float>()[d * H + k - 2 * H] = rb;
        }
    }
    const std::string label = n.describe();
    int64_t scratch = (RecurrentKernel::state_floats(l) * int64_t(sizeof(float)) + 63) / 64 * 64;
    std::vector<std::pair<OneDnnKernel*, int>> made;  // created once the step is in place
    auto product = [&](int64_t rows, int64_t k, int64_t cols, const md& user, const void* data, bool with_bias, int threads) {
      OmpThreads scope(threads);
      const md src = plain_md({rows, k}), dst = plain_md({rows, cols}), bias_md = plain_md({1, cols});
      const md any(to_dnnl({k, cols}), dt::f32, dnnl::memory::format_tag::any);
      const dnnl::matmul::primitive_desc pd(with_bias ? dnnl::matmul::desc(src, any, bias_md, dst) : dnnl::matmul::desc(src, any, dst),
                                            user_scratchpad(), cpu_engine());
      std::unordered_map<int, dnnl::memory> constants{{DNNL_ARG_WEIGHTS, constant_memory(user, data, pd.weights_desc())}};
      if (with_bias) constants[DNNL_ARG_BIAS] = constant_memory(bias_md, bias->raw(), bias_md, bias);
      std::vector<std::pair<int, md>> runtime{{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}};
      RecurrentProduct p;
      if (const md pad = pd.query_md(dnnl::query::scratchpad_md); pad.get_size() > 0) {
        p.scratchpad = scratch;
        scratch = (scratch + int64_t(pad.get_size()) + 63) / 64 * 64;
        runtime.push_back({DNNL_ARG_SCRATCHPAD, pad});
      }
      auto kernel = std::make_unique<OneDnnKernel>(pd, std::move(runtime), std::move(constants));
      made.push_back({kernel.get(), threads});
      p.kernel = std::move(kernel);
      return p;
    };
    // W [D * G * H, I] and each direction's R [G * H, H], read transposed.
    RecurrentProduct projection = product(l.seq * l.batch, l.input, D * G * H, md(to_dnnl({l.input, D * G * H}), dt::f32, to_dnnl({1, l.input})),
                                          w->raw(), true, omp_get_max_threads());
    std::vector<RecurrentProduct> steps;
    auto step_products = [&](int64_t d, int64_t rows) {
      const float* rd = r->data<float>() + d * G * H * H;
      const int64_t first = RecurrentKernel::products_per_item(l) == 2 ? 2 * H : G * H;  // columns of the first product
      steps.push_back(product(rows, H, first, md(to_dnnl({H, first}), dt::f32, to_dnnl({1, H})), rd, false, 1));
      if (first != G * H) steps.push_back(product(rows, H, H, md(to_dnnl({H, H}), dt::f32, to_dnnl({1, H})), rd + 2 * H * H, false, 1));
    };
    for (int64_t d = 0; d < D; ++d)
      for (int64_t part = 0; part < l.chunks; ++part) step_products(d, (part + 1) * l.batch / l.chunks - part * l.batch / l.chunks);
    if (l.sequence_lens)
      for (int64_t d = 0; d < D; ++d) step_products(d, 1);

    std::vector<int> args{plain(in(0)), add_constant(std::move(rbh), label + "#rbh")};
    if (in(4).empty()) {
      ir::Tensor lens(DType::Int32, {l.batch});
      std::fill_n(lens.data<int32_t>(), l.batch, int32_t(l.seq));
      args.push_back(add_constant(std::move(lens), label + "#sequence_lens"));
    } else {
      args.push_back(plain(in(4)));
    }
    auto operand_or_zeros = [&](size_t i, const Dims& d, const char* what) {
      return in(i).empty() ? add_constant(ir::Tensor(DType::Float32, d), label + "#" + what) : plain(in(i));
    };
    args.push_back(operand_or_zeros(5, state, "initial_h"));
    if (lstm) {
      args.push_back(operand_or_zeros(6, state, "initial_c"));
      args.push_back(operand_or_zeros(7, {D, 3 * H}, "P"));
    }
    std::vector<char> writes(args.size(), 0);
    bool* wanted[] = {&l.y, &l.y_h, &l.y_c};
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (n.outputs[i].empty()) continue;
      *wanted[i] = true;
      args.push_back(define_plain(n.outputs[i]));
      writes.push_back(1);
    }
    args.push_back(add_buffer(Buffer::Kind::Arena, 0, scratch, label + "#scratch"));
    writes.push_back(1);
    compiled();
    add_kernel(label, std::move(args), std::move(writes),
               std::make_unique<RecurrentKernel>(label, std::move(l), std::move(projection), std::move(steps)));
    for (const auto& [k, threads] : made) defer_creation(k, label, threads);
    return true;
  }

  // The portable kernel: weights that are inputs too, as it reads them as
  // ONNX lays them out.
  bool portable_recurrent(const ir::Node& n) {
    std::optional<RecurrentLayer> read = read_recurrent(n);
    if (!read) return false;
    const RecurrentLayer& l = *read;
    std::vector<int64_t> activations;
    for (const auto& a : l.activations) {
      uint32_t alpha, beta;
      std::memcpy(&alpha, &a.alpha, sizeof alpha);
      std::memcpy(&beta, &a.beta, sizeof beta);
      activations.insert(activations.end(), {int64_t(a.act), int64_t(alpha), int64_t(beta)});
    }
    std::vector<int> args;
    std::vector<char> writes;
    // Each input or output the node has, as the call's next buffer (null where it has none).
    auto operand = [&](const std::vector<std::string>& values, size_t i, bool output) {
      if (i >= values.size() || values[i].empty()) return Call::null();
      args.push_back(output ? define_plain(values[i]) : plain(values[i]));
      writes.push_back(output);
      return Call::buffer(int(args.size()) - 1);
    };
    static_assert(int(RecurrentLayer::Cell::Lstm) == KILN_PK_CELL_LSTM && int(RecurrentLayer::Cell::Gru) == KILN_PK_CELL_GRU &&
                  int(RecurrentLayer::Act::Softplus) == KILN_PK_RNN_SOFTPLUS && int(RecurrentLayer::Act::Affine) == KILN_PK_RNN_AFFINE);
    const int32_t cell = int32_t(l.cell);
    // Braced lists evaluate in order: the buffers are numbered as listed.
    std::vector<Call::Arg> call_args{
        Call::i32(cell), Call::i64(l.seq), Call::i64(l.batch), Call::i64(l.input), Call::i64(l.hidden), Call::i64(l.directions),
        Call::i32(l.reverse), Call::i32(l.batch_major), Call::i32(l.linear_before_reset), Call::i32(l.input_forget),
        Call::f32(l.clip), Call::array(std::move(activations)),
        operand(n.inputs, 0, false), operand(n.inputs, 1, false), operand(n.inputs, 2, false), operand(n.inputs, 3, false),
        operand(n.inputs, 4, false), Call::i32(l.sequence_lens_int64),
        operand(n.inputs, 5, false), operand(n.inputs, 6, false), operand(n.inputs, 7, false),  // only an LSTM has 6 and 7
        operand(n.outputs, 0, true), operand(n.outputs, 1, true), operand(n.outputs, 2, true)};
    call_args.push_back(scratch(args, writes,
                                kiln_pk_recurrent_scratch_bytes(cell, l.seq, l.batch, l.input, l.hidden, l.directions), n.describe()));
    compiled();
    add_call(n.describe(), std::move(args), std::move(writes), {"kiln_pk_recurrent", std::move(call_args), true});
    return true;
  }

  // ---- Transpose: a oneDNN reorder from permuted strides ----------------------------
  bool lower_transpose(const ir::Node& n) {
    if (!is_f32(n.inputs[0])) return false;
    const Dims in = dims(n.inputs[0]), out = dims(n.outputs[0]);
    if (in.empty()) return false;
    ref::KernelContext ctx(n, {}, nullptr);
    std::vector<int64_t> perm = ctx.attr_ints("perm", {});
    if (perm.empty())
      for (size_t i = in.size(); i-- > 0;) perm.push_back(int64_t(i));
    if (perm.size() != in.size()) return false;
    const auto in_strides = ref::strides_of(in);
    dnnl::memory::dims strides;
    for (int64_t p : perm) {
      if (p < 0 || p >= int64_t(in.size())) return false;
      strides.push_back(in_strides[size_t(p)]);
    }
    const md src_md(to_dnnl(out), dt::f32, strides), dst_md = plain_md(out);
    const int src = plain(n.inputs[0]);
    const int dst = define_plain(n.outputs[0]);
    add_reorder(n.describe(), src, dst, src_md, dst_md);
    compiled();
    return true;
  }

  // ---- Slice and Gather: copies of whole rows where possible ------------------------
  // A Slice with constant parameters as a strided view of its input
  // (element offset and strides), or nothing.
  struct SliceView {
    Dims out;
    int64_t offset = 0;
    std::vector<int64_t> strides;
  };
  std::optional<SliceView> slice_view(const ir::Node& n) {
    const Dims in = dims(n.inputs[0]);
    if (in.empty() || n.outputs.size() != 1) return std::nullopt;
    std::vector<int64_t> starts, ends, axes, steps;
    ref::KernelContext ctx(n, {}, nullptr);
    if (n.opset < 10) {
      starts = ctx.attr_ints("starts");
      ends = ctx.attr_ints("ends");
      axes = ctx.attr_ints("axes", {});
    } else {
      std::vector<std::vector<int64_t>*> params{&starts, &ends, &axes, &steps};
      for (size_t i = 1; i < n.inputs.size() && i <= 4; ++i) {
        if (n.inputs[i].empty()) continue;
        const ir::Tensor* t = constant(n.inputs[i]);
        if (!t) return std::nullopt;
        *params[i - 1] = t->to_int64_vector();
      }
    }
    const ref::SliceWindow w = ref::slice_window(ctx, in, starts, ends, axes, steps);
    if (w.out != dims(n.outputs[0])) return std::nullopt;
    const auto in_strides = ref::strides_of(in);
    int64_t offset = 0;
    std::vector<int64_t> strides;
    for (size_t d = 0; d < in.size(); ++d) {
      offset += w.first[d] * in_strides[d];
      strides.push_back(w.step[d] * in_strides[d]);
    }
    return SliceView{w.out, offset, std::move(strides)};
  }

  bool lower_slice(const ir::Node& n) {
    const auto view = slice_view(n);
    if (!view) return false;
    const int src = plain(n.inputs[0]);
    add_kernel(n.describe(), {src, define_plain(n.outputs[0])}, {0, 1},
               std::make_unique<StridedCopyKernel>(view->out, view->offset, view->strides,
                                                   ir::dtype_size(dtype(n.inputs[0]))));
    compiled();
    return true;
  }

  bool lower_gather(const ir::Node& n) {
    if (n.inputs.size() != 2 || n.outputs.size() != 1) return false;
    const Dims data = dims(n.inputs[0]);
    const DType index_type = dtype(n.inputs[1]);
    if (data.empty() || (index_type != DType::Int64 && index_type != DType::Int32)) return false;
    ref::KernelContext ctx(n, {}, nullptr);
    int64_t axis = ctx.attr_int("axis", 0);
    if (axis < 0) axis += int64_t(data.size());
    if (axis < 0 || axis >= int64_t(data.size())) return false;
    const int src = plain(n.inputs[0]), indices = plain(n.inputs[1]);
    add_kernel(n.describe(), {src, indices, define_plain(n.outputs[0])}, {0, 0, 1},
               std::make_unique<GatherKernel>(n.describe(), data, int(axis), ir::checked_numel(dims(n.inputs[1])), index_type,
                                              ir::dtype_size(dtype(n.inputs[0]))));
    compiled();
    return true;
  }

  // ---- Concat ---------------------------------------------------------------------
  bool lower_concat(const ir::Node& n) {
    const Dims out = dims(n.outputs[0]);
    if (out.empty()) return false;
    ref::KernelContext ctx(n, {}, nullptr);
    int64_t axis = n.opset < 4 ? ctx.attr_int("axis", 1) : ctx.attr_int("axis");  // optional before opset 4
    if (axis < 0) axis += int64_t(out.size());
    if (axis < 0 || axis >= int64_t(out.size())) return false;
    bool any_blocked = false;
    std::vector<std::string> ins;
    for (const auto& in : n.inputs) {
      if (in.empty() || dtype(in) != dtype(n.outputs[0])) return false;
      if (ir::checked_numel(dims(in)) == 0) continue;
      ins.push_back(in);
      if (is_f32(in) && val(in).blocked) any_blocked = true;
    }
    if (ins.empty()) return false;
    if (any_blocked) {
      std::vector<md> srcs;
      for (const auto& in : ins) srcs.push_back(val(in).layout);
      dnnl::concat::primitive_desc pd(md(to_dnnl(out), dt::f32, dnnl::memory::format_tag::any), int(axis), srcs, cpu_engine(), user_scratchpad());
      std::vector<std::pair<int, md>> rt;
      std::vector<int> bufs;
      for (size_t i = 0; i < ins.size(); ++i) {
        rt.push_back({DNNL_ARG_MULTIPLE_SRC + int(i), srcs[i]});
        bufs.push_back(val(ins[i]).buffer);
      }
      Fused f;
      f.value = n.outputs[0];
      compiled();
      emit_with_dst(n.describe(), pd, std::move(rt), std::move(bufs), {}, f, pd.dst_desc(),
                    is_plain(pd.dst_desc(), out));
      return true;
    }
    if (!host_kernels_) return portable_concat(n);
    std::vector<Dims> in_dims;
    std::vector<int> bufs;
    for (const auto& in : ins) {
      in_dims.push_back(dims(in));
      bufs.push_back(plain(in));
    }
    std::vector<char> writes(bufs.size(), 0);
    bufs.push_back(define_plain(n.outputs[0]));
    writes.push_back(1);
    add_kernel(n.describe(), std::move(bufs), std::move(writes),
               std::make_unique<ConcatKernel>(in_dims, int(axis), ir::dtype_size(dtype(n.outputs[0]))));
    compiled();
    return true;
  }

  // ---- binary ops on blocked layouts: oneDNN binary, broadcasting included ----------
  static std::optional<dnnl::algorithm> binary_algorithm(const std::string& op) {
    if (op == "Add") return dnnl::algorithm::binary_add;
    if (op == "Sub") return dnnl::algorithm::binary_sub;
    if (op == "Mul") return dnnl::algorithm::binary_mul;
    if (op == "Div") return dnnl::algorithm::binary_div;
    if (op == "Max") return dnnl::algorithm::binary_max;
    if (op == "Min") return dnnl::algorithm::binary_min;
    return std::nullopt;
  }

  // Between convolutions (a squeeze-and-excitation scale, a residual the
  // convolution could not absorb) the operands are blocked: computing there
  // saves reordering them to plain and back.
  bool lower_blocked_binary(const ir::Node& n) {
    if (n.inputs.size() != 2 || !is_f32(n.inputs[0]) || !is_f32(n.inputs[1]) || !is_f32(n.outputs[0])) return false;
    const Dims out = dims(n.outputs[0]);
    const std::string &a = n.inputs[0], &b = n.inputs[1];
    // oneDNN broadcasts only its second source: the full-shaped blocked one comes first.
    const bool commutative = n.op_type == "Add" || n.op_type == "Mul" || n.op_type == "Max" || n.op_type == "Min";
    std::string full, other;
    if (dims(a) == out && val(a).blocked) {
      full = a;
      other = b;
    } else if (commutative && dims(b) == out && val(b).blocked) {
      full = b;
      other = a;
    } else {
      return false;
    }
    Dims od = dims(other);
    if (od.size() > out.size()) return false;
    od.insert(od.begin(), out.size() - od.size(), 1);
    for (size_t i = 0; i < out.size(); ++i)
      if (od[i] != 1 && od[i] != out[i]) return false;
    const md src0 = val(full).layout;
    // The second operand as it is when it already has the first's layout, else plain.
    md src1 = dims(other) == out ? src0 : plain_md(od);
    const int block = channel_block(src0);
    const bool per_channel = src1 != src0 && block && dims(other).size() == od.size() &&
                             std::all_of(od.begin() + 2, od.end(), [](int64_t d) { return d == 1; });
    // A per-channel operand (a squeeze-and-excitation scale) of a tensor in
    // channel blocks: oneDNN 2.6 has only its reference kernel for a plain
    // one (10 ms instead of 0.1), so it goes in the same blocks. For dims
    // [N, C, 1, ...] with C a multiple of the block those are the plain bytes.
    if (per_channel) src1 = md(to_dnnl(od), dt::f32, channel_blocked_tag(od.size(), block));
    dnnl::binary::desc desc(*binary_algorithm(n.op_type), src0, src1, md(to_dnnl(out), dt::f32, dnnl::memory::format_tag::any));
    dnnl::binary::primitive_desc pd(desc, user_scratchpad(), cpu_engine());
    // Nor has it more than its reference kernel for some blockings (8
    // channels on AVX-512: RegNet's grouped convolutions leave them, and
    // its scales took 3.5 ms instead of 0.03): the plain loop, after a
    // reorder, is far faster.
    if (reference_kernel(pd)) return false;
    const int b1 = src1 == src0 ? as_layout(other, src0)
                   : per_channel ? (od[1] % block == 0 ? plain(other) : as_layout(other, src1))
                                 : plain(other);
    const int b0 = val(full).buffer;
    Fused f;
    f.value = n.outputs[0];
    compiled();
    emit_with_dst(n.describe(), pd, {{DNNL_ARG_SRC_0, src0}, {DNNL_ARG_SRC_1, src1}}, {b0, b1}, {}, f,
                  pd.dst_desc(), is_plain(pd.dst_desc(), out));
    return true;
  }

  // ---- elementwise chains: one generated loop --------------------------------------
  bool loop_candidate(const ir::Node& n, const Dims& shape) {
    auto it = loop_ops().find(n.op_type);
    if (it == loop_ops().end() || !n.domain.empty() || n.outputs.size() != 1 || !is_f32(n.outputs[0])) return false;
    const bool clip = n.op_type == "Clip";
    if (clip ? n.inputs.empty() || n.inputs.size() > 3 : int(n.inputs.size()) != it->second.arity) return false;
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (!is_f32(n.inputs[i]) && !(clip && i > 0 && n.inputs[i].empty())) return false;
    if (dims(n.outputs[0]) != shape) return false;
    if (n.op_type == "Clip" && !clip_bounds(n)) return false;
    if (n.op_type == "PRelu") {  // the slope broadcasts to the input
      if (dims(n.inputs[0]) != shape) return false;
    }
    return true;
  }

  // The layout a loop starting at `first` runs in: that of its first input of
  // the output's shape when that one is in a oneDNN layout the loop can
  // walk, else plain (nothing).
  std::optional<std::pair<md, std::vector<PhysicalAxis>>> loop_layout(const ir::Node& first, const Dims& shape) {
    for (const auto& in : first.inputs) {
      if (in.empty() || !is_f32(in) || dims(in) != shape || !val(in).blocked) continue;
      const md& layout = val(in).layout;
      auto axes = physical_axes(layout);
      if (!axes) return std::nullopt;
      for (const auto& other : first.inputs)
        if (!other.empty() && !readable_in(layout, other, shape)) return std::nullopt;
      return std::make_pair(layout, *axes);
    }
    return std::nullopt;
  }
  // Whether a loop in `layout` over `shape` reads `name` well. Not an
  // operand that broadcasts against values in channel blocks: it would be
  // read in rows as short as a block (RegNet's scales in 8-channel blocks
  // took 0.6 ms instead of 0.15 after a reorder to plain), so a loop in
  // channel blocks reads only values of its shape, in its layout, and walks
  // them as one flat array.
  bool readable_in(const md& layout, const std::string& name, const Dims& shape) {
    return layout.data.format_desc.blocking.inner_nblks == 0 || dims(name) == shape || scalar_constant(name);
  }

  bool lower_elementwise(const ir::Node& first) {
    const Dims shape = dims(first.outputs[0]);
    if (!loop_candidate(first, shape)) return false;
    auto loop = std::make_unique<Loop>();
    loop->shape = shape;
    // A loop over values in a oneDNN layout (a squeeze-and-excitation scale
    // of channels-last activations) runs in that layout, its outputs too:
    // the loop's axes are the layout's, and an operand that broadcasts
    // (read plain) steps along them as its dims do.
    const auto layout = loop_layout(first, shape);
    if (layout) {
      loop->shape.clear();
      for (const PhysicalAxis& a : layout->second) loop->shape.push_back(a.size);
      if (loop->shape.empty()) loop->shape.push_back(1);
    }
    std::vector<int> args;
    std::map<std::string, int> ssa;       // values computed or loaded in the loop
    std::map<std::string, int> operand;  // external values, by operand index
    std::set<std::string> computed;       // outputs of the loop's nodes
    std::vector<size_t> members;

    auto load = [&](const std::string& name) -> int {
      if (auto it = ssa.find(name); it != ssa.end()) return it->second;
      if (auto c = scalar_constant(name)) {
        loop->code.push_back({Op::Constant, -1, -1, *c, 0});
      } else {
        auto it = operand.find(name);
        if (it == operand.end()) {
          Loop::Operand o;
          o.arg = int(args.size());
          const Dims d = dims(name);
          const auto strides = ref::strides_of(d);
          // Per dim of `shape`: how far a step moves in the operand (0: broadcast).
          std::vector<int64_t> per_dim(shape.size(), 0);
          for (size_t i = 0; i < d.size(); ++i) per_dim[shape.size() - d.size() + i] = d[i] == 1 ? 0 : strides[i];
          if (!layout) {
            args.push_back(plain(name));
            o.strides = per_dim;
          } else if (d == shape) {
            args.push_back(as_layout(name, layout->first));
            o.strides = ref::strides_of(loop->shape);
          } else {
            args.push_back(plain(name));
            for (const PhysicalAxis& a : layout->second) o.strides.push_back(per_dim[a.dim]);
            if (o.strides.empty()) o.strides.push_back(0);
          }
          loop->operands.push_back(o);
          it = operand.emplace(name, int(loop->operands.size()) - 1).first;
        }
        loop->code.push_back({Op::Load, it->second, -1, 0, 0});
      }
      return ssa[name] = int(loop->code.size()) - 1;
    };
    auto broadcastable = [&](const std::string& name) {
      if (layout && !readable_in(layout->first, name, shape)) return false;
      const Dims d = dims(name);
      if (d.size() > shape.size()) return false;
      for (size_t i = 0; i < d.size(); ++i)
        if (d[i] != 1 && d[i] != shape[shape.size() - d.size() + i]) return false;
      return true;
    };
    auto add = [&](const ir::Node& n) {
      const LoopOpInfo info = loop_ops().at(n.op_type);
      ref::KernelContext ctx(n, {}, nullptr);
      Loop::Instr in;
      in.op = info.op;
      in.a = load(n.inputs[0]);
      if (info.arity == 2) in.b = load(n.inputs[1]);
      if (n.op_type == "LeakyRelu") in.alpha = ctx.attr_float("alpha", 0.01f);
      if (n.op_type == "Elu") in.alpha = ctx.attr_float("alpha", 1.0f);
      if (n.op_type == "Selu") {
        in.alpha = ctx.attr_float("alpha", 1.67326319217681884765625f);
        in.beta = ctx.attr_float("gamma", 1.05070102214813232421875f);
      }
      if (n.op_type == "HardSigmoid") {
        in.alpha = ctx.attr_float("alpha", 0.2f);
        in.beta = ctx.attr_float("beta", 0.5f);
      }
      if (n.op_type == "Clip") std::tie(in.alpha, in.beta) = *clip_bounds(n);
      loop->code.push_back(in);
      ssa[n.outputs[0]] = int(loop->code.size()) - 1;
      computed.insert(n.outputs[0]);
    };

    auto loaded = [&](const ir::Node& n) {  // Clip reads its bounds as constants
      return n.op_type == "Clip" ? std::vector<std::string>{n.inputs[0]} : n.inputs;
    };
    for (const auto& in : loaded(first))
      if (!broadcastable(in)) return false;
    add(first);
    members.push_back(node_);
    // Greedily take later elementwise nodes of the same shape whose other
    // inputs exist before the loop runs.
    for (size_t i = node_ + 1; i < g_.nodes.size() && i < node_ + 64; ++i) {
      const ir::Node& n = g_.nodes[i];
      if (absorbed_[i] || !loop_candidate(n, shape)) continue;
      bool uses_group = false, ok = true;
      for (const auto& in : loaded(n)) {
        if (computed.count(in)) uses_group = true;
        else if (!available(in) || !broadcastable(in)) ok = false;
      }
      if (!ok || !uses_group) continue;
      add(n);
      members.push_back(i);
    }

    // Store every member output someone outside the loop needs.
    std::set<size_t> member_set(members.begin(), members.end());
    std::vector<char> writes(args.size(), 0);
    for (size_t m : members) {
      const std::string& out = g_.nodes[m].outputs[0];
      bool needed = output_of_.count(out) != 0;
      for (size_t c : consumers(out))
        if (!member_set.count(c)) needed = true;
      if (!needed) continue;
      loop->stores.push_back({ssa.at(out), int(args.size())});
      args.push_back(layout ? define(out, layout->first, false) : define_plain(out));
      writes.push_back(1);
    }
    for (size_t m : members) absorbed_[m] = 1;
    compiled(int(members.size()));
    Step s;
    s.label = first.describe() + (members.size() > 1 ? " and " + std::to_string(members.size() - 1) + " fused" : "");
    s.args = std::move(args);
    s.writes = std::move(writes);
    s.loop = std::move(loop);
    p_.steps.push_back(std::move(s));
    return true;
  }

  // ---- portable kernels: calls into the kernel library, plain layouts only ---------
  void add_call(const std::string& label, std::vector<int> args, std::vector<char> writes, Call call) {
    Step s;
    s.label = label;
    s.args = std::move(args);
    s.writes = std::move(writes);
    s.call = std::make_unique<Call>(std::move(call));
    p_.steps.push_back(std::move(s));
  }

  // A scratch buffer live only during the step that uses it.
  Call::Arg scratch(std::vector<int>& args, std::vector<char>& writes, size_t bytes, const std::string& label) {
    if (bytes == 0) return Call::null();
    args.push_back(add_buffer(Buffer::Kind::Arena, 0, int64_t(bytes), label + "#scratch"));
    writes.push_back(1);
    return Call::buffer(int(args.size()) - 1);
  }

  // What a convolution or product can apply as it stores: one activation,
  // a residual added before it.
  struct Epilogue {
    Fused fused;
    int32_t act = KILN_PK_ACT_NONE;
    float alpha = 0, beta = 0;
  };

  static std::optional<Epilogue> portable_activation(Fused f) {
    Epilogue e;
    if (!f.eltwise.empty()) {
      const PostOp& op = f.eltwise[0];
      switch (op.alg) {
        case dnnl::algorithm::eltwise_relu: e.act = op.alpha == 0 ? KILN_PK_ACT_RELU : KILN_PK_ACT_LEAKY_RELU; break;
        case dnnl::algorithm::eltwise_clip_v2: e.act = KILN_PK_ACT_CLIP; break;
        case dnnl::algorithm::eltwise_logistic: e.act = KILN_PK_ACT_SIGMOID; break;
        case dnnl::algorithm::eltwise_tanh: e.act = KILN_PK_ACT_TANH; break;
        case dnnl::algorithm::eltwise_hardswish: e.act = KILN_PK_ACT_HARD_SWISH; break;
        case dnnl::algorithm::eltwise_swish: e.act = KILN_PK_ACT_SILU; break;
        case dnnl::algorithm::eltwise_gelu_erf: e.act = KILN_PK_ACT_GELU_ERF; break;
        default: return std::nullopt;
      }
      e.alpha = op.alpha;
      e.beta = op.beta;
    }
    e.fused = std::move(f);
    return e;
  }

  Epilogue portable_epilogue(const std::string& value, bool allow_sum) {
    // The residual is added before the activation, so a chain that adds it
    // after one stops before the Add.
    for (bool sum : {allow_sum, false})
      for (size_t max_eltwise : {size_t(1), size_t(0)}) {
        Fused f = fuse_chain(value, sum, max_eltwise);
        if (f.sum_position > 0) continue;
        if (auto e = portable_activation(std::move(f))) return *e;
      }
    Epilogue none;
    none.fused.value = value;
    return none;
  }

  // Appends the epilogue's residual and destination; returns the residual arg.
  Call::Arg epilogue_args(const Epilogue& e, std::vector<int>& args, std::vector<char>& writes, int& dst) {
    Call::Arg residual = Call::null();
    if (!e.fused.residual.empty()) {
      args.push_back(plain(e.fused.residual));
      writes.push_back(0);
      residual = Call::buffer(int(args.size()) - 1);
    }
    args.push_back(define_plain(e.fused.value));
    writes.push_back(1);
    dst = int(args.size()) - 1;
    return residual;
  }

  // How a convolution writing `v` splits its outputs over threads: by
  // channel when only depthwise convolutions (one input channel per group)
  // read it, as they split their work by channel too. In mobilenet_v2 the
  // expansions then leave each depthwise step its input in the same core's
  // cache (the bundle 3% faster on 2 threads).
  int32_t conv_split(const std::string& v) {
    const auto& readers = consumers(v);
    if (readers.empty()) return KILN_PK_SPLIT_ANY;
    for (size_t i : readers) {
      const ir::Node& c = g_.nodes[i];
      if (c.op_type != "Conv" || !c.domain.empty() || c.inputs.size() < 2 || c.inputs[0] != v) return KILN_PK_SPLIT_ANY;
      const Dims wd = dims(c.inputs[1]);
      if (wd.size() < 3 || wd[1] != 1 || ref::KernelContext(c, {}, nullptr).attr_int("group", 1) <= 1) return KILN_PK_SPLIT_ANY;
    }
    return KILN_PK_SPLIT_CHANNELS;
  }

  bool portable_conv(const ir::Node& n) {
    if (n.inputs.size() < 2 || !is_f32(n.inputs[0]) || !is_f32(n.inputs[1]) || n.outputs.size() != 1) return false;
    const bool has_bias = n.inputs.size() > 2 && !n.inputs[2].empty();
    if (has_bias && !is_f32(n.inputs[2])) return false;
    const Dims in = dims(n.inputs[0]), wd = dims(n.inputs[1]), out = dims(n.outputs[0]);
    if ((in.size() != 3 && in.size() != 4) || wd.size() != in.size() || out.size() != in.size()) return false;
    if (has_bias && ir::checked_numel(dims(n.inputs[2])) != wd[0]) return false;
    ref::KernelContext ctx(n, {}, nullptr);
    const int64_t group = ctx.attr_int("group", 1);
    ref::Geometry geo = ref::forward_geometry(ctx, Dims(in.begin() + 2, in.end()), Dims(wd.begin() + 2, wd.end()), false);
    if (Dims(out.begin() + 2, out.end()) != geo.out || group < 1 || in[1] != wd[1] * group || wd[0] % group) return false;
    // A 1-D convolution is a 2-D one of height 1.
    auto two = [&](const Dims& d, int64_t one) { return d.size() == 1 ? Dims{one, d[0]} : d; };
    const Dims hw = two(Dims(in.begin() + 2, in.end()), 1), k = two(geo.kernel, 1), st = two(geo.strides, 1),
               pad = two(geo.pad_begin, 0), dil = two(geo.dilations, 1), o = two(geo.out, 1);
    Epilogue e = portable_epilogue(n.outputs[0], true);
    std::vector<int> args{plain(n.inputs[0]), plain(n.inputs[1])};
    std::vector<char> writes{0, 0};
    Call::Arg bias = Call::null();
    if (has_bias) {
      args.push_back(plain(n.inputs[2]));
      writes.push_back(0);
      bias = Call::buffer(int(args.size()) - 1);
    }
    int dst = -1;
    const Call::Arg residual = epilogue_args(e, args, writes, dst);
    const size_t scratch_bytes = kiln_pk_conv2d_scratch_bytes(in[0], in[1], hw[0], hw[1], wd[0], o[0], o[1], k[0], k[1], st[0], st[1],
                                                              dil[0], dil[1], group);
    const Call::Arg work = scratch(args, writes, scratch_bytes, n.describe());
    Call call{"kiln_pk_conv2d",
              {Call::i64(in[0]), Call::i64(in[1]), Call::i64(hw[0]), Call::i64(hw[1]), Call::i64(wd[0]), Call::i64(o[0]),
               Call::i64(o[1]), Call::i64(k[0]), Call::i64(k[1]), Call::i64(st[0]), Call::i64(st[1]), Call::i64(pad[0]),
               Call::i64(pad[1]), Call::i64(dil[0]), Call::i64(dil[1]), Call::i64(group), Call::buffer(0), Call::buffer(1), bias,
               residual, Call::buffer(dst), Call::i32(e.act), Call::f32(e.alpha), Call::f32(e.beta),
               Call::i32(conv_split(e.fused.value)), work},
              false};
    compiled();
    absorb(e.fused);
    add_call(n.describe(), std::move(args), std::move(writes), std::move(call));
    return true;
  }

  // One product (or a batch of them) with its epilogue. `bias` is a buffer
  // argument already in `args`, or null.
  struct Product {
    int64_t batch = 1, m = 0, n = 0, k = 0;
    int64_t lda = 0, stride_a = 0, ldb = 0, stride_b = 0;
    bool trans_a = false, trans_b = false;
    float alpha = 1, beta = 1;
    int64_t bias_rs = 0, bias_cs = 0;
  };
  void emit_product(const ir::Node& n, const Product& pr, std::vector<int> args, std::vector<char> writes, Call::Arg bias,
                    const Epilogue& e) {
    int dst = -1;
    const Call::Arg residual = epilogue_args(e, args, writes, dst);
    const Call::Arg work = scratch(args, writes, kiln_pk_gemm_scratch_bytes(pr.batch, pr.m, pr.n, pr.k), n.describe());
    Call call{"kiln_pk_gemm",
              {Call::i64(pr.batch), Call::i64(pr.m), Call::i64(pr.n), Call::i64(pr.k), Call::buffer(0), Call::i64(pr.lda),
               Call::i64(pr.stride_a), Call::i32(pr.trans_a), Call::buffer(1), Call::i64(pr.ldb), Call::i64(pr.stride_b),
               Call::i32(pr.trans_b), Call::buffer(dst), Call::i64(pr.n), Call::i64(pr.m * pr.n), Call::f32(pr.alpha), bias,
               Call::i64(pr.bias_rs), Call::i64(pr.bias_cs), Call::f32(pr.beta), residual, Call::i32(e.act), Call::f32(e.alpha),
               Call::f32(e.beta), work},
              false};
    compiled();
    absorb(e.fused);
    add_call(n.describe(), std::move(args), std::move(writes), std::move(call));
  }

  bool portable_gemm(const ir::Node& n) {
    if (n.inputs.size() < 2 || n.outputs.size() != 1 || !is_f32(n.inputs[0]) || !is_f32(n.inputs[1])) return false;
    ref::KernelContext ctx(n, {}, nullptr);
    const Dims a = dims(n.inputs[0]), b = dims(n.inputs[1]), out = dims(n.outputs[0]);
    if (a.size() != 2 || b.size() != 2 || out.size() != 2) return false;
    Product pr;
    pr.trans_a = ctx.attr_int("transA", 0) != 0;
    pr.trans_b = ctx.attr_int("transB", 0) != 0;
    pr.alpha = ctx.attr_float("alpha", 1.0f);
    pr.beta = ctx.attr_float("beta", 1.0f);
    pr.m = out[0];
    pr.n = out[1];
    pr.k = pr.trans_a ? a[0] : a[1];
    pr.lda = a[1];
    pr.ldb = b[1];
    std::vector<int> args{plain(n.inputs[0]), plain(n.inputs[1])};
    std::vector<char> writes{0, 0};
    Call::Arg bias = Call::null();
    if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
      const std::string& c = n.inputs[2];
      if (!is_f32(c)) return false;
      // C broadcasts to [m, n] unidirectionally.
      Dims cd = dims(c);
      if (cd.size() > 2) return false;
      cd.insert(cd.begin(), 2 - cd.size(), 1);
      if ((cd[0] != 1 && cd[0] != pr.m) || (cd[1] != 1 && cd[1] != pr.n)) return false;
      pr.bias_rs = cd[0] == 1 ? 0 : cd[1];
      pr.bias_cs = cd[1] == 1 ? 0 : 1;
      args.push_back(plain(c));
      writes.push_back(0);
      bias = Call::buffer(2);
    }
    emit_product(n, pr, std::move(args), std::move(writes), bias, portable_epilogue(n.outputs[0], true));
    return true;
  }

  bool portable_matmul(const ir::Node& n) {
    if (n.inputs.size() != 2 || n.outputs.size() != 1 || !is_f32(n.inputs[0]) || !is_f32(n.inputs[1])) return false;
    Dims a = dims(n.inputs[0]), b = dims(n.inputs[1]);
    const Dims out = dims(n.outputs[0]);
    if (a.size() < 2 || b.size() < 2) return false;
    Product pr;
    pr.k = a.back();
    pr.n = b.back();
    pr.lda = pr.k;
    pr.ldb = pr.n;
    if (b.size() == 2) {  // a stack of rows times one matrix: one product
      pr.m = ir::checked_numel(a) / pr.k;
    } else {
      // Batch dims: each operand's either equals the output's or is all ones.
      const size_t rank = out.size();
      a.insert(a.begin(), rank - a.size(), 1);
      b.insert(b.begin(), rank - b.size(), 1);
      const Dims batch_dims(out.begin(), out.end() - 2);
      auto batch_of = [&](const Dims& d) { return Dims(d.begin(), d.end() - 2); };
      pr.batch = ir::checked_numel(batch_dims);
      pr.m = a[rank - 2];
      for (const Dims* d : {&a, &b}) {
        const Dims bd = batch_of(*d);
        if (bd != batch_dims && ir::checked_numel(bd) != 1) return false;
      }
      pr.stride_a = batch_of(a) == batch_dims && pr.batch > 1 ? pr.m * pr.k : 0;
      pr.stride_b = batch_of(b) == batch_dims && pr.batch > 1 ? pr.k * pr.n : 0;
    }
    if (pr.batch * pr.m * pr.n != ir::checked_numel(out)) return false;
    std::vector<int> args{plain(n.inputs[0]), plain(n.inputs[1])};
    std::vector<char> writes{0, 0};
    Call::Arg bias = Call::null();
    // A bias row added next (exporters write Linear as MatMul + Add).
    std::string value = n.outputs[0];
    std::vector<size_t> bias_nodes;
    if (single_use(value)) {
      const ir::Node& c = g_.nodes[consumers(value)[0]];
      if (c.op_type == "Add" && c.domain.empty() && c.inputs.size() == 2) {
        const std::string& other = c.inputs[0] == value ? c.inputs[1] : c.inputs[0];
        const Dims bd = is_f32(other) && available(other) ? dims(other) : Dims{};
        if (!bd.empty() && bd.back() == pr.n && ir::checked_numel(bd) == pr.n && dims(c.outputs[0]) == out) {
          args.push_back(plain(other));
          writes.push_back(0);
          bias = Call::buffer(2);
          pr.bias_cs = 1;
          bias_nodes.push_back(consumers(value)[0]);
          value = c.outputs[0];
        }
      }
    }
    Epilogue e = portable_epilogue(value, true);
    e.fused.nodes.insert(e.fused.nodes.begin(), bias_nodes.begin(), bias_nodes.end());
    emit_product(n, pr, std::move(args), std::move(writes), bias, e);
    return true;
  }

  bool portable_pool(const ir::Node& n) {
    if (n.inputs.empty() || !is_f32(n.inputs[0])) return false;
    if (!only_first_output_wanted(n)) return false;
    const Dims in = dims(n.inputs[0]), out = dims(n.outputs[0]);
    if (in.size() != 3 && in.size() != 4) return false;
    ref::KernelContext ctx(n, {}, nullptr);
    const bool ceil = ctx.attr_int("ceil_mode", 0) != 0;
    const bool include_pad = n.op_type == "AveragePool" && ctx.attr_int("count_include_pad", 0) != 0;
    // Padding counted into a window that ceil mode runs past the end: the
    // kernel would count the overhang too.
    if (include_pad && ceil) return false;
    ref::Geometry geo = ref::forward_geometry(ctx, Dims(in.begin() + 2, in.end()), ctx.attr_ints("kernel_shape"), ceil);
    if (Dims(out.begin() + 2, out.end()) != geo.out) return false;
    if (n.op_type == "AveragePool")
      for (int64_t d : geo.dilations)
        if (d != 1) return false;
    auto two = [&](const Dims& d, int64_t one) { return d.size() == 1 ? Dims{one, d[0]} : d; };
    const Dims hw = two(Dims(in.begin() + 2, in.end()), 1), k = two(geo.kernel, 1), st = two(geo.strides, 1),
               pad = two(geo.pad_begin, 0), dil = two(geo.dilations, 1), o = two(geo.out, 1);
    std::vector<Call::Arg> a{Call::i64(in[0] * in[1]), Call::i64(hw[0]), Call::i64(hw[1]), Call::i64(o[0]), Call::i64(o[1]),
                             Call::i64(k[0]), Call::i64(k[1]), Call::i64(st[0]), Call::i64(st[1]), Call::i64(pad[0]),
                             Call::i64(pad[1])};
    if (n.op_type == "MaxPool") {
      a.push_back(Call::i64(dil[0]));
      a.push_back(Call::i64(dil[1]));
    } else {
      a.push_back(Call::i32(include_pad));
    }
    a.push_back(Call::buffer(0));
    a.push_back(Call::buffer(1));
    const int src = plain(n.inputs[0]);
    compiled();
    add_call(n.describe(), {src, define_plain(n.outputs[0])}, {0, 1},
             {n.op_type == "MaxPool" ? "kiln_pk_max_pool2d" : "kiln_pk_avg_pool2d", std::move(a), false});
    return true;
  }

  bool portable_global_pool(const ir::Node& n) {
    if (n.inputs.size() != 1 || !is_f32(n.inputs[0])) return false;
    const Dims in = dims(n.inputs[0]);
    if (in.size() < 3) return false;
    const int64_t planes = in[0] * in[1];
    const int src = plain(n.inputs[0]);
    compiled();
    add_call(n.describe(), {src, define_plain(n.outputs[0])}, {0, 1},
             {"kiln_pk_global_pool",
              {Call::i64(planes), Call::i64(ir::checked_numel(in) / std::max<int64_t>(planes, 1)),
               Call::i32(n.op_type == "GlobalMaxPool"), Call::buffer(0), Call::buffer(1)},
              false});
    return true;
  }

  bool portable_softmax(const ir::Node& n) {
    if (n.inputs.size() != 1 || !is_f32(n.inputs[0])) return false;
    const Dims d = dims(n.inputs[0]);
    if (d.empty()) return false;
    ref::KernelContext ctx(n, {}, nullptr);
    int64_t axis = ctx.attr_int("axis", n.opset >= 13 ? -1 : 1);
    if (axis < 0) axis += int64_t(d.size());
    if (axis < 0 || axis >= int64_t(d.size())) return false;
    int64_t outer = 1, len = 1, inner = 1;
    for (size_t i = 0; i < d.size(); ++i) {
      const int64_t at = int64_t(i);
      // Before opset 13 the input is coerced to 2-D around the axis.
      (at < axis ? outer : at == axis || n.opset < 13 ? len : inner) *= d[i];
    }
    const int src = plain(n.inputs[0]);
    compiled();
    add_call(n.describe(), {src, define_plain(n.outputs[0])}, {0, 1},
             {"kiln_pk_softmax",
              {Call::i64(outer), Call::i64(len), Call::i64(inner), Call::i32(n.op_type == "LogSoftmax"), Call::buffer(0),
               Call::buffer(1)},
              false});
    return true;
  }

  bool portable_layer_norm(const ir::Node& n) {
    if (n.inputs.size() < 2 || !is_f32(n.inputs[0]) || !is_f32(n.inputs[1])) return false;
    if (!only_first_output_wanted(n)) return false;
    const Dims d = dims(n.inputs[0]);
    ref::KernelContext ctx(n, {}, nullptr);
    int64_t axis = ctx.attr_int("axis", -1);
    if (axis < 0) axis += int64_t(d.size());
    if (axis < 0 || axis >= int64_t(d.size())) return false;
    int64_t rows = 1, cols = 1;
    for (size_t i = 0; i < d.size(); ++i) (int64_t(i) < axis ? rows : cols) *= d[i];
    const bool has_bias = n.inputs.size() > 2 && !n.inputs[2].empty();
    if (ir::checked_numel(dims(n.inputs[1])) != cols) return false;
    if (has_bias && (!is_f32(n.inputs[2]) || ir::checked_numel(dims(n.inputs[2])) != cols)) return false;
    std::vector<int> args{plain(n.inputs[0]), plain(n.inputs[1])};
    if (has_bias) args.push_back(plain(n.inputs[2]));
    args.push_back(define_plain(n.outputs[0]));
    std::vector<char> writes(args.size(), 0);
    writes.back() = 1;
    compiled();
    add_call(n.describe(), std::move(args), std::move(writes),
             {"kiln_pk_layer_norm",
              {Call::i64(rows), Call::i64(cols), Call::f32(ctx.attr_float("epsilon", 1e-5f)), Call::buffer(0), Call::buffer(1),
               has_bias ? Call::buffer(2) : Call::null(), Call::buffer(has_bias ? 3 : 2)},
              false});
    return true;
  }

  // A strided view of the input copied densely: Transpose and Slice.
  bool portable_strided_copy(const ir::Node& n, const Dims& out, int64_t offset, std::vector<int64_t> strides) {
    if (out.size() > 8) return false;
    const int src = plain(n.inputs[0]);
    compiled();
    add_call(n.describe(), {src, define_plain(n.outputs[0])}, {0, 1},
             {"kiln_pk_strided_copy",
              {Call::i32(int32_t(out.size())), Call::array(out), Call::array(std::move(strides)), Call::i64(offset),
               Call::i64(int64_t(ir::dtype_size(dtype(n.inputs[0])))), Call::buffer(0), Call::buffer(1)},
              false});
    return true;
  }

  bool portable_transpose(const ir::Node& n) {
    const Dims in = dims(n.inputs[0]), out = dims(n.outputs[0]);
    ref::KernelContext ctx(n, {}, nullptr);
    std::vector<int64_t> perm = ctx.attr_ints("perm", {});
    if (perm.empty())
      for (size_t i = in.size(); i-- > 0;) perm.push_back(int64_t(i));
    if (perm.size() != in.size()) return false;
    const auto in_strides = ref::strides_of(in);
    std::vector<int64_t> strides;
    for (int64_t p : perm) {
      if (p < 0 || p >= int64_t(in.size())) return false;
      strides.push_back(in_strides[size_t(p)]);
    }
    return portable_strided_copy(n, out, 0, std::move(strides));
  }

  bool portable_slice(const ir::Node& n) {
    auto view = slice_view(n);
    return view && portable_strided_copy(n, view->out, view->offset, std::move(view->strides));
  }

  bool portable_concat(const ir::Node& n) {
    const Dims out = dims(n.outputs[0]);
    if (out.empty()) return false;
    ref::KernelContext ctx(n, {}, nullptr);
    int64_t axis = n.opset < 4 ? ctx.attr_int("axis", 1) : ctx.attr_int("axis");  // optional before opset 4
    if (axis < 0) axis += int64_t(out.size());
    if (axis < 0 || axis >= int64_t(out.size())) return false;
    const int64_t esize = int64_t(ir::dtype_size(dtype(n.outputs[0])));
    int64_t outer = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= out[size_t(i)];
    const int64_t out_row = ir::checked_numel(out) / std::max<int64_t>(outer, 1) * esize;
    std::vector<std::pair<std::string, int64_t>> parts;  // input, its bytes per outer row
    for (const auto& in : n.inputs) {
      if (in.empty() || dtype(in) != dtype(n.outputs[0])) return false;
      const int64_t numel = ir::checked_numel(dims(in));
      if (numel) parts.push_back({in, numel / std::max<int64_t>(outer, 1) * esize});
    }
    std::vector<int> srcs;
    for (const auto& [in, row] : parts) srcs.push_back(plain(in));
    const int dst = define_plain(n.outputs[0]);
    // One copy step per input, each into its columns of the output.
    int64_t at = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      const int64_t row = parts[i].second;
      add_call(n.describe() + " part " + std::to_string(i), {srcs[i], dst}, {0, 1},
               {"kiln_pk_copy_rows",
                {Call::i64(outer), Call::i64(row), Call::buffer(0), Call::i64(row), Call::buffer(1, at), Call::i64(out_row)},
                false});
      at += row;
    }
    compiled();
    return true;
  }

  bool portable_gather(const ir::Node& n) {
    if (n.inputs.size() != 2 || n.outputs.size() != 1) return false;
    const Dims data = dims(n.inputs[0]);
    const DType index_type = dtype(n.inputs[1]);
    if (data.empty() || (index_type != DType::Int64 && index_type != DType::Int32)) return false;
    ref::KernelContext ctx(n, {}, nullptr);
    int64_t axis = ctx.attr_int("axis", 0);
    if (axis < 0) axis += int64_t(data.size());
    if (axis < 0 || axis >= int64_t(data.size())) return false;
    int64_t outer = 1, inner = int64_t(ir::dtype_size(dtype(n.inputs[0])));
    for (size_t i = 0; i < data.size(); ++i) {
      if (int64_t(i) < axis) outer *= data[i];
      if (int64_t(i) > axis) inner *= data[i];
    }
    const int src = plain(n.inputs[0]), indices = plain(n.inputs[1]);
    compiled();
    add_call(n.describe(), {src, indices, define_plain(n.outputs[0])}, {0, 0, 1},
             {"kiln_pk_gather",
              {Call::i64(outer), Call::i64(data[size_t(axis)]), Call::i64(inner), Call::i64(ir::checked_numel(dims(n.inputs[1]))),
               Call::i32(index_type == DType::Int64), Call::buffer(1), Call::buffer(0), Call::buffer(2)},
              true});
    return true;
  }

  // ---- the end: outputs, memory plan -----------------------------------------
  void finish_output(int k) {
    const std::string& name = p_.outputs[size_t(k)];
    const int target = output_buffer_[size_t(k)];
    node_ = g_.nodes.size();
    Val& v = val(name);
    if (v.buffer == target) return;
    if (v.blocked) {
      add_reorder("output " + name, v.buffer, target, v.layout, plain_md(dims(name)));
    } else if (!host_kernels_) {
      add_call("output " + name, {v.buffer, target}, {0, 1},
               {"kiln_pk_copy_rows", {Call::i64(1), Call::i64(bytes_of(name)), Call::buffer(0), Call::i64(0), Call::buffer(1), Call::i64(0)}});
    } else {
      add_kernel("output " + name, {v.buffer, target}, {0, 1}, std::make_unique<CopyKernel>(bytes_of(name)));
    }
  }

  // A Sum post-op adds what the destination holds, so OneDnnKernel copies
  // the residual there first (for resnet50 at batch 8, 26 MB before some
  // convolutions). Where nothing reads the residual's buffer after the step,
  // the destination takes that buffer instead and there is nothing to copy.
  void sum_in_place() {
    auto uses = [&](size_t step, int buffer) {
      const auto& args = p_.steps[step].args;
      return std::count(args.begin(), args.end(), buffer);
    };
    for (const SumStep& sum : sum_steps_) {
      std::vector<int>& args = p_.steps[sum.step].args;
      const int residual = args[sum.residual], dst = args[sum.dst];
      const Buffer &r = p_.buffers[size_t(residual)], &d = p_.buffers[size_t(dst)];
      if (residual == dst || r.kind != Buffer::Kind::Arena || d.kind != Buffer::Kind::Arena || r.bytes != d.bytes) continue;
      // The primitive must not read the residual's buffer as a source.
      bool free = uses(sum.step, residual) == 1;
      for (size_t t = 0; t < p_.steps.size() && free; ++t)
        if (t > sum.step ? uses(t, residual) > 0 : t < sum.step && uses(t, dst) > 0) free = false;
      if (!free) continue;
      for (size_t t = sum.step; t < p_.steps.size(); ++t)
        std::replace(p_.steps[t].args.begin(), p_.steps[t].args.end(), dst, residual);
    }
  }

  void plan() {
    std::vector<passes::BufferRequest> requests;
    std::map<int, size_t> index;
    for (size_t s = 0; s < p_.steps.size(); ++s)
      for (int b : p_.steps[s].args) {
        if (p_.buffers[size_t(b)].kind != Buffer::Kind::Arena) continue;
        auto it = index.find(b);
        if (it == index.end()) {
          index[b] = requests.size();
          requests.push_back({std::to_string(b), p_.buffers[size_t(b)].bytes, s, s});
        } else {
          requests[it->second].last = s;
        }
      }
    passes::MemoryPlan plan = passes::plan_buffers(requests);
    for (const auto& [b, i] : index) p_.buffers[size_t(b)].offset = plan.slots.at(requests[i].name).offset;
    p_.arena_bytes = plan.arena_bytes;
    p_.intermediate_bytes = plan.intermediate_bytes;
  }

  const ir::Graph& g_;
  const ir::Specialization& spec_;
  const bool portable_;
  const bool host_kernels_;  // false: a portable call wherever Native would run a host kernel
  Program p_;
  DeferredWork& deferred_;
  std::vector<ImplementationTrial>* trials_;
  std::map<std::string, Val> vals_;
  std::map<std::string, std::vector<size_t>> consumers_;
  std::map<std::string, size_t> producer_;
  std::map<std::string, int> input_index_;
  std::multimap<std::string, int> output_of_;
  std::vector<int> output_buffer_;
  struct SumStep {
    size_t step, residual, dst;  // the step, and the positions of its residual and destination arguments
  };
  std::vector<SumStep> sum_steps_;
  std::vector<char> absorbed_;
  size_t node_ = 0;
};

}  // namespace

bool winograd_enabled() {
  static const bool enabled = [] {
    const char* e = std::getenv("KILN_WINOGRAD");
    if (!e || !*e) return true;
    if (std::string_view(e) != "0" && std::string_view(e) != "1")
      throw ir::Error(ir::ErrorKind::InvalidArgument, std::string("KILN_WINOGRAD='") + e + "': expected 0 or 1");
    return *e == '1';
  }();
  return enabled;
}

int64_t channel_blocks_threshold() {
  static const int64_t bytes = [] {
    const char* e = std::getenv("KILN_CHANNEL_BLOCKS_FROM");
    if (!e || !*e) return int64_t(6) << 20;
    char* end = nullptr;
    const long long v = std::strtoll(e, &end, 10);
    if (*end || v < 0) throw ir::Error(ir::ErrorKind::InvalidArgument, std::string("KILN_CHANNEL_BLOCKS_FROM='") + e + "': expected a number of bytes");
    return int64_t(v);
  }();
  return bytes;
}

bool lowers_natively(const ir::Node& node) {
  if (!node.domain.empty() && node.domain != "ai.onnx") return false;
  // An inference-mode Dropout reaches the lowering as an Identity (the
  // passes' no_ops_as_identity); one that trains runs its reference kernel.
  if (node.op_type == "Dropout") return true;
  return alias_ops().count(node.op_type) || primitive_ops().count(node.op_type) || loop_ops().count(node.op_type);
}

bool lowers(const ir::Node& node, const ir::Specialization& spec) {
  for (const auto& name : ir::values_read(node))
    if (!is_static(spec, name)) return false;
  for (const auto& name : node.outputs)
    if (!name.empty() && !is_static(spec, name)) return false;
  return lowers_natively(node) || ref::has_kernel(node.domain, node.op_type);
}

Program lower(const ir::Graph& graph, const ir::Specialization& spec, KernelFamily family, DeferredWork* deferred,
              std::vector<ImplementationTrial>* trials) {
  DeferredWork work;
  Program p = Lowering(graph, spec, family, deferred ? *deferred : work, trials).run();
  p.graph_nodes = int(graph.nodes.size());
  for (auto& task : work) task();
  return p;
}

}  // namespace kiln::cpu
