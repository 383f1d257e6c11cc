#include "cli/npy.hpp"

#include <cstring>
#include <fstream>
#include <regex>

namespace kiln::npy {

namespace {

struct Descr {
  const char* code;
  DType dtype;
};
// '|' marks single-byte types, which have no byte order.
constexpr Descr kDescrs[] = {
    {"<f4", DType::Float32}, {"<f8", DType::Float64}, {"<f2", DType::Float16}, {"|i1", DType::Int8},
    {"|u1", DType::UInt8},   {"<i2", DType::Int16},   {"<u2", DType::UInt16},  {"<i4", DType::Int32},
    {"<u4", DType::UInt32},  {"<i8", DType::Int64},   {"<u8", DType::UInt64},  {"|b1", DType::Bool},
};

[[noreturn]] void bad(const std::string& path, const std::string& why) {
  throw Error(ErrorCode::InvalidArgument, "'" + path + "' is not a usable .npy file: " + why);
}

}  // namespace

Tensor load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::Io, "cannot open '" + path + "': " + std::strerror(errno));
  in.seekg(0, std::ios::end);
  const uint64_t file_size = uint64_t(in.tellg());
  in.seekg(0);

  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) bad(path, "missing the \\x93NUMPY magic");
  const int major = static_cast<unsigned char>(magic[6]);
  uint32_t header_len = 0;
  if (major == 1) {
    unsigned char b[2];
    if (!in.read(reinterpret_cast<char*>(b), 2)) bad(path, "truncated header");
    header_len = b[0] | (b[1] << 8);
  } else if (major == 2 || major == 3) {
    unsigned char b[4];
    if (!in.read(reinterpret_cast<char*>(b), 4)) bad(path, "truncated header");
    header_len = b[0] | (b[1] << 8) | (b[2] << 16) | (uint32_t(b[3]) << 24);
  } else {
    bad(path, "format version " + std::to_string(major) + " (1, 2 and 3 are supported)");
  }
  if (header_len > 1 << 20 || header_len > file_size) bad(path, "header length " + std::to_string(header_len) + " is implausible");
  std::string header(header_len, '\0');
  if (!in.read(header.data(), header_len)) bad(path, "truncated header");

  std::smatch m;
  if (!std::regex_search(header, m, std::regex(R"('descr'\s*:\s*'([^']*)')"))) bad(path, "header has no 'descr'");
  const std::string descr = m[1];
  const Descr* found = nullptr;
  for (const auto& d : kDescrs)
    if (descr == d.code || (descr.size() == 3 && d.code[0] == '|' && descr.substr(1) == d.code + 1 && descr[0] == '<'))
      found = &d;
  if (!found) bad(path, "element type '" + descr + "' is not supported (little-endian numbers and bool only)");
  if (std::regex_search(header, std::regex(R"('fortran_order'\s*:\s*True)")))
    bad(path, "Fortran (column-major) order is not supported; save with numpy.ascontiguousarray");
  if (!std::regex_search(header, m, std::regex(R"('shape'\s*:\s*\(([^)]*)\))"))) bad(path, "header has no 'shape'");
  Shape shape;
  const std::string dims = m[1];
  static const std::regex number(R"(\d+)");
  for (std::sregex_iterator it(dims.begin(), dims.end(), number), end; it != end; ++it) {
    if (it->str().size() > 15) bad(path, "dimension " + it->str() + " is too large");
    shape.push_back(std::stoll(it->str()));
  }

  Tensor t(found->dtype, shape);
  const uint64_t data_start = uint64_t(in.tellg());
  if (file_size - data_start != t.nbytes())
    bad(path, "shape " + shape_to_string(shape) + " of " + dtype_name(found->dtype) + " needs " +
                  std::to_string(t.nbytes()) + " data bytes, the file has " + std::to_string(file_size - data_start));
  if (t.nbytes() && !in.read(static_cast<char*>(t.data()), std::streamsize(t.nbytes()))) bad(path, "truncated data");
  return t;
}

void save(const std::string& path, const Tensor& tensor) {
  const char* code = nullptr;
  for (const auto& d : kDescrs)
    if (d.dtype == tensor.dtype()) code = d.code;
  if (!code) throw Error(ErrorCode::Unsupported, std::string("cannot write ") + dtype_name(tensor.dtype()) + " to .npy");
  std::string shape = "(";
  for (size_t i = 0; i < tensor.shape().size(); ++i) shape += std::to_string(tensor.shape()[i]) + ", ";
  if (tensor.shape().size() > 1) shape.resize(shape.size() - 2);
  else if (tensor.shape().size() == 1) shape.resize(shape.size() - 1);
  shape += ")";
  std::string header = std::string("{'descr': '") + code + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad with spaces so that the data starts on a 64-byte boundary, ending in '\n'.
  const size_t prefix = 10;
  size_t total = (prefix + header.size() + 1 + 63) / 64 * 64;
  header.append(total - prefix - header.size() - 1, ' ');
  header += '\n';

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(ErrorCode::Io, "cannot write '" + path + "': " + std::strerror(errno));
  const uint16_t len = uint16_t(header.size());
  const char pre[10] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0, char(len & 0xff), char(len >> 8)};
  out.write(pre, 10);
  out.write(header.data(), std::streamsize(header.size()));
  out.write(static_cast<const char*>(tensor.data()), std::streamsize(tensor.nbytes()));
  if (!out) throw Error(ErrorCode::Io, "cannot write '" + path + "' (disk full?)");
}

}  // namespace kiln::npy
