#pragma once
// A convolution as the portable kernels take it (kiln_pk_conv2d and
// kiln_pk_qconv2d): 1-D or 2-D, a 1-D one as 2-D of height 1, its shape
// arguments in kernels.h's order. Shared by the float and int8 lowerings.
#include <optional>
#include <vector>

#include "backends/cpu/lower/context.hpp"
#include "backends/reference/kernel_context.hpp"
#include "backends/reference/ops/op_util.hpp"

namespace kiln::cpu::lowering {

struct PortableConvShape {
  int64_t n, c, h, w, k, oh, ow, kh, kw, sh, sw, pt, pl, dh, dw, group;

  std::vector<Call::Arg> args() const {
    std::vector<Call::Arg> a;
    for (int64_t v : {n, c, h, w, k, oh, ow, kh, kw, sh, sw, pt, pl, dh, dw, group}) a.push_back(Call::i64(v));
    return a;
  }
};

// Node `n`'s convolution of input dims `in` by weights `wd` into `out`, if
// the portable kernels take it (rank 3 or 4, a group that splits both sides).
inline std::optional<PortableConvShape> portable_conv_shape(const ir::Node& n, const Dims& in, const Dims& wd, const Dims& out) {
  if ((in.size() != 3 && in.size() != 4) || wd.size() != in.size() || out.size() != in.size()) return std::nullopt;
  ref::KernelContext ctx(n, {}, nullptr);
  const int64_t group = ctx.attr_int("group", 1);
  const ref::Geometry geo = ref::forward_geometry(ctx, Dims(in.begin() + 2, in.end()), Dims(wd.begin() + 2, wd.end()), false);
  if (Dims(out.begin() + 2, out.end()) != geo.out || group < 1 || in[1] != wd[1] * group || wd[0] % group || out[1] != wd[0])
    return std::nullopt;
  auto two = [](const Dims& d, int64_t one) { return d.size() == 1 ? Dims{one, d[0]} : d; };
  const Dims hw = two(Dims(in.begin() + 2, in.end()), 1), k = two(geo.kernel, 1), st = two(geo.strides, 1),
             pad = two(geo.pad_begin, 0), dil = two(geo.dilations, 1), o = two(geo.out, 1);
  return PortableConvShape{in[0], in[1], hw[0], hw[1],  wd[0],  o[0],   o[1],   k[0],
                           k[1],  st[0], st[1], pad[0], pad[1], dil[0], dil[1], group};
}

}  // namespace kiln::cpu::lowering
