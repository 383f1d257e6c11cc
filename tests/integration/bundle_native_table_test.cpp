// The native bundle runtime (src/bundle/runtime/bundle_native.c, compiled
// into this test) against tables written here instead of by the freezer: a
// quantized primitive's scales and zero points are applied, and entries that
// do not fit their primitive (as a tampered bundle's would not) are refused
// with a message before oneDNN reads past their values.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include <dnnl.hpp>

#include "bundle/runtime/bundle_native.h"

namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// A reorder of 4 floats into uint8 with output scales and a zero point of
// the destination bound at run time from the weights: y = x * 0.5 + 10.
struct QuantizingReorder {
  dnnl_memory_desc_t src = dnnl::memory::desc({1, 4}, dt::f32, tag::ab).data;
  dnnl_memory_desc_t dst = dnnl::memory::desc({1, 4}, dt::u8, tag::ab).data;
  dnnl_memory_desc_t one = dnnl::memory::desc({1}, dt::s32, tag::x).data;
  float scale = 0.5f;
  std::vector<kiln_bundle_native_quantization> quantization = {{KILN_BUNDLE_NATIVE_OUTPUT_SCALES, DNNL_ARG_DST, 0, 0, 1, &scale},
                                                               {KILN_BUNDLE_NATIVE_ZERO_POINTS, DNNL_ARG_DST, 0, 1, 0, nullptr}};
  std::vector<kiln_bundle_native_arg> runtime = {{DNNL_ARG_SRC, 0, &src, 0, 0}, {DNNL_ARG_DST, 0, &dst, 0, 0}};
  std::vector<kiln_bundle_native_arg> constants = {{DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, 0, &one, 0, 4}};
  int32_t zero_point = 10;  // the weights

  // Makes the primitive: its status, and the state or the message.
  int32_t create(void** state, std::string& message) {
    kiln_bundle_native_primitive p{};
    p.kind = dnnl_reorder;
    p.sum_from = -1;
    p.num_runtime = int32_t(runtime.size());
    p.num_constants = int32_t(constants.size());
    p.desc = &src;
    p.dst = &dst;
    p.runtime = runtime.data();
    p.constants = constants.data();
    p.label = "quantize_x";
    p.num_quantization = int32_t(quantization.size());
    p.quantization = quantization.data();
    const dnnl_version_t* v = dnnl_version();
    const kiln_bundle_native_table table{v->major, v->minor, 1, 0, &p};
    char error[512] = "";
    const int32_t rc =
        kiln_bundle_native_create(&table, reinterpret_cast<const uint8_t*>(&zero_point), state, error, sizeof error);
    message = error;
    return rc;
  }
};

TEST(BundleNativeTable, ScalesAndZeroPointsAreApplied) {
  QuantizingReorder r;
  void* state = nullptr;
  std::string message;
  ASSERT_EQ(r.create(&state, message), KILN_BUNDLE_OK) << message;
  float x[4] = {2, 4, 7, -30};
  uint8_t y[4] = {};
  void* args[] = {x, y};
  ASSERT_EQ(kiln_bundle_native_execute(state, 0, args), KILN_BUNDLE_OK);
  kiln_bundle_native_destroy(state);
  // 7 * 0.5 rounds half to even; -15 + 10 saturates at 0.
  EXPECT_EQ(std::vector<int>(y, y + 4), (std::vector<int>{11, 12, 14, 0}));
}

TEST(BundleNativeTable, EntriesThatDoNotFitAreRefused) {
  struct Case {
    std::string name;
    void (*tamper)(QuantizingReorder&);
    std::string message;
  };
  const std::vector<Case> cases = {
      {"a mask over 4 values with 1 value", [](QuantizingReorder& r) { r.quantization[0].mask = 2; },
       "output scales of argument 17 (mask 2, 1 values) do not fit it"},
      {"a mask beyond the dimensions", [](QuantizingReorder& r) { r.quantization[0].mask = 4; }, "do not fit it"},
      {"more values than the mask says", [](QuantizingReorder& r) { r.quantization[0].count = 3; },
       "output scales of argument 17 (mask 0, 3 values) do not fit it"},
      {"no values", [](QuantizingReorder& r) { r.quantization[0].count = 0; }, "without its values"},
      {"a null values pointer", [](QuantizingReorder& r) { r.quantization[0].values = nullptr; }, "without its values"},
      {"a run-time value no argument binds", [](QuantizingReorder& r) { r.constants.clear(); }, "bound by no argument"},
      {"a run-time value per channel", [](QuantizingReorder& r) { r.quantization[1].mask = 2; }, "do not fit it"},
      {"a run-time value of two values", [](QuantizingReorder& r) { r.one = dnnl::memory::desc({2}, dt::s32, tag::x).data; },
       "a scale or zero point bound at run time is not one value"},
      {"an unknown kind", [](QuantizingReorder& r) { r.quantization[1].kind = 7; }, "of an unknown kind"},
      {"zero points of a binary's source", [](QuantizingReorder& r) { r.quantization[1].arg = DNNL_ARG_SRC_1; },
       "for an argument it cannot apply to"},
      {"an entry twice", [](QuantizingReorder& r) { r.quantization[1] = r.quantization[0]; }, "a quantization entry twice"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    QuantizingReorder r;
    c.tamper(r);
    void* state = nullptr;
    std::string message;
    EXPECT_EQ(r.create(&state, message), KILN_BUNDLE_ERROR_NATIVE);
    EXPECT_EQ(state, nullptr);
    EXPECT_EQ(message.rfind("quantize_x: ", 0), 0u) << message;
    EXPECT_NE(message.find(c.message), std::string::npos) << message;
  }
}

}  // namespace
