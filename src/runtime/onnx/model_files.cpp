#include "runtime/onnx/model_files.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <optional>

#include "runtime/ir/file_hash.hpp"

namespace kiln::onnx_import {

using ir::ErrorKind;
using ir::fail;

namespace {

namespace fs = std::filesystem;

// Where an open file really is, every link resolved.
std::string real_path_of(int fd, const std::string& path) {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/fd/" + std::to_string(fd), ec);
  if (ec) p = fs::canonical(path, ec);  // no /proc: resolved by name
  return ec ? std::string() : p.string();
}

std::optional<XXH128_hash_t> hash_from_hex(const std::string& hex) {
  XXH128_canonical_t c;
  if (!ir::parse_hex_digest(hex, c.digest, sizeof c.digest)) return std::nullopt;
  return XXH128_hashFromCanonical(&c);
}

}  // namespace

int open_regular(const std::string& path, const std::string& what, struct stat& st) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) fail(ErrorKind::Io, "cannot open " + what + " '" + path + "': " + std::strerror(errno));
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    ::close(fd);
    if (S_ISDIR(st.st_mode)) fail(ErrorKind::Io, "cannot read " + what + " '" + path + "': is a directory");
    fail(ErrorKind::Io,
         "cannot read " + what + " '" + path + "': " + (S_ISREG(st.st_mode) ? std::strerror(err) : "not a regular file"));
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

std::string read_file(const std::string& path, const char* what) {
  struct stat st{};
  const int fd = open_regular(path, what, st);
  if (st.st_size > INT_MAX) {
    ::close(fd);
    fail(ErrorKind::InvalidModel,
         "'" + path + "' is larger than 2 GiB; protobuf files cannot be; store the weights as external data");
  }
  std::string bytes(size_t(st.st_size), '\0');
  size_t at = 0;
  while (at < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + at, bytes.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    at += size_t(n);
  }
  ::close(fd);
  if (at != bytes.size()) fail(ErrorKind::Io, std::string("cannot read ") + what + " '" + path + "'");
  return bytes;
}

XXH128_hash_t hash_blocks(const uint8_t* data, size_t size, int threads) {
  const size_t blocks = std::max<size_t>(1, (size + kBlock - 1) / kBlock);
  std::vector<XXH128_canonical_t> digests(blocks);
  for_each_on_threads(blocks, threads, [&](size_t b) {
    XXH128_canonicalFromHash(&digests[b], XXH3_128bits(data + b * kBlock, std::min(kBlock, size - std::min(size, b * kBlock))));
  });
  XXH3_state_t* state = XXH3_createState();
  if (!state) throw std::bad_alloc();
  XXH3_128bits_reset(state);
  XXH3_128bits_update(state, digests.data(), digests.size() * sizeof(XXH128_canonical_t));
  const uint64_t bytes = size;
  XXH3_128bits_update(state, &bytes, sizeof bytes);
  const XXH128_hash_t h = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  return h;
}

std::string hex_of(XXH128_hash_t hash) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, hash);
  return ir::hex_digest(c.digest, sizeof c.digest);
}

void identify(MappedFile& file, const struct stat& st, const timespec& looked_at, const ImportOptions& opts) {
  std::optional<XXH128_hash_t> known;
  if (opts.recall_file_hash) known = hash_from_hex(opts.recall_file_hash(st));
  file.hash = known ? *known : hash_blocks(file.data, file.size, opts.hash_threads);
  if (!known && opts.remember_file_hash) opts.remember_file_hash(file.path, st, looked_at, hex_of(file.hash));
  file.hash_threads = opts.hash_threads;
}

std::shared_ptr<MappedFile> map_external(const std::string& path, const std::string& inside, const ImportOptions& opts,
                                         const std::string& where) {
  const timespec looked_at = ir::coarse_now();
  auto file = std::make_shared<MappedFile>();
  file->path = path;
  struct stat st{};
  file->fd = open_regular(path, where + "external data file", st);
  const std::string real = real_path_of(file->fd, path);
  if (real.empty() || real.rfind(inside == "/" ? inside : inside + "/", 0) != 0)
    fail(ErrorKind::InvalidModel, where + "external data file '" + path + "' is really '" + real +
                                      "', outside the model's directory '" + inside + "' (through a symbolic link)");
  file->size = size_t(st.st_size);
  if (file->size > 0) {
    void* map = ::mmap(nullptr, file->size, PROT_READ, MAP_PRIVATE, file->fd, 0);
    if (map == MAP_FAILED) fail(ErrorKind::Io, where + "cannot map external data file '" + path + "': " + std::strerror(errno));
    file->data = static_cast<const uint8_t*>(map);
  }
  identify(*file, st, looked_at, opts);
  return file;
}

}  // namespace kiln::onnx_import
