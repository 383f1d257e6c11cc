#pragma once
// A fleet's shared tier of the cache, on Redis (docs/cache.md#a-fleets-cache-on-redis).
//
// Everything a fleet stores lives under `kiln:FLEET:`, FLEET a fingerprint of
// the fleet's key, so hosts with another key see only misses:
//   e:KEY            the entry's header: JSON {gen, chunks, manifest, tag},
//                    written last and only if absent (SET NX)
//   c:KEY:GEN:I      its files (object, program, weights, one after
//                    another) in chunks of kChunkBytes
//   l:KEY            the lease of the host compiling KEY (SET NX PX)
//   refused          how many entries hosts refused
// An entry is checked (tag, manifest, every file's digest) before anything
// of it is used; one that does not verify is counted, deleted and never
// loaded. A store that fails or does not answer within the timeout costs
// one warning and is left alone for a few seconds: Kiln goes on with the
// local tier.
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cache/authenticator.hpp"
#include "cache/redis_connection.hpp"
#include "cache/store.hpp"

namespace kiln::cache {

class RemoteStore {
 public:
  struct Options {
    std::string url;        // redis://HOST:PORT[/DB] or unix://PATH
    int timeout_ms = 2000;  // every call
    int wait_ms = 60000;    // the longest a host waits for another's compile
    int lease_ms = 30000;   // how long a compiling host's lease lasts
    bool read_only = false;
  };
  // Logs: level 1 info, 2 warning.
  using Log = std::function<void(int level, const std::string& text)>;
  // Throws ir::Error (InvalidArgument) for a malformed address. Connects
  // lazily: a store that is down costs a warning on first use, not an error.
  RemoteStore(Options options, const std::string& fleet_key, Log log);
  ~RemoteStore();
  const Options& options() const { return options_; }
  std::string prefix() const { return prefix_; }

  // Releases the lease when the last copy goes.
  class Lease;

  // What a host that missed `key` locally is to do.
  struct Obtained {
    std::shared_ptr<const RawEntry> entry;  // the fleet's entry, checked
    std::shared_ptr<Lease> lease;           // compile: this host holds the lease (null: no lease)
    bool local = false;                     // `local_appeared` found it meanwhile
    bool refused = false;                   // the store held an entry that did not verify
    std::string note;                       // why it compiles
  };
  // The fleet's entry for `key`; or, while another host holds its lease,
  // waits (at most wait_ms) for that host's entry, asking `local_appeared`
  // now and then whether a process of this host stored it locally; else
  // takes the lease (unless read-only) and says to compile.
  Obtained obtain(const std::string& key, const std::function<bool()>& local_appeared) const;

  // Uploads an entry unless the store has one for its key, the host is
  // read-only or the store is down. Returns whether it uploaded.
  bool push(const std::string& key, const RawEntry& raw) const;
  // The same for commands: a store that fails throws ir::Error (Io).
  bool push_or_throw(const std::string& key, const RawEntry& raw) const;

  // For `kiln cache ... --remote`; these throw ir::Error (Io) when the store fails.
  struct Listed {
    std::string key;
    std::optional<Manifest> manifest;
    int64_t bytes = 0;
    std::string problem;  // "" if it verifies (with fetch_files: its files too)
  };
  std::vector<Listed> list(bool fetch_files) const;
  int64_t refused_count() const;
  void remove(const std::string& key) const;  // its header and chunks
  // Chunks no header refers to (an upload that died, or a header evicted); returns how many went.
  int64_t remove_orphans() const;

  static constexpr size_t kChunkBytes = size_t(4) << 20;

 private:
  enum class Fetch { Miss, Hit, Refused };
  Fetch fetch(RedisConnection& c, const std::string& key, RawEntry& out, std::string& note) const;
  bool upload(RedisConnection& c, const std::string& key, const RawEntry& raw) const;
  // Runs `f` on a pooled connection; false if the store is down or failed (logged once).
  bool with(const std::function<void(RedisConnection&)>& f) const;
  std::unique_ptr<RedisConnection> take() const;
  void give_back(std::unique_ptr<RedisConnection> c) const;
  void throw_if_down() const;

  Options options_;
  RedisAddress address_;
  Authenticator auth_;
  std::string prefix_;
  Log log_;
  mutable std::mutex mutex_;
  mutable std::vector<std::unique_ptr<RedisConnection>> idle_;
  mutable std::chrono::steady_clock::time_point down_until_{};
  mutable bool warned_ = false;
};

}  // namespace kiln::cache
