#include "cache/cache_dir.hpp"

#include <dirent.h>

#include <cerrno>
#include <cstring>

namespace kiln::cache {

bool read_all(int fd, std::string& out, size_t limit) {
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) return true;
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (out.size() + size_t(n) > limit) return false;
    out.append(buf, size_t(n));
  }
}

bool read_exactly(int fd, char* to, size_t size) {
  for (size_t at = 0; at < size;) {
    const ssize_t n = ::pread(fd, to + at, size - at, off_t(at));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    at += size_t(n);
  }
  return true;
}

Fd open_dir_at(int at, const std::string& name) {
  return Fd(::openat(at, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
}

Fd open_file_at(int at, const std::string& name, int flags, mode_t mode) {
  // O_NONBLOCK: opening a FIFO for reading would wait for a writer.
  Fd fd(::openat(at, name.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, mode));
  if (!fd) return fd;
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) return Fd();
  if (!S_ISREG(st.st_mode)) {
    errno = EINVAL;
    return Fd();
  }
  if ((flags & O_CREAT) && (st.st_mode & 07777) != mode && ::fchmod(fd.get(), mode) != 0) return Fd();
  // Back to blocking reads and writes, as for any regular file.
  ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
  return fd;
}

Fd make_dir_at(int at, const std::string& name, mode_t mode) {
  if (::mkdirat(at, name.c_str(), mode) != 0) return Fd();
  Fd dir = open_dir_at(at, name);
  // mkdir's mode went through the umask, which may have taken bits we need.
  if (dir && ::fchmod(dir.get(), mode) != 0) return Fd();
  return dir;
}

std::string not_private(const struct stat& st) {
  if (st.st_uid != ::geteuid() && st.st_uid != 0) return "belongs to another user (uid " + std::to_string(st.st_uid) + ")";
  if (st.st_mode & S_IWOTH) return "is writable by everyone";
  if (st.st_mode & S_IWGRP) return "is writable by its group";
  return "";
}

std::vector<std::string> names_in(int dir) {
  std::vector<std::string> names;
  const int copy = ::fcntl(dir, F_DUPFD_CLOEXEC, 0);  // closedir closes what it was given
  DIR* d = copy >= 0 ? ::fdopendir(copy) : nullptr;
  if (!d) {
    if (copy >= 0) ::close(copy);
    return names;
  }
  ::rewinddir(d);
  while (const dirent* e = ::readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  ::closedir(d);
  return names;
}

namespace {

// Kiln nests two levels; a deeper tree was made by someone else, and each
// level holds a descriptor open.
constexpr int kMaxRemoveDepth = 16;

std::string remove_tree_at(int at, const std::string& name, int depth) {
  if (::unlinkat(at, name.c_str(), 0) == 0 || errno == ENOENT) return "";
  if (errno != EISDIR && errno != EPERM) return std::string("cannot remove '") + name + "': " + std::strerror(errno);
  if (depth >= kMaxRemoveDepth) return "'" + name + "' is nested too deeply to be Kiln's";
  Fd dir = open_dir_at(at, name);
  if (!dir) return std::string("cannot open '") + name + "': " + std::strerror(errno);
  for (const auto& child : names_in(dir.get()))
    if (std::string bad = remove_tree_at(dir.get(), child, depth + 1); !bad.empty()) return name + "/" + bad;
  if (::unlinkat(at, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
    return std::string("cannot remove '") + name + "': " + std::strerror(errno);
  return "";
}

}  // namespace

std::string remove_tree_at(int at, const std::string& name) { return remove_tree_at(at, name, 0); }

}  // namespace kiln::cache
