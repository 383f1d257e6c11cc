// The operator suite for control flow (operator_case.hpp): If on data,
// Loop and Scan, whose bodies the cpu backend compiles. The harness checks
// that a backend claiming every node leaves none to the reference kernels,
// bodies included, and the through-cache configuration reloads the bodies.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "operator_case.hpp"

namespace {

using namespace kiln::test::operators;
using kiln::test::ModelBuilder;

constexpr int kBool = onnx::TensorProto::BOOL;

// An If on a condition given with the data, as a voice model's branch on a
// flag: a convolution and a Relu on one side, a Sigmoid scaled by a branch
// weight on the other, both reading the enclosing graph's values.
Case if_on_data(bool cond) {
  Case c({"If"});
  c.input("x", {2, 2, 5, 5}).weight("w", {2, 2, 3, 3}).bool_input("cond", {}, {uint8_t(cond)}).output("y");
  ModelBuilder then_branch, else_branch;
  then_branch.graph().set_name("then");
  then_branch.output("r", kFloat, {2, 2, 5, 5});
  ModelBuilder::attr_ints(then_branch.node("Conv", {"x", "w"}, {"c"}), "pads", {1, 1, 1, 1});
  then_branch.node("Relu", {"c"}, {"r"});
  else_branch.graph().set_name("else");
  else_branch.output("r", kFloat, {2, 2, 5, 5});
  else_branch.initializer(ModelBuilder::float_tensor("half", {}, {0.5f}));
  else_branch.node("Sigmoid", {"x"}, {"s"});
  else_branch.node("Mul", {"s", "half"}, {"r"});
  auto& n = c.node("If", {"cond"}, {"chosen"});
  ModelBuilder::attr_graph(n, "then_branch", then_branch.graph());
  ModelBuilder::attr_graph(n, "else_branch", else_branch.graph());
  c.node("Abs", {"chosen"}, {"y"});
  return c;
}

TEST_P(OperatorTest, IfOnDataRunsItsThenBranchCompiled) { run(if_on_data(true)); }
TEST_P(OperatorTest, IfOnDataRunsItsElseBranchCompiled) { run(if_on_data(false)); }

// A recurrent cell as a Loop: h = tanh(h W + x) four times, each step's h
// also stacked (scan output), the body reading W and x from the enclosing
// graph and passing its condition on. `trip` given as data when `from_input`.
Case loop_cell(bool trip_from_input) {
  Case c({"Loop"});
  c.input("x", {2, 3}).weight("W", {3, 3}, 0.5f).input("h0", {2, 3}).output("h").output("hs");
  if (trip_from_input)
    c.input_values<int64_t>("trip", {}, {4});
  else
    c.int_constant("trip", {}, {4});
  ModelBuilder body;
  body.graph().set_name("body");
  body.input("i", kInt64, {}).input("cond_in", kBool, {}).input("h_in", kFloat, {2, 3});
  body.output("cond_out", kBool, {}).output("h_out", kFloat, {2, 3}).output("h_each", kFloat, {2, 3});
  body.node("Identity", {"cond_in"}, {"cond_out"});
  body.node("MatMul", {"h_in", "W"}, {"p"});
  body.node("Add", {"p", "x"}, {"q"});
  body.node("Tanh", {"q"}, {"h_out"});
  body.node("Relu", {"h_out"}, {"h_each"});
  auto& n = c.node("Loop", {"trip", "", "h0"}, {"h", "hs"});
  ModelBuilder::attr_graph(n, "body", body.graph());
  return c;
}

TEST_P(OperatorTest, LoopWithAConstantTripCountCompiled) { run(loop_cell(false)); }

// With the trip count as data the number of iterations, and so the stacked
// output's length, is the data's: the Loop stays on the interpreter, and
// still gives the reference's outputs.
TEST_P(OperatorTest, LoopWithATripCountFromDataRuns) {
  Case c = loop_cell(true);
  c.native = false;
  run(c);
}

// A Loop that stops on its condition: h doubles while its sum stays under a
// bound, the carried values only (their shapes never change).
TEST_P(OperatorTest, LoopUntilItsConditionTurnsFalseCompiled) {
  Case c({"Loop"});
  c.input("h0", {2, 2}, 0.5f, 1).scalar("bound", 40).int_constant("go", {}, {1}, kBool).output("h");
  ModelBuilder body;
  body.graph().set_name("body");
  body.input("i", kInt64, {}).input("cond_in", kBool, {}).input("h_in", kFloat, {2, 2});
  body.output("cond_out", kBool, {}).output("h_out", kFloat, {2, 2});
  body.node("Add", {"h_in", "h_in"}, {"h_out"});
  ModelBuilder::attr_int(body.node("ReduceSum", {"h_out"}, {"total"}), "keepdims", 0);
  body.node("Less", {"total", "bound"}, {"cond_out"});
  auto& n = c.node("Loop", {"", "go", "h0"}, {"h"});
  ModelBuilder::attr_graph(n, "body", body.graph());
  run(c);
}

// A Scan summing the rows of x from the last to the first (axis 1,
// reversed), each partial sum times the row written to axis 1 of the output.
TEST_P(OperatorTest, ScanReversedOverAxisOneCompiled) {
  Case c({"Scan"}, 11);
  c.input("s0", {2, 3}).input("x", {2, 5, 3}).output("s").output("ys");
  ModelBuilder body;
  body.graph().set_name("body");
  body.input("s_in", kFloat, {2, 3}).input("x_t", kFloat, {2, 3});
  body.output("s_out", kFloat, {2, 3}).output("y_t", kFloat, {2, 3});
  body.node("Add", {"s_in", "x_t"}, {"s_out"});
  body.node("Mul", {"s_out", "x_t"}, {"y_t"});
  auto& n = c.node("Scan", {"s0", "x"}, {"s", "ys"});
  ModelBuilder::attr_graph(n, "body", body.graph());
  ModelBuilder::attr_int(n, "num_scan_inputs", 1);
  ModelBuilder::attr_ints(n, "scan_input_axes", {1});
  ModelBuilder::attr_ints(n, "scan_input_directions", {1});
  ModelBuilder::attr_ints(n, "scan_output_axes", {1});
  run(c);
}

// The same along axis 0, forward: slices read and written in place.
TEST_P(OperatorTest, ScanOverAxisZeroCompiled) {
  Case c({"Scan"}, 11);
  c.input("s0", {3}).input("x", {4, 3}).output("s").output("ys");
  ModelBuilder body;
  body.graph().set_name("body");
  body.input("s_in", kFloat, {3}).input("x_t", kFloat, {3});
  body.output("s_out", kFloat, {3}).output("y_t", kFloat, {3});
  body.node("Add", {"s_in", "x_t"}, {"s_out"});
  body.node("Sigmoid", {"s_out"}, {"y_t"});
  auto& n = c.node("Scan", {"s0", "x"}, {"s", "ys"});
  ModelBuilder::attr_graph(n, "body", body.graph());
  ModelBuilder::attr_int(n, "num_scan_inputs", 1);
  run(c);
}

}  // namespace
