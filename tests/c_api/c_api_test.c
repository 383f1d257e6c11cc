/* The C API from plain C: load, describe, run the digits model, and check
 * that errors come back as status codes with messages. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln/kiln.h"

static int failures = 0;
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                              \
    }                                                                          \
  } while (0)

/* Reads the data of a version-1 .npy file (the header length is at byte 8). */
static void* read_npy(const char* path, size_t expected_bytes) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  unsigned char pre[10];
  void* data = NULL;
  if (fread(pre, 1, 10, f) == 10) {
    long header = pre[8] | (pre[9] << 8);
    fseek(f, 10 + header, SEEK_SET);
    data = malloc(expected_bytes);
    if (fread(data, 1, expected_bytes, f) != expected_bytes) {
      free(data);
      data = NULL;
    }
  }
  fclose(f);
  return data;
}

int main(void) {
  CHECK(kiln_c_api_version() == KILN_C_API_VERSION);

  kiln_runtime_options opts = {sizeof(kiln_runtime_options), 1, NULL, KILN_LOG_ERROR};
  kiln_runtime* rt = NULL;
  CHECK(kiln_runtime_create(&opts, &rt) == KILN_OK);

  kiln_model* model = NULL;
  CHECK(kiln_model_load(rt, "/nonexistent.onnx", &model) == KILN_ERROR_IO);
  CHECK(model == NULL);
  CHECK(strstr(kiln_last_error(), "/nonexistent.onnx") != NULL);
  CHECK(kiln_model_load(NULL, "x", &model) == KILN_ERROR_INVALID_ARGUMENT);

  CHECK(kiln_model_load(rt, KILN_SOURCE_DIR "/examples/digits/digits.onnx", &model) == KILN_OK);
  if (!model) return 1;
  CHECK(kiln_model_input_count(model) == 1);
  CHECK(kiln_model_output_count(model) == 1);
  kiln_tensor_info info;
  CHECK(kiln_model_input_info(model, 0, &info) == KILN_OK);
  CHECK(strcmp(info.name, "image") == 0);
  CHECK(info.dtype == KILN_FLOAT32);
  CHECK(info.rank == 4);
  CHECK(info.dims[0] == -1 && strcmp(info.symbols[0], "batch") == 0);
  CHECK(info.dims[2] == 8);
  CHECK(kiln_model_input_info(model, 5, &info) == KILN_ERROR_INVALID_ARGUMENT);

  float* pixels = read_npy(KILN_SOURCE_DIR "/examples/digits/digit.npy", 64 * sizeof(float));
  CHECK(pixels != NULL);
  if (!pixels) return 1;
  int64_t dims[4] = {1, 1, 8, 8};
  kiln_tensor* input = NULL;
  CHECK(kiln_tensor_create_view(KILN_FLOAT32, dims, 4, pixels, 64 * sizeof(float), &input) == KILN_OK);
  kiln_tensor* too_small = NULL;
  CHECK(kiln_tensor_create_view(KILN_FLOAT32, dims, 4, pixels, 3, &too_small) == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(too_small == NULL);

  const char* names[1] = {"image"};
  const kiln_tensor* inputs[1] = {input};
  kiln_tensor* outputs[1] = {NULL};
  CHECK(kiln_model_run(model, names, inputs, 1, outputs, 1) == KILN_OK);
  if (outputs[0]) {
    CHECK(kiln_tensor_rank(outputs[0]) == 2);
    CHECK(kiln_tensor_dims(outputs[0])[1] == 10);
    const float* p = kiln_tensor_data(outputs[0]);
    int best = 0;
    for (int c = 1; c < 10; ++c)
      if (p[c] > p[best]) best = c;
    CHECK(best == 7); /* the label train_digits.py recorded for digit.npy */
    printf("c api: predicted class %d\n", best);
    kiln_tensor_destroy(outputs[0]);
  }

  /* A wrong shape: the message names the input and both shapes. */
  int64_t bad_dims[2] = {1, 64};
  kiln_tensor* bad = NULL;
  CHECK(kiln_tensor_create(KILN_FLOAT32, bad_dims, 2, &bad) == KILN_OK);
  const kiln_tensor* bad_inputs[1] = {bad};
  CHECK(kiln_model_run(model, names, bad_inputs, 1, outputs, 1) == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(kiln_last_error(), "'image'") != NULL);
  CHECK(strstr(kiln_last_error(), "1x64") != NULL);
  CHECK(outputs[0] == NULL);
  CHECK(kiln_model_run(model, names, inputs, 1, outputs, 2) == KILN_ERROR_INVALID_ARGUMENT);

  /* A negative dimension is the caller's mistake, not the model's. */
  int64_t negative[2] = {1, -3};
  kiln_tensor* none = NULL;
  CHECK(kiln_tensor_create(KILN_FLOAT32, negative, 2, &none) == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(kiln_last_error(), "-3") != NULL);
  CHECK(kiln_tensor_create_view(KILN_FLOAT32, negative, 2, pixels, 64, &none) == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(none == NULL);

  kiln_tensor_destroy(bad);
  kiln_model_destroy(model);
  kiln_runtime_destroy(rt);

  /* Zero fields take their defaults: no debug messages from a zeroed
   * log_level (stderr is caught in a file while the model compiles). */
  kiln_runtime_options zeroed;
  memset(&zeroed, 0, sizeof zeroed);
  zeroed.struct_size = sizeof zeroed;
  zeroed.no_cache = 1;
  CHECK(kiln_runtime_create(&zeroed, &rt) == KILN_OK);
  FILE* caught = tmpfile();
  fflush(stderr);
  const int saved_stderr = dup(2);
  dup2(fileno(caught), 2);
  CHECK(kiln_model_load(rt, KILN_SOURCE_DIR "/examples/digits/digits.onnx", &model) == KILN_OK);
  CHECK(kiln_model_run(model, names, inputs, 1, outputs, 1) == KILN_OK);
  fflush(stderr);
  dup2(saved_stderr, 2);
  close(saved_stderr);
  char said[4096] = {0};
  rewind(caught);
  CHECK(fread(said, 1, sizeof said - 1, caught) < sizeof said - 1);
  CHECK(strstr(said, "debug") == NULL);
  fclose(caught);
  kiln_tensor_destroy(outputs[0]);
  kiln_model_destroy(model);
  kiln_runtime_destroy(rt);
  zeroed.log_level = KILN_LOG_OFF + 1;
  CHECK(kiln_runtime_create(&zeroed, &rt) == KILN_ERROR_INVALID_ARGUMENT);
  zeroed.log_level = 0;

  /* A precision the cpu backend cannot compute in is refused, with the reason. */
  zeroed.precision = "bf16";
  CHECK(kiln_runtime_create(&zeroed, &rt) == KILN_ERROR_UNSUPPORTED);
  CHECK(strstr(kiln_last_error(), "precision 'bf16'") != NULL);
  zeroed.precision = "fp32";
  CHECK(kiln_runtime_create(&zeroed, &rt) == KILN_OK);
  kiln_runtime_destroy(rt);
  /* A remote cache's address is checked when the runtime is made. */
  zeroed.remote_cache = "http://cache.internal";
  CHECK(kiln_runtime_create(&zeroed, &rt) == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(kiln_last_error(), "not a Redis address") != NULL);
  zeroed.remote_cache = NULL;

  kiln_tensor_destroy(input);
  free(pixels);
  if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
