#pragma once
// Small helpers shared by the reference kernels: broadcasting, strides, axes.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/reference/kernel_context.hpp"

namespace kiln::ref {

// Numpy-style multidirectional broadcast of two shapes; fails naming the node.
Dims broadcast_shapes(const KernelContext& ctx, const Dims& a, const Dims& b);

// Row-major strides of `dims`.
std::vector<int64_t> strides_of(const Dims& dims);

// For an output shape `out` and an input shape `in` broadcast to it, the
// input's strides laid over the output's axes (0 on broadcast axes).
std::vector<int64_t> broadcast_strides(const Dims& in, const Dims& out);

// Pad's rule for the input coordinate that output coordinate `i` (already
// shifted by the leading pad) reads on an axis of n > 0 elements, in mode
// "edge", "wrap" or "reflect" (anything but "edge" and "wrap" reflects).
int64_t pad_source(const std::string& mode, int64_t i, int64_t n);

// Maps a possibly negative axis into [0, rank); fails naming the node.
int64_t normalize_axis(const KernelContext& ctx, int64_t axis, int64_t rank);

// Every element as double: kernels of floating-point math compute in double
// and convert back once, one code path for every element type.
std::vector<double> to_doubles(const Tensor& t);

// double -> element type. Integers truncate and saturate, NaN becomes 0
// (never undefined behaviour); bool is v != 0; 16-bit floats round via float.
template <typename T>
T saturate_cast(double v) {
  if constexpr (std::is_same_v<T, ir::Half> || std::is_same_v<T, ir::BFloat16>) {
    return T(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else if constexpr (std::is_integral_v<T>) {
    if (std::isnan(v)) return 0;
    if (v <= double(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    if (v >= double(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  } else {
    return static_cast<T>(v);
  }
}

Tensor from_doubles(DType dtype, const Dims& dims, const std::vector<double>& v);
// As from_doubles, but integer types round to nearest (interpolating ops).
Tensor from_doubles_rounded(DType dtype, const Dims& dims, const std::vector<double>& v);

// Fails naming the node unless `t` holds a floating-point type.
void require_float(const KernelContext& ctx, const Tensor& t, const char* what);

// numpy matmul geometry: 1-D operands are promoted to matrices (and the
// added axis dropped from `out`), batch dims broadcast. Fails naming the node.
struct MatMulShape {
  int64_t m = 0, k = 0, n = 0;
  Dims batch, out;
  std::vector<int64_t> a_batch_strides, b_batch_strides;  // in matrices, over `batch`
};
MatMulShape matmul_shape(const KernelContext& ctx, const Dims& a, const Dims& b);

// Iterates over every multi-index of `dims` in row-major order, keeping one
// running flat offset per stride vector. f(out_index, offsets...).
class BroadcastIterator {
 public:
  BroadcastIterator(const Dims& out, std::vector<std::vector<int64_t>> strides);
  bool done() const { return done_; }
  int64_t offset(size_t which) const { return offsets_[which]; }
  void next();

 private:
  Dims dims_;
  std::vector<std::vector<int64_t>> strides_;
  std::vector<int64_t> index_;
  std::vector<int64_t> offsets_;
  bool done_;
};

// The window of Conv, pooling and Col2Im over `in` (spatial dims only):
// strides, dilations and pads from the attributes (auto_pad included), and
// the output size. Fails naming the node.
struct Geometry {
  Dims in, kernel, strides, dilations, pad_begin, pad_end, out;
  int64_t extent(size_t d) const { return (kernel[d] - 1) * dilations[d] + 1; }
};
Geometry forward_geometry(const KernelContext& ctx, const Dims& in, const Dims& kernel, bool ceil_mode);
// ConvTranspose's output size over `in` (X's spatial dims) from its strides,
// dilations, output_padding and pads, output_shape or auto_pad, as ONNX
// specifies. pad_end is what the output lacks at the end of the full scatter,
// output_padding taken off, so out = (in - 1) * stride + extent - pad_begin -
// pad_end; an output_shape larger than the full scatter makes a pad negative.
Geometry transposed_geometry(const KernelContext& ctx, const Dims& in, const Dims& kernel);
// The kernel_shape attribute if present (it must match the weights), else the weights' spatial dims.
Dims kernel_shape_of(const KernelContext& ctx, const Dims& from_weights);
// An optional per-spatial-axis attribute, its length and lower bound checked.
std::vector<int64_t> spatial_attr(const KernelContext& ctx, const char* name, size_t nsp, int64_t fallback, int64_t min_value);

// Slice's window over `in`: per axis the first index, the step and the
// output size, starts and ends clamped as ONNX specifies. Fails naming the node.
struct SliceWindow {
  std::vector<int64_t> first, step;
  Dims out;
};
SliceWindow slice_window(const KernelContext& ctx, const Dims& in, const std::vector<int64_t>& starts,
                         const std::vector<int64_t>& ends, std::vector<int64_t> axes, std::vector<int64_t> steps);

// RoiAlign's samples per output cell along one axis of one roi:
// sampling_ratio, or when that is 0 as many as the roi spans pixels per cell,
// rounded up (0 or less for a flipped box, which samples nothing). Fails
// naming the node on a roi (times spatial_scale) that is not finite.
int64_t roi_align_grid(const KernelContext& ctx, int64_t sampling_ratio, double roi_extent, int64_t cells);
// The most samples one RoiAlign may take (each is four reads of the map):
// ~7e10, minutes of work. Attributes or rois asking for more are refused
// before any work instead of running for hours: a sampling_ratio of 2^31
// asks for 2^62 per cell.
constexpr int64_t kMaxRoiAlignSamples = int64_t(1) << 36;
// Fails naming the node unless the samples of every roi's grids (gh, gw)
// over `channels` channels and oh x ow cells stay within kMaxRoiAlignSamples.
void check_roi_align_work(const KernelContext& ctx, const std::vector<std::pair<int64_t, int64_t>>& grids, int64_t channels,
                          int64_t oh, int64_t ow);

// An activation function of RNN, GRU or LSTM: its ONNX name in lower case,
// with the alpha and beta it takes.
struct RecurrentActivation {
  std::string name;
  double alpha = 0, beta = 0;
  double operator()(double x) const;
};
// The layer's activations/activation_alpha/activation_beta, `defaults` (the
// operator's functions for one direction) where none are given, one list per
// direction, concatenated. Fails naming the node on an unknown function or a
// list of the wrong length.
std::vector<RecurrentActivation> recurrent_activations(const KernelContext& ctx, const std::vector<std::string>& defaults,
                                                       int64_t num_directions);

}  // namespace kiln::ref
