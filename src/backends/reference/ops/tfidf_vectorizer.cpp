// TfIdfVectorizer: counts the n-grams of each row that appear in the pool
// (skipping up to max_skip_count items between the elements of an n-gram)
// and turns the counts into TF, IDF or TF-IDF values.
#include <algorithm>
#include <map>

#include "backends/reference/kernel_registry.hpp"
#include "backends/reference/ops/op_util.hpp"

namespace kiln::ref {
namespace {

void tfidf_vectorizer(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() != DType::Int32 && x.dtype() != DType::Int64)
    ctx.unsupported(std::string("input of ") + ir::dtype_name(x.dtype()) +
                    " (int32 and int64 are supported; string pools are not)");
  if (x.rank() != 1 && x.rank() != 2) ctx.fail("input must be [C] or [N, C], has shape " + ir::dims_to_string(x.dims()));
  const int64_t min_n = ctx.attr_int("min_gram_length"), max_n = ctx.attr_int("max_gram_length");
  const int64_t max_skip = ctx.attr_int("max_skip_count");
  const std::string mode = ctx.attr_string("mode", "");
  const auto counts = ctx.attr_ints("ngram_counts"), indexes = ctx.attr_ints("ngram_indexes");
  const auto pool = ctx.attr_ints("pool_int64s");
  const auto weights = ctx.attr_floats("weights");
  if (mode != "TF" && mode != "IDF" && mode != "TFIDF") ctx.fail("mode must be TF, IDF or TFIDF, is '" + mode + "'");
  if (min_n < 1 || max_n < min_n || max_skip < 0)
    ctx.fail("need 1 <= min_gram_length <= max_gram_length and max_skip_count >= 0");
  if (pool.empty()) ctx.unsupported("only integer pools (pool_int64s) are supported");

  // Pool n-gram -> output column. ngram_counts[k] is where the (k+1)-grams start.
  std::map<std::vector<int64_t>, int64_t> column;
  int64_t width = 0, ngram = 0;
  for (size_t k = 0; k < counts.size(); ++k) {
    const int64_t n = int64_t(k) + 1;
    const int64_t begin = counts[k], end = k + 1 < counts.size() ? counts[k + 1] : int64_t(pool.size());
    if (begin < 0 || end > int64_t(pool.size()) || begin > end || (end - begin) % n)
      ctx.fail("ngram_counts " + std::to_string(begin) + ".." + std::to_string(end) + " do not split pool_int64s into " +
               std::to_string(n) + "-grams");
    for (int64_t p = begin; p < end; p += n, ++ngram) {
      if (ngram >= int64_t(indexes.size())) ctx.fail("ngram_indexes has fewer entries than the pool has n-grams");
      const int64_t col = indexes[size_t(ngram)];
      if (col < 0 || col >= int64_t(1) << 62)
        ctx.fail("ngram_indexes holds " + std::to_string(col) + ", expected an index in [0, 2^62)");
      column[std::vector<int64_t>(pool.begin() + p, pool.begin() + p + n)] = col;
      width = std::max(width, col + 1);
    }
  }
  if (!weights.empty() && int64_t(weights.size()) < width) ctx.fail("weights has fewer entries than output columns");

  const int64_t rows = x.rank() == 2 ? x.dim(0) : 1, len = x.dim(-1);
  std::vector<double> out(size_t(ir::checked_numel({rows, width})), 0.0);
  const auto values = x.to_int64_vector();
  // No n-gram is longer than the pool's longest or a row, and no skip
  // wider than a row fits one: the loops stop there whatever the attributes
  // say, which also keeps (n - 1) * (skip + 1) from overflowing.
  const int64_t longest = std::min({max_n, int64_t(counts.size()), len}), widest = std::min(max_skip, len);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t* row = values.data() + r * len;
    for (int64_t n = min_n; n <= longest; ++n)
      // A unigram has no gaps: count it once, not once per skip.
      for (int64_t skip = 0; skip <= (n == 1 ? 0 : widest); ++skip)
        for (int64_t start = 0; start + (n - 1) * (skip + 1) < len; ++start) {
          std::vector<int64_t> gram;
          for (int64_t i = 0; i < n; ++i) gram.push_back(row[start + i * (skip + 1)]);
          auto it = column.find(gram);
          if (it != column.end()) out[size_t(r * width + it->second)] += 1;
        }
  }
  for (size_t i = 0; i < out.size(); ++i) {
    const double w = weights.empty() ? 1.0 : weights[i % size_t(width)];
    if (mode == "IDF")
      out[i] = out[i] > 0 ? w : 0;
    else if (mode == "TFIDF")
      out[i] *= w;
  }
  ctx.set_output(0, from_doubles(DType::Float32, x.rank() == 2 ? Dims{rows, width} : Dims{width}, out));
}

}  // namespace

void register_tfidf_vectorizer(KernelRegistry& r) { r.add("TfIdfVectorizer", &tfidf_vectorizer); }

}  // namespace kiln::ref
