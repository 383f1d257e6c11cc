// kiln::Runtime: its options (and the environment variables that stand in
// for them), its backends and plugins, its cache and its logger.
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <thread>
#include <tuple>

#include "cache/authenticator.hpp"
#include "plugins/plugin_backend.hpp"
#include "plugins/plugin_set.hpp"
#include "runtime/api_errors.hpp"
#include "runtime/ir/environment.hpp"
#include "runtime/runtime_impl.hpp"

namespace kiln {

namespace {

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

const char* cache_outcome_name(CacheOutcome o) {
  switch (o) {
    case CacheOutcome::Off: return "off";
    case CacheOutcome::Hit: return "hit";
    case CacheOutcome::Miss: return "miss";
    case CacheOutcome::Rebuild: return "rebuild";
    case CacheOutcome::NotCached: return "not cached";
    case CacheOutcome::RemoteHit: return "hit (remote)";
  }
  return "?";
}

namespace {

int64_t cache_max_bytes(const RuntimeOptions& options, const Runtime& runtime) {
  if (options.cache_max_bytes < 0)
    throw Error(ErrorCode::InvalidArgument, "RuntimeOptions::cache_max_bytes must be 0 (default) or positive, got " +
                                                std::to_string(options.cache_max_bytes));
  if (options.cache_max_bytes > 0) return options.cache_max_bytes;
  if (const std::string v = env::cache_max_bytes(); !v.empty()) {
    char* end = nullptr;
    const long long n = std::strtoll(v.c_str(), &end, 10);
    if (end && *end == '\0' && n > 0) return n;
    runtime.log(LogLevel::Warning, "KILN_CACHE_MAX_BYTES='" + v + "' is not a positive number of bytes; using 1 GiB");
  }
  return cache::kDefaultMaxBytes;
}

// The remote tier `o` asks for, or null: none asked, or (with a warning)
// one that cannot be used.
std::shared_ptr<const cache::RemoteStore> make_remote(const RuntimeOptions& o, const std::string& key, bool local,
                                                      const cache::RemoteStore::Log& log) {
  cache::RemoteStore::Options r;
  r.url = o.remote_cache.empty() ? env::remote_cache() : o.remote_cache;
  if (r.url.empty()) return nullptr;
  if (cache::RedisAddress address; !cache::parse_redis_url(r.url, address).empty())
    throw Error(ErrorCode::InvalidArgument,
                "remote cache: " + cache::parse_redis_url(r.url, address) +
                    (o.remote_cache.empty() ? " (KILN_REMOTE_CACHE)" : " (RuntimeOptions::remote_cache)"));
  const std::tuple<int, const char*, const char*, int*> bounds[] = {
      {o.remote_cache_timeout_ms, "timeout", "TIMEOUT", &r.timeout_ms},
      {o.remote_cache_wait_ms, "wait", "WAIT", &r.wait_ms},
      {o.remote_cache_lease_ms, "lease", "LEASE", &r.lease_ms}};
  for (auto [given, option, variable, to] : bounds) {
    if (given < 0)
      throw Error(ErrorCode::InvalidArgument, std::string("RuntimeOptions::remote_cache_") + option +
                                                  "_ms must be 0 (default) or positive, got " + std::to_string(given));
    try {
      if (const int ms = given > 0 ? given : env::remote_cache_ms(variable); ms > 0) *to = ms;
    } catch (const ir::Error& e) {
      throw Error(ErrorCode::InvalidArgument, e.what());
    }
  }
  r.read_only = o.remote_cache_read_only || env::remote_cache_read_only();
  // Entries are code this host will run: without the fleet's key nothing could be checked.
  if (key.empty() || !local) {
    log(2, "remote cache " + r.url + " not used: " +
               (!local ? "the local cache is not in use"
                       : "it needs the cache's key (KILN_CACHE_KEY_FILE or RuntimeOptions::cache_key_file)"));
    return nullptr;
  }
  return std::make_shared<cache::RemoteStore>(r, key, log);
}

}  // namespace

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_shared<Impl>()) {
  if (options.threads < 0)
    throw Error(ErrorCode::InvalidArgument,
                "RuntimeOptions::threads must be 0 (all cores) or positive, got " + std::to_string(options.threads));
  impl_->threads = options.threads > 0 ? options.threads : usable_cores();
  impl_->options.log_level = options.log_level;  // for the plugins' warnings, before the rest is set
  impl_->options.logger = options.logger;
  try {
    // What a plugin says while it is loaded reaches the Runtime that loads it.
    const plugins::LogSink loading = [&](int level, const std::string& text) { log(LogLevel(std::clamp(level, 0, 3)), text); };
    const plugins::LogScope scope(&loading);
    impl_->plugin_libraries =
        plugins::find_plugins(options.plugins, env::plugin_path(), [&](const std::string& w) { log(LogLevel::Warning, w); });
  } catch (const ir::Error& e) {
    throw Error(ErrorCode::InvalidArgument, e.what());
  }
  impl_->backend = backends::make_backend(options.backend, impl_->threads);
  if (!impl_->backend) {
    auto forced = std::find_if(impl_->plugin_libraries.begin(), impl_->plugin_libraries.end(),
                               [&](const auto& lib) { return lib->name == options.backend; });
    if (forced == impl_->plugin_libraries.end()) {
      std::string names;
      for (const auto& n : backends::backend_names()) names += (names.empty() ? "'" : ", '") + n + "'";
      for (const auto& lib : impl_->plugin_libraries) names += ", '" + lib->name + "' (plugin)";
      throw Error(ErrorCode::InvalidArgument,
                  "RuntimeOptions::backend '" + options.backend + "' is unknown; available: " + names);
    }
    impl_->plugin_libraries = {*forced};
    impl_->backend = backends::make_backend("reference", impl_->threads);
  }
  for (const auto& name : options.excluded_plugins) {
    auto& libs = impl_->plugin_libraries;
    libs.erase(std::remove_if(libs.begin(), libs.end(), [&](const auto& lib) { return lib->name == name; }), libs.end());
  }
  impl_->fallback = impl_->backend->fallback();
  // The plugins' messages reach this Runtime's logger while it lives.
  std::weak_ptr<Impl> weak = impl_;
  plugins::LogSink sink = [weak](int level, const std::string& text) {
    if (auto impl = weak.lock()) impl->log(LogLevel(std::clamp(level, 0, 3)), text);
  };
  for (const auto& lib : impl_->plugin_libraries) {
    impl_->plugins.push_back(plugins::make_plugin_backend(lib, impl_->backend->host_threads(), sink));
    impl_->order.push_back(impl_->plugins.back().get());
  }
  impl_->order.push_back(impl_->backend.get());
  if (impl_->fallback) impl_->order.push_back(impl_->fallback.get());
  if (options.kernels.empty()) options.kernels = env::kernels();
  if (options.kernels.empty()) options.kernels = "native";
  if (options.kernels != "native" && options.kernels != "portable")
    throw Error(ErrorCode::InvalidArgument,
                "RuntimeOptions::kernels (or KILN_KERNELS) is '" + options.kernels + "'; expected 'native' or 'portable'");
  if (options.precision.empty()) options.precision = "fp32";
  if (options.precision != "fp32" && options.precision != "bf16")
    throw Error(ErrorCode::InvalidArgument,
                "RuntimeOptions::precision is '" + options.precision + "'; expected 'fp32' or 'bf16'");
  if (std::string why = impl_->backend->refuses_precision(options.precision); !why.empty())
    throw Error(ErrorCode::Unsupported, "RuntimeOptions::precision '" + options.precision + "': " + why);
  impl_->options = std::move(options);
  const RuntimeOptions& o = impl_->options;
  std::string key;  // a shared cache's
  if (o.cache && !env::cache_off()) {
    std::string dir = o.cache_dir;
    if (dir.empty()) dir = env::cache_dir();
    if (dir.empty()) dir = cache::default_dir();
    const int64_t max_bytes = cache_max_bytes(o, *this);
    std::string key_file = o.cache_key_file;
    if (key_file.empty()) key_file = env::cache_key_file();
    std::string& refused = impl_->cache_refused;
    if (dir.empty())
      refused = "no cache directory (HOME is not set)";
    else if (cache::build_id().empty())
      refused = "this Kiln build has no identity (no build-id)";
    else if (!key_file.empty()) {
      try {
        key = cache::read_key_file(key_file);
      } catch (const ir::Error& e) {
        refused = e.what();
      }
    }
    if (refused.empty()) {
      auto store = std::make_shared<cache::Store>(dir, max_bytes, key);
      refused = store->check();
      if (refused.empty())
        impl_->store = std::move(store);
      else
        refused = "cache directory not used: " + refused;
    }
    if (!refused.empty()) log(LogLevel::Warning, refused + "; compiling in memory only");
  }
  impl_->remote = make_remote(o, key, impl_->store != nullptr, [weak](int level, const std::string& text) {
    if (auto impl = weak.lock()) impl->log(LogLevel(level), text);
  });
}

std::string Runtime::cache_dir() const { return impl_->store ? impl_->store->dir() : std::string(); }
int64_t Runtime::codegen_runs() const {
  int64_t runs = 0;
  for (const auto* backend : impl_->order) runs += backend->codegen_runs();
  return runs;
}

std::vector<PluginInfo> Runtime::plugins() const {
  std::vector<PluginInfo> infos;
  for (const auto& lib : impl_->plugin_libraries) {
    infos.push_back({lib->name, lib->path, lib->identity, int(lib->abi_version), lib->priority, lib->operators});
  }
  return infos;
}

const RuntimeOptions& Runtime::options() const { return impl_->options; }
int Runtime::threads() const { return impl_->threads; }

void Runtime::log(LogLevel level, const std::string& message) const { impl_->log(level, message); }

void Runtime::wait_for_cache() const { impl_->writer.wait(); }

void Runtime::Impl::write_entry(const CacheWriter::Job& p) const {
  if (p.fetched) {
    // From the remote tier, already loaded: this host's later processes load it locally.
    try {
      store->put_raw(p.key.hex, *p.fetched);
    } catch (const ir::Error& e) {
      log(LogLevel::Warning, std::string(e.what()) + " (storing an entry fetched from the remote cache)");
    }
    return;
  }
  backends::Artifact artifact;
  try {
    artifact = p.executable->save();
  } catch (const ir::Error& e) {
    p.settle(CacheOutcome::NotCached, e.what());  // not an error: some specializations keep no compiled code
    return;
  }
  try {
    store->put(p.key.hex, p.key.readable, artifact, p.compile_ms);
    if (remote && p.push) {
      std::string problem;
      if (auto raw = store->read_raw(p.key.hex, problem))
        remote->push(p.key.hex, *raw);
      else if (!problem.empty())
        log(LogLevel::Warning, "cache: entry " + p.key.hex + " not uploaded: " + problem);
    }
  } catch (const ir::Error& e) {
    const bool io = e.kind() == ir::ErrorKind::Io;
    if (!io || store_writable.exchange(false))
      log(LogLevel::Warning, std::string(e.what()) + (io ? "; compiling in memory only from now on" : ""));
    p.settle(io ? CacheOutcome::Off : CacheOutcome::NotCached, e.what());
  } catch (const std::exception& e) {
    log(LogLevel::Warning, std::string("cache: storing an entry failed: ") + e.what());
    p.settle(CacheOutcome::NotCached, std::string("storing the entry failed: ") + e.what());
  }
}

}  // namespace kiln
