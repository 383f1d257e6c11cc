/* The oneDNN side of a native bundle (bundle_native.h): makes each
 * specialization's primitives once, when the bundle is created, and runs
 * them for the generated entry. Compiled to bitcode for the host and linked
 * into native bundles only, internal there; the program links libdnnl.
 * oneDNN runs its primitives on its own OpenMP threads, not through the
 * host's parallel_for (which the bundle's generated loops still use). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dnnl.h>

#include "bundle/runtime/bundle_native.h"

typedef struct primitive_state {
  dnnl_primitive_t primitive;
  dnnl_memory_t* memories; /* the constants, then one per runtime argument (NULL where not bound) */
  int32_t num_memories;
  dnnl_exec_arg_t* exec_args;
  int32_t num_exec_args;
  int32_t num_runtime;
  int32_t sum_from, dst_index;
  size_t dst_bytes;
} primitive_state;

typedef struct native_state {
  dnnl_engine_t engine;
  dnnl_stream_t stream;
  int32_t num_primitives;
  primitive_state* primitives;
} native_state;

void kiln_bundle_native_destroy(void* state) {
  native_state* s = (native_state*)state;
  if (!s) return;
  for (int32_t i = 0; i < s->num_primitives; ++i) {
    primitive_state* p = &s->primitives[i];
    for (int32_t m = 0; m < p->num_memories; ++m)
      if (p->memories[m]) dnnl_memory_destroy(p->memories[m]);
    if (p->primitive) dnnl_primitive_destroy(p->primitive);
    free(p->memories);
    free(p->exec_args);
  }
  free(s->primitives);
  if (s->stream) dnnl_stream_destroy(s->stream);
  if (s->engine) dnnl_engine_destroy(s->engine);
  free(s);
}

/* status 0: not a oneDNN failure, nothing to add. */
static int32_t fail(char* error, uint64_t size, const char* label, const char* what, int status) {
  char code[32] = "";
  if (status) snprintf(code, sizeof code, " (oneDNN status %d)", status);
  snprintf(error, (size_t)size, "%s%s%s%s", label ? label : "", label ? ": " : "", what, code);
  return KILN_BUNDLE_ERROR_NATIVE;
}

/* The argument a quantization entry's values apply to (output scales: the
 * destination), or 0 when its kind and argument do not go together. */
static int quantized_arg(const kiln_bundle_native_quantization* q) {
  switch (q->kind) {
    case KILN_BUNDLE_NATIVE_OUTPUT_SCALES: return q->arg == DNNL_ARG_DST ? DNNL_ARG_DST : 0;
    case KILN_BUNDLE_NATIVE_SCALES: return q->arg == DNNL_ARG_SRC_0 || q->arg == DNNL_ARG_SRC_1 ? q->arg : 0;
    case KILN_BUNDLE_NATIVE_ZERO_POINTS:
      return q->arg == DNNL_ARG_SRC || q->arg == DNNL_ARG_WEIGHTS || q->arg == DNNL_ARG_DST ? q->arg : 0;
    default: return 0;
  }
}

/* The step argument that binds a run-time value of `q`. */
static int runtime_arg(const kiln_bundle_native_quantization* q) {
  return q->kind == KILN_BUNDLE_NATIVE_OUTPUT_SCALES ? DNNL_ARG_ATTR_OUTPUT_SCALES : DNNL_ARG_ATTR_ZERO_POINTS | q->arg;
}

/* What is wrong with the quantization entries themselves, or NULL; whether
 * their masks and counts fit the arguments is checked on the primitive
 * (check_quantization). */
static const char* quantization_problem(const kiln_bundle_native_primitive* p) {
  if (p->num_quantization < 0 || (p->num_quantization > 0 && !p->quantization)) return "a malformed quantization table";
  for (int32_t i = 0; i < p->num_quantization; ++i) {
    const kiln_bundle_native_quantization* q = &p->quantization[i];
    if (!quantized_arg(q)) return "a quantization entry of an unknown kind or for an argument it cannot apply to";
    if (q->runtime ? q->runtime != 1 || q->kind == KILN_BUNDLE_NATIVE_SCALES || q->count != 0
                   : q->count < 1 || q->count > INT32_MAX || !q->values)
      return "a quantization entry without its values";
    for (int32_t j = 0; j < i; ++j)
      if (p->quantization[j].kind == q->kind && p->quantization[j].arg == q->arg) return "a quantization entry twice";
  }
  return NULL;
}

static dnnl_status_t set_quantization(dnnl_primitive_attr_t attr, const kiln_bundle_native_quantization* q) {
  /* DNNL_RUNTIME_F32_VAL is a NaN: the bits of oneDNN's constant. */
  const float runtime_scale = DNNL_RUNTIME_F32_VAL;
  const int32_t runtime_point = DNNL_RUNTIME_S32_VAL;
  const dnnl_dim_t count = q->runtime ? 1 : (dnnl_dim_t)q->count;
  switch (q->kind) {
    case KILN_BUNDLE_NATIVE_OUTPUT_SCALES:
      return dnnl_primitive_attr_set_output_scales(attr, count, q->mask, q->runtime ? &runtime_scale : (const float*)q->values);
    case KILN_BUNDLE_NATIVE_SCALES: return dnnl_primitive_attr_set_scales(attr, q->arg, count, q->mask, (const float*)q->values);
    default:
      return dnnl_primitive_attr_set_zero_points(attr, q->arg, count, q->mask,
                                                 q->runtime ? &runtime_point : (const int32_t*)q->values);
  }
}

static dnnl_primitive_attr_t make_attr(const kiln_bundle_native_primitive* p) {
  dnnl_post_ops_t ops = NULL;
  dnnl_primitive_attr_t attr = NULL;
  if (dnnl_post_ops_create(&ops) != dnnl_success) return NULL;
  int ok = 1;
  for (int32_t i = 0; i < p->num_post_ops && ok; ++i) {
    const kiln_bundle_native_post_op* op = &p->post_ops[i];
    if (op->kind == KILN_BUNDLE_NATIVE_POST_SUM)
      ok = dnnl_post_ops_append_sum(ops, op->scale) == dnnl_success;
    else
      ok = dnnl_post_ops_append_eltwise(ops, op->scale, (dnnl_alg_kind_t)op->alg, op->alpha, op->beta) == dnnl_success;
  }
  /* The scratchpad is a step buffer in the caller's arena: oneDNN's own
     belongs to the thread that created the primitive. */
  if (ok && dnnl_primitive_attr_create(&attr) == dnnl_success &&
      (dnnl_primitive_attr_set_post_ops(attr, ops) != dnnl_success ||
       dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) != dnnl_success)) {
    dnnl_primitive_attr_destroy(attr);
    attr = NULL;
  }
  for (int32_t i = 0; attr && i < p->num_quantization; ++i)
    if (set_quantization(attr, &p->quantization[i]) != dnnl_success) {
      dnnl_primitive_attr_destroy(attr);
      attr = NULL;
    }
  dnnl_post_ops_destroy(ops);
  return ok ? attr : NULL;
}

/* Each entry's values as many as its mask says over its argument's dims, or
 * one bound at run time (per tensor, mask 0) by an argument of the step:
 * oneDNN takes a mask and count as they are and would read past the values
 * (or an unbound value) of a tampered entry. Returns what does not fit, or
 * NULL; `why` holds the message. */
static const char* check_quantization(const kiln_bundle_native_primitive* p, const_dnnl_primitive_desc_t pd, char* why,
                                      size_t size) {
  for (int32_t i = 0; i < p->num_quantization; ++i) {
    const kiln_bundle_native_quantization* q = &p->quantization[i];
    const int arg = quantized_arg(q);
    const dnnl_memory_desc_t* md = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg);
    dnnl_dim_t want = 1;
    for (int d = 0; md && d < DNNL_MAX_NDIMS; ++d)
      if (q->mask & (1 << d)) want *= d < md->ndims ? md->dims[d] : 0;
    int bound = 0;
    for (int32_t c = 0; c < p->num_constants; ++c) bound |= p->constants[c].id == runtime_arg(q);
    for (int32_t r = 0; r < p->num_runtime; ++r) bound |= p->runtime[r].id == runtime_arg(q);
    if (!md || md->ndims <= 0 || q->mask < 0 || q->mask >= (1 << md->ndims) ||
        (q->runtime ? q->mask != 0 || !bound : q->count != want)) {
      snprintf(why, size, "%s of argument %d (mask %d, %lld values%s) do not fit it",
               q->kind == KILN_BUNDLE_NATIVE_ZERO_POINTS ? "zero points"
               : q->kind == KILN_BUNDLE_NATIVE_SCALES    ? "scales"
                                                         : "output scales",
               q->arg, q->mask, (long long)q->count,
               q->runtime ? (bound ? ", bound at run time" : ", bound by no argument") : "");
      return why;
    }
  }
  return NULL;
}

/* A constant that binds a scale or zero point at run time: one value of its
 * type, for an entry of `p` bound at run time. 0: not such an argument. */
static int is_runtime_quantization(const kiln_bundle_native_primitive* p, int32_t id) {
  for (int32_t i = 0; i < p->num_quantization; ++i)
    if (p->quantization[i].runtime && runtime_arg(&p->quantization[i]) == id) return 1;
  return 0;
}

static dnnl_status_t make_desc(const kiln_bundle_native_primitive* p, dnnl_engine_t engine, dnnl_primitive_attr_t attr,
                               dnnl_primitive_desc_t* pd) {
  if (p->kind == dnnl_reorder)
    return dnnl_reorder_primitive_desc_create(pd, (const dnnl_memory_desc_t*)p->desc, engine, (const dnnl_memory_desc_t*)p->dst,
                                              engine, attr);
  if (p->kind == dnnl_concat) {
    dnnl_memory_desc_t* srcs = (dnnl_memory_desc_t*)malloc(sizeof(dnnl_memory_desc_t) * (size_t)(p->num_srcs ? p->num_srcs : 1));
    if (!srcs) return dnnl_out_of_memory;
    for (int32_t i = 0; i < p->num_srcs; ++i) memcpy(&srcs[i], p->srcs[i], sizeof *srcs);
    const dnnl_status_t status =
        dnnl_concat_primitive_desc_create(pd, (const dnnl_memory_desc_t*)p->dst, p->num_srcs, p->concat_axis, srcs, attr, engine);
    free(srcs);
    return status;
  }
  return dnnl_primitive_desc_create(pd, p->desc, attr, engine, NULL);
}

static int32_t make_primitive(native_state* s, const kiln_bundle_native_primitive* p, const uint8_t* weights,
                              primitive_state* out, char* error, uint64_t error_size) {
  out->sum_from = p->sum_from;
  out->dst_index = -1;
  out->num_runtime = p->num_runtime;
  const char* problem = quantization_problem(p);
  if (problem) return fail(error, error_size, p->label, problem, 0);
  dnnl_primitive_attr_t attr = make_attr(p);
  if (!attr) return fail(error, error_size, p->label, "oneDNN cannot make the post-ops, scales or zero points", 0);
  dnnl_primitive_desc_t pd = NULL;
  dnnl_status_t status = make_desc(p, s->engine, attr, &pd);
  dnnl_primitive_attr_destroy(attr);
  if (status != dnnl_success)
    return fail(error, error_size, p->label, "oneDNN cannot make the frozen primitive on this machine", status);
  char why[160];
  if ((problem = check_quantization(p, pd, why, sizeof why))) {
    dnnl_primitive_desc_destroy(pd);
    return fail(error, error_size, p->label, problem, 0);
  }
  status = dnnl_primitive_create(&out->primitive, pd);
  int32_t rc = KILN_BUNDLE_OK;
  out->num_memories = p->num_constants + p->num_runtime;
  out->memories = (dnnl_memory_t*)calloc((size_t)out->num_memories + 1, sizeof(dnnl_memory_t));
  out->exec_args = (dnnl_exec_arg_t*)calloc((size_t)out->num_memories + 1, sizeof(dnnl_exec_arg_t));
  if (status != dnnl_success)
    rc = fail(error, error_size, p->label, "oneDNN cannot create the primitive", status);
  else if (!out->memories || !out->exec_args) {
    fail(error, error_size, p->label, "out of memory", 0);
    rc = KILN_BUNDLE_ERROR_MEMORY;
  }
  /* The weights were reordered for the layout the primitive chose when it
   * was frozen: the primitive made here must want the same one. A scale or
   * zero point bound at run time has no layout to ask for: one value of its type. */
  for (int32_t c = 0; c < p->num_constants && rc == KILN_BUNDLE_OK; ++c) {
    const kiln_bundle_native_arg* a = &p->constants[c];
    const dnnl_memory_desc_t* saved = (const dnnl_memory_desc_t*)a->md;
    const dnnl_memory_desc_t* want = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, a->id);
    if (is_runtime_quantization(p, a->id)) {
      const dnnl_data_type_t type = a->id == DNNL_ARG_ATTR_OUTPUT_SCALES ? dnnl_f32 : dnnl_s32;
      if (saved->ndims != 1 || saved->dims[0] != 1 || saved->data_type != type || a->bytes != 4 ||
          dnnl_memory_desc_get_size(saved) != 4) {
        rc = fail(error, error_size, p->label, "a scale or zero point bound at run time is not one value", 0);
        break;
      }
      want = saved;
    } else if (!want || !dnnl_memory_desc_equal(want, saved) || (int64_t)dnnl_memory_desc_get_size(want) != a->bytes) {
      rc = fail(
          error, error_size, p->label,
          "oneDNN on this CPU wants the weights in another layout than when the bundle was frozen (freeze it on this machine)",
          0);
      break;
    }
    status = dnnl_memory_create(&out->memories[c], want, s->engine, (void*)(uintptr_t)(weights + a->offset));
    if (status != dnnl_success) {
      rc = fail(error, error_size, p->label, "oneDNN cannot bind a weight", status);
      break;
    }
    out->exec_args[out->num_exec_args].arg = a->id;
    out->exec_args[out->num_exec_args++].memory = out->memories[c];
  }
  for (int32_t r = 0; r < p->num_runtime && rc == KILN_BUNDLE_OK; ++r) {
    const kiln_bundle_native_arg* a = &p->runtime[r];
    if (a->id == DNNL_ARG_DST) {
      out->dst_index = r;
      out->dst_bytes = dnnl_memory_desc_get_size((const dnnl_memory_desc_t*)a->md);
    }
    if (a->id == KILN_BUNDLE_NATIVE_NOT_BOUND) continue;
    dnnl_memory_t* m = &out->memories[p->num_constants + r];
    status = dnnl_memory_create(m, (const dnnl_memory_desc_t*)a->md, s->engine, DNNL_MEMORY_NONE);
    if (status != dnnl_success) {
      rc = fail(error, error_size, p->label, "oneDNN cannot bind an argument", status);
      break;
    }
    out->exec_args[out->num_exec_args].arg = a->id;
    out->exec_args[out->num_exec_args++].memory = *m;
  }
  if (rc == KILN_BUNDLE_OK && p->sum_from >= 0 && (out->dst_index < 0 || p->sum_from >= p->num_runtime))
    rc = fail(error, error_size, p->label, "a Sum post-op without a destination", 0);
  dnnl_primitive_desc_destroy(pd);
  return rc;
}

int32_t kiln_bundle_native_create(const void* table, const uint8_t* weights, void** state, char* error, uint64_t error_size) {
  const kiln_bundle_native_table* t = (const kiln_bundle_native_table*)table;
  *state = NULL;
  const dnnl_version_t* v = dnnl_version();
  if (v->major != t->dnnl_major || v->minor != t->dnnl_minor) {
    snprintf(error, (size_t)error_size, "this bundle was frozen with oneDNN %d.%d and needs it, but libdnnl here is %d.%d",
             t->dnnl_major, t->dnnl_minor, v->major, v->minor);
    return KILN_BUNDLE_ERROR_NATIVE;
  }
  native_state* s = (native_state*)calloc(1, sizeof *s);
  if (!s) return KILN_BUNDLE_ERROR_MEMORY;
  s->primitives = (primitive_state*)calloc((size_t)t->num_primitives + 1, sizeof(primitive_state));
  int32_t rc = s->primitives ? KILN_BUNDLE_OK : KILN_BUNDLE_ERROR_MEMORY;
  dnnl_status_t status = dnnl_success;
  if (rc == KILN_BUNDLE_OK && (status = dnnl_engine_create(&s->engine, dnnl_cpu, 0)) != dnnl_success)
    rc = fail(error, error_size, NULL, "oneDNN cannot make a CPU engine", status);
  if (rc == KILN_BUNDLE_OK && (status = dnnl_stream_create(&s->stream, s->engine, dnnl_stream_default_flags)) != dnnl_success)
    rc = fail(error, error_size, NULL, "oneDNN cannot make a stream", status);
  for (int32_t i = 0; i < t->num_primitives && rc == KILN_BUNDLE_OK; ++i) {
    s->num_primitives = i + 1;
    rc = make_primitive(s, &t->primitives[i], weights, &s->primitives[i], error, error_size);
  }
  if (rc != KILN_BUNDLE_OK) {
    kiln_bundle_native_destroy(s);
    return rc;
  }
  *state = s;
  return KILN_BUNDLE_OK;
}

int32_t kiln_bundle_native_execute(void* state, int32_t index, void* const* args) {
  native_state* s = (native_state*)state;
  primitive_state* p = &s->primitives[index];
  /* A Sum post-op adds what the destination holds: put the residual there. */
  if (p->sum_from >= 0 && args[p->sum_from] != args[p->dst_index]) memcpy(args[p->dst_index], args[p->sum_from], p->dst_bytes);
  dnnl_memory_t* bound = p->memories + (p->num_memories - p->num_runtime);
  for (int32_t r = 0; r < p->num_runtime; ++r)
    if (bound[r] && dnnl_memory_set_data_handle(bound[r], args[r]) != dnnl_success) return KILN_BUNDLE_ERROR_NATIVE;
  if (dnnl_primitive_execute(p->primitive, s->stream, p->num_exec_args, p->exec_args) != dnnl_success ||
      dnnl_stream_wait(s->stream) != dnnl_success)
    return KILN_BUNDLE_ERROR_NATIVE;
  return KILN_BUNDLE_OK;
}
