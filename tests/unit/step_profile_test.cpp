// KILN_PROFILE reports each step's median over the runs after the first.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "backends/cpu/step_profile.hpp"

namespace {

std::string printed(const kiln::cpu::StepProfile& profile) {
  testing::internal::CaptureStderr();
  profile.print("2 steps", [](size_t s) { return "step " + std::to_string(s); });
  return testing::internal::GetCapturedStderr();
}

TEST(StepProfile, ReportsMediansOfTheRunsAfterTheFirst) {
  setenv("KILN_PROFILE", "all", 1);
  kiln::cpu::StepProfile profile(2);
  unsetenv("KILN_PROFILE");
  ASSERT_TRUE(profile.enabled());
  // The first run is dropped; then step 0 takes 1, 50, 2 ms (an interrupted
  // run in the middle) and step 1 takes 4, 6, 5.
  const double times[4][2] = {{900, 900}, {1, 4}, {50, 6}, {2, 5}};
  for (const auto& run : times) {
    profile.begin_run();
    profile.add(0, run[0]);
    profile.add(1, run[1]);
  }
  const std::string out = printed(profile);
  EXPECT_NE(out.find("median 7.000 ms per run over 3 runs after the first"), std::string::npos) << out;
  const size_t slowest = out.find("5.000 ms"), second = out.find("2.000 ms");
  ASSERT_NE(slowest, std::string::npos) << out;
  ASSERT_NE(second, std::string::npos) << out;
  EXPECT_LT(slowest, second) << "slowest first:\n" << out;
  EXPECT_NE(out.find("step 1", slowest), std::string::npos) << out;
}

TEST(StepProfile, IsOffUnlessAsked) {
  unsetenv("KILN_PROFILE");
  EXPECT_FALSE(kiln::cpu::StepProfile(3).enabled());
  setenv("KILN_PROFILE", "0", 1);
  EXPECT_FALSE(kiln::cpu::StepProfile(3).enabled());
  unsetenv("KILN_PROFILE");
}

}  // namespace
