// Gemm and MatMul of floats as oneDNN matmuls made for each call's shapes.
#include "backends/cpu/interpreter/families.hpp"

#include <oneapi/dnnl/dnnl.hpp>

#include <unordered_map>

#include "backends/cpu/interpreter/kernel_common.hpp"
#include "backends/cpu/onednn_kernel.hpp"

namespace kiln::cpu::interpreter {

using dnnl::memory;
using ir::Dims;
using ir::DType;
using ir::Tensor;

namespace {

// dst = alpha * src x weights (+ addend), every operand described with its
// own strides (transposes are strides), run on the calling thread's OpenMP
// team. The addend is a post-op, not a bias: oneDNN scales the bias with alpha.
void product(const memory::desc& src, const void* a, const memory::desc& weights, const void* b, const memory::desc* addend,
             const void* c, const memory::desc& dst, void* out, float alpha) {
  const dnnl::engine& engine = cpu_engine();
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (addend) {
    dnnl::post_ops ops;
    ops.append_binary(dnnl::algorithm::binary_add, *addend);
    attr.set_post_ops(ops);
  }
  // oneDNN keeps made primitives in its own cache, keyed by shapes and
  // attributes: a product seen before costs a look-up.
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, weights, dst), attr, engine);
  dnnl::stream stream(engine);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(src, engine, const_cast<void*>(a))},
                                       {DNNL_ARG_WEIGHTS, memory(weights, engine, const_cast<void*>(b))},
                                       {DNNL_ARG_DST, memory(dst, engine, out)}};
  if (addend) args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, memory(*addend, engine, const_cast<void*>(c)));
  dnnl::matmul(pd).execute(stream, args);
  stream.wait();
}

// The product on the budget's threads.
void matmul(const memory::desc& src, const void* a, const memory::desc& weights, const void* b, const memory::desc* addend,
            const void* c, const memory::desc& dst, void* out, float alpha) {
  if (!t_budget) return product(src, a, weights, b, addend, c, dst, out, alpha);
  t_budget->hold([&] { product(src, a, weights, b, addend, c, dst, out, alpha); });
}

memory::desc desc(const Dims& dims, const Dims& strides) {
  return memory::desc(memory::dims(dims.begin(), dims.end()), memory::data_type::f32,
                      memory::dims(strides.begin(), strides.end()));
}

bool all_f32(const ref::KernelContext& ctx) {
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i) && ctx.input(i).dtype() != DType::Float32) return false;
  return true;
}

}  // namespace

// Y = alpha * A' B' + C, with C broadcast along rows, columns or both. Other
// cases (beta other than 1, other dtypes, empty products) are the
// reference kernel's.
void gemm_kernel(ref::KernelContext& ctx) {
  const bool has_c = ctx.has_input(2);
  if (!all_f32(ctx) || ctx.input(0).rank() != 2 || ctx.input(1).rank() != 2 ||
      (has_c && (ctx.attr_float("beta", 1.0f) != 1.0f || ctx.input(2).rank() > 2)))
    return run_reference(ctx);
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const bool ta = ctx.attr_int("transA", 0) != 0, tb = ctx.attr_int("transB", 0) != 0;
  const int64_t m = a.dim(ta ? 1 : 0), k = a.dim(ta ? 0 : 1), n = b.dim(tb ? 0 : 1);
  if (b.dim(tb ? 1 : 0) != k || m == 0 || n == 0 || k == 0) return run_reference(ctx);
  Dims c_dims;
  if (has_c) {
    const Tensor& c = ctx.input(2);
    const int64_t cm = c.rank() == 2 ? c.dim(0) : 1, cn = c.rank() >= 1 ? c.dim(-1) : 1;
    if ((cm != 1 && cm != m) || (cn != 1 && cn != n)) return run_reference(ctx);  // names the mismatch
    c_dims = {cm, cn};
  }
  Tensor out(DType::Float32, {m, n});
  const memory::desc src = desc({m, k}, ta ? Dims{1, m} : Dims{k, 1});
  const memory::desc weights = desc({k, n}, tb ? Dims{1, k} : Dims{n, 1});
  const memory::desc addend = has_c ? desc(c_dims, {c_dims[1], 1}) : memory::desc();
  matmul(src, a.raw(), weights, b.raw(), has_c ? &addend : nullptr, has_c ? ctx.input(2).raw() : nullptr, desc({m, n}, {n, 1}),
         out.raw(), ctx.attr_float("alpha", 1.0f));
  ctx.set_output(0, std::move(out));
}

// [..., m, k] x [k, n], and stacks of equal batch shape. Broadcasting
// batches and vectors are the reference kernel's.
void matmul_kernel(ref::KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  if (!all_f32(ctx) || a.rank() < 2 || b.rank() < 2 || a.dim(-1) != b.dim(-2)) return run_reference(ctx);
  const int64_t m = a.dim(-2), k = a.dim(-1), n = b.dim(-1);
  const Dims batch_a(a.dims().begin(), a.dims().end() - 2), batch_b(b.dims().begin(), b.dims().end() - 2);
  if (!batch_b.empty() && batch_b != batch_a) return run_reference(ctx);
  const int64_t batch = ir::checked_numel(batch_a);
  if (m == 0 || n == 0 || k == 0 || batch == 0) return run_reference(ctx);
  Dims out_dims = batch_a;
  out_dims.insert(out_dims.end(), {m, n});
  Tensor out(DType::Float32, out_dims);
  if (batch_b.empty()) {  // one weight matrix: the stack is one taller product
    matmul(desc({batch * m, k}, {k, 1}), a.raw(), desc({k, n}, {n, 1}), b.raw(), nullptr, nullptr, desc({batch * m, n}, {n, 1}),
           out.raw(), 1.0f);
  } else {
    matmul(desc({batch, m, k}, {m * k, k, 1}), a.raw(), desc({batch, k, n}, {k * n, n, 1}), b.raw(), nullptr, nullptr,
           desc({batch, m, n}, {m * n, n, 1}), out.raw(), 1.0f);
  }
  ctx.set_output(0, std::move(out));
}

}  // namespace kiln::cpu::interpreter
