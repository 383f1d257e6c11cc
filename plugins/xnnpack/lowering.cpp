#include "lowering.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

namespace kiln_xnnpack {

namespace {

// How an operator relates to the layout of its rank-4 values.
enum class Kind {
  Spatial,      // XNNPACK runs it on NHWC only (convolutions, poolings, PRelu's per-channel slope)
  Elementwise,  // any layout, as long as all its rank-4 operands share it
  OnnxLayout,   // reads its rank-4 input as ONNX lays it out (Softmax over the last axis, MatMul)
  Reshape,      // moves no element: fine on NHWC data only when NHWC and NCHW hold the same order
};

struct OpInfo {
  Kind kind;
  std::vector<std::string> attributes;  // the ones this plugin reads; any other declines the node
};

const std::map<std::string, OpInfo>& table() {
  static const std::map<std::string, OpInfo> t = {
      {"Conv", {Kind::Spatial, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}}},
      {"MaxPool", {Kind::Spatial, {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"}}},
      {"AveragePool",
       {Kind::Spatial, {"auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides"}}},
      {"GlobalAveragePool", {Kind::Spatial, {}}},
      {"GlobalMaxPool", {Kind::Spatial, {}}},
      {"PRelu", {Kind::Spatial, {}}},
      {"Add", {Kind::Elementwise, {}}},
      {"Sub", {Kind::Elementwise, {}}},
      {"Mul", {Kind::Elementwise, {}}},
      {"Div", {Kind::Elementwise, {}}},
      {"Max", {Kind::Elementwise, {}}},
      {"Min", {Kind::Elementwise, {}}},
      {"Sum", {Kind::Elementwise, {}}},
      {"Relu", {Kind::Elementwise, {}}},
      {"Clip", {Kind::Elementwise, {"min", "max"}}},
      {"Sigmoid", {Kind::Elementwise, {}}},
      {"HardSwish", {Kind::Elementwise, {}}},
      {"LeakyRelu", {Kind::Elementwise, {"alpha"}}},
      {"Elu", {Kind::Elementwise, {"alpha"}}},
      {"Abs", {Kind::Elementwise, {}}},
      {"Neg", {Kind::Elementwise, {}}},
      {"Floor", {Kind::Elementwise, {}}},
      {"Ceil", {Kind::Elementwise, {}}},
      {"Sqrt", {Kind::Elementwise, {}}},
      {"Round", {Kind::Elementwise, {}}},
      {"Softmax", {Kind::OnnxLayout, {"axis"}}},
      {"Gemm", {Kind::OnnxLayout, {"alpha", "beta", "transA", "transB"}}},
      {"MatMul", {Kind::OnnxLayout, {}}},
      {"Reshape", {Kind::Reshape, {"allowzero"}}},
      {"Flatten", {Kind::Reshape, {"axis"}}},
      {"Squeeze", {Kind::Reshape, {"axes"}}},
      {"Unsqueeze", {Kind::Reshape, {"axes"}}},
      {"Identity", {Kind::Reshape, {}}},
  };
  return t;
}

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<int64_t> pad4(std::vector<int64_t> d) {
  d.insert(d.begin(), 4 - std::min<size_t>(d.size(), 4), 1);
  return d;
}
std::vector<int64_t> to_nhwc(const std::vector<int64_t>& d) { return {d[0], d[2], d[3], d[1]}; }
// NCHW and NHWC order the elements of [n,c,h,w] differently.
bool reorders(const std::vector<int64_t>& d) { return d.size() == 4 && d[1] > 1 && d[2] * d[3] > 1; }

class Lowerer {
 public:
  Lowerer(const Graph& g, const std::vector<int64_t>& inputs, const std::vector<int64_t>& outputs, const std::vector<char>& nhwc)
      : g_(g), nhwc_(nhwc) {
    for (size_t i = 0; i < inputs.size(); ++i) input_index_[inputs[i]] = int64_t(i);
    for (size_t i = 0; i < outputs.size(); ++i) output_index_[outputs[i]] = int64_t(i);
    p_.partition_inputs = int64_t(inputs.size());
    p_.partition_outputs = int64_t(outputs.size());
  }

  void node(int64_t n) {
    n_ = n;
    try {
      lower_node();
    } catch (const Decline& e) {
      throw Decline(g_.describe(n) + ": " + e.what());
    }
  }

  // An output of the partition that no node makes: a constant, or one of
  // its inputs (the host hands a plugin taking every node the whole graph,
  // whose outputs may be either). XNNPACK copies it.
  void pass_through(int64_t v) {
    if (made_.count(v)) return;
    if (g_.dtype(v) != KILN_BACKEND_FLOAT32)
      throw Decline("output '" + g_.value_name(v) + "' is made by no node and not float32");
    y_ = v;
    emit(OpType::Reshape, {g_.is_constant(v) ? constant(v, Transform::Copy, xdims(v)) : read(v)});
  }

  Program take() { return std::move(p_); }

 private:
  [[noreturn]] void fail(const std::string& why) const { throw Decline(why); }

  void lower_node() {
    const int64_t n = n_;
    const std::string op = g_.op(n);
    auto info = table().find(op);
    if (!g_.domain(n).empty() || info == table().end()) fail("not an operator this plugin runs");
    for (const std::string& a : g_.attribute_names(n))
      if (std::find(info->second.attributes.begin(), info->second.attributes.end(), a) == info->second.attributes.end())
        fail("attribute '" + a + "' is not one this plugin reads");
    const std::vector<int64_t> outs = g_.node_outputs(n);
    if (outs.empty() || outs[0] < 0 || std::any_of(outs.begin() + 1, outs.end(), [](int64_t v) { return v >= 0; }))
      fail("XNNPACK makes its first output only");
    y_ = outs[0];
    if (g_.dtype(y_) != KILN_BACKEND_FLOAT32) fail("its output is not float32");
    if (op == "Conv")
      conv();
    else if (op == "MaxPool" || op == "AveragePool" || op == "GlobalMaxPool")
      pool(op);
    else if (op == "GlobalAveragePool")
      emit(OpType::GlobalAveragePool, {data(0, 4)});
    else if (op == "PRelu")
      prelu();
    else if (op == "Gemm" || op == "MatMul")
      dense(op);
    else if (info->second.kind == Kind::Elementwise)
      elementwise(op);
    else if (op == "Softmax")
      softmax();
    else
      reshape();
  }

  // The dims XNNPACK sees: rank 0 as [1], NHWC values permuted.
  std::vector<int64_t> xdims(int64_t v) const {
    std::vector<int64_t> d = g_.dims(v);
    if (d.empty()) return {1};
    return nhwc_[size_t(v)] ? to_nhwc(d) : d;
  }

  uint32_t add(Tensor t) {
    p_.tensors.push_back(std::move(t));
    return uint32_t(p_.tensors.size() - 1);
  }

  // The tensor of a value the node reads: made by an earlier node, or the partition's input.
  uint32_t read(int64_t v) {
    if (v < 0) fail("a required input is omitted");
    if (g_.is_constant(v)) fail("input '" + g_.value_name(v) + "' is a constant where XNNPACK wants data");
    if (g_.dtype(v) != KILN_BACKEND_FLOAT32) fail("input '" + g_.value_name(v) + "' is not float32");
    if (auto it = tensor_of_.find(v); it != tensor_of_.end()) return it->second;
    auto in = input_index_.find(v);
    if (in == input_index_.end()) fail("input '" + g_.value_name(v) + "' is not made before it");
    Tensor t;
    t.dims = xdims(v);
    t.role = Role::Input;
    t.index = in->second;
    t.nhwc = nhwc_[size_t(v)];
    return tensor_of_[v] = add(std::move(t));
  }

  // Input i, data of rank `rank` (0: any).
  uint32_t data(size_t i, size_t rank = 0) {
    const int64_t v = g_.input(n_, int64_t(i));
    if (v >= 0 && rank && g_.dims(v).size() != rank) fail("its input has rank " + std::to_string(g_.dims(v).size()));
    return read(v);
  }

  uint32_t constant(int64_t v, Transform how, std::vector<int64_t> dims) {
    if (v < 0 || !g_.is_constant(v) || g_.dtype(v) != KILN_BACKEND_FLOAT32)
      fail("'" + (v < 0 ? std::string("an omitted input") : g_.value_name(v)) + "' is not a float32 constant");
    const auto key = std::make_tuple(v, how, dims);
    if (auto it = statics_.find(key); it != statics_.end()) return it->second;
    Tensor t;
    t.dims = std::move(dims);
    t.role = Role::Static;
    t.source = v;
    t.transform = how;
    return statics_[key] = add(std::move(t));
  }

  uint32_t zeros(int64_t n) {
    Tensor t;
    t.dims = {n};
    t.role = Role::Static;
    t.transform = Transform::Zero;
    return add(std::move(t));
  }

  void emit(OpType type, std::vector<uint32_t> inputs, std::vector<int64_t> ints = {}, std::vector<float> floats = {}) {
    if (!made_.insert(y_).second) fail("its output is made twice");
    Tensor t;
    t.dims = xdims(y_);
    if (auto out = output_index_.find(y_); out != output_index_.end()) {
      t.role = Role::Output;
      t.index = out->second;
      t.nhwc = nhwc_[size_t(y_)];
    }
    Op op;
    op.type = type;
    op.inputs = std::move(inputs);
    op.ints = std::move(ints);
    op.floats = std::move(floats);
    op.output = tensor_of_[y_] = add(std::move(t));
    p_.ops.push_back(std::move(op));
  }

  std::vector<int64_t> pair(const char* name, int64_t fallback) const {
    const std::vector<int64_t> v = g_.attr_ints(n_, name, {fallback, fallback});
    if (v.size() != 2) fail(std::string("'") + name + "' is not two numbers (2-D only)");
    return v;
  }

  // A window's padding as XNNPACK takes it (top, right, bottom, left), from
  // ONNX's auto_pad, pads and ceil_mode, given the output size the host inferred.
  std::vector<int64_t> padding(const std::vector<int64_t>& k, const std::vector<int64_t>& s, const std::vector<int64_t>& d,
                               bool ceil_mode) const {
    const std::vector<int64_t> x = g_.dims(g_.input(n_, 0)), y = g_.dims(y_);
    if (y.size() != 4) fail("its output is not of rank 4");
    const std::string auto_pad = g_.attr_string(n_, "auto_pad", "NOTSET");
    std::vector<int64_t> begin(2), end(2);
    if (auto_pad == "NOTSET") {
      const std::vector<int64_t> pads = g_.attr_ints(n_, "pads", {0, 0, 0, 0});
      if (pads.size() != 4) fail("'pads' is not four numbers");
      begin = {pads[0], pads[1]}, end = {pads[2], pads[3]};
    } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      for (size_t i = 0; i < 2; ++i) {
        const int64_t out = (x[2 + i] + s[i] - 1) / s[i];
        const int64_t total = std::max<int64_t>(0, (out - 1) * s[i] + (k[i] - 1) * d[i] + 1 - x[2 + i]);
        begin[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
        end[i] = total - begin[i];
      }
    } else if (auto_pad != "VALID") {
      fail("auto_pad '" + auto_pad + "'");
    }
    for (size_t i = 0; i < 2; ++i) {
      if (begin[i] < 0 || end[i] < 0 || k[i] < 1 || s[i] < 1 || d[i] < 1) fail("a negative pad or a size below 1");
      const int64_t effective = (k[i] - 1) * d[i] + 1, padded = x[2 + i] + begin[i] + end[i];
      const int64_t floor_out = padded >= effective ? (padded - effective) / s[i] + 1 : 0;
      // ceil_mode's extra output: XNNPACK pads the end instead, which its
      // max and average (padding excluded) ignore, as ONNX does, as long as
      // the last window starts inside the input.
      if (ceil_mode && y[2 + i] == floor_out + 1 && (y[2 + i] - 1) * s[i] < x[2 + i] + begin[i])
        end[i] += (y[2 + i] - 1) * s[i] + effective - padded;
    }
    return {begin[0], end[1], end[0], begin[1]};
  }

  void conv() {
    const int64_t x = g_.input(n_, 0), w = g_.input(n_, 1), b = g_.input(n_, 2);
    const uint32_t in = data(0, 4);
    const std::vector<int64_t> xd = g_.dims(x);
    if (w < 0 || g_.dims(w).size() != 4) fail("its weights are not of rank 4");
    const std::vector<int64_t> wd = g_.dims(w);
    const int64_t m = wd[0], cg = wd[1], kh = wd[2], kw = wd[3], groups = g_.attr_int(n_, "group", 1);
    if (g_.attr_ints(n_, "kernel_shape", {kh, kw}) != std::vector<int64_t>{kh, kw}) fail("kernel_shape differs from the weights");
    if (groups < 1 || xd[1] != groups * cg || m % groups != 0) fail("channels that do not divide into its groups");
    const std::vector<int64_t> s = pair("strides", 1), d = pair("dilations", 1);
    std::vector<int64_t> ints = padding({kh, kw}, s, d, false);
    ints.insert(ints.end(), {kh, kw, s[0], s[1], d[0], d[1]});
    const uint32_t bias = b >= 0 ? constant(b, Transform::Copy, {m}) : zeros(m);
    if (groups > 1 && cg == 1) {
      ints.insert(ints.end(), {m / groups, groups});
      emit(OpType::DepthwiseConv, {in, constant(w, Transform::OihwToHwo, {1, kh, kw, m}), bias}, ints);
    } else {
      ints.insert(ints.end(), {groups, cg, m / groups});
      emit(OpType::Conv, {in, constant(w, Transform::OihwToOhwi, {m, kh, kw, cg}), bias}, ints);
    }
  }

  void pool(const std::string& op) {
    const uint32_t in = data(0, 4);
    const std::vector<int64_t> xd = g_.dims(g_.input(n_, 0));
    if (op == "GlobalMaxPool") {
      emit(OpType::MaxPool, {in}, {0, 0, 0, 0, xd[2], xd[3], 1, 1, 1, 1});
      return;
    }
    if (!g_.has_attr(n_, "kernel_shape")) fail("no kernel_shape");
    const std::vector<int64_t> k = pair("kernel_shape", 1), s = pair("strides", 1), d = pair("dilations", 1);
    const bool ceil_mode = g_.attr_int(n_, "ceil_mode", 0) != 0;
    std::vector<int64_t> ints = padding(k, s, d, ceil_mode);
    const bool padded = std::any_of(ints.begin(), ints.end(), [](int64_t p) { return p > 0; });
    ints.insert(ints.end(), {k[0], k[1], s[0], s[1]});
    if (op == "MaxPool") {
      ints.insert(ints.end(), {d[0], d[1]});
      emit(OpType::MaxPool, {in}, ints);
      return;
    }
    if (d != std::vector<int64_t>{1, 1}) fail("a dilated average");
    // XNNPACK divides by the elements inside the input, never by the padding's.
    if (padded && g_.attr_int(n_, "count_include_pad", 0) != 0) fail("count_include_pad with padding");
    emit(OpType::AveragePool, {in}, ints);
  }

  void prelu() {
    const uint32_t in = data(0, 4);
    const int64_t c = g_.dims(g_.input(n_, 0))[1], slope = g_.input(n_, 1);
    if (slope < 0) fail("no slope");
    std::vector<int64_t> sd = g_.dims(slope);
    while (!sd.empty() && sd.front() == 1) sd.erase(sd.begin());
    if (numel(sd) == 1)
      emit(OpType::PRelu, {in, constant(slope, Transform::Broadcast, {c})});
    else if (sd == std::vector<int64_t>{c, 1, 1})
      emit(OpType::PRelu, {in, constant(slope, Transform::Copy, {c})});
    else
      fail("a slope that is not one per channel");
  }

  void dense(const std::string& op) {
    const int64_t a = g_.input(n_, 0), b = g_.input(n_, 1);
    if (b < 0 || !g_.is_constant(b) || g_.dims(b).size() != 2) fail("its weights are not a constant matrix");
    const std::vector<int64_t> bd = g_.dims(b);
    if (op == "MatMul") {
      const uint32_t in = read(a);
      if (g_.dims(a).size() < 2 || g_.dims(a).back() != bd[0]) fail("an input that does not fit its weights");
      emit(OpType::FullyConnected, {in, constant(b, Transform::Transpose2d, {bd[1], bd[0]}), kNone});
      return;
    }
    const bool trans_b = g_.attr_int(n_, "transB", 0) != 0;
    const int64_t c = g_.input(n_, 2), k = trans_b ? bd[1] : bd[0], n = trans_b ? bd[0] : bd[1];
    if (g_.attr_int(n_, "transA", 0) != 0 || g_.attr_float(n_, "alpha", 1.0f) != 1.0f) fail("transA or alpha");
    const uint32_t in = data(0, 2);
    if (g_.dims(a)[1] != k) fail("an input that does not fit its weights");
    const uint32_t filter = constant(b, trans_b ? Transform::Copy : Transform::Transpose2d, {n, k});
    uint32_t bias = kNone;
    if (c >= 0) {
      if (g_.attr_float(n_, "beta", 1.0f) != 1.0f) fail("beta");
      const std::vector<int64_t> cd = g_.dims(c);
      if (numel(cd) == 1)
        bias = constant(c, Transform::Broadcast, {n});
      else if (cd == std::vector<int64_t>{n} || cd == std::vector<int64_t>{1, n})
        bias = constant(c, Transform::Copy, {n});
      else
        fail("a C that is not one per column");
    }
    emit(OpType::FullyConnected, {in, filter, bias});
  }

  // An operand of an elementwise operation whose output is NHWC iff nhwc.
  uint32_t operand(int64_t v, bool nhwc) {
    if (v < 0) fail("a required input is omitted");
    const std::vector<int64_t> d = g_.dims(v);
    if (g_.is_constant(v)) {
      if (!nhwc) return constant(v, Transform::Copy, d.empty() ? std::vector<int64_t>{1} : d);
      if (d.size() > 4) fail("a constant of rank above 4 against NHWC data");
      return constant(v, Transform::NchwToNhwc, to_nhwc(pad4(d)));
    }
    const uint32_t t = read(v);
    if (!nhwc || d.size() >= 4) return t;
    // A lower-rank value broadcast against NHWC data: the same elements in NHWC's order of dims.
    if (reorders(pad4(d))) fail("'" + g_.value_name(v) + "' would have to be transposed to broadcast against NHWC data");
    Tensor r;
    r.dims = to_nhwc(pad4(d));
    const uint32_t id = add(std::move(r));
    Op op;
    op.type = OpType::Reshape;
    op.inputs = {t};
    op.output = id;
    p_.ops.push_back(std::move(op));
    return id;
  }

  void elementwise(const std::string& op) {
    static const std::map<std::string, OpType> binary = {
        {"Add", OpType::Add},    {"Sum", OpType::Add},     {"Sub", OpType::Subtract}, {"Mul", OpType::Multiply},
        {"Div", OpType::Divide}, {"Max", OpType::Maximum}, {"Min", OpType::Minimum}};
    static const std::map<std::string, OpType> unary = {{"Sigmoid", OpType::Sigmoid}, {"HardSwish", OpType::HardSwish},
                                                        {"Abs", OpType::Abs},         {"Neg", OpType::Negate},
                                                        {"Floor", OpType::Floor},     {"Ceil", OpType::Ceiling},
                                                        {"Sqrt", OpType::SquareRoot}, {"Round", OpType::BankersRounding}};
    if (auto it = binary.find(op); it != binary.end()) {
      if (g_.node_inputs(n_).size() != 2) fail("not two inputs");
      const int64_t a = g_.input(n_, 0), b = g_.input(n_, 1);
      if (g_.is_constant(a) && g_.is_constant(b)) fail("two constant inputs");
      const bool nhwc = nhwc_[size_t(y_)];
      emit(it->second, {operand(a, nhwc), operand(b, nhwc)});
      return;
    }
    if (g_.node_inputs(n_).empty()) fail("no input");
    if (auto it = unary.find(op); it != unary.end()) return emit(it->second, {data(0)});
    if (op == "Relu") return emit(OpType::Clamp, {data(0)}, {}, {0.0f, kInf});
    if (op == "Clip") return clip();
    const float alpha = g_.attr_float(n_, "alpha", op == "Elu" ? 1.0f : 0.01f);
    // XNNPACK takes only normal, finite slopes (and a positive Elu alpha).
    if (!std::isnormal(alpha) || (op == "Elu" && alpha < 0)) fail("alpha " + std::to_string(alpha));
    emit(op == "Elu" ? OpType::Elu : OpType::LeakyRelu, {data(0)}, {}, {alpha});
  }

  void clip() {
    float lo = -kInf, hi = kInf;
    if (g_.opset(n_) < 11) {
      lo = g_.attr_float(n_, "min", std::numeric_limits<float>::lowest());
      hi = g_.attr_float(n_, "max", std::numeric_limits<float>::max());
    } else {
      for (int64_t i : {1, 2}) {
        const int64_t v = g_.input(n_, i);
        if (v < 0) continue;
        const std::vector<float> bound = g_.floats(v);
        if (bound.size() != 1) fail("a bound that is not one number");
        (i == 1 ? lo : hi) = bound[0];
      }
    }
    if (!(lo < hi)) fail("bounds not in increasing order");
    emit(OpType::Clamp, {data(0)}, {}, {lo, hi});
  }

  void softmax() {
    const int64_t rank = int64_t(g_.dims(g_.input(n_, 0)).size());
    int64_t axis = g_.attr_int(n_, "axis", g_.opset(n_) < 13 ? 1 : -1);
    if (axis < 0) axis += rank;
    // Before opset 13 the input is seen as 2-D [before axis, from axis on]:
    // the same as ONNX 13's softmax when the axis is the last.
    if (rank < 1 || axis != rank - 1) fail("an axis other than the last");
    emit(OpType::Softmax, {data(0)});
  }

  void reshape() {
    const int64_t x = g_.input(n_, 0), shape = g_.input(n_, 1);
    if (shape >= 0 && !g_.is_constant(shape)) fail("a shape or axes computed at run time");
    const uint32_t in = read(x);
    if ((nhwc_[size_t(x)] && reorders(g_.dims(x))) || (nhwc_[size_t(y_)] && reorders(g_.dims(y_))))
      fail("NHWC data whose elements it would reorder");
    emit(OpType::Reshape, {in});
  }

  const Graph& g_;
  const std::vector<char>& nhwc_;
  Program p_;
  std::map<int64_t, int64_t> input_index_, output_index_;
  std::map<int64_t, uint32_t> tensor_of_;
  std::set<int64_t> made_;  // values an operation writes
  std::map<std::tuple<int64_t, Transform, std::vector<int64_t>>, uint32_t> statics_;
  int64_t n_ = -1, y_ = -1;
};

}  // namespace

const char* const kOperators =
    "Conv,MaxPool,AveragePool,GlobalAveragePool,GlobalMaxPool,PRelu,Add,Sub,Mul,Div,Max,Min,Sum,Relu,Clip,Sigmoid,"
    "HardSwish,LeakyRelu,Elu,Abs,Neg,Floor,Ceil,Sqrt,Round,Softmax,Gemm,MatMul,Reshape,Flatten,Squeeze,Unsqueeze,Identity";

bool knows(const std::string& op) { return table().count(op) > 0; }

std::vector<char> plan_layouts(const Graph& g, const std::vector<int64_t>& nodes, std::vector<int64_t>* conflicts) {
  const int64_t count = g.value_count();
  std::vector<int64_t> parent(static_cast<size_t>(count));
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](int64_t v) {
    while (parent[size_t(v)] != v) v = parent[size_t(v)] = parent[size_t(parent[size_t(v)])];
    return v;
  };
  // Rank-4 data: the values that have a layout to choose.
  auto rank = [&](int64_t v) -> int64_t {
    if (v < 0 || v >= count || g.is_constant(v)) return -1;
    try {
      return int64_t(g.dims(v).size());
    } catch (const Decline&) {
      return -1;
    }
  };
  std::vector<char> nhwc(static_cast<size_t>(count));
  std::vector<std::pair<int64_t, int64_t>> onnx_layout;  // (node, value): the node reads or writes it as ONNX lays it out
  for (int64_t n : nodes) {
    auto info = table().find(g.op(n));
    if (!g.domain(n).empty() || info == table().end()) continue;
    const int64_t x = g.input(n, 0), y = g.output(n, 0);
    switch (info->second.kind) {
      case Kind::Spatial:
        for (int64_t v : {x, y})
          if (rank(v) == 4) nhwc[size_t(v)] = 1;
        break;
      case Kind::Elementwise:
        for (int64_t v : g.node_inputs(n)) {
          if (rank(v) == 4 && rank(y) == 4)
            parent[size_t(find(v))] = find(y);
          else if (rank(v) == 4)
            onnx_layout.emplace_back(n, v);
          else if (rank(y) == 4 && rank(v) >= 0 && reorders(pad4(g.dims(v))))
            onnx_layout.emplace_back(n, y);
        }
        break;
      case Kind::OnnxLayout:
        for (int64_t v : {x, y})
          if (rank(v) == 4) onnx_layout.emplace_back(n, v);
        break;
      case Kind::Reshape:
        for (int64_t v : {x, y})
          if (rank(v) == 4 && reorders(g.dims(v))) onnx_layout.emplace_back(n, v);
        break;
    }
  }
  std::vector<char> root_nhwc(static_cast<size_t>(count));
  for (int64_t v = 0; v < count; ++v)
    if (nhwc[size_t(v)]) root_nhwc[size_t(find(v))] = 1;
  for (const auto& [n, v] : onnx_layout)
    if (root_nhwc[size_t(find(v))] && std::find(conflicts->begin(), conflicts->end(), n) == conflicts->end())
      conflicts->push_back(n);
  for (int64_t v = 0; v < count; ++v) nhwc[size_t(v)] = rank(v) == 4 && root_nhwc[size_t(find(v))];
  return nhwc;
}

Program lower(const Graph& g, const std::vector<int64_t>& nodes, const std::vector<int64_t>& inputs,
              const std::vector<int64_t>& outputs, const std::vector<char>& nhwc) {
  Lowerer l(g, inputs, outputs, nhwc);
  for (int64_t n : nodes) l.node(n);
  for (int64_t v : outputs) l.pass_through(v);
  return l.take();
}

}  // namespace kiln_xnnpack
