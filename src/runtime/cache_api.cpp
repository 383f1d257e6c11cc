// kiln::Cache: the public face of the on-disk store (src/cache/store.hpp).
#include <algorithm>

#include "cache/store.hpp"
#include "kiln/kiln.hpp"
#include "runtime/ir/error.hpp"
#include "runtime/runtime_impl.hpp"

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
  if (e.manifest) {
    out.model = e.manifest->input("model");
    out.shapes = e.manifest->input("shapes");
    out.backend = e.manifest->input("backend");
    out.created = e.manifest->created;
  }
  return out;
}

template <typename F>
decltype(auto) io_errors(F&& f) {
  try {
    return f();
  } catch (const ir::Error& e) {
    throw Error(ErrorCode::Io, e.what());
  }
}

}  // namespace

struct __attribute__((visibility("hidden"))) Cache::Impl {  // hidden: see Runtime::Impl
  std::shared_ptr<const cache::Store> store;
  std::shared_ptr<const cache::RemoteStore> remote;

  const cache::RemoteStore& need_remote() const {
    if (!remote)
      throw Error(ErrorCode::InvalidArgument,
                  "this runtime has no remote cache (RuntimeOptions::remote_cache or KILN_REMOTE_CACHE, with a cache key)");
    return *remote;
  }
};

Cache::Cache(const Runtime& runtime) {
  const Runtime::Impl& rt = *runtime.impl_;
  if (!rt.store && rt.cache_refused.empty())
    throw Error(ErrorCode::InvalidArgument, "this runtime has no cache (RuntimeOptions::cache is false, or KILN_CACHE=off)");
  if (!rt.store) throw Error(ErrorCode::Io, rt.cache_refused);
  impl_ = std::make_shared<Impl>(Impl{rt.store, rt.remote});
}

const std::string& Cache::dir() const { return impl_->store->dir(); }

bool Cache::VerifyResult::all_removed() const {
  return std::all_of(entries.begin(), entries.end(), [](const CacheEntry& e) { return e.not_removed.empty(); });
}

std::vector<CacheEntry> Cache::list(bool check_files) const {
  std::vector<CacheEntry> out;
  for (const auto& e : io_errors([&] { return impl_->store->list(check_files); })) out.push_back(to_entry(e));
  std::sort(out.begin(), out.end(), [](const CacheEntry& a, const CacheEntry& b) { return a.last_use > b.last_use; });
  return out;
}

Cache::VerifyResult Cache::verify() const {
  const cache::Store& store = *impl_->store;
  VerifyResult result;
  for (const auto& e : io_errors([&] { return store.list(true); }))
    if (!e.problem.empty()) {
      CacheEntry bad = to_entry(e);
      bad.not_removed = store.remove(e.key);
      result.entries.push_back(std::move(bad));
    }
  for (const auto& [name, problem] : store.remove_bad_model_hashes()) result.hashes.push_back(name + ": " + problem);
  store.clean_tmp(std::chrono::hours(1));
  store.forget_model_hashes(kForgetHashesAfter);
  return result;
}

int64_t Cache::prune(int64_t max_bytes) const {
  if (max_bytes < 0) throw Error(ErrorCode::InvalidArgument, "Cache::prune: max_bytes is negative");
  const cache::Store& store = *impl_->store;
  const int64_t removed = int64_t(io_errors([&] { return store.prune(max_bytes); }).size());
  store.clean_tmp(std::chrono::hours(1));
  store.forget_model_hashes(kForgetHashesAfter);
  return removed;
}

int64_t Cache::clear() const {
  const cache::Store& store = *impl_->store;
  int64_t removed = 0;
  for (const auto& e : io_errors([&] { return store.list(false); })) removed += store.remove(e.key).empty() ? 1 : 0;
  store.clean_tmp(std::chrono::hours(1));
  store.forget_model_hashes(std::chrono::seconds(0));
  return removed;
}

Cache::Remote Cache::remote(bool check_files) const {
  const cache::RemoteStore& remote = impl_->need_remote();
  Remote out;
  out.url = remote.options().url;
  for (auto& e : io_errors([&] { return remote.list(check_files); })) {
    cache::EntryInfo info;
    info.key = e.key;
    info.manifest = e.manifest;
    info.bytes = e.bytes;
    info.problem = e.problem;
    out.entries.push_back(to_entry(info));
    out.entries.back().last_use = 0;
  }
  out.refused = io_errors([&] { return remote.refused_count(); });
  return out;
}

int64_t Cache::prune_remote() const {
  const cache::RemoteStore& remote = impl_->need_remote();
  return io_errors([&] {
    int64_t removed = 0;
    for (const auto& e : remote.list(false))
      if (!e.problem.empty()) {
        remote.remove(e.key);
        ++removed;
      }
    return removed + remote.remove_orphans();
  });
}

int64_t Cache::push() const {
  const cache::RemoteStore& remote = impl_->need_remote();
  if (remote.options().read_only) throw Error(ErrorCode::InvalidArgument, "the remote cache is read-only on this host");
  int64_t pushed = 0;
  for (const auto& e : io_errors([&] { return impl_->store->list(false); })) {
    if (!e.problem.empty()) continue;
    std::string problem;
    auto raw = io_errors([&] { return impl_->store->read_raw(e.key, problem); });
    if (raw && io_errors([&] { return remote.push_or_throw(e.key, *raw); })) ++pushed;
  }
  return pushed;
}

}  // namespace kiln
