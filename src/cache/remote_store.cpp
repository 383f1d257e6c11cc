#include "cache/remote_store.hpp"

#include <algorithm>
#include <cstring>
#include <thread>

#include "runtime/ir/error.hpp"
#include "runtime/ir/huge_pages.hpp"

namespace kiln::cache {

namespace {

// After a failure the store is left alone this long, so that a host whose
// store is down pays one timeout per few seconds, not one per compile.
constexpr auto kRetryAfter = std::chrono::seconds(5);
constexpr int64_t kMaxEntryBytes = int64_t(16) << 30;
// Chunks per round trip: bounds the replies held at once.
constexpr size_t kChunksPerTrip = 4;
// Chunks no header names are removed once unused this long.
constexpr auto kOrphanAfter = std::chrono::seconds(600);

std::string hex(const std::string& bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

const char* kReleaseScript = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0";

}  // namespace

class RemoteStore::Lease {
 public:
  Lease(const RemoteStore& store, std::string key, std::string token)
      : store_(store), key_(std::move(key)), token_(std::move(token)) {}
  ~Lease() {
    // Only our own: a lease that expired may be another host's by now.
    store_.with([&](RedisConnection& c) { c.command({"EVAL", kReleaseScript, "1", key_, token_}); });
  }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;

 private:
  const RemoteStore& store_;
  std::string key_, token_;
};

RemoteStore::RemoteStore(Options options, const std::string& fleet_key, Log log)
    : options_(std::move(options)), auth_(fleet_key), log_(std::move(log)) {
  if (std::string bad = parse_redis_url(options_.url, address_); !bad.empty())
    ir::fail(ir::ErrorKind::InvalidArgument, "remote cache: " + bad);
  prefix_ = "kiln:" + auth_.fingerprint() + ":";
}

RemoteStore::~RemoteStore() = default;

std::unique_ptr<RedisConnection> RemoteStore::take() const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  return std::make_unique<RedisConnection>(address_, options_.timeout_ms);
}

void RemoteStore::give_back(std::unique_ptr<RedisConnection> c) const {
  std::lock_guard<std::mutex> lock(mutex_);
  idle_.push_back(std::move(c));
}

void RemoteStore::throw_if_down() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::chrono::steady_clock::now() < down_until_)
    ir::fail(ir::ErrorKind::Io, "remote cache " + options_.url + ": failed moments ago; try again in a few seconds");
}

bool RemoteStore::with(const std::function<void(RedisConnection&)>& f) const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (std::chrono::steady_clock::now() < down_until_) return false;
  }
  try {
    auto c = take();
    f(*c);
    give_back(std::move(c));
    bool recovered = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      recovered = std::exchange(warned_, false);
    }
    if (recovered) log_(1, "remote cache " + options_.url + " answers again");
    return true;
  } catch (const ir::Error& e) {
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      down_until_ = std::chrono::steady_clock::now() + kRetryAfter;
      idle_.clear();  // after a failure no connection is trusted to be in step
      first = !std::exchange(warned_, true);
    }
    if (first) log_(2, std::string(e.what()) + "; using the local cache only, and trying the remote one again every 5 s");
    return false;
  }
}

RemoteStore::Fetch RemoteStore::fetch(RedisConnection& c, const std::string& key, RawEntry& out, std::string& note) const {
  const std::string header_key = prefix_ + "e:" + key;
  const RedisReply header = c.command({"GET", header_key});
  if (c.is_nil(header)) return Fetch::Miss;
  const std::string_view text = c.string(header);
  auto refuse = [&](const std::string& why) {
    note = "the remote cache's entry " + key + " was refused: " + why;
    if (!options_.read_only) {
      c.command({"INCR", prefix_ + "refused"});
      remove(key);
    }
    return Fetch::Refused;
  };
  RemoteHeader h;
  if (std::string bad = parse_remote_header(text, h); !bad.empty()) return refuse(bad);
  out.manifest = std::move(h.manifest);
  out.tag = std::move(h.tag);
  const std::string& gen = h.gen;
  // Nothing is fetched for a manifest that does not verify.
  std::optional<Manifest> m;
  if (std::string bad = check_manifest(auth_, key, out.manifest, out.tag, m); !bad.empty()) return refuse(bad);
  int64_t sizes[3], total = 0;
  for (int i = 0; i < 3; ++i) total += sizes[i] = m->files.at(kEntryFiles[i]).bytes;
  if (total > kMaxEntryBytes) return refuse("it is larger than 16 GiB");
  const uint64_t chunks = (uint64_t(total) + kChunkBytes - 1) / kChunkBytes;
  if (h.chunks != chunks) return refuse("its header's chunk count does not fit its manifest");
  out.object.assign(size_t(sizes[0]), '\0');
  out.program.assign(size_t(sizes[1]), '\0');
  out.weights_bytes = size_t(sizes[2]);
  out.weights.reset(static_cast<char*>(ir::allocate_buffer(std::max<size_t>(out.weights_bytes, 1))), &std::free);
  if (!out.weights) ir::fail(ir::ErrorKind::Io, "remote cache: no memory for an entry of " + std::to_string(total) + " bytes");
  char* files[3] = {out.object.data(), out.program.data(), out.weights.get()};
  // Hashed as the chunks come, in order, while the next ones travel.
  Sha256 digests[3];
  // Copies the entry's bytes [at, at + n) from a chunk into the files they belong to.
  auto place = [&](int64_t at, const char* from, int64_t n) {
    int64_t start = 0;
    for (int i = 0; i < 3 && n > 0; start += sizes[i++]) {
      if (at >= start + sizes[i]) continue;
      const int64_t k = std::min(n, start + sizes[i] - at);
      std::memcpy(files[i] + (at - start), from, size_t(k));
      digests[i].update(from, size_t(k));
      at += k;
      from += k;
      n -= k;
    }
  };
  auto send_trip = [&](uint64_t first) {
    std::vector<std::string> names;
    for (uint64_t i = first; i < std::min<uint64_t>(chunks, first + kChunksPerTrip); ++i)
      names.push_back(prefix_ + "c:" + key + ":" + gen + ":" + std::to_string(i));
    std::vector<RedisConnection::Command> gets;
    for (const auto& n : names) gets.push_back({"GET", n});
    c.send(gets);
    return uint64_t(gets.size());
  };
  uint64_t sent = 0, received = 0;
  // Reads the replies still travelling, so that the connection stays in step.
  auto drain = [&] {
    for (; received < sent; ++received) c.receive("GET");
  };
  if (chunks > 0) sent = send_trip(0);
  for (uint64_t first = 0; first < chunks; first += kChunksPerTrip) {
    if (first + kChunksPerTrip < chunks) sent += send_trip(first + kChunksPerTrip);
    for (uint64_t i = first; i < std::min<uint64_t>(chunks, first + kChunksPerTrip); ++i) {
      const RedisReply reply = c.receive("GET");
      ++received;
      if (c.is_nil(reply)) {
        // Evicted (maxmemory) or removed: the header goes too, so that a
        // whole entry can take its place.
        drain();
        note = "the remote entry lost a chunk (evicted)";
        if (!options_.read_only) remove(key);
        return Fetch::Miss;
      }
      const std::string_view chunk = c.string(reply);
      const int64_t at = int64_t(i * kChunkBytes), want = std::min<int64_t>(int64_t(kChunkBytes), total - at);
      if (int64_t(chunk.size()) != want) {
        drain();
        return refuse("chunk " + std::to_string(i) + " has " + std::to_string(chunk.size()) + " bytes, not " +
                      std::to_string(want));
      }
      place(at, chunk.data(), want);
    }
  }
  for (int i = 0; i < 3; ++i)
    if (digests[i].hex() != m->files.at(kEntryFiles[i]).sha256)
      return refuse(std::string(kEntryFiles[i]) + " does not match its digest (corrupted or altered)");
  return Fetch::Hit;
}

RemoteStore::Obtained RemoteStore::obtain(const std::string& key, const std::function<bool()>& local_appeared) const {
  Obtained o;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.wait_ms);
  auto pause = std::chrono::milliseconds(10);
  const std::string token = hex(random_bytes(12));
  for (;;) {
    enum { Wait, Compile, Done } next = Compile;
    auto raw = std::make_shared<RawEntry>();
    const bool answered = with([&](RedisConnection& c) {
      std::string note;
      switch (fetch(c, key, *raw, note)) {
        case Fetch::Hit:
          o.entry = raw;
          next = Done;
          return;
        case Fetch::Refused:
          o.refused = true;
          o.note = note;
          log_(2, note);
          next = Compile;
          break;
        case Fetch::Miss: break;
      }
      const std::string lease = prefix_ + "l:" + key;
      if (options_.read_only) {
        next = !o.refused && c.integer(c.command({"EXISTS", lease})) ? Wait : Compile;
        return;
      }
      const std::string ms = std::to_string(options_.lease_ms);
      if (!c.is_nil(c.command({"SET", lease, token, "NX", "PX", ms}))) {
        o.lease = std::make_shared<Lease>(*this, lease, token);
        next = Compile;
      } else {
        next = o.refused ? Compile : Wait;
      }
    });
    if (!answered) {
      o.note = "the remote cache is not available";
      return o;
    }
    if (next != Wait) return o;
    if (std::chrono::steady_clock::now() + pause > deadline) {
      o.note = "waited " + std::to_string(options_.wait_ms) + " ms for another host's compile; compiled here";
      return o;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
    if (local_appeared()) {
      o.local = true;
      return o;
    }
  }
}

bool RemoteStore::push(const std::string& key, const RawEntry& raw) const {
  bool pushed = false;
  with([&](RedisConnection& c) { pushed = upload(c, key, raw); });
  return pushed;
}

bool RemoteStore::push_or_throw(const std::string& key, const RawEntry& raw) const {
  throw_if_down();
  auto c = take();
  const bool pushed = upload(*c, key, raw);
  give_back(std::move(c));
  return pushed;
}

bool RemoteStore::upload(RedisConnection& c, const std::string& key, const RawEntry& raw) const {
  if (options_.read_only) return false;
  const std::string header_key = prefix_ + "e:" + key;
  if (c.integer(c.command({"EXISTS", header_key}))) return false;
  const std::string gen = hex(random_bytes(8));
  const size_t total = raw.object.size() + raw.program.size() + raw.weights_bytes;
  const uint64_t chunks = (total + kChunkBytes - 1) / kChunkBytes;
  std::vector<std::string> names;
  for (uint64_t i = 0; i < chunks; ++i) names.push_back(prefix_ + "c:" + key + ":" + gen + ":" + std::to_string(i));
  // A chunk straddling two files is assembled; the rest are sent from where they lie.
  std::string straddle;
  auto chunk = [&](uint64_t i) -> std::string_view {
    const size_t at = size_t(i * kChunkBytes), n = std::min(kChunkBytes, total - at);
    size_t start = 0;
    for (int f = 0; f < 3; ++f) {
      const std::string_view file = raw.file(f);
      if (at >= start && at + n <= start + file.size()) return file.substr(at - start, n);
      start += file.size();
    }
    straddle.clear();
    start = 0;
    for (int f = 0; f < 3; ++f) {
      const std::string_view file = raw.file(f);
      const size_t lo = std::max(at, start), hi = std::min(at + n, start + file.size());
      if (lo < hi) straddle.append(file.substr(lo - start, hi - lo));
      start += file.size();
    }
    return straddle;
  };
  for (uint64_t i = 0; i < chunks; ++i) c.command({"SET", names[i], chunk(i)});
  const std::string header = to_text(RemoteHeader{gen, chunks, raw.manifest, raw.tag});
  if (c.is_nil(c.command({"SET", header_key, header, "NX"}))) {
    // Another host published it first: ours would never be read.
    std::vector<RedisConnection::Command> dels;
    for (const auto& n : names) dels.push_back({"DEL", n});
    c.pipeline(dels);
    return false;
  }
  return true;
}

std::vector<RemoteStore::Listed> RemoteStore::list(bool fetch_files) const {
  throw_if_down();
  auto c = take();
  std::vector<Listed> out;
  std::string cursor = "0";
  std::vector<std::string> keys;
  do {
    auto [next, found] = c->scan(c->command({"SCAN", cursor, "MATCH", prefix_ + "e:*", "COUNT", "1000"}));
    cursor = next;
    for (auto& k : found) keys.push_back(k.substr(prefix_.size() + 2));
  } while (cursor != "0");
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  for (const auto& key : keys) {
    Listed l;
    l.key = key;
    if (fetch_files) {
      RawEntry raw;
      std::string note;
      const Fetch f = fetch(*c, key, raw, note);
      if (f == Fetch::Miss) continue;  // gone meanwhile, or lost a chunk (then removed)
      if (f == Fetch::Refused) l.problem = note;
      check_manifest(auth_, key, raw.manifest, raw.tag, l.manifest);
    } else {
      const RedisReply reply = c->command({"GET", prefix_ + "e:" + key});
      if (c->is_nil(reply)) continue;
      RemoteHeader h;
      l.problem = parse_remote_header(c->string(reply), h);
      if (l.problem.empty()) l.problem = check_manifest(auth_, key, h.manifest, h.tag, l.manifest);
    }
    if (l.manifest)
      for (const char* f : kEntryFiles) l.bytes += l.manifest->files.at(f).bytes;
    out.push_back(std::move(l));
  }
  give_back(std::move(c));
  return out;
}

int64_t RemoteStore::refused_count() const {
  throw_if_down();
  auto c = take();
  const RedisReply r = c->command({"GET", prefix_ + "refused"});
  int64_t n = 0;
  if (!c->is_nil(r)) {
    const std::string_view s = c->string(r);
    n = std::strtoll(std::string(s).c_str(), nullptr, 10);
  }
  give_back(std::move(c));
  return n;
}

void RemoteStore::remove(const std::string& key) const {
  auto c = take();
  std::vector<std::string> names{prefix_ + "e:" + key};
  std::string cursor = "0";
  do {
    auto [next, found] = c->scan(c->command({"SCAN", cursor, "MATCH", prefix_ + "c:" + key + ":*", "COUNT", "1000"}));
    cursor = next;
    names.insert(names.end(), found.begin(), found.end());
  } while (cursor != "0");
  std::vector<RedisConnection::Command> dels;
  for (const auto& n : names) dels.push_back({"DEL", n});
  c->pipeline(dels);
  give_back(std::move(c));
}

int64_t RemoteStore::remove_orphans() const {
  throw_if_down();
  auto c = take();
  std::vector<std::string> chunk_keys;
  std::string cursor = "0";
  do {
    auto [next, found] = c->scan(c->command({"SCAN", cursor, "MATCH", prefix_ + "c:*", "COUNT", "1000"}));
    cursor = next;
    chunk_keys.insert(chunk_keys.end(), found.begin(), found.end());
  } while (cursor != "0");
  int64_t removed = 0;
  for (const auto& ck : chunk_keys) {
    // c:KEY:GEN:I: orphaned unless KEY's header names GEN.
    const std::string rest = ck.substr(prefix_.size() + 2);
    const size_t a = rest.find(':'), b = rest.rfind(':');
    if (a == std::string::npos || a == b) continue;
    const std::string key = rest.substr(0, a), gen = rest.substr(a + 1, b - a - 1);
    const RedisReply reply = c->command({"GET", prefix_ + "e:" + key});
    RemoteHeader h;
    if (!c->is_nil(reply) && parse_remote_header(c->string(reply), h).empty() && h.gen == gen) continue;
    const RedisReply idle = c->command({"OBJECT", "IDLETIME", ck});
    if (!c->is_nil(idle) && c->integer(idle) >= kOrphanAfter.count()) removed += c->integer(c->command({"DEL", ck}));
  }
  give_back(std::move(c));
  return removed;
}

}  // namespace kiln::cache
