#pragma once
// Reading a .npy file without trusting it: only a regular file is opened (a
// FIFO never blocks), the header is parsed by a strict, linear parser of the
// dict numpy writes, and the element count and byte size it claims are
// checked against the file before the caller allocates anything. Uses only
// the public types, not libkiln, so that the fuzzer links this file alone.
#include <cstdint>
#include <string>

#include "kiln/kiln.hpp"

namespace kiln::npy {

// The descr numpy writes for `dtype` ("<f4", "|u1"), or nullptr when a .npy
// file cannot hold it.
const char* descr_of(DType dtype);

class Reader {
 public:
  // Opens `path` and reads and checks its header; throws kiln::Error naming
  // the file and what was expected.
  explicit Reader(const std::string& path);
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  // Exactly the bytes the file holds after its header.
  uint64_t data_bytes() const { return data_bytes_; }
  // Reads the data into `dst` (data_bytes() of it).
  void read_data(void* dst);

 private:
  struct Fd {
    int value = -1;
    ~Fd();
  };
  std::string path_;
  Fd fd_;
  DType dtype_ = DType::Float32;
  Shape shape_;
  uint64_t data_offset_ = 0;
  uint64_t data_bytes_ = 0;
};

}  // namespace kiln::npy
