#pragma once
// oneDNN memory descriptors as the lowering uses them: plain (row-major),
// channels-last and channel-blocked layouts, and the axes a dense layout
// stores its values along.
#include <optional>
#include <vector>

#include <dnnl.hpp>

#include "runtime/ir/tensor.hpp"

namespace kiln::cpu::lowering {

using md = dnnl::memory::desc;
using dt = dnnl::memory::data_type;

dnnl::memory::dims to_dnnl(const ir::Dims& d);
// The oneDNN type of the element types the lowering lays out (float32 and
// the quantized ones), or nothing.
std::optional<dt> onednn_type(ir::DType type);
// Row-major (a rank-0 value as [1]: oneDNN has no rank 0).
md plain_md(const ir::Dims& dims, dt type = dt::f32);
// Whether `m` is the row-major layout of `dims` in its element type.
bool is_plain(const md& m, const ir::Dims& dims);
md channels_last(const ir::Dims& d);
// Channels in blocks of `block` (16, 8 or 4) innermost, for rank 3 to 5.
dnnl::memory::format_tag channel_blocked_tag(size_t rank, int block = 16);
// The channel block of `m` when it is one of those layouts of its dims
// (oneDNN picks 8-channel blocks for RegNet's grouped convolutions), else 0.
int channel_block(const md& m);

// One axis along which a layout stores its values: the logical dim it walks
// and its length.
struct PhysicalAxis {
  size_t dim;
  int64_t size;
};
// The axes of a oneDNN layout with no padding and no gaps (channels-last,
// channel blocks), outermost first, axes of length 1 left out: the layout's
// bytes are the dense array of these axes. Nothing for any other layout.
std::optional<std::vector<PhysicalAxis>> physical_axes(const md& m);

// Whether oneDNN fell back to its reference implementation ("ref:any"),
// which is never worth taking where the lowering has another way.
bool reference_kernel(const dnnl::primitive_desc_base& pd);

}  // namespace kiln::cpu::lowering
