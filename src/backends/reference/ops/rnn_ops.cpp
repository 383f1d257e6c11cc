// Recurrent layers: RNN, GRU and LSTM. All three share input parsing, the
// time loop (directions, sequence_lens, layout) and output assembly; only the
// cell update differs. Computation is in double whatever the tensor type.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "backends/reference/kernel_registry.hpp"
#include "backends/reference/ops/op_util.hpp"

namespace kiln::ref {
namespace {

std::vector<double> to_doubles(const Tensor& t) {
  std::vector<double> v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = t.as_double(i);
  return v;
}

Tensor from_doubles(DType dtype, const Dims& dims, const std::vector<double>& v) {
  Tensor out(dtype, dims);
  ir::dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, ir::Half> ||
                  std::is_same_v<T, ir::BFloat16>) {
      T* p = out.data<T>();
      for (size_t i = 0; i < v.size(); ++i) {
        if constexpr (std::is_same_v<T, double>)
          p[i] = v[i];
        else
          p[i] = T(static_cast<float>(v[i]));
      }
    }
  });
  return out;
}

// Everything the three layers have in common. `gates` is the number of gate
// blocks stacked in W and R (1 for RNN, 3 for GRU, 4 for LSTM).
class Recurrent {
 public:
  Recurrent(KernelContext& ctx, int64_t gates) : ctx_(ctx), gates_(gates) {
    const Tensor& x = ctx.input(0);
    if (!ir::dtype_is_float(x.dtype()))
      ctx.fail(std::string("X has type ") + ir::dtype_name(x.dtype()) + ", expected a floating-point type");
    dtype_ = x.dtype();
    layout_ = ctx.opset() >= 14 ? ctx.attr_int("layout", 0) : 0;
    if (layout_ != 0 && layout_ != 1) ctx.fail("layout is " + std::to_string(layout_) + ", expected 0 or 1");
    if (x.rank() != 3) ctx.fail("X shape " + ir::dims_to_string(x.dims()) + " must be 3-D");
    seq_ = layout_ ? x.dim(1) : x.dim(0);
    batch_ = layout_ ? x.dim(0) : x.dim(1);
    input_ = x.dim(2);

    std::string dir = ctx.attr_string("direction", "forward");
    if (dir != "forward" && dir != "reverse" && dir != "bidirectional")
      ctx.fail("direction is '" + dir + "', expected forward, reverse or bidirectional");
    reverse_only_ = dir == "reverse";
    dirs_ = dir == "bidirectional" ? 2 : 1;

    const Tensor& w = ctx.input(1);
    const Tensor& r = ctx.input(2);
    if (w.rank() != 3 || w.dim(0) != dirs_ || w.dim(1) % gates != 0 || w.dim(2) != input_)
      ctx.fail("W shape " + ir::dims_to_string(w.dims()) + " must be [" + std::to_string(dirs_) + ", " + std::to_string(gates) +
               "*hidden_size, " + std::to_string(input_) + "]");
    hidden_ = ctx.attr_int("hidden_size", w.dim(1) / gates);
    if (w.dim(1) != gates * hidden_)
      ctx.fail("W has " + std::to_string(w.dim(1)) + " rows, expected " + std::to_string(gates * hidden_) + " for hidden_size " +
               std::to_string(hidden_));
    expect_shape(r, "R", {dirs_, gates * hidden_, hidden_});
    w_ = to_doubles(w);
    r_ = to_doubles(r);
    b_.assign(size_t(dirs_ * 2 * gates * hidden_), 0.0);
    if (ctx.has_input(3)) {
      expect_shape(ctx.input(3), "B", {dirs_, 2 * gates * hidden_});
      b_ = to_doubles(ctx.input(3));
    }
    seq_lens_.assign(size_t(batch_), seq_);
    if (ctx.has_input(4)) {
      const Tensor& sl = ctx.input(4);
      expect_shape(sl, "sequence_lens", {batch_});
      for (int64_t b = 0; b < batch_; ++b) {
        int64_t v = sl.as_int64(b);
        if (v < 0 || v > seq_)
          ctx.fail("sequence_lens[" + std::to_string(b) + "] is " + std::to_string(v) + ", expected a value in [0, " +
                   std::to_string(seq_) + "]");
        seq_lens_[size_t(b)] = v;
      }
    }
    h0_ = optional_state(5, "initial_h");
    x_ = to_doubles(x);
    clip_ = ctx.has_attr("clip") ? double(ctx.attr_float("clip", 0)) : -1;
  }

  int64_t hidden() const { return hidden_; }
  int64_t directions() const { return dirs_; }
  DType dtype() const { return dtype_; }

  // Initial state from input `index` (layout-dependent) or zeros.
  std::vector<double> optional_state(size_t index, const char* name) {
    if (!ctx_.has_input(index)) return std::vector<double>(size_t(dirs_ * batch_ * hidden_), 0.0);
    const Tensor& t = ctx_.input(index);
    expect_shape(t, name, state_dims());
    return to_doubles(t);
  }

  // Gate pre-activation parts for direction d, gate g, unit j.
  double wx(int64_t d, int64_t g, int64_t j, const double* x) const {
    const double* row = w_.data() + (((d * gates_ + g) * hidden_ + j) * input_);
    double s = 0;
    for (int64_t i = 0; i < input_; ++i) s += row[i] * x[i];
    return s;
  }
  double rh(int64_t d, int64_t g, int64_t j, const std::vector<double>& h) const {
    const double* row = r_.data() + (((d * gates_ + g) * hidden_ + j) * hidden_);
    double s = 0;
    for (int64_t i = 0; i < hidden_; ++i) s += row[i] * h[size_t(i)];
    return s;
  }
  double wb(int64_t d, int64_t g, int64_t j) const { return b_[size_t((d * 2 * gates_ + g) * hidden_ + j)]; }
  double rb(int64_t d, int64_t g, int64_t j) const { return b_[size_t((d * 2 * gates_ + gates_ + g) * hidden_ + j)]; }
  double clip(double v) const { return clip_ > 0 ? std::clamp(v, -clip_, clip_) : v; }

  // Runs the layer. step(direction, x_t, h, c) updates h and c in place;
  // `c0` is the initial cell state (LSTM) or empty. Sets outputs Y, Y_h and,
  // when c0 is non-empty, Y_c.
  using Step = std::function<void(int64_t, const double*, std::vector<double>&, std::vector<double>&)>;
  void run(const Step& step, const std::vector<double>& c0) {
    std::vector<double> y(size_t(seq_ * dirs_ * batch_ * hidden_), 0.0);
    std::vector<double> yh(size_t(dirs_ * batch_ * hidden_), 0.0), yc = yh;
    for (int64_t d = 0; d < dirs_; ++d) {
      bool backwards = reverse_only_ || d == 1;
      for (int64_t b = 0; b < batch_; ++b) {
        size_t st = state_index(d, b);
        std::vector<double> h(h0_.begin() + long(st), h0_.begin() + long(st + size_t(hidden_)));
        std::vector<double> c(size_t(hidden_), 0.0);
        if (!c0.empty()) c.assign(c0.begin() + long(st), c0.begin() + long(st + size_t(hidden_)));
        int64_t len = seq_lens_[size_t(b)];
        for (int64_t k = 0; k < len; ++k) {
          int64_t t = backwards ? len - 1 - k : k;
          size_t xi = size_t((layout_ ? b * seq_ + t : t * batch_ + b) * input_);
          step(d, &x_[xi], h, c);
          size_t yi = size_t((layout_ ? (b * seq_ + t) * dirs_ + d : (t * dirs_ + d) * batch_ + b) * hidden_);
          std::copy(h.begin(), h.end(), y.begin() + long(yi));
        }
        std::copy(h.begin(), h.end(), yh.begin() + long(st));
        std::copy(c.begin(), c.end(), yc.begin() + long(st));
      }
    }
    Dims ydims = layout_ ? Dims{batch_, seq_, dirs_, hidden_} : Dims{seq_, dirs_, batch_, hidden_};
    if (ctx_.output_wanted(0)) ctx_.set_output(0, from_doubles(dtype_, ydims, y));
    if (ctx_.output_wanted(1)) ctx_.set_output(1, from_doubles(dtype_, state_dims(), yh));
    if (!c0.empty() && ctx_.output_wanted(2)) ctx_.set_output(2, from_doubles(dtype_, state_dims(), yc));
  }

  void expect_shape(const Tensor& t, const char* name, const Dims& want) const {
    if (t.dims() != want)
      ctx_.fail(std::string(name) + " shape " + ir::dims_to_string(t.dims()) + ", expected " + ir::dims_to_string(want));
  }

 private:
  Dims state_dims() const { return layout_ ? Dims{batch_, dirs_, hidden_} : Dims{dirs_, batch_, hidden_}; }
  size_t state_index(int64_t d, int64_t b) const { return size_t((layout_ ? b * dirs_ + d : d * batch_ + b) * hidden_); }

  KernelContext& ctx_;
  int64_t gates_;
  DType dtype_;
  int64_t layout_, seq_, batch_, input_, hidden_, dirs_;
  bool reverse_only_;
  std::vector<double> x_, w_, r_, b_, h0_;
  std::vector<int64_t> seq_lens_;
  double clip_;
};

void rnn(KernelContext& ctx) {
  Recurrent L(ctx, 1);
  auto acts = recurrent_activations(ctx, {"Tanh"}, L.directions());
  int64_t H = L.hidden();
  L.run(
      [&](int64_t d, const double* x, std::vector<double>& h, std::vector<double>&) {
        std::vector<double> next(static_cast<size_t>(H));
        for (int64_t j = 0; j < H; ++j)
          next[size_t(j)] = acts[size_t(d)](L.clip(L.wx(d, 0, j, x) + L.rh(d, 0, j, h) + L.wb(d, 0, j) + L.rb(d, 0, j)));
        h = next;
      },
      {});
}

void gru(KernelContext& ctx) {
  Recurrent L(ctx, 3);
  auto acts = recurrent_activations(ctx, {"Sigmoid", "Tanh"}, L.directions());
  bool linear_before_reset = ctx.attr_int("linear_before_reset", 0) != 0;
  int64_t H = L.hidden();
  enum { Z = 0, R = 1, Hg = 2 };  // gate order in W, R and B
  L.run(
      [&](int64_t d, const double* x, std::vector<double>& h, std::vector<double>&) {
        const RecurrentActivation& f = acts[size_t(2 * d)];
        const RecurrentActivation& g = acts[size_t(2 * d + 1)];
        std::vector<double> z(static_cast<size_t>(H)), r(static_cast<size_t>(H)), rh_prod(static_cast<size_t>(H)),
            next(static_cast<size_t>(H));
        for (int64_t j = 0; j < H; ++j) {
          z[size_t(j)] = f(L.clip(L.wx(d, Z, j, x) + L.rh(d, Z, j, h) + L.wb(d, Z, j) + L.rb(d, Z, j)));
          r[size_t(j)] = f(L.clip(L.wx(d, R, j, x) + L.rh(d, R, j, h) + L.wb(d, R, j) + L.rb(d, R, j)));
          rh_prod[size_t(j)] = r[size_t(j)] * h[size_t(j)];
        }
        for (int64_t j = 0; j < H; ++j) {
          double recur = linear_before_reset ? r[size_t(j)] * (L.rh(d, Hg, j, h) + L.rb(d, Hg, j))
                                             : L.rh(d, Hg, j, rh_prod) + L.rb(d, Hg, j);
          double cand = g(L.clip(L.wx(d, Hg, j, x) + L.wb(d, Hg, j) + recur));
          next[size_t(j)] = (1 - z[size_t(j)]) * cand + z[size_t(j)] * h[size_t(j)];
        }
        h = next;
      },
      {});
}

void lstm(KernelContext& ctx) {
  Recurrent L(ctx, 4);
  auto acts = recurrent_activations(ctx, {"Sigmoid", "Tanh", "Tanh"}, L.directions());
  bool input_forget = ctx.attr_int("input_forget", 0) != 0;
  int64_t H = L.hidden();
  std::vector<double> c0 = L.optional_state(6, "initial_c");
  std::vector<double> peep(size_t(L.directions() * 3 * H), 0.0);
  if (ctx.has_input(7)) {
    L.expect_shape(ctx.input(7), "P", {L.directions(), 3 * H});
    peep = to_doubles(ctx.input(7));
  }
  enum { I = 0, O = 1, F = 2, C = 3 };  // gate order in W, R and B; P holds i, o, f
  auto pre = [&](int64_t d, int64_t g, int64_t j, const double* x, const std::vector<double>& h) {
    return L.wx(d, g, j, x) + L.rh(d, g, j, h) + L.wb(d, g, j) + L.rb(d, g, j);
  };
  L.run(
      [&](int64_t d, const double* x, std::vector<double>& h, std::vector<double>& c) {
        const RecurrentActivation& f = acts[size_t(3 * d)];
        const RecurrentActivation& g = acts[size_t(3 * d + 1)];
        const RecurrentActivation& hf = acts[size_t(3 * d + 2)];
        const double* p = peep.data() + (d * 3 * H);
        std::vector<double> next_h(static_cast<size_t>(H)), next_c(static_cast<size_t>(H));
        for (int64_t j = 0; j < H; ++j) {
          double cp = c[size_t(j)];
          double i = f(L.clip(pre(d, I, j, x, h) + p[j] * cp));
          // input_forget couples the gates so that the forget gate is 1 - input gate.
          double fg = input_forget ? 1 - i : f(L.clip(pre(d, F, j, x, h) + p[2 * H + j] * cp));
          double cand = g(L.clip(pre(d, C, j, x, h)));
          double cn = fg * cp + i * cand;
          double o = f(L.clip(pre(d, O, j, x, h) + p[H + j] * cn));
          next_c[size_t(j)] = cn;
          next_h[size_t(j)] = o * hf(cn);
        }
        h = next_h;
        c = next_c;
      },
      c0);
}

}  // namespace

void register_rnn_ops(KernelRegistry& r) {
  r.add("RNN", &rnn);
  r.add("GRU", &gru);
  r.add("LSTM", &lstm);
}

}  // namespace kiln::ref
