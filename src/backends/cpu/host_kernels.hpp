#pragma once
// Steps the cpu backend runs with plain C++ rather than oneDNN or generated
// loops: copies, concatenation, and the reference kernel of a node the
// backend does not compile (the fallback of the partition).
#include <string>
#include <vector>

#include "backends/cpu/program.hpp"
#include "runtime/ir/graph.hpp"

namespace kiln::cpu {

// args: source, destination.
class CopyKernel : public Kernel {
 public:
  explicit CopyKernel(int64_t bytes) : bytes_(bytes) {}
  void run(void* const* args) const override;
  void save(nlohmann::json& out, WeightsWriter& weights, BlockWriter& blocks) const override;
  static std::unique_ptr<Kernel> load(const nlohmann::json& j, const std::string& what);

 private:
  int64_t bytes_;
};

// Plain row-major concatenation along `axis`, any dtype. args: the inputs,
// then the destination.
class ConcatKernel : public Kernel {
 public:
  ConcatKernel(const std::vector<ir::Dims>& inputs, int axis, size_t element_size);
  void run(void* const* args) const override;
  void save(nlohmann::json& out, WeightsWriter& weights, BlockWriter& blocks) const override;
  static std::unique_ptr<Kernel> load(const nlohmann::json& j, const std::string& what);

 private:
  ConcatKernel() = default;
  int64_t outer_ = 1;
  std::vector<int64_t> chunk_bytes_;  // per input, per outer index
};

// A strided view copied out densely, any dtype: Slice, and Transpose of
// types oneDNN does not reorder. Offsets and strides are in elements and may
// be negative. args: source, destination.
class StridedCopyKernel : public Kernel {
 public:
  StridedCopyKernel(ir::Dims out, int64_t offset, std::vector<int64_t> strides, size_t element_size);
  void run(void* const* args) const override;
  void save(nlohmann::json& out, WeightsWriter& weights, BlockWriter& blocks) const override;
  static std::unique_ptr<Kernel> load(const nlohmann::json& j, const std::string& what);

 private:
  ir::Dims out_;
  int64_t offset_;
  std::vector<int64_t> strides_;
  size_t element_size_;
};

// Gather: whole slices of `data` along `axis`, picked by int32/int64
// indices (negative ones count from the end). An index out of range is an
// InvalidArgument error naming the node. args: data, indices, destination.
class GatherKernel : public Kernel {
 public:
  GatherKernel(std::string node, const ir::Dims& data, int axis, int64_t num_indices, ir::DType index_type, size_t element_size);
  void run(void* const* args) const override;
  void save(nlohmann::json& out, WeightsWriter& weights, BlockWriter& blocks) const override;
  static std::unique_ptr<Kernel> load(const nlohmann::json& j, const std::string& what);

 private:
  GatherKernel() = default;
  std::string node_;
  int64_t outer_ = 1, axis_dim_ = 0, inner_bytes_ = 0, num_indices_ = 0;
  ir::DType index_type_;
};

// GlobalAveragePool of one channels-last image. args: the source [pixels,
// channels], the destination [channels], and scratch for parts x channels
// floats. The pixels are summed in `parts` contiguous runs, in parallel on
// the run's OpenMP team, then combined. oneDNN 2.6 splits this pooling by
// channel block instead, across the pixel split the step before it wrote
// in: efficientnet_b0's first took 0.07 ms (0.026 here, ONNX Runtime's 0.03).
class ChannelsLastMeanKernel : public Kernel {
 public:
  ChannelsLastMeanKernel(int64_t pixels, int64_t channels, int64_t parts);
  int64_t scratch_bytes() const { return parts_ * channels_ * int64_t(sizeof(float)); }
  void run(void* const* args) const override;
  void save(nlohmann::json& out, WeightsWriter& weights, BlockWriter& blocks) const override;
  static std::unique_ptr<Kernel> load(const nlohmann::json& j, const std::string& what);

 private:
  int64_t pixels_, channels_, parts_;
};

// InstanceNormalization: each of `rows` rows of `length` values (an image's
// channel) normalized by its own mean and variance, then scaled and shifted
// by its channel's (row % channels) scale and B; rows in parallel on the
// run's OpenMP team. args: X, scale, B, Y.
class InstanceNormKernel : public Kernel {
 public:
  InstanceNormKernel(int64_t rows, int64_t channels, int64_t length, float epsilon);
  void run(void* const* args) const override;
  void save(nlohmann::json& out, WeightsWriter& weights, BlockWriter& blocks) const override;
  static std::unique_ptr<Kernel> load(const nlohmann::json& j, const std::string& what);

 private:
  int64_t rows_, channels_, length_;
  float epsilon_;
};

// DynamicQuantizeLinear of `numel` floats: the range of the values (and
// 0) over 255 steps of uint8, as ONNX defines it in float arithmetic.
// args: X, Y (uint8), y_scale (float), y_zero_point (uint8).
class DynamicQuantizeKernel : public Kernel {
 public:
  explicit DynamicQuantizeKernel(int64_t numel) : numel_(numel) {}
  void run(void* const* args) const override;
  void save(nlohmann::json& out, WeightsWriter& weights, BlockWriter& blocks) const override;
  static std::unique_ptr<Kernel> load(const nlohmann::json& j, const std::string& what);

 private:
  int64_t numel_;
};

// One node run by its reference kernel, or by the faster one the
// interpreter has for it (interpreter/kernels.hpp). args: the values the node reads
// (ir::values_read order), then its outputs. Its outputs must have the shapes
// the specialization inferred.
class ReferenceKernel : public Kernel {
 public:
  struct Value {
    std::string name;
    ir::DType dtype = ir::DType::Undefined;
    ir::Dims dims;
  };
  ReferenceKernel(const ir::Node& node, std::vector<Value> reads, std::vector<Value> writes);
  void run(void* const* args) const override;
  void save(nlohmann::json& out, WeightsWriter& weights, BlockWriter& blocks) const override;
  static std::unique_ptr<Kernel> load(const nlohmann::json& j, const std::string& what);

 private:
  ir::Graph graph_;  // the node alone, its reads as inputs
  std::vector<Value> reads_, writes_;
};

}  // namespace kiln::cpu
