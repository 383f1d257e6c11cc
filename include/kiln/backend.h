/* Kiln's backend plugin ABI: the whole contract between Kiln (the host) and
 * a backend plugin, a shared library that compiles and runs parts of a
 * model. Plain C, standalone (standard C headers only): a plugin includes
 * this file and links nothing of Kiln.
 *
 * Life of a plugin
 *   1. The host dlopens the library and calls its one exported symbol,
 *      KILN_BACKEND_ENTRY_POINT, with its ABI version and its services
 *      (kiln_backend_host). The plugin answers with its function table
 *      (kiln_backend_api), which lives as long as the library, or refuses
 *      with a status and a message. The host never unloads a plugin.
 *   2. For each specialization of a model (every shape concrete) the host
 *      shows the plugin the graph through an opaque kiln_backend_graph and
 *      the accessors of kiln_backend_graph_api, and asks which nodes it
 *      takes: get_capability answers with groups of nodes, one partition each.
 *   3. The host cuts those partitions out (a partition's inputs are the
 *      values it reads from outside, its outputs what is read after it) and
 *      asks the plugin to compile each into an opaque kiln_backend_compiled.
 *   4. Runs hand the compiled partition positional buffers.
 *   5. serialize/deserialize let the host keep a compiled partition in its
 *      on-disk cache with the rest of the specialization: a warm start
 *      deserializes instead of compiling.
 *
 * Rules of the ABI
 *   - Every struct starts with its size (struct_size): a side reads a field
 *     only if the other side's struct_size covers it. Structs and tables
 *     only ever grow at the end; layouts are checked below (LP64 only).
 *   - Every call returns a kiln_backend_status and, when it is not
 *     KILN_BACKEND_OK, writes a zero-terminated message of at most
 *     KILN_BACKEND_MESSAGE_BYTES bytes (terminator included) into `message`.
 *     No exception and no C++ type crosses the ABI.
 *   - The host may call any function from any thread and from several
 *     threads at once (different Runtimes share a plugin); a plugin guards
 *     its own global state.
 *   - Pointers the host passes are valid for the call only, unless said
 *     otherwise. Strings are UTF-8 and zero-terminated.
 *   - A plugin runs inside the host's process: a plugin that corrupts memory
 *     can crash the host. Kiln checks every answer, not the plugin's code. */
#ifndef KILN_BACKEND_H
#define KILN_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_BACKEND_ABI_VERSION 1
#define KILN_BACKEND_ENTRY_POINT "kiln_backend_entry"
#define KILN_BACKEND_MESSAGE_BYTES 1024
/* Buffers the host passes to run are aligned to this many bytes. */
#define KILN_BACKEND_ALIGNMENT 64

typedef enum kiln_backend_status {
  KILN_BACKEND_OK = 0,
  KILN_BACKEND_ERROR = 1,            /* anything else; the message says what */
  KILN_BACKEND_UNSUPPORTED = 2,      /* the plugin cannot do this (refusing an ABI version, a node, a blob) */
  KILN_BACKEND_INVALID_ARGUMENT = 3, /* a null pointer, an index out of range, a bad buffer */
  KILN_BACKEND_OUT_OF_MEMORY = 4,
  KILN_BACKEND_NOT_FOUND = 5 /* graph_api.node_attribute: no attribute of that name */
} kiln_backend_status;

/* Element types: ONNX's TensorProto.DataType numbers. */
typedef enum kiln_backend_dtype {
  KILN_BACKEND_UNDEFINED = 0,
  KILN_BACKEND_FLOAT32 = 1,
  KILN_BACKEND_UINT8 = 2,
  KILN_BACKEND_INT8 = 3,
  KILN_BACKEND_UINT16 = 4,
  KILN_BACKEND_INT16 = 5,
  KILN_BACKEND_INT32 = 6,
  KILN_BACKEND_INT64 = 7,
  KILN_BACKEND_BOOL = 9,
  KILN_BACKEND_FLOAT16 = 10,
  KILN_BACKEND_FLOAT64 = 11,
  KILN_BACKEND_UINT32 = 12,
  KILN_BACKEND_UINT64 = 13,
  KILN_BACKEND_BFLOAT16 = 16
} kiln_backend_dtype;

typedef enum kiln_backend_log_level {
  KILN_BACKEND_LOG_DEBUG = 0,
  KILN_BACKEND_LOG_INFO = 1,
  KILN_BACKEND_LOG_WARNING = 2,
  KILN_BACKEND_LOG_ERROR = 3
} kiln_backend_log_level;

/* Opaque handles. A graph belongs to the host; a compiled partition to the
 * plugin, until the host releases it. */
typedef struct kiln_backend_graph kiln_backend_graph;
typedef struct kiln_backend_compiled kiln_backend_compiled;

/* ---- Reading a graph ------------------------------------------------------
 * Nodes are numbered 0..node_count-1 in an order where each node comes after
 * the nodes whose outputs it reads. Values (graph inputs, constants, every
 * node output) are numbered 0..value_count-1; -1 stands for an omitted
 * optional input or output. Every value has a concrete shape. Strings and
 * arrays returned stay valid as long as the graph, which lives for the
 * call it is passed to. */

typedef enum kiln_backend_attribute_type {
  KILN_BACKEND_ATTRIBUTE_FLOAT = 1,
  KILN_BACKEND_ATTRIBUTE_INT = 2,
  KILN_BACKEND_ATTRIBUTE_STRING = 3,
  KILN_BACKEND_ATTRIBUTE_TENSOR = 4,
  KILN_BACKEND_ATTRIBUTE_GRAPH = 5, /* a subgraph: not readable through this ABI version; do not claim its node */
  KILN_BACKEND_ATTRIBUTE_FLOATS = 6,
  KILN_BACKEND_ATTRIBUTE_INTS = 7,
  KILN_BACKEND_ATTRIBUTE_STRINGS = 8,
  KILN_BACKEND_ATTRIBUTE_OTHER = 99 /* a kind this ABI version does not describe (lists of tensors or graphs) */
} kiln_backend_attribute_type;

typedef struct kiln_backend_attribute {
  uint32_t struct_size;
  int32_t type;  /* kiln_backend_attribute_type */
  int64_t i;     /* INT */
  double f;      /* FLOAT */
  const char* s; /* STRING (s_bytes bytes, also zero-terminated) */
  size_t s_bytes;
  const int64_t* ints;        /* INTS: count */
  const float* floats;        /* FLOATS: count */
  const char* const* strings; /* STRINGS: count */
  size_t count;
  /* TENSOR: a constant tensor, dense and row-major. */
  int32_t tensor_dtype; /* kiln_backend_dtype */
  int32_t tensor_rank;
  const int64_t* tensor_dims;
  const void* tensor_data;
  size_t tensor_bytes;
} kiln_backend_attribute;

typedef struct kiln_backend_graph_api {
  uint32_t struct_size;
  uint32_t reserved;
  int64_t (*node_count)(const kiln_backend_graph* g);
  int64_t (*value_count)(const kiln_backend_graph* g);
  /* The graph's (or a partition's) inputs and outputs, in order: for a
   * partition, the order of run's buffers. */
  int64_t (*input_count)(const kiln_backend_graph* g);
  int64_t (*input)(const kiln_backend_graph* g, int64_t i); /* a value */
  int64_t (*output_count)(const kiln_backend_graph* g);
  int64_t (*output)(const kiln_backend_graph* g, int64_t i); /* a value */

  /* Nodes. An index out of range gives NULL, 0 or -1. */
  const char* (*node_op_type)(const kiln_backend_graph* g, int64_t node);
  const char* (*node_domain)(const kiln_backend_graph* g, int64_t node); /* "" for the ONNX operators */
  const char* (*node_name)(const kiln_backend_graph* g, int64_t node);
  int64_t (*node_opset)(const kiln_backend_graph* g, int64_t node); /* the model's version of the node's domain */
  int64_t (*node_input_count)(const kiln_backend_graph* g, int64_t node);
  int64_t (*node_input)(const kiln_backend_graph* g, int64_t node, int64_t i); /* a value, or -1 if omitted */
  int64_t (*node_output_count)(const kiln_backend_graph* g, int64_t node);
  int64_t (*node_output)(const kiln_backend_graph* g, int64_t node, int64_t i); /* a value, or -1 if omitted */
  int64_t (*node_attribute_count)(const kiln_backend_graph* g, int64_t node);
  const char* (*node_attribute_name)(const kiln_backend_graph* g, int64_t node, int64_t i);
  /* Fills *out (whose struct_size the caller sets); KILN_BACKEND_NOT_FOUND
   * if the node has no attribute `name`. */
  kiln_backend_status (*node_attribute)(const kiln_backend_graph* g, int64_t node, const char* name, kiln_backend_attribute* out);

  /* Values. */
  const char* (*value_name)(const kiln_backend_graph* g, int64_t value);
  int32_t (*value_dtype)(const kiln_backend_graph* g, int64_t value); /* kiln_backend_dtype */
  int32_t (*value_rank)(const kiln_backend_graph* g, int64_t value);
  const int64_t* (*value_dims)(const kiln_backend_graph* g, int64_t value);
  /* A value fixed when the model is compiled (an initializer, or folded by
   * the host): its data, dense and row-major, else NULL. */
  const void* (*value_constant)(const kiln_backend_graph* g, int64_t value, size_t* bytes);
} kiln_backend_graph_api;

/* ---- The host's services ---------------------------------------------- */

/* One piece of a parallel loop: the iterations [begin, end). */
typedef void (*kiln_backend_range_fn)(void* arg, int64_t begin, int64_t end);

/* The threads of the Runtime a call works for. A plugin does not start
 * threads of its own for compiles or runs: it splits its work with
 * parallel_for, which runs fn over [0, n) in pieces on at most `count`
 * threads (the caller's included) and returns when every piece is done. */
typedef struct kiln_backend_threads {
  uint32_t struct_size;
  int32_t count;
  void* context;
  void (*parallel_for)(void* context, int64_t n, kiln_backend_range_fn fn, void* arg);
} kiln_backend_threads;

typedef struct kiln_backend_host {
  uint32_t struct_size;
  uint32_t abi_version;
  void* context;
  /* A message in the host's log, tagged with the plugin's name. */
  void (*log)(void* context, int32_t level, const char* text);
  /* Memory aligned to `alignment` (a power of two up to 4096); NULL if out of memory. */
  void* (*allocate)(void* context, size_t bytes, size_t alignment);
  void (*release)(void* context, void* memory);
  const kiln_backend_graph_api* graph;
} kiln_backend_host;

/* ---- What a plugin provides ---------------------------------------------- */

/* get_capability's answer: the plugin calls add_partition once per group of
 * nodes it takes. The host checks every call: each node must exist and
 * belong to one group only (else the whole answer is refused). A group whose
 * nodes are interleaved with nodes of other backends is compiled as several
 * partitions, one per uninterrupted piece. */
typedef struct kiln_backend_capability {
  uint32_t struct_size;
  uint32_t reserved;
  void* context;
  kiln_backend_status (*add_partition)(void* context, const int64_t* nodes, size_t count);
} kiln_backend_capability;

typedef struct kiln_backend_api {
  uint32_t struct_size;
  uint32_t abi_version; /* KILN_BACKEND_ABI_VERSION the plugin was built with */
  /* How Runtimes name it to force or exclude it: letters, digits, '_' and '-',
   * at most 64 bytes. */
  const char* name;
  /* Everything that changes the code the plugin makes (its version, the
   * library versions, the CPU it targets): part of Kiln's cache keys. */
  const char* identity;
  /* Plugins are asked in decreasing priority; the built-in cpu backend comes
   * after every plugin and takes what they leave. */
  int32_t priority;
  uint32_t reserved;
  /* The operators it may take, "Conv,Relu,..." (domain-qualified as
   * "com.example.Op" outside ONNX's), for listings: the graph-specific answer
   * is get_capability's. */
  const char* operators;

  kiln_backend_status (*get_capability)(const kiln_backend_graph* graph, const kiln_backend_capability* answer, char* message);
  /* Compiles a partition. Its inputs and outputs are run's buffers, in order. */
  kiln_backend_status (*compile)(const kiln_backend_graph* partition, const kiln_backend_threads* threads,
                                 kiln_backend_compiled** compiled, char* message);
  /* Computes the outputs from the inputs: dense, row-major host memory,
   * aligned to KILN_BACKEND_ALIGNMENT, of the dtype and dims of the
   * partition's values. May be called from several threads at once.
   * KILN_BACKEND_INVALID_ARGUMENT says the inputs' data is wrong (an index
   * out of range): the caller's mistake, reported to it as such. */
  kiln_backend_status (*run)(kiln_backend_compiled* compiled, const void* const* inputs, size_t input_count, void* const* outputs,
                             size_t output_count, const kiln_backend_threads* threads, char* message);
  /* Bytes from which deserialize can make the same compiled partition in
   * another process, valid until the compiled partition is released.
   * KILN_BACKEND_UNSUPPORTED if it cannot be saved (the host then compiles
   * it in every process). */
  kiln_backend_status (*serialize)(kiln_backend_compiled* compiled, const void** bytes, size_t* size, char* message);
  /* The same partition as `serialize` was given, in a later process; the
   * bytes are valid for the call only. Must not compile: a warm start is
   * expected to be quick. Must refuse (not crash on) bytes it did not write. */
  kiln_backend_status (*deserialize)(const kiln_backend_graph* partition, const void* bytes, size_t size,
                                     const kiln_backend_threads* threads, kiln_backend_compiled** compiled, char* message);
  void (*release_compiled)(kiln_backend_compiled* compiled);
  /* Compiles made so far in this process (a warm start leaves it unchanged). */
  int64_t (*compile_count)(void);
} kiln_backend_api;

/* The entry point, exported as KILN_BACKEND_ENTRY_POINT. host_abi_version is
 * the host's KILN_BACKEND_ABI_VERSION. On KILN_BACKEND_OK *api points to the
 * plugin's table. `host` lives as long as the process. */
typedef kiln_backend_status (*kiln_backend_entry_fn)(uint32_t host_abi_version, const kiln_backend_host* host,
                                                     const kiln_backend_api** api, char* message);

/* Layouts, LP64. A change here is a new ABI version. */
#if defined(__LP64__) || defined(_LP64)
#define KILN_BACKEND_STATIC_ASSERT(c, m) _Static_assert(c, m)
#ifdef __cplusplus
#undef KILN_BACKEND_STATIC_ASSERT
#define KILN_BACKEND_STATIC_ASSERT(c, m) static_assert(c, m)
#endif
KILN_BACKEND_STATIC_ASSERT(sizeof(kiln_backend_attribute) == 104, "kiln_backend_attribute layout");
KILN_BACKEND_STATIC_ASSERT(offsetof(kiln_backend_attribute, tensor_data) == 88, "kiln_backend_attribute layout");
KILN_BACKEND_STATIC_ASSERT(sizeof(kiln_backend_graph_api) == 8 + 22 * 8, "kiln_backend_graph_api layout");
KILN_BACKEND_STATIC_ASSERT(sizeof(kiln_backend_threads) == 24, "kiln_backend_threads layout");
KILN_BACKEND_STATIC_ASSERT(sizeof(kiln_backend_host) == 48, "kiln_backend_host layout");
KILN_BACKEND_STATIC_ASSERT(sizeof(kiln_backend_capability) == 24, "kiln_backend_capability layout");
KILN_BACKEND_STATIC_ASSERT(offsetof(kiln_backend_api, get_capability) == 40, "kiln_backend_api layout");
KILN_BACKEND_STATIC_ASSERT(sizeof(kiln_backend_api) == 40 + 7 * 8, "kiln_backend_api layout");
#undef KILN_BACKEND_STATIC_ASSERT
#endif

#ifdef __cplusplus
}
#endif

#endif /* KILN_BACKEND_H */
