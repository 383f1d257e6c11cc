// kiln_pk_trilu: each row's kept run of elements copied, the rest zeroed.
#include "backends/cpu/portable/parallel.hpp"

extern "C" void kiln_pk_trilu(const kiln_pk_threads* threads, int64_t matrices, int64_t rows, int64_t cols, int64_t elem_bytes,
                              int32_t upper, const int64_t* k, const void* x, void* y) {
  using namespace kiln::pk;
  const int64_t diagonal = k ? *k : 0;
  const int64_t row_bytes = cols * elem_bytes;
  const char* src = static_cast<const char*>(x);
  char* dst = static_cast<char*>(y);
  parallel_for_grain(threads, matrices * rows, grain_for(cols + 8), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      // Upper keeps columns j >= i + k, lower j <= i + k: [first, last).
      const int64_t i = r % rows, edge = i + diagonal;
      const int64_t first = upper ? (edge < 0 ? 0 : edge > cols ? cols : edge) : 0;
      const int64_t last = upper ? cols : (edge + 1 < 0 ? 0 : edge + 1 > cols ? cols : edge + 1);
      char* out = dst + r * row_bytes;
      const char* in = src + r * row_bytes;
      memset(out, 0, size_t(first * elem_bytes));
      if (last > first) memcpy(out + first * elem_bytes, in + first * elem_bytes, size_t((last - first) * elem_bytes));
      memset(out + last * elem_bytes, 0, size_t((cols - last) * elem_bytes));
    }
  });
}
