/* Times a frozen one-input bundle: median latency of NAME_run at a batch
 * size, serial or on a persistent pthread pool passed as parallel_for (what
 * a host with its own threads would do). Built by bench/bundle_bench.sh:
 *   cc -O2 -DPREFIX=net -DUPREFIX=NET -include net.h bundle_bench.c net.o -lm
 *   ./bench WEIGHTS BATCH THREADS RUNS */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(x) CAT(PREFIX, x)
#define K(x) CAT(UPREFIX, x)

/* Workers spin on the generation counter for a while before sleeping, as
 * the pools of TBB and ONNX Runtime do: a model runs dozens of parallel
 * steps per call, and waking a sleeping thread costs more than most steps. */
enum { SPIN_ROUNDS = 200000, MAX_THREADS = 64 };

/* One thread's share of the items, claimed a chunk at a time. */
typedef struct share {
  atomic_llong next;
  int64_t end;
  char pad[48]; /* a cache line each */
} share;

typedef struct pool {
  pthread_mutex_t mutex;
  pthread_cond_t go;
  atomic_long generation;
  atomic_int pending;
  int threads;
  FN(_task_fn) fn;
  void* task;
  int64_t chunk;
  share shares[MAX_THREADS];
} pool;

/* Thread t owns the t-th contiguous share of the items, the same one at
 * every call (as OpenMP's static schedule does): the data a step wrote
 * (its part of the channels, say) is still in that thread's cache when the
 * next step reads it. A thread done with its share helps with the others',
 * a chunk (an eighth of a share) at a time, so uneven items (a GEMM's edge
 * tiles) do not leave it waiting. */
static void part(pool* p, int self) {
  for (int k = 0; k < p->threads; ++k) {
    share* s = &p->shares[(self + k) % p->threads];
    for (;;) {
      const int64_t begin = atomic_fetch_add_explicit(&s->next, p->chunk, memory_order_relaxed);
      if (begin >= s->end) break;
      p->fn(p->task, begin, begin + p->chunk < s->end ? begin + p->chunk : s->end);
    }
  }
}

typedef struct worker {
  pool* p;
  int self;
} worker;

static void* work(void* arg) {
  pool* p = ((worker*)arg)->p;
  const int self = ((worker*)arg)->self;
  long seen = 0;
  for (;;) {
    int spins = 0;
    while (atomic_load_explicit(&p->generation, memory_order_acquire) == seen && ++spins < SPIN_ROUNDS) cpu_relax();
    if (atomic_load_explicit(&p->generation, memory_order_acquire) == seen) {
      pthread_mutex_lock(&p->mutex);
      while (atomic_load(&p->generation) == seen) pthread_cond_wait(&p->go, &p->mutex);
      pthread_mutex_unlock(&p->mutex);
    }
    seen = atomic_load(&p->generation);
    part(p, self);
    atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
  }
  return NULL;
}

static void parallel_for(void* host, int64_t n, FN(_task_fn) fn, void* task) {
  pool* p = (pool*)host;
  if (n < 2) {
    fn(task, 0, n);
    return;
  }
  p->fn = fn;
  p->task = task;
  p->chunk = n / (8 * p->threads) > 1 ? n / (8 * p->threads) : 1;
  for (int t = 0; t < p->threads; ++t) {
    atomic_store(&p->shares[t].next, n * t / p->threads);
    p->shares[t].end = n * (t + 1) / p->threads;
  }
  atomic_store(&p->pending, p->threads - 1);
  pthread_mutex_lock(&p->mutex);
  atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mutex);
  part(p, 0);
  while (atomic_load_explicit(&p->pending, memory_order_acquire)) cpu_relax();
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  if (argc < 5) return 2;
  const long batch = atol(argv[2]);
  const int threads = atoi(argv[3]), runs = atoi(argv[4]);
  if (threads < 1 || threads > MAX_THREADS) return 2;
  const double start = now_ms();
  FN()* model = NULL;
  if (FN(_create)(argv[1], &model) != K(_OK)) {
    fprintf(stderr, "create: %s\n", FN(_last_error)(model));
    return 1;
  }
  const double created = now_ms();
  static pool p = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};
  p.threads = threads;
  static worker workers[MAX_THREADS];
  for (int t = 1; t < threads; ++t) {
    pthread_t id;
    workers[t] = (worker){&p, t};
    pthread_create(&id, NULL, work, &workers[t]);
  }
  if (threads > 1) FN(_set_parallel_for)(model, parallel_for, &p);
  float* in = calloc((size_t)batch, K(_INPUT_0_ITEM_BYTES));
  void* out = malloc((size_t)batch * K(_OUTPUT_0_ITEM_BYTES));
  for (size_t i = 0; i < batch * K(_INPUT_0_ITEM_BYTES) / sizeof(float); ++i) in[i] = (float)((i * 37) % 101) / 50.0f - 1;
  const void* inputs[1] = {in};
  void* outputs[1] = {out};
  double* t = malloc(sizeof(double) * (size_t)runs);
  double first = 0;
  for (int r = -1; r < runs; ++r) {
    const double s = now_ms();
    if (FN(_run)(model, batch, inputs, outputs) != K(_OK)) return 1;
    if (r < 0)
      first = now_ms() - s;
    else
      t[r] = now_ms() - s;
  }
  qsort(t, (size_t)runs, sizeof(double), cmp);
  printf("{\"create_ms\": %.3f, \"first_run_ms\": %.3f, \"median_ms\": %.4f, \"min_ms\": %.4f}\n", created - start, first,
         t[runs / 2], t[0]);
  return 0;
}
