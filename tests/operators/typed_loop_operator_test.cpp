// The operator suite for generated loops of element types other than
// float32, and for the elementwise operators that compute as the reference
// kernels do (operator_case.hpp): every result must be the reference's,
// bit for bit, on every configuration.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "operator_case.hpp"

namespace {

using namespace kiln::test::operators;

template <typename T>
int elem() {
  return int(kiln::ir::DTypeOf<T>::value);
}

// x of [2, 3, 4] around zero and past the type's ends, y of [4] broadcast
// against it, z of [3, 1], and one-element bounds for Clip.
template <typename T>
void integer_inputs(Case& c, const std::string& p) {
  const T lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
  std::vector<T> x(24);
  for (size_t i = 0; i < x.size(); ++i) x[i] = T(int64_t(i) * 7 - 60);
  x[0] = lo;
  x[1] = hi;
  x[2] = T(hi - 1);
  c.typed_input<T>(p + "x", {2, 3, 4}, x);
  c.typed_input<T>(p + "y", {4}, {T(3), hi, T(0), lo});
  c.typed_input<T>(p + "z", {3, 1}, {T(5), T(-2), T(100)});
  c.typed_input<T>(p + "lo", {}, {T(-20)});
  c.typed_input<T>(p + "hi", {1}, {T(50)});
}

// Wrapping arithmetic, variadic Max over three broadcast inputs, Clip with
// bounds of the run, for a signed and an unsigned type of each width: the
// operators the cpu backend claimed before its loops took these types.
template <typename T>
void integer_nodes(Case& c, const std::string& p, bool claimed_before) {
  integer_inputs<T>(c, p);
  int k = 0;
  auto node = [&](const std::string& op, std::vector<std::string> ins, std::vector<Attr> attrs = {}) {
    const std::string out = p + op + std::to_string(k++);
    for (auto& in : ins) in = in.empty() ? in : p + in;
    c.node(op, ins, {out}, attrs);
    c.output(out, elem<T>());
  };
  if (claimed_before) {
    node("Add", {"x", "y"});
    node("Sub", {"x", "y"});
    node("Mul", {"x", "z"});
    node("Max", {"x", "y", "z"});
    node("Min", {"z", "x"});
    node("Max", {"y"});
    node("Abs", {"x"});
    node("Clip", {"x", "lo", "hi"});
    node("Clip", {"x", "", "hi"});
    if constexpr (std::is_signed_v<T>) {
      node("Neg", {"x"});
      node("Relu", {"x"});
    }
  } else {
    node("Sum", {"x", "y", "z"});
    node("Sign", {"x"});
    if constexpr (std::is_unsigned_v<T>) {
      node("BitShift", {"x", "y"}, {{"direction", "LEFT"}});
      node("BitShift", {"x", "z"}, {{"direction", "RIGHT"}});
    }
  }
}

template <typename... T>
void all_integer_types(Case& c, bool claimed_before) {
  (integer_nodes<T>(c, std::string(kiln::ir::dtype_name(kiln::ir::DTypeOf<T>::value)) + "_", claimed_before), ...);
}

TEST_P(OperatorTest, IntegerArithmeticLoops) {
  Case c({"Add", "Sub", "Mul", "Max", "Min", "Abs", "Clip", "Neg", "Relu"});
  c.atol = c.rtol = 0;
  all_integer_types<int8_t, uint8_t, int16_t, uint16_t, int32_t, uint32_t, int64_t, uint64_t>(c, true);
  run(c);
}

TEST_P(OperatorTest, IntegerSumSignAndBitShiftLoops) {
  Case c({"Sum", "Sign", "BitShift"});
  c.atol = c.rtol = 0;
  all_integer_types<int8_t, uint8_t, int16_t, uint16_t, int32_t, uint32_t, int64_t, uint64_t>(c, false);
  run(c);
}

// Specials among random values: NaN, both infinities, zeros, ties for Round.
template <typename T>
std::vector<T> with_specials(Case& c, int64_t n, float lo, float hi) {
  std::vector<T> v;
  for (float x : c.random(n, lo, hi)) v.push_back(T(x));
  const T specials[] = {std::numeric_limits<T>::quiet_NaN(),
                        std::numeric_limits<T>::infinity(),
                        -std::numeric_limits<T>::infinity(),
                        T(0),
                        T(-0.0),
                        T(2.5),
                        T(-1.5),
                        T(0.5)};
  for (size_t i = 0; i < std::size(specials) && i < v.size(); ++i) v[i * 3] = specials[i];
  return v;
}

template <typename T>
void floating_inputs(Case& c, const std::string& p) {
  c.typed_input<T>(p + "x", {3, 4, 5}, with_specials<T>(c, 60, -4, 4));
  c.typed_input<T>(p + "unit", {3, 4, 5}, with_specials<T>(c, 60, -0.999f, 0.999f));
  c.typed_input<T>(p + "above1", {4, 5}, with_specials<T>(c, 20, 1, 6));
  c.typed_input<T>(p + "d", {5}, {T(1.5), T(-2.25), T(3), T(-0.75), T(7)});
  c.typed_input<T>(p + "lo", {}, {T(-1)});
  c.typed_input<T>(p + "hi", {}, {T(2)});
  c.typed_input<int32_t>(p + "k", {5}, {0, 1, 2, -1, 3});
}

// The reference kernels compute these in double: so do the loops, in float32
// and float64 alike. `claimed_before`: the operators the cpu backend claimed
// (and left to the reference kernels at these types) before.
template <typename T>
void floating_nodes(Case& c, const std::string& p, bool claimed_before) {
  floating_inputs<T>(c, p);
  int k = 0;
  auto node = [&](const std::string& op, std::vector<std::string> ins, std::vector<Attr> attrs = {}, int type = elem<T>()) {
    const std::string out = p + op + std::to_string(k++);
    for (auto& in : ins) in = in.empty() ? in : p + in;
    c.node(op, ins, {out}, attrs);
    c.output(out, type);
  };
  if (claimed_before) {
    node("Pow", {"d", "k"});
    node("Clip", {"x", "lo", "hi"});
    node("Max", {"x", "d", "lo"});
    node("Min", {"d", "x"});
    node("Div", {"x", "d"});
    if constexpr (std::is_same_v<T, double>) {
      for (const char* op : {"Add", "Sub", "Mul"}) node(op, {"x", "d"});
      for (const char* op : {"Neg", "Abs", "Sqrt", "Floor", "Ceil", "Reciprocal", "Relu"}) node(op, {"x"});
    }
    return;
  }
  for (const char* op : {"Sin", "Cos", "Tan", "Atan", "Sinh", "Cosh", "Asinh"}) node(op, {"x"});
  for (const char* op : {"Asin", "Acos", "Atanh"}) node(op, {"unit"});
  node("Acosh", {"above1"});
  node("Round", {"x"});
  node("Sign", {"x"});
  node("IsNaN", {"x"}, {}, onnx::TensorProto::BOOL);
  node("IsInf", {"x"}, {}, onnx::TensorProto::BOOL);
  node("IsInf", {"x"}, {{"detect_negative", int64_t(0)}}, onnx::TensorProto::BOOL);
  node("ThresholdedRelu", {"x"}, {{"alpha", 0.5f}});
  node("Shrink", {"x"}, {{"lambd", 1.5f}, {"bias", 0.25f}});
  node("Celu", {"x"}, {{"alpha", 2.0f}});
  node("Mod", {"x", "d"}, {{"fmod", int64_t(1)}});
  node("Mod", {"x", "d"}, {{"fmod", int64_t(0)}});
  node("Mean", {"x", "d", "hi"});
  node("Sum", {"x", "d"});
  node("Cast", {"x"}, {{"to", int64_t(onnx::TensorProto::INT32)}}, kInt32);
  node("Cast", {"x"}, {{"to", int64_t(onnx::TensorProto::UINT8)}}, onnx::TensorProto::UINT8);
  node("Cast", {"x"}, {{"to", int64_t(onnx::TensorProto::BOOL)}}, onnx::TensorProto::BOOL);
  node("Cast", {"k"}, {{"to", int64_t(elem<T>())}});
  node("CastLike", {"x", "k"}, {}, kInt32);
  if constexpr (std::is_same_v<T, double>)
    node("Cast", {"x"}, {{"to", int64_t(kFloat)}}, kFloat);
  else
    node("Cast", {"x"}, {{"to", int64_t(onnx::TensorProto::DOUBLE)}}, onnx::TensorProto::DOUBLE);
}

TEST_P(OperatorTest, FloatingArithmeticLoops) {
  Case c({"Pow", "Clip", "Max", "Min", "Div", "Add", "Sub", "Mul", "Neg", "Abs", "Sqrt", "Floor", "Ceil", "Reciprocal", "Relu"},
         15);
  c.atol = c.rtol = 0;
  floating_nodes<float>(c, "f32_", true);
  floating_nodes<double>(c, "f64_", true);
  run(c);
}

TEST_P(OperatorTest, FloatingFunctionLoopsAsTheReference) {
  Case c({"Sin",    "Cos",   "Tan",   "Asin",  "Acos", "Atan",  "Sinh",    "Cosh",
          "Asinh",  "Acosh", "Atanh", "Round", "Sign", "IsNaN", "IsInf",   "ThresholdedRelu",
          "Shrink", "Celu",  "Mod",   "Mean",  "Sum",  "Cast",  "CastLike"},
         15);
  c.atol = c.rtol = 0;
  floating_nodes<float>(c, "f32_", false);
  floating_nodes<double>(c, "f64_", false);
  run(c);
}

// Where over float32 and int64 values with a broadcast condition; Not and a
// bool Where; a chain across types fused into one loop (a float cast to
// integers, multiplied and cast back).
TEST_P(OperatorTest, WhereNotAndCastsInOneLoop) {
  Case c({"Where", "Not", "Cast"}, 13);
  c.atol = c.rtol = 0;
  c.input("x", {2, 3, 4}, -3, 3).input("y", {4});
  c.bool_input("cond", {3, 1}, {1, 0, 1});
  c.bool_input("flags", {2, 3, 4}, std::vector<uint8_t>(24, 0));
  c.typed_input<int64_t>("ix", {2, 3, 4}, std::vector<int64_t>(24, 7));
  c.typed_input<int64_t>("iy", {}, {-9});
  c.node("Where", {"cond", "x", "y"}, {"w"});
  c.node("Where", {"cond", "ix", "iy"}, {"iw"});
  c.node("Not", {"cond"}, {"not_cond"});
  c.node("Where", {"not_cond", "flags", "cond"}, {"bw"});
  c.node("Cast", {"w"}, {"wi"}, {{"to", int64_t(kInt64)}});
  c.node("Mul", {"wi", "ix"}, {"scaled"});
  c.node("Cast", {"scaled"}, {"back"}, {{"to", int64_t(kFloat)}});
  c.output("w").output("iw", kInt64).output("not_cond", onnx::TensorProto::BOOL).output("bw", onnx::TensorProto::BOOL);
  c.output("back");
  run(c);
}

}  // namespace

namespace {

using kiln::ir::Half;

std::vector<Half> halves(const std::vector<float>& v) {
  std::vector<Half> h;
  for (float x : v) h.push_back(Half(x));
  return h;
}

// float16 computed in float and rounded after each operation, as the
// reference kernels do; each result is cast to float32 for the comparison.
TEST_P(OperatorTest, Float16Loops) {
  Case c({"Max", "Min", "Sum", "Mod", "Abs", "Neg", "Sign", "Clip", "Cast", "CastLike", "Sin", "Round", "Div"}, 15);
  c.atol = c.rtol = 0;
  std::vector<float> x = c.random(24, -300, 300);
  x[0] = NAN;
  x[1] = INFINITY;
  x[2] = 70000;  // beyond float16's range: infinity
  x[3] = 2.5f;
  c.typed_input<Half>("x", {2, 3, 4}, halves(x));
  c.typed_input<Half>("y", {4}, halves({1.5f, -2.25f, 3.0f, 1e-3f}));
  c.typed_input<Half>("lo", {}, halves({-100}));
  c.typed_input<float>("f", {2, 3, 4}, x);
  c.typed_input<double>("d", {4}, {1.0 / 3, 65504.0, 1e-8, -2.0009765625});
  c.typed_input<int64_t>("i", {4}, {1, -2049, 70000, 0});
  int k = 0;
  auto node = [&](const std::string& op, std::vector<std::string> ins, std::vector<Attr> attrs = {}) {
    const std::string out = op + std::to_string(k++);
    c.node(op, ins, {out}, attrs);
    c.node("Cast", {out}, {out + "_f32"}, {{"to", int64_t(kFloat)}});
    c.output(out + "_f32");
  };
  node("Max", {"x", "y", "lo"});
  node("Min", {"y", "x"});
  node("Sum", {"x", "y", "x"});
  node("Div", {"x", "y"});
  node("Mod", {"x", "y"}, {{"fmod", int64_t(1)}});
  node("Abs", {"x"});
  node("Neg", {"x"});
  node("Sign", {"x"});
  node("Clip", {"x", "lo"});
  node("Sin", {"x"});
  node("Round", {"x"});
  node("Cast", {"f"}, {{"to", int64_t(onnx::TensorProto::FLOAT16)}});
  node("Cast", {"d"}, {{"to", int64_t(onnx::TensorProto::FLOAT16)}});
  node("Cast", {"i"}, {{"to", int64_t(onnx::TensorProto::FLOAT16)}});
  node("CastLike", {"f", "y"});
  c.node("Cast", {"x"}, {"to_double"}, {{"to", int64_t(onnx::TensorProto::DOUBLE)}});
  c.node("Cast", {"x"}, {"to_int"}, {{"to", int64_t(kInt32)}});
  c.output("to_double", onnx::TensorProto::DOUBLE).output("to_int", kInt32);
  run(c);
}

}  // namespace
