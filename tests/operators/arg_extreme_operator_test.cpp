// The operator suite for ArgMax, ArgMin and Hardmax (operator_case.hpp):
// one portable kernel call in both of the cpu backend's kernel families.
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "operator_case.hpp"

namespace {

using namespace kiln::test::operators;

// Each axis, kept and not, a negative one; ties resolved to the first index
// and to the last; a NaN, which wins.
TEST_P(OperatorTest, ArgMaxAndArgMin) {
  Case c({"ArgMax", "ArgMin"});
  c.input("x", {3, 4, 5});
  // Rounded to quarters: ties in plenty.
  std::vector<float> ties = c.random(24, -2, 2);
  for (float& v : ties) v = float(int(v * 2)) / 2;
  ties[7] = std::numeric_limits<float>::quiet_NaN();
  c.input_values<float>("ties", {4, 6}, ties);
  c.node("ArgMax", {"x"}, {"max0"}, {{"axis", int64_t(0)}});
  c.node("ArgMin", {"x"}, {"min1"}, {{"axis", int64_t(1)}, {"keepdims", int64_t(0)}});
  c.node("ArgMax", {"x"}, {"max_last"}, {{"axis", int64_t(-1)}});
  c.node("ArgMax", {"ties"}, {"first"}, {{"axis", int64_t(1)}});
  c.node("ArgMin", {"ties"}, {"last"}, {{"axis", int64_t(0)}, {"select_last_index", int64_t(1)}});
  for (const char* y : {"max0", "min1", "max_last", "first", "last"}) c.output(y, kInt64);
  run(c);
}

// Hardmax along the last axis and a middle one, ties to the first largest.
TEST_P(OperatorTest, Hardmax) {
  Case c({"Hardmax"});
  c.input("x", {3, 4, 5});
  std::vector<float> ties = c.random(24, -2, 2);
  for (float& v : ties) v = float(int(v * 2)) / 2;
  c.input_values<float>("ties", {4, 6}, ties);
  c.node("Hardmax", {"x"}, {"last"});
  c.node("Hardmax", {"x"}, {"middle"}, {{"axis", int64_t(1)}});
  c.node("Hardmax", {"ties"}, {"first"}, {{"axis", int64_t(0)}});
  c.output("last").output("middle").output("first");
  run(c);
}

// Before opset 13, over the input flattened to 2-D at the axis.
TEST_P(OperatorTest, HardmaxBeforeOpset13) {
  Case c({"Hardmax"}, 11);
  c.input("x", {3, 4, 5}).output("y");
  c.node("Hardmax", {"x"}, {"y"}, {{"axis", int64_t(1)}});
  run(c);
}

}  // namespace
