// Feeds arbitrary bytes to what loads a compiled specialization from the
// cache when plugins take part: the partitioned format (several parts in one
// entry) and a plugin's own entry (its graph, constants and value types in
// CBOR, then the blob the plugin deserializes). Anyone able to damage a cache
// directory could have written them; loading must give an executable or
// Kiln's error, never a crash, a hang or an allocation the input cannot back.
//
// The backends are the toy plugin (tests/plugins/toy_plugin.c, built next to
// this fuzzer) and the reference backend, in that order: both parse what they
// load and neither runs code from it. The cpu backend maps the object code
// of its entries and runs it: it must never be added here.
//
// Input: three little-endian uint32 (the program's size, the object's size,
// the model's output count), then the program, the object, and the rest as
// the weights file. The model's graph matters to the loaders only through
// its output count.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/partitioner.hpp"
#include "backends/reference/reference_backend.hpp"
#include "plugins/plugin_backend.hpp"

namespace {

uint32_t read_u32(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; }

struct Backends {
  std::unique_ptr<kiln::backends::Backend> toy = kiln::plugins::make_plugin_backend(
      kiln::plugins::load_plugin(KILN_FUZZ_TOY_PLUGIN), nullptr, [](int, const std::string&) {});
  std::unique_ptr<kiln::backends::Backend> reference = kiln::backends::make_reference_backend();
  std::vector<const kiln::backends::Backend*> order{toy.get(), reference.get()};
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Backends backends;
  constexpr size_t kHeader = 12;
  if (size < kHeader) return 0;
  const uint64_t program_bytes = read_u32(data), object_bytes = read_u32(data + 4), outputs = read_u32(data + 8);
  if (program_bytes + object_bytes > size - kHeader || outputs > 64) return 0;
  const char* p = reinterpret_cast<const char*>(data) + kHeader;

  // As the cache hands an entry back: its files in memory, the weights 64-byte aligned.
  kiln::backends::Artifact files;
  files.object.assign(p + program_bytes, object_bytes);
  files.program.assign(p, program_bytes);
  const char* weights = p + program_bytes + object_bytes;
  files.weights_bytes = int64_t(size - kHeader - program_bytes - object_bytes);
  files.weights.push_back({weights, size_t(files.weights_bytes)});
  files.weight_offsets.push_back(0);
  const kiln::backends::LoadedArtifact artifact = kiln::backends::copy_to_memory(files);

  auto graph = std::make_shared<kiln::ir::Graph>();
  for (uint64_t i = 0; i < outputs; ++i) graph->outputs.push_back({"y" + std::to_string(i), kiln::ir::DType::Float32});
  try {
    const kiln::backends::PartitionedCompile loaded = kiln::backends::load_partitioned(artifact, graph, backends.order, {});
    (void)loaded.executable->stats();
  } catch (const kiln::ir::Error&) {
  }
  return 0;
}
