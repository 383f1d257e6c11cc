#include "bundle/bundle_header.hpp"

#include <cctype>
#include <sstream>

#include "bundle/runtime/bundle_abi.h"

namespace kiln::bundle {

namespace {

std::string upper(const std::string& s) {
  std::string out;
  for (char c : s) out += char(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string shape(const BundleDescription::Tensor& t) {
  std::string s = "[";
  for (size_t i = 0; i < t.dims.size(); ++i) {
    if (i) s += ", ";
    s += t.batched && int64_t(i) == t.batch_axis ? "B" : std::to_string(t.dims[i]);
  }
  return s + "]";
}

std::string list(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

std::string link_line(const BundleDescription& d, const std::string& cc) {
  std::string line = cc + " main.c " + d.object_file;
  if (d.object_file.rfind("lib", 0) == 0) line = cc + " main.c -L. -l" + d.name;
  return line + (d.native.empty() ? "" : " -ldnnl") + " -lm";  // the kernels call expf, erff, tanhf...
}

// "avx, avx2, ...", wrapped into comment lines that start with `indent`.
std::string feature_lines(const std::string& list, const std::string& indent) {
  std::string out, line;
  size_t start = 0;
  while (start < list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(start, end - start) + (end < list.size() ? "," : "");
    if (!line.empty() && line.size() + item.size() + 1 > 60) {
      out += line + "\n" + indent;
      line.clear();
    }
    line += (line.empty() ? "" : " ") + item;
    start = end + 1;
  }
  return out + line;
}

std::string cpu_names(const BundleDescription& d) {
  std::string names;
  for (const auto& v : d.variants) names += (names.empty() ? "" : ", ") + v.cpu;
  return names;
}

// Whether create can refuse a CPU: every version needs some feature.
bool checks_cpu(const BundleDescription& d) {
  for (const auto& v : d.variants)
    if (v.features.empty()) return false;
  return true;
}

std::string what_it_needs(const BundleDescription& d) {
  return d.native.empty() ? "only libc and libm" : "libc, libm and libdnnl (oneDNN " + d.native + ")";
}

}  // namespace

std::string bundle_header(const BundleDescription& d) {
  const std::string N = d.name, U = upper(d.name);
  std::ostringstream h;
  h << "/* " << N << ".h: a model frozen by `kiln aot-freeze` into a bundle that needs " << what_it_needs(d) << ".\n"
    << " *\n"
    << " * Model:   " << d.model << " (content XXH3-128 " << d.model_hash << ")\n"
    << " * Target:  " << d.triple << ", " << (d.variants.size() == 1 ? "cpu " : "code for each cpu of ") << cpu_names(d) << "; "
    << (d.native.empty() ? "portable kernels" : "native kernels (oneDNN " + d.native + " primitives)") << "\n";
  if (d.variants.size() == 1) {
    const std::string& features = d.variants[0].features;
    h << " * CPU:     "
      << (features.empty() ? "any of its architecture" : "needs " + feature_lines(features, " *                 ")) << "\n";
    if (!features.empty())
      h << " *          (" << N << "_create checks them before any of the code runs: on a CPU\n"
        << " *          without them it returns " << U << "_ERROR_CPU naming what is missing)\n";
  } else {
    h << " * CPU:     " << N << "_create runs the first version of the code whose features\n"
      << " *          this CPU has (" << N << "_cpu says which), checked before any of it runs:\n";
    for (const auto& v : d.variants)
      h << " *          - " << v.cpu << ": "
        << (v.features.empty() ? "any CPU of its architecture" : "needs " + feature_lines(v.features, " *              "))
        << "\n";
    if (checks_cpu(d)) h << " *          On a CPU none fits it returns " << U << "_ERROR_CPU naming what each lacks.\n";
  }
  h << " * Link:    " << link_line(d, "cc") << "\n"
    << " * Weights: "
    << (d.embedded_weights ? "embedded in the object"
                           : N + ".weights.bin (" + std::to_string(d.weights_bytes) + " bytes of data)")
    << "\n *\n"
    << " * Inputs and outputs, in the order run() takes them (B: the batch size):\n";
  for (size_t i = 0; i < d.inputs.size(); ++i)
    h << " *   input  " << i << " \"" << d.inputs[i].name << "\" " << ir::dtype_name(d.inputs[i].dtype) << " "
      << shape(d.inputs[i]) << "\n";
  for (size_t i = 0; i < d.outputs.size(); ++i)
    h << " *   output " << i << " \"" << d.outputs[i].name << "\" " << ir::dtype_name(d.outputs[i].dtype) << " "
      << shape(d.outputs[i]) << "\n";
  h << " * Tensors are dense and row-major, items of a batch one after the other.\n";
  bool later_axis = false;
  for (const auto* list : {&d.inputs, &d.outputs})
    for (const auto& t : *list) later_axis = later_axis || (t.batched && t.batch_axis > 0);
  if (later_axis)
    h << " * Where B is not the first axis (a recurrent state), the tensor is one\n"
      << " * [..., B, ...] array as its shape says: run() splits it along that axis.\n";
  h << " *\n"
    << " * Compiled batch sizes: " << list(d.batch_sizes) << ". run() takes any batch size: it splits\n"
    << " * the batch over the compiled sizes, the largest that fits first, and pads\n"
    << " * the last part with zeros when no compiled size fits it (override with\n"
    << " * " << N << "_set_batch_rule). ";
  if (d.native.empty())
    h << "The bundle starts no threads: pass a parallel_for\n"
      << " * to use yours; without one it runs on the calling thread.\n";
  else
    h << "Its oneDNN primitives run on oneDNN's OpenMP threads\n"
      << " * (OMP_NUM_THREADS sets how many); the rest uses the parallel_for you pass,\n"
      << " * or the calling thread.\n";
  h << " *\n"
    << " * Simple API: create (checks the CPU, reads and checks the weights, allocates\n"
    << " * the scratch memory" << (d.native.empty() ? "" : ", makes the oneDNN primitives")
    << "), run any number of times from one\n"
    << " * thread at a time, destroy.\n";
  if (d.native.empty())
    h << " * Static API (no heap): " << N << "_run_b<SIZE> for one compiled size, with the\n"
      << " * weights and a scratch arena of " << U << "_ARENA_BYTES_B<SIZE> bytes aligned to\n"
      << " * " << U << "_ALIGNMENT that the caller owns.\n";
  else
    h << " * No static API: oneDNN allocates, and the primitives live in the handle.\n"
      << " * create fails with " << U << "_ERROR_NATIVE if libdnnl is another version, or if\n"
      << " * oneDNN on this CPU wants the weights in other layouts than when frozen.\n";
  if (d.native.empty() && checks_cpu(d))
    h << " * The static API checks the CPU on its first call" << (d.variants.size() == 1 ? "" : " (and picks the version to run)")
      << ", and\n"
      << " * returns " << U << "_ERROR_CPU without running anything on a CPU "
      << (d.variants.size() == 1 ? "that lacks a\n * feature above.\n" : "no version\n * fits.\n");
  h << " */\n"
    << "#ifndef " << U << "_H\n#define " << U << "_H\n\n#include <stddef.h>\n#include <stdint.h>\n\n"
    << "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n"
    << "/* Status codes: every function returning int32_t returns one. */\n"
    << "enum {\n"
    << "  " << U << "_OK = " << KILN_BUNDLE_OK << ",\n"
    << "  " << U << "_ERROR_ARGUMENT = " << KILN_BUNDLE_ERROR_ARGUMENT
    << ", /* a null pointer, a bad batch size or batch rule; a Loop that runs away */\n"
    << "  " << U << "_ERROR_WEIGHTS = " << KILN_BUNDLE_ERROR_WEIGHTS
    << ",  /* weights missing, unreadable, truncated, corrupt or another bundle's */\n"
    << "  " << U << "_ERROR_MEMORY = " << KILN_BUNDLE_ERROR_MEMORY << ",   /* an allocation failed */\n"
    << "  " << U << "_ERROR_INDEX = " << KILN_BUNDLE_ERROR_INDEX << ",     /* an index input (Gather) was out of range */\n"
    << "  " << U << "_ERROR_NATIVE = " << KILN_BUNDLE_ERROR_NATIVE
    << ",    /* native bundles: oneDNN failed, or cannot make the frozen primitives here */\n"
    << "  " << U << "_ERROR_CPU = " << KILN_BUNDLE_ERROR_CPU
    << "        /* this CPU lacks instruction-set extensions the code was compiled for (see CPU above) */\n"
    << "};\n\n"
    << "#define " << U << "_NUM_INPUTS " << d.inputs.size() << "\n"
    << "#define " << U << "_NUM_OUTPUTS " << d.outputs.size() << "\n"
    << "#define " << U << "_NUM_BATCH_SIZES " << d.batch_sizes.size() << "\n"
    << "#define " << U << "_ALIGNMENT " << KILN_BUNDLE_ALIGNMENT << "\n";
  auto items = [&](const char* kind, const std::vector<BundleDescription::Tensor>& v) {
    for (size_t i = 0; i < v.size(); ++i)
      h << "#define " << U << "_" << kind << "_" << i << "_ITEM_BYTES " << v[i].item_bytes << " /* \"" << v[i].name << "\""
        << (!v[i].batched          ? ", whole tensor (not batched)"
            : v[i].batch_axis == 0 ? ", per batch item"
                                   : ", per batch item (batch on axis " + std::to_string(v[i].batch_axis) + ")")
        << " */\n";
  };
  items("INPUT", d.inputs);
  items("OUTPUT", d.outputs);
  for (size_t s = 0; s < d.batch_sizes.size(); ++s)
    h << "#define " << U << "_ARENA_BYTES_B" << d.batch_sizes[s] << " " << d.arena_bytes[s] << "\n";
  if (!d.embedded_weights) h << "#define " << U << "_WEIGHTS_FILE_BYTES " << (KILN_BUNDLE_ALIGNMENT + d.weights_bytes) << "\n";
  h << "\n"
    << "typedef struct " << N << " " << N << ";\n"
    << "/* Runs fn(task, begin, end) over disjoint ranges covering [0, n), possibly on\n"
    << " * several threads at once, and returns when all are done. Fastest when each\n"
    << " * thread gets the same contiguous share of every loop (OpenMP's static\n"
    << " * schedule): a step reads what the one before wrote on the same core. */\n"
    << "typedef void (*" << N << "_task_fn)(void* task, int64_t begin, int64_t end);\n"
    << "typedef void (*" << N << "_parallel_for_fn)(void* host, int64_t n, " << N << "_task_fn fn, void* task);\n\n"
    << "/* Simple API. create: weights_path is "
    << (d.embedded_weights ? "ignored (pass NULL: the weights are embedded)" : "the path of " + N + ".weights.bin")
    << ".\n * On failure *out may still be set: read " << N << "_last_error(*out), then destroy it. */\n"
    << "int32_t " << N << "_create(const char* weights_path, " << N << "** out);\n"
    << "/* The same from a weights file already in memory (kept by pointer, not copied). */\n"
    << "int32_t " << N << "_create_from_memory(const void* weights_file, uint64_t size, " << N << "** out);\n"
    << "void " << N << "_destroy(" << N << "* model);\n"
    << "const char* " << N << "_last_error(const " << N << "* model);\n"
    << "/* The CPU of the code version create chose (\"\" until create succeeds). */\n"
    << "const char* " << N << "_cpu(const " << N << "* model);\n"
    << "void " << N << "_set_parallel_for(" << N << "* model, " << N << "_parallel_for_fn fn, void* host);\n"
    << "/* \"5:1,4;13:8,8\": batch 5 runs as compiled sizes 1 then 4, batch 13 as 8 and 8 (the\n"
    << " * last part zero-padded). Other batch sizes keep the default rule. */\n"
    << "int32_t " << N << "_set_batch_rule(" << N << "* model, const char* rule);\n"
    << "/* inputs[i] and outputs[i] point at `batch` items of each tensor. */\n"
    << "int32_t " << N << "_run(" << N << "* model, int64_t batch, const void* const* inputs, void* const* outputs);\n"
    << "/* Checks a whole weights file in memory (size, format, checksum). */\n"
    << "int32_t " << N << "_check_weights(const void* weights_file, uint64_t size);\n";
  if (d.native.empty()) {
    h << "\n/* Static API: one compiled batch size, nothing allocated. weights_file: the\n"
      << " * whole " << (d.embedded_weights ? "weights file, or NULL for the embedded weights" : N + ".weights.bin in memory")
      << ", aligned to " << U << "_ALIGNMENT;\n"
      << " * arena: " << U << "_ARENA_BYTES_B<SIZE> bytes aligned to " << U << "_ALIGNMENT; fn may be NULL. */\n";
    for (int64_t b : d.batch_sizes)
      h << "int32_t " << N << "_run_b" << b
        << "(const void* weights_file, void* arena, const void* const* inputs, void* const* outputs,\n"
        << "    " << N << "_parallel_for_fn fn, void* host);\n";
  }
  h << "\n#ifdef __cplusplus\n}\n#endif\n\n#endif /* " << U << "_H */\n";
  return h.str();
}

std::string bundle_readme(const BundleDescription& d) {
  std::ostringstream r;
  r << "# " << d.name << ": a frozen model\n\n"
    << "Made by `kiln aot-freeze` from `" << d.model << "` for " << d.triple << " (cpu " << cpu_names(d) << ") with "
    << (d.native.empty() ? "portable" : "native (oneDNN)") << " kernels: it needs " << what_it_needs(d) << ".\n\n"
    << "| file | what |\n| --- | --- |\n"
    << "| `" << d.name << ".h` | the API, with every input and output, the batch sizes and the memory sizes |\n"
    << "| `" << d.object_file << "` | the compiled code" << (d.embedded_weights ? " and the weights" : "") << " |\n";
  if (!d.embedded_weights)
    r << "| `" << d.name << ".weights.bin` | the weights (" << d.weights_bytes << " bytes of data), read by `" << d.name
      << "_create` |\n";
  if (d.variants.size() == 1)
    r << "\nCPU: "
      << (d.variants[0].features.empty() ? "any " + d.triple + " CPU"
                                         : "needs " + feature_lines(d.variants[0].features, "") + "\n(`" + d.name +
                                               "_create` returns `" + upper(d.name) + "_ERROR_CPU` on a CPU without them)")
      << ".\n";
  else {
    r << "\nCPU: a version of the code per CPU; `" << d.name << "_create` runs the first this CPU has the features of (`"
      << d.name << "_cpu` says which):\n\n";
    for (const auto& v : d.variants)
      r << "- " << v.cpu << ": " << (v.features.empty() ? "any " + d.triple + " CPU" : "needs " + feature_lines(v.features, "  "))
        << "\n";
  }
  r << "\nLink:\n\n```sh\n"
    << link_line(d, "cc") << "\n```\n\n"
    << "From C++, include the header as it is (it has `extern \"C\"`). From Rust, declare the functions in an\n"
    << "`extern \"C\"` block and link the object with `cargo:rustc-link-arg`.\n\n"
    << "Compiled batch sizes: " << list(d.batch_sizes) << "; `" << d.name
    << "_run` takes any batch size and splits it over these.\n";
  return r.str();
}

}  // namespace kiln::bundle
