#include "cache/store.hpp"

#include <sys/file.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <random>

#include "cache/authenticator.hpp"
#include "cache/cache_dir.hpp"
#include "cache/cache_key.hpp"
#include "cache/hash_memo.hpp"
#include "runtime/ir/environment.hpp"
#include "runtime/ir/error.hpp"
#include "runtime/ir/huge_pages.hpp"

namespace kiln::cache {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kMarker = "CACHEDIR.TAG";
constexpr const char* kKilnLine = "# This directory is a cache of compiled models made by Kiln.\n";
constexpr const char* kParts[] = {"entries", "tmp", "hashes"};
constexpr const char* kManifestPurpose = "kiln cache manifest 2";
constexpr size_t kMaxManifestBytes = size_t(1) << 20;
constexpr size_t kSecretBytes = 32;

[[noreturn]] void fail_io(const std::string& what, const std::string& path, int err = errno) {
  ir::fail(ir::ErrorKind::Io, "cache: cannot " + what + " '" + path + "': " + std::strerror(err));
}

std::string random_suffix() {
  static thread_local std::mt19937_64 rng(std::random_device{}() ^ uint64_t(::getpid()));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%d.%016llx", int(::getpid()), static_cast<unsigned long long>(rng()));
  return buf;
}

// What a loaded entry keeps alive: its directory, the shared lock, its code
// read into memory and its weights, mapped or read.
struct OpenEntry {
  Fd dir;
  Fd lock;
  std::string object, program;
  void* map = nullptr;
  size_t map_bytes = 0;
  std::unique_ptr<char, decltype(&std::free)> weights{nullptr, &std::free};
  ~OpenEntry() {
    if (map) ::munmap(map, map_bytes);
  }
};

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

// Writes file `name` of directory `dir` from chunks at offsets (zero padding
// between), flushed to disk. Returns its SHA-256.
std::string write_file(int dir, const std::string& name, const std::vector<std::pair<int64_t, std::string_view>>& chunks,
                       mode_t mode) {
  Fd fd = open_file_at(dir, name, O_WRONLY | O_CREAT | O_EXCL, mode);
  if (!fd) fail_io("create", name);
  Sha256 hash;
  static const char zeros[64] = {};
  int64_t at = 0;
  for (const auto& [offset, bytes] : chunks) {
    while (at < offset) {
      const size_t pad = size_t(std::min<int64_t>(offset - at, sizeof zeros));
      write_all(fd.get(), zeros, pad, name);
      hash.update(zeros, pad);
      at += int64_t(pad);
    }
    write_all(fd.get(), bytes.data(), bytes.size(), name);
    hash.update(bytes.data(), bytes.size());
    at += int64_t(bytes.size());
  }
  if (::fsync(fd.get()) != 0) fail_io("flush", name);
  return hash.hex();
}

void sync_dir(int dir, const std::string& path) {
  if (::fsync(dir) != 0) fail_io("flush directory", path);
}

std::string iso_time(std::time_t t) {
  char buf[32];
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

bool has_marker(int root) {
  Fd fd = open_file_at(root, kMarker);
  std::string text;
  return fd && read_all(fd.get(), text, 4096) && text.rfind("Signature: 8a477f597d28d172789f06886806bc55", 0) == 0 &&
         text.find(kKilnLine) != std::string::npos;
}

std::string marker_text() {
  return std::string("Signature: 8a477f597d28d172789f06886806bc55\n") + kKilnLine +
         "# Kiln's cache commands act only on a directory that holds this file.\n"
         "# For information about cache directory tags, see https://bford.info/cachedir/\n";
}

// A private cache's secret, made on first use: written under a temporary
// name, then linked into place, so that of two processes racing one secret
// wins and both read it.
std::string read_secret(int root, const std::string& dir, bool create, std::string& secret) {
  Fd fd = open_file_at(root, "secret");
  if (!fd && errno == ENOENT) {
    if (!create) return "";
    const std::string tmp = "secret." + random_suffix();
    {
      Fd w = open_file_at(root, tmp, O_WRONLY | O_CREAT | O_EXCL, 0600);
      const std::string bytes = random_bytes(kSecretBytes);
      const bool ok = w && ::write(w.get(), bytes.data(), bytes.size()) == ssize_t(bytes.size()) && ::fsync(w.get()) == 0;
      if (!ok || (::linkat(root, tmp.c_str(), root, "secret", 0) != 0 && errno != EEXIST)) {
        const int err = errno;
        ::unlinkat(root, tmp.c_str(), 0);
        return "cannot create the cache's secret in '" + dir + "': " + std::strerror(err);
      }
      ::unlinkat(root, tmp.c_str(), 0);
    }
    fd = open_file_at(root, "secret");
  }
  struct stat st{};
  if (!fd || ::fstat(fd.get(), &st) != 0) return "cannot read the cache's secret '" + dir + "/secret': " + std::strerror(errno);
  if (std::string bad = not_private(st); !bad.empty()) return "the cache's secret '" + dir + "/secret' " + bad;
  if (st.st_mode & 077) return "the cache's secret '" + dir + "/secret' is readable by others (chmod 600)";
  if (!read_all(fd.get(), secret, 4096) || secret.size() < Authenticator::kMinSecretBytes)
    return "the cache's secret '" + dir + "/secret' is damaged; delete the cache directory";
  return "";
}

int64_t dir_bytes(int dir) {
  int64_t total = 0;
  for (const auto& name : names_in(dir))
    if (struct stat st{}; ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) total += st.st_size;
  return total;
}

}  // namespace

// The cache directory and its parts, opened (a part not made yet is
// invalid), and what entries are checked and made with.
struct Store::Layout {
  Fd root, entries, tmp, hashes;
  std::optional<Authenticator> auth;  // none until a private cache has its secret
  mode_t dir_mode = 0700, file_mode = 0600;
  bool shared = false;

  // What stops this cache from trusting a file or directory ("" if nothing).
  std::string untrusted(int fd) const {
    struct stat st{};
    if (::fstat(fd, &st) != 0) return std::strerror(errno);
    return shared ? "" : not_private(st);
  }

  // Reads and checks an entry's manifest and files. Returns the problem
  // ("" if none). With `loaded`, also reads or maps its files into `keep`.
  std::string check_entry(int dir, const std::string& key, bool digests, std::optional<Manifest>& manifest,
                          const std::shared_ptr<OpenEntry>& keep, backends::LoadedArtifact* loaded,
                          bool defer_weights_check) const {
    if (std::string bad = untrusted(dir); !bad.empty()) return "the entry " + bad;
    std::string text, tag;
    Fd mf = open_file_at(dir, "manifest.json"), tf = open_file_at(dir, "manifest.tag");
    if (!mf || !tf) return std::string("no readable manifest (") + std::strerror(errno) + ")";
    if (std::string bad = untrusted(mf.get()); !bad.empty()) return "the manifest " + bad;
    if (!read_all(mf.get(), text, kMaxManifestBytes) || !read_all(tf.get(), tag, 256)) return "manifest unreadable or too large";
    if (!auth) return "not authenticated: the cache has no secret";
    if (std::string bad = check_manifest(*auth, key, text, tag, manifest); !bad.empty()) return bad;
    const Manifest& m = *manifest;
    for (const char* name : kEntryFiles) {
      const FileRecord& want = m.files.at(name);
      const timespec looked_at = coarse_now();
      Fd fd = open_file_at(dir, name);
      struct stat st{};
      if (!fd || ::fstat(fd.get(), &st) != 0) return std::string(name) + " is missing or not a regular file";
      if (std::string bad = untrusted(fd.get()); !bad.empty()) return std::string(name) + " " + bad;
      if (st.st_size != want.bytes)
        return std::string(name) + " has " + std::to_string(st.st_size) + " bytes, the manifest says " +
               std::to_string(want.bytes);
      if (!digests && !loaded) continue;
      const bool weights = std::strcmp(name, "weights.bin") == 0;
      const size_t size = size_t(st.st_size);
      const char* data = "";
      if (size > 0 && weights && not_private(st).empty()) {
        // Nobody but this user or root can change the file under the mapping.
        keep->map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
        if (keep->map == MAP_FAILED) {
          keep->map = nullptr;
          return std::string("cannot map ") + name + ": " + std::strerror(errno);
        }
        keep->map_bytes = size;
        data = static_cast<const char*>(keep->map);
      } else if (size > 0) {
        // Read into memory that is ours: what is checked is what runs.
        char* to = nullptr;
        if (std::strcmp(name, "object.o") == 0)
          to = keep->object.assign(size, '\0').data();
        else if (std::strcmp(name, "program.bin") == 0)
          to = keep->program.assign(size, '\0').data();
        else
          keep->weights.reset(to = static_cast<char*>(ir::allocate_buffer(size)));  // 64-byte aligned
        if (!to) return std::string("no memory for ") + name;
        if (!read_exactly(fd.get(), to, size)) return std::string("cannot read ") + name;
        data = to;
      }
      // Only the weights are remembered: the other files are small, and
      // read whole by the loader anyway; and only when mapped, since a file
      // others may write can change after its identity was taken.
      // `kiln cache verify` (no `loaded`) always reads.
      const bool memo = loaded && weights && keep->map;
      const bool known = memo && recall_hash(dir, "weights.bin.checked", st, *auth) == want.sha256;
      auto check = [name, keep, data, size, want = want.sha256, memo, st, looked_at, auth = *auth, mode = file_mode] {
        if (sha256_hex(data, size) != want) return std::string(name) + " does not match its digest (corrupted or altered)";
        if (memo)
          remember_hash(keep->dir.get(), "weights.bin.checked", st, looked_at, want, "checked against the manifest", auth, mode);
        return std::string();
      };
      if (!known) {
        if (loaded && defer_weights_check && weights)
          loaded->check = std::make_shared<backends::LoadCheck>(check);
        else if (std::string bad = check(); !bad.empty())
          return bad;
      }
      if (!loaded) continue;
      const std::string_view view(data, size);
      if (std::strcmp(name, "object.o") == 0)
        loaded->object = view;
      else if (std::strcmp(name, "program.bin") == 0)
        loaded->program = view;
      else {
        loaded->weights = data;
        loaded->weights_bytes = size;
      }
    }
    return "";
  }
};

std::string default_dir() { return env::default_cache_dir(); }

std::string Store::open_layout(Layout& l, bool create) const {
  l.shared = shared();
  bool made = false;
  if (create) {
    // Parents as any program makes them; the cache itself private.
    std::error_code ec;
    fs::create_directories(fs::path(dir_).parent_path(), ec);
    made = ::mkdir(dir_.c_str(), 0700) == 0;
    if (!made && errno != EEXIST) return "cannot create '" + dir_ + "': " + std::strerror(errno);
  }
  // The directory itself is reached by the path the user gave, links and all.
  l.root = Fd(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!l.root) return errno == ENOENT && !create ? "" : "cannot open '" + dir_ + "': " + std::strerror(errno);
  struct stat st{};
  if (::fstat(l.root.get(), &st) != 0) return "cannot open '" + dir_ + "': " + std::strerror(errno);
  if (made && (st.st_mode & 07777) != 0700 && ::fchmod(l.root.get(), 0700) == 0) st.st_mode = (st.st_mode & ~07777) | 0700;
  if (!shared())
    if (std::string bad = not_private(st); !bad.empty())
      return "'" + dir_ + "' " + bad +
             "; a cache without a key (KILN_CACHE_KEY_FILE) is used only while it is private (chmod 700)";
  // A shared cache's entries are as open to its group as the directory is; never to others.
  l.dir_mode = shared() ? 0700 | (st.st_mode & 0070) : 0700;
  l.file_mode = shared() ? 0600 | (st.st_mode & 0040) : 0600;
  if (!has_marker(l.root.get())) {
    // Another process may be making the directory a cache right now: it
    // writes the marker, before anything else, under an exclusive lock.
    ::flock(l.root.get(), create ? LOCK_EX : LOCK_SH);
    std::string problem;
    if (!has_marker(l.root.get())) {
      const bool empty = names_in(l.root.get()).empty();
      if (!empty)
        problem = "'" + dir_ +
                  "' is not a Kiln cache (it is not empty and has no CACHEDIR.TAG of Kiln's; a cache of a Kiln "
                  "older than its marker can be deleted)";
      else if (create) {
        Fd fd = open_file_at(l.root.get(), kMarker, O_WRONLY | O_CREAT | O_EXCL, l.file_mode);
        const std::string text = marker_text();
        if (!fd || ::write(fd.get(), text.data(), text.size()) != ssize_t(text.size()) || ::fsync(fd.get()) != 0)
          problem = "cannot mark '" + dir_ + "' as a Kiln cache: " + std::strerror(errno);
      }
    }
    ::flock(l.root.get(), LOCK_UN);
    if (!problem.empty()) return problem;
  }
  for (const char* part : kParts) {
    Fd& fd = std::strcmp(part, "entries") == 0 ? l.entries : std::strcmp(part, "tmp") == 0 ? l.tmp : l.hashes;
    fd = open_dir_at(l.root.get(), part);
    if (!fd && errno == ENOENT && create) {
      fd = make_dir_at(l.root.get(), part, l.dir_mode);
      if (!fd && errno == EEXIST) fd = open_dir_at(l.root.get(), part);
    }
    const std::string path = dir_ + "/" + part;
    if (!fd && errno == ENOENT) continue;  // not made yet
    if (!fd && (errno == ELOOP || errno == ENOTDIR))
      return "'" + path + "' is a symbolic link or not a directory (Kiln never follows a link inside its cache)";
    if (!fd) return "cannot open '" + path + "': " + std::strerror(errno);
    if (std::string bad = l.untrusted(fd.get()); !bad.empty()) return "'" + path + "' " + bad;
  }
  if (shared()) {
    l.auth.emplace(shared_key_);
  } else {
    std::string secret;
    if (std::string bad = read_secret(l.root.get(), dir_, create, secret); !bad.empty()) return bad;
    if (!secret.empty()) l.auth.emplace(std::move(secret));
  }
  return "";
}

std::string Store::check() const {
  Layout l;
  return open_layout(l, false);
}

std::optional<backends::LoadedArtifact> Store::open(const std::string& key, std::string& problem,
                                                    bool defer_weights_check) const {
  problem.clear();
  Layout l;
  if (std::string bad = open_layout(l, false); !bad.empty() || !l.entries) {
    problem = bad;
    return std::nullopt;
  }
  auto entry = std::make_shared<OpenEntry>();
  entry->dir = open_dir_at(l.entries.get(), key);
  if (!entry->dir) {
    if (errno != ENOENT) problem = std::string("the entry is not a directory (") + std::strerror(errno) + ")";
    return std::nullopt;
  }
  entry->lock = open_file_at(entry->dir.get(), "lock");
  if (!entry->lock) {
    problem = "incomplete entry (no lock file)";
    return std::nullopt;
  }
  // Being removed by another process: a miss.
  if (::flock(entry->lock.get(), LOCK_SH | LOCK_NB) != 0) return std::nullopt;
  backends::LoadedArtifact artifact;
  std::optional<Manifest> manifest;
  problem = l.check_entry(entry->dir.get(), key, true, manifest, entry, &artifact, defer_weights_check);
  if (!problem.empty()) return std::nullopt;
  ::futimens(entry->lock.get(), nullptr);  // last use, for eviction; fails harmlessly when read-only
  artifact.keep_alive = entry;
  return artifact;
}

void Store::create() const {
  Layout l;
  if (std::string bad = open_layout(l, true); !bad.empty()) ir::fail(ir::ErrorKind::Io, "cache: " + bad);
  for (const Fd* part : {&l.tmp, &l.entries})
    if (::faccessat(part->get(), ".", W_OK, AT_EACCESS) != 0) fail_io("write into", dir_);
}

bool Store::publish(
    const std::string& key,
    const std::function<std::pair<std::string, std::string>(int, Manifest&, const Authenticator&, mode_t)>& write) const {
  Layout l;
  if (std::string bad = open_layout(l, true); !bad.empty()) ir::fail(ir::ErrorKind::Io, "cache: " + bad);
  const std::string name = key + "." + random_suffix();
  Fd dir = make_dir_at(l.tmp.get(), name, l.dir_mode);
  if (!dir) fail_io("create", dir_ + "/tmp/" + name);
  try {
    Manifest m;
    const auto [text, tag] = write(dir.get(), m, *l.auth, l.file_mode);
    write_file(dir.get(), "lock", {}, l.file_mode);
    // The weights were hashed as they were written (or checked when they
    // came) and nobody else writes into this directory, so the writer may
    // remember them too (if the clock has moved on since it wrote them) and
    // the first warm start need not read them.
    const timespec looked_at = coarse_now();
    if (struct stat st{}; ::fstatat(dir.get(), "weights.bin", &st, AT_SYMLINK_NOFOLLOW) == 0)
      remember_hash(dir.get(), "weights.bin.checked", st, looked_at, m.files["weights.bin"].sha256, "written with the entry",
                    *l.auth, l.file_mode);
    write_file(dir.get(), "manifest.tag", {{0, tag}}, l.file_mode);
    write_file(dir.get(), "manifest.json", {{0, text}}, l.file_mode);
    sync_dir(dir.get(), dir_ + "/tmp/" + name);
    // An unusable entry (the caller found it so) makes way.
    if (struct stat st{}; ::fstatat(l.entries.get(), key.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) remove(key);
    if (::renameat(l.tmp.get(), name.c_str(), l.entries.get(), key.c_str()) != 0) {
      const int err = errno;
      remove_tree_at(l.tmp.get(), name);
      if (err == EEXIST || err == ENOTEMPTY) return false;  // another process stored it first
      fail_io("store entry", dir_ + "/entries/" + key, err);
    }
    sync_dir(l.entries.get(), dir_ + "/entries");
  } catch (...) {
    remove_tree_at(l.tmp.get(), name);
    throw;
  }
  if (max_bytes_ > 0) prune(max_bytes_);
  return true;
}

bool Store::put(const std::string& key, const json& key_inputs, const backends::Artifact& artifact, double compile_ms) const {
  return publish(key, [&](int dir, Manifest& m, const Authenticator& auth, mode_t mode) {
    auto put_file = [&](const char* file, const std::vector<std::pair<int64_t, std::string_view>>& chunks, int64_t bytes) {
      m.files[file] = {bytes, write_file(dir, file, chunks, mode)};
    };
    put_file("object.o", {{0, artifact.object}}, int64_t(artifact.object.size()));
    put_file("program.bin", {{0, artifact.program}}, int64_t(artifact.program.size()));
    std::vector<std::pair<int64_t, std::string_view>> weights;
    for (size_t i = 0; i < artifact.weights.size(); ++i)
      weights.push_back(
          {artifact.weight_offsets[i], {static_cast<const char*>(artifact.weights[i].first), artifact.weights[i].second}});
    put_file("weights.bin", weights, artifact.weights_bytes);
    m.kiln_build = build_id();
    m.key = key;
    m.key_inputs = key_inputs;
    m.created = iso_time(std::time(nullptr));
    m.compile_ms = compile_ms;
    const json summary = json::parse(artifact.summary, nullptr, false);
    m.backend = summary.is_discarded() ? json(nullptr) : summary;
    std::string text = to_text(m);
    std::string tag = auth.tag(kManifestPurpose, text);
    return std::pair(std::move(text), std::move(tag));
  });
}

bool Store::put_raw(const std::string& key, const RawEntry& raw) const {
  return publish(key, [&](int dir, Manifest& m, const Authenticator& auth, mode_t mode) {
    // Checked again with this cache's secret: what is published here is
    // what any later process of this host will run.
    std::optional<Manifest> checked;
    if (std::string bad = check_raw(auth, key, raw, checked); !bad.empty())
      ir::fail(ir::ErrorKind::InvalidArgument, "cache: " + bad);
    m = *checked;
    for (int i = 0; i < 3; ++i) write_file(dir, kEntryFiles[i], {{0, raw.file(i)}}, mode);
    return std::pair(raw.manifest, raw.tag);
  });
}

std::optional<RawEntry> Store::read_raw(const std::string& key, std::string& problem) const {
  problem.clear();
  auto loaded = open(key, problem);
  if (!loaded) return std::nullopt;
  Layout l;
  Fd dir;
  RawEntry raw;
  if (open_layout(l, false).empty() && l.entries && (dir = open_dir_at(l.entries.get(), key))) {
    Fd mf = open_file_at(dir.get(), "manifest.json"), tf = open_file_at(dir.get(), "manifest.tag");
    if (!mf || !tf || !read_all(mf.get(), raw.manifest, kMaxManifestBytes) || !read_all(tf.get(), raw.tag, 256)) dir = Fd();
  }
  if (!dir) {
    problem = "the entry went while it was read";
    return std::nullopt;
  }
  raw.object = loaded->object;
  raw.program = loaded->program;
  raw.weights_bytes = loaded->weights_bytes;
  raw.weights.reset(static_cast<char*>(ir::allocate_buffer(std::max<size_t>(raw.weights_bytes, 1))), &std::free);
  if (!raw.weights) {
    problem = "no memory for the weights";
    return std::nullopt;
  }
  if (raw.weights_bytes) std::memcpy(raw.weights.get(), loaded->weights, raw.weights_bytes);
  // The manifest read now must be the one that vouched for the files read before.
  std::optional<Manifest> m;
  if (std::string bad = check_raw(*l.auth, key, raw, m); !bad.empty()) {
    problem = "the entry changed while it was read: " + bad;
    return std::nullopt;
  }
  return raw;
}

std::string check_manifest(const Authenticator& auth, const std::string& key, std::string_view text, std::string_view tag,
                           std::optional<Manifest>& out) {
  if (!auth.verify(kManifestPurpose, text, tag))
    return "the manifest's tag does not verify (written with another key, or altered)";
  Manifest m;
  if (std::string bad = parse_manifest(text, m); !bad.empty()) return bad;
  out = m;
  if (m.kiln_build != build_id()) return "written by another Kiln build (" + m.kiln_build + ")";
  if (m.key != key) return "manifest is for another key";
  return "";
}

std::string check_raw(const Authenticator& auth, const std::string& key, const RawEntry& raw, std::optional<Manifest>& out) {
  if (std::string bad = check_manifest(auth, key, raw.manifest, raw.tag, out); !bad.empty()) return bad;
  const Manifest& m = *out;
  for (int i = 0; i < 3; ++i) {
    const FileRecord& want = m.files.at(kEntryFiles[i]);
    const std::string_view data = raw.file(i);
    if (int64_t(data.size()) != want.bytes)
      return std::string(kEntryFiles[i]) + " has " + std::to_string(data.size()) + " bytes, the manifest says " +
             std::to_string(want.bytes);
    if (sha256_hex(data.data(), data.size()) != want.sha256)
      return std::string(kEntryFiles[i]) + " does not match its digest (corrupted or altered)";
  }
  return "";
}

backends::LoadedArtifact RawEntry::loaded(std::shared_ptr<const RawEntry> raw) {
  backends::LoadedArtifact a;
  a.object = raw->object;
  a.program = raw->program;
  a.weights = raw->weights.get();
  a.weights_bytes = raw->weights_bytes;
  a.keep_alive = std::const_pointer_cast<RawEntry>(std::move(raw));
  return a;
}

std::vector<EntryInfo> Store::list(bool check_files) const {
  std::vector<EntryInfo> out;
  Layout l;
  if (std::string bad = open_layout(l, false); !bad.empty()) ir::fail(ir::ErrorKind::Io, "cache: " + bad);
  if (!l.entries) return out;
  for (const auto& key : names_in(l.entries.get())) {
    EntryInfo info;
    info.key = key;
    Fd dir = open_dir_at(l.entries.get(), key);
    if (!dir) {
      info.problem = "not a directory (a file or a symbolic link)";
      out.push_back(std::move(info));
      continue;
    }
    info.bytes = dir_bytes(dir.get());
    struct stat st{};
    if (::fstatat(dir.get(), "lock", &st, AT_SYMLINK_NOFOLLOW) == 0)
      info.last_use = std::chrono::system_clock::from_time_t(st.st_mtime);
    info.problem = l.check_entry(dir.get(), key, check_files, info.manifest, std::make_shared<OpenEntry>(), nullptr, false);
    out.push_back(std::move(info));
  }
  return out;
}

std::string Store::remove(const std::string& key) const {
  Layout l;
  if (std::string bad = open_layout(l, false); !bad.empty()) return bad;
  if (!l.entries) return "";
  if (Fd dir = open_dir_at(l.entries.get(), key)) {
    Fd lock = open_file_at(dir.get(), "lock");
    if (lock && ::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) return "in use by a running process";
  }
  if (!l.tmp) l.tmp = make_dir_at(l.root.get(), "tmp", l.dir_mode);
  if (!l.tmp) return std::string("cannot make '") + dir_ + "/tmp': " + std::strerror(errno);
  const std::string dead = "removed." + key + "." + random_suffix();
  // Moved out first, so no reader ever sees a half-removed entry.
  if (::renameat(l.entries.get(), key.c_str(), l.tmp.get(), dead.c_str()) != 0)
    return errno == ENOENT ? "" : std::string("cannot move it out of entries/: ") + std::strerror(errno);
  // What cannot be deleted now stays in tmp/, where nothing reads it and
  // verify and prune try again: the entry itself is gone.
  remove_tree_at(l.tmp.get(), dead);
  return "";
}

std::vector<std::string> Store::prune(int64_t max_bytes) const {
  std::vector<EntryInfo> entries = list(false);
  int64_t total = 0;
  for (const auto& e : entries) total += e.bytes;
  std::sort(entries.begin(), entries.end(), [](const EntryInfo& a, const EntryInfo& b) { return a.last_use < b.last_use; });
  std::vector<std::string> removed;
  for (const auto& e : entries) {
    if (total <= max_bytes) break;
    if (remove(e.key).empty()) {
      total -= e.bytes;
      removed.push_back(e.key);
    }
  }
  return removed;
}

namespace {

std::string record_name(const struct stat& st) { return std::to_string(st.st_dev) + "." + std::to_string(st.st_ino); }

// Removes what in `dir` was last changed at least `age` ago.
void remove_older(int dir, std::chrono::seconds age) {
  const std::time_t now = std::time(nullptr);
  for (const auto& name : names_in(dir))
    if (struct stat st{}; ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && now - st.st_mtime >= age.count())
      remove_tree_at(dir, name);
}

}  // namespace

std::string Store::recall_model_hash(const struct stat& st) const {
  Layout l;
  if (!open_layout(l, false).empty() || !l.hashes || !l.auth) return "";
  return recall_hash(l.hashes.get(), record_name(st), st, *l.auth);
}

void Store::remember_model_hash(const struct stat& st, const timespec& looked_at, const std::string& hash,
                                const std::string& path) const {
  Layout l;
  try {
    if (!open_layout(l, true).empty() || !l.hashes) return;
  } catch (const ir::Error&) {  // no randomness for a new secret: nothing remembered
    return;
  }
  remember_hash(l.hashes.get(), record_name(st), st, looked_at, hash, path, *l.auth, l.file_mode);
}

void Store::forget_model_hashes(std::chrono::seconds age) const {
  Layout l;
  if (open_layout(l, false).empty() && l.hashes) remove_older(l.hashes.get(), age);
}

std::vector<std::pair<std::string, std::string>> Store::remove_bad_model_hashes() const {
  std::vector<std::pair<std::string, std::string>> bad;
  Layout l;
  if (!open_layout(l, false).empty() || !l.hashes) return bad;
  for (const auto& name : names_in(l.hashes.get())) {
    // Records being written (NAME.SUFFIX) are left to forget_model_hashes.
    if (name.find('.') != name.rfind('.')) continue;
    std::string problem = l.auth ? check_record(l.hashes.get(), name, *l.auth) : "the cache has no secret";
    if (problem.empty()) continue;
    if (std::string not_removed = remove_tree_at(l.hashes.get(), name); !not_removed.empty()) problem += "; " + not_removed;
    bad.push_back({name, problem});
  }
  return bad;
}

void Store::clean_tmp(std::chrono::seconds age) const {
  Layout l;
  if (open_layout(l, false).empty() && l.tmp) remove_older(l.tmp.get(), age);
}

}  // namespace kiln::cache
