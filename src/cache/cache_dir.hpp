#pragma once
// File system operations inside the cache directory, done relative to
// directory descriptors and never following a symbolic link: a link planted
// anywhere in the cache (entries/, tmp/, an entry, one of its files) is
// foreign, is never read or written through, and when removed only the link
// goes. Files are opened so that a FIFO or a device never blocks and is
// never read.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

namespace kiln::cache {

// An open file descriptor, closed when it goes.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // The descriptor, no longer closed by this object.
  int release() { return std::exchange(fd_, -1); }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_;
};

// Reads `fd` from its offset to the end into `out`; false on a read error or
// past `limit` bytes.
bool read_all(int fd, std::string& out, size_t limit);
// Reads `size` bytes from the start of `fd`; false if there are fewer.
bool read_exactly(int fd, char* to, size_t size);

// `name` in directory `at`, a directory itself; invalid with errno set
// otherwise (ENOTDIR or ELOOP for a link).
Fd open_dir_at(int at, const std::string& name);
// `name` in directory `at`, a regular file opened with `flags` (O_CREAT
// creates it with exactly `mode`, whatever the umask); invalid with errno set
// otherwise (EINVAL for a FIFO, a device or a socket).
Fd open_file_at(int at, const std::string& name, int flags = O_RDONLY, mode_t mode = 0);
// Makes directory `name` in `at` with exactly `mode` and opens it.
Fd make_dir_at(int at, const std::string& name, mode_t mode);

// What stops a private cache from trusting a file or directory: "" if it
// belongs to this user or root and nobody else may write it.
std::string not_private(const struct stat& st);

// The names in an open directory, without "." and "..".
std::vector<std::string> names_in(int dir);

// Removes `name` from directory `at`: a directory with everything below it,
// anything else unlinked. "" if it is gone, else what stopped it.
std::string remove_tree_at(int at, const std::string& name);

}  // namespace kiln::cache
