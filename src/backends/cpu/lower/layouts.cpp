#include "backends/cpu/lower/layouts.hpp"

#include <algorithm>
#include <string_view>

#include "backends/reference/ops/op_util.hpp"

namespace kiln::cpu::lowering {

using ir::Dims;

dnnl::memory::dims to_dnnl(const Dims& d) {
  if (d.empty()) return {1};  // oneDNN has no rank 0
  return dnnl::memory::dims(d.begin(), d.end());
}

std::optional<dt> onednn_type(ir::DType type) {
  switch (type) {
    case ir::DType::Float32: return dt::f32;
    case ir::DType::UInt8: return dt::u8;
    case ir::DType::Int8: return dt::s8;
    case ir::DType::Int32: return dt::s32;
    default: return std::nullopt;
  }
}

md plain_md(const Dims& dims, dt type) {
  const Dims d = dims.empty() ? Dims{1} : dims;
  auto strides = ref::strides_of(d);
  return md(to_dnnl(d), type, dnnl::memory::dims(strides.begin(), strides.end()));
}

bool is_plain(const md& m, const Dims& dims) { return m == plain_md(dims, m.data_type()); }

md channels_last(const Dims& d) {
  using tag = dnnl::memory::format_tag;
  return md(to_dnnl(d), dt::f32, d.size() == 3 ? tag::nwc : d.size() == 4 ? tag::nhwc : tag::ndhwc);
}

dnnl::memory::format_tag channel_blocked_tag(size_t rank, int block) {
  using tag = dnnl::memory::format_tag;
  static const tag tags[3][3] = {{tag::aBc16b, tag::aBcd16b, tag::aBcde16b},
                                 {tag::aBc8b, tag::aBcd8b, tag::aBcde8b},
                                 {tag::aBc4b, tag::aBcd4b, tag::aBcde4b}};
  return tags[block == 16 ? 0 : block == 8 ? 1 : 2][rank - 3];
}

int channel_block(const md& m) {
  const size_t rank = m.dims().size();
  if (rank < 3 || rank > 5) return 0;
  for (int block : {16, 8, 4})
    if (m == md(m.dims(), dt::f32, channel_blocked_tag(rank, block))) return block;
  return 0;
}

std::optional<std::vector<PhysicalAxis>> physical_axes(const md& m) {
  const dnnl_memory_desc_t& d = m.data;
  if (d.format_kind != dnnl_blocked || d.data_type != dnnl_f32 || d.offset0 != 0) return std::nullopt;
  const auto& blocking = d.format_desc.blocking;
  const size_t rank = size_t(d.ndims);
  std::vector<int64_t> inner(rank, 1);
  for (int k = 0; k < blocking.inner_nblks; ++k) inner[size_t(blocking.inner_idxs[k])] *= blocking.inner_blks[k];
  std::vector<std::pair<int64_t, PhysicalAxis>> outer;  // (stride, axis)
  for (size_t i = 0; i < rank; ++i) {
    if (d.padded_dims[i] != d.dims[i]) return std::nullopt;
    if (d.dims[i] / inner[i] > 1) outer.push_back({blocking.strides[i], {i, d.dims[i] / inner[i]}});
  }
  std::stable_sort(outer.begin(), outer.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<PhysicalAxis> axes;
  for (const auto& [stride, axis] : outer) axes.push_back(axis);
  for (int k = 0; k < blocking.inner_nblks; ++k)
    if (blocking.inner_blks[k] > 1) axes.push_back({size_t(blocking.inner_idxs[k]), blocking.inner_blks[k]});
  // Dense: each outer axis's stride is what the axes inside it hold.
  int64_t held = 1;
  for (const auto& a : axes) held *= a.size;
  for (const auto& [stride, axis] : outer) {
    held /= axis.size;
    if (stride != held) return std::nullopt;
  }
  return axes;
}

bool reference_kernel(const dnnl::primitive_desc_base& pd) { return std::string_view(pd.impl_info_str()).substr(0, 3) == "ref"; }

}  // namespace kiln::cpu::lowering
