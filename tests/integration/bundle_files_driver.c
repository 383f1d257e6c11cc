/* Runs a bundle of any inputs and outputs on raw files, for the tests:
 *   cc -DPREFIX=net -DUPREFIX=NET -include net.h bundle_files_driver.c net.o -lm
 * (the bundle must have batch size 1)
 *   ./driver WEIGHTS BATCH THREADS INPUT... OUTPUT:BYTES...
 * one file per input (its whole contents) in the bundle's order, then per
 * output a file to write and its size for this batch. THREADS > 1 hands
 * the bundle a parallel_for of that many threads; 0 runs the static API
 * (NAME_run_b1, batch 1) in an arena of NAME_ARENA_BYTES_B1 bytes that
 * nothing else uses, with the weights file's image in 64-byte aligned memory. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(x) CAT(PREFIX, x)
#define K(x) CAT(UPREFIX, x)

typedef struct part {
  FN(_task_fn) fn;
  void* task;
  int64_t begin, end;
} part;

static void* run_part(void* p) {
  part* r = (part*)p;
  r->fn(r->task, r->begin, r->end);
  return NULL;
}

static void parallel_for(void* host, int64_t n, FN(_task_fn) fn, void* task) {
  const int64_t threads = *(const int*)host < n ? *(const int*)host : n;
  pthread_t ids[16];
  part parts[16];
  for (int64_t t = 0; t < threads; ++t) {
    parts[t] = (part){fn, task, n * t / threads, n * (t + 1) / threads};
    if (t > 0) pthread_create(&ids[t], NULL, run_part, &parts[t]);
  }
  run_part(&parts[0]);
  for (int64_t t = 1; t < threads; ++t) pthread_join(ids[t], NULL);
}

static void* read_all(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  const long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  void* data = aligned_alloc(64, size > 0 ? ((size_t)size + 63) / 64 * 64 : 64);
  if (data && size > 0 && fread(data, 1, (size_t)size, f) != (size_t)size) {
    free(data);
    data = NULL;
  }
  fclose(f);
  return data;
}

int main(int argc, char** argv) {
  enum { inputs = K(_NUM_INPUTS), outputs = K(_NUM_OUTPUTS) };
  if (argc != 4 + inputs + outputs) return 2;
  const long batch = strtol(argv[2], NULL, 10);
  static int threads = 1;
  threads = atoi(argv[3]);
  FN()* model = NULL;
  if (FN(_create)(argv[1], &model) != K(_OK)) {
    fprintf(stderr, "create: %s\n", FN(_last_error)(model));
    return 1;
  }
  if (threads > 1) FN(_set_parallel_for)(model, parallel_for, &threads);
  const void* in[inputs > 0 ? inputs : 1];
  void* out[outputs];
  size_t bytes[outputs];
  for (int i = 0; i < inputs; ++i)
    if (!(in[i] = read_all(argv[4 + i]))) return 3;
  for (int i = 0; i < outputs; ++i) {
    const char* colon = strrchr(argv[4 + inputs + i], ':');
    if (!colon) return 2;
    bytes[i] = (size_t)strtoull(colon + 1, NULL, 10);
    out[i] = malloc(bytes[i] > 0 ? bytes[i] : 1);
  }
#ifndef NO_STATIC_API /* native bundles have none */
  if (threads == 0) {
    void* weights = read_all(argv[1]);
    void* arena = aligned_alloc(K(_ALIGNMENT), (K(_ARENA_BYTES_B1) + K(_ALIGNMENT) - 1) / K(_ALIGNMENT) * K(_ALIGNMENT));
    const int32_t status = FN(_run_b1)(weights, arena, in, out, NULL, NULL);
    if (batch != 1 || status != K(_OK)) {
      fprintf(stderr, "static run: %d\n", (int)status);
      return 1;
    }
  } else
#endif
      if (FN(_run)(model, batch, in, out) != K(_OK)) {
    fprintf(stderr, "run: %s\n", FN(_last_error)(model));
    return 1;
  }
  for (int i = 0; i < outputs; ++i) {
    char path[4096];
    const char* arg = argv[4 + inputs + i];
    snprintf(path, sizeof path, "%.*s", (int)(strrchr(arg, ':') - arg), arg);
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(out[i], 1, bytes[i], f) != bytes[i]) return 4;
    fclose(f);
  }
  FN(_destroy)(model);
  return 0;
}
