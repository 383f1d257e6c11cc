// libFuzzer target for the bundle runtime's weights loader
// (src/bundle/runtime/bundle_runtime.c, compiled into this program):
// any weights file, in memory or on disk, against a bundle expecting any
// size and checksum, gives a handle or a status, never a crash, a read
// outside the data, or an allocation the data does not back. Memory and
// disk must agree, and with check_weights.
//
// Input: the bundle's weights_bytes and weights_checksum (8 bytes each,
// little-endian), then the weights file. Build and run: tests/fuzz/README.md.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bundle/runtime/bundle_abi.h"

namespace {

uint64_t g_weights_bytes = 0;  // of the bundle being fuzzed, for its entry

// The one specialization of the fake bundle: reads every weight, so that a
// weights pointer the image does not back is caught by AddressSanitizer.
int32_t entry(const uint8_t* weights, void* const* io, uint8_t* arena, const kiln_pk_threads*, void*) {
  uint64_t sum = 0;
  for (uint64_t i = 0; i < g_weights_bytes; ++i) sum += weights[i];
  std::memcpy(arena, &sum, sizeof sum);
  std::memcpy(io[1], &sum, sizeof sum);
  return KILN_BUNDLE_OK;
}

const kiln_bundle_tensor kInputs[] = {{"x", 8, 1, 11, 1}};
const kiln_bundle_tensor kOutputs[] = {{"y", 8, 1, 11, 1}};
const kiln_bundle_spec kSpecs[] = {{1, 64, nullptr}, {4, 64, nullptr}};
const kiln_bundle_entry_fn kEntries[] = {entry, entry};
const kiln_bundle_variant kVariants[] = {{"fuzz", "", kEntries}};

// Creates, runs a batch of 6 (4 + 1 + 1) and destroys; returns create's status.
int32_t load(const kiln_bundle_desc& d, const char* path, const uint8_t* image, uint64_t size) {
  kiln_bundle* b = nullptr;
  const int32_t rc = kiln_bundle_create(&d, path, image, size, &b);
  if (rc == KILN_BUNDLE_OK) {
    uint64_t x[6] = {}, y[6];
    const void* inputs[] = {x};
    void* outputs[] = {y};
    if (kiln_bundle_run(b, 6, inputs, outputs) != KILN_BUNDLE_OK) __builtin_trap();
  } else if (!b || !*kiln_bundle_last_error(b)) {
    __builtin_trap();  // a failed create leaves a handle saying why
  }
  kiln_bundle_destroy(b);
  return rc;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 16) return 0;
  kiln_bundle_desc d{};
  d.abi_version = KILN_BUNDLE_ABI_VERSION;
  d.num_inputs = d.num_outputs = 1;
  d.num_specs = 2;
  d.inputs = kInputs;
  d.outputs = kOutputs;
  d.specs = kSpecs;
  d.num_variants = 1;
  d.variants = kVariants;
  std::memcpy(&d.weights_bytes, data, 8);
  std::memcpy(&d.weights_checksum, data + 8, 8);
  g_weights_bytes = d.weights_bytes;

  // An exact-size copy (a read past the end is caught), aligned as a weights file in memory is.
  const uint64_t n = size - 16;
  void* image = nullptr;
  if (posix_memalign(&image, KILN_BUNDLE_ALIGNMENT, n ? n : 1) != 0) return 0;
  std::memcpy(image, data + 16, n);
  const int32_t checked = kiln_bundle_check_weights(&d, image, n);
  const int32_t in_memory = load(d, nullptr, static_cast<const uint8_t*>(image), n);

  // The same bytes as a file.
  static const int fd = memfd_create("weights", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, 0) != 0 || pwrite(fd, image, n, 0) != static_cast<ssize_t>(n)) __builtin_trap();
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  const int32_t on_disk = load(d, path.c_str(), nullptr, 0);
  std::free(image);

  // A bundle without weights (0 bytes) reads none, whatever is passed.
  if (d.weights_bytes != 0 && (in_memory != on_disk || (checked == KILN_BUNDLE_OK) != (in_memory == KILN_BUNDLE_OK)))
    __builtin_trap();
  return 0;
}
