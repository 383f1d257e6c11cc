#pragma once
// What a convolution or product absorbs of the nodes after it: activations
// and a residual Add as oneDNN post-ops (or as the portable kernels'
// epilogue), and the primitive step that writes the chain's final value.
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/cpu/lower/layouts.hpp"
#include "backends/cpu/portable/kernels.h"
#include "backends/cpu/program.hpp"
#include "runtime/ir/graph.hpp"

namespace kiln::cpu::lowering {

class Context;

// A eltwise post-op: oneDNN algorithm and its two parameters.
struct PostOp {
  dnnl::algorithm alg;
  float alpha = 0, beta = 0;
};

struct Fused {
  std::string value;            // the chain's final value
  std::vector<PostOp> eltwise;  // in order, interleaved with the sum below
  int sum_position = -1;        // index in `eltwise` before which the residual is added
  std::string residual;
  std::vector<size_t> nodes;
};

// Follows `value` through activations and (if allowed) one residual Add
// that only it consumes.
Fused fuse_after(Context& cx, const std::string& value, bool allow_sum);
// The same without fuse_after's care for oneDNN's repeated algorithms, and
// at most `max_eltwise` activations.
Fused fuse_chain(Context& cx, const std::string& value, bool allow_sum, size_t max_eltwise = SIZE_MAX);
// A Clip's bounds, or nothing when one is not a constant.
std::optional<std::pair<float, float>> clip_bounds(Context& cx, const ir::Node& n);
dnnl::primitive_attr post_op_attr(const Fused& f);
// Marks the chain's nodes as computed by the step just added.
void absorb(Context& cx, const Fused& f);
// Emits a primitive whose destination is the fused chain's final value.
// `dst_plain`: dst_md is row-major (possibly with other dims than the value).
void emit_with_dst(Context& cx, const std::string& label, const dnnl::primitive_desc_base& pd,
                   std::vector<std::pair<int, md>> rt_args, std::vector<int> buffers,
                   std::unordered_map<int, dnnl::memory> constants, const Fused& f, const md& dst_md, bool dst_plain);

// What a portable convolution or product can apply as it stores: one
// activation, a residual added before it.
struct Epilogue {
  Fused fused;
  int32_t act = KILN_PK_ACT_NONE;
  float alpha = 0, beta = 0;
};
Epilogue portable_epilogue(Context& cx, const std::string& value, bool allow_sum);
// Appends the epilogue's residual and destination; returns the residual arg.
Call::Arg epilogue_args(Context& cx, const Epilogue& e, std::vector<int>& args, std::vector<char>& writes, int& dst);

}  // namespace kiln::cpu::lowering
