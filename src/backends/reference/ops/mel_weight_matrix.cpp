// MelWeightMatrix: triangular filters that map the bins of a one-sided DFT
// onto num_mel_bins bands equally spaced on the mel scale.
#include <cmath>

#include "backends/reference/kernel_registry.hpp"
#include "backends/reference/ops/op_util.hpp"

namespace kiln::ref {
namespace {

double hz_to_mel(double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); }
double mel_to_hz(double mel) { return 700.0 * (std::pow(10.0, mel / 2595.0) - 1.0); }

int64_t scalar(const KernelContext& ctx, size_t i, const char* what) {
  const Tensor& t = ctx.input(i);
  if (t.numel() != 1) ctx.fail(std::string(what) + " must be a scalar, has shape " + ir::dims_to_string(t.dims()));
  return t.as_int64(0);
}

void mel_weight_matrix(KernelContext& ctx) {
  const int64_t mel_bins = scalar(ctx, 0, "num_mel_bins"), dft_length = scalar(ctx, 1, "dft_length");
  const int64_t sample_rate = scalar(ctx, 2, "sample_rate");
  const double lower = ctx.input(3).as_double(0), upper = ctx.input(4).as_double(0);
  if (mel_bins <= 0 || dft_length <= 0 || sample_rate <= 0) ctx.fail("num_mel_bins, dft_length and sample_rate must be positive");
  if (lower < 0 || upper <= lower) ctx.fail("need 0 <= lower_edge_hertz < upper_edge_hertz");
  const int64_t spectrum_bins = dft_length / 2 + 1;

  // mel_bins + 2 edges, spaced evenly in mel, mapped to DFT bins (floored).
  const double low_mel = hz_to_mel(lower), step = (hz_to_mel(upper) - low_mel) / double(mel_bins + 2);
  std::vector<int64_t> edge(size_t(mel_bins + 2));
  for (int64_t i = 0; i < mel_bins + 2; ++i)
    edge[size_t(i)] = int64_t(std::floor(double(dft_length + 1) * mel_to_hz(double(i) * step + low_mel) / double(sample_rate)));

  std::vector<double> out(size_t(spectrum_bins * mel_bins), 0.0);
  auto set = [&](int64_t bin, int64_t band, double v) {
    if (bin < 0 || bin >= spectrum_bins)
      ctx.fail("upper_edge_hertz maps past the last DFT bin (" + std::to_string(spectrum_bins - 1) + ")");
    out[size_t(bin * mel_bins + band)] = v;
  };
  for (int64_t b = 0; b < mel_bins; ++b) {
    const int64_t left = edge[size_t(b)], center = edge[size_t(b + 1)], right = edge[size_t(b + 2)];
    if (center == left)
      set(center, b, 1.0);
    else
      for (int64_t j = left; j <= center; ++j) set(j, b, double(j - left) / double(center - left));
    for (int64_t j = center; j < right; ++j) set(j, b, double(right - j) / double(right - center));
  }
  const DType out_type = DType(ctx.attr_int("output_datatype", int64_t(DType::Float32)));
  if (!ir::dtype_supported(out_type)) ctx.fail("output_datatype " + std::to_string(int(out_type)) + " is not a supported type");
  ctx.set_output(0, from_doubles(out_type, {spectrum_bins, mel_bins}, out));
}

}  // namespace

void register_mel_weight_matrix(KernelRegistry& r) { r.add("MelWeightMatrix", &mel_weight_matrix); }

}  // namespace kiln::ref
