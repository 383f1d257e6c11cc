// Recurrent layers (RNN, GRU, LSTM): a host kernel whose products are
// oneDNN matmuls with the weights rearranged once, or the portable kernel,
// which reads the weights as ONNX lays them out.
#include <algorithm>
#include <cstring>

#include "backends/cpu/lower/context.hpp"
#include "backends/cpu/lower/families.hpp"
#include "backends/cpu/portable/kernels.h"
#include "backends/cpu/recurrent_kernel.hpp"
#include "backends/cpu/thread_budget.hpp"
#include "backends/reference/kernel_context.hpp"
#include "backends/reference/ops/op_util.hpp"

namespace kiln::cpu::lowering {

namespace {

// The layer a recurrent node describes (its outputs not yet marked), or
// nullopt where the node is malformed or outside what the kernels take:
// its reference kernel then runs it, and reports what is wrong.
std::optional<RecurrentLayer> read_recurrent(Context& cx, const ir::Node& n) {
  using Cell = RecurrentLayer::Cell;
  RecurrentLayer l;
  l.cell = n.op_type == "LSTM" ? Cell::Lstm : n.op_type == "GRU" ? Cell::Gru : Cell::Rnn;
  const bool lstm = l.cell == Cell::Lstm;
  const size_t max_inputs = lstm ? 8 : 6, max_outputs = lstm ? 3 : 2;
  if (n.inputs.size() < 3 || n.inputs.size() > max_inputs || n.outputs.size() > max_outputs) return std::nullopt;
  auto in = [&](size_t i) { return i < n.inputs.size() ? n.inputs[i] : std::string(); };
  if (!cx.is_f32(in(0)) || !cx.is_f32(in(1)) || !cx.is_f32(in(2)) || (!in(3).empty() && !cx.is_f32(in(3)))) return std::nullopt;
  const Dims wd = cx.dims(in(1)), rd = cx.dims(in(2));

  ref::KernelContext ctx(n, {}, nullptr);
  const Dims x = cx.dims(in(0));
  const int64_t layout = n.opset >= 14 ? ctx.attr_int("layout", 0) : 0;
  const std::string direction = ctx.attr_string("direction", "forward");
  if (x.size() != 3 || (layout != 0 && layout != 1)) return std::nullopt;
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional") return std::nullopt;
  l.batch_major = layout == 1;
  l.seq = l.batch_major ? x[1] : x[0];
  l.batch = l.batch_major ? x[0] : x[1];
  l.input = x[2];
  l.reverse = direction == "reverse";
  l.directions = direction == "bidirectional" ? 2 : 1;
  const int64_t D = l.directions, G = l.gates();
  if (wd.size() != 3 || wd[0] != D || wd[1] % G != 0 || wd[2] != l.input) return std::nullopt;
  l.hidden = ctx.attr_int("hidden_size", wd[1] / G);
  const int64_t H = l.hidden;
  if (H < 1 || wd[1] != G * H || rd != Dims{D, G * H, H} || (!in(3).empty() && cx.dims(in(3)) != Dims{D, 2 * G * H}))
    return std::nullopt;
  const Dims state = l.state_dims();
  if (!in(4).empty() && (cx.dims(in(4)) != Dims{l.batch} || (cx.dtype(in(4)) != DType::Int32 && cx.dtype(in(4)) != DType::Int64)))
    return std::nullopt;
  for (size_t i : {5, 6})
    if (!in(i).empty() && (!cx.is_f32(in(i)) || cx.dims(in(i)) != state)) return std::nullopt;
  if (!in(7).empty() && (!cx.is_f32(in(7)) || cx.dims(in(7)) != Dims{D, 3 * H})) return std::nullopt;
  l.sequence_lens_int64 = !in(4).empty() && cx.dtype(in(4)) == DType::Int64;
  l.linear_before_reset = l.cell == Cell::Gru && ctx.attr_int("linear_before_reset", 0) != 0;
  l.input_forget = lstm && ctx.attr_int("input_forget", 0) != 0;
  l.clip = ctx.has_attr("clip") ? ctx.attr_float("clip", 0) : 0;
  static const std::vector<std::string> defaults[] = {{"Tanh"}, {"Sigmoid", "Tanh"}, {"Sigmoid", "Tanh", "Tanh"}};
  std::vector<ref::RecurrentActivation> acts;
  try {
    acts = ref::recurrent_activations(ctx, defaults[int(l.cell)], D);
  } catch (const ir::Error&) {
    return std::nullopt;
  }
  for (const auto& a : acts) {
    RecurrentLayer::Activation k{};
    if (!RecurrentKernel::activation_named(a.name, k.act)) return std::nullopt;
    k.alpha = float(a.alpha);
    k.beta = float(a.beta);
    l.activations.push_back(k);
  }
  l.sequence_lens = !in(4).empty();
  return l;
}

}  // namespace

bool lower_recurrent(Context& cx, const ir::Node& n) {
  if (!cx.host_kernels) return portable_recurrent(cx, n);
  using Cell = RecurrentLayer::Cell;
  std::optional<RecurrentLayer> read = read_recurrent(cx, n);
  if (!read) return false;
  RecurrentLayer l = std::move(*read);
  const bool lstm = l.cell == Cell::Lstm;
  auto in = [&](size_t i) { return i < n.inputs.size() ? n.inputs[i] : std::string(); };
  const ir::Tensor* w = cx.constant(in(1));
  const ir::Tensor* r = cx.constant(in(2));
  const ir::Tensor* b = in(3).empty() ? nullptr : cx.constant(in(3));
  if (!w || !r || (!in(3).empty() && !b)) return false;
  const int64_t D = l.directions, G = l.gates(), H = l.hidden;
  const Dims state = l.state_dims();
  // Directions first, then groups of batch rows, over the threads.
  l.chunks = std::clamp<int64_t>(omp_get_max_threads() / D, 1, l.batch);

  // The products: weights as oneDNN packs them, W's and R's biases added
  // into the projection's (but R's of a GRU's hidden gate when the reset
  // multiplies it: that one is an operand, rbh).
  auto bias = std::make_shared<ir::Tensor>(DType::Float32, Dims{1, D * G * H});
  ir::Tensor rbh(DType::Float32, {D, H});
  if (b) {
    const float* bs = b->data<float>();
    for (int64_t d = 0; d < D; ++d)
      for (int64_t k = 0; k < G * H; ++k) {
        const float wb = bs[d * 2 * G * H + k], rb = bs[d * 2 * G * H + G * H + k];
        const bool separate = l.linear_before_reset && k >= 2 * H;
        bias->data<float>()[d * G * H + k] = separate ? wb : wb + rb;
        if (separate) rbh.data<float>()[d * H + k - 2 * H] = rb;
      }
  }
  const std::string label = n.describe();
  int64_t scratch = (RecurrentKernel::state_floats(l) * int64_t(sizeof(float)) + 63) / 64 * 64;
  std::vector<std::pair<OneDnnKernel*, int>> made;  // created once the step is in place
  auto product = [&](int64_t rows, int64_t k, int64_t cols, const md& user, const void* data, bool with_bias, int threads) {
    OmpThreads scope(threads);
    const md src = plain_md({rows, k}), dst = plain_md({rows, cols}), bias_md = plain_md({1, cols});
    const md any(to_dnnl({k, cols}), dt::f32, dnnl::memory::format_tag::any);
    const dnnl::matmul::primitive_desc pd(
        with_bias ? dnnl::matmul::desc(src, any, bias_md, dst) : dnnl::matmul::desc(src, any, dst), user_scratchpad(),
        cpu_engine());
    std::unordered_map<int, dnnl::memory> constants{{DNNL_ARG_WEIGHTS, cx.constant_memory(user, data, pd.weights_desc())}};
    if (with_bias) constants[DNNL_ARG_BIAS] = cx.constant_memory(bias_md, bias->raw(), bias_md, bias);
    std::vector<std::pair<int, md>> runtime{{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}};
    RecurrentProduct p;
    if (const md pad = pd.query_md(dnnl::query::scratchpad_md); pad.get_size() > 0) {
      p.scratchpad = scratch;
      scratch = (scratch + int64_t(pad.get_size()) + 63) / 64 * 64;
      runtime.push_back({DNNL_ARG_SCRATCHPAD, pad});
    }
    auto kernel = std::make_unique<OneDnnKernel>(pd, std::move(runtime), std::move(constants));
    made.push_back({kernel.get(), threads});
    p.kernel = std::move(kernel);
    return p;
  };
  // W [D * G * H, I] and each direction's R [G * H, H], read transposed.
  RecurrentProduct projection =
      product(l.seq * l.batch, l.input, D * G * H, md(to_dnnl({l.input, D * G * H}), dt::f32, to_dnnl({1, l.input})), w->raw(),
              true, omp_get_max_threads());
  std::vector<RecurrentProduct> steps;
  auto step_products = [&](int64_t d, int64_t rows) {
    const float* rd = r->data<float>() + d * G * H * H;
    const int64_t first = RecurrentKernel::products_per_item(l) == 2 ? 2 * H : G * H;  // columns of the first product
    steps.push_back(product(rows, H, first, md(to_dnnl({H, first}), dt::f32, to_dnnl({1, H})), rd, false, 1));
    if (first != G * H)
      steps.push_back(product(rows, H, H, md(to_dnnl({H, H}), dt::f32, to_dnnl({1, H})), rd + 2 * H * H, false, 1));
  };
  for (int64_t d = 0; d < D; ++d)
    for (int64_t part = 0; part < l.chunks; ++part) step_products(d, (part + 1) * l.batch / l.chunks - part * l.batch / l.chunks);
  if (l.sequence_lens)
    for (int64_t d = 0; d < D; ++d) step_products(d, 1);

  std::vector<int> args{cx.plain(in(0)), cx.add_constant(std::move(rbh), label + "#rbh")};
  if (in(4).empty()) {
    ir::Tensor lens(DType::Int32, {l.batch});
    std::fill_n(lens.data<int32_t>(), l.batch, int32_t(l.seq));
    args.push_back(cx.add_constant(std::move(lens), label + "#sequence_lens"));
  } else {
    args.push_back(cx.plain(in(4)));
  }
  auto operand_or_zeros = [&](size_t i, const Dims& d, const char* what) {
    return in(i).empty() ? cx.add_constant(ir::Tensor(DType::Float32, d), label + "#" + what) : cx.plain(in(i));
  };
  args.push_back(operand_or_zeros(5, state, "initial_h"));
  if (lstm) {
    args.push_back(operand_or_zeros(6, state, "initial_c"));
    args.push_back(operand_or_zeros(7, {D, 3 * H}, "P"));
  }
  std::vector<char> writes(args.size(), 0);
  bool* wanted[] = {&l.y, &l.y_h, &l.y_c};
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    if (n.outputs[i].empty()) continue;
    *wanted[i] = true;
    args.push_back(cx.define_plain(n.outputs[i]));
    writes.push_back(1);
  }
  args.push_back(cx.add_buffer(Buffer::Kind::Arena, 0, scratch, label + "#scratch"));
  writes.push_back(1);
  cx.compiled();
  cx.add_kernel(label, std::move(args), std::move(writes),
                std::make_unique<RecurrentKernel>(label, std::move(l), std::move(projection), std::move(steps)));
  for (const auto& [k, threads] : made) cx.defer_creation(k, label, threads);
  return true;
}

// The portable kernel: weights that are inputs too, as it reads them as
// ONNX lays them out.
bool portable_recurrent(Context& cx, const ir::Node& n) {
  std::optional<RecurrentLayer> read = read_recurrent(cx, n);
  if (!read) return false;
  const RecurrentLayer& l = *read;
  std::vector<int64_t> activations;
  for (const auto& a : l.activations) {
    uint32_t alpha, beta;
    std::memcpy(&alpha, &a.alpha, sizeof alpha);
    std::memcpy(&beta, &a.beta, sizeof beta);
    activations.insert(activations.end(), {int64_t(a.act), int64_t(alpha), int64_t(beta)});
  }
  std::vector<int> args;
  std::vector<char> writes;
  // Each input or output the node has, as the call's next buffer (null where it has none).
  auto operand = [&](const std::vector<std::string>& values, size_t i, bool output) {
    if (i >= values.size() || values[i].empty()) return Call::null();
    args.push_back(output ? cx.define_plain(values[i]) : cx.plain(values[i]));
    writes.push_back(output);
    return Call::buffer(int(args.size()) - 1);
  };
  static_assert(int(RecurrentLayer::Cell::Lstm) == KILN_PK_CELL_LSTM && int(RecurrentLayer::Cell::Gru) == KILN_PK_CELL_GRU &&
                int(RecurrentLayer::Act::Softplus) == KILN_PK_RNN_SOFTPLUS &&
                int(RecurrentLayer::Act::Affine) == KILN_PK_RNN_AFFINE);
  const int32_t cell = int32_t(l.cell);
  // Braced lists evaluate in order: the buffers are numbered as listed.
  std::vector<Call::Arg> call_args{Call::i32(cell),
                                   Call::i64(l.seq),
                                   Call::i64(l.batch),
                                   Call::i64(l.input),
                                   Call::i64(l.hidden),
                                   Call::i64(l.directions),
                                   Call::i32(l.reverse),
                                   Call::i32(l.batch_major),
                                   Call::i32(l.linear_before_reset),
                                   Call::i32(l.input_forget),
                                   Call::f32(l.clip),
                                   Call::array(std::move(activations)),
                                   operand(n.inputs, 0, false),
                                   operand(n.inputs, 1, false),
                                   operand(n.inputs, 2, false),
                                   operand(n.inputs, 3, false),
                                   operand(n.inputs, 4, false),
                                   Call::i32(l.sequence_lens_int64),
                                   operand(n.inputs, 5, false),
                                   operand(n.inputs, 6, false),
                                   operand(n.inputs, 7, false),  // only an LSTM has 6 and 7
                                   operand(n.outputs, 0, true),
                                   operand(n.outputs, 1, true),
                                   operand(n.outputs, 2, true)};
  call_args.push_back(cx.scratch(
      args, writes, kiln_pk_recurrent_scratch_bytes(cell, l.seq, l.batch, l.input, l.hidden, l.directions), n.describe()));
  cx.compiled();
  cx.add_call(n.describe(), std::move(args), std::move(writes), {"kiln_pk_recurrent", std::move(call_args), true});
  return true;
}

}  // namespace kiln::cpu::lowering
