#pragma once
// The weights file of an Artifact, as backends (and the partitioner, which
// puts several backends' artifacts into one) write and read it: blocks of
// bytes, each at a multiple of 64 bytes, found again by offset.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "backends/backend.hpp"
#include "runtime/ir/tensor.hpp"

namespace kiln::backends {

class WeightsWriter {
 public:
  // Places `bytes` at the next multiple of 64 and returns that offset.
  int64_t add(const void* data, size_t bytes);
  // Another artifact's weights as one block (its chunks at their offsets
  // from the block's start); returns where the block starts.
  int64_t add(const Artifact& part);
  const std::vector<std::pair<int64_t, std::pair<const void*, size_t>>>& chunks() const { return chunks_; }
  int64_t size() const { return size_; }

 private:
  std::vector<std::pair<int64_t, std::pair<const void*, size_t>>> chunks_;  // offset -> bytes
  int64_t size_ = 0;
};

class WeightsReader {
 public:
  WeightsReader(const char* base, size_t size) : base_(base), size_(size) {}
  // Fails with InvalidModel, `what` saying where, if the range is outside the file.
  const void* at(int64_t offset, int64_t bytes, const std::string& what) const;

 private:
  const char* base_;
  size_t size_;
};

// The writer's chunks as the artifact's weights.
void put_weights(const WeightsWriter& weights, Artifact& artifact);

// A tensor as {dtype, dims, offset}, its bytes handed to `weights`; and back,
// as a view of the loaded weights that `keep_alive` owns (InvalidModel if
// the entry is inconsistent, `what` saying where).
nlohmann::json save_constant(const ir::Tensor& t, WeightsWriter& weights);
ir::Tensor load_constant(const nlohmann::json& j, const WeightsReader& weights, std::shared_ptr<void> keep_alive,
                         const std::string& what);

}  // namespace kiln::backends
