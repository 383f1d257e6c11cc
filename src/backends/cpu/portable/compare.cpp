// kiln_pk_compare: comparisons and logic with broadcasting. These read
// conditions and masks (a sample rate against a constant, a score against a
// threshold), small next to the layers around them: one pass in order,
// the innermost dim as a strided loop the optimiser specialises on its
// constant strides.
#include "backends/cpu/portable/kernels.h"

namespace {

template <int32_t Op, class T>
inline uint8_t apply(T a, T b) {
  if constexpr (Op == KILN_PK_COMPARE_EQUAL) return a == b;
  if constexpr (Op == KILN_PK_COMPARE_LESS) return a < b;
  if constexpr (Op == KILN_PK_COMPARE_LESS_EQUAL) return a <= b;
  if constexpr (Op == KILN_PK_COMPARE_GREATER) return a > b;
  if constexpr (Op == KILN_PK_COMPARE_GREATER_EQUAL) return a >= b;
  if constexpr (Op == KILN_PK_COMPARE_AND) return (a != 0) & (b != 0);
  if constexpr (Op == KILN_PK_COMPARE_OR) return (a != 0) | (b != 0);
  return (a != 0) ^ (b != 0);
}

template <int32_t Op, class T>
void compare(int64_t rank, const int64_t* dims, const int64_t* as, const int64_t* bs, const T* a, const T* b, uint8_t* out) {
  if (rank == 0) {
    *out = apply<Op>(*a, *b);
    return;
  }
  int64_t index[KILN_PK_COMPARE_MAX_RANK] = {};
  int64_t total = 1;
  for (int64_t d = 0; d < rank; ++d) total *= dims[d];
  const int64_t inner = dims[rank - 1], ai = as[rank - 1], bi = bs[rank - 1];
  for (int64_t done = 0; done < total; done += inner) {
    int64_t ao = 0, bo = 0;
    for (int64_t d = 0; d + 1 < rank; ++d) {
      ao += index[d] * as[d];
      bo += index[d] * bs[d];
    }
    for (int64_t i = 0; i < inner; ++i) out[done + i] = apply<Op>(a[ao + i * ai], b[bo + i * bi]);
    for (int64_t d = rank - 2; d >= 0; --d) {
      if (++index[d] < dims[d]) break;
      index[d] = 0;
    }
  }
}

template <class T>
void compare_op(int32_t op, int64_t rank, const int64_t* dims, const int64_t* as, const int64_t* bs, const void* a, const void* b,
                uint8_t* out) {
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  switch (op) {
    case KILN_PK_COMPARE_EQUAL: return compare<KILN_PK_COMPARE_EQUAL>(rank, dims, as, bs, x, y, out);
    case KILN_PK_COMPARE_LESS: return compare<KILN_PK_COMPARE_LESS>(rank, dims, as, bs, x, y, out);
    case KILN_PK_COMPARE_LESS_EQUAL: return compare<KILN_PK_COMPARE_LESS_EQUAL>(rank, dims, as, bs, x, y, out);
    case KILN_PK_COMPARE_GREATER: return compare<KILN_PK_COMPARE_GREATER>(rank, dims, as, bs, x, y, out);
    case KILN_PK_COMPARE_GREATER_EQUAL: return compare<KILN_PK_COMPARE_GREATER_EQUAL>(rank, dims, as, bs, x, y, out);
    case KILN_PK_COMPARE_AND: return compare<KILN_PK_COMPARE_AND>(rank, dims, as, bs, x, y, out);
    case KILN_PK_COMPARE_OR: return compare<KILN_PK_COMPARE_OR>(rank, dims, as, bs, x, y, out);
    case KILN_PK_COMPARE_XOR: return compare<KILN_PK_COMPARE_XOR>(rank, dims, as, bs, x, y, out);
    default: return;
  }
}

}  // namespace

extern "C" void kiln_pk_compare(const kiln_pk_threads* threads, int32_t op, int32_t element, int64_t rank, const int64_t* dims,
                                const int64_t* a_strides, const int64_t* b_strides, const void* a, const void* b, uint8_t* out) {
  (void)threads;
  if (rank < 0 || rank > KILN_PK_COMPARE_MAX_RANK) return;
  for (int64_t d = 0; d < rank; ++d)
    if (dims[d] <= 0) return;
  switch (element) {
    case KILN_PK_ELEMENT_F32: return compare_op<float>(op, rank, dims, a_strides, b_strides, a, b, out);
    case KILN_PK_ELEMENT_I64: return compare_op<int64_t>(op, rank, dims, a_strides, b_strides, a, b, out);
    case KILN_PK_ELEMENT_I32: return compare_op<int32_t>(op, rank, dims, a_strides, b_strides, a, b, out);
    case KILN_PK_ELEMENT_U8: return compare_op<uint8_t>(op, rank, dims, a_strides, b_strides, a, b, out);
    default: return;
  }
}
