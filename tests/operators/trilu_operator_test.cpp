// The operator suite for Trilu (operator_case.hpp): one portable kernel call
// in both of the cpu backend's kernel families, for any element type.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "operator_case.hpp"

namespace {

using namespace kiln::test::operators;

// Upper and lower triangles of float and int64 batches of matrices, wider
// and taller than square; the diagonal offset as an input, positive and
// negative, beyond the matrix, and absent.
TEST_P(OperatorTest, Trilu) {
  Case c({"Trilu"}, 14);
  c.input("x", {2, 3, 4, 5});
  std::vector<int64_t> ints(2 * 6 * 3);
  std::iota(ints.begin(), ints.end(), -7);
  c.input_values<int64_t>("ints", {2, 6, 3}, ints);
  c.input_values<int64_t>("k_pos", {}, {2}).input_values<int64_t>("k_neg", {}, {-1}).input_values<int64_t>("k_far", {}, {9});
  c.node("Trilu", {"x"}, {"upper"});
  c.node("Trilu", {"x", "k_neg"}, {"lower_neg"}, {{"upper", int64_t(0)}});
  c.node("Trilu", {"ints", "k_pos"}, {"ints_upper"});
  c.node("Trilu", {"ints", "k_neg"}, {"ints_lower"}, {{"upper", int64_t(0)}});
  c.node("Trilu", {"x", "k_far"}, {"upper_far"});
  c.output("upper").output("lower_neg").output("ints_upper", kInt64).output("ints_lower", kInt64).output("upper_far");
  run(c);
}

}  // namespace
