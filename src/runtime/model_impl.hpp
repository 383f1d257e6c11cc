#pragma once
// What a Model holds: its graph, its inputs and outputs as the API shows
// them, and its table of specializations. Internal: shared by the files
// that implement Model (model.cpp, model_impl.cpp, specialization_table.cpp).
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backends/backend.hpp"
#include "backends/partitioner.hpp"
#include "cache/cache_key.hpp"
#include "cache/store.hpp"
#include "kiln/kiln.hpp"
#include "runtime/ir/graph.hpp"

namespace kiln {

struct __attribute__((visibility("hidden"))) Model::Impl {  // hidden: see Runtime::Impl
  Runtime runtime;
  ir::Model model;
  // The runtime's cache, unless this model is kept out of it; then what its
  // specializations say of the cache, and why.
  std::shared_ptr<const cache::Store> store;
  CacheOutcome no_store = CacheOutcome::Off;
  std::string no_store_note;
  std::vector<TensorInfo> inputs;
  std::vector<TensorInfo> outputs;

  // One entry per specialization key; `once` makes concurrent first runs
  // compile it a single time while other keys compile in parallel.
  struct Specialized {
    std::once_flag once;
    std::shared_ptr<const backends::Executable> executable;
    SpecializationStats stats;
    std::atomic<bool> ready{false};  // set once executable and stats are written
    std::atomic<int64_t> runs{0};
    // The cache's outcome can change once more after `ready`: the writer
    // thread finds that nothing could be stored.
    mutable std::mutex settle_mutex;
    void settle(CacheOutcome outcome, const std::string& note) {
      std::lock_guard<std::mutex> lock(settle_mutex);
      stats.cache = outcome;
      stats.cache_note = note;
    }
    SpecializationStats snapshot() const {
      std::lock_guard<std::mutex> lock(settle_mutex);
      SpecializationStats s = stats;
      s.runs = runs.load();
      return s;
    }
  };
  mutable std::mutex table_mutex;
  mutable std::map<std::string, std::shared_ptr<Specialized>> table;
  mutable std::vector<std::string> table_order;

  // The specialization for these (validated) inputs, loaded from the cache
  // or compiled on first use (specialization_table.cpp).
  std::shared_ptr<const backends::Executable> specialization_for(const std::map<std::string, ir::Tensor>& inputs,
                                                                 bool count_run = true);
  void make(const std::shared_ptr<Specialized>& entry, const std::string& key, const std::map<std::string, ir::Tensor>& inputs);
  backends::PartitionedCompile load_cached(const cache::Store& store, const cache::Key& cache_key, const std::string& key,
                                           const backends::CompileOptions& options, SpecializationStats& stats) const;
  // After a local miss: the fleet's entry, or (in `lease`) the right to compile it for the fleet.
  backends::PartitionedCompile load_remote(const cache::Store& store, const cache::Key& cache_key, const std::string& key,
                                           const backends::CompileOptions& options, SpecializationStats& stats,
                                           std::shared_ptr<void>& lease) const;
  // What this model compiles may be uploaded to a remote cache: a model
  // loaded from a file whose weights the caller did not mark private.
  bool share_remotely = false;

  // Hands a freshly compiled specialization to the writer thread, which
  // makes its artifact and writes the files; whether it could be stored is
  // known after Runtime::wait_for_cache(). A directory that cannot be
  // created is found here already. A cache that cannot be written is
  // reported once and then left alone; run() never fails because of it.
  void store_entry(const cache::Store& store, const cache::Key& key, const std::shared_ptr<Specialized>& entry,
                   std::shared_ptr<void> lease) const;

  // Model::load leaves the weights in the mapped file, where a warm start
  // never reads them; whatever reads them (compiling, shape inference,
  // defaults of inputs) copies them out first, once.
  std::once_flag weights_once;
  void own_weights();

  // `not_cached`: why this model must stay out of the cache ("" if it need not).
  Impl(const Runtime& rt, ir::Model m, const std::string& not_cached = "");

  // Tensors of these shapes that point at no data: validation and the key
  // look at dtypes and shapes only, and nothing runs on them.
  std::vector<std::pair<std::string, Tensor>> placeholders(const std::vector<std::pair<std::string, Shape>>& shapes) const;

  // The caller's inputs checked against the model's (names, dtypes, shapes,
  // symbols bound consistently), as IR tensors viewing the caller's data.
  // Inputs in `given_elsewhere` (sequences and optionals) may be left out.
  std::map<std::string, ir::Tensor> validate(const std::vector<std::pair<std::string, Tensor>>& given,
                                             const std::map<std::string, ir::Value>& given_elsewhere = {}) const;
  // Sequences and optionals checked against the model's inputs, as IR values.
  std::map<std::string, ir::Value> validate_values(const std::vector<std::pair<std::string, Value>>& given) const;
  // Why run() cannot run this model ("" if it can): an input or output that is not a tensor.
  std::string tensors_only_refusal;
};

inline std::string model_label(const ir::Model& m) { return "model '" + m.source_path + "'"; }

}  // namespace kiln
