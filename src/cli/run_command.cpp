// kiln run MODEL: feed inputs from .npy files (or random ones), run, write
// and summarise the outputs, optionally time repeated runs.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "cli/commands.hpp"
#include "cli/npy.hpp"
#include "kiln/kiln.hpp"

namespace kiln::cli {

std::pair<std::string, std::string> split_assignment(const std::string& s, const char* option) {
  auto eq = s.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
    throw Error(ErrorCode::InvalidArgument, std::string(option) + " '" + s + "' must look like NAME=VALUE");
  return {s.substr(0, eq), s.substr(eq + 1)};
}

int64_t parse_size(const std::string& text, const std::string& what) {
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end || v < 0)
    throw Error(ErrorCode::InvalidArgument, what + ": '" + text + "' is not a non-negative integer");
  return v;
}

Shape parse_shape(const std::string& text, const std::string& what) {
  Shape shape;
  size_t start = 0;
  if (text == "scalar") return shape;
  while (true) {
    const size_t x = text.find('x', start);
    shape.push_back(parse_size(text.substr(start, x == std::string::npos ? std::string::npos : x - start), what));
    if (x == std::string::npos) return shape;
    start = x + 1;
  }
}

std::map<std::string, int64_t> parse_dims(const std::vector<std::string>& options, const std::vector<TensorInfo>& inputs) {
  std::set<std::string> symbols;
  for (const auto& info : inputs)
    for (const Dim& d : info.shape)
      if (!d.symbol.empty()) symbols.insert(d.symbol);
  std::map<std::string, int64_t> dims;
  for (const auto& d : options) {
    auto [symbol, value] = split_assignment(d, "--dim");
    dims[symbol] = parse_size(value, "--dim " + d);
    if (symbols.count(symbol)) continue;
    std::string known;
    for (const auto& s : symbols) known += (known.empty() ? "" : ", ") + s;
    std::cerr << "warning: --dim " << d << ": no input has a dimension named '" << symbol << "' ("
              << (known.empty() ? "none is named" : "named: " + known) << "); ignored\n";
  }
  return dims;
}

std::string bytes_to_string(int64_t bytes) {
  char buf[32];
  if (bytes < (1 << 20))
    std::snprintf(buf, sizeof buf, "%.1f KiB", double(bytes) / 1024);
  else
    std::snprintf(buf, sizeof buf, "%.2f MiB", double(bytes) / (1 << 20));
  return buf;
}

namespace {

struct RunArgs {
  std::string model;
  std::vector<std::string> inputs;  // NAME=FILE.npy
  std::vector<std::string> dims;    // SYMBOL=VALUE
  bool random_inputs = false;
  std::string output_dir;
  int repeat = 0;
  int threads = 0;
  std::string backend = "cpu";
  std::vector<std::string> plugins;
  std::string kernels;
  std::string precision;
  bool json = false;
  std::string cache_dir;
  bool no_cache = false;
};

// Every character outside [A-Za-z0-9_.-] becomes '_'.
std::string file_safe(const std::string& name) {
  std::string out = name;
  for (char& c : out)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-')) c = '_';
  return out.empty() ? "_" : out;
}

Tensor random_tensor(const TensorInfo& info, const std::map<std::string, int64_t>& dims, std::mt19937& rng,
                     std::vector<std::string>& notes) {
  if (!info.rank_known)
    throw Error(ErrorCode::InvalidArgument,
                "input '" + info.name + "' has no declared shape; pass it with --input " + info.name + "=FILE.npy");
  Shape shape;
  for (size_t d = 0; d < info.shape.size(); ++d) {
    const Dim& dim = info.shape[d];
    if (dim.is_fixed()) {
      shape.push_back(dim.value);
    } else if (!dim.symbol.empty() && dims.count(dim.symbol)) {
      shape.push_back(dims.at(dim.symbol));
    } else {
      shape.push_back(1);
      notes.push_back("input '" + info.name + "' dimension " + std::to_string(d) + " (" +
                      (dim.symbol.empty() ? "unnamed" : "'" + dim.symbol + "'") + ") set to 1; use --dim " +
                      (dim.symbol.empty() ? "" : dim.symbol + "=N") + " to choose");
    }
  }
  Tensor t(info.dtype, shape);
  std::uniform_real_distribution<float> uf(-1.0f, 1.0f);
  std::uniform_int_distribution<int> ui(0, 9);
  const int64_t n = t.numel();
  switch (info.dtype) {
    case DType::Float32:
      for (int64_t i = 0; i < n; ++i) t.data_as<float>()[i] = uf(rng);
      break;
    case DType::Float64:
      for (int64_t i = 0; i < n; ++i) t.data_as<double>()[i] = uf(rng);
      break;
    case DType::Int64:
      for (int64_t i = 0; i < n; ++i) t.data_as<int64_t>()[i] = ui(rng);
      break;
    case DType::Int32:
      for (int64_t i = 0; i < n; ++i) t.data_as<int32_t>()[i] = ui(rng);
      break;
    case DType::Bool:
      for (int64_t i = 0; i < n; ++i) t.data_as<bool>()[i] = ui(rng) % 2;
      break;
    case DType::UInt8:
      for (int64_t i = 0; i < n; ++i) t.data_as<uint8_t>()[i] = uint8_t(ui(rng) * 25);
      break;
    case DType::Int8:
      for (int64_t i = 0; i < n; ++i) t.data_as<int8_t>()[i] = int8_t(ui(rng) - 5);
      break;
    default:
      // Other types stay zero: a valid input of the right shape.
      notes.push_back("input '" + info.name + "' (" + dtype_name(info.dtype) + ") filled with zeros");
  }
  return t;
}

double element(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::Float32: return t.data_as<float>()[i];
    case DType::Float64: return t.data_as<double>()[i];
    case DType::Int64: return double(t.data_as<int64_t>()[i]);
    case DType::Int32: return t.data_as<int32_t>()[i];
    case DType::Int16: return t.data_as<int16_t>()[i];
    case DType::Int8: return t.data_as<int8_t>()[i];
    case DType::UInt8: return t.data_as<uint8_t>()[i];
    case DType::UInt16: return t.data_as<uint16_t>()[i];
    case DType::UInt32: return t.data_as<uint32_t>()[i];
    case DType::UInt64: return double(t.data_as<uint64_t>()[i]);
    case DType::Bool: return t.data_as<bool>()[i];
    case DType::Float16: {
      uint16_t h = t.data_as<uint16_t>()[i];
      int e = (h >> 10) & 31, m = h & 1023;
      double v = e == 0 ? std::ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : std::ldexp(m + 1024, e - 25);
      return (h & 0x8000) ? -v : v;
    }
    case DType::BFloat16: {
      uint32_t bits = uint32_t(t.data_as<uint16_t>()[i]) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
  }
  return 0;
}

bool is_float(DType t) { return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16; }

// Per-row argmax of a 2-D float output (a classifier's predicted classes).
std::vector<int64_t> row_argmax(const Tensor& t) {
  std::vector<int64_t> out;
  if (t.shape().size() != 2 || !is_float(t.dtype()) || t.shape()[1] == 0) return out;
  for (int64_t r = 0; r < t.shape()[0]; ++r) {
    int64_t best = 0;
    for (int64_t c = 1; c < t.shape()[1]; ++c)
      if (element(t, r * t.shape()[1] + c) > element(t, r * t.shape()[1] + best)) best = c;
    out.push_back(best);
  }
  return out;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  size_t idx = size_t(std::ceil(p * double(v.size()))) - 1;
  return v[std::min(idx, v.size() - 1)];
}

void run(const RunArgs& args) {
  RuntimeOptions opts;
  opts.threads = args.threads;
  opts.backend = args.backend;
  opts.plugins = args.plugins;
  opts.kernels = args.kernels;
  opts.precision = args.precision;
  opts.cache = !args.no_cache;
  opts.cache_dir = args.cache_dir;
  const auto runtime_start = std::chrono::steady_clock::now();
  Runtime runtime(opts);
  const double runtime_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - runtime_start).count();
  const auto load_start = std::chrono::steady_clock::now();
  Model model = Model::load(runtime, args.model);
  const double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - load_start).count();

  const std::map<std::string, int64_t> dims = parse_dims(args.dims, model.inputs());

  std::vector<std::pair<std::string, Tensor>> inputs;
  for (const auto& in : args.inputs) {
    auto [name, path] = split_assignment(in, "--input");
    inputs.emplace_back(name, npy::load(path));
  }
  std::vector<std::string> notes;
  std::mt19937 rng(42);
  for (const auto& info : model.inputs()) {
    bool given = std::any_of(inputs.begin(), inputs.end(), [&](const auto& p) { return p.first == info.name; });
    if (given || info.has_default) continue;
    if (!args.random_inputs)
      throw Error(ErrorCode::InvalidArgument, "input '" + info.name + "' (" + dtype_name(info.dtype) + " " + info.shape_string() +
                                                  ") is not given; pass --input " + info.name + "=FILE.npy or --random-inputs");
    inputs.emplace_back(info.name, random_tensor(info, dims, rng, notes));
  }

  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  std::vector<Tensor> outputs = model.run(inputs);
  const double first_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  std::vector<double> times;
  for (int i = 0; i < args.repeat; ++i) {
    auto s = clock::now();
    outputs = model.run(inputs);
    times.push_back(std::chrono::duration<double, std::milli>(clock::now() - s).count());
  }

  std::vector<std::string> written;
  if (!args.output_dir.empty()) {
    std::filesystem::create_directories(args.output_dir);
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::string path = (std::filesystem::path(args.output_dir) / (file_safe(model.outputs()[i].name) + ".npy")).string();
      npy::save(path, outputs[i]);
      written.push_back(path);
    }
  }

  // What the cache did is known once the entry is written.
  runtime.wait_for_cache();
  if (args.json) {
    nlohmann::json j;
    j["model"] = model.source();
    j["runtime_ms"] = runtime_ms;
    j["load_ms"] = load_ms;
    j["first_run_ms"] = first_ms;
    j["outputs"] = nlohmann::json::array();
    for (size_t i = 0; i < outputs.size(); ++i) {
      const Tensor& t = outputs[i];
      nlohmann::json o = {{"name", model.outputs()[i].name}, {"dtype", dtype_name(t.dtype())}, {"shape", t.shape()}};
      nlohmann::json first = nlohmann::json::array();
      for (int64_t k = 0; k < std::min<int64_t>(t.numel(), 8); ++k) first.push_back(element(t, k));
      o["first_values"] = first;
      auto am = row_argmax(t);
      if (!am.empty()) o["argmax"] = am;
      if (i < written.size()) o["file"] = written[i];
      j["outputs"].push_back(o);
    }
    if (!times.empty())
      j["latency_ms"] = {{"runs", times.size()},
                         {"min", *std::min_element(times.begin(), times.end())},
                         {"median", percentile(times, 0.5)},
                         {"p90", percentile(times, 0.9)}};
    j["specializations"] = nlohmann::json::array();
    for (const auto& sp : model.specializations())
      j["specializations"].push_back({{"key", sp.key},
                                      {"backend", sp.backend},
                                      {"parts", sp.parts},
                                      {"nodes", sp.nodes},
                                      {"compiled_nodes", sp.compiled_nodes},
                                      {"fallback_nodes", sp.fallback_nodes},
                                      {"arena_bytes", sp.arena_bytes},
                                      {"intermediate_bytes", sp.intermediate_bytes},
                                      {"compile_ms", sp.compile_ms},
                                      {"runs", sp.runs},
                                      {"cache", cache_outcome_name(sp.cache)},
                                      {"cache_key", sp.cache_key},
                                      {"cache_note", sp.cache_note},
                                      {"store_ms", sp.store_ms}});
    j["codegen_runs"] = runtime.codegen_runs();
    j["cache_dir"] = runtime.cache_dir();
    j["notes"] = notes;
    std::cout << j.dump(2) << "\n";
    return;
  }

  for (const auto& n : notes) std::cerr << "note: " << n << "\n";
  std::printf("model %s: loaded in %.2f ms, first run %.3f ms\n", model.source().c_str(), load_ms, first_ms);
  for (const auto& sp : model.specializations()) {
    const std::string parts = sp.parts > 1 ? " (" + std::to_string(sp.parts) + " parts)" : "";
    std::printf("specialization %s: %s backend%s, %lld nodes after graph passes, %s in %.3f ms (cache: %s)\n", sp.key.c_str(),
                sp.backend.c_str(), parts.c_str(), static_cast<long long>(sp.nodes),
                sp.cache == CacheOutcome::Hit ? "loaded" : "compiled", sp.compile_ms, cache_outcome_name(sp.cache));
    if (!sp.cache_note.empty()) std::printf("  cache: %s\n", sp.cache_note.c_str());
    if (sp.compiled_nodes || sp.fallback_nodes)
      std::printf("  %lld nodes compiled, %lld run by reference kernels; scratch arena %s (intermediates %s)\n",
                  static_cast<long long>(sp.compiled_nodes), static_cast<long long>(sp.fallback_nodes),
                  bytes_to_string(sp.arena_bytes).c_str(), bytes_to_string(sp.intermediate_bytes).c_str());
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& t = outputs[i];
    std::ostringstream values;
    for (int64_t k = 0; k < std::min<int64_t>(t.numel(), 8); ++k) values << (k ? " " : "") << element(t, k);
    if (t.numel() > 8) values << " ...";
    std::printf("output %s: %s %s [%s]\n", model.outputs()[i].name.c_str(), dtype_name(t.dtype()),
                shape_to_string(t.shape()).c_str(), values.str().c_str());
    auto am = row_argmax(t);
    if (!am.empty()) {
      std::ostringstream s;
      for (size_t r = 0; r < std::min<size_t>(am.size(), 16); ++r) s << (r ? " " : "") << am[r];
      if (am.size() > 16) s << " ...";
      std::printf("  argmax per row (predicted class): %s\n", s.str().c_str());
    }
    if (i < written.size()) std::printf("  written to %s\n", written[i].c_str());
  }
  if (!times.empty())
    std::printf("latency over %zu runs: min %.3f ms, median %.3f ms, p90 %.3f ms\n", times.size(),
                *std::min_element(times.begin(), times.end()), percentile(times, 0.5), percentile(times, 0.9));
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  auto* cmd = app.add_subcommand("run", "Run a model on inputs from .npy files or random inputs");
  cmd->add_option("MODEL", args->model, "ONNX model file")->required();
  cmd->add_option("--input,-i", args->inputs, "NAME=FILE.npy, once per input");
  cmd->add_flag("--random-inputs", args->random_inputs, "fill inputs not given with random values");
  cmd->add_option("--dim", args->dims, "SYMBOL=VALUE for symbolic dimensions of random inputs");
  cmd->add_option("--output-dir,-o", args->output_dir, "write each output to DIR/<output name>.npy");
  cmd->add_option("--repeat", args->repeat, "time N further runs (min/median/p90)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--threads", args->threads, "threads (0: all usable cores)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--cache-dir", args->cache_dir, "cache of compiled code (default: $KILN_CACHE_DIR, else ~/.cache/kiln)");
  cmd->add_flag("--no-cache", args->no_cache, "compile in memory only");
  cmd->add_option("--backend", args->backend, "backend: cpu (compiled), reference (the interpreter) or a plugin's name");
  cmd->add_option("--plugin", args->plugins,
                  "backend plugin: a shared library or a directory of them (repeatable; also $KILN_PLUGIN_PATH)");
  cmd->add_option("--kernels", args->kernels,
                  "cpu kernels: native (oneDNN) or portable (self-contained; default: $KILN_KERNELS, else native)")
      ->check(CLI::IsMember({"native", "portable"}));
  cmd->add_option("--precision", args->precision,
                  "convolutions and products in fp32 (the default) or bf16 (refused, with the reason, where it cannot run)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_flag("--json", args->json, "print the summary as JSON");
  cmd->callback([args] { run(*args); });
}

}  // namespace kiln::cli
