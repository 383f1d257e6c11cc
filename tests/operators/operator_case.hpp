#pragma once
// The operator suite's harness: a Case (a model, its inputs, what a backend
// must do with it), the configurations under test (named test parameters)
// and check(), which holds a backend's outputs against the reference
// executor and, for the cases a backend is meant to compile, its stats.
// The suites (operator_test.cpp, quantized_operator_test.cpp) write their
// cases once; every backend and plugin that claims the operators runs them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <variant>
#include <vector>

#include "backends/backend.hpp"
#include "backends/pipeline.hpp"
#include "backends/reference/reference_executor.hpp"
#include "model_builder.hpp"
#include "plugins/plugin_backend.hpp"
#include "random_data.hpp"
#include "runtime/ir/error.hpp"
#include "runtime/ir/shape_inference.hpp"
#include "runtime/onnx/onnx_importer.hpp"

namespace kiln::test::operators {

using kiln::ir::Dims;
using kiln::ir::DType;
using kiln::ir::Tensor;
using kiln::test::ModelBuilder;
using kiln::test::random_values;

constexpr int kFloat = onnx::TensorProto::FLOAT;
constexpr int kInt64 = onnx::TensorProto::INT64;
constexpr int kInt32 = onnx::TensorProto::INT32;

inline int64_t numel(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

struct Attr {
  Attr(std::string n, int v) : name(std::move(n)), value(int64_t(v)) {}
  Attr(std::string n, int64_t v) : name(std::move(n)), value(v) {}
  Attr(std::string n, float v) : name(std::move(n)), value(v) {}
  // An initializer_list, so that a one-element list such as {2} is a list, not an int.
  Attr(std::string n, std::initializer_list<int64_t> v) : name(std::move(n)), value(std::vector<int64_t>(v)) {}
  Attr(std::string n, const char* v) : name(std::move(n)), value(std::string(v)) {}
  Attr(std::string n, std::vector<float> v) : name(std::move(n)), value(std::move(v)) {}
  Attr(std::string n, std::vector<std::string> v) : name(std::move(n)), value(std::move(v)) {}
  std::string name;
  std::variant<int64_t, float, std::vector<int64_t>, std::string, std::vector<float>, std::vector<std::string>> value;
};

// A model, its inputs, and what a backend must do with it.
struct Case {
  explicit Case(std::vector<std::string> under_test, int64_t opset = 13) : model(opset), ops(std::move(under_test)) {}

  ModelBuilder model;
  std::map<std::string, Tensor> inputs;
  std::vector<std::string> ops;  // a backend that does not claim all of these is skipped
  bool native = true;            // a backend claiming every node must compile every node
  bool portable = true;          // ... and so must the cpu backend's portable kernels
  float atol = 1e-5f;            // scaled by the largest magnitude of the expected output
  float rtol = 1e-4f;
  int64_t steps = 0;  // how far an integer output may be from the reference's
  unsigned seed = 1;  // fixed and advanced per random tensor: runs are reproducible

  std::vector<float> random(int64_t n, float lo, float hi) {
    std::vector<float> v = random_values(size_t(n), seed++);
    for (float& x : v) x = lo + (x + 1) / 2 * (hi - lo);
    return v;
  }

  void declare_input(const std::string& name, int elem, const Dims& dims) {
    auto* v = model.graph().add_input();
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    auto* shape = tt->mutable_shape();
    for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
  }

  // A float graph input of uniform random values in [lo, hi).
  Case& input(const std::string& name, const Dims& dims, float lo = -1, float hi = 1) {
    declare_input(name, kFloat, dims);
    inputs[name] = Tensor::from_vector<float>(dims, random(numel(dims), lo, hi));
    return *this;
  }
  template <typename T>
  Case& input_values(const std::string& name, const Dims& dims, const std::vector<T>& values) {
    declare_input(name, std::is_same_v<T, int64_t> ? kInt64 : std::is_same_v<T, float> ? kFloat : kInt32, dims);
    inputs[name] = Tensor::from_vector<T>(dims, values);
    return *this;
  }

  // A graph input of T's element type (ONNX's codes are DType's).
  template <typename T>
  Case& typed_input(const std::string& name, const Dims& dims, const std::vector<T>& values) {
    inputs[name] = Tensor::from_vector<T>(dims, values);
    declare_input(name, int(inputs[name].dtype()), dims);
    return *this;
  }

  // A bool graph input (a condition).
  Case& bool_input(const std::string& name, const Dims& dims, const std::vector<uint8_t>& values) {
    declare_input(name, onnx::TensorProto::BOOL, dims);
    Tensor t(DType::Bool, dims);
    if (values.size() != size_t(t.numel())) throw std::invalid_argument("bool_input: wrong number of values for " + name);
    std::memcpy(t.raw(), values.data(), values.size());
    inputs[name] = t;
    return *this;
  }

  // The element type only: output shapes are the inference's to work out.
  Case& output(const std::string& name, int elem = kFloat) {
    auto* v = model.graph().add_output();
    v->set_name(name);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(elem);
    return *this;
  }

  // A random float initializer (weights are constants to the backends).
  Case& weight(const std::string& name, const Dims& dims, float scale = 1) {
    model.initializer(ModelBuilder::float_tensor(name, dims, random(numel(dims), -scale, scale)));
    return *this;
  }
  Case& constant(const std::string& name, const Dims& dims, std::vector<float> values) {
    model.initializer(ModelBuilder::float_tensor(name, dims, std::move(values)));
    return *this;
  }
  Case& scalar(const std::string& name, float value) { return constant(name, {}, {value}); }
  Case& int_constant(const std::string& name, const Dims& dims, const std::vector<int64_t>& values, int elem = kInt64) {
    onnx::TensorProto t;
    t.set_name(name);
    t.set_data_type(elem);
    for (int64_t d : dims) t.add_dims(d);
    for (int64_t v : values) elem == kInt64 ? t.add_int64_data(v) : t.add_int32_data(int32_t(v));
    model.initializer(t);
    return *this;
  }

  onnx::NodeProto& node(const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs,
                        std::vector<Attr> attrs = {}, std::string name = "") {
    // Named, so that error messages can be checked to name them.
    if (name.empty()) name = op + "_" + std::to_string(model.graph().node_size());
    auto& n = model.node(op, std::move(ins), std::move(outs), name);
    for (const auto& a : attrs) {
      auto* p = n.add_attribute();
      p->set_name(a.name);
      if (auto* i = std::get_if<int64_t>(&a.value)) {
        p->set_type(onnx::AttributeProto::INT);
        p->set_i(*i);
      } else if (auto* f = std::get_if<float>(&a.value)) {
        p->set_type(onnx::AttributeProto::FLOAT);
        p->set_f(*f);
      } else if (auto* v = std::get_if<std::vector<int64_t>>(&a.value)) {
        p->set_type(onnx::AttributeProto::INTS);
        for (int64_t x : *v) p->add_ints(x);
      } else if (auto* fs = std::get_if<std::vector<float>>(&a.value)) {
        p->set_type(onnx::AttributeProto::FLOATS);
        for (float x : *fs) p->add_floats(x);
      } else if (auto* ss = std::get_if<std::vector<std::string>>(&a.value)) {
        p->set_type(onnx::AttributeProto::STRINGS);
        for (const auto& x : *ss) p->add_strings(x);
      } else {
        p->set_type(onnx::AttributeProto::STRING);
        p->set_s(std::get<std::string>(a.value));
      }
    }
    return n;
  }
};

inline kiln::ir::Model import(const Case& c) {
  const std::string bytes = c.model.bytes();
  return kiln::onnx_import::import_model_bytes(bytes.data(), bytes.size(), "operator_test.onnx");
}

// A configuration under test, named by the test parameter so that a failing
// test says which one broke: a backend (or "plugin-NAME", the plugin NAME.so
// of the tests' plugin folder), its compile options, and whether the
// executable goes through a save and load first, as a warm start does.
struct Config {
  std::string backend;
  kiln::backends::CompileOptions options;
  bool through_cache = false;
};

inline const std::map<std::string, Config>& configs() {
  static const std::map<std::string, Config> all = [] {
    std::map<std::string, Config> m;
    for (const auto& n : kiln::backends::backend_names())
      if (n != "reference") m[n] = {n, {}, false};
    if (m.count("cpu")) {
      Config c{"cpu", {}, false};
      c.options.kernels = "portable";
      m["cpu_portable"] = c;
      // Every convolution in 16-channel blocks, which the defaults give only
      // to large activations (larger than any operator test's).
      c = {"cpu", {}, false};
      c.options.channel_blocks_from = 0;
      m["cpu_channel_blocks"] = c;
      m["cpu_through_cache"] = {"cpu", {}, true};
      // Every convolution on the next of oneDNN's jit implementations that
      // fits (implementation_choice.hpp), through the cache: the compile
      // picks one only where making the preferred one is slow, rare here.
      c = {"cpu", {}, true};
      c.options.implementation_trials = "other";
      m["cpu_other_implementations"] = c;
    }
    for (const char* plugin : {"plugin-kiln-reference", "plugin-toy"}) m[plugin] = {plugin, {}, false};
#ifdef KILN_TEST_XNNPACK_PLUGIN
    m["plugin-xnnpack"] = {"plugin-xnnpack", {}, false};  // built where libxnnpack-dev is installed
#endif
    return m;
  }();
  return all;
}

inline const Config& config_of(const std::string& name) { return configs().at(name); }
inline std::string config_backend(const std::string& config) { return config_of(config).backend; }
inline const kiln::backends::CompileOptions& compile_options(const std::string& config) { return config_of(config).options; }

// One backend object per name for the whole run: JIT setup is not what is tested.
inline const kiln::backends::Backend& backend(const std::string& config) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<kiln::backends::Backend>> backends;
  std::lock_guard<std::mutex> lock(mutex);
  const std::string name = config_backend(config);
  auto& b = backends[name];
  if (!b && name.rfind("plugin-", 0) == 0) {
    std::string path = std::string(KILN_TEST_PLUGIN_DIR) + "/" + name.substr(7) + ".so";
#ifdef KILN_TEST_XNNPACK_PLUGIN
    if (name == "plugin-xnnpack") path = KILN_TEST_XNNPACK_PLUGIN;
#endif
    b = kiln::plugins::make_plugin_backend(kiln::plugins::load_plugin(path), nullptr,
                                           [](int, const std::string& m) { std::fprintf(stderr, "%s\n", m.c_str()); });
  }
  if (!b) b = kiln::backends::make_backend(name, 2);
  if (!b) throw std::runtime_error("no backend named " + name);
  return *b;
}

inline std::vector<std::string> backends_under_test() {
  std::vector<std::string> names;
  for (const auto& [name, config] : configs()) names.push_back(name);
  return names;
}

// The backends in the runtime's order: the one under test, then what takes
// the nodes it does not (its own fallback, as the runtime asks it, or the
// reference for a plugin).
inline std::vector<const kiln::backends::Backend*> backend_order(const std::string& config) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<kiln::backends::Backend>> fallbacks;
  const kiln::backends::Backend& b = backend(config);
  std::lock_guard<std::mutex> lock(mutex);
  auto& fallback = fallbacks[config_backend(config)];
  if (!fallback) fallback = b.fallback();
  if (!fallback) fallback = kiln::backends::make_backend("reference", 1);
  return {&b, fallback.get()};
}

// The runtime's pipeline (backends/pipeline.hpp).
struct Compiled {
  std::shared_ptr<kiln::ir::Graph> graph;
  std::unique_ptr<kiln::backends::Executable> exe;
};
inline Compiled compile(const std::string& config, const kiln::ir::Model& model, const std::map<std::string, Tensor>& inputs) {
  const std::vector<const kiln::backends::Backend*> order = backend_order(config);
  auto [graph, spec] = kiln::backends::specialize_and_optimize(*model.graph, kiln::backends::shapes_of(inputs));
  Compiled c{graph, kiln::backends::compile_partitioned(graph, spec, order, compile_options(config)).executable};
  if (config_of(config).through_cache)
    c.exe = kiln::backends::reload(*c.exe, model.graph, order, compile_options(config)).executable;
  return c;
}

// |got - want| <= atol * max(1, max|want|) + rtol * |want|, element-wise;
// integers within `steps`. Reports the count and the first few mismatches.
inline void expect_close(const Tensor& got, const Tensor& want, float atol, float rtol, int64_t steps, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.dims(), want.dims()) << what;
  const int64_t n = want.numel();
  const bool floating = want.dtype() == DType::Float32 || want.dtype() == DType::Float64;
  double scale = 1;  // of the finite values: an infinity must be matched exactly
  if (floating)
    for (int64_t i = 0; i < n; ++i)
      if (std::isfinite(want.as_double(i))) scale = std::max(scale, std::fabs(want.as_double(i)));
  int64_t bad = 0;
  double worst = 0;
  std::ostringstream first;
  for (int64_t i = 0; i < n; ++i) {
    bool ok;
    if (floating) {
      const double g = got.as_double(i), w = want.as_double(i);
      const double err = std::fabs(g - w);
      ok = std::isnan(w) ? std::isnan(g) : std::isinf(w) ? g == w : err <= atol * scale + rtol * std::fabs(w);
      if (!std::isnan(err)) worst = std::max(worst, err);
      if (!ok && bad < 5) first << "\n  [" << i << "] got " << g << ", want " << w;
    } else {
      ok = std::llabs(got.as_int64(i) - want.as_int64(i)) <= steps;
      if (!ok && bad < 5) first << "\n  [" << i << "] got " << got.as_int64(i) << ", want " << want.as_int64(i);
    }
    if (!ok) ++bad;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << n << " elements differ (largest error " << worst << ", magnitude "
                    << scale << ")" << first.str();
}

inline void check(const std::string& backend_name, const Case& c) {
  const auto& b = backend(backend_name);
  const kiln::ir::Model model = import(c);
  for (const auto& op : c.ops) {
    bool claimed = false;
    for (const auto& n : model.graph->nodes) claimed |= n.op_type == op && b.supports(n);
    if (!claimed) GTEST_SKIP() << backend_name << " does not claim " << op;
  }
  const std::vector<Tensor> want = kiln::ref::run_graph(*model.graph, c.inputs);
  Compiled compiled = compile(backend_name, model, c.inputs);
  const std::vector<Tensor> got = compiled.exe->run(c.inputs);

  bool claims_all = true;
  for (const auto& n : compiled.graph->nodes) claims_all &= b.supports(n);
  // A plugin may decline a node it supports at some shapes (the toy plugin
  // takes Add without broadcasting only): its count is not checked.
  if (c.native && claims_all && !b.may_decline() && (c.portable || compile_options(backend_name).kernels != "portable")) {
    const auto stats = compiled.exe->stats();
    EXPECT_EQ(stats.fallback_nodes, 0) << "a node ran on the reference kernels";
    // An executable that is the reference interpreter reports no nodes at all.
    EXPECT_EQ(stats.compiled_nodes, int64_t(compiled.graph->nodes.size())) << "not every node was compiled";
  }
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k)
    expect_close(got[k], want[k], c.atol, c.rtol, c.steps, "output '" + model.graph->outputs[k].name + "'");
}

inline std::string param_name(const std::string& s) {
  std::string out;
  for (char ch : s) out += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return out;
}

class OperatorTest : public ::testing::TestWithParam<std::string> {
 protected:
  void run(const Case& c) { check(GetParam(), c); }
};

}  // namespace kiln::test::operators
