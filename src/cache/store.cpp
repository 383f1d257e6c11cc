#include "cache/store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <random>
#include <thread>

#include "cache/cache_key.hpp"
#include "cache/hash_memo.hpp"
#include "runtime/ir/error.hpp"

namespace kiln::cache {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const char* const kFiles[] = {"object.o", "program.bin", "weights.bin"};

[[noreturn]] void fail_io(const std::string& what, const std::string& path, int err = errno) {
  ir::fail(ir::ErrorKind::Io, "cache: cannot " + what + " '" + path + "': " + std::strerror(err));
}

std::string random_suffix() {
  static thread_local std::mt19937_64 rng(std::random_device{}() ^ uint64_t(::getpid()));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%d.%016llx", int(::getpid()), static_cast<unsigned long long>(rng()));
  return buf;
}

// An open file descriptor, closed when it goes.
struct Fd {
  int fd = -1;
  explicit Fd(int f = -1) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// What a loaded entry keeps alive: its mapped files and the shared lock.
struct OpenEntry {
  Fd lock;
  std::vector<std::pair<void*, size_t>> maps;
  ~OpenEntry() {
    for (auto [p, n] : maps) ::munmap(p, n);
  }
};

// Test hook (tests/integration): a writer stops for good after writing the
// named file, so that a test can kill it there.
void stall_point(const char* file) {
  const char* at = std::getenv("KILN_CACHE_TEST_STALL_AFTER");
  if (at && std::strcmp(at, file) == 0)
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

void write_all(int fd, const void* data, size_t size, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, std::min<size_t>(size, size_t(1) << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_io("write", path);
    }
    p += n;
    size -= size_t(n);
  }
}

// Writes a file from chunks at offsets (zero padding between), flushed to
// disk. Returns its checksum.
std::string write_file(const std::string& path, const std::vector<std::pair<int64_t, std::string_view>>& chunks) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (fd.fd < 0) fail_io("create", path);
  Hasher hash;
  static const char zeros[64] = {};
  int64_t at = 0;
  for (const auto& [offset, bytes] : chunks) {
    while (at < offset) {
      const size_t pad = size_t(std::min<int64_t>(offset - at, sizeof zeros));
      write_all(fd.fd, zeros, pad, path);
      hash.update(zeros, pad);
      at += int64_t(pad);
    }
    write_all(fd.fd, bytes.data(), bytes.size(), path);
    hash.update(bytes.data(), bytes.size());
    at += int64_t(bytes.size());
  }
  if (::fsync(fd.fd) != 0) fail_io("flush", path);
  return hash.hex();
}

void sync_dir(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.fd < 0 || ::fsync(fd.fd) != 0) fail_io("flush directory", path);
}

std::string iso_time(std::time_t t) {
  char buf[32];
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Reads and checks an entry's manifest and files. Returns the problem ("" if
// none); with `out`, also maps the files (and keeps `lock`).
std::string check_entry(const std::string& dir, const std::string& key, bool checksums, json& manifest,
                        std::shared_ptr<OpenEntry> entry, backends::LoadedArtifact* out,
                        bool defer_weights_check = false) {
  const std::string manifest_path = dir + "/manifest.json";
  Fd mf(::open(manifest_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (mf.fd < 0) return std::string("no readable manifest (") + std::strerror(errno) + ")";
  std::string text;
  char buf[65536];
  for (ssize_t n; (n = ::read(mf.fd, buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      return "manifest unreadable";
    }
    text.append(buf, size_t(n));
  }
  manifest = json::parse(text, nullptr, false);
  if (manifest.is_discarded() || !manifest.is_object()) return "manifest is not valid JSON";
  if (manifest.value("format", -1) != kFormatVersion)
    return "format version " + manifest.value("format", json(nullptr)).dump() + ", this Kiln reads " + std::to_string(kFormatVersion);
  if (manifest.value("kiln_build", std::string()) != build_id())
    return "written by another Kiln build (" + manifest.value("kiln_build", std::string("?")) + ")";
  if (manifest.value("key", std::string()) != key) return "manifest is for another key";
  if (!manifest.contains("files") || !manifest["files"].is_object()) return "manifest lists no files";
  for (const char* name : kFiles) {
    const json& f = manifest["files"].value(name, json());
    if (!f.is_object() || !f.contains("bytes") || !f.contains("xxh3_128")) return std::string("manifest does not describe ") + name;
    const std::string path = dir + "/" + name;
    const timespec looked_at = coarse_now();
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st {};
    if (fd.fd < 0 || ::fstat(fd.fd, &st) != 0) return std::string(name) + " is missing";
    const int64_t want = f["bytes"].is_number_integer() ? f["bytes"].get<int64_t>() : -1;
    if (st.st_size != want) return std::string(name) + " has " + std::to_string(st.st_size) + " bytes, the manifest says " + std::to_string(want);
    if (!checksums && !out) continue;
    void* map = nullptr;
    if (st.st_size > 0) {
      map = ::mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd.fd, 0);
      if (map == MAP_FAILED) return std::string("cannot map ") + name + ": " + std::strerror(errno);
      entry->maps.push_back({map, size_t(st.st_size)});
    }
    const std::string want_hash = f["xxh3_128"].get<std::string>();
    // Only the weights are remembered: the other files are small, and read
    // whole by the loader anyway. `kiln cache verify` (no `out`) always reads.
    const bool weights = std::strcmp(name, "weights.bin") == 0, memo = out && weights;
    const std::string record = path + ".checked";
    const bool known = memo && recall_hash(record, st) == want_hash;
    auto check = [name, entry, data = map ? map : "", size = size_t(st.st_size), want_hash, memo, record, st, looked_at] {
      if (hash_hex(data, size) != want_hash) return std::string(name) + " does not match its checksum (corrupted)";
      if (memo) remember_hash(record, st, looked_at, want_hash, "checked against the manifest");
      return std::string();
    };
    if (!known) {
      if (out && defer_weights_check && weights) out->check = std::make_shared<backends::LoadCheck>(check);
      else if (std::string bad = check(); !bad.empty()) return bad;
    }
    if (out) {
      std::string_view view(static_cast<const char*>(map), size_t(st.st_size));
      if (std::strcmp(name, "object.o") == 0) out->object = view;
      else if (std::strcmp(name, "program.bin") == 0) out->program = view;
      else {
        out->weights = static_cast<const char*>(map);
        out->weights_bytes = size_t(st.st_size);
      }
    }
  }
  return "";
}

int64_t dir_bytes(const std::string& dir) {
  int64_t total = 0;
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(dir, ec))
    if (f.is_regular_file(ec)) total += int64_t(f.file_size(ec));
  return total;
}

}  // namespace

std::string default_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg == '/') return std::string(xdg) + "/kiln";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/kiln";
  return "";
}

std::string Store::entry_dir(const std::string& key) const { return dir_ + "/entries/" + key; }

std::optional<backends::LoadedArtifact> Store::open(const std::string& key, std::string& problem,
                                                    bool defer_weights_check) const {
  problem.clear();
  const std::string dir = entry_dir(key);
  auto entry = std::make_shared<OpenEntry>();
  entry->lock = Fd(::open((dir + "/lock").c_str(), O_RDONLY | O_CLOEXEC));
  if (entry->lock.fd < 0) {
    std::error_code ec;
    if (fs::exists(dir, ec)) problem = "incomplete entry (no lock file)";
    return std::nullopt;
  }
  // Being removed by another process: a miss.
  if (::flock(entry->lock.fd, LOCK_SH | LOCK_NB) != 0) return std::nullopt;
  backends::LoadedArtifact artifact;
  json manifest;
  problem = check_entry(dir, key, true, manifest, entry, &artifact, defer_weights_check);
  if (!problem.empty()) return std::nullopt;
  ::futimens(entry->lock.fd, nullptr);  // last use, for eviction; fails harmlessly when read-only
  artifact.keep_alive = entry;
  return artifact;
}

void Store::create() const {
  std::error_code ec;
  fs::create_directories(dir_ + "/entries", ec);
  if (!ec) fs::create_directories(dir_ + "/tmp", ec);
  if (ec) ir::fail(ir::ErrorKind::Io, "cache: cannot create '" + dir_ + "': " + ec.message());
  if (::access((dir_ + "/tmp").c_str(), W_OK) != 0 || ::access((dir_ + "/entries").c_str(), W_OK) != 0)
    fail_io("write into", dir_);
}

bool Store::put(const std::string& key, const json& key_inputs, const backends::Artifact& artifact, double compile_ms) const {
  create();
  std::error_code ec;
  const std::string tmp = dir_ + "/tmp/" + key + "." + random_suffix();
  if (::mkdir(tmp.c_str(), 0755) != 0) fail_io("create", tmp);
  try {
    json files = json::object();
    auto put_file = [&](const char* name, const std::vector<std::pair<int64_t, std::string_view>>& chunks, int64_t bytes) {
      files[name] = {{"bytes", bytes}, {"xxh3_128", write_file(tmp + "/" + name, chunks)}};
      stall_point(name);
    };
    put_file("object.o", {{0, artifact.object}}, int64_t(artifact.object.size()));
    put_file("program.bin", {{0, artifact.program}}, int64_t(artifact.program.size()));
    std::vector<std::pair<int64_t, std::string_view>> weights;
    for (size_t i = 0; i < artifact.weights.size(); ++i)
      weights.push_back({artifact.weight_offsets[i], {static_cast<const char*>(artifact.weights[i].first), artifact.weights[i].second}});
    put_file("weights.bin", weights, artifact.weights_bytes);
    write_file(tmp + "/lock", {});
    // The weights were hashed as they were written and nobody else writes
    // into tmp, so the writer may remember them too (if the clock has moved
    // on since it wrote them) and the first warm start need not read them.
    const timespec looked_at = coarse_now();
    if (struct stat st {}; ::stat((tmp + "/weights.bin").c_str(), &st) == 0)
      remember_hash(tmp + "/weights.bin.checked", st, looked_at, files["weights.bin"]["xxh3_128"].get<std::string>(),
                    "written with the entry");
    const std::time_t now = std::time(nullptr);
    json summary = json::parse(artifact.summary, nullptr, false);
    const json manifest = {{"format", kFormatVersion},
                           {"kiln_build", build_id()},
                           {"key", key},
                           {"key_inputs", key_inputs},
                           {"created", iso_time(now)},
                           {"compile_ms", compile_ms},
                           {"files", files},
                           {"backend", summary.is_discarded() ? json(nullptr) : summary}};
    const std::string text = manifest.dump(1);
    write_file(tmp + "/manifest.json", {{0, text}});
    stall_point("manifest.json");
    sync_dir(tmp);
    const std::string target = entry_dir(key);
    if (fs::exists(target, ec)) remove(key);  // an unusable entry (the caller found it so)
    if (::rename(tmp.c_str(), target.c_str()) != 0) {
      const int err = errno;
      fs::remove_all(tmp, ec);
      if (err == EEXIST || err == ENOTEMPTY) return false;  // another process stored it first
      fail_io("store entry", target, err);
    }
    sync_dir(dir_ + "/entries");
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  if (max_bytes_ > 0) prune(max_bytes_);
  return true;
}

std::vector<EntryInfo> Store::list(bool check_files) const {
  std::vector<EntryInfo> out;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(dir_ + "/entries", ec)) {
    EntryInfo info;
    info.key = d.path().filename().string();
    const std::string dir = d.path().string();
    info.bytes = dir_bytes(dir);
    struct stat st {};
    if (::stat((dir + "/lock").c_str(), &st) == 0) info.last_use = std::chrono::system_clock::from_time_t(st.st_mtime);
    info.problem = check_entry(dir, info.key, check_files, info.manifest, std::make_shared<OpenEntry>(), nullptr);
    out.push_back(std::move(info));
  }
  return out;
}

bool Store::remove(const std::string& key) const {
  const std::string dir = entry_dir(key);
  Fd lock(::open((dir + "/lock").c_str(), O_RDONLY | O_CLOEXEC));
  if (lock.fd >= 0 && ::flock(lock.fd, LOCK_EX | LOCK_NB) != 0) return false;  // in use
  std::error_code ec;
  fs::create_directories(dir_ + "/tmp", ec);
  const std::string dead = dir_ + "/tmp/removed." + key + "." + random_suffix();
  // Renamed first, so no reader ever sees a half-removed entry.
  if (::rename(dir.c_str(), dead.c_str()) != 0) return errno == ENOENT;
  fs::remove_all(dead, ec);
  return true;
}

std::vector<std::string> Store::prune(int64_t max_bytes) const {
  std::vector<EntryInfo> entries = list(false);
  int64_t total = 0;
  for (const auto& e : entries) total += e.bytes;
  std::sort(entries.begin(), entries.end(), [](const EntryInfo& a, const EntryInfo& b) { return a.last_use < b.last_use; });
  std::vector<std::string> removed;
  for (const auto& e : entries) {
    if (total <= max_bytes) break;
    if (remove(e.key)) {
      total -= e.bytes;
      removed.push_back(e.key);
    }
  }
  return removed;
}

std::string Store::hash_record(const struct stat& st) const {
  return dir_ + "/hashes/" + std::to_string(st.st_dev) + "." + std::to_string(st.st_ino);
}

std::string Store::recall_model_hash(const struct stat& st) const { return recall_hash(hash_record(st), st); }

void Store::remember_model_hash(const struct stat& st, const timespec& looked_at, const std::string& hash,
                                const std::string& path) const {
  std::error_code ec;
  fs::create_directories(dir_ + "/hashes", ec);
  remember_hash(hash_record(st), st, looked_at, hash, path);
}

void Store::forget_model_hashes(std::chrono::seconds age) const {
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  for (const auto& f : fs::directory_iterator(dir_ + "/hashes", ec)) {
    auto t = f.last_write_time(ec);
    if (!ec && now - t >= age) fs::remove(f.path(), ec);
  }
}

void Store::clean_tmp(std::chrono::seconds age) const {
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  for (const auto& d : fs::directory_iterator(dir_ + "/tmp", ec)) {
    auto t = d.last_write_time(ec);
    if (!ec && now - t > age) fs::remove_all(d.path(), ec);
  }
}

}  // namespace kiln::cache
