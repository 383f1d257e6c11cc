// Control flow: If, Loop and Scan. Bodies run through ctx.run_subgraph, which
// makes outer-scope values visible to them. If's outputs and Loop's carried
// values may be sequences or optionals; scanned values are tensors.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backends/reference/kernel_registry.hpp"
#include "backends/reference/ops/op_util.hpp"

namespace kiln::ref {
namespace {

// A loop whose trip count is absent and whose condition never turns false
// would run forever; past this many iterations we report it instead.
constexpr int64_t kMaxLoopIterations = int64_t(1) << 24;

bool truth(const KernelContext& ctx, const Tensor& t, const char* what) {
  if (t.numel() != 1) ctx.fail(std::string(what) + " has shape " + ir::dims_to_string(t.dims()) + ", expected a single element");
  return t.as_double(0) != 0;
}

// Slice `index` of `t` along `axis`, with that axis removed.
Tensor take_slice(const Tensor& t, int64_t axis, int64_t index) {
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= t.dim(i);
  for (int i = int(axis) + 1; i < t.rank(); ++i) inner *= t.dim(i);
  int64_t len = t.dim(int(axis));
  Dims dims = t.dims();
  dims.erase(dims.begin() + axis);
  Tensor out(t.dtype(), dims);
  size_t block = size_t(inner) * ir::dtype_size(t.dtype());
  const auto* src = static_cast<const char*>(t.raw());
  auto* dst = static_cast<char*>(out.raw());
  for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + size_t(o) * block, src + size_t(o * len + index) * block, block);
  return out;
}

// Stacks equally shaped `parts` along a new axis `axis` of the result;
// `element` gives dtype and dims when `parts` is empty.
Tensor stack(const KernelContext& ctx, const std::vector<Tensor>& parts, int64_t axis, DType dtype, Dims element,
             const std::string& what) {
  if (!parts.empty()) {
    dtype = parts[0].dtype();
    element = parts[0].dims();
  }
  for (const auto& p : parts)
    if (p.dtype() != dtype || p.dims() != element)
      ctx.fail(what + " changes from " + ir::dtype_name(dtype) + " " + ir::dims_to_string(element) + " to " +
               ir::dtype_name(p.dtype()) + " " + ir::dims_to_string(p.dims()) + " between iterations");
  int64_t rank = int64_t(element.size()) + 1;
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank)
    ctx.fail(what + " axis is out of range for stacking rank-" + std::to_string(rank - 1) + " values");
  Dims dims = element;
  dims.insert(dims.begin() + axis, int64_t(parts.size()));
  Tensor out(dtype, dims);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= element[size_t(i)];
  for (size_t i = size_t(axis); i < element.size(); ++i) inner *= element[i];
  size_t block = size_t(inner) * ir::dtype_size(dtype);
  auto* dst = static_cast<char*>(out.raw());
  for (size_t k = 0; k < parts.size(); ++k) {
    const auto* src = static_cast<const char*>(parts[k].raw());
    for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + (size_t(o) * parts.size() + k) * block, src + size_t(o) * block, block);
  }
  return out;
}

// Declared dtype and dims of a body output, for stacking zero iterations;
// unknown dims count as 0 since an empty result has no elements anyway.
std::pair<DType, Dims> declared(const ir::ValueInfo& v) {
  Dims dims;
  for (const auto& d : v.shape.dims) dims.push_back(d.is_known() ? *d.value : 0);
  return {v.dtype == DType::Undefined ? DType::Float32 : v.dtype, dims};
}

// A body output that must be a tensor (a condition, a scanned value).
const Tensor& tensor_of(const KernelContext& ctx, const ir::Value& v, const std::string& what) {
  if (!v.is_tensor()) ctx.fail(what + " is " + v.describe() + ", expected a tensor");
  return v.tensor;
}

void if_op(KernelContext& ctx) {
  bool cond = truth(ctx, ctx.input(0), "cond");
  const ir::Graph& branch = ctx.attr_graph(cond ? "then_branch" : "else_branch");
  std::vector<ir::Value> outs = ctx.run_subgraph(branch, {});
  if (outs.size() != ctx.num_outputs())
    ctx.fail(std::string(cond ? "then" : "else") + "_branch produces " + std::to_string(outs.size()) + " outputs, expected " +
             std::to_string(ctx.num_outputs()));
  for (size_t i = 0; i < outs.size(); ++i) ctx.set_output_value(i, std::move(outs[i]));
}

void loop(KernelContext& ctx) {
  const ir::Graph& body = ctx.attr_graph("body");
  bool has_trip = ctx.has_input(0) && ctx.input(0).numel() > 0;
  bool has_cond = ctx.has_input(1) && ctx.input(1).numel() > 0;
  int64_t trip = has_trip ? ctx.input(0).as_int64(0) : 0;
  bool cond = has_cond ? truth(ctx, ctx.input(1), "cond") : true;
  if (!has_trip && !has_cond) ctx.fail("neither trip count M nor cond is given: the loop would never end");

  std::vector<ir::Value> carried;
  for (size_t i = 2; i < ctx.num_inputs(); ++i) carried.push_back(ctx.input_value(i));
  size_t n = carried.size();
  if (body.inputs.size() != n + 2)
    ctx.fail("body takes " + std::to_string(body.inputs.size()) + " inputs, expected " + std::to_string(n + 2) +
             " (iteration number, condition and " + std::to_string(n) + " loop-carried values)");
  if (body.outputs.size() < n + 1)
    ctx.fail("body produces " + std::to_string(body.outputs.size()) + " outputs, expected at least " + std::to_string(n + 1) +
             " (condition and " + std::to_string(n) + " loop-carried values)");
  size_t k_scan = body.outputs.size() - 1 - n;
  if (ctx.num_outputs() > n + k_scan)
    ctx.fail("node has " + std::to_string(ctx.num_outputs()) + " outputs, expected at most " + std::to_string(n + k_scan));

  std::vector<std::vector<Tensor>> scans(k_scan);
  for (int64_t i = 0; (!has_trip || i < trip) && cond; ++i) {
    if (i >= kMaxLoopIterations)
      ctx.fail("the loop has no trip count and its condition stayed true for " + std::to_string(i) + " iterations");
    std::vector<ir::Value> ins{Tensor::scalar<int64_t>(i), Tensor::scalar<bool>(cond)};
    ins.insert(ins.end(), carried.begin(), carried.end());
    std::vector<ir::Value> outs = ctx.run_subgraph(body, ins);
    cond = truth(ctx, tensor_of(ctx, outs[0], "body condition output"), "body condition output");
    for (size_t j = 0; j < n; ++j) carried[j] = outs[1 + j];
    for (size_t j = 0; j < k_scan; ++j) scans[j].push_back(tensor_of(ctx, outs[1 + n + j], "scan output " + std::to_string(j)));
  }
  for (size_t j = 0; j < n && j < ctx.num_outputs(); ++j)
    if (ctx.output_wanted(j)) ctx.set_output_value(j, carried[j]);
  for (size_t j = 0; j < k_scan && n + j < ctx.num_outputs(); ++j) {
    if (!ctx.output_wanted(n + j)) continue;
    auto [dtype, dims] = declared(body.outputs[1 + n + j]);
    ctx.set_output(n + j, stack(ctx, scans[j], 0, dtype, dims, "scan output " + std::to_string(j)));
  }
}

// One Scan over unbatched inputs (opset 9+ semantics, also used per batch
// entry for opset 8). `states` are the initial loop-carried values; returns
// the final states followed by the stacked scan outputs.
std::vector<Tensor> scan_once(const KernelContext& ctx, const ir::Graph& body, std::vector<Tensor> states,
                              const std::vector<Tensor>& scan_inputs, const std::vector<int64_t>& in_axes,
                              const std::vector<int64_t>& in_dirs, const std::vector<int64_t>& out_axes,
                              const std::vector<int64_t>& out_dirs, int64_t seq_len) {
  size_t n = states.size(), m = scan_inputs.size();
  if (body.outputs.size() < n) ctx.fail("body produces fewer outputs than there are state variables");
  size_t k = body.outputs.size() - n;
  std::vector<std::vector<Tensor>> parts(k);
  for (int64_t t = 0; t < seq_len; ++t) {
    std::vector<ir::Value> ins(states.begin(), states.end());
    for (size_t j = 0; j < m; ++j) ins.push_back(take_slice(scan_inputs[j], in_axes[j], in_dirs[j] ? seq_len - 1 - t : t));
    std::vector<ir::Value> outs = ctx.run_subgraph(body, ins);
    for (size_t j = 0; j < n; ++j) states[j] = tensor_of(ctx, outs[j], "state output " + std::to_string(j));
    for (size_t j = 0; j < k; ++j) parts[j].push_back(tensor_of(ctx, outs[n + j], "scan output " + std::to_string(j)));
  }
  std::vector<Tensor> result = states;
  for (size_t j = 0; j < k; ++j) {
    // A reverse scan output holds the last iteration's value first.
    if (out_dirs[j]) std::reverse(parts[j].begin(), parts[j].end());
    auto [dtype, dims] = declared(body.outputs[n + j]);
    result.push_back(stack(ctx, parts[j], out_axes[j], dtype, dims, "scan output " + std::to_string(j)));
  }
  return result;
}

// Per-variable attribute list of 0/1 flags or axes, defaulting to zeros.
std::vector<int64_t> per_value_attr(const KernelContext& ctx, const char* name, size_t count) {
  std::vector<int64_t> v = ctx.attr_ints(name, std::vector<int64_t>(count, 0));
  if (v.size() != count)
    ctx.fail(std::string(name) + " has " + std::to_string(v.size()) + " entries, expected " + std::to_string(count));
  return v;
}

void scan(KernelContext& ctx) {
  const ir::Graph& body = ctx.attr_graph("body");
  int64_t m_attr = ctx.attr_int("num_scan_inputs");
  bool v8 = ctx.opset() < 9;
  size_t first = v8 ? 1 : 0;  // opset 8 starts with the optional sequence_lens
  if (m_attr < 1 || size_t(m_attr) > ctx.num_inputs() - first)
    ctx.fail("num_scan_inputs is " + std::to_string(m_attr) + ", expected a value in [1, " +
             std::to_string(ctx.num_inputs() - first) + "]");
  size_t m = size_t(m_attr);
  size_t n = ctx.num_inputs() - first - m;
  if (body.inputs.size() != n + m)
    ctx.fail("body takes " + std::to_string(body.inputs.size()) + " inputs, expected " + std::to_string(n + m));
  if (body.outputs.size() < n || ctx.num_outputs() > body.outputs.size())
    ctx.fail("body produces " + std::to_string(body.outputs.size()) + " outputs, expected " + std::to_string(n) +
             " states plus the node's scan outputs");
  size_t k = body.outputs.size() - n;

  std::vector<Tensor> states, scan_inputs;
  for (size_t i = 0; i < n; ++i) states.push_back(ctx.input(first + i));
  for (size_t i = 0; i < m; ++i) scan_inputs.push_back(ctx.input(first + n + i));

  auto set_outputs = [&](const std::vector<Tensor>& result) {
    for (size_t i = 0; i < result.size() && i < ctx.num_outputs(); ++i)
      if (ctx.output_wanted(i)) ctx.set_output(i, result[i]);
  };

  if (!v8) {
    std::vector<int64_t> in_axes = per_value_attr(ctx, "scan_input_axes", m);
    std::vector<int64_t> in_dirs = per_value_attr(ctx, "scan_input_directions", m);
    std::vector<int64_t> out_axes = per_value_attr(ctx, "scan_output_axes", k);
    std::vector<int64_t> out_dirs = per_value_attr(ctx, "scan_output_directions", k);
    int64_t seq_len = -1;
    for (size_t j = 0; j < m; ++j) {
      in_axes[j] = normalize_axis(ctx, in_axes[j], scan_inputs[j].rank());
      int64_t len = scan_inputs[j].dim(int(in_axes[j]));
      if (seq_len >= 0 && len != seq_len)
        ctx.fail("scan input " + std::to_string(j) + " has sequence length " + std::to_string(len) + ", expected " +
                 std::to_string(seq_len) + " like the scan inputs before it");
      seq_len = len;
    }
    set_outputs(scan_once(ctx, body, states, scan_inputs, in_axes, in_dirs, out_axes, out_dirs, seq_len));
    return;
  }

  // Opset 8: every input carries a leading batch axis and the scan axis is 1;
  // each batch entry is scanned separately over its own sequence length.
  std::vector<int64_t> in_dirs = per_value_attr(ctx, "directions", m);
  std::vector<int64_t> zeros_m(m, 0), zeros_k(k, 0);
  int64_t batch = -1, max_len = -1;
  for (const auto& t : states) {
    if (t.rank() < 1) ctx.fail("state inputs need a leading batch axis, got a scalar");
    batch = t.dim(0);
  }
  for (const auto& t : scan_inputs) {
    if (t.rank() < 2) ctx.fail("scan inputs need batch and sequence axes, got shape " + ir::dims_to_string(t.dims()));
    if (batch >= 0 && t.dim(0) != batch)
      ctx.fail("scan input batch size " + std::to_string(t.dim(0)) + " differs from " + std::to_string(batch));
    if (max_len >= 0 && t.dim(1) != max_len)
      ctx.fail("scan inputs have different sequence lengths " + std::to_string(t.dim(1)) + " and " + std::to_string(max_len));
    batch = t.dim(0);
    max_len = t.dim(1);
  }
  for (const auto& t : states)
    if (t.dim(0) != batch) ctx.fail("state batch size " + std::to_string(t.dim(0)) + " differs from " + std::to_string(batch));
  std::vector<int64_t> lens(size_t(batch), max_len);
  if (ctx.has_input(0)) {
    const Tensor& sl = ctx.input(0);
    if (sl.numel() != batch)
      ctx.fail("sequence_lens has " + std::to_string(sl.numel()) + " entries, expected " + std::to_string(batch));
    for (int64_t b = 0; b < batch; ++b) {
      lens[size_t(b)] = sl.as_int64(b);
      if (lens[size_t(b)] < 0 || lens[size_t(b)] > max_len)
        ctx.fail("sequence_lens[" + std::to_string(b) + "] is " + std::to_string(lens[size_t(b)]) + ", expected a value in [0, " +
                 std::to_string(max_len) + "]");
    }
  }

  std::vector<std::vector<Tensor>> per_output(n + k);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<Tensor> bs, bx;
    for (const auto& t : states) bs.push_back(take_slice(t, 0, b));
    for (const auto& t : scan_inputs) {
      // Only the first lens[b] steps belong to this entry; reverse scans start at its last valid step.
      Tensor s = take_slice(t, 0, b);
      if (lens[size_t(b)] < max_len) {
        std::vector<Tensor> steps;
        for (int64_t i = 0; i < lens[size_t(b)]; ++i) steps.push_back(take_slice(s, 0, i));
        Dims elem(s.dims().begin() + 1, s.dims().end());
        s = stack(ctx, steps, 0, s.dtype(), elem, "scan input");
      }
      bx.push_back(s);
    }
    std::vector<Tensor> r = scan_once(ctx, body, bs, bx, zeros_m, in_dirs, zeros_k, zeros_k, lens[size_t(b)]);
    for (size_t j = 0; j < n + k; ++j) {
      Tensor v = r[j];
      // Scan outputs of short sequences are zero-padded to the common length.
      if (j >= n && v.dim(0) < max_len) {
        std::vector<Tensor> steps;
        for (int64_t i = 0; i < v.dim(0); ++i) steps.push_back(take_slice(v, 0, i));
        Dims elem(v.dims().begin() + 1, v.dims().end());
        while (int64_t(steps.size()) < max_len) steps.emplace_back(v.dtype(), elem);
        v = stack(ctx, steps, 0, v.dtype(), elem, "scan output");
      }
      per_output[j].push_back(v);
    }
  }
  std::vector<Tensor> result;
  for (size_t j = 0; j < n + k; ++j) {
    auto [dtype, dims] = declared(body.outputs[j]);
    if (j >= n) dims.insert(dims.begin(), max_len);
    result.push_back(stack(ctx, per_output[j], 0, dtype, dims, "scan result " + std::to_string(j)));
  }
  set_outputs(result);
}

}  // namespace

void register_control_flow_ops(KernelRegistry& r) {
  r.add("If", &if_op);
  r.add("Loop", &loop);
  r.add("Scan", &scan);
}

}  // namespace kiln::ref
