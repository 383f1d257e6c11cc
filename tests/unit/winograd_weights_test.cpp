// Kiln's transform of 3x3 weights into oneDNN's Winograd layouts writes what
// oneDNN's own (much slower) reorder writes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/onednn_kernel.hpp"
#include "backends/cpu/winograd_weights.hpp"
#include "random_data.hpp"

namespace {

using md = dnnl::memory::desc;
using tag = dnnl::memory::format_tag;
constexpr auto f32 = dnnl::memory::data_type::f32;

// The weights descriptor oneDNN's Winograd convolution wants for this shape,
// or an empty one where this CPU has none.
md winograd_weights_desc(int64_t batch, int64_t out_channels, int64_t in_channels, int64_t side) {
  const dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_winograd,
                                             md({batch, in_channels, side, side}, f32, tag::nChw16c),
                                             md({out_channels, in_channels, 3, 3}, f32, tag::any),
                                             md({batch, out_channels, side, side}, f32, tag::nChw16c), {1, 1}, {1, 1}, {1, 1});
  try {
    return dnnl::convolution_forward::primitive_desc(desc, kiln::cpu::cpu_engine()).weights_desc();
  } catch (const dnnl::error&) {
    return md();
  }
}

TEST(WinogradWeights, WritesWhatOneDnnsReorderWrites) {
  // Batch 1 gets oneDNN's F(2x2, 3x3) kernels (weights in aaOBiOo, or aaOio
  // for 256 channels and more), batch 8 its F(4x4, 3x3) (OBaaIBOIio).
  struct Shape {
    int64_t batch, out_channels, in_channels, side;
  };
  int checked = 0;
  for (const Shape s :
       {Shape{1, 32, 16, 14}, Shape{1, 64, 128, 28}, Shape{1, 256, 256, 14}, Shape{8, 32, 16, 14}, Shape{8, 128, 64, 28}}) {
    const md want = winograd_weights_desc(s.batch, s.out_channels, s.in_channels, s.side);
    if (want.data.format_kind != dnnl_format_kind_wino) continue;
    const auto format = want.data.format_desc.wino_desc.wino_format;
    if (format != dnnl_wino_wei_aaOBiOo && format != dnnl_wino_wei_aaOio && format != dnnl_wino_wei_OBaaIBOIio) continue;
    const auto weights =
        kiln::test::random_values(size_t(s.out_channels * s.in_channels * 9), unsigned(s.out_channels + s.batch));
    const md plain({s.out_channels, s.in_channels, 3, 3}, f32, tag::oihw);
    dnnl::memory theirs(want, kiln::cpu::cpu_engine()), ours(want, kiln::cpu::cpu_engine());
    dnnl::memory source(plain, kiln::cpu::cpu_engine(), const_cast<float*>(weights.data()));
    dnnl::stream stream(kiln::cpu::cpu_engine());
    dnnl::reorder(source, theirs).execute(stream, source, theirs);
    stream.wait();
    ASSERT_TRUE(kiln::cpu::winograd_weights(weights.data(), s.out_channels, s.in_channels, ours));

    const size_t n = want.get_size() / sizeof(float);
    const auto* a = static_cast<const float*>(ours.get_data_handle());
    const auto* b = static_cast<const float*>(theirs.get_data_handle());
    float largest = 0, worst = 0;
    size_t worst_at = 0;
    for (size_t i = 0; i < n; ++i) {
      largest = std::max(largest, std::fabs(b[i]));
      if (std::fabs(a[i] - b[i]) > worst) worst = std::fabs(a[i] - b[i]), worst_at = i;
    }
    EXPECT_GT(largest, 0.5f);
    EXPECT_LE(worst, 1e-6f * largest) << "batch " << s.batch << ", " << s.out_channels << "x" << s.in_channels << ": element "
                                      << worst_at << " is " << a[worst_at] << ", oneDNN wrote " << b[worst_at];
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "oneDNN has no f32 Winograd convolution with these layouts on this CPU";
}

TEST(WinogradWeights, LeavesOtherLayoutsToOneDnn) {
  const auto weights = kiln::test::random_values(16 * 16 * 9, 1);
  dnnl::memory blocked(md({16, 16, 3, 3}, f32, tag::OIhw16i16o), kiln::cpu::cpu_engine());
  EXPECT_FALSE(kiln::cpu::winograd_weights(weights.data(), 16, 16, blocked));
  // A Winograd layout for other channel counts (as where oneDNN pads them).
  const md want = winograd_weights_desc(1, 32, 16, 14);
  if (want.data.format_kind != dnnl_format_kind_wino) GTEST_SKIP() << "no Winograd convolution on this CPU";
  dnnl::memory winograd(want, kiln::cpu::cpu_engine());
  EXPECT_FALSE(kiln::cpu::winograd_weights(weights.data(), 16, 16, winograd));
}

}  // namespace
