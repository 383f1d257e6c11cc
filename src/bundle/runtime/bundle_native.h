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
 * KILN_BUNDLE_ABI_VERSION (structs grow at their end). Version 4 added the
 * quantization of a primitive (output scales, a binary's source scales, zero
 * points). */
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

/* What a quantized primitive's attributes hold besides its post-ops, as
 * oneDNN 2.x takes them: `mask` says along which dimensions of the argument
 * the values vary (0: one value for the whole tensor). */
enum {
  KILN_BUNDLE_NATIVE_OUTPUT_SCALES = 0, /* arg: DNNL_ARG_DST */
  KILN_BUNDLE_NATIVE_SCALES = 1,        /* a binary's source: DNNL_ARG_SRC_0 or DNNL_ARG_SRC_1 */
  KILN_BUNDLE_NATIVE_ZERO_POINTS = 2    /* DNNL_ARG_SRC, DNNL_ARG_WEIGHTS or DNNL_ARG_DST */
};

typedef struct kiln_bundle_native_quantization {
  int32_t kind; /* KILN_BUNDLE_NATIVE_OUTPUT_SCALES, _SCALES or _ZERO_POINTS */
  int32_t arg;
  int32_t mask;
  /* 1: one value bound when the primitive runs, as the step's argument
   * DNNL_ARG_ATTR_OUTPUT_SCALES or DNNL_ARG_ATTR_ZERO_POINTS | arg (a
   * constant or a runtime argument); no values here. */
  int32_t runtime;
  int64_t count;
  const void* values; /* `count` floats (scales) or int32s (zero points) */
} kiln_bundle_native_quantization;

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
  /* Version 4: */
  int32_t num_quantization;
  int32_t reserved2;
  const kiln_bundle_native_quantization* quantization; /* NULL when not quantized */
} kiln_bundle_native_primitive;

typedef struct kiln_bundle_native_table {
  int32_t dnnl_major, dnnl_minor; /* the oneDNN the descriptors come from */
  int32_t num_primitives;
  int32_t reserved;
  const kiln_bundle_native_primitive* primitives; /* in step order */
} kiln_bundle_native_table;

KILN_BUNDLE_STATIC_ASSERT(sizeof(kiln_bundle_native_arg) == 32, "native argument layout");
KILN_BUNDLE_STATIC_ASSERT(sizeof(kiln_bundle_native_post_op) == 24, "native post-op layout");
KILN_BUNDLE_STATIC_ASSERT(offsetof(kiln_bundle_native_quantization, values) == 24 &&
                              sizeof(kiln_bundle_native_quantization) == 32,
                          "native quantization layout");
KILN_BUNDLE_STATIC_ASSERT(offsetof(kiln_bundle_native_primitive, desc) == 32 &&
                              offsetof(kiln_bundle_native_primitive, label) == 80 &&
                              offsetof(kiln_bundle_native_primitive, quantization) == 96 &&
                              sizeof(kiln_bundle_native_primitive) == 104,
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
