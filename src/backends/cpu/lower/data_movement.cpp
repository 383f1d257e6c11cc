// Data movement: views (Identity, Reshape, Flatten, Squeeze, Unsqueeze),
// Transpose, Slice, Gather and Concat, as oneDNN reorders and concats,
// host copy kernels, or the portable copy kernels.
#include <optional>

#include "backends/cpu/host_kernels.hpp"
#include "backends/cpu/lower/context.hpp"
#include "backends/cpu/lower/families.hpp"
#include "backends/cpu/lower/fusion.hpp"
#include "backends/cpu/portable/kernels.h"
#include "backends/reference/kernel_context.hpp"
#include "backends/reference/ops/op_util.hpp"

namespace kiln::cpu::lowering {

namespace {

// A Slice with constant parameters as a strided view of its input
// (element offset and strides), or nothing.
struct SliceView {
  Dims out;
  int64_t offset = 0;
  std::vector<int64_t> strides;
};

std::optional<SliceView> slice_view(Context& cx, const ir::Node& n) {
  const Dims in = cx.dims(n.inputs[0]);
  if (in.empty() || n.outputs.size() != 1) return std::nullopt;
  std::vector<int64_t> starts, ends, axes, steps;
  ref::KernelContext ctx(n, {}, nullptr);
  if (n.opset < 10) {
    starts = ctx.attr_ints("starts");
    ends = ctx.attr_ints("ends");
    axes = ctx.attr_ints("axes", {});
  } else {
    std::vector<std::vector<int64_t>*> params{&starts, &ends, &axes, &steps};
    for (size_t i = 1; i < n.inputs.size() && i <= 4; ++i) {
      if (n.inputs[i].empty()) continue;
      const ir::Tensor* t = cx.constant(n.inputs[i]);
      if (!t) return std::nullopt;
      *params[i - 1] = t->to_int64_vector();
    }
  }
  const ref::SliceWindow w = ref::slice_window(ctx, in, starts, ends, axes, steps);
  if (w.out != cx.dims(n.outputs[0])) return std::nullopt;
  const auto in_strides = ref::strides_of(in);
  int64_t offset = 0;
  std::vector<int64_t> strides;
  for (size_t d = 0; d < in.size(); ++d) {
    offset += w.first[d] * in_strides[d];
    strides.push_back(w.step[d] * in_strides[d]);
  }
  return SliceView{w.out, offset, std::move(strides)};
}

// A strided view of the input copied densely: Transpose and Slice.
bool portable_strided_copy(Context& cx, const ir::Node& n, const Dims& out, int64_t offset, std::vector<int64_t> strides) {
  if (out.size() > 8) return false;
  const int src = cx.plain(n.inputs[0]);
  cx.compiled();
  cx.add_call(n.describe(), {src, cx.define_plain(n.outputs[0])}, {0, 1},
              {"kiln_pk_strided_copy",
               {Call::i32(int32_t(out.size())), Call::array(out), Call::array(std::move(strides)), Call::i64(offset),
                Call::i64(int64_t(ir::dtype_size(cx.dtype(n.inputs[0])))), Call::buffer(0), Call::buffer(1)},
               false});
  return true;
}

// The input strides a Transpose reads its output's axes with; none for a
// "perm" that is not a permutation of the axes (the reference kernel says why).
std::optional<std::vector<int64_t>> transposed_strides(const ir::Node& n, const Dims& in) {
  std::vector<int64_t> perm = ref::KernelContext(n, {}, nullptr).attr_ints("perm", {});
  if (perm.empty())
    for (size_t i = in.size(); i-- > 0;) perm.push_back(int64_t(i));
  if (perm.size() != in.size()) return std::nullopt;
  const auto in_strides = ref::strides_of(in);
  std::vector<int64_t> strides;
  for (int64_t p : perm) {
    if (p < 0 || p >= int64_t(in.size())) return std::nullopt;
    strides.push_back(in_strides[size_t(p)]);
  }
  return strides;
}

// A oneDNN reorder from permuted strides.
bool reorder_transpose(Context& cx, const ir::Node& n) {
  if (!cx.is_f32(n.inputs[0])) return false;
  const Dims in = cx.dims(n.inputs[0]), out = cx.dims(n.outputs[0]);
  if (in.empty()) return false;
  const auto strides = transposed_strides(n, in);
  if (!strides) return false;
  const md src_md(to_dnnl(out), dt::f32, *strides), dst_md = plain_md(out);
  const int src = cx.plain(n.inputs[0]);
  const int dst = cx.define_plain(n.outputs[0]);
  cx.add_reorder(n.describe(), src, dst, src_md, dst_md);
  cx.compiled();
  return true;
}

}  // namespace

bool lower_alias(Context& cx, const ir::Node& n) {
  if (n.inputs.empty() || n.inputs[0].empty() || n.outputs.empty()) return false;
  if (!cx.only_first_output_wanted(n)) return false;
  const std::string &in = n.inputs[0], &out = n.outputs[0];
  if (cx.dtype(in) != cx.dtype(out) || cx.bytes_of(in) != cx.bytes_of(out)) return false;
  Context::Val v;
  v.buffer = cx.plain(in);
  v.layout = cx.plain_layout(out);
  cx.vals[out] = v;
  cx.compiled();
  return true;
}

bool lower_transpose(Context& cx, const ir::Node& n) {
  return reorder_transpose(cx, n) || (!cx.host_kernels && portable_transpose(cx, n));
}

bool lower_slice(Context& cx, const ir::Node& n) {
  if (!cx.host_kernels) return portable_slice(cx, n);
  const auto view = slice_view(cx, n);
  if (!view) return false;
  const int src = cx.plain(n.inputs[0]);
  cx.add_kernel(
      n.describe(), {src, cx.define_plain(n.outputs[0])}, {0, 1},
      std::make_unique<StridedCopyKernel>(view->out, view->offset, view->strides, ir::dtype_size(cx.dtype(n.inputs[0]))));
  cx.compiled();
  return true;
}

namespace {

// What both of Gather's kernels take: one output, int32 or int64 indices,
// an axis inside non-empty data.
struct GatherOperands {
  Dims data;
  DType index_type;
  int64_t axis;
};
std::optional<GatherOperands> gather_operands(Context& cx, const ir::Node& n) {
  if (n.inputs.size() != 2 || n.outputs.size() != 1) return std::nullopt;
  GatherOperands g{cx.dims(n.inputs[0]), cx.dtype(n.inputs[1]), 0};
  if (g.data.empty() || (g.index_type != DType::Int64 && g.index_type != DType::Int32)) return std::nullopt;
  g.axis = ref::KernelContext(n, {}, nullptr).attr_int("axis", 0);
  if (!normalize_axis(g.axis, g.data.size())) return std::nullopt;
  return g;
}

}  // namespace

bool lower_gather(Context& cx, const ir::Node& n) {
  if (!cx.host_kernels) return portable_gather(cx, n);
  const auto operands = gather_operands(cx, n);
  if (!operands) return false;
  const auto& [data, index_type, axis] = *operands;
  const int src = cx.plain(n.inputs[0]), indices = cx.plain(n.inputs[1]);
  cx.add_kernel(n.describe(), {src, indices, cx.define_plain(n.outputs[0])}, {0, 0, 1},
                std::make_unique<GatherKernel>(n.describe(), data, int(axis), ir::checked_numel(cx.dims(n.inputs[1])), index_type,
                                               ir::dtype_size(cx.dtype(n.inputs[0]))));
  cx.compiled();
  return true;
}

bool lower_concat(Context& cx, const ir::Node& n) {
  const Dims out = cx.dims(n.outputs[0]);
  if (out.empty()) return false;
  ref::KernelContext ctx(n, {}, nullptr);
  int64_t axis = n.opset < 4 ? ctx.attr_int("axis", 1) : ctx.attr_int("axis");  // optional before opset 4
  if (!normalize_axis(axis, out.size())) return false;
  bool any_blocked = false;
  std::vector<std::string> ins;
  for (const auto& in : n.inputs) {
    if (in.empty() || cx.dtype(in) != cx.dtype(n.outputs[0])) return false;
    if (ir::checked_numel(cx.dims(in)) == 0) continue;
    ins.push_back(in);
    if (cx.is_f32(in) && cx.val(in).blocked) any_blocked = true;
  }
  if (ins.empty()) return false;
  if (any_blocked) {
    std::vector<md> srcs;
    for (const auto& in : ins) srcs.push_back(cx.val(in).layout);
    dnnl::concat::primitive_desc pd(md(to_dnnl(out), dt::f32, dnnl::memory::format_tag::any), int(axis), srcs, cpu_engine(),
                                    user_scratchpad());
    std::vector<std::pair<int, md>> rt;
    std::vector<int> bufs;
    for (size_t i = 0; i < ins.size(); ++i) {
      rt.push_back({DNNL_ARG_MULTIPLE_SRC + int(i), srcs[i]});
      bufs.push_back(cx.val(ins[i]).buffer);
    }
    Fused f;
    f.value = n.outputs[0];
    cx.compiled();
    emit_with_dst(cx, n.describe(), pd, std::move(rt), std::move(bufs), {}, f, pd.dst_desc(), is_plain(pd.dst_desc(), out));
    return true;
  }
  if (!cx.host_kernels) return portable_concat(cx, n);
  std::vector<Dims> in_dims;
  std::vector<int> bufs;
  for (const auto& in : ins) {
    in_dims.push_back(cx.dims(in));
    bufs.push_back(cx.plain(in));
  }
  std::vector<char> writes(bufs.size(), 0);
  bufs.push_back(cx.define_plain(n.outputs[0]));
  writes.push_back(1);
  cx.add_kernel(n.describe(), std::move(bufs), std::move(writes),
                std::make_unique<ConcatKernel>(in_dims, int(axis), ir::dtype_size(cx.dtype(n.outputs[0]))));
  cx.compiled();
  return true;
}

bool portable_transpose(Context& cx, const ir::Node& n) {
  const Dims in = cx.dims(n.inputs[0]), out = cx.dims(n.outputs[0]);
  auto strides = transposed_strides(n, in);
  if (!strides) return false;
  return portable_strided_copy(cx, n, out, 0, std::move(*strides));
}

bool portable_slice(Context& cx, const ir::Node& n) {
  auto view = slice_view(cx, n);
  return view && portable_strided_copy(cx, n, view->out, view->offset, std::move(view->strides));
}

bool portable_concat(Context& cx, const ir::Node& n) {
  const Dims out = cx.dims(n.outputs[0]);
  if (out.empty()) return false;
  ref::KernelContext ctx(n, {}, nullptr);
  int64_t axis = n.opset < 4 ? ctx.attr_int("axis", 1) : ctx.attr_int("axis");  // optional before opset 4
  if (!normalize_axis(axis, out.size())) return false;
  const int64_t esize = int64_t(ir::dtype_size(cx.dtype(n.outputs[0])));
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= out[size_t(i)];
  const int64_t out_row = ir::checked_numel(out) / std::max<int64_t>(outer, 1) * esize;
  std::vector<std::pair<std::string, int64_t>> parts;  // input, its bytes per outer row
  for (const auto& in : n.inputs) {
    if (in.empty() || cx.dtype(in) != cx.dtype(n.outputs[0])) return false;
    const int64_t numel = ir::checked_numel(cx.dims(in));
    if (numel) parts.push_back({in, numel / std::max<int64_t>(outer, 1) * esize});
  }
  std::vector<int> srcs;
  for (const auto& [in, row] : parts) srcs.push_back(cx.plain(in));
  const int dst = cx.define_plain(n.outputs[0]);
  // One copy step per input, each into its columns of the output.
  int64_t at = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const int64_t row = parts[i].second;
    cx.add_call(n.describe() + " part " + std::to_string(i), {srcs[i], dst}, {0, 1},
                {"kiln_pk_copy_rows",
                 {Call::i64(outer), Call::i64(row), Call::buffer(0), Call::i64(row), Call::buffer(1, at), Call::i64(out_row)},
                 false});
    at += row;
  }
  cx.compiled();
  return true;
}

bool portable_gather(Context& cx, const ir::Node& n) {
  const auto operands = gather_operands(cx, n);
  if (!operands) return false;
  const auto& [data, index_type, axis] = *operands;
  int64_t outer = 1, inner = int64_t(ir::dtype_size(cx.dtype(n.inputs[0])));
  for (size_t i = 0; i < data.size(); ++i) {
    if (int64_t(i) < axis) outer *= data[i];
    if (int64_t(i) > axis) inner *= data[i];
  }
  const int src = cx.plain(n.inputs[0]), indices = cx.plain(n.inputs[1]);
  cx.compiled();
  cx.add_call(
      n.describe(), {src, indices, cx.define_plain(n.outputs[0])}, {0, 0, 1},
      {"kiln_pk_gather",
       {Call::i64(outer), Call::i64(data[size_t(axis)]), Call::i64(inner), Call::i64(ir::checked_numel(cx.dims(n.inputs[1]))),
        Call::i32(index_type == DType::Int64), Call::buffer(1), Call::buffer(0), Call::buffer(2)},
       true});
  return true;
}

// GatherElements of any fixed-size element type: one portable kernel call
// for both kernel families, its indices checked when the step runs.
bool lower_gather_elements(Context& cx, const ir::Node& n) {
  if (n.inputs.size() != 2 || n.outputs.size() != 1) return false;
  const Dims data = cx.dims(n.inputs[0]), idx = cx.dims(n.inputs[1]);
  const DType index_type = cx.dtype(n.inputs[1]);
  if (idx.size() != data.size() || idx.empty() || idx.size() > 8) return false;
  if (index_type != DType::Int64 && index_type != DType::Int32) return false;
  ref::KernelContext ctx(n, {}, nullptr);
  int64_t axis = ctx.attr_int("axis", 0);
  if (!normalize_axis(axis, data.size())) return false;
  for (size_t d = 0; d < data.size(); ++d)
    if (int64_t(d) != axis && idx[d] > data[d]) return false;  // the reference kernel says why
  const int src = cx.plain(n.inputs[0]), indices = cx.plain(n.inputs[1]);
  cx.compiled();
  cx.add_call(n.describe(), {src, indices, cx.define_plain(n.outputs[0])}, {0, 0, 1},
              {"kiln_pk_gather_elements",
               {Call::i32(int32_t(idx.size())), Call::array(idx), Call::array(ref::strides_of(data)), Call::i32(int32_t(axis)),
                Call::i64(data[size_t(axis)]), Call::i64(int64_t(ir::dtype_size(cx.dtype(n.inputs[0])))),
                Call::i32(index_type == DType::Int64), Call::buffer(1), Call::buffer(0), Call::buffer(2)},
               true});
  return true;
}

// Split of any element type: each output a strided copy of its run of the
// axis (kiln_pk_strided_copy) for both kernel families. The runs are the
// outputs' shapes, which shape inference took from the sizes (an attribute,
// a constant input, or equal parts).
bool lower_split(Context& cx, const ir::Node& n) {
  if (n.inputs.empty() || n.outputs.empty()) return false;
  const Dims in = cx.dims(n.inputs[0]);
  if (in.empty() || in.size() > 8) return false;
  int64_t axis = ref::KernelContext(n, {}, nullptr).attr_int("axis", 0);
  if (!normalize_axis(axis, in.size())) return false;
  int64_t total = 0;
  for (const auto& out : n.outputs) {
    if (out.empty() || cx.dtype(out) != cx.dtype(n.inputs[0])) return false;
    const Dims d = cx.dims(out);
    if (d.size() != in.size()) return false;
    for (size_t k = 0; k < d.size(); ++k)
      if (int64_t(k) != axis && d[k] != in[k]) return false;
    total += d[size_t(axis)];
  }
  if (total != in[size_t(axis)]) return false;
  const std::vector<int64_t> strides = ref::strides_of(in);
  const int src = cx.plain(n.inputs[0]);
  int64_t start = 0;
  for (const auto& out : n.outputs) {
    const Dims d = cx.dims(out);
    cx.add_call(n.describe(), {src, cx.define_plain(out)}, {0, 1},
                {"kiln_pk_strided_copy",
                 {Call::i32(int32_t(d.size())), Call::array(d), Call::array(strides), Call::i64(start * strides[size_t(axis)]),
                  Call::i64(int64_t(ir::dtype_size(cx.dtype(out)))), Call::buffer(0), Call::buffer(1)},
                 false});
    start += d[size_t(axis)];
  }
  cx.compiled();
  return true;
}

}  // namespace kiln::cpu::lowering
