// Quantizers (ONNX Runtime's among them) write a quantized model as float
// operators between DequantizeLinear and QuantizeLinear nodes: int8 weights
// dequantized, activations quantized and dequantized around each operator.
// Run as written, every one of those is a float operator plus two
// conversions. Where the pattern is exactly an integer operator's meaning, it
// becomes that operator (QLinearConv, QLinearMatMul, ONNX Runtime's QGemm
// and QLinearAdd), which backends compile
// to int8 kernels; what is left of the conversions between such operators
// cancels out where it can.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/passes/new_value.hpp"
#include "runtime/passes/passes.hpp"

namespace kiln::passes {

namespace {

bool is_onnx(const ir::Node& n, const char* op) { return n.op_type == op && n.domain.empty(); }
bool is_8bit(ir::DType t) { return t == ir::DType::UInt8 || t == ir::DType::Int8; }

class QdqFuser {
 public:
  QdqFuser(ir::Graph& graph, ir::Specialization& spec) : g_(graph), spec_(spec), uses_(ir::use_counts(graph)) {
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      for (const auto& out : g_.nodes[i].outputs)
        if (!out.empty()) producer_[out] = i;
      for (const auto& in : g_.nodes[i].inputs) readers_[in].push_back(i);
    }
    for (const auto& out : g_.outputs) graph_output_[out.name] = true;
  }

  int run() {
    int fused = 0;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (is_onnx(g_.nodes[i], "Conv") && fuse(i, "QLinearConv")) ++fused;
      if (is_onnx(g_.nodes[i], "MatMul") && fuse(i, "QLinearMatMul")) ++fused;
      if (is_onnx(g_.nodes[i], "Gemm") && fuse(i, "QGemm")) ++fused;
    }
    fused += quantized_max_pools();
    fused += quantized_adds();
    fused += cancel_requantization();
    if (fused) remove_dead_nodes(g_);
    return fused;
  }

 private:
  // A DequantizeLinear's operands: the quantized value, its scale and zero
  // point (empty when the model omits it: zero).
  struct Dequantized {
    std::string value, scale, zero_point;
    const ir::Node* node;
  };

  const ir::Node* producer(const std::string& value) const {
    auto it = producer_.find(value);
    return it == producer_.end() ? nullptr : &g_.nodes[it->second];
  }
  ir::DType dtype(const std::string& value) const {
    if (const ir::Tensor* t = g_.constant(value)) return t->dtype();
    auto it = spec_.result.values.find(value);
    return it == spec_.result.values.end() ? ir::DType::Undefined : it->second.dtype;
  }
  bool float_constant(const std::string& name, int64_t count) const {
    const ir::Tensor* t = g_.constant(name);
    if (!t || t->dtype() != ir::DType::Float32 || t->numel() != count) return false;
    for (int64_t i = 0; i < count; ++i)
      if (!(t->data<float>()[i] > 0) || !std::isfinite(t->data<float>()[i])) return false;
    return true;
  }

  // `value` made by a DequantizeLinear of 8-bit values with a positive
  // scale: per tensor, or (with `channels` > 0) per channel along `axis`.
  std::optional<Dequantized> dequantized(const std::string& value, int64_t channels = 0, int64_t axis = 0) {
    const ir::Node* dq = producer(value);
    if (!dq || !is_onnx(*dq, "DequantizeLinear") || dq->inputs.size() < 2 || !is_8bit(dtype(dq->inputs[0]))) return std::nullopt;
    const ir::Tensor* scale = g_.constant(dq->inputs[1]);
    if (!scale) return std::nullopt;
    const ir::Tensor* weights = g_.constant(dq->inputs[0]);
    if (scale->dims().size() == 1 && channels > 0 && weights) {
      const ir::Attribute* a = dq->attr("axis");
      const int64_t rank = int64_t(weights->dims().size());
      const int64_t dq_axis = a ? (a->i < 0 ? a->i + rank : a->i) : 1;
      if (dq_axis != axis || !float_constant(dq->inputs[1], channels)) return std::nullopt;
    } else if (!scale->dims().empty() || !float_constant(dq->inputs[1], 1)) {
      return std::nullopt;
    }
    Dequantized d{dq->inputs[0], dq->inputs[1], dq->inputs.size() > 2 ? dq->inputs[2] : "", dq};
    if (!d.zero_point.empty()) {
      const ir::Tensor* zp = g_.constant(d.zero_point);
      if (!zp || zp->dtype() != dtype(d.value) || zp->dims() != scale->dims()) return std::nullopt;
    }
    return d;
  }

  // The zero point as the integer operators take it: an input always.
  std::string zero_point_of(const Dequantized& d) {
    if (!d.zero_point.empty()) return d.zero_point;
    const ir::Dims dims = g_.constant(d.scale)->dims();
    ir::Tensor t = ir::Tensor::uninitialized(dtype(d.value), dims);
    std::fill_n(static_cast<char*>(t.raw()), t.nbytes(), 0);
    return new_constant(g_, spec_, "zero_point", std::move(t));
  }

  // The node that alone reads `value` (once, as an input, and nothing else
  // reads it: no graph output, no subgraph), or nothing. Node indices are
  // those of the graph the pass started from; a rewritten node keeps its
  // index and reads only values no one asks this for.
  ir::Node* only_reader(const std::string& value) {
    auto uses = uses_.find(value);
    auto readers = readers_.find(value);
    if (uses == uses_.end() || uses->second != 1 || graph_output_.count(value) || readers == readers_.end() ||
        readers->second.size() != 1)
      return nullptr;
    return &g_.nodes[readers->second[0]];
  }

  // The QuantizeLinear that alone reads `value` (a per-tensor one), or
  // nothing. Its result is the fused node's.
  ir::Node* only_quantizer(const std::string& value) {
    ir::Node* n = only_reader(value);
    if (!n || !is_onnx(*n, "QuantizeLinear") || n->inputs[0] != value || n->inputs.size() < 2 || n->outputs.size() != 1)
      return nullptr;
    if (!g_.constant(n->inputs[1]) || !g_.constant(n->inputs[1])->dims().empty() || !float_constant(n->inputs[1], 1))
      return nullptr;
    if (n->inputs.size() > 2 && !n->inputs[2].empty()) {
      const ir::Tensor* zp = g_.constant(n->inputs[2]);
      if (!zp || !zp->dims().empty() || !is_8bit(zp->dtype())) return nullptr;
    }
    return n;
  }

  // The quantizer of `value`, directly or through a Relu that its saturation
  // computes anyway (its zero point is the lowest value), or nothing.
  ir::Node* quantizer_through_relu(const std::string& value) {
    if (ir::Node* q = only_quantizer(value)) return q;
    const ir::Node* relu = only_reader(value);
    if (!relu || !is_onnx(*relu, "Relu") || relu->outputs.size() != 1) return nullptr;
    ir::Node* q = only_quantizer(relu->outputs[0]);
    return q && lowest_zero_point(*q) ? q : nullptr;
  }

  // Conv, MatMul or Gemm at `index` between dequantized operands and one
  // quantizer becomes `op` on the quantized values.
  bool fuse(size_t index, const char* op) {
    const ir::Node n = g_.nodes[index];
    const bool conv = n.op_type == "Conv", gemm = n.op_type == "Gemm";
    if (n.inputs.size() < 2 || n.outputs.size() != 1) return false;
    // QGemm has no beta, and its transA is not worth taking: alpha and beta 1
    // and A as it is, as quantizers write a classifier.
    const ir::Attribute *trans_a = n.attr("transA"), *trans_b = n.attr("transB"), *alpha = n.attr("alpha"),
                        *beta = n.attr("beta");
    if (gemm && ((trans_a && trans_a->i) || (alpha && alpha->f != 1) || (beta && beta->f != 1))) return false;
    const bool transposed = gemm && trans_b && trans_b->i;
    const ir::Tensor* w = nullptr;
    const ir::Node* wdq = producer(n.inputs[1]);
    if (wdq && is_onnx(*wdq, "DequantizeLinear")) w = g_.constant(wdq->inputs[0]);
    if (!w || (conv ? w->dims().size() < 3 : w->dims().size() != 2)) return false;
    // Per output channel: Conv's weights along axis 0, MatMul's and Gemm's
    // along their columns (axis 1, axis 0 of Gemm's transposed B).
    const int64_t axis = conv || transposed ? 0 : 1;
    const int64_t channels = w->dims()[size_t(axis)];
    auto x = dequantized(n.inputs[0]);
    auto wq = dequantized(n.inputs[1], channels, axis);
    if (!x || !wq || dtype(wq->value) != ir::DType::Int8) return false;
    // The integer kernels take weights symmetric about zero.
    if (const ir::Tensor* wzp = wq->zero_point.empty() ? nullptr : g_.constant(wq->zero_point))
      for (int64_t i = 0; i < wzp->numel(); ++i)
        if (wzp->as_int64(i) != 0) return false;
    if (!int8_products_exact(dtype(x->value), *w)) return false;

    ir::Node* q = quantizer_through_relu(n.outputs[0]);
    if (!q) return false;
    std::optional<std::string> bias;
    if ((conv || gemm) && n.inputs.size() > 2 && !n.inputs[2].empty()) {
      // Gemm's C per column ([N] or [1, N]), not per row ([N, 1] when M is N).
      if (gemm && !(same_dims(n.inputs[2], {channels}) || same_dims(n.inputs[2], {1, channels}))) return false;
      if (!(bias = int32_bias(n.inputs[2], *x, *wq, channels))) return false;
    }
    std::vector<std::string> inputs = {x->value, x->scale, zero_point_of(*x), wq->value, wq->scale, zero_point_of(*wq)};
    // QGemm (com.microsoft's) takes the bias before the output's parameters.
    if (gemm) inputs.push_back(bias ? *bias : "");
    inputs.push_back(q->inputs[1]);
    inputs.push_back(y_zero_point(*q));
    if (bias && !gemm) inputs.push_back(*bias);
    ir::Node fused;
    fused.name = n.name + "_quantized";
    fused.op_type = op;
    fused.opset = 10;
    if (gemm) {
      fused.domain = "com.microsoft";
      fused.opset = 1;
      if (trans_b) fused.attributes["transB"] = *trans_b;
    }
    fused.inputs = std::move(inputs);
    fused.outputs = q->outputs;
    if (conv) fused.attributes = n.attributes;
    const std::string out = q->outputs[0];
    // The quantizer (and a Relu before it) become dead once nothing reads
    // the float result: the fused node takes the quantizer's output, which
    // no other node makes any more.
    q->outputs[0] = fresh_name(g_, spec_, out + "_unused");
    spec_.result.values[q->outputs[0]] = spec_.result.values.at(out);
    producer_[out] = index;
    g_.nodes[index] = std::move(fused);
    return true;
  }

  bool lowest_zero_point(const ir::Node& q) const {
    if (q.inputs.size() < 3 || q.inputs[2].empty()) return true;  // uint8, zero point 0
    const ir::Tensor* zp = g_.constant(q.inputs[2]);
    return zp->dtype() == ir::DType::UInt8 ? zp->as_int64(0) == 0 : zp->as_int64(0) == -128;
  }

  std::string y_zero_point(const ir::Node& q) {
    if (q.inputs.size() > 2 && !q.inputs[2].empty()) return q.inputs[2];
    return new_constant(g_, spec_, "zero_point", ir::Tensor::scalar<uint8_t>(0));
  }

  // The bias in int32 at scale x_scale * w_scale: a DequantizeLinear of an
  // int32 constant already at that scale, or a float constant rounded to it
  // (as ONNX Runtime's quantizer does).
  std::optional<std::string> int32_bias(const std::string& name, const Dequantized& x, const Dequantized& w, int64_t channels) {
    const float sx = g_.constant(x.scale)->data<float>()[0];
    const ir::Tensor* sw = g_.constant(w.scale);
    auto scale = [&](int64_t c) { return double(sx) * double(sw->data<float>()[sw->numel() == 1 ? 0 : c]); };
    if (const ir::Node* dq = producer(name); dq && is_onnx(*dq, "DequantizeLinear")) {
      const ir::Tensor* b = g_.constant(dq->inputs[0]);
      const ir::Tensor* bs = dq->inputs.size() > 1 ? g_.constant(dq->inputs[1]) : nullptr;
      if (!b || b->dtype() != ir::DType::Int32 || b->numel() != channels || !bs || bs->dtype() != ir::DType::Float32 ||
          (bs->numel() != 1 && bs->numel() != channels))
        return std::nullopt;
      if (dq->inputs.size() > 2 && !dq->inputs[2].empty()) {
        const ir::Tensor* zp = g_.constant(dq->inputs[2]);
        if (!zp) return std::nullopt;
        for (int64_t i = 0; i < zp->numel(); ++i)
          if (zp->as_int64(i) != 0) return std::nullopt;
      }
      for (int64_t c = 0; c < channels; ++c)
        if (std::abs(bs->data<float>()[bs->numel() == 1 ? 0 : c] - scale(c)) > 1e-6 * scale(c)) return std::nullopt;
      return dq->inputs[0];
    }
    const ir::Tensor* b = g_.constant(name);
    if (!b || b->dtype() != ir::DType::Float32 || b->numel() != channels) return std::nullopt;
    ir::Tensor q = ir::Tensor::uninitialized(ir::DType::Int32, {channels});
    for (int64_t c = 0; c < channels; ++c) {
      const double v = std::nearbyint(double(b->data<float>()[c]) / scale(c));
      if (!(std::abs(v) <= double(std::numeric_limits<int32_t>::max()))) return std::nullopt;
      q.data<int32_t>()[c] = int32_t(v);
    }
    return new_constant(g_, spec_, name + "_int32", std::move(q));
  }

  // DequantizeLinear -> MaxPool -> QuantizeLinear with the same scale and
  // zero point: the maximum of the quantized values is the quantized
  // maximum (scales are positive), so the MaxPool takes the quantized input
  // and makes the quantizer's output.
  int quantized_max_pools() {
    int moved = 0;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      ir::Node& pool = g_.nodes[i];
      if (!is_onnx(pool, "MaxPool") || pool.inputs.size() != 1 || pool.outputs.empty() || pool.outputs[0].empty()) continue;
      if (pool.outputs.size() > 1 && !pool.outputs[1].empty()) continue;  // Indices
      const ir::Node* dq = producer(pool.inputs[0]);
      ir::Node* q = only_quantizer(pool.outputs[0]);
      if (!dq || !is_onnx(*dq, "DequantizeLinear") || dq->inputs.size() < 2 || !q) continue;
      if (!same_tensor(q->inputs[1], dq->inputs[1]) || !same_zero_point(*q, *dq)) continue;
      const std::string out = q->outputs[0];
      q->outputs[0] = fresh_name(g_, spec_, out + "_unused");
      spec_.result.values[q->outputs[0]] = spec_.result.values.at(out);
      pool.inputs[0] = dq->inputs[0];
      pool.outputs = {out};
      producer_[out] = i;
      ++moved;
    }
    return moved;
  }

  // An Add of two dequantized 8-bit tensors whose result (through a Relu the
  // quantizer's saturation implies) only a QuantizeLinear reads: a residual
  // connection, or a bias broadcast along some axes. It becomes
  // com.microsoft's QLinearAdd (ONNX Runtime's), the sum of the dequantized
  // values requantized once. One operand must have the result's shape
  // (backends broadcast the other into it; a result larger than both stays
  // a float Add).
  int quantized_adds() {
    int made = 0;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const ir::Node add = g_.nodes[i];
      if (!is_onnx(add, "Add") || add.inputs.size() != 2 || add.outputs.size() != 1) continue;
      auto a = dequantized(add.inputs[0]), b = dequantized(add.inputs[1]);
      if (!a || !b || !(same_shape(a->value, add.outputs[0]) || same_shape(b->value, add.outputs[0]))) continue;
      ir::Node* q = quantizer_through_relu(add.outputs[0]);
      if (!q) continue;
      ir::Node fused;
      fused.name = add.name + "_quantized";
      fused.op_type = "QLinearAdd";
      fused.domain = "com.microsoft";
      fused.opset = 1;
      fused.inputs = {a->value, a->scale,          zero_point_of(*a), b->value,
                      b->scale, zero_point_of(*b), q->inputs[1],      y_zero_point(*q)};
      fused.outputs = q->outputs;
      const std::string out = q->outputs[0];
      q->outputs[0] = fresh_name(g_, spec_, out + "_unused");
      spec_.result.values[q->outputs[0]] = spec_.result.values.at(out);
      producer_[out] = i;
      g_.nodes[i] = std::move(fused);
      ++made;
    }
    return made;
  }

  bool same_dims(const std::string& value, const ir::Dims& dims) const {
    if (const ir::Tensor* t = g_.constant(value)) return t->dims() == dims;
    auto x = spec_.result.values.find(value);
    return x != spec_.result.values.end() && x->second.shape.is_concrete() && x->second.shape.concrete() == dims;
  }

  bool same_shape(const std::string& a, const std::string& b) const {
    auto x = spec_.result.values.find(a), y = spec_.result.values.find(b);
    return x != spec_.result.values.end() && y != spec_.result.values.end() && x->second.shape.is_concrete() &&
           y->second.shape.is_concrete() && x->second.shape.concrete() == y->second.shape.concrete();
  }

  // A QuantizeLinear of a DequantizeLinear with the same scale and zero
  // point gives back the quantized value: readers of the result read that.
  int cancel_requantization() {
    std::map<std::string, std::string> same;
    for (const ir::Node& q : g_.nodes) {
      if (!is_onnx(q, "QuantizeLinear") || q.inputs.size() < 2 || q.outputs.size() != 1 || graph_output_.count(q.outputs[0]))
        continue;
      const ir::Node* dq = producer(q.inputs[0]);
      if (!dq || !is_onnx(*dq, "DequantizeLinear") || dq->inputs.size() < 2) continue;
      if (!same_tensor(q.inputs[1], dq->inputs[1]) || !same_zero_point(q, *dq)) continue;
      same[q.outputs[0]] = dq->inputs[0];
    }
    for (ir::Node& n : g_.nodes)
      for (auto& in : n.inputs)
        if (auto it = same.find(in); it != same.end()) in = it->second;
    return int(same.size());
  }

  bool same_tensor(const std::string& a, const std::string& b) const {
    if (a == b) return g_.constant(a) != nullptr;
    const ir::Tensor *x = g_.constant(a), *y = g_.constant(b);
    return x && y && x->dtype() == y->dtype() && x->dims() == y->dims() && x->nbytes() == y->nbytes() &&
           std::equal(static_cast<const char*>(x->raw()), static_cast<const char*>(x->raw()) + x->nbytes(),
                      static_cast<const char*>(y->raw()));
  }
  // Zero points equal, an omitted one being uint8 zero; both per tensor.
  bool same_zero_point(const ir::Node& q, const ir::Node& dq) const {
    auto zp = [&](const ir::Node& n) -> std::optional<std::pair<ir::DType, int64_t>> {
      if (n.inputs.size() < 3 || n.inputs[2].empty()) return std::make_pair(ir::DType::UInt8, int64_t(0));
      const ir::Tensor* t = g_.constant(n.inputs[2]);
      if (!t || t->numel() != 1) return std::nullopt;
      return std::make_pair(t->dtype(), t->as_int64(0));
    };
    const ir::Tensor* s = g_.constant(q.inputs[1]);
    const auto a = zp(q), b = zp(dq);
    return s && s->numel() == 1 && a && b && *a == *b && dtype(dq.inputs[0]) == a->first;
  }

  ir::Graph& g_;
  ir::Specialization& spec_;
  std::map<std::string, int> uses_;
  std::map<std::string, size_t> producer_;
  std::map<std::string, std::vector<size_t>> readers_;  // by node input, once per input slot
  std::map<std::string, bool> graph_output_;
};

bool has_vnni() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512vnni") || __builtin_cpu_supports("avxvnni");
#else
  return false;
#endif
}

}  // namespace

bool int8_products_exact(ir::DType activations, const ir::Tensor& weights) {
  static const bool vnni = has_vnni();
  if (weights.dtype() != ir::DType::Int8) return false;
  if (vnni) return true;
  if (activations != ir::DType::UInt8) return false;
  const int8_t* w = weights.data<int8_t>();
  return std::all_of(w, w + weights.numel(), [](int8_t v) { return v >= -64 && v <= 64; });
}

int fuse_qdq(ir::Graph& graph, ir::Specialization& spec) { return QdqFuser(graph, spec).run(); }

}  // namespace kiln::passes
