#pragma once
// The files a model is read from: opened only if they are regular files,
// mapped read-only, and identified by a hash of their bytes.
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "runtime/onnx/onnx_importer.hpp"

namespace kiln::onnx_import {

// Opens a file to read, refusing anything but a regular file: reading a
// FIFO would wait for a writer forever, a device could be endless.
int open_regular(const std::string& path, const std::string& what, struct stat& st);

// A whole file of less than 2 GiB (a protobuf message's limit).
std::string read_file(const std::string& path, const char* what);

// A model file mapped read-only for as long as weights view it.
struct MappedFile {
  const uint8_t* data = nullptr;
  size_t size = 0;
  int fd = -1;  // kept open: own_weights checks the file was not truncated
  std::string path;
  XXH128_hash_t hash{};  // of the file alone (hash_blocks), to tell whether it changed since loading
  int hash_threads = 1;
  // The model's external data files, when their weights are views too
  // (owned, like the rest, by the model file's MappedFile).
  std::vector<std::shared_ptr<MappedFile>> external;
  ~MappedFile() {
    if (data) ::munmap(const_cast<uint8_t*>(data), size);
    if (fd >= 0) ::close(fd);
  }
};

// Calls work(i) for every i < count on `threads` threads: the caller and up
// to threads - 1 started here (fewer if the system has none to give).
template <typename Work>
void for_each_on_threads(size_t count, int threads, const Work& work) {
  std::atomic<size_t> next{0};
  auto take = [&] {
    for (size_t i; (i = next++) < count;) work(i);
  };
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < std::min(size_t(std::max(threads, 1)), count); ++t) {
    try {
      helpers.emplace_back(take);
    } catch (const std::system_error&) {
      break;
    }
  }
  take();
  for (auto& h : helpers) h.join();
}

// What hash_blocks hashes at a time, and own_weights copies.
inline constexpr size_t kBlock = size_t(4) << 20;

// A model file's identity: XXH3-128 of each 4 MiB block, `threads` of them
// at once, then XXH3-128 of those digests and the size, so that it does not
// depend on the thread count. One thread took 16-24 ms over resnet50's
// freshly mapped 98 MB (faulting its pages in and hashing them), two took
// 10-12.
XXH128_hash_t hash_blocks(const uint8_t* data, size_t size, int threads);

std::string hex_of(XXH128_hash_t hash);

// A mapped file's hash: remembered by its identity if the caller keeps a
// memo (the cache), else read and told to the memo.
void identify(MappedFile& file, const struct stat& st, const timespec& looked_at, const ImportOptions& opts);

// An external data file, mapped read-only and identified.
// `inside`: the real path of the directory the file must be in (links in
// the model's directory must not lead a hostile model to other files).
std::shared_ptr<MappedFile> map_external(const std::string& path, const std::string& inside, const ImportOptions& opts,
                                         const std::string& where);

// The model's identity for cache keys: the file, then every external
// weight read, in order, hashed as they pass (no second read).
class ContentHash {
 public:
  ContentHash() { XXH3_128bits_reset(state_.get()); }
  void hash(const void* data, size_t size) { XXH3_128bits_update(state_.get(), data, size); }
  void hash_file(const XXH128_hash_t& file) {
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, file);
    hash(&c, sizeof c);
  }
  XXH128_hash_t digest() const { return XXH3_128bits_digest(state_.get()); }

 private:
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> state_{XXH3_createState(), XXH3_freeState};
};

}  // namespace kiln::onnx_import
