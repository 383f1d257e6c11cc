#pragma once
// How Resize (every opset) and Upsample map output coordinates to input
// samples, worked out once from the node's attributes and inputs: the
// reference kernel sums the tensor product of these taps in double, and a
// faster kernel may apply them one axis after another.
#include <vector>

#include "backends/reference/kernel_context.hpp"

namespace kiln::ref {

// One input sample contributing to an output coordinate along one axis.
struct ResizeTap {
  int64_t index;
  double weight;
};

struct ResizePlan {
  Dims out_dims;
  // [axis][output coordinate]: the taps, already clamped to the input and
  // normalised; an empty list marks a coordinate outside the crop
  // (tf_crop_and_resize), which gets `extrapolation`.
  std::vector<std::vector<std::vector<ResizeTap>>> taps;
  double extrapolation = 0;
};

// Fails naming the node if its attributes or inputs are inconsistent.
ResizePlan resize_plan(const KernelContext& ctx);

}  // namespace kiln::ref
