/* The runtime of a frozen bundle: the CPU check, weights loading and
 * checking, batch splitting (the CMSSW batch rules), and the calls into the
 * compiled specializations. Compiled to bitcode for every target and linked
 * into each bundle, internal there (two bundles in one program do not
 * clash), keeping the baseline target it was compiled for (bundle_abi.h).
 * Uses only libc: malloc/free for the simple API, POSIX I/O to read the
 * weights. A native bundle's oneDNN primitives are made and freed through
 * the descriptor's native_create/native_destroy (bundle_native.c). */
#define _POSIX_C_SOURCE 200809L /* open's O_CLOEXEC, pread */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#elif defined(__aarch64__)
#include <sys/auxv.h>
#else
#error "bundles target x86_64 and aarch64"
#endif

#define XXH_INLINE_ALL
#define XXH_NO_STREAM
#include <xxhash.h>

#include "bundle/runtime/bundle_abi.h"
#include "bundle/runtime/bundle_cpu_features.h"

#define MAX_RULES 16

typedef struct rule {
  int64_t batch;
  int32_t num_parts;
  int32_t parts[KILN_BUNDLE_MAX_SPECS]; /* spec indices */
} rule;

struct kiln_bundle {
  const kiln_bundle_desc* desc;
  uint8_t* image; /* the weights file read into memory, owned */
  const uint8_t* weights;
  uint8_t* arena;
  uint8_t* staging;                   /* padded copies of every input and output for the largest batch */
  const kiln_bundle_variant* variant; /* the code this CPU runs */
  kiln_pk_threads threads;
  void* native[KILN_BUNDLE_MAX_SPECS]; /* per spec: its oneDNN primitives (native bundles) */
  int32_t ready;                       /* create succeeded */
  int32_t num_rules;
  rule rules[MAX_RULES];
  char error[1024]; /* room to name what a CPU lacks for every variant */
};

static void set_error(kiln_bundle* b, const char* what, const char* detail) {
  if (!b) return;
  snprintf(b->error, sizeof b->error, "%s%s%s", what, detail ? ": " : "", detail ? detail : "");
}

typedef struct cpu_feature {
  const char* name;
  int32_t word;
  uint64_t mask;
  uint64_t os_state;
} cpu_feature;
#define CPU_FEATURE(name, word, mask, os_state) {name, word, mask, os_state},

#if defined(__x86_64__)
static const cpu_feature kFeatures[] = {KILN_BUNDLE_X86_FEATURES(CPU_FEATURE)};
#define CPU_WORDS KILN_CPU_X86_WORDS
#define OLDER_CPUS "x86-64-v3,x86-64-v2,x86-64"
#define ANY_CPU "x86-64 runs on any x86-64 CPU"

/* XGETBV, in a function of its own: the builtin needs the XSAVE feature,
 * which the caller checks first. */
__attribute__((target("xsave"), noinline)) static uint64_t read_xcr0(void) { return __builtin_ia32_xgetbv(0); }

/* Fills the CPUID words of bundle_cpu_features.h; returns XCR0, the register
 * state the OS saves (0 when it has not enabled XSAVE). */
static uint64_t read_cpu(uint64_t words[CPU_WORDS]) {
  unsigned a, b, c, d;
  memset(words, 0, sizeof(uint64_t) * CPU_WORDS);
  if (__get_cpuid(1, &a, &b, &c, &d)) words[KILN_CPU_X86_1_ECX] = c;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    words[KILN_CPU_X86_7_EBX] = b;
    words[KILN_CPU_X86_7_ECX] = c;
    words[KILN_CPU_X86_7_EDX] = d;
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) {
    words[KILN_CPU_X86_7_1_EAX] = a;
    words[KILN_CPU_X86_7_1_EDX] = d;
  }
  if (__get_cpuid(0x80000001u, &a, &b, &c, &d)) words[KILN_CPU_X86_EXT_ECX] = c;
  return words[KILN_CPU_X86_1_ECX] & (1u << 27) ? read_xcr0() : 0; /* without OSXSAVE, XGETBV faults */
}
#else
static const cpu_feature kFeatures[] = {KILN_BUNDLE_AARCH64_FEATURES(CPU_FEATURE)};
#define CPU_WORDS KILN_CPU_ARM_WORDS
#define OLDER_CPUS "generic"
#define ANY_CPU "generic runs on any AArch64 CPU"
_Static_assert(HWCAP_ASIMD == (1ull << 1) && HWCAP_ATOMICS == (1ull << 8) && HWCAP_SVE == (1ull << 22) &&
                   HWCAP2_SVE2 == (1ull << 1) && HWCAP2_BF16 == (1ull << 14),
               "bundle_cpu_features.h spells Linux's HWCAP bits");

/* What the kernel says userspace may use: the CPU's features it enables. */
static uint64_t read_cpu(uint64_t words[CPU_WORDS]) {
  words[KILN_CPU_ARM_HWCAP] = getauxval(AT_HWCAP);
  words[KILN_CPU_ARM_HWCAP2] = getauxval(AT_HWCAP2);
  return 0;
}
#endif

/* Names the features of `list` ("avx2,fma,...") the CPU read into `words`
 * and `os_state` lacks in `missing` (", "-separated, cut to `size`); returns
 * how many it lacks. A name this runtime cannot check counts as lacking (the
 * freezer records none such). */
static int32_t missing_cpu_features(const char* list, const uint64_t* words, uint64_t os_state, char* missing, size_t size) {
  missing[0] = '\0';
  if (!list || !*list) return 0;
  int32_t count = 0;
  size_t used = 0;
  for (const char* p = list; *p;) {
    const char* end = strchr(p, ',');
    if (!end) end = p + strlen(p);
    const size_t len = (size_t)(end - p);
    const cpu_feature* f = NULL;
    for (size_t i = 0; !f && i < sizeof kFeatures / sizeof kFeatures[0]; ++i)
      if (strncmp(kFeatures[i].name, p, len) == 0 && kFeatures[i].name[len] == '\0') f = &kFeatures[i];
    if (len && (!f || (words[f->word] & f->mask) != f->mask || (os_state & f->os_state) != f->os_state)) {
      if (used < size) used += (size_t)snprintf(missing + used, size - used, "%s%.*s", count ? ", " : "", (int)len, p);
      ++count;
    }
    p = *end ? end + 1 : end;
  }
  return count;
}

/* The first variant whose features this CPU has, or -1, with what each
 * variant lacks in `error` (cut to `size`; NULL: no message). */
static int32_t choose_variant(const kiln_bundle_desc* d, char* error, size_t size) {
  uint64_t words[CPU_WORDS];
  const uint64_t os_state = read_cpu(words);
  char missing[512];
  size_t used = 0;
  if (error && size) error[0] = '\0';
  for (int32_t v = 0; v < d->num_variants; ++v) {
    const kiln_bundle_variant* variant = &d->variants[v];
    if (!missing_cpu_features(variant->cpu_features, words, os_state, missing, sizeof missing)) return v;
    if (!error) continue;
    const char* cpu = variant->cpu ? variant->cpu : "?";
    if (d->num_variants == 1)
      snprintf(error, size,
               "this CPU lacks %s, which the bundle's code was compiled for (cpu %s): freeze it again for an older CPU, "
               "or for several, best first (kiln aot-freeze --cpu " OLDER_CPUS ")",
               missing, cpu);
    else if (used < size)
      used += (size_t)snprintf(
          error + used, size - used, "%s%s (cpu %s)%s",
          v ? "; " : "this CPU lacks, for each of the bundle's code versions, what it was compiled for: ", missing, cpu,
          v + 1 < d->num_variants ? "" : ": freeze it again with an older CPU last (" ANY_CPU ")");
  }
  return -1;
}

/* The static API's choice: CPUID traps to the hypervisor in a virtual
 * machine, so it is made once per process (each bundle links its own
 * runtime, with one descriptor). 0: not yet chosen, -1: none fits, v + 1:
 * variant v. */
static int32_t static_variant;
static const kiln_bundle_variant* variant_for_static_api(const kiln_bundle_desc* d) {
  int32_t v = __atomic_load_n(&static_variant, __ATOMIC_RELAXED);
  if (!v) {
    const int32_t chosen = choose_variant(d, NULL, 0);
    v = chosen < 0 ? -1 : chosen + 1;
    __atomic_store_n(&static_variant, v, __ATOMIC_RELAXED);
  }
  return v > 0 ? &d->variants[v - 1] : NULL;
}

static uint64_t round_up(uint64_t n) { return (n + KILN_BUNDLE_ALIGNMENT - 1) / KILN_BUNDLE_ALIGNMENT * KILN_BUNDLE_ALIGNMENT; }

static uint8_t* aligned(uint64_t bytes) { return (uint8_t*)aligned_alloc(KILN_BUNDLE_ALIGNMENT, round_up(bytes ? bytes : 1)); }

static const char* const kShort = "shorter than its header (truncated, or not a Kiln weights file)";
static const char* const kChecksum = "corrupt or another bundle's weights (checksum differs)";

/* What is wrong with a weights header for an image of `size` bytes, or NULL.
 * The image's size follows from the header and the descriptor alone, so a
 * file is measured against it before anything is allocated. */
static const char* header_problem(const kiln_bundle_desc* d, const kiln_bundle_weights_header* h, uint64_t size) {
  if (memcmp(h->magic, KILN_BUNDLE_WEIGHTS_MAGIC, 8) != 0) return "not a Kiln weights file (bad magic)";
  /* A bundle's object and weights are written together, in one format. */
  if (h->abi_version < KILN_BUNDLE_ABI_VERSION)
    return "written for an older bundle format (ABI version below this bundle's): use the weights frozen with this object";
  if (h->abi_version > KILN_BUNDLE_ABI_VERSION)
    return "written for a newer bundle format (ABI version above this bundle's): use the weights frozen with this object";
  if (h->header_bytes < sizeof *h || h->header_bytes % KILN_BUNDLE_ALIGNMENT) return "a malformed header (its size)";
  if (h->data_bytes != d->weights_bytes) return "holds another bundle's weights (size differs)";
  if (h->checksum != d->weights_checksum) return kChecksum;
  if (size < h->header_bytes || size - h->header_bytes < h->data_bytes) return "truncated";
  if (size - h->header_bytes > h->data_bytes) return "longer than its header says (extra bytes after the weights)";
  return NULL;
}

/* The data of a weights image, or NULL (why in *problem). */
static const uint8_t* weights_data(const kiln_bundle_desc* d, const uint8_t* image, uint64_t size, int check_sum,
                                   const char** problem) {
  kiln_bundle_weights_header h;
  if (size < sizeof h) {
    *problem = kShort;
    return NULL;
  }
  memcpy(&h, image, sizeof h);
  if ((*problem = header_problem(d, &h, size))) return NULL;
  const uint8_t* data = image + h.header_bytes;
  if (check_sum && XXH3_64bits(data, (size_t)h.data_bytes) != h.checksum) {
    *problem = kChecksum;
    return NULL;
  }
  return data;
}

int32_t kiln_bundle_check_weights(const kiln_bundle_desc* desc, const void* image, uint64_t size) {
  const char* problem = NULL;
  if (!desc || !image) return KILN_BUNDLE_ERROR_ARGUMENT;
  return weights_data(desc, (const uint8_t*)image, size, 1, &problem) ? KILN_BUNDLE_OK : KILN_BUNDLE_ERROR_WEIGHTS;
}

/* Reads `size` bytes at offset 0; 0 if the file ends first or a read fails. */
static int read_all(int fd, void* into, uint64_t size) {
  for (uint64_t done = 0; done < size;) {
    const ssize_t n = pread(fd, (uint8_t*)into + done, (size_t)(size - done), (off_t)done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return 0;
    done += (uint64_t)n;
  }
  return 1;
}

static int32_t read_file(kiln_bundle* b, const char* path) {
  /* Non-blocking: opening a FIFO must not wait for a writer (only regular files are read). */
  const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    snprintf(b->error, sizeof b->error, "cannot open the weights file %s: %s", path, strerror(errno));
    return KILN_BUNDLE_ERROR_WEIGHTS;
  }
  int32_t rc = KILN_BUNDLE_ERROR_WEIGHTS;
  const char* problem = NULL;
  struct stat st;
  kiln_bundle_weights_header h;
  if (fstat(fd, &st) != 0) {
    problem = strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    problem = S_ISDIR(st.st_mode) ? "is a directory, not a weights file" : "is not a regular file (a FIFO, socket or device)";
  } else if ((uint64_t)st.st_size < sizeof h) {
    problem = kShort;
  } else if (!read_all(fd, &h, sizeof h)) {
    problem = "cannot be read";
  } else if (!(problem = header_problem(b->desc, &h, (uint64_t)st.st_size))) {
    /* The file is now the header's size plus this bundle's weights: only now allocate. */
    if (!(b->image = aligned((uint64_t)st.st_size))) {
      problem = "out of memory for its contents";
      rc = KILN_BUNDLE_ERROR_MEMORY;
    } else if (!read_all(fd, b->image, (uint64_t)st.st_size)) {
      problem = "cannot be read (did it shrink?)";
    } else if ((b->weights = weights_data(b->desc, b->image, (uint64_t)st.st_size, 1, &problem))) {
      rc = KILN_BUNDLE_OK;
    }
  }
  close(fd);
  if (rc != KILN_BUNDLE_OK) snprintf(b->error, sizeof b->error, "weights file %s: %s", path, problem);
  return rc;
}

/* The native specializations' oneDNN state, made by create. */
static void destroy_native(kiln_bundle* b) {
  for (int32_t s = 0; s < b->desc->num_specs; ++s)
    if (b->native[s]) b->desc->native_destroy(b->native[s]);
  memset(b->native, 0, sizeof b->native);
}

int32_t kiln_bundle_create(const kiln_bundle_desc* d, const char* weights_path, const void* weights, uint64_t weights_size,
                           kiln_bundle** out) {
  if (!out || !d) return KILN_BUNDLE_ERROR_ARGUMENT;
  *out = NULL;
  kiln_bundle* b = (kiln_bundle*)calloc(1, sizeof *b);
  if (!b) return KILN_BUNDLE_ERROR_MEMORY;
  b->desc = d;
  /* First, before any code compiled for a target runs. */
  const int32_t variant =
      d->num_variants > 0 && d->num_variants <= KILN_BUNDLE_MAX_VARIANTS ? choose_variant(d, b->error, sizeof b->error) : -1;
  if (variant < 0) {
    if (!b->error[0]) set_error(b, "the bundle's descriptor has no code for any CPU", NULL);
    *out = b;
    return KILN_BUNDLE_ERROR_CPU;
  }
  b->variant = &d->variants[variant];
  int32_t rc = KILN_BUNDLE_OK;
  if (d->embedded_weights || d->weights_bytes == 0) {
    b->weights = d->embedded_weights; /* a path or image given anyway is ignored, as the header says */
  } else if (weights) {
    const char* problem = NULL;
    b->weights = weights_data(d, (const uint8_t*)weights, weights_size, 1, &problem);
    if (!b->weights) {
      set_error(b, "weights in memory", problem);
      rc = KILN_BUNDLE_ERROR_WEIGHTS;
    }
  } else if (weights_path) {
    rc = read_file(b, weights_path);
  } else {
    set_error(b, "this bundle keeps its weights in a file: pass its path", NULL);
    rc = KILN_BUNDLE_ERROR_WEIGHTS;
  }
  uint64_t arena = 0, staging = 0;
  const int64_t largest = d->specs[d->num_specs - 1].batch;
  for (int32_t s = 0; s < d->num_specs; ++s)
    if ((uint64_t)d->specs[s].arena_bytes > arena) arena = (uint64_t)d->specs[s].arena_bytes;
  for (int32_t i = 0; i < d->num_inputs + d->num_outputs; ++i) {
    const kiln_bundle_tensor* t = i < d->num_inputs ? &d->inputs[i] : &d->outputs[i - d->num_inputs];
    if (t->batched) staging += round_up((uint64_t)t->item_bytes * (uint64_t)largest);
  }
  if (rc == KILN_BUNDLE_OK && (!(b->arena = aligned(arena)) || !(b->staging = aligned(staging)))) {
    set_error(b, "out of memory for the scratch arena", NULL);
    rc = KILN_BUNDLE_ERROR_MEMORY;
  }
  for (int32_t s = 0; s < d->num_specs && rc == KILN_BUNDLE_OK; ++s) {
    if (!d->specs[s].native) continue;
    if (d->native_create) {
      rc = d->native_create(d->specs[s].native, b->weights, &b->native[s], b->error, sizeof b->error);
    } else {
      set_error(b, "a native specialization without a native runtime", NULL);
      rc = KILN_BUNDLE_ERROR_NATIVE;
    }
  }
  if (rc != KILN_BUNDLE_OK) {
    /* The message stays readable through a handle that can only be destroyed. */
    *out = b;
    destroy_native(b);
    free(b->image);
    b->image = NULL;
    b->weights = NULL;
    return rc;
  }
  b->ready = 1;
  *out = b;
  return KILN_BUNDLE_OK;
}

void kiln_bundle_destroy(kiln_bundle* b) {
  if (!b) return;
  destroy_native(b);
  free(b->image);
  free(b->arena);
  free(b->staging);
  free(b);
}

const char* kiln_bundle_last_error(const kiln_bundle* b) { return b ? b->error : "no bundle"; }

const char* kiln_bundle_cpu(const kiln_bundle* b) { return b && b->ready ? b->variant->cpu : ""; }

void kiln_bundle_set_parallel_for(kiln_bundle* b, kiln_pk_parallel_for_fn fn, void* host) {
  if (!b) return;
  b->threads.parallel_for = fn;
  b->threads.host = host;
}

static int32_t spec_of(const kiln_bundle_desc* d, int64_t batch) {
  for (int32_t s = 0; s < d->num_specs; ++s)
    if (d->specs[s].batch == batch) return s;
  return -1;
}

static int64_t parse_int(const char** p) {
  int64_t v = 0;
  int digits = 0;
  while (**p >= '0' && **p <= '9' && digits < 12) {
    v = v * 10 + (**p - '0');
    ++*p;
    ++digits;
  }
  return digits ? v : -1;
}

/* "5:1,4;13:8,8": batch 5 runs as batch 1 then batch 4, batch 13 as 8 and 8
 * (the last part padded). Every part but the last is used in full. */
int32_t kiln_bundle_set_batch_rule(kiln_bundle* b, const char* text) {
  if (!b) return KILN_BUNDLE_ERROR_ARGUMENT;
  if (!text) {
    set_error(b, "set_batch_rule needs a rule, not NULL (\"\" goes back to the default rule)", NULL);
    return KILN_BUNDLE_ERROR_ARGUMENT;
  }
  rule parsed[MAX_RULES];
  int32_t n = 0;
  const char* p = text;
  while (*p) {
    if (n == MAX_RULES) {
      set_error(b, "too many batch rules (at most 16)", text);
      return KILN_BUNDLE_ERROR_ARGUMENT;
    }
    rule r;
    memset(&r, 0, sizeof r);
    r.batch = parse_int(&p);
    if (r.batch <= 0 || *p != ':') {
      set_error(b, "a batch rule is BATCH:SIZE,SIZE,... (rules separated by ';')", text);
      return KILN_BUNDLE_ERROR_ARGUMENT;
    }
    ++p;
    int64_t sum = 0, last = 0;
    for (;;) {
      const int64_t size = parse_int(&p);
      const int32_t s = size > 0 ? spec_of(b->desc, size) : -1;
      if (s < 0 || r.num_parts == KILN_BUNDLE_MAX_SPECS) {
        set_error(b, "a batch rule names a batch size this bundle was not compiled for", text);
        return KILN_BUNDLE_ERROR_ARGUMENT;
      }
      r.parts[r.num_parts++] = s;
      sum += size;
      last = size;
      if (*p != ',') break;
      ++p;
    }
    if (sum < r.batch || sum - last >= r.batch) {
      set_error(b, "a batch rule's sizes must add up to at least its batch, padding only the last part", text);
      return KILN_BUNDLE_ERROR_ARGUMENT;
    }
    parsed[n++] = r;
    if (*p == ';')
      ++p;
    else if (*p) {
      set_error(b, "a batch rule is BATCH:SIZE,SIZE,... (rules separated by ';')", text);
      return KILN_BUNDLE_ERROR_ARGUMENT;
    }
  }
  memcpy(b->rules, parsed, sizeof(rule) * (size_t)n);
  b->num_rules = n;
  return KILN_BUNDLE_OK;
}

/* The default rule: the largest compiled size that fits what is left; when
 * none fits, the smallest compiled size, padded. */
static int32_t next_part(const kiln_bundle_desc* d, int64_t left) {
  for (int32_t s = d->num_specs; s-- > 0;)
    if (d->specs[s].batch <= left) return s;
  return 0;
}

/* Copies `count` items of a tensor between the caller's batch (from item
 * `first`) and a compiled batch of `batch` items, one slice per index before
 * the batch axis; into the compiled batch, the items after `count` are zeros. */
static void copy_items(const kiln_bundle_tensor* t, uint8_t* user, uint8_t* compiled, int64_t user_batch, int64_t first,
                       int64_t count, int64_t batch, int into_compiled) {
  if (t->outer <= 0) return; /* a dim of 0 before the batch axis: nothing to copy */
  const uint64_t slice = (uint64_t)t->item_bytes / (uint64_t)t->outer;
  for (int64_t o = 0; o < t->outer; ++o) {
    uint8_t* u = user + ((uint64_t)o * (uint64_t)user_batch + (uint64_t)first) * slice;
    uint8_t* c = compiled + (uint64_t)o * (uint64_t)batch * slice;
    if (into_compiled) {
      memcpy(c, u, (uint64_t)count * slice);
      memset(c + (uint64_t)count * slice, 0, (uint64_t)(batch - count) * slice);
    } else {
      memcpy(u, c, (uint64_t)count * slice);
    }
  }
}

static int staged(const kiln_bundle_tensor* t, int padded, int64_t count, int64_t total) {
  return padded || (t->outer != 1 && count != total);
}

/* Runs items [first, first + count) of a batch of `total` on spec `s`. A
 * tensor whose batch is axis 0 is used in place when the part fills the
 * spec; otherwise (padded, or its batch on a later axis) it goes through
 * the staging memory. */
static int32_t run_part(const kiln_bundle* b, int32_t s, int64_t total, int64_t first, int64_t count, const void* const* inputs,
                        void* const* outputs) {
  const kiln_bundle_desc* d = b->desc;
  const kiln_bundle_spec* spec = &d->specs[s];
  void* io[KILN_BUNDLE_MAX_IO];
  const int padded = count < spec->batch;
  uint8_t* stage = b->staging;
  for (int32_t i = 0; i < d->num_inputs + d->num_outputs; ++i) {
    const int is_input = i < d->num_inputs;
    const kiln_bundle_tensor* t = is_input ? &d->inputs[i] : &d->outputs[i - d->num_inputs];
    uint8_t* user = is_input ? (uint8_t*)(uintptr_t)inputs[i] : (uint8_t*)outputs[i - d->num_inputs];
    if (!t->batched) {
      io[i] = user;
    } else if (!staged(t, padded, count, total)) {
      io[i] = user + (uint64_t)first * (uint64_t)t->item_bytes;
    } else {
      if (is_input) copy_items(t, user, stage, total, first, count, spec->batch, 1);
      io[i] = stage;
      stage += round_up((uint64_t)t->item_bytes * (uint64_t)spec->batch);
    }
  }
  const kiln_pk_threads* threads = b->threads.parallel_for ? &b->threads : NULL;
  const int32_t rc = b->variant->entries[s](b->weights, io, b->arena, threads, b->native[s]);
  if (rc != KILN_BUNDLE_OK) return rc;
  for (int32_t o = 0; o < d->num_outputs; ++o) {
    const kiln_bundle_tensor* t = &d->outputs[o];
    if (t->batched && staged(t, padded, count, total))
      copy_items(t, (uint8_t*)outputs[o], (uint8_t*)io[d->num_inputs + o], total, first, count, spec->batch, 0);
  }
  return KILN_BUNDLE_OK;
}

int32_t kiln_bundle_run(kiln_bundle* b, int64_t batch, const void* const* inputs, void* const* outputs) {
  if (!b || !b->ready) return KILN_BUNDLE_ERROR_ARGUMENT;
  const kiln_bundle_desc* d = b->desc;
  if (batch <= 0 || (d->num_inputs && !inputs) || !outputs) {
    set_error(b, "run needs a positive batch size and the input and output pointers", NULL);
    return KILN_BUNDLE_ERROR_ARGUMENT;
  }
  for (int32_t i = 0; i < d->num_inputs; ++i)
    if (!inputs[i]) {
      set_error(b, "an input pointer is null", d->inputs[i].name);
      return KILN_BUNDLE_ERROR_ARGUMENT;
    }
  for (int32_t o = 0; o < d->num_outputs; ++o)
    if (!outputs[o]) {
      set_error(b, "an output pointer is null", d->outputs[o].name);
      return KILN_BUNDLE_ERROR_ARGUMENT;
    }
  const rule* r = NULL;
  for (int32_t k = 0; k < b->num_rules; ++k)
    if (b->rules[k].batch == batch) r = &b->rules[k];
  int64_t done = 0;
  for (int32_t part = 0; done < batch; ++part) {
    const int32_t s = r ? (part < r->num_parts ? r->parts[part] : next_part(d, batch - done)) : next_part(d, batch - done);
    int64_t count = d->specs[s].batch;
    if (count > batch - done) count = batch - done;
    const int32_t rc = run_part(b, s, batch, done, count, inputs, outputs);
    if (rc != KILN_BUNDLE_OK) {
      set_error(b,
                rc == KILN_BUNDLE_ERROR_INDEX      ? "an index input is out of range"
                : rc == KILN_BUNDLE_ERROR_ARGUMENT ? "a Loop ran another number of iterations than its stacked outputs were "
                                                     "frozen for, or over 16777216 with neither a trip count nor a condition "
                                                     "turning false"
                                                   : "a oneDNN primitive failed",
                NULL);
      return rc;
    }
    done += count;
  }
  return KILN_BUNDLE_OK;
}

int32_t kiln_bundle_run_static(const kiln_bundle_desc* d, int32_t spec, const void* weights_image, void* arena,
                               const void* const* inputs, void* const* outputs, kiln_pk_parallel_for_fn fn, void* host) {
  if (!d || spec < 0 || spec >= d->num_specs || d->specs[spec].native || !outputs || (d->specs[spec].arena_bytes && !arena) ||
      ((uintptr_t)arena % KILN_BUNDLE_ALIGNMENT))
    return KILN_BUNDLE_ERROR_ARGUMENT;
  const kiln_bundle_variant* variant = variant_for_static_api(d);
  if (!variant) return KILN_BUNDLE_ERROR_CPU;
  const uint8_t* weights = d->embedded_weights;
  if (weights_image) {
    /* The header only: checksumming every run would cost a pass over the weights. */
    const char* problem = NULL;
    kiln_bundle_weights_header h;
    memcpy(&h, weights_image, sizeof h);
    weights = weights_data(d, (const uint8_t*)weights_image, h.header_bytes + h.data_bytes, 0, &problem);
  }
  if (!weights && d->weights_bytes) return KILN_BUNDLE_ERROR_WEIGHTS;
  if (((uintptr_t)weights % KILN_BUNDLE_ALIGNMENT)) return KILN_BUNDLE_ERROR_WEIGHTS;
  void* io[KILN_BUNDLE_MAX_IO];
  for (int32_t i = 0; i < d->num_inputs; ++i) io[i] = (void*)(uintptr_t)inputs[i];
  for (int32_t o = 0; o < d->num_outputs; ++o) io[d->num_inputs + o] = outputs[o];
  kiln_pk_threads threads = {fn, host};
  return variant->entries[spec](weights, io, (uint8_t*)arena, fn ? &threads : NULL, NULL);
}
