/* The part of the bundle contract only native bundles (`--kernels native`)
 * have: per specialization, a table of the oneDNN primitives its steps run.
 * The freezer builds the table as LLVM IR constants (bundle_codegen.cpp);
 * bundle_native.c, compiled into the same object, makes the primitives from
 * it when the bundle is created, and the generated entry calls
 * kiln_bundle_native_execute for each step. The oneDNN descriptors are the
 * raw bytes of oneDNN 2.x's C structs (dnnl_memory_desc_t and the operation
 * descriptors), as the on-disk cache saves them (onednn_kernel.cpp); so a
 * table is only good with the oneDNN major.minor it names, which create
 * checks. Layouts are static-asserted; changing one means bumping
 * KILN_BUNDLE_ABI_VERSION. */
#ifndef KILN_BUNDLE_NATIVE_H
#define KILN_BUNDLE_NATIVE_H

#include <stddef.h>
#include <stdint.h>

#include "bundle/runtime/bundle_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_BUNDLE_NATIVE_NOT_BOUND (-1) /* a step argument oneDNN does not see (a Sum post-op's residual) */

enum { KILN_BUNDLE_NATIVE_POST_SUM = 0, KILN_BUNDLE_NATIVE_POST_ELTWISE = 1 };

typedef struct kiln_bundle_native_arg {
  int32_t id; /* DNNL_ARG_*, or KILN_BUNDLE_NATIVE_NOT_BOUND */
  int32_t reserved;
  const void* md; /* a dnnl_memory_desc_t */
  int64_t offset; /* constants: where their data is in the weights */
  int64_t bytes;  /* constants: its size */
} kiln_bundle_native_arg;

typedef struct kiln_bundle_native_post_op {
  int32_t kind; /* KILN_BUNDLE_NATIVE_POST_* */
  int32_t alg;  /* eltwise: dnnl_alg_kind_t */
  float scale, alpha, beta;
  int32_t reserved;
} kiln_bundle_native_post_op;

typedef struct kiln_bundle_native_primitive {
  int32_t kind;     /* dnnl_primitive_kind_t */
  int32_t sum_from; /* the runtime argument copied into the destination before a Sum post-op, or -1 */
  int32_t concat_axis;
  int32_t num_srcs; /* concat */
  int32_t num_post_ops;
  int32_t num_runtime;
  int32_t num_constants;
  int32_t reserved;
  const void* desc;        /* the operation descriptor; reorder: the source md; concat: NULL */
  const void* dst;         /* reorder and concat: the destination md */
  const void* const* srcs; /* concat: the source mds */
  const kiln_bundle_native_post_op* post_ops;
  const kiln_bundle_native_arg* runtime; /* one per argument of the step, in order */
  const kiln_bundle_native_arg* constants;
  const char* label; /* the step, for messages */
} kiln_bundle_native_primitive;

typedef struct kiln_bundle_native_table {
  int32_t dnnl_major, dnnl_minor; /* the oneDNN the descriptors come from */
  int32_t num_primitives;
  int32_t reserved;
  const kiln_bundle_native_primitive* primitives; /* in step order */
} kiln_bundle_native_table;

KILN_BUNDLE_STATIC_ASSERT(sizeof(kiln_bundle_native_arg) == 32, "native argument layout");
KILN_BUNDLE_STATIC_ASSERT(sizeof(kiln_bundle_native_post_op) == 24, "native post-op layout");
KILN_BUNDLE_STATIC_ASSERT(offsetof(kiln_bundle_native_primitive, desc) == 32 &&
                              offsetof(kiln_bundle_native_primitive, label) == 80 && sizeof(kiln_bundle_native_primitive) == 88,
                          "native primitive layout");
KILN_BUNDLE_STATIC_ASSERT(sizeof(kiln_bundle_native_table) == 24, "native table layout");

/* kiln_bundle_native_create_fn and _destroy_fn (bundle_abi.h). */
int32_t kiln_bundle_native_create(const void* table, const uint8_t* weights, void** state, char* error, uint64_t error_size);
void kiln_bundle_native_destroy(void* state);
/* Runs primitive `index` of the state over the step's arguments. */
int32_t kiln_bundle_native_execute(void* state, int32_t index, void* const* args);

#ifdef __cplusplus
}
#endif

#endif /* KILN_BUNDLE_NATIVE_H */
