/* Classifies 8x8 images of digits with the `digits` bundle, which
 * `kiln aot-freeze` makes from examples/digits/digits.onnx:
 *
 *   kiln aot-freeze ../digits/digits.onnx -o . --name digits --batch-sizes 1,4
 *   cc main.c digits.o -lm -o classify
 *   ./classify digits.weights.bin images.f32 13 [probabilities.f32 [RULE|- [THREADS]]]
 *
 * images.f32 holds COUNT images of 64 float32 values (row-major, 0..16); the
 * program prints one predicted digit per line and, if asked, writes the
 * COUNT x 10 probabilities as raw float32. RULE is a batch rule ("13:8,8").
 * With THREADS > 1 the bundle's parallel work runs on that many threads
 * through a parallel_for built on pthreads (part of libc since glibc 2.34).
 * Needs only libc and libm. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "digits.h"

/* The host's parallel_for: [0, n) in `threads` contiguous parts, the calling
 * thread taking the first. A real service would hand the parts to its pool. */
typedef struct part {
  digits_task_fn fn;
  void* task;
  int64_t begin, end;
} part;

static void* run_part(void* p) {
  part* r = (part*)p;
  r->fn(r->task, r->begin, r->end);
  return NULL;
}

static long parallel_calls = 0;

static void parallel_for(void* host, int64_t n, digits_task_fn fn, void* task) {
  const int64_t threads = *(const int*)host < n ? *(const int*)host : n;
  pthread_t ids[64];
  part parts[64];
  ++parallel_calls;
  for (int64_t t = 0; t < threads; ++t) {
    parts[t] = (part){fn, task, n * t / threads, n * (t + 1) / threads};
    if (t > 0 && pthread_create(&ids[t], NULL, run_part, &parts[t]) != 0) run_part(&parts[t]), ids[t] = 0;
  }
  run_part(&parts[0]);
  for (int64_t t = 1; t < threads; ++t)
    if (ids[t]) pthread_join(ids[t], NULL);
}

static int fail(const char* what, const digits* model) {
  fprintf(stderr, "error: %s%s%s\n", what, model ? ": " : "", model ? digits_last_error(model) : "");
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s WEIGHTS IMAGES.f32 COUNT [PROBABILITIES.f32 [BATCH_RULE|- [THREADS]]]\n", argv[0]);
    return 2;
  }
  const long count = strtol(argv[3], NULL, 10);
  if (count <= 0) return fail("COUNT must be positive", NULL);

  digits* model = NULL;
  if (digits_create(argv[1], &model) != DIGITS_OK) {
    const int rc = fail("cannot create the model", model);
    digits_destroy(model);
    return rc;
  }
  if (argc > 5 && strcmp(argv[5], "-") != 0 && digits_set_batch_rule(model, argv[5]) != DIGITS_OK)
    return fail("bad batch rule", model);
  static int threads = 1;
  if (argc > 6) threads = atoi(argv[6]);
  if (threads < 1 || threads > 64) return fail("THREADS must be 1 to 64", NULL);
  if (threads > 1) digits_set_parallel_for(model, parallel_for, &threads);

  float* images = malloc((size_t)count * DIGITS_INPUT_0_ITEM_BYTES);
  float* probabilities = malloc((size_t)count * DIGITS_OUTPUT_0_ITEM_BYTES);
  FILE* in = fopen(argv[2], "rb");
  if (!images || !probabilities || !in || fread(images, DIGITS_INPUT_0_ITEM_BYTES, (size_t)count, in) != (size_t)count)
    return fail("cannot read the images", NULL);
  fclose(in);

  const void* inputs[DIGITS_NUM_INPUTS] = {images};
  void* outputs[DIGITS_NUM_OUTPUTS] = {probabilities};
  if (digits_run(model, count, inputs, outputs) != DIGITS_OK) return fail("run failed", model);

  for (long i = 0; i < count; ++i) {
    int best = 0;
    for (int d = 1; d < 10; ++d)
      if (probabilities[i * 10 + d] > probabilities[i * 10 + best]) best = d;
    printf("%d\n", best);
  }
  if (argc > 4) {
    FILE* out = fopen(argv[4], "wb");
    if (!out || fwrite(probabilities, DIGITS_OUTPUT_0_ITEM_BYTES, (size_t)count, out) != (size_t)count)
      return fail("cannot write the probabilities", NULL);
    fclose(out);
  }
  if (threads > 1) fprintf(stderr, "parallel_for calls: %ld\n", parallel_calls);
  free(images);
  free(probabilities);
  digits_destroy(model);
  return 0;
}
