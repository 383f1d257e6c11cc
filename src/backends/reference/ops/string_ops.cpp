// String tensors: StringNormalizer. (Cast and CastLike convert strings
// from and to numbers in Tensor::cast.)
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "backends/reference/kernel_registry.hpp"

namespace kiln::ref {
namespace {

// Case changes and case-insensitive matching act on ASCII letters only;
// other bytes (UTF-8 sequences included) stay as they are.
std::string ascii_case(std::string s, bool upper) {
  for (char& c : s)
    if (upper && c >= 'a' && c <= 'z')
      c = char(c - 'a' + 'A');
    else if (!upper && c >= 'A' && c <= 'Z')
      c = char(c - 'A' + 'a');
  return s;
}

// Drops the stopwords, then changes the case of what is left. The input is
// [C] or [1, C]; a result with nothing left holds one empty string.
void string_normalizer(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() != DType::String) ctx.fail(std::string("input is ") + ir::dtype_name(x.dtype()) + ", expected string");
  if (!(x.rank() == 1 || (x.rank() == 2 && x.dim(0) == 1)))
    ctx.fail("input has shape " + ir::dims_to_string(x.dims()) + ", expected [C] or [1, C]");
  const std::string action = ctx.attr_string("case_change_action", "NONE");
  if (action != "NONE" && action != "LOWER" && action != "UPPER")
    ctx.fail("case_change_action is '" + action + "', expected NONE, LOWER or UPPER");
  const bool case_sensitive = ctx.attr_int("is_case_sensitive", 0) != 0;
  std::set<std::string> stopwords;
  for (const auto& w : ctx.attr_strings("stopwords")) stopwords.insert(case_sensitive ? w : ascii_case(w, false));
  std::vector<std::string> kept;
  const std::string* in = x.data<std::string>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (stopwords.count(case_sensitive ? in[i] : ascii_case(in[i], false))) continue;
    kept.push_back(action == "NONE" ? in[i] : ascii_case(in[i], action == "UPPER"));
  }
  if (kept.empty()) kept.emplace_back();
  Dims dims = x.dims();
  dims.back() = int64_t(kept.size());
  ctx.set_output(0, Tensor::from_vector<std::string>(dims, kept));
}

}  // namespace

void register_string_ops(KernelRegistry& r) { r.add("StringNormalizer", &string_normalizer); }

}  // namespace kiln::ref
