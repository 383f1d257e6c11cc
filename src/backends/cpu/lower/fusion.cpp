#include "backends/cpu/lower/fusion.hpp"

#include <cmath>

#include "backends/cpu/lower/context.hpp"
#include "backends/reference/kernel_context.hpp"

namespace kiln::cpu::lowering {

namespace {

// The single consumer of `v` with op `op`, or nullptr.
const ir::Node* only_consumer(Context& cx, const std::string& v, const char* op) {
  if (!cx.single_use(v)) return nullptr;
  const ir::Node& n = cx.graph.nodes[cx.consumers(v)[0]];
  return n.op_type == op && n.domain.empty() ? &n : nullptr;
}

size_t index_of(Context& cx, const ir::Node* n) { return size_t(n - cx.graph.nodes.data()); }

// x * gate(x), x read by nothing else: SiLU (gate Sigmoid) and Hardswish
// (gate HardSigmoid with alpha 1/6 and beta 1/2, what PyTorch writes).
std::optional<std::pair<std::string, std::vector<size_t>>> match_gated(Context& cx, const std::string& x, const char* gate_op) {
  const auto& cs = cx.consumers(x);
  if (cs.size() != 2 || cx.output_of.count(x)) return std::nullopt;
  for (int s = 0; s < 2; ++s) {
    const ir::Node& gate = cx.graph.nodes[cs[size_t(s)]];
    const ir::Node& mul = cx.graph.nodes[cs[size_t(1 - s)]];
    if (gate.op_type != gate_op || mul.op_type != "Mul" || !gate.domain.empty() || !mul.domain.empty()) continue;
    if (!only_consumer(cx, gate.outputs[0], "Mul") ||
        index_of(cx, only_consumer(cx, gate.outputs[0], "Mul")) != cs[size_t(1 - s)])
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
std::optional<std::pair<std::string, std::vector<size_t>>> match_gelu(Context& cx, const std::string& x) {
  const auto& cs = cx.consumers(x);
  if (cs.size() != 2 || cx.output_of.count(x)) return std::nullopt;
  for (int s = 0; s < 2; ++s) {
    const ir::Node& scale = cx.graph.nodes[cs[size_t(s)]];
    const ir::Node& mul = cx.graph.nodes[cs[size_t(1 - s)]];
    if (scale.inputs.size() != 2 || scale.inputs[0] != x || mul.op_type != "Mul") continue;
    auto k = cx.scalar_constant(scale.inputs[1]);
    if (!k) continue;
    const float inv_sqrt2 = scale.op_type == "Div" ? 1 / *k : scale.op_type == "Mul" ? *k : 0;
    if (std::fabs(inv_sqrt2 - 0.70710678f) > 1e-4f) continue;
    const ir::Node* erf = only_consumer(cx, scale.outputs[0], "Erf");
    if (!erf) continue;
    const ir::Node* add = only_consumer(cx, erf->outputs[0], "Add");
    if (!add) continue;
    const std::string& one = add->inputs[0] == erf->outputs[0] ? add->inputs[1] : add->inputs[0];
    if (cx.scalar_constant(one) != 1.0f) continue;
    const ir::Node* prod = only_consumer(cx, add->outputs[0], "Mul");
    if (!prod || index_of(cx, prod) != cs[size_t(1 - s)]) continue;
    std::string other = prod->inputs[0] == add->outputs[0] ? prod->inputs[1] : prod->inputs[0];
    std::vector<size_t> nodes{cs[size_t(s)], index_of(cx, erf), index_of(cx, add), index_of(cx, prod)};
    const ir::Node* half = nullptr;
    if (other == x) {
      half = only_consumer(cx, prod->outputs[0], "Mul");
    } else {
      // 0.5 * x computed first: other = Mul(x, 0.5) -- but then x has a third consumer.
      continue;
    }
    if (!half) continue;
    const std::string& h = half->inputs[0] == prod->outputs[0] ? half->inputs[1] : half->inputs[0];
    if (cx.scalar_constant(h) != 0.5f) continue;
    nodes.push_back(index_of(cx, half));
    return std::make_pair(half->outputs[0], nodes);
  }
  return std::nullopt;
}

std::optional<PostOp> activation(Context& cx, const ir::Node& n) {
  ref::KernelContext ctx(n, {}, nullptr);
  const std::string& op = n.op_type;
  if (op == "Relu") return PostOp{dnnl::algorithm::eltwise_relu, 0, 0};
  if (op == "LeakyRelu") return PostOp{dnnl::algorithm::eltwise_relu, ctx.attr_float("alpha", 0.01f), 0};
  if (op == "Sigmoid") return PostOp{dnnl::algorithm::eltwise_logistic, 0, 0};
  if (op == "Tanh") return PostOp{dnnl::algorithm::eltwise_tanh, 0, 0};
  if (op == "HardSwish") return PostOp{dnnl::algorithm::eltwise_hardswish, 0, 0};
  if (op == "Elu") return PostOp{dnnl::algorithm::eltwise_elu, ctx.attr_float("alpha", 1.0f), 0};
  if (op == "Clip") {
    auto bounds = clip_bounds(cx, n);
    if (!bounds) return std::nullopt;
    return PostOp{dnnl::algorithm::eltwise_clip_v2, bounds->first, bounds->second};
  }
  return std::nullopt;
}

std::optional<Epilogue> portable_activation(Fused f) {
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

}  // namespace

Fused fuse_after(Context& cx, const std::string& value, bool allow_sum) {
  Fused f = fuse_chain(cx, value, allow_sum);
  // oneDNN 2.6 applies the parameters of the first post-op of an
  // algorithm to every later one of the same algorithm (linear(2,0) then
  // linear(1,0.25) computes 4x): the chain ends before a repeated algorithm.
  for (size_t i = 1; i < f.eltwise.size(); ++i)
    for (size_t k = 0; k < i; ++k)
      if (f.eltwise[k].alg == f.eltwise[i].alg) return fuse_chain(cx, value, allow_sum, i);
  return f;
}

Fused fuse_chain(Context& cx, const std::string& value, bool allow_sum, size_t max_eltwise) {
  Fused f;
  f.value = value;
  for (;;) {
    if (f.eltwise.size() >= max_eltwise) break;
    const std::string v = f.value;
    if (auto silu = match_gated(cx, v, "Sigmoid")) {
      f.eltwise.push_back({dnnl::algorithm::eltwise_swish, 1.0f, 0});
      f.nodes.insert(f.nodes.end(), silu->second.begin(), silu->second.end());
      f.value = silu->first;
      continue;
    }
    // Before opset 14 PyTorch exports Hardswish as x * HardSigmoid(x)
    // (alpha 1/6, beta 1/2): MobileNetV3 has one after most convolutions.
    if (auto hard_swish = match_gated(cx, v, "HardSigmoid")) {
      f.eltwise.push_back({dnnl::algorithm::eltwise_hardswish, 0, 0});
      f.nodes.insert(f.nodes.end(), hard_swish->second.begin(), hard_swish->second.end());
      f.value = hard_swish->first;
      continue;
    }
    if (auto gelu = match_gelu(cx, v)) {
      f.eltwise.push_back({dnnl::algorithm::eltwise_gelu_erf, 0, 0});
      f.nodes.insert(f.nodes.end(), gelu->second.begin(), gelu->second.end());
      f.value = gelu->first;
      continue;
    }
    if (!cx.single_use(v)) break;
    const size_t c = cx.consumers(v)[0];
    const ir::Node& n = cx.graph.nodes[c];
    if (!n.domain.empty() || n.outputs.size() != 1 || !cx.is_f32(n.outputs[0]) || cx.dims(n.outputs[0]) != cx.dims(v)) break;
    std::optional<PostOp> post = activation(cx, n);
    if (post) {
      f.eltwise.push_back(*post);
    } else if (n.op_type == "HardSigmoid") {
      // max(0, min(1, alpha x + beta)); oneDNN 2.6 has no such eltwise, so two.
      if (f.eltwise.size() + 2 > max_eltwise) break;
      ref::KernelContext ctx(n, {}, nullptr);
      f.eltwise.push_back({dnnl::algorithm::eltwise_linear, ctx.attr_float("alpha", 0.2f), ctx.attr_float("beta", 0.5f)});
      f.eltwise.push_back({dnnl::algorithm::eltwise_clip_v2, 0, 1});
    } else if ((n.op_type == "Add" || n.op_type == "Mul" || n.op_type == "Sub" || n.op_type == "Div") && n.inputs.size() == 2) {
      const bool first = n.inputs[0] == v;
      const std::string other = first ? n.inputs[1] : n.inputs[0];
      if (other == v) break;
      if (auto c_value = cx.scalar_constant(other)) {  // x op c is linear
        const float k = *c_value;
        if (n.op_type == "Add")
          f.eltwise.push_back({dnnl::algorithm::eltwise_linear, 1, k});
        else if (n.op_type == "Mul")
          f.eltwise.push_back({dnnl::algorithm::eltwise_linear, k, 0});
        else if (n.op_type == "Sub")
          f.eltwise.push_back({dnnl::algorithm::eltwise_linear, first ? 1.0f : -1.0f, first ? -k : k});
        else if (first)
          f.eltwise.push_back({dnnl::algorithm::eltwise_linear, 1 / k, 0});
        else
          break;
      } else if (n.op_type == "Add" && allow_sum && f.sum_position < 0 && cx.is_f32(other) && cx.dims(other) == cx.dims(v) &&
                 cx.available(other)) {
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

std::optional<std::pair<float, float>> clip_bounds(Context& cx, const ir::Node& n) {
  ref::KernelContext ctx(n, {}, nullptr);
  float lo = -INFINITY, hi = INFINITY;
  if (n.opset < 11) {
    lo = ctx.attr_float("min", lo);
    hi = ctx.attr_float("max", hi);
  } else {
    for (int i : {1, 2}) {
      if (n.inputs.size() <= size_t(i) || n.inputs[size_t(i)].empty()) continue;
      auto c = cx.scalar_constant(n.inputs[size_t(i)]);
      if (!c) return std::nullopt;
      (i == 1 ? lo : hi) = *c;
    }
  }
  return std::make_pair(lo, hi);
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

void absorb(Context& cx, const Fused& f) {
  for (size_t n : f.nodes) cx.absorbed[n] = 1;
  cx.compiled(int(f.nodes.size()));
}

void emit_with_dst(Context& cx, const std::string& label, const dnnl::primitive_desc_base& pd,
                   std::vector<std::pair<int, md>> rt_args, std::vector<int> buffers,
                   std::unordered_map<int, dnnl::memory> constants, const Fused& f, const md& dst_md, bool dst_plain) {
  int sum_from = -1;
  if (f.sum_position >= 0) {
    const md residual_md = dst_plain ? plain_md(cx.dims(f.residual)) : dst_md;
    buffers.push_back(cx.as_layout(f.residual, residual_md));
    rt_args.push_back({OneDnnKernel::kNotBound, residual_md});
    sum_from = int(buffers.size()) - 1;
  }
  buffers.push_back(cx.define(f.value, dst_md, dst_plain));
  rt_args.push_back({DNNL_ARG_DST, dst_md});
  if (sum_from >= 0) cx.sum_into(size_t(sum_from), buffers.size() - 1);
  std::vector<char> writes(buffers.size(), 0);
  writes.back() = 1;
  cx.add_primitive(label, pd, std::move(buffers), std::move(writes), std::move(rt_args), std::move(constants), sum_from);
  absorb(cx, f);
}

Epilogue portable_epilogue(Context& cx, const std::string& value, bool allow_sum) {
  // The residual is added before the activation, so a chain that adds it
  // after one stops before the Add.
  for (bool sum : {allow_sum, false})
    for (size_t max_eltwise : {size_t(1), size_t(0)}) {
      Fused f = fuse_chain(cx, value, sum, max_eltwise);
      if (f.sum_position > 0) continue;
      if (auto e = portable_activation(std::move(f))) return *e;
    }
  Epilogue none;
  none.fused.value = value;
  return none;
}

Call::Arg epilogue_args(Context& cx, const Epilogue& e, std::vector<int>& args, std::vector<char>& writes, int& dst) {
  Call::Arg residual = Call::null();
  if (!e.fused.residual.empty()) {
    args.push_back(cx.plain(e.fused.residual));
    writes.push_back(0);
    residual = Call::buffer(int(args.size()) - 1);
  }
  args.push_back(cx.define_plain(e.fused.value));
  writes.push_back(1);
  dst = int(args.size()) - 1;
  return residual;
}

}  // namespace kiln::cpu::lowering
