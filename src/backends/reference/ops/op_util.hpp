#pragma once
// Small helpers shared by the reference kernels: broadcasting, strides, axes.
#include <cstdint>
#include <string>
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

// Maps a possibly negative axis into [0, rank); fails naming the node.
int64_t normalize_axis(const KernelContext& ctx, int64_t axis, int64_t rank);

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

}  // namespace kiln::ref
