// kiln_pk_arg_extreme: ArgMax and ArgMin, one [outer, inner] position per
// output element; kiln_pk_hardmax, ArgMax's index as a one-hot vector.
#include "backends/cpu/portable/parallel.hpp"

namespace kiln::pk {
namespace {

template <bool is_max, bool last>
void arg_rows(const kiln_pk_threads* threads, int64_t outer, int64_t len, int64_t inner, const float* x, int64_t* y) {
  parallel_for_grain(threads, outer, grain_for(len * inner + 8), [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const float* v = x + o * len * inner + i;
        int64_t best = 0;
        float best_v = v[0];
        for (int64_t k = 1; k < len && best_v == best_v; ++k) {
          const float c = v[k * inner];
          if (c != c || (is_max ? c > best_v : c < best_v) || (last && c == best_v)) {
            best = k;
            best_v = c;
          }
        }
        y[o * inner + i] = best;
      }
  });
}

}  // namespace
}  // namespace kiln::pk

extern "C" void kiln_pk_hardmax(const kiln_pk_threads* threads, int64_t outer, int64_t len, int64_t inner, const float* x,
                                float* y) {
  using namespace kiln::pk;
  parallel_for_grain(threads, outer, grain_for(len * inner + 8), [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const float* v = x + o * len * inner + i;
        float* out = y + o * len * inner + i;
        // The first largest, a NaN never larger: as the reference.
        int64_t best = 0;
        for (int64_t k = 1; k < len; ++k)
          if (v[k * inner] > v[best * inner]) best = k;
        for (int64_t k = 0; k < len; ++k) out[k * inner] = k == best ? 1.0f : 0.0f;
      }
  });
}

extern "C" void kiln_pk_arg_extreme(const kiln_pk_threads* threads, int64_t outer, int64_t len, int64_t inner, int32_t is_max,
                                    int32_t select_last, const float* x, int64_t* y) {
  using namespace kiln::pk;
  if (is_max)
    select_last ? arg_rows<true, true>(threads, outer, len, inner, x, y)
                : arg_rows<true, false>(threads, outer, len, inner, x, y);
  else
    select_last ? arg_rows<false, true>(threads, outer, len, inner, x, y)
                : arg_rows<false, false>(threads, outer, len, inner, x, y);
}
