// libFuzzer target for the .npy reader (src/cli/npy_reader.cpp): any file
// must give an array or a kiln::Error, never a crash, a hang or a claim
// larger than the file. The bytes go through a memfd, so that the reader
// opens, stats and reads a real regular file as `kiln run` does.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "cli/npy_reader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("fuzz.npy", MFD_CLOEXEC);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (fd < 0 || ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != ssize_t(size)) abort();
  try {
    kiln::npy::Reader reader(path);
    // What the caller allocates next: the reader must have checked it against the file.
    if (reader.data_bytes() > size) abort();
    std::vector<char> values(reader.data_bytes());
    reader.read_data(values.data());
  } catch (const kiln::Error&) {
  }
  return 0;
}
