// kiln_pk_gather: rows of inner_bytes picked along the axis;
// kiln_pk_gather_elements: single elements. Indices are checked before
// anything is written, so a bad one is reported by position no matter how
// the copy would have been split.
#include "backends/cpu/portable/parallel.hpp"
#include "backends/cpu/portable/simd.hpp"

namespace kiln::pk {
namespace {

KILN_PK_INLINE int64_t index_at(const void* indices, bool is_64, int64_t i) {
  return is_64 ? static_cast<const int64_t*>(indices)[i] : int64_t(static_cast<const int32_t*>(indices)[i]);
}

template <int Size>
void gather_rows(const kiln_pk_threads* threads, int64_t outer, int64_t axis_dim, int64_t inner_bytes, int64_t num_indices,
                 bool is_64, const void* indices, const char* data, char* dst) {
  parallel_for_grain(threads, outer * num_indices, grain_for(inner_bytes / 4 + 8), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t o = r / num_indices, i = r - o * num_indices;
      int64_t at = index_at(indices, is_64, i);
      if (at < 0) at += axis_dim;
      const char* s = data + (o * axis_dim + at) * inner_bytes;
      if constexpr (Size > 0)
        __builtin_memcpy(dst + r * inner_bytes, s, Size);
      else
        memcpy(dst + r * inner_bytes, s, size_t(inner_bytes));
    }
  });
}

template <int Size>
void gather_elements(const kiln_pk_threads* threads, int32_t rank, const int64_t* dims, const int64_t* strides, int32_t axis,
                     int64_t axis_dim, int64_t size, bool is_64, const void* indices, const char* data, char* dst) {
  const int64_t cols = dims[rank - 1];
  int64_t rows = 1;
  for (int32_t d = 0; d + 1 < rank; ++d) rows *= dims[d];
  parallel_for_grain(threads, rows, grain_for(cols + 8), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      // The row's offset in data over every dim but the last, the axis's left out.
      int64_t base = 0, rest = r;
      for (int32_t d = rank - 2; d >= 0; --d) {
        const int64_t i = rest % dims[d];
        rest /= dims[d];
        if (d != axis) base += i * strides[d];
      }
      for (int64_t c = 0; c < cols; ++c) {
        int64_t at = index_at(indices, is_64, r * cols + c);
        if (at < 0) at += axis_dim;
        const int64_t offset = base + at * strides[axis] + (axis == rank - 1 ? 0 : c * strides[rank - 1]);
        if constexpr (Size > 0)
          __builtin_memcpy(dst + (r * cols + c) * Size, data + offset * Size, Size);
        else
          memcpy(dst + (r * cols + c) * size, data + offset * size, size_t(size));
      }
    }
  });
}

}  // namespace
}  // namespace kiln::pk

extern "C" int64_t kiln_pk_gather_elements(const kiln_pk_threads* threads, int32_t rank, const int64_t* dims,
                                           const int64_t* data_strides, int32_t axis, int64_t axis_dim, int64_t element_size,
                                           int32_t index_is_64, const void* indices, const void* data, void* dst) {
  using namespace kiln::pk;
  const bool is_64 = index_is_64 != 0;
  int64_t n = 1;
  for (int32_t d = 0; d < rank; ++d) n *= dims[d];
  for (int64_t i = 0; i < n; ++i) {
    const int64_t at = index_at(indices, is_64, i);
    if (at < -axis_dim || at >= axis_dim) return 1 + i;
  }
  if (n <= 0 || rank <= 0) return 0;
  const char* s = static_cast<const char*>(data);
  char* d = static_cast<char*>(dst);
  switch (element_size) {
    case 1: gather_elements<1>(threads, rank, dims, data_strides, axis, axis_dim, 1, is_64, indices, s, d); break;
    case 2: gather_elements<2>(threads, rank, dims, data_strides, axis, axis_dim, 2, is_64, indices, s, d); break;
    case 4: gather_elements<4>(threads, rank, dims, data_strides, axis, axis_dim, 4, is_64, indices, s, d); break;
    case 8: gather_elements<8>(threads, rank, dims, data_strides, axis, axis_dim, 8, is_64, indices, s, d); break;
    default: gather_elements<0>(threads, rank, dims, data_strides, axis, axis_dim, element_size, is_64, indices, s, d); break;
  }
  return 0;
}

extern "C" int64_t kiln_pk_gather(const kiln_pk_threads* threads, int64_t outer, int64_t axis_dim, int64_t inner_bytes,
                                  int64_t num_indices, int32_t index_is_64, const void* indices, const void* data, void* dst) {
  using namespace kiln::pk;
  const bool is_64 = index_is_64 != 0;
  for (int64_t i = 0; i < num_indices; ++i) {
    const int64_t at = index_at(indices, is_64, i);
    if (at < -axis_dim || at >= axis_dim) return 1 + i;
  }
  if (outer <= 0 || num_indices <= 0 || inner_bytes <= 0) return 0;
  const char* s = static_cast<const char*>(data);
  char* d = static_cast<char*>(dst);
  switch (inner_bytes) {
    case 4: gather_rows<4>(threads, outer, axis_dim, inner_bytes, num_indices, is_64, indices, s, d); break;
    case 8: gather_rows<8>(threads, outer, axis_dim, inner_bytes, num_indices, is_64, indices, s, d); break;
    default: gather_rows<0>(threads, outer, axis_dim, inner_bytes, num_indices, is_64, indices, s, d); break;
  }
  return 0;
}
