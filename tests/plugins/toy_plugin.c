/* A small backend plugin in one C file, written against include/kiln/backend.h
 * alone, as a third party would: float32 Relu, Add and Mul of equal shapes.
 * It is a real plugin (tests compare it with the reference), and, built
 * with TOY_BROKEN set, each of the ways a plugin can misbehave that Kiln
 * must survive (tests/CMakeLists.txt builds one library per way).
 *
 * A compiled partition is a small program: per value its element count and
 * where its data is (a boundary buffer, a constant, scratch); per node an
 * operation and three values. compile writes the program as bytes, and
 * deserialize reads those bytes back: one path for both. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/backend.h"

#define TOY_OK 0
#define TOY_WRONG_ABI 1
#define TOY_NO_ENTRY 2
#define TOY_REFUSES 3
#define TOY_BAD_NODE 4
#define TOY_DUPLICATE 5
#define TOY_COMPILE_FAILS 6
#define TOY_RUN_FAILS 7
#define TOY_BAD_BLOB 8
#define TOY_BUILTIN_NAME 9

#ifndef TOY_BROKEN
#define TOY_BROKEN TOY_OK
#endif
#ifndef TOY_NAME
#define TOY_NAME "toy"
#endif

enum { OP_RELU = 1, OP_ADD = 2, OP_MUL = 3 };
static const char kMagic[8] = {'T', 'O', 'Y', 'P', 'L', 'U', 'G', '1'};

static const kiln_backend_host* host;
static int64_t compiles; /* the tests compile from one thread at a time */

static kiln_backend_status say(char* message, kiln_backend_status status, const char* text) {
  snprintf(message, KILN_BACKEND_MESSAGE_BYTES, "%s", text);
  return status;
}

static int op_code(const char* op) {
  if (strcmp(op, "Relu") == 0) return OP_RELU;
  if (strcmp(op, "Add") == 0) return OP_ADD;
  if (strcmp(op, "Mul") == 0) return OP_MUL;
  return 0;
}

static int64_t numel(const kiln_backend_graph* g, int64_t v) {
  const kiln_backend_graph_api* a = host->graph;
  const int32_t rank = a->value_rank(g, v);
  const int64_t* dims = a->value_dims(g, v);
  int64_t n = 1;
  if (rank < 0 || (rank > 0 && !dims)) return -1;
  for (int32_t i = 0; i < rank; ++i) n *= dims[i];
  return n;
}

static int same_shape(const kiln_backend_graph* g, int64_t x, int64_t y) {
  const kiln_backend_graph_api* a = host->graph;
  const int32_t rank = a->value_rank(g, x);
  if (rank < 0 || rank != a->value_rank(g, y)) return 0;
  return rank == 0 || memcmp(a->value_dims(g, x), a->value_dims(g, y), (size_t)rank * sizeof(int64_t)) == 0;
}

/* Float32 elementwise with inputs shaped like the output: no broadcasting. */
static int takes(const kiln_backend_graph* g, int64_t n) {
  const kiln_backend_graph_api* a = host->graph;
  const int code = op_code(a->node_op_type(g, n));
  const int64_t inputs = a->node_input_count(g, n);
  if (!code || a->node_domain(g, n)[0] || a->node_output_count(g, n) != 1) return 0;
  if (inputs != (code == OP_RELU ? 1 : 2)) return 0;
  const int64_t out = a->node_output(g, n, 0);
  if (out < 0 || a->value_dtype(g, out) != KILN_BACKEND_FLOAT32) return 0;
  for (int64_t i = 0; i < inputs; ++i) {
    const int64_t v = a->node_input(g, n, i);
    if (v < 0 || a->value_dtype(g, v) != KILN_BACKEND_FLOAT32 || !same_shape(g, v, out)) return 0;
  }
  return 1;
}

static kiln_backend_status get_capability(const kiln_backend_graph* g, const kiln_backend_capability* answer, char* message) {
  const int64_t count = host->graph->node_count(g);
  int64_t* nodes = malloc(sizeof(int64_t) * (size_t)(count + 1));
  size_t taken = 0;
  if (!nodes) return say(message, KILN_BACKEND_OUT_OF_MEMORY, "out of memory");
  for (int64_t n = 0; n < count; ++n)
    if (takes(g, n)) nodes[taken++] = n;
  if (TOY_BROKEN == TOY_BAD_NODE) nodes[taken++] = count + 5;
  kiln_backend_status s = KILN_BACKEND_OK;
  if (taken) s = answer->add_partition(answer->context, nodes, taken);
  if (TOY_BROKEN == TOY_DUPLICATE && taken && s == KILN_BACKEND_OK) s = answer->add_partition(answer->context, nodes, 1);
  free(nodes);
  return s == KILN_BACKEND_OK ? s : say(message, s, "the host refused a partition");
}

/* The program, as it is serialized: int64 fields, then the constants. */
typedef struct toy_program {
  int64_t values, steps, inputs, outputs, floats;
  int64_t* numel; /* per value */
  int64_t* where; /* per value: -1 scratch, -2 boundary, else an offset into constants */
  int64_t* step;  /* per step: op, a, b, out */
  int64_t* input; /* per boundary input: its value */
  int64_t* output;
  float* constants;
} toy_program;

struct kiln_backend_compiled {
  void* bytes;
  size_t size;
  toy_program p;
};

/* Points p into bytes, checking every count and index against the size. */
static int parse(const void* bytes, size_t size, toy_program* p) {
  const int64_t* f = (const int64_t*)((const char*)bytes + sizeof kMagic);
  if (size < sizeof kMagic + 5 * sizeof(int64_t) || memcmp(bytes, kMagic, sizeof kMagic) != 0) return 0;
  p->values = f[0], p->steps = f[1], p->inputs = f[2], p->outputs = f[3], p->floats = f[4];
  /* Counts bounded by the size first, so that the sums below cannot overflow. */
  const int64_t limit = (int64_t)(size / sizeof(float));
  if (p->values < 0 || p->steps < 0 || p->inputs < 0 || p->outputs < 0 || p->floats < 0 || p->values > limit ||
      p->steps > limit || p->inputs > limit || p->outputs > limit || p->floats > limit)
    return 0;
  const int64_t ints = 5 + 2 * p->values + 4 * p->steps + p->inputs + p->outputs;
  if (sizeof kMagic + (size_t)ints * sizeof(int64_t) + (size_t)p->floats * sizeof(float) != size) return 0;
  int64_t* q = (int64_t*)f + 5;
  p->numel = q, q += p->values;
  p->where = q, q += p->values;
  p->step = q, q += 4 * p->steps;
  p->input = q, q += p->inputs;
  p->output = q, q += p->outputs;
  p->constants = (float*)q;
  for (int64_t v = 0; v < p->values; ++v)
    if (p->numel[v] < 0 || p->where[v] < -2 || (p->where[v] >= 0 && p->numel[v] > p->floats - p->where[v])) return 0;
  for (int64_t s = 0; s < p->steps; ++s) {
    const int64_t* st = p->step + 4 * s;
    if (st[0] < OP_RELU || st[0] > OP_MUL) return 0;
    for (int k = 1; k < 4; ++k)
      if (st[k] < 0 || st[k] >= p->values) return 0;
    for (int k = 1; k < 3; ++k) /* the output's count once every index is known to be a value */
      if (p->numel[st[k]] != p->numel[st[3]]) return 0;
  }
  for (int64_t i = 0; i < p->inputs + p->outputs; ++i)
    if (p->input[i] < 0 || p->input[i] >= p->values) return 0; /* input and output are contiguous */
  return 1;
}

static kiln_backend_status load(const void* bytes, size_t size, kiln_backend_compiled** out, char* message) {
  kiln_backend_compiled* c = calloc(1, sizeof *c);
  if (!c || !(c->bytes = malloc(size ? size : 1))) {
    free(c);
    return say(message, KILN_BACKEND_OUT_OF_MEMORY, "out of memory");
  }
  memcpy(c->bytes, bytes, size);
  c->size = size;
  if (!parse(c->bytes, size, &c->p)) {
    free(c->bytes);
    free(c);
    return say(message, KILN_BACKEND_UNSUPPORTED, "these bytes are not a program of this plugin");
  }
  *out = c;
  return KILN_BACKEND_OK;
}

static kiln_backend_status compile(const kiln_backend_graph* g, const kiln_backend_threads* threads, kiln_backend_compiled** out,
                                   char* message) {
  const kiln_backend_graph_api* a = host->graph;
  (void)threads;
  if (TOY_BROKEN == TOY_COMPILE_FAILS) return say(message, KILN_BACKEND_ERROR, "toy compile failed on purpose");
  const int64_t values = a->value_count(g), steps = a->node_count(g), inputs = a->input_count(g), outputs = a->output_count(g);
  int64_t floats = 0;
  for (int64_t v = 0; v < values; ++v) {
    size_t bytes = 0;
    if (a->value_constant(g, v, &bytes)) floats += (int64_t)(bytes / sizeof(float));
  }
  const size_t size =
      sizeof kMagic + (size_t)(5 + 2 * values + 4 * steps + inputs + outputs) * sizeof(int64_t) + (size_t)floats * sizeof(float);
  char* bytes = calloc(1, size);
  if (!bytes) return say(message, KILN_BACKEND_OUT_OF_MEMORY, "out of memory");
  memcpy(bytes, kMagic, sizeof kMagic);
  int64_t* f = (int64_t*)(bytes + sizeof kMagic);
  f[0] = values, f[1] = steps, f[2] = inputs, f[3] = outputs, f[4] = floats;
  int64_t* numel_of = f + 5;
  int64_t* where = numel_of + values;
  int64_t* step = where + values;
  int64_t* input = step + 4 * steps;
  int64_t* output = input + inputs;
  float* constants = (float*)(output + outputs);
  int64_t at = 0;
  for (int64_t v = 0; v < values; ++v) {
    size_t cbytes = 0;
    const void* data = a->value_constant(g, v, &cbytes);
    numel_of[v] = numel(g, v);
    where[v] = -1;
    if (data) {
      memcpy(constants + at, data, cbytes);
      where[v] = at;
      at += (int64_t)(cbytes / sizeof(float));
    }
  }
  for (int64_t i = 0; i < inputs; ++i) where[input[i] = a->input(g, i)] = -2;
  for (int64_t i = 0; i < outputs; ++i) where[output[i] = a->output(g, i)] = -2;
  for (int64_t n = 0; n < steps; ++n) {
    int64_t* st = step + 4 * n;
    st[0] = op_code(a->node_op_type(g, n));
    st[1] = a->node_input(g, n, 0);
    st[2] = st[0] == OP_RELU ? st[1] : a->node_input(g, n, 1);
    st[3] = a->node_output(g, n, 0);
  }
  const kiln_backend_status s = load(bytes, size, out, message);
  free(bytes);
  if (s == KILN_BACKEND_OK) ++compiles;
  return s;
}

static kiln_backend_status run(kiln_backend_compiled* c, const void* const* in, size_t input_count, void* const* out,
                               size_t output_count, const kiln_backend_threads* threads, char* message) {
  const toy_program* p = &c->p;
  (void)threads;
  if (TOY_BROKEN == TOY_RUN_FAILS) return say(message, KILN_BACKEND_ERROR, "toy run failed on purpose");
  if ((int64_t)input_count != p->inputs || (int64_t)output_count != p->outputs)
    return say(message, KILN_BACKEND_INVALID_ARGUMENT, "wrong number of buffers");
  float** data = calloc((size_t)p->values + 1, sizeof(float*));
  if (!data) return say(message, KILN_BACKEND_OUT_OF_MEMORY, "out of memory");
  for (int64_t i = 0; i < p->inputs; ++i) data[p->input[i]] = (float*)in[i];
  for (int64_t i = 0; i < p->outputs; ++i) data[p->output[i]] = (float*)out[i];
  kiln_backend_status status = KILN_BACKEND_OK;
  for (int64_t v = 0; v < p->values; ++v) {
    if (p->where[v] >= 0)
      data[v] = p->constants + p->where[v];
    else if (p->where[v] == -1 && p->numel[v] > 0 && !(data[v] = host->allocate(host->context, (size_t)p->numel[v] * 4, 64)))
      status = say(message, KILN_BACKEND_OUT_OF_MEMORY, "out of memory");
  }
  for (int64_t s = 0; s < p->steps && status == KILN_BACKEND_OK; ++s) {
    const int64_t* st = p->step + 4 * s;
    const float *x = data[st[1]], *y = data[st[2]];
    float* z = data[st[3]];
    for (int64_t i = 0; i < p->numel[st[3]]; ++i)
      z[i] = st[0] == OP_RELU ? (x[i] > 0 ? x[i] : 0) : st[0] == OP_ADD ? x[i] + y[i] : x[i] * y[i];
  }
  for (int64_t v = 0; v < p->values; ++v)
    if (p->where[v] == -1) host->release(host->context, data[v]);
  free(data);
  return status;
}

static kiln_backend_status serialize(kiln_backend_compiled* c, const void** bytes, size_t* size, char* message) {
  (void)message;
  *bytes = c->bytes;
  *size = c->size;
  if (TOY_BROKEN == TOY_BAD_BLOB) *size = 3; /* bytes deserialize cannot read */
  return KILN_BACKEND_OK;
}

static kiln_backend_status deserialize(const kiln_backend_graph* g, const void* bytes, size_t size,
                                       const kiln_backend_threads* threads, kiln_backend_compiled** out, char* message) {
  (void)threads;
  const kiln_backend_status s = load(bytes, size, out, message);
  if (s == KILN_BACKEND_OK && (*out)->p.values != host->graph->value_count(g)) {
    free((*out)->bytes);
    free(*out);
    return say(message, KILN_BACKEND_UNSUPPORTED, "this program was made for another partition");
  }
  return s;
}

static void release_compiled(kiln_backend_compiled* c) {
  if (!c) return;
  free(c->bytes);
  free(c);
}

static int64_t compile_count(void) { return compiles; }

static const kiln_backend_api table = {
    sizeof(kiln_backend_api),
    TOY_BROKEN == TOY_WRONG_ABI ? 99 : KILN_BACKEND_ABI_VERSION,
    TOY_BROKEN == TOY_BUILTIN_NAME ? "cpu" : TOY_NAME,
    "toy plugin 1 (" TOY_NAME ")",
    10,
    0,
    "Relu,Add,Mul",
    get_capability,
    compile,
    run,
    serialize,
    deserialize,
    release_compiled,
    compile_count,
};

#if TOY_BROKEN == TOY_NO_ENTRY
#define TOY_ENTRY kiln_backend_entry_misspelt
#else
#define TOY_ENTRY kiln_backend_entry
#endif

__attribute__((visibility("default"))) kiln_backend_status TOY_ENTRY(uint32_t host_abi_version, const kiln_backend_host* h,
                                                                     const kiln_backend_api** api, char* message) {
  if (TOY_BROKEN == TOY_REFUSES) return say(message, KILN_BACKEND_UNSUPPORTED, "toy refuses: no licence for this host");
  if (host_abi_version < 1 || !h || h->struct_size < sizeof(kiln_backend_host) || !h->graph)
    return say(message, KILN_BACKEND_UNSUPPORTED, "needs backend ABI version 1");
  host = h;
  if (h->log) h->log(h->context, KILN_BACKEND_LOG_INFO, "toy: ready");
  *api = &table;
  return KILN_BACKEND_OK;
}
