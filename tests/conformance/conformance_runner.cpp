// Runs the ONNX backend conformance tests (libonnx-testdata) through Kiln and
// holds the result against an expected-failures list that may only shrink:
// an unlisted failure fails the run, and so does a listed test that passes.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "backends/backend.hpp"
#include "backends/pipeline.hpp"
#include "backends/reference/reference_executor.hpp"
#include "plugins/plugin_backend.hpp"
#include "runtime/ir/shape_inference.hpp"
#include "runtime/onnx/onnx_importer.hpp"
#include "runtime/passes/memory_plan.hpp"

namespace fs = std::filesystem;
using kiln::ir::DType;
using kiln::ir::Tensor;
using kiln::ir::Value;

namespace {

enum class Outcome { Pass, Fail, Skip };

struct Result {
  std::string id;  // "node/test_add"
  Outcome outcome = Outcome::Pass;
  std::string detail;
  int64_t compiled_nodes = 0, fallback_nodes = 0;  // compiled backends only
};

std::string compare(const Tensor& got, const Tensor& want, double rtol, double atol) {
  if (got.dtype() != want.dtype())
    return std::string("dtype ") + kiln::ir::dtype_name(got.dtype()) + ", expected " + kiln::ir::dtype_name(want.dtype());
  if (got.dims() != want.dims())
    return "shape " + kiln::ir::dims_to_string(got.dims()) + ", expected " + kiln::ir::dims_to_string(want.dims());
  if (want.dtype() == DType::String) {
    const auto *g = got.data<std::string>(), *w = want.data<std::string>();
    for (int64_t i = 0; i < want.numel(); ++i)
      if (g[i] != w[i]) return "element " + std::to_string(i) + " is '" + g[i] + "', expected '" + w[i] + "'";
    return {};
  }
  const bool is_float = kiln::ir::dtype_is_float(want.dtype());
  int64_t bad = 0, first_bad = -1;
  for (int64_t i = 0; i < want.numel(); ++i) {
    bool ok;
    if (is_float) {
      double g = got.as_double(i), w = want.as_double(i);
      if (std::isnan(w) || std::isnan(g))
        ok = std::isnan(w) && std::isnan(g);
      else if (std::isinf(w) || std::isinf(g))
        ok = g == w;
      else
        ok = std::fabs(g - w) <= atol + rtol * std::fabs(w);
    } else {
      ok = got.as_int64(i) == want.as_int64(i);
    }
    if (!ok && bad++ == 0) first_bad = i;
  }
  if (!bad) return {};
  std::ostringstream s;
  s << bad << " of " << want.numel() << " elements differ; first at " << first_bad << ": got " << got.as_double(first_bad)
    << ", expected " << want.as_double(first_bad);
  return s.str();
}

// Sequences element by element, optionals by what they hold.
std::string compare(const Value& got, const Value& want, double rtol, double atol) {
  if (got.kind != want.kind) return "got " + got.describe() + ", expected " + want.describe();
  switch (want.kind) {
    case kiln::ir::ValueKind::Tensor: return compare(got.tensor, want.tensor, rtol, atol);
    case kiln::ir::ValueKind::Sequence:
      if (got.sequence.size() != want.sequence.size()) return "got " + got.describe() + ", expected " + want.describe();
      for (size_t k = 0; k < want.sequence.size(); ++k) {
        std::string diff = compare(got.sequence[k], want.sequence[k], rtol, atol);
        if (!diff.empty()) return "sequence element " + std::to_string(k) + ": " + diff;
      }
      return {};
    case kiln::ir::ValueKind::Optional:
      if (!got.element != !want.element) return "got " + got.describe() + ", expected " + want.describe();
      return want.element ? compare(*got.element, *want.element, rtol, atol) : std::string();
  }
  return {};
}

std::vector<fs::path> sorted_entries(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path());
  // input_10 sorts after input_9: order by the number after the prefix.
  std::sort(out.begin(), out.end(), [&](const fs::path& a, const fs::path& b) {
    auto num = [&](const fs::path& p) {
      std::string s = p.stem().string().substr(prefix.size());
      return std::atoll(s.c_str());
    };
    return num(a) < num(b);
  });
  return out;
}

bool is_scope_limit(const kiln::ir::Error& e) {
  // Maps, sparse tensors, nested sequences and non-ai.onnx domains are
  // outside what Kiln supports at all: such tests are skipped with the reason.
  static const char* const kOutOfScope[] = {
      "is a map", "is a sparse", "sparse initializers", "a sequence of sequences", "an optional inside", "operator domain"};
  if (e.kind() != kiln::ir::ErrorKind::Unsupported) return false;
  std::string m = e.what();
  std::transform(m.begin(), m.end(), m.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  for (const char* needle : kOutOfScope)
    if (m.find(needle) != std::string::npos) return true;
  return false;
}

// Specializes the graph to the test's input shapes, holds the inferred output
// shapes against the ones the run produced, and checks the memory plan.
std::string check_inferred_shapes(const kiln::ir::Graph& g, const std::map<std::string, Value>& inputs,
                                  const std::vector<Value>& got_values) {
  const auto shapes = kiln::backends::shapes_of(inputs);
  kiln::ir::Specialization spec;
  try {
    spec = kiln::ir::specialize(g, shapes, kiln::ref::constant_evaluator());
  } catch (const kiln::ir::Error& e) {
    return std::string("shape inference failed: ") + e.what();
  }
  // The memory plan of the same specialization must be sound.
  std::string plan_problem = kiln::passes::check_memory_plan(kiln::passes::plan_memory(g, spec));
  if (!plan_problem.empty()) return "memory plan: " + plan_problem;
  for (size_t i = 0; i < got_values.size(); ++i) {
    const auto& v = spec.result.values[g.outputs[i].name];
    if (v.kind != got_values[i].kind)
      return std::string("shape inference gives ") + kiln::ir::value_kind_phrase(v.kind) + " for output '" + g.outputs[i].name +
             "', the run gave " + got_values[i].describe();
    if (!got_values[i].is_tensor()) continue;  // a sequence's tensors may differ in shape
    const Tensor& got = got_values[i].tensor;
    if (v.shape.is_concrete() && v.shape.concrete() != got.dims())
      return "shape inference gives " + v.shape.to_string() + " for output '" + g.outputs[i].name + "', the run gave " +
             kiln::ir::dims_to_string(got.dims());
    if (v.dtype != DType::Undefined && v.dtype != got.dtype())
      return std::string("shape inference gives dtype ") + kiln::ir::dtype_name(v.dtype) + " for output '" + g.outputs[i].name +
             "', the run gave " + kiln::ir::dtype_name(got.dtype());
  }
  return {};
}

// A compiled backend under test, or null for the reference executor. As in
// the runtime, nodes it does not take run on its fallback.
const kiln::backends::Backend* g_backend = nullptr;
std::unique_ptr<kiln::backends::Backend> g_fallback;
kiln::backends::CompileOptions g_options;
bool g_through_cache = false;

Result run_test(const fs::path& dir, const std::string& id, double rtol, double atol, bool check_shapes, bool passes) {
  Result r;
  r.id = id;
  kiln::ir::Model model;
  try {
    model = kiln::onnx_import::import_model_file((dir / "model.onnx").string());
  } catch (const kiln::ir::Error& e) {
    r.outcome = is_scope_limit(e) ? Outcome::Skip : Outcome::Fail;
    r.detail = e.what();
    return r;
  }
  const auto& g = *model.graph;
  auto sets = sorted_entries(dir, "test_data_set_");
  if (sets.empty()) {
    r.outcome = Outcome::Skip;
    r.detail = "no test data sets";
    return r;
  }
  for (const auto& set : sets) {
    std::map<std::string, Value> inputs;
    std::vector<Value> expected;
    try {
      auto in_files = sorted_entries(set, "input_");
      auto required = g.required_inputs();
      for (size_t i = 0; i < in_files.size(); ++i) {
        // Files map positionally onto the inputs without defaults, or onto all
        // inputs when the test feeds every one of them.
        const kiln::ir::ValueInfo* info;
        if (in_files.size() == g.inputs.size())
          info = &g.inputs[i];
        else if (i < required.size())
          info = required[i];
        else
          throw kiln::ir::Error(kiln::ir::ErrorKind::InvalidModel, "more input files than model inputs");
        // Each file is a TensorProto, SequenceProto or OptionalProto, as the input is declared.
        inputs[info->name] = kiln::onnx_import::import_value_file(in_files[i].string(), *info);
      }
      auto out_files = sorted_entries(set, "output_");
      if (out_files.size() > g.outputs.size())
        throw kiln::ir::Error(kiln::ir::ErrorKind::InvalidModel, "more output files than model outputs");
      for (size_t i = 0; i < out_files.size(); ++i)
        expected.push_back(kiln::onnx_import::import_value_file(out_files[i].string(), g.outputs[i]));
    } catch (const kiln::ir::Error& e) {
      r.outcome = Outcome::Skip;
      r.detail = std::string("test data: ") + e.what();
      return r;
    }
    std::vector<Value> got;
    try {
      if (passes || g_backend) {
        // The specialization pipeline (as Model::run applies it) must not change any result.
        auto [optimized, spec] = kiln::backends::specialize_and_optimize(g, kiln::backends::shapes_of(inputs));
        if (g_backend) {
          const std::vector<const kiln::backends::Backend*> order = {g_backend, g_fallback.get()};
          auto exe = kiln::backends::compile_partitioned(optimized, spec, order, g_options).executable;
          // What a warm start would run: saved, then loaded again from memory.
          if (g_through_cache) {
            try {
              exe = kiln::backends::reload(*exe, model.graph, order, g_options).executable;
            } catch (const kiln::ir::Error& e) {  // a failure here, never a skip
              throw kiln::ir::Error(kiln::ir::ErrorKind::Internal, std::string("cannot be saved and loaded again: ") + e.what());
            }
          }
          r.compiled_nodes += exe->stats().compiled_nodes;
          r.fallback_nodes += exe->stats().fallback_nodes;
          got = exe->run_values(inputs);
        } else
          got = kiln::ref::run_graph_values(*optimized, inputs);
      } else {
        got = kiln::ref::run_graph_values(g, inputs);
      }
    } catch (const kiln::ir::Error& e) {
      r.outcome = is_scope_limit(e) ? Outcome::Skip : Outcome::Fail;
      r.detail = e.what();
      return r;
    } catch (const std::exception& e) {
      r.outcome = Outcome::Fail;
      r.detail = std::string("unexpected exception: ") + e.what();
      return r;
    }
    if (got.size() != expected.size()) {
      r.outcome = Outcome::Fail;
      r.detail = std::to_string(got.size()) + " outputs, expected " + std::to_string(expected.size());
      return r;
    }
    for (size_t i = 0; i < got.size(); ++i) {
      std::string diff = compare(got[i], expected[i], rtol, atol);
      if (!diff.empty()) {
        r.outcome = Outcome::Fail;
        r.detail = set.filename().string() + " output " + std::to_string(i) + " ('" + g.outputs[i].name + "'): " + diff;
        return r;
      }
    }
    if (check_shapes) {
      std::string diff = check_inferred_shapes(g, inputs, got);
      if (!diff.empty()) {
        r.outcome = Outcome::Fail;
        r.detail = diff;
        return r;
      }
    }
  }
  return r;
}

std::map<std::string, std::string> read_expected_failures(const std::string& path) {
  std::map<std::string, std::string> out;
  if (path.empty()) return out;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open expected-failures list '" + path + "'");
  std::string line;
  while (std::getline(in, line)) {
    auto hash = line.find('#');
    std::string reason = hash == std::string::npos ? "" : line.substr(hash + 1);
    std::string id = line.substr(0, hash);
    id.erase(std::remove_if(id.begin(), id.end(), ::isspace), id.end());
    if (!id.empty()) out[id] = reason;
  }
  return out;
}

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\t', ' ');
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Runs the ONNX backend conformance tests through Kiln"};
  std::string data_root = "/usr/share/libonnx-testdata/data";
  std::vector<std::string> suites = {"node", "pytorch-converted", "pytorch-operator", "simple"};
  std::string filter, expected_path, tsv_path, write_expected_path, backend = "reference";
  bool verbose = false, check_shapes = false, passes = false;
  app.add_option("--data-root", data_root, "folder holding the suites");
  app.add_option("--suite", suites, "suites to run")->delimiter(',');
  app.add_option("--filter", filter, "only tests whose id (suite/name) matches this regex");
  app.add_option("--expected-failures", expected_path, "list of test ids expected to fail");
  app.add_option("--tsv", tsv_path, "write one line per test here");
  app.add_option("--write-expected-failures", write_expected_path,
                 "write the failing tests as an expected-failures list (the reason is the error)");
  app.add_option("--backend", backend, "backend to run")->check(CLI::IsMember({"reference", "cpu"}));
  std::string plugin;
  app.add_option("--plugin", plugin, "a backend plugin to run (the reference runs the nodes it does not take)");
  app.add_option("--kernels", g_options.kernels, "the cpu backend's kernels")->check(CLI::IsMember({"native", "portable"}));
  app.add_flag("-v,--verbose", verbose, "print every failure");
  app.add_flag("--check-shapes", check_shapes, "also hold shape inference against the shapes each run produced");
  app.add_flag("--through-cache", g_through_cache,
               "run what the backend saves for the cache, loaded again (a specialization that cannot be saved fails)");
  app.add_flag("--passes", passes, "run the graph passes (constant folding, BatchNormalization folding, dead nodes) first");
  CLI11_PARSE(app, argc, argv);

  std::unique_ptr<kiln::backends::Backend> compiled_backend;
  if (!plugin.empty()) {
    // As a Runtime forced onto a plugin runs: the plugin takes what it can, the reference the rest.
    try {
      compiled_backend = kiln::plugins::make_plugin_backend(kiln::plugins::load_plugin(plugin), nullptr,
                                                            [](int, const std::string& m) { std::cerr << m << "\n"; });
    } catch (const kiln::ir::Error& e) {
      std::cerr << "error: " << e.what() << "\n";
      return 2;
    }
    g_backend = compiled_backend.get();
    g_fallback = kiln::backends::make_backend("reference", 1);
    backend = g_backend->name();
  } else if (backend != "reference") {
    compiled_backend = kiln::backends::make_backend(backend, 2);
    g_backend = compiled_backend.get();
    g_fallback = g_backend->fallback();
  }

  std::map<std::string, std::string> expected;
  try {
    expected = read_expected_failures(expected_path);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  std::regex re(filter.empty() ? ".*" : filter);

  std::vector<Result> results;
  for (const auto& suite : suites) {
    fs::path root = fs::path(data_root) / suite;
    if (!fs::is_directory(root)) {
      std::cerr << "error: test data folder '" << root.string() << "' is missing (install libonnx-testdata)\n";
      return 2;
    }
    std::vector<fs::path> dirs;
    for (const auto& e : fs::directory_iterator(root))
      if (e.is_directory()) dirs.push_back(e.path());
    std::sort(dirs.begin(), dirs.end());
    for (const auto& d : dirs) {
      std::string id = suite + "/" + d.filename().string();
      if (!std::regex_search(id, re)) continue;
      results.push_back(run_test(d, id, 1e-3, 1e-7, check_shapes, passes));
    }
  }

  int passed = 0, failed = 0, skipped = 0, regressions = 0, fixed = 0;
  std::ofstream tsv;
  if (!tsv_path.empty()) {
    tsv.open(tsv_path);
    tsv << "test\tresult\texpected_failure\tcompiled_nodes\tfallback_nodes\tdetail\n";
  }
  for (const auto& r : results) {
    bool listed = expected.count(r.id) != 0;
    const char* word = r.outcome == Outcome::Pass ? "pass" : r.outcome == Outcome::Fail ? "fail" : "skip";
    if (tsv)
      tsv << r.id << '\t' << word << '\t' << (listed ? "yes" : "no") << '\t' << r.compiled_nodes << '\t' << r.fallback_nodes
          << '\t' << one_line(r.detail) << '\n';
    switch (r.outcome) {
      case Outcome::Pass:
        ++passed;
        if (listed) {
          ++fixed;
          std::cout << "FIXED  " << r.id << " passes but is in the expected-failures list: remove it\n";
        }
        break;
      case Outcome::Fail:
        ++failed;
        if (!listed) {
          ++regressions;
          std::cout << "FAIL   " << r.id << ": " << one_line(r.detail) << "\n";
        } else if (verbose) {
          std::cout << "xfail  " << r.id << ": " << one_line(r.detail) << "\n";
        }
        break;
      case Outcome::Skip:
        ++skipped;
        if (verbose) std::cout << "skip   " << r.id << ": " << one_line(r.detail) << "\n";
        break;
    }
  }
  if (!write_expected_path.empty()) {
    std::ofstream out(write_expected_path);
    out << "# Conformance tests the " << backend
        << (backend == "cpu" ? " backend (" + g_options.kernels + " kernels)" : " backend")
        << " fails, one id per line, '#' and the reason after it.\n"
        << "# This list may only shrink: a listed test that passes fails the run until it is removed.\n";
    for (const auto& r : results)
      if (r.outcome == Outcome::Fail) {
        auto it = expected.find(r.id);
        std::string reason = it != expected.end() && !it->second.empty() ? it->second : " " + one_line(r.detail).substr(0, 160);
        out << r.id << "  #" << reason << "\n";
      }
  }
  std::cout << "conformance (" << backend << "): " << passed << " passed, " << failed << " failed, " << skipped << " skipped; "
            << (failed - regressions) << " failures expected, " << regressions << " unexpected, " << fixed
            << " expected failures now pass\n";
  if (g_backend) {
    int64_t compiled = 0, fallback = 0;
    // Of the passing tests: every node compiled, some, none; and those the
    // graph passes left nothing to run (every output a constant).
    int whole = 0, part = 0, none = 0, folded = 0;
    for (const auto& r : results) {
      compiled += r.compiled_nodes;
      fallback += r.fallback_nodes;
      if (r.outcome != Outcome::Pass) continue;
      if (r.fallback_nodes == 0)
        (r.compiled_nodes ? whole : folded)++;
      else
        (r.compiled_nodes ? part : none)++;
    }
    std::cout << "nodes the " << backend << " backend compiled: " << compiled << ", ran by the reference kernels: " << fallback
              << "\npassing tests fully compiled: " << whole << " of " << passed << " (" << part << " partly, " << none
              << " wholly on reference kernels, " << folded << " folded to constants)\n";
  }
  return regressions || fixed ? 1 : 0;
}
