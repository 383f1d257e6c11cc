#pragma once
// The on-disk store of compiled specializations (see the README's "Cache").
//
//   DIR/entries/KEY/   manifest.json  object.o  program.bin  weights.bin  lock
//   DIR/tmp/           entries being written, and entries being removed
//   DIR/hashes/DEV.INO model files' hashes, remembered (see hash_memo.hpp)
//
// - Atomic: an entry is written into a private directory under tmp/, every
//   file flushed, the manifest last, then renamed into entries/. Readers see
//   a whole entry or none; a writer killed half-way leaves only tmp/ debris,
//   which nothing reads (verify and prune clear it once it is an hour old).
// - Checked: the manifest names the format, the Kiln build and the key, and
//   every file's size and XXH3-128 checksum; open() checks them all, so a
//   truncated, corrupted or foreign entry is a miss, never a crash.
// - Shared: a reader holds a shared flock on the entry's `lock` for as long
//   as it uses the entry's mapped files; eviction takes the lock exclusively
//   without waiting and skips entries in use.
// - Bounded: after each write, least-recently-used entries (by the lock
//   file's mtime, touched on every open) go until the store fits max_bytes.
#include <sys/stat.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/backend.hpp"

namespace kiln::cache {

inline constexpr int kFormatVersion = 1;

struct EntryInfo {
  std::string key;
  nlohmann::json manifest;  // null if it could not be read
  int64_t bytes = 0;        // on disk
  std::chrono::system_clock::time_point last_use;
  std::string problem;  // empty if the entry is whole (verify() checks checksums too)
};

class Store {
 public:
  Store(std::string dir, int64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {}
  const std::string& dir() const { return dir_; }
  int64_t max_bytes() const { return max_bytes_; }

  // The entry for `key`, checked and mapped, or nullopt. `problem` is set
  // when an entry exists but is unusable (what is wrong with it). With
  // `defer_weights_check`, the weights' checksum is the artifact's `check`,
  // which the caller must run before running the entry (a loader may run it
  // while loading the rest).
  std::optional<backends::LoadedArtifact> open(const std::string& key, std::string& problem,
                                               bool defer_weights_check = false) const;

  // Creates the directory layout; throws ir::Error(Io) if it cannot be written.
  void create() const;

  // Stores an entry (replacing an unusable one). `key_inputs` and the
  // artifact's summary go into the manifest. Returns false if another
  // process stored the same key first (theirs is kept). Throws ir::Error(Io)
  // if the directory cannot be written.
  bool put(const std::string& key, const nlohmann::json& key_inputs, const backends::Artifact& artifact, double compile_ms) const;

  // Entries, unsorted. With `check_files`, every checksum is verified.
  std::vector<EntryInfo> list(bool check_files = false) const;
  // Removes an entry unless a reader holds it; true if it is gone.
  bool remove(const std::string& key) const;
  // Least recently used entries removed (those in use skipped) until the
  // store holds at most `max_bytes`; returns the keys removed.
  std::vector<std::string> prune(int64_t max_bytes) const;
  // Leftovers of killed writers older than `age`.
  void clean_tmp(std::chrono::seconds age) const;

  // A model file's hash remembered by its identity (hash_memo.hpp), "" if
  // none; remembering never fails.
  std::string recall_model_hash(const struct stat& st) const;
  void remember_model_hash(const struct stat& st, const timespec& looked_at, const std::string& hash,
                           const std::string& path) const;
  // Removes remembered model hashes written more than `age` ago (they are
  // rewritten only when a file changes, so an old one costs a model's load
  // one more read of the file), or all of them.
  void forget_model_hashes(std::chrono::seconds age) const;

 private:
  std::string entry_dir(const std::string& key) const;
  std::string hash_record(const struct stat& st) const;
  std::string dir_;
  int64_t max_bytes_;
};

// Where the cache lives unless told: $XDG_CACHE_HOME/kiln, else ~/.cache/kiln
// ("" if neither variable is set).
std::string default_dir();
// 1 GiB.
inline constexpr int64_t kDefaultMaxBytes = int64_t(1) << 30;

}  // namespace kiln::cache
