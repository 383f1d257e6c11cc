#pragma once
// A backend's program as the cache stores it: a CBOR document, then raw
// blocks of bytes that the document names by {offset, size}.
//
// Why not CBOR byte strings: nlohmann's CBOR reader takes them one byte at a
// time (4-5 ns a byte here), and mobilenet_v2's half megabyte of oneDNN
// descriptors cost its warm start 2-2.5 ms that way, the portable kernel
// library 4-5 ms. Out of the document they are views of the loaded file.
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kiln::backends {

class BlockWriter {
 public:
  // Keeps a copy of the bytes; returns the reference the document holds.
  nlohmann::json add(const void* data, size_t size);
  nlohmann::json add(std::string_view bytes) { return add(bytes.data(), bytes.size()); }
  // [document size, 8 bytes little-endian][CBOR document][blocks, each at a
  // multiple of 8 from the blocks' start].
  std::string finish(const nlohmann::json& document) const;

 private:
  std::string blocks_;
};

class BlockReader {
 public:
  // Throws ir::Error(InvalidModel), `what` naming the program, if the bytes
  // are not a document and blocks. The blocks stay views of `bytes`.
  BlockReader(std::string_view bytes, const std::string& what);
  const nlohmann::json& document() const { return document_; }
  // The block `ref` names; InvalidModel (`what` saying where) if `ref` is not
  // a reference or lies outside the blocks, or (size >= 0) has another size.
  std::string_view block(const nlohmann::json& ref, const std::string& what, int64_t size = -1) const;

 private:
  nlohmann::json document_;
  std::string_view blocks_;
};

}  // namespace kiln::backends
