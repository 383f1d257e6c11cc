#include "cache/hash_memo.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

namespace kiln::cache {

namespace {

using nlohmann::json;

int64_t ns(const timespec& t) { return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec; }

json identity(const struct stat& st) {
  return {{"dev", uint64_t(st.st_dev)},
          {"ino", uint64_t(st.st_ino)},
          {"bytes", int64_t(st.st_size)},
          {"mtime_ns", ns(st.st_mtim)},
          {"ctime_ns", ns(st.st_ctim)}};
}

}  // namespace

std::string recall_hash(const std::string& record, const struct stat& st) {
  std::ifstream in(record, std::ios::binary);
  if (!in) return "";
  const json r = json::parse(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), nullptr, false);
  if (!r.is_object() || r.value("file", json()) != identity(st)) return "";
  const json& hash = r.value("xxh3_128", json());
  return hash.is_string() ? hash.get<std::string>() : "";
}

void remember_hash(const std::string& record, const struct stat& st, const timespec& looked_at, const std::string& hash,
                   const std::string& about) {
  if (ns(st.st_ctim) >= ns(looked_at) || ns(st.st_mtim) >= ns(looked_at)) return;
  const std::string text = json({{"file", identity(st)}, {"xxh3_128", hash}, {"about", about}}).dump(1) + "\n";
  std::string tmp = record + ".XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) return;
  (void)::fchmod(fd, 0644);  // as readable as the entries
  // Not flushed: a record lost or emptied by a crash is only a miss.
  const bool written = ::write(fd, text.data(), text.size()) == ssize_t(text.size());
  ::close(fd);
  if (!written || ::rename(tmp.c_str(), record.c_str()) != 0) ::unlink(tmp.c_str());
}

}  // namespace kiln::cache
