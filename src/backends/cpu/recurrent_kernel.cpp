#include "backends/cpu/recurrent_kernel.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <utility>

#include <nlohmann/json.hpp>

#include "backends/cpu/omp_team.hpp"
#include "backends/cpu/onednn_kernel.hpp"
#include "backends/cpu/portable/simd.hpp"
#include "backends/cpu/portable/vmath.hpp"
#include "backends/cpu/thread_budget.hpp"
#include "backends/cpu/vector_clones.hpp"
#include "runtime/ir/error.hpp"
#include "runtime/ir/serialize.hpp"

namespace kiln::cpu {
namespace {

using ir::json_field;

using Layer = RecurrentLayer;
using Act = RecurrentLayer::Act;
using Cell = RecurrentLayer::Cell;
constexpr int kLanes = 16;
using V = pk::Vec<kLanes>;

const std::pair<const char*, Act> kActivations[] = {
    {"sigmoid", Act::Sigmoid},
    {"tanh", Act::Tanh},
    {"relu", Act::Relu},
    {"affine", Act::Affine},
    {"leakyrelu", Act::LeakyRelu},
    {"thresholdedrelu", Act::ThresholdedRelu},
    {"scaledtanh", Act::ScaledTanh},
    {"hardsigmoid", Act::HardSigmoid},
    {"elu", Act::Elu},
    {"softsign", Act::Softsign},
    {"softplus", Act::Softplus},
};

const char* activation_name(Act a) {
  for (const auto& [name, act] : kActivations)
    if (act == a) return name;
  return "?";
}

KILN_PK_INLINE V apply(V x, const Layer::Activation& a) {
  const V zero{};
  switch (a.act) {
    case Act::Sigmoid: return 1.0f / (1.0f + pk::vexp<kLanes>(-x));
    case Act::Tanh: return pk::vtanh<kLanes>(x);
    case Act::Relu: return x > 0.0f ? x : zero;
    case Act::Affine: return a.alpha * x + a.beta;
    case Act::LeakyRelu: return x >= 0.0f ? x : a.alpha * x;
    case Act::ThresholdedRelu: return x > a.alpha ? x : zero;
    case Act::ScaledTanh: return a.alpha * pk::vtanh<kLanes>(a.beta * x);
    case Act::HardSigmoid: {
      const V y = a.alpha * x + a.beta;
      return y < 0.0f ? zero : y > 1.0f ? zero + 1.0f : y;
    }
    case Act::Elu: return x >= 0.0f ? x : a.alpha * (pk::vexp<kLanes>(x) - 1.0f);
    case Act::Softsign: return x / (1.0f + (x < 0.0f ? -x : x));
    case Act::Softplus: {
      V e = pk::vexp<kLanes>(x < 0.0f ? x : -x);  // exp(-|x|)
      for (int i = 0; i < kLanes; ++i) e[i] = log1pf(e[i]);
      return e + (x > 0.0f ? x : zero);
    }
  }
  return x;
}

// x[0, n) = act(clip(x)), clip only when > 0. The tail goes through a padded
// vector, so a value does not depend on where it falls.
KILN_PK_INLINE V clip_apply(V v, const Layer::Activation& a, float clip) {
  if (clip > 0) v = v < -clip ? pk::splat<kLanes>(-clip) : v > clip ? pk::splat<kLanes>(clip) : v;
  return apply(v, a);
}

KILN_PK_INLINE void activate(float* x, int64_t n, const Layer::Activation& a, float clip) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) pk::store<kLanes>(x + i, clip_apply(pk::load<kLanes>(x + i), a, clip));
  if (i < n) {
    float tail[kLanes] = {};
    std::memcpy(tail, x + i, size_t(n - i) * sizeof(float));
    pk::store<kLanes>(tail, clip_apply(pk::load<kLanes>(tail), a, clip));
    std::memcpy(x + i, tail, size_t(n - i) * sizeof(float));
  }
}

// One LSTM row: gates g (i, o, f, c: input projections and biases) plus
// pr (the state's product with R), peepholes p (i, o, f), the cell state c
// updated in place, the new hidden state into h. tmp: 4 * H floats.
KILN_VECTOR_CLONES void lstm_row(int64_t H, const Layer::Activation* act, float clip, bool input_forget,
                                 const float* __restrict g, const float* __restrict pr, const float* __restrict p,
                                 float* __restrict c, float* __restrict h, float* __restrict tmp) {
  float *ti = tmp, *tf = tmp + H, *tc = tmp + 2 * H, *to = tmp + 3 * H;
  for (int64_t j = 0; j < H; ++j) ti[j] = g[j] + pr[j] + p[j] * c[j];
  activate(ti, H, act[0], clip);
  if (input_forget) {
    for (int64_t j = 0; j < H; ++j) tf[j] = 1.0f - ti[j];
  } else {
    for (int64_t j = 0; j < H; ++j) tf[j] = g[2 * H + j] + pr[2 * H + j] + p[2 * H + j] * c[j];
    activate(tf, H, act[0], clip);
  }
  for (int64_t j = 0; j < H; ++j) tc[j] = g[3 * H + j] + pr[3 * H + j];
  activate(tc, H, act[1], clip);
  for (int64_t j = 0; j < H; ++j) c[j] = tf[j] * c[j] + ti[j] * tc[j];
  for (int64_t j = 0; j < H; ++j) to[j] = g[H + j] + pr[H + j] + p[H + j] * c[j];
  activate(to, H, act[0], clip);
  std::memcpy(tf, c, size_t(H) * sizeof(float));
  activate(tf, H, act[2], 0);
  for (int64_t j = 0; j < H; ++j) h[j] = to[j] * tf[j];
}

KILN_VECTOR_CLONES void rnn_row(int64_t H, const Layer::Activation* act, float clip, const float* __restrict g,
                                const float* __restrict pr, float* __restrict h) {
  for (int64_t j = 0; j < H; ++j) h[j] = g[j] + pr[j];
  activate(h, H, act[0], clip);
}

// GRU's update and reset gates (z, r) into zr; with rh, also r * h into rh
// (the hidden gate's operand when the reset comes before its product).
KILN_VECTOR_CLONES void gru_gates_row(int64_t H, const Layer::Activation* act, float clip, const float* __restrict g,
                                      const float* __restrict pr, const float* __restrict h, float* __restrict zr,
                                      float* __restrict rh) {
  for (int64_t j = 0; j < 2 * H; ++j) zr[j] = g[j] + pr[j];
  activate(zr, 2 * H, act[0], clip);
  if (rh)
    for (int64_t j = 0; j < H; ++j) rh[j] = zr[H + j] * h[j];
}

// GRU's hidden gate and new state: g + pr, or with linear_before_reset
// (rbh, R's bias of that gate, given) g + r * (pr + rbh).
KILN_VECTOR_CLONES void gru_update_row(int64_t H, const Layer::Activation* act, float clip, const float* __restrict g,
                                       const float* __restrict pr, const float* __restrict rbh, const float* __restrict zr,
                                       float* __restrict cand, float* __restrict h) {
  const float* z = zr;
  const float* r = zr + H;
  if (rbh) {
    for (int64_t j = 0; j < H; ++j) cand[j] = g[j] + r[j] * (pr[j] + rbh[j]);
  } else {
    for (int64_t j = 0; j < H; ++j) cand[j] = g[j] + pr[j];
  }
  activate(cand, H, act[1], clip);
  for (int64_t j = 0; j < H; ++j) h[j] = (1.0f - z[j]) * cand[j] + z[j] * h[j];
}

struct Operands {
  const float *x, *rbh, *h0, *c0, *p;
  const void* lens;
  float *y, *yh, *yc;
  char* scratch;
};

class Runner {
 public:
  Runner(const Layer& l, const Operands& o, const RecurrentProduct& projection, const std::vector<RecurrentProduct>& steps)
      : l_(l), o_(o), projection_(projection), steps_(steps) {
    H_ = l.hidden;
    G_ = l.gates();
    n_ = l.directions * G_ * H_;
    gates_ = reinterpret_cast<float*>(o.scratch);
    const int64_t DB = l.directions * l.batch;
    h_ = gates_ + l.seq * l.batch * n_;
    c_ = h_ + DB * H_;
    prod_ = c_ + DB * H_;
    rh_ = prod_ + DB * G_ * H_;
    tmp_ = rh_ + DB * H_;
  }

  // The gates' input projections and biases, every step and direction at once.
  void project() const { product(projection_, o_.x, gates_); }

  int64_t length(int64_t b) const {
    return l_.sequence_lens_int64 ? static_cast<const int64_t*>(o_.lens)[b] : static_cast<const int32_t*>(o_.lens)[b];
  }

  // Batch rows [b0, b1) of direction d, `len` steps each, with the products
  // from steps_[first].
  void recur(int64_t d, int64_t b0, int64_t b1, int64_t len, size_t first) const {
    const int64_t rows = b1 - b0, T = l_.seq, B = l_.batch, D = l_.directions;
    const int64_t at = d * B + b0;  // the rows' place in the state arrays
    float *h = h_ + at * H_, *c = c_ + at * H_, *prod = prod_ + at * G_ * H_, *rh = rh_ + at * H_, *tmp = tmp_ + at * 4 * H_;
    for (int64_t b = b0; b < b1; ++b) {
      std::memcpy(h + (b - b0) * H_, o_.h0 + state_index(d, b), size_t(H_) * sizeof(float));
      if (o_.c0) std::memcpy(c + (b - b0) * H_, o_.c0 + state_index(d, b), size_t(H_) * sizeof(float));
    }
    const Layer::Activation* act = &l_.activations[size_t(d * l_.activations_per_direction())];
    const float* rbh = l_.linear_before_reset ? o_.rbh + d * H_ : nullptr;
    const int64_t ldg = l_.batch_major ? T * n_ : n_;  // between consecutive batch rows
    const bool backwards = l_.reverse || d == 1;
    for (int64_t k = 0; k < len; ++k) {
      const int64_t t = backwards ? len - 1 - k : k;
      const float* g = gates_ + row(t, b0) * n_ + d * G_ * H_;
      product(steps_[first], h, prod);
      switch (l_.cell) {
        case Cell::Lstm:
          for (int64_t i = 0; i < rows; ++i)
            lstm_row(H_, act, l_.clip, l_.input_forget, g + i * ldg, prod + i * 4 * H_, o_.p + d * 3 * H_, c + i * H_, h + i * H_,
                     tmp + i * 4 * H_);
          break;
        case Cell::Rnn:
          for (int64_t i = 0; i < rows; ++i) rnn_row(H_, act, l_.clip, g + i * ldg, prod + i * H_, h + i * H_);
          break;
        case Cell::Gru:
          if (l_.linear_before_reset) {
            for (int64_t i = 0; i < rows; ++i) {
              float* zr = tmp + i * 4 * H_;
              gru_gates_row(H_, act, l_.clip, g + i * ldg, prod + i * 3 * H_, nullptr, zr, nullptr);
              gru_update_row(H_, act, l_.clip, g + i * ldg + 2 * H_, prod + i * 3 * H_ + 2 * H_, rbh, zr, zr + 2 * H_,
                             h + i * H_);
            }
          } else {
            for (int64_t i = 0; i < rows; ++i)
              gru_gates_row(H_, act, l_.clip, g + i * ldg, prod + i * 2 * H_, h + i * H_, tmp + i * 4 * H_, rh + i * H_);
            product(steps_[first + 1], rh, prod);
            for (int64_t i = 0; i < rows; ++i) {
              float* zr = tmp + i * 4 * H_;
              gru_update_row(H_, act, l_.clip, g + i * ldg + 2 * H_, prod + i * H_, nullptr, zr, zr + 2 * H_, h + i * H_);
            }
          }
          break;
      }
      if (o_.y)
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t y = l_.batch_major ? ((b * T + t) * D + d) * H_ : ((t * D + d) * B + b) * H_;
          std::memcpy(o_.y + y, h + (b - b0) * H_, size_t(H_) * sizeof(float));
        }
    }
    for (int64_t b = b0; b < b1; ++b) {
      if (o_.yh) std::memcpy(o_.yh + state_index(d, b), h + (b - b0) * H_, size_t(H_) * sizeof(float));
      if (o_.yc) std::memcpy(o_.yc + state_index(d, b), c + (b - b0) * H_, size_t(H_) * sizeof(float));
    }
  }

 private:
  void product(const RecurrentProduct& p, const float* src, float* dst) const {
    void* args[3] = {const_cast<float*>(src), dst, p.scratchpad >= 0 ? o_.scratch + p.scratchpad : nullptr};
    p.kernel->run(args);
  }
  int64_t row(int64_t t, int64_t b) const { return l_.batch_major ? b * l_.seq + t : t * l_.batch + b; }
  int64_t state_index(int64_t d, int64_t b) const { return (l_.batch_major ? b * l_.directions + d : d * l_.batch + b) * H_; }

  const Layer& l_;
  const Operands& o_;
  const RecurrentProduct& projection_;
  const std::vector<RecurrentProduct>& steps_;
  int64_t H_, G_, n_;
  float *gates_, *h_, *c_, *prod_, *rh_, *tmp_;
};

}  // namespace

int64_t RecurrentKernel::products_per_item(const RecurrentLayer& l) {
  return l.cell == Cell::Gru && !l.linear_before_reset ? 2 : 1;
}

int64_t RecurrentKernel::state_floats(const RecurrentLayer& l) {
  const int64_t H = l.hidden, G = l.gates();
  return l.seq * l.batch * l.directions * G * H + l.directions * l.batch * (H + H + G * H + H + 4 * H);
}

bool RecurrentKernel::activation_named(const std::string& name, RecurrentLayer::Act& act) {
  for (const auto& [n, a] : kActivations)
    if (name == n) {
      act = a;
      return true;
    }
  return false;
}

RecurrentKernel::RecurrentKernel(std::string node, RecurrentLayer layer, RecurrentProduct projection,
                                 std::vector<RecurrentProduct> steps)
    : node_(std::move(node)), l_(std::move(layer)), projection_(std::move(projection)), steps_(std::move(steps)) {
  const int64_t items = l_.directions * l_.chunks + (l_.sequence_lens ? l_.directions : 0);
  if (l_.seq < 1 || l_.batch < 1 || l_.input < 1 || l_.hidden < 1 || l_.directions < 1 || l_.directions > 2 || l_.chunks < 1 ||
      l_.chunks > l_.batch || int64_t(l_.activations.size()) != l_.activations_per_direction() * l_.directions ||
      !projection_.kernel || int64_t(steps_.size()) != items * products_per_item(l_))
    ir::fail(ir::ErrorKind::InvalidModel, node_ + ": a recurrent layer's sizes, activations or products are inconsistent");
  for (const auto& s : steps_)
    if (!s.kernel) ir::fail(ir::ErrorKind::InvalidModel, node_ + ": a recurrent layer's product is missing");
}

void RecurrentKernel::run(void* const* args) const {
  Operands o{};
  size_t i = 0;
  o.x = static_cast<const float*>(args[i++]);
  o.rbh = static_cast<const float*>(args[i++]);
  o.lens = args[i++];
  o.h0 = static_cast<const float*>(args[i++]);
  if (l_.cell == Cell::Lstm) {
    o.c0 = static_cast<const float*>(args[i++]);
    o.p = static_cast<const float*>(args[i++]);
  }
  if (l_.y) o.y = static_cast<float*>(args[i++]);
  if (l_.y_h) o.yh = static_cast<float*>(args[i++]);
  if (l_.y_c) o.yc = static_cast<float*>(args[i++]);
  o.scratch = static_cast<char*>(args[i]);

  const Runner runner(l_, o, projection_, steps_);
  // Checked here: a worker of the parallel loop below may not throw.
  bool uniform = true;
  for (int64_t b = 0; b < l_.batch; ++b) {
    const int64_t v = runner.length(b);
    if (v < 0 || v > l_.seq)
      ir::fail(ir::ErrorKind::InvalidArgument, node_ + ": sequence_lens[" + std::to_string(b) + "] is " + std::to_string(v) +
                                                   ", expected a value in [0, " + std::to_string(l_.seq) + "]");
    uniform = uniform && v == runner.length(0);
  }
  if (!uniform && !l_.sequence_lens)
    ir::fail(ir::ErrorKind::Internal, node_ + ": rows of different lengths in a layer compiled without sequence_lens");
  // Steps past a row's length leave zeros in Y.
  if (o.y && (!uniform || runner.length(0) != l_.seq))
    std::memset(o.y, 0, size_t(l_.seq * l_.directions * l_.batch * l_.hidden) * sizeof(float));

  runner.project();
  // Rows of one length: each direction's rows in `chunks` groups at once.
  // Rows of different lengths: one by one, each direction on its own.
  struct Task {
    const Runner& runner;
    const RecurrentLayer& l;
    bool uniform;
    int64_t per_item;
    std::atomic<bool> failed{false};
    std::string error;
  } task{runner, l_, uniform, products_per_item(l_), {false}, {}};
  const int64_t items = l_.directions * (uniform ? l_.chunks : 1);
  team_threads()->parallel_for(
      nullptr, items,
      [](void* p, int64_t begin, int64_t end) {
        Task& t = *static_cast<Task*>(p);
        OmpThreads one(1);  // the products were made for one thread
        try {
          for (int64_t item = begin; item < end; ++item) {
            if (t.uniform) {
              const int64_t d = item / t.l.chunks, part = item % t.l.chunks;
              const int64_t b0 = part * t.l.batch / t.l.chunks, b1 = (part + 1) * t.l.batch / t.l.chunks;
              t.runner.recur(d, b0, b1, t.runner.length(b0), size_t(item * t.per_item));
            } else {
              const size_t first = size_t((t.l.directions * t.l.chunks + item) * t.per_item);
              for (int64_t b = 0; b < t.l.batch; ++b) t.runner.recur(item, b, b + 1, t.runner.length(b), first);
            }
          }
        } catch (const std::exception& e) {
          if (!t.failed.exchange(true)) t.error = e.what();
        }
      },
      &task);
  if (task.failed) ir::fail(ir::ErrorKind::Internal, node_ + ": " + task.error);
}

namespace {

nlohmann::json save_product(const RecurrentProduct& p, WeightsWriter& weights, BlockWriter& blocks) {
  nlohmann::json j;
  p.kernel->save(j["kernel"], weights, blocks);
  j["scratchpad"] = p.scratchpad;
  return j;
}

RecurrentProduct load_product(const nlohmann::json& j, const WeightsReader& weights, const BlockReader& blocks,
                              const std::string& what) {
  return {OneDnnKernel::load(json_field<nlohmann::json>(j, "kernel", what), weights, blocks, what),
          json_field<int64_t>(j, "scratchpad", what)};
}

}  // namespace

void RecurrentKernel::save(nlohmann::json& out, WeightsWriter& weights, BlockWriter& blocks) const {
  nlohmann::json acts = nlohmann::json::array();
  for (const auto& a : l_.activations) acts.push_back({activation_name(a.act), a.alpha, a.beta});
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& s : steps_) steps.push_back(save_product(s, weights, blocks));
  out = {{"kind", "recurrent"},
         {"node", node_},
         {"cell", int(l_.cell)},
         {"sizes", {l_.seq, l_.batch, l_.input, l_.hidden, l_.directions, l_.chunks}},
         {"flags",
          {l_.reverse, l_.batch_major, l_.linear_before_reset, l_.input_forget, l_.sequence_lens, l_.sequence_lens_int64, l_.y,
           l_.y_h, l_.y_c}},
         {"clip", l_.clip},
         {"activations", acts},
         {"projection", save_product(projection_, weights, blocks)},
         {"steps", steps}};
}

std::unique_ptr<Kernel> RecurrentKernel::load(const nlohmann::json& j, const WeightsReader& weights, const BlockReader& blocks,
                                              const std::string& what) {
  RecurrentLayer l;
  const int cell = json_field<int>(j, "cell", what);
  if (cell < int(Cell::Rnn) || cell > int(Cell::Lstm)) ir::fail(ir::ErrorKind::InvalidModel, what + ": unknown recurrent cell");
  l.cell = Cell(cell);
  const auto sizes = json_field<std::vector<int64_t>>(j, "sizes", what);
  const auto flags = json_field<std::vector<bool>>(j, "flags", what);
  if (sizes.size() != 6 || flags.size() != 9)
    ir::fail(ir::ErrorKind::InvalidModel, what + ": a recurrent kernel's fields are incomplete");
  l.seq = sizes[0], l.batch = sizes[1], l.input = sizes[2], l.hidden = sizes[3], l.directions = sizes[4], l.chunks = sizes[5];
  l.reverse = flags[0], l.batch_major = flags[1], l.linear_before_reset = flags[2], l.input_forget = flags[3];
  l.sequence_lens = flags[4], l.sequence_lens_int64 = flags[5], l.y = flags[6], l.y_h = flags[7], l.y_c = flags[8];
  l.clip = json_field<float>(j, "clip", what);
  for (const auto& a : json_field<nlohmann::json>(j, "activations", what)) {
    RecurrentLayer::Activation act;
    if (!a.is_array() || a.size() != 3 || !a[0].is_string() || !activation_named(a[0].get<std::string>(), act.act))
      ir::fail(ir::ErrorKind::InvalidModel, what + ": a recurrent kernel names an unknown activation");
    act.alpha = a[1].get<float>();
    act.beta = a[2].get<float>();
    l.activations.push_back(act);
  }
  RecurrentProduct projection = load_product(json_field<nlohmann::json>(j, "projection", what), weights, blocks, what);
  std::vector<RecurrentProduct> steps;
  {
    OmpThreads one(1);  // as the lowering made them
    for (const auto& s : json_field<nlohmann::json>(j, "steps", what)) steps.push_back(load_product(s, weights, blocks, what));
  }
  return std::make_unique<RecurrentKernel>(json_field<std::string>(j, "node", what), std::move(l), std::move(projection),
                                           std::move(steps));
}

}  // namespace kiln::cpu
