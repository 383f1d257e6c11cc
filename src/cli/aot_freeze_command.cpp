// kiln aot-freeze MODEL -o DIR [--name NAME] [--shape NAME=DIMS]...
//   [--constant NAME=VALUE|FILE.npy]... [--batch-sizes 1,8,32] [--batch-axis NAME=AXIS]...
//   [--target TRIPLE] [--cpu NAME[,NAME...]] [--weights embed|file]
//   [--kernels portable|native] [--format object|static]: a bundle that links
// into a C, C++ or Rust program with nothing but libc and libm (and libdnnl,
// for native kernels).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/npy.hpp"
#include "kiln/kiln.hpp"

namespace kiln::cli {

namespace {

struct FreezeArgs {
  std::string model, output_dir, name, target, cpu, weights = "file", kernels = "portable", format = "object", cache_dir;
  std::vector<std::string> shapes, dims, constants, batch_axes, plugins;
  std::vector<int64_t> batch_sizes{1};
  bool json = false;
  bool no_cache = false;
};

// --constant NAME=VALUE (one number, for an input of one element) or
// NAME=FILE.npy.
Tensor constant_value(const std::string& option, const std::vector<TensorInfo>& inputs) {
  auto [name, text] = split_assignment(option, "--constant");
  if (text.size() > 4 && text.compare(text.size() - 4, 4, ".npy") == 0) return npy::load(text);
  const TensorInfo* in = nullptr;
  for (const auto& i : inputs)
    if (i.name == name) in = &i;
  if (!in) throw Error(ErrorCode::InvalidArgument, "--constant " + option + ": the model has no input '" + name + "'");
  Shape shape;
  for (const Dim& d : in->shape) shape.push_back(d.is_fixed() ? d.value : -1);
  for (int64_t d : shape)
    if (d != 1)
      throw Error(ErrorCode::InvalidArgument, "--constant " + option + ": input '" + name + "' is " + in->shape_string() +
                                                  ", not one element: give its value as a .npy file");
  double value = 0;
  size_t used = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
  }
  if (used == 0 || used != text.size())
    throw Error(ErrorCode::InvalidArgument, "--constant " + option + ": '" + text + "' is neither a number nor a .npy file");
  const bool integer = in->dtype == DType::Int64 || in->dtype == DType::Int32 || in->dtype == DType::Bool;
  const double limit = in->dtype == DType::Int32 ? 2147483648.0 : 9223372036854775808.0;
  if (integer && (std::trunc(value) != value || !(std::fabs(value) < limit)))
    throw Error(ErrorCode::InvalidArgument,
                "--constant " + option + ": input '" + name + "' takes integers of its type (" + dtype_name(in->dtype) + ")");
  Tensor t(in->dtype, shape);
  switch (in->dtype) {
    case DType::Float32: *t.data_as<float>() = float(value); break;
    case DType::Float64: *t.data_as<double>() = value; break;
    case DType::Int64: *t.data_as<int64_t>() = int64_t(value); break;
    case DType::Int32: *t.data_as<int32_t>() = int32_t(value); break;
    case DType::Bool: *t.data_as<bool>() = value != 0; break;
    default:
      throw Error(ErrorCode::InvalidArgument,
                  "--constant " + option + ": give a value of input '" + name + "' (" + in->shape_string() + ") as a .npy file");
  }
  return t;
}

void freeze(const FreezeArgs& args) {
  // Accepted like on the other commands so that the refusal says why.
  if (!args.plugins.empty())
    throw Error(ErrorCode::Unsupported, "--plugin " + args.plugins[0] +
                                            ": a bundle runs without Kiln, so it cannot call a plugin; aot-freeze compiles every "
                                            "node with the cpu backend's kernels (leave --plugin out; see docs/plugins.md)");
  RuntimeOptions opts;
  opts.cache = !args.no_cache;
  opts.cache_dir = args.cache_dir;
  Runtime runtime(opts);
  Model model = Model::load(runtime, args.model);
  Model::FreezeOptions o;
  o.output_dir = args.output_dir;
  o.name = args.name;
  for (const auto& s : args.shapes) {
    auto [name, text] = split_assignment(s, "--shape");
    o.shapes.push_back({name, parse_shape(text, "--shape " + s)});
  }
  o.dims = parse_dims(args.dims, model.inputs());
  for (const auto& c : args.constants)
    o.constants.emplace_back(split_assignment(c, "--constant").first, constant_value(c, model.inputs()));
  o.batch_sizes = args.batch_sizes;
  for (const auto& a : args.batch_axes) {
    auto [name, text] = split_assignment(a, "--batch-axis");
    if (!o.batch_axes.emplace(name, parse_size(text, "--batch-axis " + a)).second)
      throw Error(ErrorCode::InvalidArgument, "--batch-axis names '" + name + "' twice");
  }
  o.target = args.target;
  o.cpu = args.cpu;
  o.embed_weights = args.weights == "embed";
  o.kernels = args.kernels;
  o.format = args.format;
  const auto start = std::chrono::steady_clock::now();
  o.progress = [&](const std::string& line) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "[%6.1f s] %s\n", s, line.c_str());
  };
  const Model::FreezeResult r = model.freeze(o);
  if (args.json) {
    std::cout << nlohmann::json({{"name", r.name},
                                 {"target", r.target},
                                 {"cpu", r.cpu},
                                 {"batch_sizes", r.batch_sizes},
                                 {"files", r.files},
                                 {"object_bytes", r.object_bytes},
                                 {"weights_bytes", r.weights_bytes},
                                 {"seconds", r.seconds},
                                 {"cache", cache_outcome_name(r.cache)},
                                 {"cache_key", r.cache_key},
                                 {"cache_note", r.cache_note}})
                     .dump(2)
              << "\n";
    return;
  }
  std::string sizes;
  for (int64_t b : r.batch_sizes) sizes += (sizes.empty() ? "" : ",") + std::to_string(b);
  std::printf("bundle %s for %s (%s), batch sizes %s, in %.1f s\n", r.name.c_str(), r.target.c_str(), r.cpu.c_str(),
              sizes.c_str(), r.seconds);
  std::printf("  code %s, weights %s\n", bytes_to_string(r.object_bytes).c_str(), bytes_to_string(r.weights_bytes).c_str());
  std::printf("  cache: %s%s%s\n", cache_outcome_name(r.cache), r.cache_note.empty() ? "" : " - ", r.cache_note.c_str());
  for (const auto& f : r.files) std::printf("  %s\n", f.c_str());
}

}  // namespace

void add_aot_freeze_command(CLI::App& app) {
  auto args = std::make_shared<FreezeArgs>();
  auto* cmd = app.add_subcommand("aot-freeze", "Freeze a model into a bundle (header, object, weights) needing only libc");
  cmd->add_option("MODEL", args->model, "ONNX model file")->required();
  cmd->add_option("-o,--output", args->output_dir, "directory for the bundle's files")->required();
  cmd->add_option("--name", args->name, "C identifier prefixing the bundle's symbols (default: the model file's stem)");
  cmd->add_option("--shape", args->shapes, "NAME=1x3x224x224: an input's shape (a batched input's axis 0 is replaced)");
  cmd->add_option("--dim", args->dims, "SYMBOL=VALUE for symbolic dimensions other than the batch");
  cmd->add_option("--constant", args->constants,
                  "NAME=VALUE or NAME=FILE.npy: an input fixed to this value, which the bundle does not take (an If on it "
                  "keeps the branch taken)");
  cmd->add_option("--batch-sizes", args->batch_sizes, "compiled batch sizes, e.g. 1,8,32 (any batch runs)")->delimiter(',');
  cmd->add_option("--batch-axis", args->batch_axes,
                  "NAME=AXIS: an input or output whose batch is not axis 0, e.g. a recurrent state [directions, batch, hidden]: "
                  "h0=1");
  cmd->add_option("--target", args->target, "LLVM target triple, e.g. aarch64-linux-gnu (default: this machine)");
  cmd->add_option("--cpu", args->cpu,
                  "target CPU, e.g. x86-64-v3, or several best first, e.g. host,x86-64-v3,x86-64-v2: a version of the code "
                  "per CPU, NAME_create runs the first the CPU fits (default: this CPU, or generic for another target)");
  cmd->add_option("--weights", args->weights, "embed (in the object) or file (NAME.weights.bin)")
      ->check(CLI::IsMember({"embed", "file"}));
  cmd->add_option("--kernels", args->kernels,
                  "portable (libc only) or native (oneDNN primitives: links libdnnl, this machine only)")
      ->check(CLI::IsMember({"portable", "native"}));
  cmd->add_option("--format", args->format, "object (NAME.o) or static (libNAME.a)")->check(CLI::IsMember({"object", "static"}));
  cmd->add_option("--cache-dir", args->cache_dir, "cache of compiled code (default: $KILN_CACHE_DIR, else ~/.cache/kiln)");
  cmd->add_flag("--no-cache", args->no_cache, "compile without looking into or writing the cache");
  cmd->add_option("--plugin", args->plugins,
                  "refused: bundles hold the cpu backend's code only (plugins cannot run without Kiln)");
  cmd->add_flag("--json", args->json, "print the result as JSON");
  cmd->callback([args] { freeze(*args); });
}

}  // namespace kiln::cli
