#include "cli/npy.hpp"

#include <cstring>
#include <fstream>

#include "cli/npy_reader.hpp"

namespace kiln::npy {

Tensor load(const std::string& path) {
  Reader reader(path);
  Tensor t(reader.dtype(), reader.shape());
  reader.read_data(t.data());
  return t;
}

void save(const std::string& path, const Tensor& tensor) {
  const char* code = descr_of(tensor.dtype());
  if (!code) throw Error(ErrorCode::Unsupported, std::string("cannot write ") + dtype_name(tensor.dtype()) + " to .npy");
  std::string shape = "(";
  for (size_t i = 0; i < tensor.shape().size(); ++i) shape += std::to_string(tensor.shape()[i]) + ", ";
  if (tensor.shape().size() > 1)
    shape.resize(shape.size() - 2);
  else if (tensor.shape().size() == 1)
    shape.resize(shape.size() - 1);
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
