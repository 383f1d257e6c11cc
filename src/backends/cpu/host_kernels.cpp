#include "backends/cpu/host_kernels.hpp"

#include <cstring>

#include "backends/reference/reference_executor.hpp"
#include "runtime/ir/error.hpp"

namespace kiln::cpu {

void CopyKernel::run(void* const* args) const {
  if (args[0] != args[1]) std::memcpy(args[1], args[0], size_t(bytes_));
}

ConcatKernel::ConcatKernel(const std::vector<ir::Dims>& inputs, int axis, size_t element_size) {
  for (int d = 0; d < axis; ++d) outer_ *= inputs.at(0).at(size_t(d));
  for (const auto& dims : inputs) {
    int64_t inner = int64_t(element_size);
    for (size_t d = size_t(axis); d < dims.size(); ++d) inner *= dims[d];
    chunk_bytes_.push_back(inner);
  }
}

void ConcatKernel::run(void* const* args) const {
  auto* out = static_cast<char*>(args[chunk_bytes_.size()]);
  for (int64_t o = 0; o < outer_; ++o)
    for (size_t i = 0; i < chunk_bytes_.size(); ++i) {
      std::memcpy(out, static_cast<const char*>(args[i]) + o * chunk_bytes_[i], size_t(chunk_bytes_[i]));
      out += chunk_bytes_[i];
    }
}

StridedCopyKernel::StridedCopyKernel(ir::Dims out, int64_t offset, std::vector<int64_t> strides, size_t element_size)
    : out_(std::move(out)), offset_(offset), strides_(std::move(strides)), element_size_(element_size) {}

void StridedCopyKernel::run(void* const* args) const {
  const auto* src = static_cast<const char*>(args[0]);
  auto* dst = static_cast<char*>(args[1]);
  const int64_t numel = ir::checked_numel(out_);
  if (numel == 0) return;
  const size_t rank = out_.size();
  const int64_t inner = rank ? out_.back() : 1;
  const int64_t inner_stride = rank ? strides_.back() : 1;
  const int64_t e = int64_t(element_size_);
  std::vector<int64_t> index(rank, 0);
  for (int64_t row = 0; row < numel / inner; ++row) {
    int64_t at = offset_;
    for (size_t d = 0; d + 1 < rank; ++d) at += index[d] * strides_[d];
    if (inner_stride == 1) {
      std::memcpy(dst, src + at * e, size_t(inner * e));
    } else {
      for (int64_t i = 0; i < inner; ++i) std::memcpy(dst + i * e, src + (at + i * inner_stride) * e, size_t(e));
    }
    dst += inner * e;
    for (size_t d = rank - 1; d-- > 0;) {  // next row: odometer over the outer dims
      if (++index[d] < out_[d]) break;
      index[d] = 0;
    }
  }
}

GatherKernel::GatherKernel(std::string node, const ir::Dims& data, int axis, int64_t num_indices, ir::DType index_type,
                           size_t element_size)
    : node_(std::move(node)), num_indices_(num_indices), index_type_(index_type) {
  for (int d = 0; d < axis; ++d) outer_ *= data[size_t(d)];
  axis_dim_ = data[size_t(axis)];
  inner_bytes_ = int64_t(element_size);
  for (size_t d = size_t(axis) + 1; d < data.size(); ++d) inner_bytes_ *= data[d];
}

void GatherKernel::run(void* const* args) const {
  const auto* data = static_cast<const char*>(args[0]);
  auto* dst = static_cast<char*>(args[2]);
  for (int64_t o = 0; o < outer_; ++o)
    for (int64_t j = 0; j < num_indices_; ++j) {
      int64_t i = index_type_ == ir::DType::Int64 ? static_cast<const int64_t*>(args[1])[j]
                                                   : static_cast<const int32_t*>(args[1])[j];
      if (i < -axis_dim_ || i >= axis_dim_)
        ir::fail(ir::ErrorKind::InvalidArgument, node_ + ": index " + std::to_string(i) + " is out of range for an axis of size " +
                                                     std::to_string(axis_dim_) + " (expected -" + std::to_string(axis_dim_) +
                                                     " to " + std::to_string(axis_dim_ - 1) + ")");
      if (i < 0) i += axis_dim_;
      std::memcpy(dst, data + (o * axis_dim_ + i) * inner_bytes_, size_t(inner_bytes_));
      dst += inner_bytes_;
    }
}

ReferenceKernel::ReferenceKernel(const ir::Node& node, std::vector<Value> reads, std::vector<Value> writes)
    : reads_(std::move(reads)), writes_(std::move(writes)) {
  graph_.name = node.name;
  graph_.nodes.push_back(node);
  for (const auto& r : reads_) graph_.inputs.push_back({r.name, r.dtype, ir::Shape::from_dims(r.dims)});
  for (const auto& w : writes_) graph_.outputs.push_back({w.name, w.dtype, ir::Shape::from_dims(w.dims)});
}

void ReferenceKernel::run(void* const* args) const {
  std::map<std::string, ir::Tensor> inputs;
  for (size_t i = 0; i < reads_.size(); ++i)
    inputs[reads_[i].name] = ir::Tensor::view(reads_[i].dtype, reads_[i].dims, args[i]);
  std::vector<ir::Tensor> outs = ref::run_graph(graph_, inputs);
  for (size_t i = 0; i < writes_.size(); ++i) {
    const Value& w = writes_[i];
    if (outs[i].dtype() != w.dtype || outs[i].dims() != w.dims)
      ir::fail(ir::ErrorKind::Internal, graph_.nodes[0].describe() + ": output '" + w.name + "' is " +
                                            ir::dtype_name(outs[i].dtype()) + " " + ir::dims_to_string(outs[i].dims()) +
                                            ", the specialization expected " + ir::dtype_name(w.dtype) + " " +
                                            ir::dims_to_string(w.dims));
    std::memcpy(args[reads_.size() + i], outs[i].raw(), outs[i].nbytes());
  }
}

}  // namespace kiln::cpu
