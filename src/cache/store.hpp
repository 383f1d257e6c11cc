#pragma once
// The on-disk store of compiled specializations (see the README's "Cache").
//
//   DIR/CACHEDIR.TAG   marks the directory as a Kiln cache (and tells backup
//                      tools to skip it); nothing else is ever used as one
//   DIR/secret         a private cache's secret (authenticator.hpp)
//   DIR/entries/KEY/   manifest.json  manifest.tag  object.o  program.bin  weights.bin  lock
//   DIR/tmp/           entries being written, and entries being removed
//   DIR/hashes/DEV.INO model files' hashes, remembered (see hash_memo.hpp)
//
// - Trusted: an entry is code that Kiln maps and runs. A private cache (no
//   key) is used only while the directory, its parts, every entry and every
//   file belong to this user or root and nobody else can write them (as ssh
//   treats authorized_keys); Kiln makes them 0700 and 0600 whatever the
//   umask. A shared cache has a key (KILN_CACHE_KEY_FILE) and may be
//   writable by a group. Either way every manifest carries an HMAC-SHA256 tag
//   made with the secret, and lists each file's SHA-256; nothing of an entry
//   whose tag or digests do not verify is run. Code files are read into
//   private memory before they are checked; the weights are mapped only when
//   nobody else can change them under the mapping, else read.
// - Atomic: an entry is written into a private directory under tmp/, every
//   file flushed, the manifest last, then renamed into entries/. Readers see
//   a whole entry or none; a writer killed half-way leaves only tmp/ debris,
//   which nothing reads (verify and prune clear it once it is an hour old).
// - Contained: every path inside the directory is opened relative to its
//   parent without following symbolic links; a link anywhere inside is
//   foreign, and removing it removes the link only.
// - Shared: a reader holds a shared flock on the entry's `lock` for as long
//   as it uses the entry's mapped files; eviction takes the lock exclusively
//   without waiting and skips entries in use.
// - Bounded: after each write, least-recently-used entries (by the lock
//   file's mtime, touched on every open) go until the store fits max_bytes.
#include <sys/stat.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/backend.hpp"
#include "cache/manifest.hpp"

namespace kiln::cache {

class Authenticator;

// An entry's manifest, its tag and its files in memory: what travels to and
// from a fleet's remote store (remote_store.hpp).
struct RawEntry {
  std::string manifest, tag;
  std::string object, program;
  std::shared_ptr<char> weights;  // 64-byte aligned
  size_t weights_bytes = 0;

  // kEntryFiles[i]'s bytes.
  std::string_view file(int i) const {
    return i == 0   ? std::string_view(object)
           : i == 1 ? std::string_view(program)
                    : std::string_view(weights.get(), weights_bytes);
  }
  // The entry as a loader takes it, keeping `raw` alive.
  static backends::LoadedArtifact loaded(std::shared_ptr<const RawEntry> raw);
};

// "" if `text` is a manifest of this build for `key` whose `tag` verifies,
// else what is wrong; `out` is set whenever the manifest could be parsed.
std::string check_manifest(const Authenticator& auth, const std::string& key, std::string_view text, std::string_view tag,
                           std::optional<Manifest>& out);
// The same, and every file's size and digest.
std::string check_raw(const Authenticator& auth, const std::string& key, const RawEntry& raw, std::optional<Manifest>& out);

struct EntryInfo {
  std::string key;
  std::optional<Manifest> manifest;  // absent if it could not be read
  int64_t bytes = 0;                 // on disk
  std::chrono::system_clock::time_point last_use;
  std::string problem;  // empty if the entry is whole (with check_files, its digests too)
};

class Store {
 public:
  // `shared_key`: a shared cache's secret (read_key_file), "" for a private cache.
  Store(std::string dir, int64_t max_bytes, std::string shared_key = "")
      : dir_(std::move(dir)), max_bytes_(max_bytes), shared_key_(std::move(shared_key)) {}
  const std::string& dir() const { return dir_; }
  int64_t max_bytes() const { return max_bytes_; }
  bool shared() const { return !shared_key_.empty(); }

  // "" if the directory may be used as a cache (it need not exist yet), else
  // why not: not a Kiln cache, a link inside, or (private) permissions.
  std::string check() const;

  // The entry for `key`, checked and mapped, or nullopt. `problem` is set
  // when an entry exists but is unusable (what is wrong with it). With
  // `defer_weights_check`, the weights' digest is the artifact's `check`,
  // which the caller must run before running the entry (a loader may run it
  // while loading the rest).
  std::optional<backends::LoadedArtifact> open(const std::string& key, std::string& problem,
                                               bool defer_weights_check = false) const;

  // Creates the directory layout; throws ir::Error(Io) saying why it cannot.
  void create() const;

  // Stores an entry (replacing an unusable one). `key_inputs` and the
  // artifact's summary go into the manifest. Returns false if another
  // process stored the same key first (theirs is kept). Throws ir::Error(Io)
  // if the directory cannot be written.
  bool put(const std::string& key, const nlohmann::json& key_inputs, const backends::Artifact& artifact, double compile_ms) const;
  // Stores an entry that came from elsewhere, byte for byte, once
  // check_raw passes with this cache's secret (else throws
  // InvalidArgument); otherwise as put.
  bool put_raw(const std::string& key, const RawEntry& raw) const;
  // The entry for `key`, checked, with its manifest and tag as they are
  // stored; nullopt and `problem` (empty for a miss) otherwise.
  std::optional<RawEntry> read_raw(const std::string& key, std::string& problem) const;

  // Entries, unsorted. With `check_files`, every digest is verified.
  std::vector<EntryInfo> list(bool check_files = false) const;
  // Removes an entry; "" if it is gone, else why it is not (in use by a
  // running process, or the directory refused).
  std::string remove(const std::string& key) const;
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
  // Removes every remembered hash that is damaged or whose tag does not
  // verify; returns each one's name and what was wrong.
  std::vector<std::pair<std::string, std::string>> remove_bad_model_hashes() const;

 private:
  struct Layout;
  std::string open_layout(Layout& l, bool create) const;
  // Writes an entry into tmp/ (`write` writes its files, fills the
  // manifest's file records and returns the manifest's text and tag) and
  // renames it into place; false if another process stored it first.
  bool publish(const std::string& key,
               const std::function<std::pair<std::string, std::string>(int dir, Manifest& m, const Authenticator& auth,
                                                                       mode_t mode)>& write) const;
  std::string dir_;
  int64_t max_bytes_;
  std::string shared_key_;
};

// Where the cache lives unless told: $XDG_CACHE_HOME/kiln, else ~/.cache/kiln
// ("" if neither variable is set).
std::string default_dir();
// 1 GiB.
inline constexpr int64_t kDefaultMaxBytes = int64_t(1) << 30;

}  // namespace kiln::cache
