#include "backends/artifact_weights.hpp"

#include <cstdint>

#include <nlohmann/json.hpp>

#include "runtime/ir/error.hpp"
#include "runtime/ir/serialize.hpp"

namespace kiln::backends {

namespace {
int64_t aligned(int64_t offset) { return (offset + 63) / 64 * 64; }
}  // namespace

int64_t WeightsWriter::add(const void* data, size_t bytes) {
  const int64_t offset = aligned(size_);
  chunks_.push_back({offset, {data, bytes}});
  size_ = offset + int64_t(bytes);
  return offset;
}

int64_t WeightsWriter::add(const Artifact& part) {
  const int64_t base = aligned(size_);
  for (size_t i = 0; i < part.weights.size(); ++i) chunks_.push_back({base + part.weight_offsets[i], part.weights[i]});
  size_ = base + part.weights_bytes;
  return base;
}

const void* WeightsReader::at(int64_t offset, int64_t bytes, const std::string& what) const {
  if (offset < 0 || bytes < 0 || uint64_t(offset) > size_ || uint64_t(bytes) > size_ - uint64_t(offset))
    ir::fail(ir::ErrorKind::InvalidModel, what + ": " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
                                              " lie outside the weights file (" + std::to_string(size_) + " bytes)");
  return base_ + offset;
}

void put_weights(const WeightsWriter& weights, Artifact& artifact) {
  for (const auto& [offset, chunk] : weights.chunks()) {
    artifact.weight_offsets.push_back(offset);
    artifact.weights.push_back(chunk);
  }
  artifact.weights_bytes = weights.size();
}

nlohmann::json save_constant(const ir::Tensor& t, WeightsWriter& weights) {
  if (t.dtype() == ir::DType::String) ir::fail(ir::ErrorKind::Unsupported, "a string constant cannot be saved");
  return {{"dtype", int(t.dtype())}, {"dims", t.dims()}, {"offset", weights.add(t.raw(), t.nbytes())}};
}

ir::Tensor load_constant(const nlohmann::json& j, const WeightsReader& weights, std::shared_ptr<void> keep_alive,
                         const std::string& what) {
  const auto dtype = ir::DType(ir::json_field<int>(j, "dtype", what));
  if (!ir::dtype_supported(dtype)) ir::fail(ir::ErrorKind::InvalidModel, what + ": constant of unsupported dtype");
  const auto dims = ir::json_field<ir::Dims>(j, "dims", what);
  const int64_t numel = ir::checked_numel(dims), element = int64_t(ir::dtype_size(dtype));
  // A count that fits in int64 may still not in bytes: no file holds such a constant.
  if (numel > INT64_MAX / element)
    ir::fail(ir::ErrorKind::InvalidModel,
             what + ": a constant of shape " + ir::dims_to_string(dims) + " has more bytes than a file can hold");
  const void* data = weights.at(ir::json_field<int64_t>(j, "offset", what), numel * element, what);
  return ir::Tensor::view(dtype, dims, const_cast<void*>(data), std::move(keep_alive));
}

}  // namespace kiln::backends
