#include "cli/npy_reader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

namespace kiln::npy {

namespace {

struct Descr {
  const char* code;
  DType dtype;
  unsigned size;
  const char* name;
};
// What numpy writes: '<' for little-endian numbers, '|' where byte order does not apply.
constexpr Descr kDescrs[] = {
    {"<f4", DType::Float32, 4, "float32"}, {"<f8", DType::Float64, 8, "float64"}, {"<f2", DType::Float16, 2, "float16"},
    {"|i1", DType::Int8, 1, "int8"},       {"|u1", DType::UInt8, 1, "uint8"},     {"<i2", DType::Int16, 2, "int16"},
    {"<u2", DType::UInt16, 2, "uint16"},   {"<i4", DType::Int32, 4, "int32"},     {"<u4", DType::UInt32, 4, "uint32"},
    {"<i8", DType::Int64, 8, "int64"},     {"<u8", DType::UInt64, 8, "uint64"},   {"|b1", DType::Bool, 1, "bool"},
};
// numpy reads '<', '|' and '=' (native) alike for these types on a
// little-endian host, and Kiln builds for no other.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the .npy reader assumes a little-endian host");

// What format version 1.0 can express, and far more than the header of any
// array Kiln can hold (numpy's own reader refuses more than 10000 bytes).
constexpr uint64_t kMaxHeaderBytes = 65535;

[[noreturn]] void bad(const std::string& path, const std::string& why) {
  throw Error(ErrorCode::InvalidArgument, "'" + path + "' is not a usable .npy file: " + why);
}

// Untrusted text for a message: printable and short.
std::string quoted(std::string_view s) {
  constexpr size_t kShown = 32;
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kShown; ++i) out += s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
  return out + (s.size() > kShown ? "'..." : "'");
}

std::string shape_text(const Shape& shape) {
  if (shape.empty()) return "scalar";
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += 'x';
    s += std::to_string(shape[i]);
  }
  return s;
}

// The header dict as numpy writes it, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (1, 784), }
// then spaces and '\n'. Its three keys each once, in any order, separated by
// spaces; strings single-quoted without escapes; dims plain decimal. One
// pass, no backtracking, no recursion: its cost is linear in the header.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& path) : s_(text), path_(path) {}

  void parse(std::string& descr, bool& fortran_order, Shape& shape) {
    expect('{', "'{' opening the header dict");
    bool seen[3] = {};
    static constexpr const char* kKeys[3] = {"descr", "fortran_order", "shape"};
    for (;;) {
      skip_spaces();
      if (peek('}')) break;
      const std::string_view key = string_literal("a key ('descr', 'fortran_order' or 'shape') or '}'");
      int k = 0;
      while (k < 3 && key != kKeys[k]) ++k;
      if (k == 3) fail("unexpected key " + quoted(key) + " (the keys are 'descr', 'fortran_order' and 'shape')");
      if (seen[k]) fail("key " + quoted(key) + " appears twice");
      seen[k] = true;
      skip_spaces();
      expect(':', "':' after " + quoted(key));
      skip_spaces();
      if (k == 0) descr = string_literal("the element type, a string such as '<f4'");
      if (k == 1) fortran_order = boolean();
      if (k == 2) shape = tuple();
      skip_spaces();
      if (peek(','))
        ++i_;
      else if (!peek('}'))
        fail_expected("',' or '}'");
    }
    ++i_;
    for (int k = 0; k < 3; ++k)
      if (!seen[k]) fail("it has no '" + std::string(kKeys[k]) + "'");
    while (peek(' ')) ++i_;
    if (i_ + 1 != s_.size() || s_[i_] != '\n') fail_expected("only spaces and a final newline after the dict");
  }

 private:
  bool peek(char c) const { return i_ < s_.size() && s_[i_] == c; }
  void skip_spaces() {
    while (peek(' ')) ++i_;
  }

  [[noreturn]] void fail(const std::string& why) const { bad(path_, "header: " + why); }
  [[noreturn]] void fail_expected(const std::string& what) const {
    std::string found = "the end of the header";
    if (i_ < s_.size())
      found = s_[i_] >= 0x20 && s_[i_] < 0x7f ? "'" + std::string(1, s_[i_]) + "'" : "byte " + std::to_string(uint8_t(s_[i_]));
    fail("expected " + what + " at byte " + std::to_string(i_) + ", found " + found);
  }
  void expect(char c, const std::string& what) {
    if (!peek(c)) fail_expected(what);
    ++i_;
  }

  std::string_view string_literal(const std::string& what) {
    expect('\'', what);
    const size_t start = i_;
    while (i_ < s_.size() && s_[i_] != '\'') {
      if (s_[i_] < 0x20 || s_[i_] >= 0x7f || s_[i_] == '\\') fail_expected("a printable character without escapes in a string");
      ++i_;
    }
    if (i_ == s_.size()) fail("unterminated string starting at byte " + std::to_string(start - 1));
    return s_.substr(start, i_++ - start);
  }

  bool boolean() {
    for (bool value : {true, false}) {
      const std::string_view word = value ? "True" : "False";
      if (s_.substr(i_, word.size()) == word) {
        i_ += word.size();
        return value;
      }
    }
    fail_expected("True or False for 'fortran_order'");
  }

  // (), (N,), (N, M) and (N, M,): a one-element tuple needs its comma.
  Shape tuple() {
    expect('(', "'(' opening the shape, a tuple such as (1, 784)");
    Shape shape;
    skip_spaces();
    while (!peek(')')) {
      shape.push_back(dim());
      skip_spaces();
      if (peek(',')) {
        ++i_;
        skip_spaces();
      } else if (!peek(')')) {
        fail_expected("',' or ')' in the shape");
      } else if (shape.size() == 1) {
        fail("shape (" + std::to_string(shape[0]) + ") is a number, not a tuple: one dimension is written (" +
             std::to_string(shape[0]) + ",)");
      }
    }
    ++i_;
    return shape;
  }

  int64_t dim() {
    if (i_ >= s_.size() || s_[i_] < '0' || s_[i_] > '9') fail_expected("a dimension (a non-negative decimal integer)");
    const size_t start = i_;
    int64_t value = 0;
    for (; i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9'; ++i_)
      if (__builtin_mul_overflow(value, 10, &value) || __builtin_add_overflow(value, s_[i_] - '0', &value))
        fail("dimension " + quoted(s_.substr(start, i_ + 1 - start)) + " is too large");
    if (s_[start] == '0' && i_ - start > 1) fail("dimension " + quoted(s_.substr(start, i_ - start)) + " has a leading zero");
    return value;
  }

  std::string_view s_;
  const std::string& path_;
  size_t i_ = 0;
};

// Reads exactly `size` bytes at `offset`; false if the file ends first.
bool read_at(int fd, void* dst, uint64_t size, uint64_t offset, const std::string& path) {
  auto* p = static_cast<char*>(dst);
  while (size > 0) {
    const ssize_t n = ::pread(fd, p, size_t(std::min<uint64_t>(size, 1u << 30)), off_t(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(ErrorCode::Io, "cannot read '" + path + "': " + std::strerror(errno));
    if (n == 0) return false;
    p += n;
    size -= uint64_t(n);
    offset += uint64_t(n);
  }
  return true;
}

}  // namespace

const char* descr_of(DType dtype) {
  for (const auto& d : kDescrs)
    if (d.dtype == dtype) return d.code;
  return nullptr;
}

Reader::Reader(const std::string& path) : path_(path) {
  // O_NONBLOCK: opening a FIFO with no writer would block before fstat can refuse it.
  fd_.value = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_.value < 0) throw Error(ErrorCode::Io, "cannot open '" + path + "': " + std::strerror(errno));
  struct stat st{};
  if (::fstat(fd_.value, &st) != 0) throw Error(ErrorCode::Io, "cannot stat '" + path + "': " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw Error(ErrorCode::Io, "'" + path + "' is not a regular file (a .npy file was expected)");
  const uint64_t file_size = uint64_t(st.st_size);

  // Magic, major and minor version, then the header length: 2 bytes in
  // version 1.0, 4 in 2.0 and 3.0 (whose header is UTF-8: ASCII here).
  unsigned char prefix[12];
  if (file_size < 10 || !read_at(fd_.value, prefix, 10, 0, path))
    bad(path, "it has " + std::to_string(file_size) + " bytes, fewer than the 10 of the shortest .npy prefix");
  if (std::memcmp(prefix, "\x93NUMPY", 6) != 0) bad(path, "it does not start with the \\x93NUMPY magic");
  const unsigned major = prefix[6], minor = prefix[7];
  if (major < 1 || major > 3 || minor != 0)
    bad(path, "format version " + std::to_string(major) + "." + std::to_string(minor) + " (1.0, 2.0 and 3.0 are supported)");
  uint64_t header_len = prefix[8] | unsigned(prefix[9]) << 8;
  uint64_t header_start = 10;
  if (major >= 2) {
    if (!read_at(fd_.value, prefix + 10, 2, 10, path)) bad(path, "it ends inside its header length");
    header_len |= uint64_t(prefix[10]) << 16 | uint64_t(prefix[11]) << 24;
    header_start = 12;
  }
  if (header_len > kMaxHeaderBytes)
    bad(path,
        "a header of " + std::to_string(header_len) + " bytes, more than the " + std::to_string(kMaxHeaderBytes) + " accepted");
  if (header_len > file_size - header_start)
    bad(path, "a header of " + std::to_string(header_len) + " bytes, but the file has only " +
                  std::to_string(file_size - header_start) + " after its prefix");
  std::string header(header_len, '\0');
  if (!read_at(fd_.value, header.data(), header_len, header_start, path)) bad(path, "it ends inside its header");

  std::string descr;
  bool fortran_order = false;
  HeaderParser(header, path).parse(descr, fortran_order, shape_);
  const Descr* found = nullptr;
  for (const auto& d : kDescrs)
    if (descr.size() == 3 && descr.substr(1) == d.code + 1 && (descr[0] == '<' || descr[0] == '|' || descr[0] == '=')) found = &d;
  if (!found)
    bad(path, "element type " + quoted(descr) +
                  " is not supported (little-endian numbers and bool: '<f4', '<f8', '<f2', '|i1', '|u1', '<i2', '<u2', "
                  "'<i4', '<u4', '<i8', '<u8', '|b1')");
  if (fortran_order) bad(path, "Fortran (column-major) order is not supported; save with numpy.ascontiguousarray");
  dtype_ = found->dtype;

  // The claim is checked against the file before anyone allocates for it.
  uint64_t count = 1;
  for (int64_t d : shape_)
    if (__builtin_mul_overflow(count, uint64_t(d), &count))
      bad(path, "shape " + shape_text(shape_) + " has more elements than 64 bits can count");
  data_offset_ = header_start + header_len;
  const uint64_t available = file_size - data_offset_;
  const bool overflow = __builtin_mul_overflow(count, uint64_t(found->size), &data_bytes_);
  if (overflow || data_bytes_ != available)
    bad(path, "shape " + shape_text(shape_) + " of " + found->name + " needs " +
                  (overflow ? "more than 2^64" : std::to_string(data_bytes_)) + " data bytes, the file has " +
                  std::to_string(available));
}

Reader::~Reader() = default;

Reader::Fd::~Fd() {
  if (value >= 0) ::close(value);
}

void Reader::read_data(void* dst) {
  if (!read_at(fd_.value, dst, data_bytes_, data_offset_, path_)) bad(path_, "it became shorter while being read");
}

}  // namespace kiln::npy
