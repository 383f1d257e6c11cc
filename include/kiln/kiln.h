/* Kiln C API: the C++ API's surface with opaque handles and status codes,
 * for C programs and foreign-function interfaces (Rust, Python ctypes...).
 * No C++ exception crosses this boundary. Every function that can fail
 * returns a kiln_status; kiln_last_error() then describes the failure
 * (per thread, valid until the next failing call on that thread).
 *
 * Strings returned by the API (names, symbols, messages) are owned by the
 * object they came from and live as long as it does.
 */
#ifndef KILN_H
#define KILN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* libkiln is built with hidden visibility and exports only what this header
 * and kiln.hpp declare. */
#pragma GCC visibility push(default)

/* Bumped when the C API changes incompatibly; additions keep it.
 * 2: kiln_log_level counts from 1, so that a zero log_level takes the default. */
#define KILN_C_API_VERSION 2

typedef enum kiln_status {
  KILN_OK = 0,
  KILN_ERROR_INVALID_ARGUMENT = 1, /* wrong input from the caller: name, dtype, shape, null pointer */
  KILN_ERROR_INVALID_MODEL = 2,    /* malformed or inconsistent model file */
  KILN_ERROR_UNSUPPORTED = 3,      /* valid ONNX that Kiln does not implement */
  KILN_ERROR_IO = 4,               /* file system */
  KILN_ERROR_INTERNAL = 5
} kiln_status;

/* Values equal ONNX's TensorProto.DataType. */
typedef enum kiln_dtype {
  KILN_FLOAT32 = 1,
  KILN_UINT8 = 2,
  KILN_INT8 = 3,
  KILN_UINT16 = 4,
  KILN_INT16 = 5,
  KILN_INT32 = 6,
  KILN_INT64 = 7,
  KILN_BOOL = 9,
  KILN_FLOAT16 = 10,
  KILN_FLOAT64 = 11,
  KILN_UINT32 = 12,
  KILN_UINT64 = 13,
  KILN_BFLOAT16 = 16
} kiln_dtype;

typedef struct kiln_runtime kiln_runtime;
typedef struct kiln_model kiln_model;
typedef struct kiln_tensor kiln_tensor;

typedef enum kiln_log_level {
  KILN_LOG_DEFAULT = 0, /* warnings and errors */
  KILN_LOG_DEBUG = 1,
  KILN_LOG_INFO = 2,
  KILN_LOG_WARNING = 3,
  KILN_LOG_ERROR = 4,
  KILN_LOG_OFF = 5
} kiln_log_level;

/* Set struct_size = sizeof(kiln_runtime_options) so that later versions
 * can add fields at the end. Zero/NULL fields take their defaults. */
typedef struct kiln_runtime_options {
  uint32_t struct_size;
  int32_t threads;       /* 0: every core the process may use */
  const char* cache_dir; /* NULL: default location */
  int32_t log_level;     /* a kiln_log_level; messages go to stderr */
  /* Since Kiln 0.2 (check struct_size): */
  int32_t no_cache;        /* nonzero: no on-disk cache of compiled code */
  int64_t cache_max_bytes; /* 0: $KILN_CACHE_MAX_BYTES, else 1 GiB */
  /* Since Kiln 0.3 (check struct_size): */
  const char* kernels; /* "native" or "portable"; NULL: $KILN_KERNELS, else "native" */
  /* Since Kiln 0.4 (check struct_size): */
  const char* cache_key_file; /* a shared cache's key (README "What Kiln trusts"); NULL: $KILN_CACHE_KEY_FILE */
  /* Since Kiln 0.5 (check struct_size): */
  const char* precision; /* "fp32" or "bf16" (RuntimeOptions::precision); NULL: "fp32" */
  /* Since Kiln 0.6 (check struct_size): */
  const char* remote_cache;       /* the fleet's Redis (RuntimeOptions::remote_cache); NULL: $KILN_REMOTE_CACHE */
  int32_t remote_cache_read_only; /* nonzero: fetch from it, never upload */
} kiln_runtime_options;

/* How kiln_model_load_from_memory_with_options treats the model. Set
 * struct_size = sizeof(kiln_load_options). */
typedef struct kiln_load_options {
  uint32_t struct_size;
  const char* external_data_dir; /* NULL when the model keeps its weights inline */
  /* Nonzero: its specializations go to the on-disk cache, which keeps the
   * processed weights in the clear. A model held in memory is often one the
   * application decrypted, so the default is 0: not cached. */
  int32_t cache;
} kiln_load_options;

/* Describes one model input or output. dims[i] is -1 for a dynamic
 * dimension, whose name (or "" if unnamed) is symbols[i]. rank is -1 when
 * nothing is known about the shape. */
typedef struct kiln_tensor_info {
  const char* name;
  kiln_dtype dtype;
  int64_t rank;
  const int64_t* dims;
  const char* const* symbols;
  int32_t has_default; /* the input may be omitted */
} kiln_tensor_info;

uint32_t kiln_c_api_version(void);
const char* kiln_last_error(void);
const char* kiln_status_name(kiln_status status);
const char* kiln_dtype_name(kiln_dtype dtype);
size_t kiln_dtype_size(kiln_dtype dtype); /* 0 for an unknown value */

/* options may be NULL. */
kiln_status kiln_runtime_create(const kiln_runtime_options* options, kiln_runtime** out);
void kiln_runtime_destroy(kiln_runtime* runtime);

kiln_status kiln_model_load(kiln_runtime* runtime, const char* path, kiln_model** out);
/* external_data_dir may be NULL when the model keeps its weights inline.
 * Not cached (see kiln_load_options). */
kiln_status kiln_model_load_from_memory(kiln_runtime* runtime, const void* data, size_t size, const char* external_data_dir,
                                        kiln_model** out);
/* options may be NULL (the defaults above). */
kiln_status kiln_model_load_from_memory_with_options(kiln_runtime* runtime, const void* data, size_t size,
                                                     const kiln_load_options* options, kiln_model** out);
void kiln_model_destroy(kiln_model* model);

size_t kiln_model_input_count(const kiln_model* model);
size_t kiln_model_output_count(const kiln_model* model);
kiln_status kiln_model_input_info(const kiln_model* model, size_t index, kiln_tensor_info* out);
kiln_status kiln_model_output_info(const kiln_model* model, size_t index, kiln_tensor_info* out);

/* Runs the model. input_names[i] names inputs[i]; inputs with defaults may be
 * left out. On success outputs[0..output_count) receive new tensors in the
 * model's output order (output_count must equal kiln_model_output_count);
 * the caller destroys them. Safe to call from several threads at once.
 * The C API passes tensors of numbers only: a model with an input or output
 * that is a sequence, an optional or a string tensor loads (its info says
 * dtype 8 for strings) but does not run here (KILN_ERROR_INVALID_ARGUMENT
 * naming the value); the C++ API's Model::run_values runs it. */
kiln_status kiln_model_run(const kiln_model* model, const char* const* input_names, const kiln_tensor* const* inputs,
                           size_t input_count, kiln_tensor** outputs, size_t output_count);

/* An owning, zero-filled tensor. */
kiln_status kiln_tensor_create(kiln_dtype dtype, const int64_t* dims, size_t rank, kiln_tensor** out);
/* A view of caller memory (nbytes long, checked against the shape); the
 * memory must outlive the tensor and every run that uses it. */
kiln_status kiln_tensor_create_view(kiln_dtype dtype, const int64_t* dims, size_t rank, void* data, size_t nbytes,
                                    kiln_tensor** out);
void kiln_tensor_destroy(kiln_tensor* tensor);
kiln_dtype kiln_tensor_dtype(const kiln_tensor* tensor);
size_t kiln_tensor_rank(const kiln_tensor* tensor);
const int64_t* kiln_tensor_dims(const kiln_tensor* tensor);
size_t kiln_tensor_element_count(const kiln_tensor* tensor);
size_t kiln_tensor_nbytes(const kiln_tensor* tensor);
void* kiln_tensor_data(kiln_tensor* tensor);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif

#endif /* KILN_H */
