// Products (Gemm, MatMul): oneDNN matmul with the constant operand
// reordered once, the bias and activations that follow fused, and the
// portable kernel's gemm.
#include <optional>

#include "backends/cpu/lower/context.hpp"
#include "backends/cpu/lower/families.hpp"
#include "backends/cpu/lower/fusion.hpp"
#include "backends/cpu/portable/kernels.h"
#include "backends/cpu/thread_budget.hpp"
#include "backends/reference/kernel_context.hpp"

namespace kiln::cpu::lowering {

namespace {

// Products of at most this many multiply-adds run on one thread.
constexpr int64_t kOneThreadProduct = int64_t(1) << 17;

// [rows, k] x [k, n] (+ bias) with fused post-ops; the bias may also come
// from an Add of a constant row vector that follows. Constant weights
// (`weights`, held by `keep` if the graph does not) are reordered once into
// the layout oneDNN picks; null `weights` are the node's second input, read
// at run time as `user_wei` describes them. `run_bias`: a value of the run
// added as the bias, [1 or rows, 1 or n] (Gemm's C).
bool emit_matmul(Context& cx, const ir::Node& n, const std::string& a, const md& src_md, const md& user_wei, const float* weights,
                 std::shared_ptr<const void> keep, std::vector<float> bias, const std::string& residual, const Dims& out,
                 const std::string& run_bias = "") {
  const int64_t rows = src_md.dims()[0], k = src_md.dims()[1], nn = user_wei.dims()[1];
  std::string value = n.outputs[0];
  std::vector<size_t> bias_nodes;
  if (bias.empty() && residual.empty() && run_bias.empty() && cx.single_use(value)) {
    const ir::Node& c = cx.graph.nodes[cx.consumers(value)[0]];
    if (c.op_type == "Add" && c.domain.empty() && c.inputs.size() == 2) {
      const std::string& other = c.inputs[0] == value ? c.inputs[1] : c.inputs[0];
      const ir::Tensor* t = cx.constant(other);
      // A bias runs along the last axis: [n], [1, n], [1, ..., 1, n] (an
      // [n, 1] column would broadcast the other way).
      const Dims bd = t ? cx.dims(other) : Dims{};
      const bool row = !bd.empty() && bd.back() == nn && ir::checked_numel(bd) == nn;
      if (t && t->dtype() == DType::Float32 && row && cx.dims(c.outputs[0]) == out) {
        bias.assign(t->data<float>(), t->data<float>() + nn);
        bias_nodes.push_back(cx.consumers(value)[0]);
        value = c.outputs[0];
      }
    }
  }
  // A product this small takes 3 us on one thread and 9 on two (1x128 by
  // 128x128 here): sharing it costs more than it saves. It is described,
  // made and run on one thread.
  std::optional<OmpThreads> one;
  if (rows * k * nn <= kOneThreadProduct) one.emplace(1);
  Fused f = fuse_after(cx, value, residual.empty());
  if (!residual.empty()) {
    f.sum_position = 0;
    f.residual = residual;
  }
  f.nodes.insert(f.nodes.begin(), bias_nodes.begin(), bias_nodes.end());
  if (cx.dims(f.value) != out || rows * nn * 4 != cx.bytes_of(f.value)) return false;
  const md dst_md = plain_md({rows, nn});
  md bias_md = bias.empty() ? md() : plain_md({1, nn});
  if (!run_bias.empty()) {
    const Dims cd = cx.dims(run_bias);
    bias_md = plain_md({cd.size() == 2 ? cd[0] : 1, cd.empty() ? 1 : cd.back()});
  }
  dnnl::matmul::desc desc(src_md, weights ? md({k, nn}, dt::f32, dnnl::memory::format_tag::any) : user_wei, bias_md, dst_md);
  dnnl::matmul::primitive_desc pd(desc, post_op_attr(f), cpu_engine());
  std::vector<std::pair<int, md>> rt{{DNNL_ARG_SRC, src_md}};
  std::vector<int> bufs{cx.plain(a)};
  std::unordered_map<int, dnnl::memory> constants;
  if (weights) {
    constants[DNNL_ARG_WEIGHTS] = cx.constant_memory(user_wei, weights, pd.weights_desc(), std::move(keep));
  } else {
    rt.push_back({DNNL_ARG_WEIGHTS, user_wei});
    bufs.push_back(cx.plain(n.inputs[1]));
  }
  if (!run_bias.empty()) {
    rt.push_back({DNNL_ARG_BIAS, bias_md});
    bufs.push_back(cx.plain(run_bias));
  }
  if (!bias.empty()) {
    auto held = std::make_shared<const std::vector<float>>(std::move(bias));
    constants[DNNL_ARG_BIAS] = cx.constant_memory(bias_md, held->data(), bias_md, held);
  }
  cx.compiled();
  // The destination is [rows, n]: the same bytes as the value's own shape.
  emit_with_dst(cx, n.describe(), pd, std::move(rt), std::move(bufs), std::move(constants), f, dst_md, true);
  return true;
}

// One product (or a batch of them) with its epilogue. `bias` is a buffer
// argument already in `args`, or null.
struct Product {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  int64_t lda = 0, stride_a = 0, ldb = 0, stride_b = 0;
  bool trans_a = false, trans_b = false;
  float alpha = 1, beta = 1;
  int64_t bias_rs = 0, bias_cs = 0;
};

void emit_product(Context& cx, const ir::Node& n, const Product& pr, std::vector<int> args, std::vector<char> writes,
                  Call::Arg bias, const Epilogue& e) {
  int dst = -1;
  const Call::Arg residual = epilogue_args(cx, e, args, writes, dst);
  const Call::Arg work = cx.scratch(args, writes, kiln_pk_gemm_scratch_bytes(pr.batch, pr.m, pr.n, pr.k), n.describe());
  Call call{"kiln_pk_gemm",
            {Call::i64(pr.batch),
             Call::i64(pr.m),
             Call::i64(pr.n),
             Call::i64(pr.k),
             Call::buffer(0),
             Call::i64(pr.lda),
             Call::i64(pr.stride_a),
             Call::i32(pr.trans_a),
             Call::buffer(1),
             Call::i64(pr.ldb),
             Call::i64(pr.stride_b),
             Call::i32(pr.trans_b),
             Call::buffer(dst),
             Call::i64(pr.n),
             Call::i64(pr.m * pr.n),
             Call::f32(pr.alpha),
             bias,
             Call::i64(pr.bias_rs),
             Call::i64(pr.bias_cs),
             Call::f32(pr.beta),
             residual,
             Call::i32(e.act),
             Call::f32(e.alpha),
             Call::f32(e.beta),
             work},
            false};
  cx.compiled();
  absorb(cx, e.fused);
  cx.add_call(n.describe(), std::move(args), std::move(writes), std::move(call));
}

}  // namespace

bool lower_gemm(Context& cx, const ir::Node& n) {
  if (n.inputs.size() < 2 || n.outputs.size() != 1 || !cx.is_f32(n.inputs[0]) || !cx.is_f32(n.inputs[1])) return false;
  ref::KernelContext ctx(n, {}, nullptr);
  const bool ta = ctx.attr_int("transA", 0) != 0, tb = ctx.attr_int("transB", 0) != 0;
  const float alpha = ctx.attr_float("alpha", 1.0f), beta = ctx.attr_float("beta", 1.0f);
  const Dims a = cx.dims(n.inputs[0]), bdims = cx.dims(n.inputs[1]), out = cx.dims(n.outputs[0]);
  if (a.size() != 2 || bdims.size() != 2 || out.size() != 2) return false;
  const int64_t m = out[0], nn = out[1], k = ta ? a[0] : a[1];
  const ir::Tensor* bw = cx.constant(n.inputs[1]);
  // alpha folds into constant weights; B of the run is read as it is.
  if (!bw && alpha != 1.0f) return false;

  // beta * C becomes the bias (or a residual); C of the run, a bias of the run.
  std::vector<float> bias;
  std::string residual, run_bias;
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
    const std::string& c = n.inputs[2];
    const ir::Tensor* ct = cx.constant(c);
    const Dims cd = cx.dims(c);
    if (ct && ct->dtype() == DType::Float32 && (ct->numel() == 1 || (ct->numel() == nn && cd.back() == nn))) {
      for (int64_t j = 0; j < nn; ++j) bias.push_back(beta * ct->data<float>()[ct->numel() == 1 ? 0 : j]);
    } else if (cd == out && beta == 1.0f && cx.is_f32(c)) {
      residual = c;
    } else if (!ct && beta == 1.0f && cx.is_f32(c) && cd.size() <= 2 && (cd.empty() || cd.back() == 1 || cd.back() == nn) &&
               (cd.size() < 2 || cd[0] == 1 || cd[0] == m)) {
      run_bias = c;
    } else {
      return false;
    }
  }
  const float* weights = bw ? bw->data<float>() : nullptr;
  std::shared_ptr<std::vector<float>> scaled;
  if (bw && alpha != 1.0f) {
    scaled = std::make_shared<std::vector<float>>(weights, weights + bw->numel());
    for (float& x : *scaled) x *= alpha;
    weights = scaled->data();
  }
  md src_md(to_dnnl({m, k}), dt::f32, ta ? dnnl::memory::dims{1, m} : dnnl::memory::dims{k, 1});
  md user_wei(to_dnnl({k, nn}), dt::f32, tb ? dnnl::memory::dims{1, k} : dnnl::memory::dims{nn, 1});
  return emit_matmul(cx, n, n.inputs[0], src_md, user_wei, weights, scaled, bias, residual, out, run_bias);
}

bool lower_matmul(Context& cx, const ir::Node& n) {
  if (n.inputs.size() != 2 || n.outputs.size() != 1 || !cx.is_f32(n.inputs[0]) || !cx.is_f32(n.inputs[1])) return false;
  const Dims a = cx.dims(n.inputs[0]), b = cx.dims(n.inputs[1]), out = cx.dims(n.outputs[0]);
  if (a.size() < 2 || b.size() < 2) return false;
  const ir::Tensor* bw = cx.constant(n.inputs[1]);
  if (bw && b.size() == 2) {
    // A stack of rows times one matrix: a single 2-D product.
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < a.size(); ++i) rows *= a[i];
    const int64_t k = a.back(), nn = b[1];
    return emit_matmul(cx, n, n.inputs[0], plain_md({rows, k}), plain_md({k, nn}), bw->data<float>(), nullptr, {}, "", out);
  }
  // Batched: both operands at runtime (or batched weights), batch dims broadcast.
  const size_t rank = std::max(a.size(), b.size());
  if (rank > 6) return false;
  auto widen = [&](Dims d) {
    d.insert(d.begin(), rank - d.size(), 1);
    return d;
  };
  const Dims aw = widen(a), bwd = widen(b), ow = widen(out);
  Fused f = fuse_after(cx, n.outputs[0], true);
  if (cx.dims(f.value) != out) return false;
  md a_md = plain_md(aw), b_md = plain_md(bwd), o_md = plain_md(ow);
  dnnl::matmul::desc desc(a_md, b_md, o_md);
  dnnl::matmul::primitive_desc pd(desc, post_op_attr(f), cpu_engine());
  std::vector<std::pair<int, md>> rt{{DNNL_ARG_SRC, a_md}};
  std::unordered_map<int, dnnl::memory> constants;
  std::vector<int> bufs{cx.plain(n.inputs[0])};
  if (bw) {
    constants[DNNL_ARG_WEIGHTS] = cx.constant_memory(b_md, bw->raw(), b_md);
  } else {
    rt.push_back({DNNL_ARG_WEIGHTS, b_md});
    bufs.push_back(cx.plain(n.inputs[1]));
  }
  cx.compiled();
  emit_with_dst(cx, n.describe(), pd, std::move(rt), std::move(bufs), std::move(constants), f, o_md, true);
  return true;
}

bool portable_gemm(Context& cx, const ir::Node& n) {
  if (n.inputs.size() < 2 || n.outputs.size() != 1 || !cx.is_f32(n.inputs[0]) || !cx.is_f32(n.inputs[1])) return false;
  ref::KernelContext ctx(n, {}, nullptr);
  const Dims a = cx.dims(n.inputs[0]), b = cx.dims(n.inputs[1]), out = cx.dims(n.outputs[0]);
  if (a.size() != 2 || b.size() != 2 || out.size() != 2) return false;
  Product pr;
  pr.trans_a = ctx.attr_int("transA", 0) != 0;
  pr.trans_b = ctx.attr_int("transB", 0) != 0;
  pr.alpha = ctx.attr_float("alpha", 1.0f);
  pr.beta = ctx.attr_float("beta", 1.0f);
  pr.m = out[0];
  pr.n = out[1];
  pr.k = pr.trans_a ? a[0] : a[1];
  pr.lda = a[1];
  pr.ldb = b[1];
  std::vector<int> args{cx.plain(n.inputs[0]), cx.plain(n.inputs[1])};
  std::vector<char> writes{0, 0};
  Call::Arg bias = Call::null();
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
    const std::string& c = n.inputs[2];
    if (!cx.is_f32(c)) return false;
    // C broadcasts to [m, n] unidirectionally.
    Dims cd = cx.dims(c);
    if (cd.size() > 2) return false;
    cd.insert(cd.begin(), 2 - cd.size(), 1);
    if ((cd[0] != 1 && cd[0] != pr.m) || (cd[1] != 1 && cd[1] != pr.n)) return false;
    pr.bias_rs = cd[0] == 1 ? 0 : cd[1];
    pr.bias_cs = cd[1] == 1 ? 0 : 1;
    args.push_back(cx.plain(c));
    writes.push_back(0);
    bias = Call::buffer(2);
  }
  emit_product(cx, n, pr, std::move(args), std::move(writes), bias, portable_epilogue(cx, n.outputs[0], true));
  return true;
}

bool portable_matmul(Context& cx, const ir::Node& n) {
  if (n.inputs.size() != 2 || n.outputs.size() != 1 || !cx.is_f32(n.inputs[0]) || !cx.is_f32(n.inputs[1])) return false;
  Dims a = cx.dims(n.inputs[0]), b = cx.dims(n.inputs[1]);
  const Dims out = cx.dims(n.outputs[0]);
  if (a.size() < 2 || b.size() < 2) return false;
  Product pr;
  pr.k = a.back();
  pr.n = b.back();
  pr.lda = pr.k;
  pr.ldb = pr.n;
  if (b.size() == 2) {  // a stack of rows times one matrix: one product
    pr.m = ir::checked_numel(a) / pr.k;
  } else {
    // Batch dims: each operand's either equals the output's or is all ones.
    const size_t rank = out.size();
    a.insert(a.begin(), rank - a.size(), 1);
    b.insert(b.begin(), rank - b.size(), 1);
    const Dims batch_dims(out.begin(), out.end() - 2);
    auto batch_of = [&](const Dims& d) { return Dims(d.begin(), d.end() - 2); };
    pr.batch = ir::checked_numel(batch_dims);
    pr.m = a[rank - 2];
    for (const Dims* d : {&a, &b}) {
      const Dims bd = batch_of(*d);
      if (bd != batch_dims && ir::checked_numel(bd) != 1) return false;
    }
    pr.stride_a = batch_of(a) == batch_dims && pr.batch > 1 ? pr.m * pr.k : 0;
    pr.stride_b = batch_of(b) == batch_dims && pr.batch > 1 ? pr.k * pr.n : 0;
  }
  if (pr.batch * pr.m * pr.n != ir::checked_numel(out)) return false;
  std::vector<int> args{cx.plain(n.inputs[0]), cx.plain(n.inputs[1])};
  std::vector<char> writes{0, 0};
  Call::Arg bias = Call::null();
  // A bias row added next (exporters write Linear as MatMul + Add).
  std::string value = n.outputs[0];
  std::vector<size_t> bias_nodes;
  if (cx.single_use(value)) {
    const ir::Node& c = cx.graph.nodes[cx.consumers(value)[0]];
    if (c.op_type == "Add" && c.domain.empty() && c.inputs.size() == 2) {
      const std::string& other = c.inputs[0] == value ? c.inputs[1] : c.inputs[0];
      const Dims bd = cx.is_f32(other) && cx.available(other) ? cx.dims(other) : Dims{};
      if (!bd.empty() && bd.back() == pr.n && ir::checked_numel(bd) == pr.n && cx.dims(c.outputs[0]) == out) {
        args.push_back(cx.plain(other));
        writes.push_back(0);
        bias = Call::buffer(2);
        pr.bias_cs = 1;
        bias_nodes.push_back(cx.consumers(value)[0]);
        value = c.outputs[0];
      }
    }
  }
  Epilogue e = portable_epilogue(cx, value, true);
  e.fused.nodes.insert(e.fused.nodes.begin(), bias_nodes.begin(), bias_nodes.end());
  emit_product(cx, n, pr, std::move(args), std::move(writes), bias, e);
  return true;
}

}  // namespace kiln::cpu::lowering
