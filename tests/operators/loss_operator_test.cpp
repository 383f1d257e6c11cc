// The operator suite for the losses (operator_case.hpp):
// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, one portable kernel
// call in both of the cpu backend's kernel families.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "operator_case.hpp"

namespace {

using namespace kiln::test::operators;

// Every reduction; weights and an ignored class; int32 and int64 targets;
// SoftmaxCrossEntropyLoss's log-probabilities read and not.
TEST_P(OperatorTest, Losses) {
  Case c({"NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"});
  c.input("x", {3, 5, 2, 2}, -3, 3).constant("w", {5}, {0.5f, 1, 1.5f, 2, 0.25f});
  const std::vector<int64_t> targets = {0, 1, 2, 3, 4, 1, 1, 2, 3, 0, 4, 4};
  c.input_values<int64_t>("t", {3, 2, 2}, targets);
  c.input_values<int32_t>("t32", {3, 2, 2}, std::vector<int32_t>(targets.begin(), targets.end()));
  c.node("NegativeLogLikelihoodLoss", {"x", "t", "w"}, {"nll_none"}, {{"reduction", "none"}, {"ignore_index", int64_t(4)}});
  c.node("NegativeLogLikelihoodLoss", {"x", "t32"}, {"nll_sum"}, {{"reduction", "sum"}});
  c.node("NegativeLogLikelihoodLoss", {"x", "t", "w"}, {"nll_mean"});
  c.node("SoftmaxCrossEntropyLoss", {"x", "t32", "w"}, {"sce_mean", "log_prob"}, {{"ignore_index", int64_t(4)}});
  c.node("SoftmaxCrossEntropyLoss", {"x", "t"}, {"sce_none"}, {{"reduction", "none"}});
  c.output("nll_none").output("nll_sum").output("nll_mean").output("sce_mean").output("log_prob").output("sce_none");
  run(c);
}

// Scores of (N, C) only, where the loss's inner size is 1.
TEST_P(OperatorTest, SoftmaxCrossEntropyLossOfTwoDimensions) {
  Case c({"SoftmaxCrossEntropyLoss"});
  c.input("x", {4, 7}, -20, 20).input_values<int64_t>("t", {4}, {6, 0, 3, 3}).output("loss");
  c.node("SoftmaxCrossEntropyLoss", {"x", "t"}, {"loss"}, {{"reduction", "sum"}});
  run(c);
}

TEST_P(OperatorTest, LossTargetOutOfRangeIsAnInvalidArgumentNamingTheNode) {
  Case c({"NegativeLogLikelihoodLoss"});
  c.input("x", {2, 3}).input_values<int64_t>("t", {2}, {0, 1}).output("loss");
  c.node("NegativeLogLikelihoodLoss", {"x", "t"}, {"loss"}, {}, "scorer");
  const auto& b = backend(GetParam());
  const kiln::ir::Model model = import(c);
  if (!b.supports(model.graph->nodes[0])) GTEST_SKIP() << GetParam() << " does not claim NegativeLogLikelihoodLoss";
  Compiled compiled = compile(GetParam(), model, c.inputs);
  for (int64_t bad : {3, -1}) {
    auto inputs = c.inputs;
    inputs["t"] = Tensor::from_vector<int64_t>({2}, {1, bad});
    try {
      compiled.exe->run(inputs);
      ADD_FAILURE() << "no error for a target of " << bad;
    } catch (const kiln::ir::Error& e) {
      EXPECT_EQ(e.kind(), kiln::ir::ErrorKind::InvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("scorer"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
