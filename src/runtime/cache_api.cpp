// kiln::Cache: the public face of the on-disk store (src/cache/store.hpp).
#include <algorithm>

#include "cache/store.hpp"
#include "kiln/kiln.hpp"

namespace kiln {

namespace {

// Model files loaded within a month keep their remembered hashes.
constexpr std::chrono::hours kForgetHashesAfter(24 * 30);

CacheEntry to_entry(const cache::EntryInfo& e) {
  CacheEntry out;
  out.key = e.key;
  out.bytes = e.bytes;
  out.last_use = std::chrono::system_clock::to_time_t(e.last_use);
  out.problem = e.problem;
  if (e.manifest.is_object()) {
    const auto inputs = e.manifest.value("key_inputs", nlohmann::json::object());
    if (inputs.is_object()) {
      out.model = inputs.value("model", "");
      out.shapes = inputs.value("shapes", "");
      out.backend = inputs.value("backend", "");
    }
    out.created = e.manifest.value("created", "");
  }
  return out;
}

}  // namespace

Cache::Cache(const Runtime& runtime) : dir_(runtime.cache_dir()) {
  if (dir_.empty())
    throw Error(ErrorCode::InvalidArgument, "this runtime has no cache (RuntimeOptions::cache is false, KILN_CACHE=off, or no HOME)");
}

std::vector<CacheEntry> Cache::list(bool check_files) const {
  std::vector<CacheEntry> out;
  for (const auto& e : cache::Store(dir_, 0).list(check_files)) out.push_back(to_entry(e));
  std::sort(out.begin(), out.end(), [](const CacheEntry& a, const CacheEntry& b) { return a.last_use > b.last_use; });
  return out;
}

std::vector<CacheEntry> Cache::verify() const {
  const cache::Store store(dir_, 0);
  std::vector<CacheEntry> bad;
  for (const auto& e : store.list(true))
    if (!e.problem.empty()) {
      store.remove(e.key);
      bad.push_back(to_entry(e));
    }
  store.clean_tmp(std::chrono::hours(1));
  store.forget_model_hashes(kForgetHashesAfter);
  return bad;
}

int64_t Cache::prune(int64_t max_bytes) const {
  if (max_bytes < 0) throw Error(ErrorCode::InvalidArgument, "Cache::prune: max_bytes is negative");
  const cache::Store store(dir_, 0);
  store.clean_tmp(std::chrono::hours(1));
  store.forget_model_hashes(kForgetHashesAfter);
  return int64_t(store.prune(max_bytes).size());
}

int64_t Cache::clear() const {
  const cache::Store store(dir_, 0);
  int64_t removed = 0;
  for (const auto& e : store.list(false)) removed += store.remove(e.key) ? 1 : 0;
  store.clean_tmp(std::chrono::hours(1));
  store.forget_model_hashes(std::chrono::seconds(0));
  return removed;
}

}  // namespace kiln
