#pragma once
// The text files of a bundle: NAME.h, which documents and declares its C API,
// and README.md, which says how to link it.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/ir/dtype.hpp"
#include "runtime/ir/tensor.hpp"

namespace kiln::bundle {

struct BundleDescription {
  struct Tensor {
    std::string name;
    ir::DType dtype = ir::DType::Float32;
    ir::Dims dims;  // at the smallest batch size
    bool batched = true;
    int64_t batch_axis = 0;  // when batched
    int64_t item_bytes = 0;
  };
  // A version of the code: the CPU it was compiled for, and what create
  // checks the CPU for ("avx2,fma,..."; "" for nothing).
  struct Variant {
    std::string cpu, features;
  };
  std::string name, model, model_hash, triple, object_file;
  bool embedded_weights = false;
  std::vector<Variant> variants;  // best first
  std::string native;             // native bundles: the oneDNN version they link ("2.6"); "" for portable ones
  int64_t weights_bytes = 0;
  std::vector<int64_t> batch_sizes;  // ascending
  std::vector<int64_t> arena_bytes;  // per batch size
  std::vector<Tensor> inputs, outputs;
};

std::string bundle_header(const BundleDescription& d);
std::string bundle_readme(const BundleDescription& d);

}  // namespace kiln::bundle
