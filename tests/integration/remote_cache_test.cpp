// The fleet's remote cache against a real redis-server that each test starts
// on a loopback port: hosts are separate cache directories, processes are
// the real `kiln` command (or Runtimes in this process, where hundreds of
// attempts are wanted). Compiles are counted, outputs compared, entries in
// Redis tampered with, and the server killed, slowed and filled.
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <random>

#include "cache_fixture.hpp"

namespace {

using namespace kiln;

const std::vector<std::string> kRedisPaths = {"/usr/bin/redis-server", "/usr/sbin/redis-server"};

// A port nobody listens on right now.
int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof a;
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &n);
  ::close(s);
  return ntohs(a.sin_port);
}

// A redis-server of our own, on a loopback port or a Unix socket, stopped when this goes.
class RedisServer {
 public:
  explicit RedisServer(fs::path dir, bool unix_socket = false)
      : dir_(std::move(dir)), port_(unix_socket ? 0 : free_port()), socket_(unix_socket ? dir_ / "redis.sock" : fs::path()) {
    start();
  }
  ~RedisServer() { stop(); }

  void start() {
    std::string path;
    for (const auto& p : kRedisPaths)
      if (fs::exists(p)) path = p;
    ASSERT_FALSE(path.empty()) << "redis-server is not installed (scripts/setup.sh installs it)";
    fs::create_directories(dir_);
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string log = (dir_ / "redis.log").string(), port = std::to_string(port_);
      if (!std::freopen(log.c_str(), "a", stdout)) ::_exit(126);
      const char* sock = socket_.empty() ? "" : socket_.c_str();
      ::execl(path.c_str(), path.c_str(), "--port", port.c_str(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
              "--dir", dir_.c_str(), "--unixsocket", sock, "--unixsocketperm", "700", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 200; ++i) {
      if (redisContext* c = socket_.empty() ? redisConnect("127.0.0.1", port_) : redisConnectUnix(socket_.c_str())) {
        const bool up = !c->err;
        redisFree(c);
        if (up) return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    FAIL() << "redis-server did not start on port " << port_;
  }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  std::string url() const {
    return socket_.empty() ? "redis://127.0.0.1:" + std::to_string(port_) : "unix://" + socket_.string();
  }
  int port() const { return port_; }

 private:
  fs::path dir_;
  int port_;
  fs::path socket_;
  pid_t pid_ = -1;
};

// A client to look at and tamper with what Kiln stored.
class Redis {
 public:
  explicit Redis(int port) : c_(redisConnect("127.0.0.1", port)) {}
  ~Redis() { redisFree(c_); }
  redisReply* cmd(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<size_t> len;
    for (const auto& a : args) {
      argv.push_back(a.data());
      len.push_back(a.size());
    }
    if (reply_) freeReplyObject(reply_);
    reply_ = static_cast<redisReply*>(redisCommandArgv(c_, int(argv.size()), argv.data(), len.data()));
    return reply_;
  }
  std::string get(const std::string& key) {
    redisReply* r = cmd({"GET", key});
    return r && r->type == REDIS_REPLY_STRING ? std::string(r->str, r->len) : std::string();
  }
  std::vector<std::string> keys(const std::string& pattern) {
    std::vector<std::string> out;
    redisReply* r = cmd({"KEYS", pattern});
    for (size_t i = 0; r && i < r->elements; ++i) out.emplace_back(r->element[i]->str, r->element[i]->len);
    std::sort(out.begin(), out.end());
    return out;
  }
  Redis(const Redis&) = delete;
  Redis& operator=(const Redis&) = delete;

 private:
  redisContext* c_;
  redisReply* reply_ = nullptr;
};

class RemoteCacheTest : public CacheTest {
 protected:
  void SetUp() override {
    CacheTest::SetUp();
    redis_ = std::make_unique<RedisServer>(root_ / "redis");
    key_ = root_ / "fleet.key";
    write_key(key_, "0123456789abcdef0123456789abcdef");
  }
  void TearDown() override {
    redis_.reset();
    CacheTest::TearDown();
  }

  static void write_key(const fs::path& p, const std::string& secret) {
    std::ofstream(p, std::ios::trunc) << secret;
    fs::permissions(p, fs::perms::owner_read | fs::perms::owner_write);
  }

  // The environment of a host: its own cache directory, the fleet's Redis and key.
  std::vector<std::string> host(const std::string& name, const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> env{"KILN_CACHE_DIR=" + (root_ / ("host_" + name)).string(), "KILN_CACHE_KEY_FILE=" + key_.string(),
                                 "KILN_REMOTE_CACHE=" + redis_->url()};
    env.insert(env.end(), extra.begin(), extra.end());  // later ones win
    return env;
  }

  // `kiln run` of the digit (batch 1) or random inputs on `host`; its JSON, or discarded.
  json run_on(const std::vector<std::string>& env, int batch = 1, const std::string& out_dir = "") {
    std::vector<std::string> args{"run", kModel, "--json", "--threads", "1"};
    if (batch == 1)
      args.insert(args.end(), {"--input", "image=" + kDigit});
    else
      args.insert(args.end(), {"--random-inputs", "--dim", "batch=" + std::to_string(batch)});
    if (!out_dir.empty()) args.insert(args.end(), {"--output-dir", out_dir});
    Result r = Child(args, env, root_).wait();
    EXPECT_EQ(r.code, 0) << r.err;
    last_err_ = r.err;
    return json::parse(r.out, nullptr, false);
  }

  std::string prefix() {
    auto headers = Redis(redis_->port()).keys("kiln:*:e:*");
    return headers.empty() ? "" : headers[0].substr(0, headers[0].find(":e:") + 1);
  }

  // In this process: a Runtime of a host with its own directory.
  Runtime runtime(const std::string& host_name, RuntimeOptions o = {}) const {
    o.threads = 1;
    o.cache_dir = (root_ / ("host_" + host_name)).string();
    o.cache_key_file = key_.string();
    if (o.remote_cache.empty()) o.remote_cache = redis_->url();
    o.logger = [](LogLevel, const std::string&) {};
    return Runtime(o);
  }

  std::unique_ptr<RedisServer> redis_;
  fs::path key_;
};

std::string outcome_of(const json& j) { return j["specializations"][0]["cache"].get<std::string>(); }

TEST_F(RemoteCacheTest, AHostWithAnEmptyCacheLoadsTheFleetsEntryWithoutCompiling) {
  const json first = run_on(host("a"), 1, (root_ / "out_a").string());
  ASSERT_FALSE(first.is_discarded());
  EXPECT_EQ(outcome_of(first), "miss");
  const json second = run_on(host("b"), 1, (root_ / "out_b").string());
  ASSERT_FALSE(second.is_discarded());
  EXPECT_EQ(outcome_of(second), "hit (remote)") << last_err_;
  EXPECT_EQ(second["codegen_runs"].get<int64_t>(), 0);
  const std::string out = read_file(root_ / "out_a" / "probabilities.npy");
  EXPECT_FALSE(out.empty());
  EXPECT_EQ(out, read_file(root_ / "out_b" / "probabilities.npy"));
  // What came from the fleet was stored locally: the next process is a local hit.
  EXPECT_EQ(outcome_of(run_on(host("b"))), "hit");
  // Another key: the fleet's namespace differs, so it is a miss, not a refusal.
  write_key(root_ / "other.key", "another fleet's secret, 32 bytes");
  const json foreign = run_on(host("c", {"KILN_CACHE_KEY_FILE=" + (root_ / "other.key").string()}));
  EXPECT_EQ(outcome_of(foreign), "miss");
  Result ls = Child({"cache", "ls", "--remote", "--json"}, host("a"), root_).wait();
  ASSERT_EQ(ls.code, 0) << ls.err;
  const json listed = json::parse(ls.out);
  EXPECT_EQ(listed["entries"].size(), 1u) << ls.out;
  EXPECT_EQ(listed["refused"], 0);
}

TEST_F(RemoteCacheTest, EightProcessesOnTwoHostsCompileEachKeyOnce) {
  std::vector<std::unique_ptr<Child>> children;
  for (int i = 0; i < 8; ++i) {
    // Two keys: batch 2 and batch 3, each asked by four processes on two hosts.
    const std::string batch = i % 2 ? "2" : "3";
    children.push_back(std::make_unique<Child>(
        std::vector<std::string>{"compile", kModel, "--dim", "batch=" + batch, "--threads", "1", "--json"},
        host(i < 4 ? "a" : "b"), root_));
  }
  std::map<std::string, int> outcomes;
  int64_t codegen = 0;
  for (auto& c : children) {
    Result r = c->wait();
    ASSERT_EQ(r.code, 0) << r.err;
    const json j = json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    outcomes[j["cache"].get<std::string>()]++;
    codegen += j["codegen_runs"].get<int64_t>();
  }
  EXPECT_EQ(outcomes["miss"], 2) << json(outcomes).dump();
  EXPECT_EQ(outcomes["hit"] + outcomes["hit (remote)"], 6) << json(outcomes).dump();
  EXPECT_EQ(codegen, 2);
}

TEST_F(RemoteCacheTest, WhenTheCompilingHostDiesAnotherTakesOverAfterItsLease) {
  // Host a compiles, then stalls while storing its entry, holding the lease.
  Child stalled({"run", kModel, "--input", "image=" + kDigit, "--threads", "1"},
                host("a", {std::string("LD_PRELOAD=") + KILN_TEST_STALL_PRELOAD, "KILN_TEST_STALL_AFTER=object.o",
                           "KILN_REMOTE_CACHE_LEASE_MS=1500"}),
                root_);
  bool compiled = false;
  for (int i = 0; i < 600 && !compiled; ++i) {
    std::error_code ec;
    for (const auto& d : fs::directory_iterator(root_ / "host_a" / "tmp", ec))
      if (fs::exists(d.path() / "object.o")) compiled = true;
    if (!compiled) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(compiled);
  EXPECT_EQ(Redis(redis_->port()).keys("kiln:*:l:*").size(), 1u);
  stalled.kill();
  stalled.wait();
  // Host b waits for a's lease to expire, then compiles itself.
  const auto start = std::chrono::steady_clock::now();
  const json b = run_on(host("b"));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(outcome_of(b), "miss");
  EXPECT_LT(waited, 30.0);
  EXPECT_EQ(outcome_of(run_on(host("c"))), "hit (remote)");
}

TEST_F(RemoteCacheTest, AWaiterCompilesItselfAfterItsBound) {
  Child stalled({"run", kModel, "--input", "image=" + kDigit, "--threads", "1"},
                host("a", {std::string("LD_PRELOAD=") + KILN_TEST_STALL_PRELOAD, "KILN_TEST_STALL_AFTER=object.o"}), root_);
  for (int i = 0; i < 600 && Redis(redis_->port()).keys("kiln:*:l:*").empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto start = std::chrono::steady_clock::now();
  const json b = run_on(host("b", {"KILN_REMOTE_CACHE_WAIT_MS=1000"}));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stalled.kill();
  stalled.wait();
  EXPECT_EQ(outcome_of(b), "miss");
  EXPECT_NE(b["specializations"][0]["cache_note"].get<std::string>().find("waited 1000 ms"), std::string::npos) << b.dump();
  // It stops polling when the next pause would pass the bound (pauses are at most 200 ms).
  EXPECT_GE(waited, 0.8);
  EXPECT_LT(waited, 20.0);
}

// Hundreds of damaged entries in Redis: byte changes, truncations, swapped
// chunks, foreign headers. None is ever loaded; each is counted and removed,
// and the host compiles and uploads a good one in its place.
TEST_F(RemoteCacheTest, TamperedEntriesInRedisAreNeverLoaded) {
  const std::string expected = [&] {
    const json j = run_on(host("origin"), 1, (root_ / "expected").string());
    EXPECT_EQ(outcome_of(j), "miss");
    return read_file(root_ / "expected" / "probabilities.npy");
  }();
  ASSERT_FALSE(expected.empty());
  const std::string p = prefix();
  ASSERT_FALSE(p.empty());
  Redis redis(redis_->port());
  std::mt19937 rng(42);
  std::vector<float> image = [&] {
    const std::string npy = read_file(kDigit);
    std::vector<float> v(64);
    std::memcpy(v.data(), npy.data() + npy.size() - 256, 256);
    return v;
  }();
  int refused = 0;
  for (int round = 0; round < 240; ++round) {
    const std::vector<std::string> headers = redis.keys(p + "e:*");
    ASSERT_EQ(headers.size(), 1u) << "round " << round;
    const json header = json::parse(redis.get(headers[0]));
    const std::string gen = header["gen"];
    const int chunks = header["chunks"];
    const std::string chunk0 = headers[0].substr(0, p.size()) + "c:" + headers[0].substr(p.size() + 2) + ":" + gen + ":";
    std::string what;
    const int kind = round % 6;
    if (kind <= 2) {  // a byte changed anywhere in the files
      const int c = int(rng() % uint32_t(chunks));
      std::string bytes = redis.get(chunk0 + std::to_string(c));
      const size_t at = rng() % bytes.size();
      bytes[at] = char(bytes[at] ^ char(1 + rng() % 255));
      redis.cmd({"SET", chunk0 + std::to_string(c), bytes});
      what = "byte " + std::to_string(at) + " of chunk " + std::to_string(c);
    } else if (kind == 3) {  // a chunk truncated
      const int c = int(rng() % uint32_t(chunks));
      std::string bytes = redis.get(chunk0 + std::to_string(c));
      bytes.resize(rng() % bytes.size());
      redis.cmd({"SET", chunk0 + std::to_string(c), bytes});
      what = "chunk " + std::to_string(c) + " truncated";
    } else if (kind == 4) {  // the manifest edited, or the tag replaced
      json h = header;
      std::string m = h["manifest"];
      m[rng() % m.size()] ^= 4;
      h[round % 12 == 4 ? "manifest" : "tag"] = round % 12 == 4 ? m : std::string(64, 'a');
      redis.cmd({"SET", headers[0], h.dump()});
      what = "header";
    } else {  // the object's and the weights' first bytes swapped, or chunks swapped
      if (chunks > 1) {
        const std::string a = redis.get(chunk0 + "0"), b = redis.get(chunk0 + std::to_string(chunks - 1));
        redis.cmd({"SET", chunk0 + "0", b});
        redis.cmd({"SET", chunk0 + std::to_string(chunks - 1), a});
        what = "chunks swapped";
      } else {
        std::string bytes = redis.get(chunk0 + "0");
        std::rotate(bytes.begin(), bytes.begin() + 64, bytes.end());
        redis.cmd({"SET", chunk0 + "0", bytes});
        what = "bytes rotated";
      }
    }
    SCOPED_TRACE(what + " (round " + std::to_string(round) + ")");
    fs::remove_all(root_ / "host_victim");
    Runtime rt = runtime("victim");
    Model model = Model::load(rt, kModel);
    std::vector<std::pair<std::string, Tensor>> in{{"image", Tensor::view(DType::Float32, {1, 1, 8, 8}, image.data())}};
    const std::vector<Tensor> out = model.run(in);
    rt.wait_for_cache();
    const SpecializationStats s = model.specializations().at(0);
    // A byte change inside padding between files that no digest covers
    // does not exist: every byte is in some file.
    ASSERT_NE(s.cache, CacheOutcome::RemoteHit);
    EXPECT_EQ(s.cache, CacheOutcome::Rebuild) << s.cache_note;
    refused += s.cache == CacheOutcome::Rebuild;
    const std::string got(static_cast<const char*>(out[0].data()), out[0].nbytes());
    EXPECT_EQ(got, expected.substr(expected.size() - got.size()));
  }
  Result ls = Child({"cache", "ls", "--remote", "--json"}, host("origin"), root_).wait();
  ASSERT_EQ(ls.code, 0) << ls.err;
  EXPECT_EQ(json::parse(ls.out)["refused"], refused);
  // And the entry in Redis now is a good one.
  EXPECT_EQ(outcome_of(run_on(host("last"))), "hit (remote)");
}

TEST_F(RemoteCacheTest, AMissingKeyOrAStoreThatIsDownCostsOneWarning) {
  // No key: the remote tier is not used at all.
  const json nokey = run_on({"KILN_CACHE_DIR=" + (root_ / "host_n").string(), "KILN_REMOTE_CACHE=" + redis_->url()});
  EXPECT_EQ(outcome_of(nokey), "miss");
  EXPECT_NE(last_err_.find("needs the cache's key"), std::string::npos) << last_err_;
  EXPECT_TRUE(Redis(redis_->port()).keys("*").empty());
  // Nothing listens: one warning, the local tier works.
  const auto start = std::chrono::steady_clock::now();
  const std::string nobody = "redis://127.0.0.1:" + std::to_string(free_port());
  const json down = run_on(host("d", {"KILN_REMOTE_CACHE=" + nobody}));
  EXPECT_EQ(outcome_of(down), "miss");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 20.0);
  EXPECT_NE(last_err_.find("using the local cache only"), std::string::npos) << last_err_;
  EXPECT_EQ(outcome_of(run_on(host("d", {"KILN_REMOTE_CACHE=" + nobody}))), "hit");
  // A server that accepts and never answers: bounded by the timeout.
  const int silent = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof a;
  ASSERT_EQ(::bind(silent, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ::listen(silent, 16);
  ::getsockname(silent, reinterpret_cast<sockaddr*>(&a), &n);
  const auto t = std::chrono::steady_clock::now();
  const json slow = run_on(host(
      "s", {"KILN_REMOTE_CACHE=redis://127.0.0.1:" + std::to_string(ntohs(a.sin_port)), "KILN_REMOTE_CACHE_TIMEOUT_MS=300"}));
  ::close(silent);
  EXPECT_EQ(outcome_of(slow), "miss");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count(), 20.0);
  EXPECT_NE(last_err_.find("no answer within the timeout"), std::string::npos) << last_err_;
  // Malformed settings are errors, not warnings.
  Result bad =
      Child({"run", kModel, "--input", "image=" + kDigit}, host("x", {"KILN_REMOTE_CACHE=http://example"}), root_).wait();
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("not a Redis address"), std::string::npos) << bad.err;
}

TEST_F(RemoteCacheTest, RedisKilledAndRestartedMidRun) {
  std::vector<float> image(64, 0.5f);
  Runtime rt = runtime("a");
  Model model = Model::load(rt, kModel);
  auto run_batch = [&](int64_t batch) {
    std::vector<float> in(size_t(batch) * 64, 0.25f);
    return model.run({{"image", Tensor::view(DType::Float32, {batch, 1, 8, 8}, in.data())}});
  };
  run_batch(1);
  rt.wait_for_cache();
  EXPECT_EQ(model.specializations().back().cache, CacheOutcome::Miss);
  redis_->stop();
  const std::vector<Tensor> out = run_batch(2);  // the store is gone: compiled, stored locally
  rt.wait_for_cache();
  EXPECT_EQ(model.specializations().back().cache, CacheOutcome::Miss);
  redis_->start();  // empty now
  // Within the retry delay the store is left alone; after it, used again.
  std::this_thread::sleep_for(std::chrono::milliseconds(5200));
  run_batch(3);
  rt.wait_for_cache();
  EXPECT_EQ(Redis(redis_->port()).keys("kiln:*:e:*").size(), 1u);
  // Another host gets batch 3 from the fleet, and computes batch 2 alike.
  Runtime other = runtime("b");
  Model m2 = Model::load(other, kModel);
  std::vector<float> in3(3 * 64, 0.25f), in2(2 * 64, 0.25f);
  m2.run({{"image", Tensor::view(DType::Float32, {3, 1, 8, 8}, in3.data())}});
  EXPECT_EQ(m2.specializations().back().cache, CacheOutcome::RemoteHit);
  const std::vector<Tensor> out2 = m2.run({{"image", Tensor::view(DType::Float32, {2, 1, 8, 8}, in2.data())}});
  EXPECT_EQ(std::memcmp(out[0].data(), out2[0].data(), out[0].nbytes()), 0);
}

TEST_F(RemoteCacheTest, AFullOrEvictingStoreIsSurvived) {
  Redis redis(redis_->port());
  // Smaller than one entry: every upload is refused with an out-of-memory error.
  redis.cmd({"CONFIG", "SET", "maxmemory", "1mb"});
  redis.cmd({"CONFIG", "SET", "maxmemory-policy", "noeviction"});
  EXPECT_EQ(outcome_of(run_on(host("a", {}), 4)), "miss");
  EXPECT_TRUE(redis.keys("kiln:*:e:*").empty());
  redis.cmd({"CONFIG", "SET", "maxmemory", "0"});
  // Uploaded; then one chunk evicted, as maxmemory would.
  EXPECT_EQ(outcome_of(run_on(host("b", {}), 2)), "miss");
  const std::vector<std::string> chunks = redis.keys("kiln:*:c:*");
  ASSERT_FALSE(chunks.empty());
  redis.cmd({"DEL", chunks.back()});
  const json c = run_on(host("c", {}), 2);
  EXPECT_EQ(outcome_of(c), "miss");  // not refused: a lost chunk is a miss
  EXPECT_EQ(outcome_of(run_on(host("d", {}), 2)), "hit (remote)");
}

TEST_F(RemoteCacheTest, ReadOnlyHostsPrivateWeightsAndModelsFromMemoryUploadNothing) {
  EXPECT_EQ(outcome_of(run_on(host("ro", {"KILN_REMOTE_CACHE_READ_ONLY=1"}))), "miss");
  Redis redis(redis_->port());
  EXPECT_TRUE(redis.keys("kiln:*:e:*").empty());
  std::vector<float> image(64, 0.5f);
  const std::vector<std::pair<std::string, Tensor>> in{{"image", Tensor::view(DType::Float32, {1, 1, 8, 8}, image.data())}};
  {
    Runtime rt = runtime("p");
    Model model = Model::load(rt, kModel, Model::LoadOptions{true});
    model.run(in);
    rt.wait_for_cache();
    EXPECT_EQ(model.specializations().at(0).cache, CacheOutcome::Miss);
  }
  {
    Runtime rt = runtime("m");
    const std::string bytes = read_file(kModel);
    Model model = Model::load_from_memory(rt, bytes.data(), bytes.size(), Model::MemoryLoadOptions{"", true});
    model.run(in);
    rt.wait_for_cache();
  }
  EXPECT_TRUE(redis.keys("kiln:*:e:*").empty());
  // `kiln cache push` uploads what a host has; a read-only host may then pull it.
  Result push = Child({"cache", "push"}, host("p"), root_).wait();
  ASSERT_EQ(push.code, 0) << push.err;
  EXPECT_NE(push.out.find("1 entries uploaded"), std::string::npos) << push.out;
  Result pull = Child({"cache", "pull", kModel, "--dim", "batch=1", "--threads", "1", "--json"},
                      host("fresh", {"KILN_REMOTE_CACHE_READ_ONLY=1"}), root_)
                    .wait();
  ASSERT_EQ(pull.code, 0) << pull.err;
  EXPECT_EQ(json::parse(pull.out)["cache"], "hit (remote)") << pull.out;
  EXPECT_EQ(json::parse(pull.out)["codegen_runs"], 0);
}

// The local tier stays guarded with a remote one behind it: an entry
// planted in a world-writable directory and a symbolic link inside the
// cache are never used, and the fleet's entry takes their place.
TEST_F(RemoteCacheTest, APlantedEntryOrALinkInTheLocalCacheGivesWayToTheFleetsEntry) {
  const json origin = run_on(host("a"));
  const std::string key = origin["specializations"][0]["cache_key"];
  // Host b: a planted entry under that key, tagged with another secret.
  const fs::path planted = root_ / "host_b" / "entries" / key;
  run_on(host("b"), 2);  // makes host b's directory
  // ...which anyone may write: with the fleet's key only tagged entries load.
  fs::permissions(root_ / "host_b" / "entries", fs::perms::all);
  fs::create_directories(planted);
  for (const auto& f : fs::directory_iterator(root_ / "host_a" / "entries" / key))
    fs::copy_file(f.path(), planted / f.path().filename());
  write_tagged_manifest(planted, read_file(planted / "manifest.json"), "a planted entry's own secret key");
  const json b = run_on(host("b"));
  EXPECT_EQ(outcome_of(b), "hit (remote)") << b.dump();
  EXPECT_EQ(outcome_of(run_on(host("b"))), "hit");
  // Host c: the entry is a link to a directory elsewhere, which stays untouched.
  run_on(host("c"), 2);
  const fs::path elsewhere = root_ / "elsewhere";
  fs::copy(root_ / "host_a" / "entries" / key, elsewhere);
  fs::create_directory_symlink(elsewhere, root_ / "host_c" / "entries" / key);
  EXPECT_EQ(outcome_of(run_on(host("c"))), "hit (remote)");
  EXPECT_FALSE(fs::is_symlink(root_ / "host_c" / "entries" / key));
  EXPECT_TRUE(fs::exists(elsewhere / "manifest.json"));
}

// Over a Unix socket, with the commands that look after the remote tier.
TEST_F(RemoteCacheTest, OverAUnixSocketTheCommandsListCheckAndPruneTheRemoteTier) {
  redis_ = std::make_unique<RedisServer>(root_ / "redis_unix", true);
  EXPECT_EQ(outcome_of(run_on(host("a"))), "miss");
  EXPECT_EQ(outcome_of(run_on(host("a"), 2)), "miss");
  Result ls = Child({"cache", "ls", "--remote", "--json"}, host("a"), root_).wait();
  ASSERT_EQ(ls.code, 0) << ls.err;
  json listed = json::parse(ls.out);
  ASSERT_EQ(listed["entries"].size(), 2u) << ls.out;
  for (const auto& e : listed["entries"]) {
    EXPECT_EQ(e["problem"], "") << ls.out;
    EXPECT_GT(e["bytes"].get<int64_t>(), 0);
    EXPECT_NE(e["shapes"].get<std::string>().find("image:float32:"), std::string::npos);
  }
  // One header's tag replaced: listed as a problem, pruned; the other stays and checks whole.
  redisContext* c = redisConnectUnix((root_ / "redis_unix" / "redis.sock").c_str());
  ASSERT_TRUE(c && !c->err);
  auto* keys = static_cast<redisReply*>(redisCommand(c, "KEYS kiln:*:e:*"));
  ASSERT_EQ(keys->elements, 2u);
  const std::string victim(keys->element[0]->str, keys->element[0]->len);
  freeReplyObject(keys);
  auto* got = static_cast<redisReply*>(redisCommand(c, "GET %s", victim.c_str()));
  json header = json::parse(std::string(got->str, got->len));
  freeReplyObject(got);
  header["tag"] = std::string(64, '0');
  const std::string text = header.dump();
  freeReplyObject(redisCommand(c, "SET %s %b", victim.c_str(), text.data(), text.size()));
  redisFree(c);
  ls = Child({"cache", "ls", "--remote", "--json"}, host("a"), root_).wait();
  listed = json::parse(ls.out);
  int bad = 0;
  for (const auto& e : listed["entries"]) bad += e["problem"] != "";
  EXPECT_EQ(bad, 1) << ls.out;
  Result prune = Child({"cache", "prune", "--remote"}, host("a"), root_).wait();
  ASSERT_EQ(prune.code, 0) << prune.err;
  EXPECT_NE(prune.out.find("1 remote entries"), std::string::npos) << prune.out;
  Result verify = Child({"cache", "verify", "--remote", "--json"}, host("a"), root_).wait();
  ASSERT_EQ(verify.code, 0) << verify.err;
  listed = json::parse(verify.out);
  ASSERT_EQ(listed["entries"].size(), 1u) << verify.out;
  EXPECT_EQ(listed["entries"][0]["problem"], "");
  // Without a remote tier the remote commands are errors.
  Result none = Child({"cache", "ls", "--remote"}, {"KILN_CACHE_DIR=" + (root_ / "host_a").string()}, root_).wait();
  EXPECT_NE(none.code, 0);
  EXPECT_NE(none.err.find("no remote cache"), std::string::npos) << none.err;
}

}  // namespace
