#include "backends/program_blocks.hpp"

#include <cstring>

#include "runtime/ir/error.hpp"

namespace kiln::backends {

namespace {
constexpr size_t kHeader = 8;
size_t padded(size_t n) { return (n + 7) / 8 * 8; }
}  // namespace

nlohmann::json BlockWriter::add(const void* data, size_t size) {
  const size_t offset = padded(blocks_.size());
  blocks_.resize(offset);
  blocks_.append(static_cast<const char*>(data), size);
  return nlohmann::json::array({offset, size});
}

std::string BlockWriter::finish(const nlohmann::json& document) const {
  const std::vector<uint8_t> cbor = nlohmann::json::to_cbor(document);
  std::string out(kHeader, '\0');
  for (size_t i = 0; i < kHeader; ++i) out[i] = char((uint64_t(cbor.size()) >> (8 * i)) & 0xff);
  out.append(cbor.begin(), cbor.end());
  out.resize(padded(out.size()));
  return out + blocks_;
}

BlockReader::BlockReader(std::string_view bytes, const std::string& what) {
  if (bytes.size() < kHeader)
    ir::fail(ir::ErrorKind::InvalidModel, what + " is too short (" + std::to_string(bytes.size()) + " bytes)");
  uint64_t size = 0;
  for (size_t i = 0; i < kHeader; ++i) size |= uint64_t(uint8_t(bytes[i])) << (8 * i);
  if (size > bytes.size() - kHeader)
    ir::fail(ir::ErrorKind::InvalidModel, what + ": its document of " + std::to_string(size) + " bytes is longer than the " +
                                              std::to_string(bytes.size()) + " bytes it came in");
  const std::string_view cbor = bytes.substr(kHeader, size_t(size));
  try {
    document_ = nlohmann::json::from_cbor(cbor.begin(), cbor.end());
  } catch (const nlohmann::json::exception& e) {
    ir::fail(ir::ErrorKind::InvalidModel, what + " is not valid CBOR: " + e.what());
  }
  blocks_ = bytes.substr(std::min(bytes.size(), padded(kHeader + size_t(size))));
}

std::string_view BlockReader::block(const nlohmann::json& ref, const std::string& what, int64_t size) const {
  auto count = [](const nlohmann::json& n) { return n.is_number_unsigned() || (n.is_number_integer() && n.get<int64_t>() >= 0); };
  if (!ref.is_array() || ref.size() != 2 || !count(ref[0]) || !count(ref[1]))
    ir::fail(ir::ErrorKind::InvalidModel, what + ": not a reference to a block of bytes");
  const uint64_t offset = ref[0].get<uint64_t>(), bytes = ref[1].get<uint64_t>();
  if (offset > blocks_.size() || bytes > blocks_.size() - offset)
    ir::fail(ir::ErrorKind::InvalidModel, what + ": " + std::to_string(bytes) + " bytes at " + std::to_string(offset) +
                                              " lie outside the program's " + std::to_string(blocks_.size()) +
                                              " bytes of blocks");
  if (size >= 0 && bytes != uint64_t(size))
    ir::fail(ir::ErrorKind::InvalidModel,
             what + ": a block of " + std::to_string(bytes) + " bytes where " + std::to_string(size) + " were expected");
  return blocks_.substr(size_t(offset), size_t(bytes));
}

}  // namespace kiln::backends
