// A Model's specializations: one per set of input dtypes and shapes, loaded
// from the cache or compiled on first use, and handed to the cache writer
// when compiled.
#include <chrono>

#include "backends/pipeline.hpp"
#include "runtime/api_errors.hpp"
#include "runtime/model_impl.hpp"
#include "runtime/runtime_impl.hpp"

namespace kiln {

namespace {

std::string specialization_key(const std::map<std::string, ir::Tensor>& inputs) {
  std::string key;
  for (const auto& [name, t] : inputs)
    key += (key.empty() ? "" : ",") + name + ":" + ir::dtype_name(t.dtype()) + ":" + ir::dims_to_string(t.dims());
  return key;
}

}  // namespace

std::vector<SpecializationStats> Model::specializations() const {
  std::lock_guard<std::mutex> lock(impl_->table_mutex);
  std::vector<SpecializationStats> out;
  for (const auto& key : impl_->table_order) {
    const auto& entry = impl_->table.at(key);
    if (entry->ready.load(std::memory_order_acquire)) out.push_back(entry->snapshot());
  }
  return out;
}

// The entry's executable from the store, or none: then `stats` says
// whether it was a miss or an unusable entry (rebuilt, with one warning).
backends::PartitionedCompile Model::Impl::load_cached(const cache::Store& store, const cache::Key& cache_key,
                                                      const std::string& key, const backends::CompileOptions& options,
                                                      SpecializationStats& stats) const {
  backends::PartitionedCompile made;
  std::string problem;
  // With a second thread in the budget, the backend computes the weights'
  // checksum on its threads while it loads the rest.
  if (auto artifact = store.open(cache_key.hex, problem, runtime.threads() > 1)) {
    try {
      made = backends::load_partitioned(*artifact, model.graph, runtime.impl_->order, options);
    } catch (const ir::Error& e) {
      problem = e.what();
    }
    if (artifact->check) {
      if (const std::string& bad = artifact->check->run(); !bad.empty()) {
        made.executable.reset();
        problem = bad;
      }
    }
    if (made.executable) stats.cache = CacheOutcome::Hit;
  }
  if (!made.executable) {
    stats.cache = problem.empty() ? CacheOutcome::Miss : CacheOutcome::Rebuild;
    stats.cache_note = problem;
    if (!problem.empty())
      runtime.log(LogLevel::Warning, model_label(model) + ": cache entry " + cache_key.hex + " for " + key + " is unusable (" +
                                         problem + "); compiling it again");
  }
  return made;
}

backends::PartitionedCompile Model::Impl::load_remote(const cache::Store& store, const cache::Key& cache_key,
                                                      const std::string& key, const backends::CompileOptions& options,
                                                      SpecializationStats& stats, std::shared_ptr<void>& lease) const {
  const Runtime::Impl& rt = *runtime.impl_;
  backends::PartitionedCompile made;
  // While another host compiles it, a process of this host may store it here first.
  SpecializationStats local;
  const cache::RemoteStore::Obtained got = rt.remote->obtain(cache_key.hex, [&] {
    made = load_cached(store, cache_key, key, options, local);
    return made.executable != nullptr;
  });
  if (got.local) {
    stats.cache = CacheOutcome::Hit;
    return made;
  }
  if (got.entry) {
    try {
      made = backends::load_partitioned(cache::RawEntry::loaded(got.entry), model.graph, rt.order, options);
      stats.cache = CacheOutcome::RemoteHit;
      stats.cache_note.clear();
      CacheWriter::Job publish;
      publish.key = cache_key;
      publish.fetched = got.entry;
      rt.writer.enqueue(std::move(publish));
      return made;
    } catch (const ir::Error& e) {
      // Checked, yet not loadable here (a oneDNN primitive that wants another layout): compiled instead.
      runtime.log(LogLevel::Warning, model_label(model) + ": remote cache entry " + cache_key.hex + " for " + key +
                                         " does not load (" + e.what() + "); compiling it");
    }
  }
  if (got.refused) stats.cache = CacheOutcome::Rebuild;
  if (!got.note.empty()) stats.cache_note = got.note;
  lease = got.lease;
  return made;
}

// Loads or compiles the entry for `ins` and fills in its stats.
void Model::Impl::make(const std::shared_ptr<Specialized>& entry, const std::string& key,
                       const std::map<std::string, ir::Tensor>& ins) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<const backends::Backend*>& order = runtime.impl_->order;
  backends::CompileOptions options;
  options.threads = runtime.threads();
  options.kernels = runtime.options().kernels;
  options.precision = runtime.options().precision;
  SpecializationStats& stats = entry->stats;
  backends::PartitionedCompile made;  // loaded or compiled
  cache::Key cache_key;
  std::shared_ptr<void> lease;  // this host compiles it for the fleet
  if (store) {
    cache_key = cache::make_key({model.content_hash, model.source_path, key, backends::partitioned_identity(order, options)});
    stats.cache_key = cache_key.hex;
    made = load_cached(*store, cache_key, key, options, stats);
    if (!made.executable && runtime.impl_->remote) made = load_remote(*store, cache_key, key, options, stats, lease);
  } else {
    stats.cache = no_store;
    stats.cache_note = no_store_note;
  }
  if (!made.executable) {
    own_weights();
    made = backends::compile_for_shapes(*model.graph, backends::shapes_of(ins), order, options);
  }
  entry->executable = std::move(made.executable);
  stats.backend = made.backends;
  stats.parts = made.parts;
  const backends::ExecutableStats built = entry->executable->stats();
  stats.nodes = built.nodes;
  stats.compiled_nodes = built.compiled_nodes;
  stats.fallback_nodes = built.fallback_nodes;
  stats.arena_bytes = built.arena_bytes;
  stats.intermediate_bytes = built.intermediate_bytes;
  stats.key = key;
  stats.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  runtime.log(LogLevel::Debug, model_label(model) + ": " + (stats.cache == CacheOutcome::Hit ? "loaded " : "compiled ") + key +
                                   " with " + stats.backend + " in " + std::to_string(stats.compile_ms) +
                                   " ms (cache: " + cache_outcome_name(stats.cache) + ")");
  if (store && stats.cache != CacheOutcome::Hit && stats.cache != CacheOutcome::RemoteHit) {
    const auto store_start = std::chrono::steady_clock::now();
    store_entry(*store, cache_key, entry, std::move(lease));
    stats.store_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - store_start).count();
  }
}

std::shared_ptr<const backends::Executable> Model::Impl::specialization_for(const std::map<std::string, ir::Tensor>& ins,
                                                                            bool count_run) {
  const std::string key = specialization_key(ins);
  std::shared_ptr<Impl::Specialized> entry;
  {
    std::lock_guard<std::mutex> lock(table_mutex);
    auto& slot = table[key];
    if (!slot) {
      slot = std::make_shared<Impl::Specialized>();
      table_order.push_back(key);
    }
    entry = slot;
  }
  // A compile that throws leaves the flag unset: the next run tries again.
  const Runtime::Impl::HoldMessages hold_messages;
  std::call_once(entry->once, [&] {
    make(entry, key, ins);
    entry->ready.store(true, std::memory_order_release);
  });
  if (count_run) entry->runs++;
  return entry->executable;
}

void Model::Impl::store_entry(const cache::Store& store, const cache::Key& key, const std::shared_ptr<Specialized>& entry,
                              std::shared_ptr<void> lease) const {
  const Runtime::Impl& rt = *runtime.impl_;
  SpecializationStats& stats = entry->stats;
  try {
    if (!rt.store_writable.load()) ir::fail(ir::ErrorKind::Io, "cache directory '" + store.dir() + "' is not writable");
    store.create();
    CacheWriter::Job job;
    job.key = key;
    job.executable = entry->executable;
    job.compile_ms = stats.compile_ms;
    job.settle = [entry](CacheOutcome outcome, const std::string& note) { entry->settle(outcome, note); };
    job.push = share_remotely;
    job.hold = std::move(lease);
    rt.writer.enqueue(std::move(job));
  } catch (const ir::Error& e) {
    if (rt.store_writable.exchange(false))
      runtime.log(LogLevel::Warning, std::string(e.what()) + "; compiling in memory only from now on");
    stats.cache = CacheOutcome::Off;
    stats.cache_note = e.what();
  }
}

SpecializationStats Model::prepare(const std::vector<std::pair<std::string, Shape>>& shapes) const {
  return translate_errors([&] {
    auto ins = impl_->validate(impl_->placeholders(shapes));
    auto executable = impl_->specialization_for(ins, false);
    const std::string key = specialization_key(ins);
    std::lock_guard<std::mutex> lock(impl_->table_mutex);
    return impl_->table.at(key)->snapshot();
  });
}

}  // namespace kiln
