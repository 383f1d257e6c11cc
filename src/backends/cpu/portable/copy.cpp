// kiln_pk_strided_copy and kiln_pk_copy_rows. A strided view is first
// simplified (unit dims dropped, dims that are contiguous in the source
// merged) so that Reshape-like views become one memcpy, Slice/Concat-like
// ones a memcpy per row, and only real transposes take the element path,
// blocked in tiles so that both sides stay in cache.
#include "backends/cpu/portable/parallel.hpp"
#include "backends/cpu/portable/simd.hpp"

namespace kiln::pk {
namespace {

constexpr int kMaxRank = 8;

struct View {
  int rank;
  int64_t dims[kMaxRank];
  int64_t src[kMaxRank];  // source strides, elements
  int64_t dst[kMaxRank];  // destination strides (dense), elements
};

// Source offset of the row (index over every dim but the last) `row`.
KILN_PK_INLINE int64_t row_offset(const View& v, int64_t row, int64_t* idx) {
  int64_t off = 0;
  for (int d = v.rank - 2; d >= 0; --d) {
    idx[d] = row % v.dims[d];
    row /= v.dims[d];
    off += idx[d] * v.src[d];
  }
  return off;
}

// Moves idx to the next row, returning the change of the source offset.
KILN_PK_INLINE int64_t next_row(const View& v, int64_t* idx) {
  int64_t delta = 0;
  for (int d = v.rank - 2; d >= 0; --d) {
    if (++idx[d] < v.dims[d]) return delta + v.src[d];
    delta -= (v.dims[d] - 1) * v.src[d];
    idx[d] = 0;
  }
  return delta;
}

template <int Size>
struct Element {
  static KILN_PK_INLINE void copy(char* d, const char* s, int64_t) { __builtin_memcpy(d, s, Size); }
};
template <>
struct Element<0> {  // any other size
  static KILN_PK_INLINE void copy(char* d, const char* s, int64_t size) { memcpy(d, s, size_t(size)); }
};

// Rows of the innermost dim, one element at a time (its source stride is not 1).
template <int Size>
void copy_elements(const kiln_pk_threads* threads, const View& v, int64_t base, int64_t es, const char* src, char* dst) {
  const int64_t inner = v.dims[v.rank - 1], stride = v.src[v.rank - 1] * es;
  int64_t rows = 1;
  for (int d = 0; d + 1 < v.rank; ++d) rows *= v.dims[d];
  parallel_for_grain(threads, rows, grain_for(inner * 2), [&](int64_t begin, int64_t end) {
    int64_t idx[kMaxRank];
    int64_t off = base + row_offset(v, begin, idx);
    char* out = dst + begin * inner * es;
    for (int64_t r = begin; r < end; ++r) {
      const char* in = src + off * es;
      for (int64_t i = 0; i < inner; ++i) Element<Size>::copy(out + i * es, in + i * stride, es);
      out += inner * es;
      if (r + 1 < end) off += next_row(v, idx);
    }
  });
}

// d[j * d_stride + i] = s[i * s_stride + j] for i, j < 4.
KILN_PK_INLINE void transpose4x4(const float* s, int64_t s_stride, float* d, int64_t d_stride) {
  const Vec<4> r0 = load<4>(s), r1 = load<4>(s + s_stride), r2 = load<4>(s + 2 * s_stride), r3 = load<4>(s + 3 * s_stride);
  const Vec<4> t0 = KILN_PK_SHUFFLE4(r0, r1, 0, 4, 1, 5), t1 = KILN_PK_SHUFFLE4(r0, r1, 2, 6, 3, 7);
  const Vec<4> t2 = KILN_PK_SHUFFLE4(r2, r3, 0, 4, 1, 5), t3 = KILN_PK_SHUFFLE4(r2, r3, 2, 6, 3, 7);
  store<4>(d, KILN_PK_SHUFFLE4(t0, t2, 0, 1, 4, 5));
  store<4>(d + d_stride, KILN_PK_SHUFFLE4(t0, t2, 2, 3, 6, 7));
  store<4>(d + 2 * d_stride, KILN_PK_SHUFFLE4(t1, t3, 0, 1, 4, 5));
  store<4>(d + 3 * d_stride, KILN_PK_SHUFFLE4(t1, t3, 2, 3, 6, 7));
}

// A transpose: dim t has source stride 1 while the innermost does not.
// Tiles of kTile x kTile elements, read along t and written along the
// innermost dim.
template <int Size>
void copy_transposed(const kiln_pk_threads* threads, const View& v, int t, int64_t base, int64_t es, const char* src, char* dst) {
  constexpr int64_t kTile = 16;
  const int last = v.rank - 1;
  const int64_t inner = v.dims[last], in_stride = v.src[last];
  const int64_t td = v.dims[t], t_dst = v.dst[t];
  // The other dims, outer to inner.
  int others[kMaxRank], n_others = 0;
  int64_t outer = 1;
  for (int d = 0; d < last; ++d)
    if (d != t) others[n_others++] = d, outer *= v.dims[d];
  const int64_t t_blocks = ceil_div(td, kTile);
  parallel_for_grain(threads, outer * t_blocks, grain_for(kTile * inner * 2), [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      int64_t o = item / t_blocks;
      const int64_t j0 = (item - o * t_blocks) * kTile, jn = min64(kTile, td - j0);
      int64_t s_off = base + j0, d_off = j0 * t_dst;
      for (int q = n_others - 1; q >= 0; --q) {
        const int d = others[q];
        const int64_t i = o % v.dims[d];
        o /= v.dims[d];
        s_off += i * v.src[d];
        d_off += i * v.dst[d];
      }
      for (int64_t i0 = 0; i0 < inner; i0 += kTile) {
        const int64_t in = min64(kTile, inner - i0);
        int64_t i = i0;
        if constexpr (Size == 4) {
          // 4 x 4 blocks through registers (as floats: only bits are moved,
          // through memcpy-style loads and stores, so any 4-byte type is fine).
          for (; i + 4 <= i0 + in; i += 4) {
            const float* s = reinterpret_cast<const float*>(src) + s_off + i * in_stride;
            float* d = reinterpret_cast<float*>(dst) + d_off + i;
            int64_t j = 0;
            for (; j + 4 <= jn; j += 4) transpose4x4(s + j, in_stride, d + j * t_dst, t_dst);
            for (; j < jn; ++j)
              for (int64_t q = 0; q < 4; ++q) __builtin_memcpy(d + j * t_dst + q, s + q * in_stride + j, 4);
          }
        }
        for (; i < i0 + in; ++i) {
          const char* s = src + (s_off + i * in_stride) * es;
          char* d = dst + (d_off + i) * es;
          for (int64_t j = 0; j < jn; ++j) Element<Size>::copy(d + j * t_dst * es, s + j * es, es);
        }
      }
    }
  });
}

template <int Size>
void copy_strided(const kiln_pk_threads* threads, const View& v, int64_t base, int64_t es, const char* src, char* dst) {
  const int last = v.rank - 1;
  if (v.dims[last] >= 4)
    for (int t = last - 1; t >= 0; --t)
      if (v.src[t] == 1 && v.dims[t] >= 4) return copy_transposed<Size>(threads, v, t, base, es, src, dst);
  copy_elements<Size>(threads, v, base, es, src, dst);
}

}  // namespace
}  // namespace kiln::pk

using namespace kiln::pk;

extern "C" {

void kiln_pk_strided_copy(const kiln_pk_threads* threads, int32_t rank, const int64_t* dims, const int64_t* src_strides,
                          int64_t offset, int64_t element_size, const void* src, void* dst) {
  View v{};
  v.rank = 0;
  for (int d = 0; d < rank && d < kMaxRank; ++d) {
    if (dims[d] <= 0) return;
    if (dims[d] == 1) continue;
    // Contiguous in the source with the dim before: one dim.
    if (v.rank > 0 && v.src[v.rank - 1] == src_strides[d] * dims[d]) {
      v.dims[v.rank - 1] *= dims[d];
      v.src[v.rank - 1] = src_strides[d];
      continue;
    }
    v.dims[v.rank] = dims[d];
    v.src[v.rank] = src_strides[d];
    ++v.rank;
  }
  const int64_t es = element_size;
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  if (v.rank == 0) {
    memcpy(d, s + offset * es, size_t(es));
    return;
  }
  int64_t dense = 1;
  for (int q = v.rank - 1; q >= 0; --q) {
    v.dst[q] = dense;
    dense *= v.dims[q];
  }
  if (v.src[v.rank - 1] == 1) {
    // Rows of the innermost dim are contiguous on both sides.
    View rows_view = v;
    const int64_t inner_bytes = v.dims[v.rank - 1] * es;
    int64_t rows = 1;
    for (int q = 0; q + 1 < v.rank; ++q) rows *= v.dims[q];
    parallel_for_grain(threads, rows, grain_for(inner_bytes / 4 + 16), [&](int64_t begin, int64_t end) {
      int64_t idx[kMaxRank];
      int64_t off = offset + row_offset(rows_view, begin, idx);
      for (int64_t r = begin; r < end; ++r) {
        memcpy(d + r * inner_bytes, s + off * es, size_t(inner_bytes));
        if (r + 1 < end) off += next_row(rows_view, idx);
      }
    });
    return;
  }
  switch (es) {
    case 1: return copy_strided<1>(threads, v, offset, es, s, d);
    case 2: return copy_strided<2>(threads, v, offset, es, s, d);
    case 4: return copy_strided<4>(threads, v, offset, es, s, d);
    case 8: return copy_strided<8>(threads, v, offset, es, s, d);
    default: return copy_strided<0>(threads, v, offset, es, s, d);
  }
}

void kiln_pk_copy_rows(const kiln_pk_threads* threads, int64_t rows, int64_t row_bytes, const void* src, int64_t src_stride,
                       void* dst, int64_t dst_stride) {
  if (rows <= 0 || row_bytes <= 0) return;
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  if (src_stride == row_bytes && dst_stride == row_bytes) {
    // One block: split it in pieces of 64 KiB so large copies still spread.
    const int64_t total = rows * row_bytes, piece = int64_t(1) << 16;
    parallel_for_grain(threads, ceil_div(total, piece), 1, [&](int64_t begin, int64_t end) {
      const int64_t from = begin * piece, to = min64(end * piece, total);
      memcpy(d + from, s + from, size_t(to - from));
    });
    return;
  }
  parallel_for_grain(threads, rows, grain_for(row_bytes / 4 + 16), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) memcpy(d + r * dst_stride, s + r * src_stride, size_t(row_bytes));
  });
}

}  // extern "C"
