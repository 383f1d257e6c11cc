// Elementwise operators: chains of them fused into one generated loop (in
// the layout of the values they read where the loop can walk it), and
// binary operators between values in oneDNN's blocked layouts as oneDNN
// binary primitives.
#include <map>
#include <set>

#include "backends/cpu/lower/context.hpp"
#include "backends/cpu/lower/families.hpp"
#include "backends/cpu/lower/fusion.hpp"
#include "backends/cpu/lower/op_table.hpp"
#include "backends/reference/kernel_context.hpp"
#include "backends/reference/ops/op_util.hpp"

namespace kiln::cpu::lowering {

namespace {

using Op = Loop::Op;

std::optional<dnnl::algorithm> binary_algorithm(const std::string& op) {
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
bool lower_blocked_binary(Context& cx, const ir::Node& n) {
  if (n.inputs.size() != 2 || !cx.is_f32(n.inputs[0]) || !cx.is_f32(n.inputs[1]) || !cx.is_f32(n.outputs[0])) return false;
  const Dims out = cx.dims(n.outputs[0]);
  const std::string &a = n.inputs[0], &b = n.inputs[1];
  // oneDNN broadcasts only its second source: the full-shaped blocked one comes first.
  const bool commutative = n.op_type == "Add" || n.op_type == "Mul" || n.op_type == "Max" || n.op_type == "Min";
  std::string full, other;
  if (cx.dims(a) == out && cx.val(a).blocked) {
    full = a;
    other = b;
  } else if (commutative && cx.dims(b) == out && cx.val(b).blocked) {
    full = b;
    other = a;
  } else {
    return false;
  }
  Dims od = cx.dims(other);
  if (od.size() > out.size()) return false;
  od.insert(od.begin(), out.size() - od.size(), 1);
  for (size_t i = 0; i < out.size(); ++i)
    if (od[i] != 1 && od[i] != out[i]) return false;
  const md src0 = cx.val(full).layout;
  // The second operand as it is when it already has the first's layout, else plain.
  md src1 = cx.dims(other) == out ? src0 : plain_md(od);
  const int block = channel_block(src0);
  const bool per_channel = src1 != src0 && block && cx.dims(other).size() == od.size() &&
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
  const int b1 = src1 == src0  ? cx.as_layout(other, src0)
                 : per_channel ? (od[1] % block == 0 ? cx.plain(other) : cx.as_layout(other, src1))
                               : cx.plain(other);
  const int b0 = cx.val(full).buffer;
  Fused f;
  f.value = n.outputs[0];
  cx.compiled();
  emit_with_dst(cx, n.describe(), pd, {{DNNL_ARG_SRC_0, src0}, {DNNL_ARG_SRC_1, src1}}, {b0, b1}, {}, f, pd.dst_desc(),
                is_plain(pd.dst_desc(), out));
  return true;
}

bool all_f32(Context& cx, const ir::Node& n) {
  for (const auto& v : n.inputs)
    if (!v.empty() && !cx.is_f32(v)) return false;
  return cx.is_f32(n.outputs[0]);
}

bool variadic(const std::string& op) { return op == "Max" || op == "Min" || op == "Sum" || op == "Mean"; }

// Loops of element types other than float32 compute as the reference
// kernels do (Loop::Op's note): the operators and types they take.
bool floating(DType t) { return t == DType::Float32 || t == DType::Float64 || t == DType::Float16; }
bool numeric(DType t) { return floating(t) || ir::dtype_is_int(t); }

bool typed_candidate(Context& cx, const ir::Node& n) {
  const std::string& op = n.op_type;
  const DType out = cx.dtype(n.outputs[0]);
  auto input_type = [&](size_t i) {
    return n.inputs.size() > i && !n.inputs[i].empty() ? cx.dtype(n.inputs[i]) : DType::Undefined;
  };
  auto inputs_are = [&](DType t, size_t from = 0) {
    for (size_t i = from; i < n.inputs.size(); ++i)
      if (n.inputs[i].empty() || cx.dtype(n.inputs[i]) != t) return false;
    return true;
  };
  const DType x = input_type(0);
  if (n.inputs.empty() || x == DType::Undefined) return false;
  if (op == "Cast" || op == "CastLike")
    return (numeric(x) || x == DType::Bool) && (numeric(out) || out == DType::Bool) && x != out &&
           n.inputs.size() == (op == "Cast" ? 1u : 2u);
  if (op == "Where")
    return n.inputs.size() == 3 && x == DType::Bool && inputs_are(out, 1) && (numeric(out) || out == DType::Bool);
  if (op == "Not") return n.inputs.size() == 1 && x == DType::Bool && out == DType::Bool;
  if (op == "IsNaN" || op == "IsInf") return n.inputs.size() == 1 && floating(x) && out == DType::Bool;
  if (op == "Pow")  // the exponent of any numeric type; the result the base's
    return n.inputs.size() == 2 && (floating(x) || ir::dtype_is_signed_int(x)) && numeric(input_type(1)) && out == x;
  if (op == "Clip") {  // bounds of one element, from inputs (opset 11 on)
    if (n.opset < 11 || n.inputs.size() > 3 || !numeric(x) || out != x) return false;
    for (size_t i = 1; i < n.inputs.size(); ++i)
      if (!n.inputs[i].empty() && (cx.dtype(n.inputs[i]) != x || ir::checked_numel(cx.dims(n.inputs[i])) != 1)) return false;
    return true;
  }
  if (out != x || !(variadic(op) ? !n.inputs.empty() : int(n.inputs.size()) == find_op(n)->arity) || !inputs_are(x)) return false;
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Max" || op == "Min" || op == "Sum" || op == "Abs" || op == "Sign" ||
      op == "Shrink")
    return numeric(x);
  if (op == "Neg" || op == "Relu") return floating(x) || ir::dtype_is_signed_int(x);
  ref::KernelContext ctx(n, {}, nullptr);  // attributes the reference kernel refuses are its to report
  if (op == "BitShift") {
    const std::string direction = ctx.attr_string("direction", "");
    return ir::dtype_is_unsigned_int(x) && (direction == "LEFT" || direction == "RIGHT");
  }
  if (op == "Celu" && ctx.attr_float("alpha", 1.0f) == 0) return false;
  if (op == "Div" || op == "Mean" || op == "Mod" || op == "Round" || op == "ThresholdedRelu" || op == "Celu" ||
      find_op(n)->loop_op == Op::Libm)
    return floating(x);
  if (op == "Floor" || op == "Ceil" || op == "Sqrt" || op == "Reciprocal") return x == DType::Float64;
  return false;
}

bool loop_candidate(Context& cx, const ir::Node& n, const Dims& shape) {
  const OpLowering* op = find_op(n);
  if (!op || op->kind != StepKind::Loop || !n.domain.empty() || n.outputs.size() != 1 || n.outputs[0].empty()) return false;
  if (cx.dims(n.outputs[0]) != shape) return false;
  if (op->loop_op >= Op::Cast || !all_f32(cx, n)) return typed_candidate(cx, n);
  const bool clip = n.op_type == "Clip";
  if (clip ? n.inputs.empty() || n.inputs.size() > 3 : variadic(n.op_type) ? n.inputs.empty() : int(n.inputs.size()) != op->arity)
    return false;
  if (clip && !clip_bounds(cx, n)) return typed_candidate(cx, n);  // bounds of the run
  if (n.op_type == "PRelu") {                                      // the slope broadcasts to the input
    if (cx.dims(n.inputs[0]) != shape) return false;
  }
  return true;
}

// Whether a loop in `layout` over `shape` reads `name` well. Not an
// operand that broadcasts against values in channel blocks: it would be
// read in rows as short as a block (RegNet's scales in 8-channel blocks
// took 0.6 ms instead of 0.15 after a reorder to plain), so a loop in
// channel blocks reads only values of its shape, in its layout, and walks
// them as one flat array.
bool readable_in(Context& cx, const md& layout, const std::string& name, const Dims& shape) {
  return layout.data.format_desc.blocking.inner_nblks == 0 || cx.dims(name) == shape || cx.scalar_constant(name);
}

// The layout a loop starting at `first` runs in: that of its first input of
// the output's shape when that one is in a oneDNN layout the loop can
// walk, else plain (nothing).
std::optional<std::pair<md, std::vector<PhysicalAxis>>> loop_layout(Context& cx, const ir::Node& first, const Dims& shape) {
  if (!all_f32(cx, first)) return std::nullopt;  // oneDNN's layouts hold float32 here
  for (const auto& in : first.inputs) {
    if (in.empty() || !cx.is_f32(in) || cx.dims(in) != shape || !cx.val(in).blocked) continue;
    const md& layout = cx.val(in).layout;
    auto axes = physical_axes(layout);
    if (!axes) return std::nullopt;
    for (const auto& other : first.inputs)
      if (!other.empty() && !readable_in(cx, layout, other, shape)) return std::nullopt;
    return std::make_pair(layout, *axes);
  }
  return std::nullopt;
}

}  // namespace

bool lower_loop(Context& cx, const ir::Node& first) {
  const Dims shape = cx.dims(first.outputs[0]);
  if (!loop_candidate(cx, first, shape)) return false;
  auto loop = std::make_unique<Loop>();
  loop->shape = shape;
  // A loop over values in a oneDNN layout (a squeeze-and-excitation scale
  // of channels-last activations) runs in that layout, its outputs too:
  // the loop's axes are the layout's, and an operand that broadcasts
  // (read plain) steps along them as its dims do.
  const auto layout = loop_layout(cx, first, shape);
  if (layout) {
    loop->shape.clear();
    for (const PhysicalAxis& a : layout->second) loop->shape.push_back(a.size);
    if (loop->shape.empty()) loop->shape.push_back(1);
  }
  std::vector<int> args;
  std::map<std::string, int> ssa;      // values computed or loaded in the loop
  std::map<std::string, int> operand;  // external values, by operand index
  std::set<std::string> computed;      // outputs of the loop's nodes
  std::vector<size_t> members;

  auto load = [&](const std::string& name) -> int {
    if (auto it = ssa.find(name); it != ssa.end()) return it->second;
    if (auto c = cx.scalar_constant(name)) {
      loop->code.push_back({Op::Constant, -1, -1, *c, 0});
    } else {
      auto it = operand.find(name);
      if (it == operand.end()) {
        Loop::Operand o;
        o.arg = int(args.size());
        o.type = cx.dtype(name);
        const Dims d = cx.dims(name);
        const auto strides = ref::strides_of(d);
        // Per dim of `shape`: how far a step moves in the operand (0: broadcast).
        std::vector<int64_t> per_dim(shape.size(), 0);
        for (size_t i = 0; i < d.size(); ++i) per_dim[shape.size() - d.size() + i] = d[i] == 1 ? 0 : strides[i];
        if (!layout) {
          args.push_back(cx.plain(name));
          o.strides = per_dim;
        } else if (d == shape) {
          args.push_back(cx.as_layout(name, layout->first));
          o.strides = ref::strides_of(loop->shape);
        } else {
          args.push_back(cx.plain(name));
          for (const PhysicalAxis& a : layout->second) o.strides.push_back(per_dim[a.dim]);
          if (o.strides.empty()) o.strides.push_back(0);
        }
        loop->operands.push_back(o);
        it = operand.emplace(name, int(loop->operands.size()) - 1).first;
      }
      loop->code.push_back({Op::Load, it->second, -1, 0, 0, cx.dtype(name)});
    }
    return ssa[name] = int(loop->code.size()) - 1;
  };
  auto broadcastable = [&](const std::string& name) {
    if (layout && (!cx.is_f32(name) || !readable_in(cx, layout->first, name, shape))) return false;
    const Dims d = cx.dims(name);
    if (d.size() > shape.size()) return false;
    for (size_t i = 0; i < d.size(); ++i)
      if (d[i] != 1 && d[i] != shape[shape.size() - d.size() + i]) return false;
    return true;
  };
  auto add = [&](const ir::Node& n) {
    const OpLowering& info = *find_op(n);
    ref::KernelContext ctx(n, {}, nullptr);
    const DType type = cx.dtype(n.outputs[0]);
    const std::string& out = n.outputs[0];
    if (variadic(n.op_type)) {  // a chain of its binary operation, a Mean's sum divided
      int acc = load(n.inputs[0]);
      for (size_t k = 1; k < n.inputs.size(); ++k) {
        const int next = load(n.inputs[k]);
        loop->code.push_back({n.op_type == "Mean" || n.op_type == "Sum" ? Op::Add : info.loop_op, acc, next, 0, 0, type});
        acc = int(loop->code.size()) - 1;
      }
      if (n.op_type == "Mean" && n.inputs.size() > 1) {
        loop->code.push_back({Op::Constant, -1, -1, float(n.inputs.size()), 0, type});
        loop->code.push_back({Op::Div, acc, int(loop->code.size()) - 1, 0, 0, type});
        acc = int(loop->code.size()) - 1;
      }
      ssa[out] = acc;
      computed.insert(out);
      return;
    }
    Loop::Instr in;
    in.op = info.loop_op;
    in.type = type;
    const bool bounds_of_run = n.op_type == "Clip" && !(cx.is_f32(out) && clip_bounds(cx, n));
    if (bounds_of_run) {
      in.op = Op::ClipBetween;
      in.a = load(n.inputs[0]);
      if (n.inputs.size() > 1 && !n.inputs[1].empty()) in.b = load(n.inputs[1]);
      if (n.inputs.size() > 2 && !n.inputs[2].empty()) in.c = load(n.inputs[2]);
    } else {
      in.a = load(n.inputs[0]);
      if (info.arity >= 2 && n.op_type != "CastLike") in.b = load(n.inputs[1]);
      if (info.arity == 3) in.c = load(n.inputs[2]);
    }
    if (n.op_type == "Mod") in.alpha = float(ctx.attr_int("fmod", 0) != 0);
    if (n.op_type == "BitShift") in.alpha = float(ctx.attr_string("direction", "") == "RIGHT");
    if (n.op_type == "IsInf") {
      in.alpha = float(ctx.attr_int("detect_negative", 1) != 0);
      in.beta = float(ctx.attr_int("detect_positive", 1) != 0);
    }
    if (n.op_type == "ThresholdedRelu" || n.op_type == "Celu") in.alpha = ctx.attr_float("alpha", 1.0f);
    if (n.op_type == "Shrink") {
      in.alpha = ctx.attr_float("lambd", 0.5f);
      in.beta = ctx.attr_float("bias", 0.0f);
    }
    if (info.loop_op == Op::Libm) in.alpha = float(int(info.libm));
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
    if (n.op_type == "Clip" && !bounds_of_run) std::tie(in.alpha, in.beta) = *clip_bounds(cx, n);
    loop->code.push_back(in);
    ssa[n.outputs[0]] = int(loop->code.size()) - 1;
    computed.insert(n.outputs[0]);
  };

  auto loaded = [&](const ir::Node& n) {  // a Clip's constant bounds are not read, nor CastLike's model
    std::vector<std::string> read;
    for (const auto& in : n.inputs)
      if (!in.empty()) read.push_back(in);
    if (n.op_type == "CastLike" || (n.op_type == "Clip" && cx.is_f32(n.outputs[0]) && clip_bounds(cx, n))) read.resize(1);
    return read;
  };
  for (const auto& in : loaded(first))
    if (!broadcastable(in)) return false;
  add(first);
  members.push_back(cx.node);
  // Greedily take later elementwise nodes of the same shape whose other
  // inputs exist before the loop runs.
  for (size_t i = cx.node + 1; i < cx.graph.nodes.size() && i < cx.node + 64; ++i) {
    const ir::Node& n = cx.graph.nodes[i];
    if (cx.absorbed[i] || !loop_candidate(cx, n, shape) || (layout && !all_f32(cx, n))) continue;
    bool uses_group = false, ok = true;
    for (const auto& in : loaded(n)) {
      if (computed.count(in))
        uses_group = true;
      else if (!cx.available(in) || !broadcastable(in))
        ok = false;
    }
    if (!ok || !uses_group) continue;
    add(n);
    members.push_back(i);
  }

  // Store every member output someone outside the loop needs.
  std::set<size_t> member_set(members.begin(), members.end());
  std::vector<char> writes(args.size(), 0);
  for (size_t m : members) {
    const std::string& out = cx.graph.nodes[m].outputs[0];
    bool needed = cx.output_of.count(out) != 0;
    for (size_t c : cx.consumers(out))
      if (!member_set.count(c)) needed = true;
    if (!needed) continue;
    loop->stores.push_back({ssa.at(out), int(args.size())});
    args.push_back(layout ? cx.define(out, layout->first, false) : cx.define_plain(out));
    writes.push_back(1);
  }
  for (size_t m : members) cx.absorbed[m] = 1;
  cx.compiled(int(members.size()));
  Step s;
  s.label = first.describe() + (members.size() > 1 ? " and " + std::to_string(members.size() - 1) + " fused" : "");
  s.args = std::move(args);
  s.writes = std::move(writes);
  s.loop = std::move(loop);
  cx.program.steps.push_back(std::move(s));
  return true;
}

// A loop in the layout of a blocked input where the loop can walk it; else,
// between blocked operands, a oneDNN binary; else a loop over plain values.
bool lower_elementwise(Context& cx, const ir::Node& n) {
  if (n.outputs.size() == 1 && loop_layout(cx, n, cx.dims(n.outputs[0])) && lower_loop(cx, n)) return true;
  if (binary_algorithm(n.op_type) && lower_blocked_binary(cx, n)) return true;
  return lower_loop(cx, n);
}

bool lower_cast_or_loop(Context& cx, const ir::Node& n) { return lower_cast(cx, n) || lower_elementwise(cx, n); }
bool portable_cast_or_loop(Context& cx, const ir::Node& n) { return portable_cast(cx, n) || lower_loop(cx, n); }

}  // namespace kiln::cpu::lowering
