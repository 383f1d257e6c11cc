#pragma once
// What the model importer and the cache share about files' hashes: digests
// written as lowercase hex, and the clock that file times come from.
#include <cstddef>
#include <ctime>
#include <string>
#include <string_view>

namespace kiln::ir {

inline std::string hex_digest(const unsigned char* bytes, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out += digits[bytes[i] >> 4];
    out += digits[bytes[i] & 15];
  }
  return out;
}

// The inverse of hex_digest: false unless `hex` is exactly 2n hex digits.
inline bool parse_hex_digest(std::string_view hex, unsigned char* bytes, size_t n) {
  if (hex.size() != 2 * n) return false;
  auto nibble = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  for (size_t i = 0; i < n; ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    bytes[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  return true;
}

// The clock file times are taken from, read before examining a file (see
// cache/hash_memo.hpp for why).
inline timespec coarse_now() {
  timespec t{};
  ::clock_gettime(CLOCK_REALTIME_COARSE, &t);
  return t;
}

}  // namespace kiln::ir
