/* Runs any one-input, one-output bundle on raw float32 files, for the tests:
 *   cc -DPREFIX=net -DUPREFIX=NET -include net.h bundle_driver.c net.o -lm
 *   ./driver WEIGHTS BATCH INPUT.f32 OUTPUT.f32 [THREADS]
 * The run happens on another thread than the create, as in a service whose
 * workers share one model. Says on stderr which CPU's code create chose.
 * (examples/bundle-c is the readable version, for one model.) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

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

typedef struct run_args {
  FN() * model;
  long batch;
  const void* inputs[1];
  void* outputs[1];
  int32_t status;
} run_args;

static void* run_model(void* p) {
  run_args* a = (run_args*)p;
  a->status = FN(_run)(a->model, a->batch, a->inputs, a->outputs);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 5) return 2;
  const long batch = strtol(argv[2], NULL, 10);
  static int threads = 1;
  if (argc > 5) threads = atoi(argv[5]);
  FN()* model = NULL;
  if (FN(_create)(argv[1], &model) != K(_OK)) {
    fprintf(stderr, "create: %s\n", FN(_last_error)(model));
    return 1;
  }
  fprintf(stderr, "code for cpu %s\n", FN(_cpu)(model));
  if (threads > 1) FN(_set_parallel_for)(model, parallel_for, &threads);
  void* in = malloc((size_t)batch * K(_INPUT_0_ITEM_BYTES));
  void* out = malloc((size_t)batch * K(_OUTPUT_0_ITEM_BYTES));
  FILE* f = fopen(argv[3], "rb");
  if (!in || !out || !f || fread(in, K(_INPUT_0_ITEM_BYTES), (size_t)batch, f) != (size_t)batch) return 3;
  fclose(f);
  run_args args = {model, batch, {in}, {out}, K(_OK)};
  pthread_t worker;
  if (pthread_create(&worker, NULL, run_model, &args) != 0 || pthread_join(worker, NULL) != 0) return 5;
  if (args.status != K(_OK)) {
    fprintf(stderr, "run: %s\n", FN(_last_error)(model));
    return 1;
  }
  f = fopen(argv[4], "wb");
  if (!f || fwrite(out, K(_OUTPUT_0_ITEM_BYTES), (size_t)batch, f) != (size_t)batch) return 4;
  fclose(f);
  FN(_destroy)(model);
  free(in);
  free(out);
  return 0;
}
