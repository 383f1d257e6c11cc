#include "cache/hash_memo.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <random>

#include <nlohmann/json.hpp>

#include "cache/cache_dir.hpp"
#include "cache/manifest.hpp"

namespace kiln::cache {

namespace {

using nlohmann::json;

constexpr const char* kPurpose = "kiln hash record 1";
constexpr size_t kMaxRecordBytes = 16384;

int64_t ns(const timespec& t) { return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec; }

json identity(const struct stat& st) {
  return {{"dev", uint64_t(st.st_dev)},
          {"ino", uint64_t(st.st_ino)},
          {"bytes", int64_t(st.st_size)},
          {"mtime_ns", ns(st.st_mtim)},
          {"ctime_ns", ns(st.st_ctim)}};
}

std::string signed_part(const json& file, const std::string& hash, const std::string& about) {
  return file.dump() + "\n" + hash + "\n" + about;
}

// The record's file, hash and about if it is whole and its tag verifies.
std::string read_record(int dir, const std::string& name, const Authenticator& auth, json& file, std::string& hash) {
  Fd fd = open_file_at(dir, name);
  if (!fd) return "cannot be opened as a regular file";
  std::string text;
  if (!read_all(fd.get(), text, kMaxRecordBytes)) return "cannot be read, or is too large";
  if (!nesting_at_most(text, 4)) return "is not a record";
  const json r = json::parse(text, nullptr, false);
  if (!r.is_object()) return "is not a record";
  const auto f = r.find("file"), h = r.find("hash"), a = r.find("about"), t = r.find("tag");
  if (f == r.end() || !f->is_object() || h == r.end() || !h->is_string() || a == r.end() || !a->is_string() || t == r.end() ||
      !t->is_string())
    return "is not a record";
  if (!auth.verify(kPurpose, signed_part(*f, h->get<std::string>(), a->get<std::string>()), t->get<std::string>()))
    return "its tag does not verify (altered, or written with another key)";
  file = *f;
  hash = h->get<std::string>();
  return "";
}

std::string random_suffix() {
  static thread_local std::mt19937_64 rng(std::random_device{}() ^ uint64_t(::getpid()));
  char buf[32];
  std::snprintf(buf, sizeof buf, ".%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

}  // namespace

std::string recall_hash(int dir, const std::string& name, const struct stat& st, const Authenticator& auth) {
  json file;
  std::string hash;
  if (!read_record(dir, name, auth, file, hash).empty() || file != identity(st)) return "";
  return hash;
}

std::string check_record(int dir, const std::string& name, const Authenticator& auth) {
  json file;
  std::string hash;
  return read_record(dir, name, auth, file, hash);
}

void remember_hash(int dir, const std::string& name, const struct stat& st, const timespec& looked_at, const std::string& hash,
                   const std::string& about, const Authenticator& auth, mode_t mode) {
  if (ns(st.st_ctim) >= ns(looked_at) || ns(st.st_mtim) >= ns(looked_at)) return;
  const json file = identity(st);
  const std::string text =
      json({{"file", file}, {"hash", hash}, {"about", about}, {"tag", auth.tag(kPurpose, signed_part(file, hash, about))}})
          .dump(1) +
      "\n";
  const std::string tmp = name + random_suffix();
  Fd fd = open_file_at(dir, tmp, O_WRONLY | O_CREAT | O_EXCL, mode);
  if (!fd) return;
  // Not flushed: a record lost or emptied by a crash is only a miss.
  const bool written = ::write(fd.get(), text.data(), text.size()) == ssize_t(text.size());
  if (!written || ::renameat(dir, tmp.c_str(), dir, name.c_str()) != 0) ::unlinkat(dir, tmp.c_str(), 0);
}

}  // namespace kiln::cache
