// kiln compile MODEL --shape NAME=DIMS [--dim SYMBOL=V]...: compiles (or
// loads) specializations into the cache without running them. `kiln cache
// pull` is the same, said from a host warming its cache from the fleet's.
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "kiln/kiln.hpp"

namespace kiln::cli {

namespace {

struct CompileArgs {
  std::string model;
  std::vector<std::string> shapes;  // NAME=1x3x224x224
  std::vector<std::string> dims;    // SYMBOL=VALUE
  int threads = 0;
  std::string backend = "cpu";
  std::vector<std::string> plugins;
  std::string kernels;
  std::string precision;
  std::string cache_dir;
  bool json = false;
};

void compile(const CompileArgs& args) {
  RuntimeOptions opts;
  opts.threads = args.threads;
  opts.backend = args.backend;
  opts.plugins = args.plugins;
  opts.kernels = args.kernels;
  opts.precision = args.precision;
  opts.cache_dir = args.cache_dir;
  Runtime runtime(opts);
  if (runtime.cache_dir().empty()) std::cerr << "warning: no cache (KILN_CACHE=off?): nothing will be stored\n";
  Model model = Model::load(runtime, args.model);

  const std::map<std::string, int64_t> dims = parse_dims(args.dims, model.inputs());
  const auto shapes = input_shapes(model, args.shapes, dims);

  model.prepare(shapes);
  // Asked again once the entry is written, which decides what the cache did.
  runtime.wait_for_cache();
  const SpecializationStats s = model.prepare(shapes);
  // Storing the entry is what this command is for.
  const bool stored = s.cache == CacheOutcome::Hit || s.cache == CacheOutcome::Miss || s.cache == CacheOutcome::Rebuild ||
                      s.cache == CacheOutcome::RemoteHit;
  if (!stored) exit_code = 1;
  if (args.json) {
    std::cout << nlohmann::json({{"key", s.key},
                                 {"cache", cache_outcome_name(s.cache)},
                                 {"cache_key", s.cache_key},
                                 {"cache_note", s.cache_note},
                                 {"compile_ms", s.compile_ms},
                                 {"cache_dir", runtime.cache_dir()},
                                 {"codegen_runs", runtime.codegen_runs()}})
                     .dump(2)
              << "\n";
    return;
  }
  const bool loaded = s.cache == CacheOutcome::Hit || s.cache == CacheOutcome::RemoteHit;
  std::printf("%s: %s in %.1f ms (cache: %s%s%s)\n", s.key.c_str(), loaded ? "loaded" : "compiled", s.compile_ms,
              cache_outcome_name(s.cache), s.cache_note.empty() ? "" : ", ", s.cache_note.c_str());
  if (stored)
    std::printf("cache: %s/entries/%s\n", runtime.cache_dir().c_str(), s.cache_key.c_str());
  else
    std::fprintf(stderr, "error: nothing was stored in the cache%s%s\n", s.cache_note.empty() ? "" : ": ", s.cache_note.c_str());
}

void add_options(CLI::App* cmd, const std::shared_ptr<CompileArgs>& args) {
  cmd->add_option("MODEL", args->model, "ONNX model file")->required();
  cmd->add_option("--shape", args->shapes, "NAME=1x3x224x224: an input's shape (default: its declared shape)");
  cmd->add_option("--dim", args->dims, "SYMBOL=VALUE for symbolic dimensions of declared shapes");
  cmd->add_option("--threads", args->threads, "threads the code is compiled for (0: all usable cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--backend", args->backend, "backend: cpu, reference or a plugin's name");
  cmd->add_option("--plugin", args->plugins,
                  "backend plugin: a shared library or a directory of them (repeatable; also $KILN_PLUGIN_PATH)");
  cmd->add_option("--kernels", args->kernels,
                  "cpu kernels: native (oneDNN) or portable (self-contained; default: $KILN_KERNELS, else native)")
      ->check(CLI::IsMember({"native", "portable"}));
  cmd->add_option("--precision", args->precision,
                  "convolutions and products in fp32 (the default) or bf16 (refused, with the reason, where it cannot run)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_option("--cache-dir", args->cache_dir, "cache directory (default: $KILN_CACHE_DIR, else ~/.cache/kiln)");
  cmd->add_flag("--json", args->json, "print the result as JSON");
  cmd->callback([args] { compile(*args); });
}

}  // namespace

void add_compile_command(CLI::App& app) {
  add_options(app.add_subcommand("compile", "Compile a specialization into the cache without running it"),
              std::make_shared<CompileArgs>());
}

void add_pull_command(CLI::App& cache) {
  add_options(cache.add_subcommand("pull",
                                   "Fetch a specialization from the remote tier ($KILN_REMOTE_CACHE) into the local cache "
                                   "(compiled here and uploaded if the fleet lacks it)"),
              std::make_shared<CompileArgs>());
}

}  // namespace kiln::cli
