#include "backends/cpu/host_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/interpreter/kernels.hpp"
#include "backends/cpu/omp_team.hpp"
#include "backends/cpu/portable/simd.hpp"
#include "backends/cpu/vector_clones.hpp"
#include "backends/reference/reference_executor.hpp"
#include "runtime/ir/error.hpp"
#include "runtime/ir/serialize.hpp"

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

ChannelsLastMeanKernel::ChannelsLastMeanKernel(int64_t pixels, int64_t channels, int64_t parts)
    : pixels_(pixels), channels_(channels), parts_(parts) {
  if (pixels < 1 || channels < 0 || parts < 1)
    ir::fail(ir::ErrorKind::InvalidModel,
             "a channels-last mean needs pixels and parts (" + std::to_string(pixels) + ", " + std::to_string(parts) + ")");
}

void ChannelsLastMeanKernel::run(void* const* args) const {
  struct Task {
    const ChannelsLastMeanKernel& k;
    const float* src;
    float* partial;
  } task{*this, static_cast<const float*>(args[0]), static_cast<float*>(args[2])};
  team_threads()->parallel_for(
      nullptr, parts_,
      [](void* p, int64_t begin, int64_t end) {
        const Task& t = *static_cast<const Task*>(p);
        const int64_t C = t.k.channels_;
        for (int64_t part = begin; part < end; ++part) {
          const int64_t first = part * t.k.pixels_ / t.k.parts_, last = (part + 1) * t.k.pixels_ / t.k.parts_;
          float* sum = t.partial + part * C;
          const float* from = t.src + first * C;
          // 16 channels at a time in registers (the sums in memory, each
          // added to in every pixel, made the kernel slower than oneDNN's).
          int64_t c0 = 0;
          for (; c0 + 16 <= C; c0 += 16) {
            float acc[16] = {};
            for (int64_t p = first; p < last; ++p) {
              const float* x = from + (p - first) * C + c0;
              for (int j = 0; j < 16; ++j) acc[j] += x[j];
            }
            std::copy(acc, acc + 16, sum + c0);
          }
          for (; c0 < C; ++c0) {
            float acc = 0;
            for (int64_t p = first; p < last; ++p) acc += from[(p - first) * C + c0];
            sum[c0] = acc;
          }
        }
      },
      &task);
  auto* dst = static_cast<float*>(args[1]);
  const float scale = 1.0f / float(pixels_);
  for (int64_t c = 0; c < channels_; ++c) {
    float total = 0;
    for (int64_t part = 0; part < parts_; ++part) total += task.partial[part * channels_ + c];
    dst[c] = total * scale;
  }
}

namespace {

constexpr int kLanes = 16;
using V = pk::Vec<kLanes>;

// Two passes (the mean, then the squared deviations from it), as the
// reference does: one pass of sums and sums of squares loses the variance of
// values far from zero.
KILN_VECTOR_CLONES void normalize_row(const float* __restrict x, float* __restrict y, int64_t n, float scale, float shift,
                                      float epsilon) {
  V acc{};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) acc += pk::load<kLanes>(x + i);
  float sum = pk::hsum<kLanes>(acc);
  for (; i < n; ++i) sum += x[i];
  const float mean = sum / float(n);
  acc = V{};
  for (i = 0; i + kLanes <= n; i += kLanes) {
    const V dev = pk::load<kLanes>(x + i) - mean;
    acc += dev * dev;
  }
  float squares = pk::hsum<kLanes>(acc);
  for (; i < n; ++i) squares += (x[i] - mean) * (x[i] - mean);
  const float a = scale / std::sqrt(squares / float(n) + epsilon), b = shift - mean * a;
  for (i = 0; i + kLanes <= n; i += kLanes) pk::store<kLanes>(y + i, pk::load<kLanes>(x + i) * a + b);
  for (; i < n; ++i) y[i] = x[i] * a + b;
}

}  // namespace

InstanceNormKernel::InstanceNormKernel(int64_t rows, int64_t channels, int64_t length, float epsilon)
    : rows_(rows), channels_(channels), length_(length), epsilon_(epsilon) {
  if (rows < 1 || channels < 1 || rows % channels != 0 || length < 1)
    ir::fail(ir::ErrorKind::InvalidModel, "an instance normalization needs whole images of channels and values (" +
                                              std::to_string(rows) + " rows, " + std::to_string(channels) + " channels, " +
                                              std::to_string(length) + " values)");
}

void InstanceNormKernel::run(void* const* args) const {
  struct Task {
    const InstanceNormKernel& k;
    const float *x, *scale, *shift;
    float* y;
  } task{*this, static_cast<const float*>(args[0]), static_cast<const float*>(args[1]), static_cast<const float*>(args[2]),
         static_cast<float*>(args[3])};
  team_threads()->parallel_for(
      nullptr, rows_,
      [](void* p, int64_t begin, int64_t end) {
        const Task& t = *static_cast<const Task*>(p);
        for (int64_t r = begin; r < end; ++r)
          normalize_row(t.x + r * t.k.length_, t.y + r * t.k.length_, t.k.length_, t.scale[r % t.k.channels_],
                        t.shift[r % t.k.channels_], t.k.epsilon_);
      },
      &task);
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
      int64_t i =
          index_type_ == ir::DType::Int64 ? static_cast<const int64_t*>(args[1])[j] : static_cast<const int32_t*>(args[1])[j];
      if (i < -axis_dim_ || i >= axis_dim_)
        ir::fail(ir::ErrorKind::InvalidArgument,
                 node_ + ": index " + std::to_string(i) + " is out of range for an axis of size " + std::to_string(axis_dim_) +
                     " (expected -" + std::to_string(axis_dim_) + " to " + std::to_string(axis_dim_ - 1) + ")");
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
  for (size_t i = 0; i < reads_.size(); ++i) inputs[reads_[i].name] = ir::Tensor::view(reads_[i].dtype, reads_[i].dims, args[i]);
  std::vector<ir::Tensor> outs = ref::run_graph(graph_, inputs, &interpreter_kernels());
  for (size_t i = 0; i < writes_.size(); ++i) {
    const Value& w = writes_[i];
    if (outs[i].dtype() != w.dtype || outs[i].dims() != w.dims)
      ir::fail(ir::ErrorKind::Internal, graph_.nodes[0].describe() + ": output '" + w.name + "' is " +
                                            ir::dtype_name(outs[i].dtype()) + " " + ir::dims_to_string(outs[i].dims()) +
                                            ", the specialization expected " + ir::dtype_name(w.dtype) + " " +
                                            ir::dims_to_string(w.dims));
    // An empty output may have no buffer at all.
    if (outs[i].nbytes()) std::memcpy(args[reads_.size() + i], outs[i].raw(), outs[i].nbytes());
  }
}

// ---- saving and loading (the on-disk cache) ---------------------------------

using ir::json_field;
using nlohmann::json;

void CopyKernel::save(json& out, WeightsWriter&, BlockWriter&) const { out = {{"kind", "copy"}, {"bytes", bytes_}}; }

std::unique_ptr<Kernel> CopyKernel::load(const json& j, const std::string& what) {
  return std::make_unique<CopyKernel>(json_field<int64_t>(j, "bytes", what));
}

void ConcatKernel::save(json& out, WeightsWriter&, BlockWriter&) const {
  out = {{"kind", "concat"}, {"outer", outer_}, {"chunk_bytes", chunk_bytes_}};
}

std::unique_ptr<Kernel> ConcatKernel::load(const json& j, const std::string& what) {
  std::unique_ptr<ConcatKernel> k(new ConcatKernel());
  k->outer_ = json_field<int64_t>(j, "outer", what);
  k->chunk_bytes_ = json_field<std::vector<int64_t>>(j, "chunk_bytes", what);
  return k;
}

void ChannelsLastMeanKernel::save(json& out, WeightsWriter&, BlockWriter&) const {
  out = {{"kind", "channels_last_mean"}, {"pixels", pixels_}, {"channels", channels_}, {"parts", parts_}};
}

std::unique_ptr<Kernel> ChannelsLastMeanKernel::load(const json& j, const std::string& what) {
  return std::make_unique<ChannelsLastMeanKernel>(
      json_field<int64_t>(j, "pixels", what), json_field<int64_t>(j, "channels", what), json_field<int64_t>(j, "parts", what));
}

void DynamicQuantizeKernel::run(void* const* args) const {
  const auto* x = static_cast<const float*>(args[0]);
  auto* y = static_cast<uint8_t*>(args[1]);
  float lo = 0, hi = 0;
  for (int64_t i = 0; i < numel_; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  const float scale = (hi - lo) / 255.0f;
  // std::nearbyint rounds half to even in the default rounding mode, as ONNX's rounding does.
  auto saturate = [](float v) { return uint8_t(std::clamp(v, 0.0f, 255.0f)); };
  const uint8_t zero = scale == 0 ? 0 : saturate(std::nearbyint(0.0f - lo / scale));
  if (scale == 0) {
    std::memset(y, zero, size_t(numel_));
  } else {
    for (int64_t i = 0; i < numel_; ++i) y[i] = saturate(std::nearbyint(x[i] / scale) + float(zero));
  }
  *static_cast<float*>(args[2]) = scale;
  *static_cast<uint8_t*>(args[3]) = zero;
}

void DynamicQuantizeKernel::save(json& out, WeightsWriter&, BlockWriter&) const {
  out = {{"kind", "dynamic_quantize"}, {"numel", numel_}};
}

std::unique_ptr<Kernel> DynamicQuantizeKernel::load(const json& j, const std::string& what) {
  const int64_t numel = json_field<int64_t>(j, "numel", what);
  if (numel < 0 || numel > int64_t(1) << 48) ir::fail(ir::ErrorKind::InvalidModel, what + ": element count out of range");
  return std::make_unique<DynamicQuantizeKernel>(numel);
}

void InstanceNormKernel::save(json& out, WeightsWriter&, BlockWriter&) const {
  out = {{"kind", "instance_norm"}, {"rows", rows_}, {"channels", channels_}, {"length", length_}, {"epsilon", epsilon_}};
}

std::unique_ptr<Kernel> InstanceNormKernel::load(const json& j, const std::string& what) {
  return std::make_unique<InstanceNormKernel>(json_field<int64_t>(j, "rows", what), json_field<int64_t>(j, "channels", what),
                                              json_field<int64_t>(j, "length", what), json_field<float>(j, "epsilon", what));
}

void StridedCopyKernel::save(json& out, WeightsWriter&, BlockWriter&) const {
  out = {{"kind", "strided_copy"}, {"out", out_}, {"offset", offset_}, {"strides", strides_}, {"element_size", element_size_}};
}

std::unique_ptr<Kernel> StridedCopyKernel::load(const json& j, const std::string& what) {
  auto out = json_field<ir::Dims>(j, "out", what);
  auto strides = json_field<std::vector<int64_t>>(j, "strides", what);
  if (strides.size() != out.size()) ir::fail(ir::ErrorKind::InvalidModel, what + ": strides and shape differ in rank");
  return std::make_unique<StridedCopyKernel>(std::move(out), json_field<int64_t>(j, "offset", what), std::move(strides),
                                             json_field<size_t>(j, "element_size", what));
}

void GatherKernel::save(json& out, WeightsWriter&, BlockWriter&) const {
  out = {{"kind", "gather"},
         {"node", node_},
         {"outer", outer_},
         {"axis_dim", axis_dim_},
         {"inner_bytes", inner_bytes_},
         {"num_indices", num_indices_},
         {"index_type", int(index_type_)}};
}

std::unique_ptr<Kernel> GatherKernel::load(const json& j, const std::string& what) {
  std::unique_ptr<GatherKernel> k(new GatherKernel());
  k->node_ = json_field<std::string>(j, "node", what);
  k->outer_ = json_field<int64_t>(j, "outer", what);
  k->axis_dim_ = json_field<int64_t>(j, "axis_dim", what);
  k->inner_bytes_ = json_field<int64_t>(j, "inner_bytes", what);
  k->num_indices_ = json_field<int64_t>(j, "num_indices", what);
  k->index_type_ = ir::DType(json_field<int>(j, "index_type", what));
  if (k->index_type_ != ir::DType::Int64 && k->index_type_ != ir::DType::Int32)
    ir::fail(ir::ErrorKind::InvalidModel, what + ": gather indices must be int32 or int64");
  return k;
}

namespace {

json values_json(const std::vector<ReferenceKernel::Value>& values) {
  json out = json::array();
  for (const auto& v : values) out.push_back({{"name", v.name}, {"dtype", int(v.dtype)}, {"dims", v.dims}});
  return out;
}

std::vector<ReferenceKernel::Value> values_from_json(const json& j, const std::string& what) {
  std::vector<ReferenceKernel::Value> out;
  for (const json& v : j)
    out.push_back({json_field<std::string>(v, "name", what), ir::DType(json_field<int>(v, "dtype", what)),
                   json_field<ir::Dims>(v, "dims", what)});
  return out;
}

}  // namespace

void ReferenceKernel::save(json& out, WeightsWriter&, BlockWriter&) const {
  out = {{"kind", "reference"},
         {"node", ir::node_to_json(graph_.nodes[0])},
         {"reads", values_json(reads_)},
         {"writes", values_json(writes_)}};
}

std::unique_ptr<Kernel> ReferenceKernel::load(const json& j, const std::string& what) {
  return std::make_unique<ReferenceKernel>(ir::node_from_json(json_field<json>(j, "node", what)),
                                           values_from_json(json_field<json>(j, "reads", what), what),
                                           values_from_json(json_field<json>(j, "writes", what), what));
}

}  // namespace kiln::cpu
