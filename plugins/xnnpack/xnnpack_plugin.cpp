// XNNPACK (Debian's libxnnpack-dev) as a Kiln backend plugin, through its
// subgraph API, against include/kiln/backend.h alone.
//
// get_capability takes the float32 nodes XNNPACK can run exactly as ONNX
// defines them (lowering.hpp: convolutions, fully connected layers with
// constant weights, poolings, elementwise operations and activations,
// Softmax over the last axis, reshapes), each node tried on its own
// through the same lowering compile uses and defined in XNNPACK, and
// answers them as groups of connected nodes. compile lowers a partition to
// a Program (program.hpp), checks it and makes XNNPACK runtimes from it
// (executable.hpp); serialize writes the Program, deserialize reads and
// checks it and makes the runtimes again, deciding nothing. Runs use the
// host's threads (thread_pool.hpp).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include <xnnpack.h>

#include "executable.hpp"
#include "graph.hpp"
#include "kiln/backend.h"
#include "lowering.hpp"
#include "program.hpp"
#include "thread_pool.hpp"

#if defined(__aarch64__)
#include <sys/auxv.h>
#endif

#ifndef KILN_XNNPACK_VERSION
#define KILN_XNNPACK_VERSION "unknown"
#endif

namespace {

using namespace kiln_xnnpack;

// Bumped whenever what the plugin takes, or how it lowers it, changes.
constexpr const char* kPluginVersion = "1";

const kiln_backend_host* host = nullptr;
std::atomic<int64_t> compiles{0};
bool threaded = false;
std::string identity;

kiln_backend_status fail(char* message, const std::string& text, kiln_backend_status status = KILN_BACKEND_ERROR) {
  if (message) std::snprintf(message, KILN_BACKEND_MESSAGE_BYTES, "%s", text.c_str());
  return status;
}

void log(int32_t level, const std::string& text) {
  if (host && host->log) host->log(host->context, level, text.c_str());
}

// Every entry point catches everything: nothing may unwind into the host.
template <typename F>
kiln_backend_status guarded(char* message, F&& f) {
  try {
    return f();
  } catch (const Decline& e) {
    return fail(message, e.what(), KILN_BACKEND_UNSUPPORTED);
  } catch (const std::bad_alloc&) {
    return fail(message, "out of memory", KILN_BACKEND_OUT_OF_MEMORY);
  } catch (const std::invalid_argument& e) {
    return fail(message, e.what(), KILN_BACKEND_INVALID_ARGUMENT);
  } catch (const std::exception& e) {
    return fail(message, e.what());
  } catch (...) {
    return fail(message, "an unknown exception");
  }
}

// The CPU features XNNPACK picks its kernels by (numbers can differ by the last bits between them).
std::string cpu_features() {
  std::string out;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  auto add = [&](bool has, const char* name) {
    if (has) out += std::string(out.empty() ? "" : " ") + name;
  };
  add(__builtin_cpu_supports("sse2"), "sse2");
  add(__builtin_cpu_supports("ssse3"), "ssse3");
  add(__builtin_cpu_supports("sse4.1"), "sse4.1");
  add(__builtin_cpu_supports("avx"), "avx");
  add(__builtin_cpu_supports("f16c"), "f16c");
  add(__builtin_cpu_supports("fma"), "fma");
  add(__builtin_cpu_supports("xop"), "xop");
  add(__builtin_cpu_supports("avx2"), "avx2");
  add(__builtin_cpu_supports("avx512f"), "avx512f");
  add(__builtin_cpu_supports("avx512cd"), "avx512cd");
  add(__builtin_cpu_supports("avx512bw"), "avx512bw");
  add(__builtin_cpu_supports("avx512dq"), "avx512dq");
  add(__builtin_cpu_supports("avx512vl"), "avx512vl");
  add(__builtin_cpu_supports("avx512vbmi"), "avx512vbmi");
#elif defined(__aarch64__)
  char hwcap[64];
  std::snprintf(hwcap, sizeof hwcap, "aarch64 hwcap %lx %lx", getauxval(AT_HWCAP), getauxval(AT_HWCAP2));
  out = hwcap;
#else
  out = "unknown";
#endif
  return out;
}

// The non-constant values node n reads, each once.
std::vector<int64_t> data_inputs(const Graph& g, int64_t n) {
  std::vector<int64_t> out;
  for (int64_t v : g.node_inputs(n))
    if (v >= 0 && !g.is_constant(v) && std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  return out;
}

std::vector<int64_t> made(const Graph& g, int64_t n) {
  std::vector<int64_t> out;
  for (int64_t v : g.node_outputs(n))
    if (v >= 0) out.push_back(v);
  return out;
}

void erase(std::vector<int64_t>& list, const std::vector<int64_t>& gone) {
  list.erase(
      std::remove_if(list.begin(), list.end(), [&](int64_t n) { return std::find(gone.begin(), gone.end(), n) != gone.end(); }),
      list.end());
}

// The nodes this plugin takes: known operators whose layouts agree, each of
// which lowers, checks and defines in XNNPACK on its own.
std::vector<int64_t> takes(const Graph& g) {
  std::vector<int64_t> nodes;
  for (int64_t n = 0; n < g.node_count(); ++n)
    if (g.domain(n).empty() && knows(g.op(n))) nodes.push_back(n);
  // Leaving out a node that needs ONNX's layout can only turn NHWC values back to ONNX's: repeat until none is left.
  std::vector<char> nhwc;
  for (;;) {
    std::vector<int64_t> conflicts;
    nhwc = plan_layouts(g, nodes, &conflicts);
    if (conflicts.empty()) break;
    erase(nodes, conflicts);
  }
  std::vector<int64_t> declined;
  for (int64_t n : nodes) {
    try {
      const std::vector<int64_t> inputs = data_inputs(g, n), outputs = made(g, n);
      const Program p = lower(g, {n}, inputs, outputs, nhwc);
      try {
        validate(p, g, inputs, outputs);
        check_definable(p, g);
      } catch (const Decline& e) {
        throw Decline(g.describe(n) + ": " + e.what());
      }
    } catch (const Decline& e) {
      declined.push_back(n);
      log(KILN_BACKEND_LOG_DEBUG, std::string("leaves ") + e.what());
    }
  }
  erase(nodes, declined);
  return nodes;
}

// The taken nodes in groups connected through the values they pass each other.
std::vector<std::vector<int64_t>> groups(const Graph& g, const std::vector<int64_t>& nodes) {
  std::vector<int64_t> group(size_t(g.node_count()), -1), producer(size_t(g.value_count()), -1), parent;
  auto find = [&](int64_t x) {
    while (parent[size_t(x)] != x) x = parent[size_t(x)] = parent[size_t(parent[size_t(x)])];
    return x;
  };
  for (int64_t n : nodes) {
    group[size_t(n)] = int64_t(parent.size());
    parent.push_back(int64_t(parent.size()));
    for (int64_t v : made(g, n)) producer[size_t(v)] = n;
  }
  for (int64_t n : nodes)
    for (int64_t v : data_inputs(g, n))
      if (producer[size_t(v)] >= 0) parent[size_t(find(group[size_t(n)]))] = find(group[size_t(producer[size_t(v)])]);
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> slot(parent.size(), -1);
  for (int64_t n : nodes) {
    const int64_t root = find(group[size_t(n)]);
    if (slot[size_t(root)] < 0) {
      slot[size_t(root)] = int64_t(out.size());
      out.emplace_back();
    }
    out[size_t(slot[size_t(root)])].push_back(n);
  }
  return out;
}

Graph graph_of(const kiln_backend_graph* g) {
  if (!g) throw std::invalid_argument("null graph");
  return Graph(*host->graph, g);
}

kiln_backend_status make(const kiln_backend_graph* partition, Program program, kiln_backend_compiled** out) {
  const Graph g = graph_of(partition);
  validate(program, g, g.inputs(), g.outputs());
  auto executable = std::make_unique<Executable>(std::move(program), g, threaded);
  *out = reinterpret_cast<kiln_backend_compiled*>(executable.release());
  return KILN_BACKEND_OK;
}

Executable& executable(kiln_backend_compiled* c) {
  if (!c) throw std::invalid_argument("null compiled partition");
  return *reinterpret_cast<Executable*>(c);
}

const kiln_backend_api kApi = {
    sizeof(kiln_backend_api),
    KILN_BACKEND_ABI_VERSION,
    "xnnpack",
    nullptr,  // identity: set by the entry point, which knows the CPU
    // Above the reference plugin's 0: XNNPACK's kernels are what it is for.
    50,
    0,
    kOperators,
    [](const kiln_backend_graph* graph, const kiln_backend_capability* answer, char* message) {
      return guarded(message, [&] {
        if (!answer || !answer->add_partition) throw std::invalid_argument("null capability answer");
        const Graph g = graph_of(graph);
        for (const std::vector<int64_t>& nodes : groups(g, takes(g))) {
          const kiln_backend_status s = answer->add_partition(answer->context, nodes.data(), nodes.size());
          if (s != KILN_BACKEND_OK) return fail(message, "the host refused a partition", s);
        }
        return KILN_BACKEND_OK;
      });
    },
    [](const kiln_backend_graph* partition, const kiln_backend_threads*, kiln_backend_compiled** out, char* message) {
      return guarded(message, [&] {
        if (!out) throw std::invalid_argument("null output");
        const Graph g = graph_of(partition);
        std::vector<int64_t> nodes(size_t(g.node_count())), conflicts;
        for (size_t i = 0; i < nodes.size(); ++i) nodes[i] = int64_t(i);
        const std::vector<char> nhwc = plan_layouts(g, nodes, &conflicts);
        if (!conflicts.empty())
          throw Decline(g.describe(conflicts[0]) + " needs ONNX's layout of a value the partition keeps NHWC");
        const kiln_backend_status s = make(partition, lower(g, nodes, g.inputs(), g.outputs(), nhwc), out);
        ++compiles;
        return s;
      });
    },
    [](kiln_backend_compiled* compiled, const void* const* inputs, size_t input_count, void* const* outputs, size_t output_count,
       const kiln_backend_threads* threads, char* message) {
      return guarded(message, [&] {
        if ((input_count && !inputs) || (output_count && !outputs)) throw std::invalid_argument("null buffer list");
        executable(compiled).run(inputs, input_count, outputs, output_count, threads);
        return KILN_BACKEND_OK;
      });
    },
    [](kiln_backend_compiled* compiled, const void** bytes, size_t* size, char* message) {
      return guarded(message, [&] {
        if (!bytes || !size) throw std::invalid_argument("null output");
        const std::string& blob = executable(compiled).blob();
        *bytes = blob.data();
        *size = blob.size();
        return KILN_BACKEND_OK;
      });
    },
    [](const kiln_backend_graph* partition, const void* bytes, size_t size, const kiln_backend_threads*,
       kiln_backend_compiled** out, char* message) {
      return guarded(message, [&] {
        if (!out) throw std::invalid_argument("null output");
        return make(partition, decode(bytes, size), out);
      });
    },
    [](kiln_backend_compiled* compiled) { delete reinterpret_cast<Executable*>(compiled); },
    []() -> int64_t { return compiles.load(); },
};

kiln_backend_api table = kApi;

}  // namespace

extern "C" __attribute__((visibility("default"))) kiln_backend_status kiln_backend_entry(uint32_t host_abi_version,
                                                                                         const kiln_backend_host* h,
                                                                                         const kiln_backend_api** out,
                                                                                         char* message) {
  return guarded(message, [&] {
    if (!h || !out) return fail(message, "null argument", KILN_BACKEND_INVALID_ARGUMENT);
    if (host_abi_version < 1 || h->struct_size < sizeof(kiln_backend_host) || !h->graph ||
        h->graph->struct_size < sizeof(kiln_backend_graph_api))
      return fail(message, "this plugin needs backend ABI version 1 or later with its full graph accessors",
                  KILN_BACKEND_UNSUPPORTED);
    static std::once_flag once;
    static xnn_status initialized = xnn_status_uninitialized;
    static std::string unthreaded;
    std::call_once(once, [] {
      initialized = xnn_initialize(nullptr);
      threaded = pool_reached(&unthreaded);
      identity = std::string("kiln-xnnpack ") + kPluginVersion + "; XNNPACK " + KILN_XNNPACK_VERSION + "; " + cpu_features() +
                 (threaded ? "" : "; one thread");
    });
    if (initialized != xnn_status_success)
      return fail(message,
                  "XNNPACK cannot run on this CPU (xnn_initialize failed with status " + std::to_string(int(initialized)) + ")",
                  KILN_BACKEND_UNSUPPORTED);
    host = h;
    if (!threaded)
      log(KILN_BACKEND_LOG_WARNING, "XNNPACK's thread pool calls do not reach this plugin (" + unthreaded +
                                        "): its partitions run on the calling thread only");
    table.identity = identity.c_str();
    *out = &table;
    return KILN_BACKEND_OK;
  });
}
