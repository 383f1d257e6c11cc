// kiln_pk_recurrent: ONNX RNN, GRU and LSTM. Per direction, the input
// projection of every time step is one product (kiln_pk_gemm); then per step
// the state times R (one product for all batch rows, two for a GRU whose
// reset comes before the product) and the gates, row by row. A row whose
// sequence has ended keeps its state and leaves zeros in Y.
#include <string.h>

#include "backends/cpu/portable/config.hpp"
#include "backends/cpu/portable/kernels.h"
#include "backends/cpu/portable/vmath.hpp"

#include <math.h>

namespace kiln::pk {
namespace {

struct Act {
  int64_t kind;
  float alpha, beta;
};

KILN_PK_INLINE float sigmoid(float x) { return 1.0f / (1.0f + exp_approx(-x)); }

float apply(const Act& a, float x) {
  switch (a.kind) {
    case KILN_PK_RNN_SIGMOID: return sigmoid(x);
    case KILN_PK_RNN_TANH: return vtanh<4>(splat<4>(x))[0];
    case KILN_PK_RNN_RELU: return x > 0.0f ? x : 0.0f;
    case KILN_PK_RNN_AFFINE: return a.alpha * x + a.beta;
    case KILN_PK_RNN_LEAKY_RELU: return x >= 0.0f ? x : a.alpha * x;
    case KILN_PK_RNN_THRESHOLDED_RELU: return x > a.alpha ? x : 0.0f;
    case KILN_PK_RNN_SCALED_TANH: return a.alpha * vtanh<4>(splat<4>(a.beta * x))[0];
    case KILN_PK_RNN_HARD_SIGMOID: {
      const float v = a.alpha * x + a.beta;
      return v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
    }
    case KILN_PK_RNN_ELU: return x >= 0.0f ? x : a.alpha * (exp_approx(x) - 1.0f);
    case KILN_PK_RNN_SOFTSIGN: return x / (1.0f + fabsf(x));
    case KILN_PK_RNN_SOFTPLUS: return x > 20.0f ? x : log1pf(exp_approx(x));
    default: return x;
  }
}

struct Layer {
  int32_t cell;
  int64_t seq, batch, input, hidden, directions, gates;
  int32_t reverse, batch_major, linear_before_reset, input_forget;
  float clip;
};

KILN_PK_INLINE float clipped(const Layer& l, float x) {
  if (l.clip <= 0.0f) return x;
  return x < -l.clip ? -l.clip : x > l.clip ? l.clip : x;
}

size_t floats_of(const Layer& l) {
  const int64_t gh = l.gates * l.hidden;
  return size_t(l.seq * l.batch * gh + l.batch * gh + 3 * l.batch * l.hidden);
}

size_t gemm_scratch(const Layer& l) {
  const int64_t gh = l.gates * l.hidden;
  const size_t a = kiln_pk_gemm_scratch_bytes(1, l.seq * l.batch, gh, l.input);
  const size_t b = kiln_pk_gemm_scratch_bytes(1, l.batch, gh, l.hidden);
  return a > b ? a : b;
}

}  // namespace
}  // namespace kiln::pk

extern "C" size_t kiln_pk_recurrent_scratch_bytes(int32_t cell, int64_t seq, int64_t batch, int64_t input, int64_t hidden,
                                                  int64_t directions) {
  using namespace kiln::pk;
  const Layer l{cell, seq, batch, input, hidden, directions, cell == KILN_PK_CELL_LSTM ? 4 : cell == KILN_PK_CELL_GRU ? 3 : 1,
                0,    0,   0,     0,     0.0f};
  return (floats_of(l) * sizeof(float) + 63) / 64 * 64 + gemm_scratch(l);
}

extern "C" int64_t kiln_pk_recurrent(const kiln_pk_threads* threads, int32_t cell, int64_t seq, int64_t batch, int64_t input,
                                     int64_t hidden, int64_t directions, int32_t reverse, int32_t batch_major,
                                     int32_t linear_before_reset, int32_t input_forget, float clip, const int64_t* activations,
                                     const float* x, const float* w, const float* r, const float* b, const void* sequence_lens,
                                     int32_t lens_int64, const float* initial_h, const float* initial_c, const float* p, float* y,
                                     float* y_h, float* y_c, void* scratch) {
  using namespace kiln::pk;
  const int64_t G = cell == KILN_PK_CELL_LSTM ? 4 : cell == KILN_PK_CELL_GRU ? 3 : 1;
  const Layer l{cell, seq, batch, input, hidden, directions, G, reverse, batch_major, linear_before_reset, input_forget, clip};
  const int64_t H = hidden, GH = G * H, B = batch, T = seq, D = directions;
  auto length = [&](int64_t row) {
    return !sequence_lens ? T
           : lens_int64   ? static_cast<const int64_t*>(sequence_lens)[row]
                          : static_cast<const int32_t*>(sequence_lens)[row];
  };
  for (int64_t row = 0; row < B; ++row)
    if (length(row) < 0 || length(row) > T) return row + 1;
  float* proj = static_cast<float*>(scratch);  // [T * B, G * H], rows in X's order
  float* gates = proj + T * B * GH;            // [B, G * H]
  float* h = gates + B * GH;                   // [B, H]
  float* c = h + B * H;                        // [B, H]
  float* rh = c + B * H;                       // [B, H]: a GRU's r * h
  void* work = static_cast<char*>(scratch) + (floats_of(l) * sizeof(float) + 63) / 64 * 64;
  if (y) memset(y, 0, size_t(T * D * B * H) * sizeof(float));
  const int64_t per_direction = cell == KILN_PK_CELL_LSTM ? 3 : cell == KILN_PK_CELL_GRU ? 2 : 1;
  for (int64_t d = 0; d < D; ++d) {
    Act act[3] = {};
    for (int64_t k = 0; k < per_direction; ++k) {
      const int64_t* a = activations + 3 * (d * per_direction + k);
      const uint32_t alpha = uint32_t(a[1]), beta = uint32_t(a[2]);
      act[k].kind = a[0];
      memcpy(&act[k].alpha, &alpha, sizeof alpha);
      memcpy(&act[k].beta, &beta, sizeof beta);
    }
    const bool backwards = reverse || d == 1;
    const float* wd = w + d * GH * input;
    const float* rd = r + d * GH * H;
    const float* wb = b ? b + d * 2 * GH : nullptr;
    const float* rb = b ? wb + GH : nullptr;
    const float* pd = p ? p + d * 3 * H : nullptr;
    kiln_pk_gemm(threads, 1, T * B, GH, input, x, input, 0, 0, wd, input, 0, 1, proj, GH, 0, 1.0f, nullptr, 0, 0, 0.0f, nullptr,
                 KILN_PK_ACT_NONE, 0.0f, 0.0f, work);
    // The states, from [D, B, H] (or [B, D, H] batch-major) or zeros.
    for (int64_t row = 0; row < B; ++row) {
      const int64_t at = (batch_major ? row * D + d : d * B + row) * H;
      for (int64_t j = 0; j < H; ++j) {
        h[row * H + j] = initial_h ? initial_h[at + j] : 0.0f;
        c[row * H + j] = initial_c ? initial_c[at + j] : 0.0f;
      }
    }
    const bool reset_first = cell == KILN_PK_CELL_GRU && !linear_before_reset;
    for (int64_t s = 0; s < T; ++s) {
      kiln_pk_gemm(threads, 1, B, reset_first ? 2 * H : GH, H, h, H, 0, 0, rd, H, 0, 1, gates, GH, 0, 1.0f, nullptr, 0, 0, 0.0f,
                   nullptr, KILN_PK_ACT_NONE, 0.0f, 0.0f, work);
      auto xrow = [&](int64_t row) {
        const int64_t t = backwards ? length(row) - 1 - s : s;
        return proj + (batch_major ? row * T + t : t * B + row) * GH;
      };
      auto bias = [&](const float* v, int64_t k) { return v ? v[k] : 0.0f; };
      if (reset_first) {
        // The reset gate first: the hidden gate's product reads r * h.
        for (int64_t row = 0; row < B; ++row) {
          if (s >= length(row)) continue;
          const float* xr = xrow(row);
          for (int64_t j = 0; j < H; ++j) {
            const int64_t k = H + j;
            const float rr = apply(act[0], clipped(l, xr[k] + gates[row * GH + k] + bias(wb, k) + bias(rb, k)));
            rh[row * H + j] = rr * h[row * H + j];
          }
        }
        kiln_pk_gemm(threads, 1, B, H, H, rh, H, 0, 0, rd + 2 * H * H, H, 0, 1, gates + 2 * H, GH, 0, 1.0f, nullptr, 0, 0, 0.0f,
                     nullptr, KILN_PK_ACT_NONE, 0.0f, 0.0f, work);
      }
      for (int64_t row = 0; row < B; ++row) {
        const int64_t len = length(row);
        if (s >= len) continue;
        const int64_t t = backwards ? len - 1 - s : s;
        const float* xr = xrow(row);
        const float* gr = gates + row * GH;
        float* hr = h + row * H;
        float* cr = c + row * H;
        auto pre = [&](int64_t k) { return xr[k] + gr[k] + bias(wb, k) + bias(rb, k); };
        for (int64_t j = 0; j < H; ++j) {
          if (cell == KILN_PK_CELL_RNN) {
            hr[j] = apply(act[0], clipped(l, pre(j)));
          } else if (cell == KILN_PK_CELL_GRU) {
            const float z = apply(act[0], clipped(l, pre(j)));
            const int64_t k = 2 * H + j;
            float hh;
            if (linear_before_reset) {
              const float rr = apply(act[0], clipped(l, pre(H + j)));
              hh = apply(act[1], clipped(l, xr[k] + bias(wb, k) + rr * (gr[k] + bias(rb, k))));
            } else {
              hh = apply(act[1], clipped(l, xr[k] + bias(wb, k) + gr[k] + bias(rb, k)));
            }
            hr[j] = (1.0f - z) * hh + z * hr[j];
          } else {  // LSTM: gates i, o, f, c; peepholes i, o, f
            const float cp = cr[j];
            const float i = apply(act[0], clipped(l, pre(j) + (pd ? pd[j] * cp : 0.0f)));
            const float f =
                input_forget ? 1.0f - i : apply(act[0], clipped(l, pre(2 * H + j) + (pd ? pd[2 * H + j] * cp : 0.0f)));
            const float g = apply(act[1], clipped(l, pre(3 * H + j)));
            const float cn = f * cp + i * g;
            const float o = apply(act[0], clipped(l, pre(H + j) + (pd ? pd[H + j] * cn : 0.0f)));
            cr[j] = cn;
            hr[j] = o * apply(act[2], cn);
          }
        }
        if (y) memcpy(y + (batch_major ? (row * T + t) * D + d : (t * D + d) * B + row) * H, hr, size_t(H) * sizeof(float));
      }
    }
    for (int64_t row = 0; row < B; ++row) {
      const int64_t at = (batch_major ? row * D + d : d * B + row) * H;
      if (y_h) memcpy(y_h + at, h + row * H, size_t(H) * sizeof(float));
      if (y_c) memcpy(y_c + at, c + row * H, size_t(H) * sizeof(float));
    }
  }
  return 0;
}
