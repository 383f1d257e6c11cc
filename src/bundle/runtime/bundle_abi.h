/* The contract between a frozen bundle's generated code and the bundle
 * runtime (bundle_runtime.c) compiled into the same object. The generated
 * code defines one kiln_bundle_desc as constant data; the runtime reads it.
 * Plain C, LP64 targets only (x86_64, aarch64): every layout below is
 * checked by static asserts here and mirrored by the freezer, which builds
 * the constants as LLVM IR. Changing a layout means bumping
 * KILN_BUNDLE_ABI_VERSION. */
#ifndef KILN_BUNDLE_ABI_H
#define KILN_BUNDLE_ABI_H

#include <stddef.h>
#include <stdint.h>

#include "backends/cpu/portable/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_BUNDLE_ABI_VERSION 5
#define KILN_BUNDLE_ALIGNMENT 64
#define KILN_BUNDLE_MAX_SPECS 16
#define KILN_BUNDLE_MAX_IO 64
#define KILN_BUNDLE_MAX_VARIANTS 8

/* Status codes every bundle API returns (the header repeats them under the
 * bundle's own prefix). */
enum {
  KILN_BUNDLE_OK = 0,
  KILN_BUNDLE_ERROR_ARGUMENT = 1, /* a null pointer, a bad batch size or batch rule; a Loop that runs away */
  KILN_BUNDLE_ERROR_WEIGHTS = 2,  /* the weights are missing, unreadable, truncated or not this bundle's */
  KILN_BUNDLE_ERROR_MEMORY = 3,   /* an allocation failed */
  KILN_BUNDLE_ERROR_INDEX = 4,    /* an index input (Gather) was out of range */
  KILN_BUNDLE_ERROR_NATIVE = 5,   /* native bundles: oneDNN failed, or cannot make the frozen primitives here */
  KILN_BUNDLE_ERROR_CPU = 6       /* this CPU lacks instruction-set extensions the code was compiled for */
};

/* The weights file: this header, then the data at KILN_BUNDLE_ALIGNMENT. */
#define KILN_BUNDLE_WEIGHTS_MAGIC "KILNWTS1"
typedef struct kiln_bundle_weights_header {
  char magic[8];
  uint32_t abi_version;
  uint32_t header_bytes; /* where the data starts */
  uint64_t data_bytes;
  uint64_t checksum; /* XXH3-64 of the data */
  uint8_t reserved[32];
} kiln_bundle_weights_header;

/* One specialization: returns KILN_BUNDLE_OK, or the status of the step
 * that failed (KILN_BUNDLE_ERROR_INDEX or _NATIVE, or _ARGUMENT from a Loop:
 * frozen_control_flow.hpp). io: the inputs, then the
 * outputs, each for `batch` items. native: the spec's state made by
 * kiln_bundle_desc.native_create (NULL in portable bundles). */
typedef int32_t (*kiln_bundle_entry_fn)(const uint8_t* weights, void* const* io, uint8_t* arena, const kiln_pk_threads* threads,
                                        void* native);

/* Native bundles (bundle_native.c, which links libdnnl): makes the oneDNN
 * primitives of one spec from its table (kiln_bundle_spec.native), their
 * constant operands pointing into `weights`. Returns a status, with a message
 * in `error` when it fails. */
typedef int32_t (*kiln_bundle_native_create_fn)(const void* table, const uint8_t* weights, void** state, char* error,
                                                uint64_t error_size);
typedef void (*kiln_bundle_native_destroy_fn)(void* state);

typedef struct kiln_bundle_spec {
  int64_t batch;
  int64_t arena_bytes;
  const void* native; /* a kiln_bundle_native_table, or NULL in portable bundles */
} kiln_bundle_spec;

/* One version of the code, compiled for one CPU: every spec's entry. */
typedef struct kiln_bundle_variant {
  const char* cpu;                     /* the target CPU ("x86-64-v3"), for messages */
  const char* cpu_features;            /* what the CPU must have: "avx2,fma,..." (bundle_cpu_features.h) */
  const kiln_bundle_entry_fn* entries; /* one per spec, in the specs' order */
} kiln_bundle_variant;

typedef struct kiln_bundle_tensor {
  const char* name;
  int64_t item_bytes; /* bytes of one batch item (the whole tensor when not batched) */
  int32_t batched;    /* the tensor has a batch axis */
  int32_t dtype;      /* ONNX TensorProto.DataType */
  /* The product of the dims before the batch axis (1: the batch is axis 0).
   * One batch item is `outer` slices of item_bytes / outer bytes, one per
   * index before the batch axis. */
  int64_t outer;
} kiln_bundle_tensor;

typedef struct kiln_bundle_desc {
  uint32_t abi_version;
  int32_t num_inputs;
  int32_t num_outputs;
  int32_t num_specs;
  const kiln_bundle_tensor* inputs;
  const kiln_bundle_tensor* outputs;
  const kiln_bundle_spec* specs; /* ascending batch sizes */
  uint64_t weights_bytes;
  uint64_t weights_checksum;
  const uint8_t* embedded_weights;            /* the data itself, or NULL when weights live in a file */
  kiln_bundle_native_create_fn native_create; /* NULL in portable bundles */
  kiln_bundle_native_destroy_fn native_destroy;
  int32_t num_variants;
  int32_t reserved;
  /* Best first: create runs the first whose CPU features this CPU has all of
   * (checked before any code compiled for a target runs). */
  const kiln_bundle_variant* variants;
} kiln_bundle_desc;

#if defined(__cplusplus)
#define KILN_BUNDLE_STATIC_ASSERT static_assert
#else
#define KILN_BUNDLE_STATIC_ASSERT _Static_assert
#endif
KILN_BUNDLE_STATIC_ASSERT(sizeof(void*) == 8, "bundles target LP64 platforms");
KILN_BUNDLE_STATIC_ASSERT(sizeof(kiln_bundle_weights_header) == 64, "weights header layout");
KILN_BUNDLE_STATIC_ASSERT(offsetof(kiln_bundle_spec, native) == 16 && sizeof(kiln_bundle_spec) == 24, "spec layout");
KILN_BUNDLE_STATIC_ASSERT(offsetof(kiln_bundle_variant, entries) == 16 && sizeof(kiln_bundle_variant) == 24, "variant layout");
KILN_BUNDLE_STATIC_ASSERT(offsetof(kiln_bundle_tensor, outer) == 24 && sizeof(kiln_bundle_tensor) == 32, "tensor layout");
KILN_BUNDLE_STATIC_ASSERT(offsetof(kiln_bundle_desc, inputs) == 16 && offsetof(kiln_bundle_desc, weights_bytes) == 40 &&
                              offsetof(kiln_bundle_desc, embedded_weights) == 56 &&
                              offsetof(kiln_bundle_desc, native_destroy) == 72 && offsetof(kiln_bundle_desc, variants) == 88 &&
                              sizeof(kiln_bundle_desc) == 96,
                          "descriptor layout");

/* The runtime, called by the bundle's exported wrappers. The runtime and the
 * wrappers keep the baseline target clang compiled the runtime for (x86-64,
 * armv8-a), not the bundle's: create picks a variant by its CPU features
 * before any code compiled for a target runs, so the check itself and
 * everything before it must run on any CPU of the architecture. */
typedef struct kiln_bundle kiln_bundle;
int32_t kiln_bundle_create(const kiln_bundle_desc* desc, const char* weights_path, const void* weights, uint64_t weights_size,
                           kiln_bundle** out);
void kiln_bundle_destroy(kiln_bundle* b);
void kiln_bundle_set_parallel_for(kiln_bundle* b, kiln_pk_parallel_for_fn fn, void* host);
int32_t kiln_bundle_set_batch_rule(kiln_bundle* b, const char* rule);
int32_t kiln_bundle_run(kiln_bundle* b, int64_t batch, const void* const* inputs, void* const* outputs);
const char* kiln_bundle_last_error(const kiln_bundle* b);
/* The CPU of the variant create chose ("" before create succeeded). */
const char* kiln_bundle_cpu(const kiln_bundle* b);
/* Checks a weights image (header and data) against the descriptor. */
int32_t kiln_bundle_check_weights(const kiln_bundle_desc* desc, const void* image, uint64_t size);
/* The static API: one specialization, caller-owned memory, no allocation
 * (portable bundles only: a native bundle's primitives live in its handle).
 * Runs the variant create would choose (chosen once per process), or
 * returns KILN_BUNDLE_ERROR_CPU, running nothing, on a CPU none fits. */
int32_t kiln_bundle_run_static(const kiln_bundle_desc* desc, int32_t spec, const void* weights_image, void* arena,
                               const void* const* inputs, void* const* outputs, kiln_pk_parallel_for_fn fn, void* host);

#ifdef __cplusplus
}
#endif

#endif /* KILN_BUNDLE_ABI_H */
