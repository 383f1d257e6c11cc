// Sliding-window kernels over NCHW planes (depthwise convolution, max and
// average pooling) share one engine. For each output row, the input rows it
// needs are copied into a ring of padded rows on the stack (each input row
// once per plane, in column segments when a row is too wide), the padding
// holding the operation's neutral value, so that every output is the same
// branch-free loop over the window. Outputs go up to eight vectors at a time
// (independent dependency chains), then an overlapping last vector; rows
// narrower than a vector use half vectors, down to 4 lanes, and fewer than 4
// outputs scalars. Kernel rows that fall in the top or bottom padding are
// skipped for the whole output row.
//
// An Op says what a window computes (see DepthwiseOp, MaxOp, AvgOp):
//   kWeighted                       taps are x * weight(r, t), or x alone
//   pad()                           the value the padding holds
//   init<V>(rows, o, overlap)       a vector of outputs before the taps
//   combine<V>(acc, x[, w])         one tap
//   finish<V>(rows, o, acc, from)   store lanes from `from` on
//   init_one / combine_one / finish_one, the same for one output
//   end_segment(rows, cols)         after a segment of an output row
#ifndef KILN_PORTABLE_WINDOW_HPP
#define KILN_PORTABLE_WINDOW_HPP

#include "backends/cpu/portable/parallel.hpp"
#include "backends/cpu/portable/simd.hpp"

namespace kiln::pk {

struct Window {
  int64_t h, w, oh, ow, kh, kw, sh, sw, pt, pl, dh, dw;
};

constexpr int64_t kWindowBuffer = 4096;  // floats of ring (16 KiB of stack)
constexpr int64_t kWindowMaxKh = 16;

// Input rows one output row spans: the ring's size.
KILN_PK_INLINE int64_t window_ring_rows(int64_t kh, int64_t dh) { return (kh - 1) * dh + 1; }

// Output columns per segment so that the ring fits kWindowBuffer: a segment
// of `seg` outputs reads (seg - 1) * sw + span columns, plus up to 16 past
// the end for a stride-2 vector (see load_stride). 0 when not even a few
// outputs fit: the caller needs another method for such a window.
KILN_PK_INLINE int64_t window_segment_width(int64_t kh, int64_t kw, int64_t sw, int64_t dh, int64_t dw) {
  if (kh > kWindowMaxKh || kh < 1 || kw < 1 || sw < 1 || dh < 1 || dw < 1) return 0;
  const int64_t room = kWindowBuffer / window_ring_rows(kh, dh) - ((kw - 1) * dw + 1) - 16;
  return room < 3 * sw ? 0 : room / sw + 1;
}

// The kernel rows of one output row segment, as rows of the ring.
struct WindowRows {
  const float* row[kWindowMaxKh];  // at the segment's first output
  int64_t rows, r_lo;              // kernel rows r_lo .. r_lo + rows are inside the image
  int64_t oy, c0;                  // output row, first output column of the segment
};

template <int V, int NB, class Op>
KILN_PK_INLINE void window_vectors(const Window& s, const WindowRows& d, int64_t o, int from, const Op& op) {
  Vec<V> acc[NB];
  for (int b = 0; b < NB; ++b) acc[b] = op.template init<V>(d, o + b * V, from && b == 0);
  for (int64_t r = 0; r < d.rows; ++r) {
    const float* xr = d.row[r] + o * s.sw;
    for (int64_t t = 0; t < s.kw; ++t) {
      const float* xt = xr + t * s.dw;
      if constexpr (Op::kWeighted) {
        const float wv = op.weight(d.r_lo + r, t);
        for (int b = 0; b < NB; ++b) acc[b] = op.template combine<V>(acc[b], load_stride<V>(xt + b * V * s.sw, s.sw), wv);
      } else {
        for (int b = 0; b < NB; ++b) acc[b] = op.template combine<V>(acc[b], load_stride<V>(xt + b * V * s.sw, s.sw));
      }
    }
  }
  for (int b = 0; b < NB; ++b) op.template finish<V>(d, o + b * V, acc[b], b == 0 ? from : 0);
}

template <class Op>
KILN_PK_INLINE void window_one(const Window& s, const WindowRows& d, int64_t o, const Op& op) {
  float acc = op.init_one(d, o);
  for (int64_t r = 0; r < d.rows; ++r) {
    const float* xr = d.row[r] + o * s.sw;
    for (int64_t t = 0; t < s.kw; ++t) {
      if constexpr (Op::kWeighted)
        acc = op.combine_one(acc, xr[t * s.dw], op.weight(d.r_lo + r, t));
      else
        acc = op.combine_one(acc, xr[t * s.dw]);
    }
  }
  op.finish_one(d, o, acc);
}

template <int W, class Op>
KILN_PK_INLINE void window_segment(const Window& s, const WindowRows& d, int64_t cols, const Op& op) {
  if (cols < W) {
    if constexpr (W > 4) return window_segment<W / 2>(s, d, cols, op);
    for (int64_t o = 0; o < cols; ++o) window_one(s, d, o, op);
    return;
  }
  int64_t o = 0;
  for (; o + 8 * W <= cols; o += 8 * W) window_vectors<W, 8>(s, d, o, 0, op);
  switch ((cols - o) / W) {
    case 7: window_vectors<W, 7>(s, d, o, 0, op), o += 7 * W; break;
    case 6: window_vectors<W, 6>(s, d, o, 0, op), o += 6 * W; break;
    case 5: window_vectors<W, 5>(s, d, o, 0, op), o += 5 * W; break;
    case 4: window_vectors<W, 4>(s, d, o, 0, op), o += 4 * W; break;
    case 3: window_vectors<W, 3>(s, d, o, 0, op), o += 3 * W; break;
    case 2: window_vectors<W, 2>(s, d, o, 0, op), o += 2 * W; break;
    case 1: window_vectors<W, 1>(s, d, o, 0, op), o += W; break;
    default: break;
  }
  // The last outputs as a vector that overlaps the previous one; `from`
  // keeps the outputs already finished from being read or stored again
  // (a residual may be the output itself).
  if (o < cols) window_vectors<W, 1>(s, d, cols - W, int(o - (cols - W)), op);
}

// Every output row of one plane. buf: kWindowBuffer floats, held:
// kWindowBuffer / 16 entries, both the caller's (per task).
template <int W, class Op>
void window_plane(const Window& s, const float* xp, const Op& op, float* buf, int64_t* held) {
  const int64_t span = (s.kw - 1) * s.dw + 1, overread = s.sw == 2 ? W : 0;
  const int64_t ring = window_ring_rows(s.kh, s.dh);
  const int64_t seg = min64(s.ow, window_segment_width(s.kh, s.kw, s.sw, s.dh, s.dw));
  const float pad = op.pad();
  WindowRows d;
  for (int64_t c0 = 0; c0 < s.ow; c0 += seg) {
    const int64_t cols = min64(seg, s.ow - c0);
    // Ring rows hold input columns in0 .. in0 + len: the padding is written
    // once here, the copies fill [lo, hi).
    const int64_t in0 = c0 * s.sw - s.pl, len = (cols - 1) * s.sw + span + overread;
    const int64_t lo = min64(max64(-in0, 0), len), hi = max64(min64(s.w - in0, len), lo);
    if (pad == 0.0f) {
      memset(buf, 0, sizeof(float) * size_t(ring * len));
    } else {
      for (int64_t q = 0; q < ring; ++q) {
        for (int64_t j = 0; j < lo; ++j) buf[q * len + j] = pad;
        for (int64_t j = hi; j < len; ++j) buf[q * len + j] = pad;
      }
    }
    for (int64_t q = 0; q < ring; ++q) held[q] = -1;
    d.c0 = c0;
    for (int64_t oy = 0; oy < s.oh; ++oy) {
      const int64_t iy0 = oy * s.sh - s.pt;
      // Kernel rows inside the image: 0 <= iy0 + r * dh < h.
      const int64_t r_lo = iy0 >= 0 ? 0 : min64(ceil_div(-iy0, s.dh), s.kh);
      const int64_t r_hi = max64(r_lo, s.h - 1 - iy0 < 0 ? 0 : min64((s.h - 1 - iy0) / s.dh + 1, s.kh));
      for (int64_t r = r_lo; r < r_hi; ++r) {
        const int64_t iy = iy0 + r * s.dh, slot = iy % ring;
        float* br = buf + slot * len;
        if (held[slot] != iy) {
          memcpy(br + lo, xp + iy * s.w + in0 + lo, sizeof(float) * size_t(hi - lo));
          held[slot] = iy;
        }
        d.row[r - r_lo] = br;
      }
      d.rows = r_hi - r_lo;
      d.r_lo = r_lo;
      d.oy = oy;
      window_segment<W>(s, d, cols, op);
      op.end_segment(d, cols);
    }
  }
}

// window_plane over `planes` planes in parallel; make_op(plane, x) returns
// the plane's Op and points x at its input.
template <int W, class MakeOp>
void window_planes(const kiln_pk_threads* threads, const Window& s, int64_t planes, const MakeOp& make_op) {
  parallel_for_grain(threads, planes, grain_for(s.oh * s.ow * s.kh * s.kw * 2), [&](int64_t begin, int64_t end) {
    float buf[kWindowBuffer] __attribute__((aligned(64)));
    int64_t held[kWindowBuffer / 16];
    for (int64_t p = begin; p < end; ++p) {
      const float* xp;
      const auto op = make_op(p, xp);
      window_plane<W>(s, xp, op, buf, held);
    }
  });
}

}  // namespace kiln::pk

#endif
