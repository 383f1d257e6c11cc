// Small hostile models, made for every operator Kiln runs from ONNX's own
// schema of it (every version from opset 7 on): inputs of rank 0, 1 and 4 in
// the types the schema allows, as graph inputs, as constants (folded while
// the model loads) or both; then one attribute or one numeric input at a
// time set to what a careless or hostile exporter could write (0, negative,
// 2^31, 2^62, the int64 extremes, NaN, infinities). Each model is loaded as
// Model::load does (shape inference with folding), then compiled and run on
// a backend as Model::run does. Each must run or fail with a kiln error. A
// crash kills this binary and a case running longer than kCaseSeconds aborts
// it, both naming the case (hostile_runner.hpp). Named cases the sweep's
// shapes cannot reach are in hostile_work_test.cpp.
#include <gtest/gtest.h>
#include <onnx/defs/schema.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backends/reference/kernel_registry.hpp"
#include "hostile_runner.hpp"

namespace {

using kiln::ir::Dims;
using kiln::ir::DType;
using kiln::ir::Tensor;
using kiln::test::config_name;
using kiln::test::Guards;
using kiln::test::Runner;
using kiln::test::SweepCase;
using kiln::test::Tally;

// ---- Types and values ------------------------------------------------------------

// Tensor element types by their schema names, in the order a case prefers them.
const std::vector<std::pair<std::string, DType>>& element_types() {
  static const std::vector<std::pair<std::string, DType>> types = {
      {"float", DType::Float32},    {"int64", DType::Int64},   {"int32", DType::Int32},    {"bool", DType::Bool},
      {"uint8", DType::UInt8},      {"int8", DType::Int8},     {"double", DType::Float64}, {"float16", DType::Float16},
      {"int16", DType::Int16},      {"uint16", DType::UInt16}, {"uint32", DType::UInt32},  {"uint64", DType::UInt64},
      {"bfloat16", DType::BFloat16}};
  return types;
}

// The type a case gives a parameter of `schema`: the first of element_types
// that it allows; nullopt for a parameter Kiln has no values for (sequences,
// optionals, strings).
std::optional<DType> pick_type(const onnx::OpSchema::FormalParameter& p) {
  std::set<std::string> allowed;
  for (const std::string* t : p.GetTypes()) allowed.insert(*t);
  for (const auto& [name, dtype] : element_types())
    if (allowed.count("tensor(" + name + ")")) return dtype;
  return std::nullopt;
}

bool is_integer(DType t) {
  return t == DType::Int8 || t == DType::Int16 || t == DType::Int32 || t == DType::Int64 || t == DType::UInt8 ||
         t == DType::UInt16 || t == DType::UInt32 || t == DType::UInt64;
}
bool is_floating(DType t) { return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16; }

const std::vector<int64_t> kHostileInts = {0, -2, int64_t(1) << 62, std::numeric_limits<int64_t>::min(),
                                           std::numeric_limits<int64_t>::max()};
const std::vector<double> kHostileFloats = {std::nan(""), HUGE_VAL, -HUGE_VAL, 1e30, -1.0};

// A tensor of `dims` whose every element is `value`, converted as Cast would.
Tensor filled(DType dtype, const Dims& dims, double value, std::optional<int64_t> int_value = std::nullopt) {
  const int64_t n = kiln::ir::checked_numel(dims);
  if (int_value || is_integer(dtype) || dtype == DType::Bool)
    return Tensor::from_vector<int64_t>(dims, std::vector<int64_t>(size_t(n), int_value ? *int_value : int64_t(value)))
        .cast(dtype);
  return Tensor::from_vector<double>(dims, std::vector<double>(size_t(n), value)).cast(dtype);
}

// Ordinary values: 1 for integers (a valid index, count, axis or size on
// these shapes), a spread of small numbers for floats.
Tensor ordinary(DType dtype, const Dims& dims) {
  if (!is_floating(dtype)) return filled(dtype, dims, 1);
  const int64_t n = kiln::ir::checked_numel(dims);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = 0.75 - 0.5 * double(i);
  return Tensor::from_vector<double>(dims, v).cast(dtype);
}

onnx::TensorProto to_proto(const Tensor& t, const std::string& name) {
  onnx::TensorProto p;
  p.set_name(name);
  p.set_data_type(int(t.dtype()));
  for (int64_t d : t.dims()) p.add_dims(d);
  p.set_raw_data(t.raw(), t.nbytes());
  return p;
}

void set_tensor_type(onnx::ValueInfoProto* v, const std::string& name, DType dtype, const Dims* dims) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(int(dtype));
  if (!dims) return;
  auto* shape = tt->mutable_shape();
  for (int64_t d : *dims) shape->add_dim()->set_dim_value(d);
}

// ---- Cases ------------------------------------------------------------------------

// Where a case's inputs come from.
enum class Source {
  Inputs,     // graph inputs: shapes known, values only when it runs
  Constants,  // initializers: the node folds while the model loads
  Mixed,      // integer and bool inputs constant (shapes, axes, sizes, flags), the rest graph inputs
};
const char* source_name(Source s) { return s == Source::Inputs ? "inputs" : s == Source::Constants ? "constants" : "mixed"; }

// One change from an ordinary case.
struct Hostile {
  std::string attribute;  // this attribute set to `attr`...
  onnx::AttributeProto attr;
  int input = -1;  // ... or this input filled with `value`
  double value = 0;
  std::optional<int64_t> int_value;
  std::string label;
};

struct Variant {
  int rank = 0;
  Source source = Source::Inputs;
  bool optional_inputs = true;  // give the optional inputs, or leave them out
  std::optional<Hostile> hostile;
};

std::string format_int(int64_t v) {
  if (v == std::numeric_limits<int64_t>::min()) return "int64min";
  if (v == std::numeric_limits<int64_t>::max()) return "int64max";
  if (v == int64_t(1) << 62) return "2^62";
  if (v == int64_t(1) << 31) return "2^31";
  return std::to_string(v);
}
std::string format_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// A subgraph for If, Loop or Scan: each output is Identity of the input
// named, or for "" a constant of `const_type` and `const_dims`, or for
// "false" that bool (a Loop's condition: one iteration).
onnx::GraphProto body(const std::vector<std::pair<std::string, DType>>& ins, const std::vector<std::string>& outs_of,
                      DType const_type, const Dims* const_dims) {
  onnx::GraphProto g;
  g.set_name("body");
  for (const auto& [name, dtype] : ins) set_tensor_type(g.add_input(), name, dtype, nullptr);
  int k = 0;
  for (const std::string& from : outs_of) {
    const std::string out = "out" + std::to_string(k++);
    auto* n = g.add_node();
    if (from.empty() || from == "false") {
      n->set_op_type("Constant");
      auto* a = n->add_attribute();
      a->set_name("value");
      a->set_type(onnx::AttributeProto::TENSOR);
      *a->mutable_t() = to_proto(from.empty() ? ordinary(const_type, *const_dims) : Tensor::scalar<bool>(false), "");
    } else {
      n->set_op_type("Identity");
      n->add_input(from);
    }
    n->add_output(out);
    g.add_output()->set_name(out);
  }
  return g;
}

// The value of a required attribute in an ordinary case: one that lets a
// rank-1 case run where the operator allows it.
onnx::AttributeProto required_attribute(const std::string& op, const onnx::OpSchema::Attribute& a, int rank,
                                        const std::vector<DType>& input_types, int num_inputs) {
  onnx::AttributeProto p;
  p.set_name(a.name);
  p.set_type(a.type);
  const Dims dims(size_t(rank), 2);
  const DType first = input_types.empty() ? DType::Float32 : input_types[0];
  using AP = onnx::AttributeProto;
  auto ints = [&](std::vector<int64_t> v) {
    for (int64_t x : v) p.add_ints(x);
  };
  if (a.name == "to")
    p.set_i(int64_t(DType::Float32));
  else if (a.name == "direction")
    p.set_s("LEFT");
  else if (a.name == "mode")
    p.set_s("TF");
  else if (a.name == "equation") {
    std::string eq;
    for (int i = 0; i < num_inputs; ++i) eq += (i ? ",..." : "...");
    p.set_s(eq + "->...");
  } else if (a.name == "pads")
    ints(std::vector<int64_t>(size_t(2 * rank), 0));
  else if (a.name == "starts")
    ints(std::vector<int64_t>(size_t(rank), 0));
  else if (a.name == "ends")
    ints(std::vector<int64_t>(size_t(rank), 1));
  else if (a.name == "scales")
    for (int i = 0; i < rank; ++i) p.add_floats(1);
  else if (a.name == "ngram_counts" || a.name == "ngram_indexes" || a.name == "axes")
    ints({0});
  else if (a.name == "value")
    *p.mutable_t() = to_proto(ordinary(DType::Float32, dims), "");
  else if (a.name == "then_branch" || a.name == "else_branch")
    *p.mutable_g() = body({}, {""}, DType::Float32, &dims);
  else if (a.name == "body" && op == "Loop") {
    const DType v = input_types.size() > 2 ? input_types[2] : DType::Float32;
    // One iteration: with a trip count of 2^62 the loop would run to its 2^24-iteration limit (seconds).
    *p.mutable_g() = body({{"i", DType::Int64}, {"c", DType::Bool}, {"v", v}}, {"false", "v"}, v, &dims);
  } else if (a.name == "body") {  // Scan: one state and one scanned input
    *p.mutable_g() = body({{"s", first}, {"e", first}}, {"s", "e"}, first, &dims);
  } else if (a.type == AP::INT)
    p.set_i(a.name == "axis" || a.name == "max_skip_count" ? 0 : 1);
  else if (a.type == AP::INTS)
    ints({1});
  else if (a.type == AP::FLOAT)
    p.set_f(1);
  else if (a.type == AP::FLOATS)
    p.add_floats(1);
  else if (a.type == AP::STRING)
    p.set_s("");
  else if (a.type == AP::TENSOR)
    *p.mutable_t() = to_proto(ordinary(DType::Float32, dims), "");
  return p;
}

// The hostile values of one attribute: every int, float or string it can
// hold gone wrong, one at a time.
std::vector<Hostile> hostile_attributes(const onnx::OpSchema::Attribute& a) {
  using AP = onnx::AttributeProto;
  std::vector<Hostile> out;
  auto add = [&](std::string label, const std::function<void(AP&)>& set) {
    Hostile h;
    h.attribute = a.name;
    h.attr.set_name(a.name);
    h.attr.set_type(a.type);
    set(h.attr);
    h.label = a.name + "=" + label;
    out.push_back(std::move(h));
  };
  switch (a.type) {
    case AP::INT:
      for (int64_t v : kHostileInts) add(format_int(v), [v](AP& p) { p.set_i(v); });
      break;
    case AP::INTS:
      add("[]", [](AP&) {});
      for (int64_t v : kHostileInts) add("[" + format_int(v) + "]", [v](AP& p) { p.add_ints(v); });
      for (int64_t v : kHostileInts) add("[1," + format_int(v) + "]", [v](AP& p) { p.add_ints(1), p.add_ints(v); });
      break;
    case AP::FLOAT:
      for (double v : kHostileFloats) add(format_float(v), [v](AP& p) { p.set_f(float(v)); });
      break;
    case AP::FLOATS:
      add("[]", [](AP&) {});
      for (double v : kHostileFloats) add("[" + format_float(v) + "]", [v](AP& p) { p.add_floats(float(v)); });
      break;
    case AP::STRING:
      add("''", [](AP& p) { p.set_s(""); });
      add("'bogus'", [](AP& p) { p.set_s("bogus"); });
      break;
    default: break;
  }
  return out;
}

class CaseMaker {
 public:
  CaseMaker(const std::string& op, const onnx::OpSchema& schema, int opset) : op_(op), schema_(schema), opset_(opset) {
    for (const auto& p : schema.inputs()) {
      const int count = p.GetOption() == onnx::OpSchema::Variadic ? 2 : 1;
      for (int i = 0; i < count; ++i) {
        params_.push_back(&p);
        types_.push_back(pick_type(p).value_or(DType::Undefined));
      }
    }
  }

  // Whether Kiln could hold this operator's inputs at all.
  bool representable() const {
    for (size_t i = 0; i < params_.size(); ++i)
      if (types_[i] == DType::Undefined && params_[i]->GetOption() != onnx::OpSchema::Optional) return false;
    for (const auto& p : schema_.outputs())
      if (!pick_type(p)) return false;
    return true;
  }
  int num_inputs() const { return int(params_.size()); }
  DType input_type(int i) const { return types_[size_t(i)]; }
  bool input_given(int i, bool optional_inputs) const {
    return types_[size_t(i)] != DType::Undefined &&
           (optional_inputs || params_[size_t(i)]->GetOption() != onnx::OpSchema::Optional);
  }

  SweepCase make(const Variant& v) const {
    SweepCase c;
    c.name = op_ + "-" + std::to_string(opset_) + "/rank" + std::to_string(v.rank) + "/" + source_name(v.source) +
             (v.optional_inputs ? "" : "/no-optional") + (v.hostile ? "/" + v.hostile->label : "");
    onnx::ModelProto m;
    m.set_ir_version(8);
    auto* o = m.add_opset_import();
    o->set_domain("");
    o->set_version(opset_);
    auto& g = *m.mutable_graph();
    g.set_name("hostile");
    auto& n = *g.add_node();
    n.set_op_type(op_);
    n.set_name("node");
    const Dims dims(size_t(v.rank), 2);
    std::vector<std::string> names;
    for (int i = 0; i < num_inputs(); ++i) {
      if (!input_given(i, v.optional_inputs)) {
        names.emplace_back();
        continue;
      }
      const std::string name = "in" + std::to_string(i);
      names.push_back(name);
      const DType t = input_type(i);
      Tensor value = ordinary(t, dims);
      if (v.hostile && v.hostile->input == i) value = filled(t, dims, v.hostile->value, v.hostile->int_value);
      const bool constant = v.source == Source::Constants || (v.source == Source::Mixed && (is_integer(t) || t == DType::Bool));
      if (constant) {
        *g.add_initializer() = to_proto(value, name);
      } else {
        set_tensor_type(g.add_input(), name, t, &dims);
        c.inputs[name] = value;
      }
    }
    c.folds = v.source == Source::Constants;
    c.hostile_constant = v.hostile && v.hostile->input >= 0 && v.source != Source::Inputs;
    while (!names.empty() && names.back().empty()) names.pop_back();
    for (const auto& name : names) n.add_input(name);
    int k = 0;
    for (const auto& p : schema_.outputs()) {
      // Split into two; control flow's outputs are what its bodies make: one.
      const int count = p.GetOption() == onnx::OpSchema::Variadic && op_ == "Split" ? 2 : 1;
      for (int i = 0; i < count; ++i) {
        const std::string name = "out" + std::to_string(k++);
        n.add_output(name);
        g.add_output()->set_name(name);
      }
    }
    for (const auto& [name, a] : schema_.attributes()) {
      if (v.hostile && v.hostile->attribute == name)
        *n.add_attribute() = v.hostile->attr;
      else if (a.required)
        *n.add_attribute() = required_attribute(op_, a, v.rank, types_, int(names.size()));
    }
    // An optional attribute without which the operator refuses everything.
    if (op_ == "TfIdfVectorizer" && !(v.hostile && v.hostile->attribute == "pool_int64s")) {
      auto* a = n.add_attribute();
      a->set_name("pool_int64s");
      a->set_type(onnx::AttributeProto::INTS);
      a->add_ints(1);
    }
    // Scan's state and scanned inputs: one of each.
    if (op_ == "Scan" && !(v.hostile && v.hostile->attribute == "num_scan_inputs")) {
      for (auto& a : *n.mutable_attribute())
        if (a.name() == "num_scan_inputs") a.set_i(1);
    }
    c.bytes = m.SerializeAsString();
    return c;
  }

  // Every variant of this operator: ordinary inputs of rank 0 and 1 from
  // each source, then one hostile attribute or input at a time.
  std::vector<SweepCase> all() const {
    std::vector<SweepCase> out;
    for (int rank : {0, 1, 4})
      for (Source s : {Source::Inputs, Source::Constants, Source::Mixed})
        for (bool optional_inputs : {true, false}) out.push_back(make({rank, s, optional_inputs, std::nullopt}));
    // Rank 4 too: convolutions, pools and images only look at their
    // attributes once the inputs have the rank they need.
    for (const auto& [name, a] : schema_.attributes())
      for (Hostile h : hostile_attributes(a))
        for (int rank : {1, 4})
          for (Source s : {Source::Inputs, Source::Constants, Source::Mixed}) out.push_back(make({rank, s, false, h}));
    for (int i = 0; i < num_inputs(); ++i) {
      if (!input_given(i, true)) continue;
      std::vector<Hostile> values;
      if (is_integer(input_type(i)))
        for (int64_t x : kHostileInts) values.push_back({"", {}, i, 0, x, "in" + std::to_string(i) + "=" + format_int(x)});
      else if (is_floating(input_type(i)))
        for (double x : kHostileFloats)
          values.push_back({"", {}, i, x, std::nullopt, "in" + std::to_string(i) + "=" + format_float(x)});
      // Values innermost: the graph-input cases of one model run one compile.
      for (int rank : {0, 1})
        for (Source s : {Source::Inputs, Source::Constants, Source::Mixed})
          for (const Hostile& h : values) out.push_back(make({rank, s, true, h}));
    }
    return out;
  }

 private:
  std::string op_;
  const onnx::OpSchema& schema_;
  int opset_;
  std::vector<const onnx::OpSchema::FormalParameter*> params_;
  std::vector<DType> types_;
};

// The operators Kiln runs that are newer than the ONNX library's registry
// (opset 17), as ONNX documents them.
const std::vector<onnx::OpSchema>& newer_schemas() {
  static const std::vector<onnx::OpSchema> schemas = [] {
    const std::vector<std::string> floats = {"tensor(float)", "tensor(double)", "tensor(float16)", "tensor(bfloat16)"};
    std::vector<onnx::OpSchema> s(4);
    s[0].SetName("CenterCropPad").SinceVersion(18).Input(0, "input_data", "", "T").Input(1, "shape", "", "Tind");
    s[0].Output(0, "output_data", "", "T").Attr("axes", "", onnx::AttributeProto::INTS, false);
    s[0].TypeConstraint("T", {"tensor(float)", "tensor(int64)", "tensor(bool)"}, "")
        .TypeConstraint("Tind", {"tensor(int64)"}, "");
    s[1].SetName("Col2Im").SinceVersion(18).Input(0, "input", "", "T").Input(1, "image_shape", "", "tensor(int64)");
    s[1].Input(2, "block_shape", "", "tensor(int64)").Output(0, "output", "", "T").TypeConstraint("T", floats, "");
    for (const char* a : {"dilations", "pads", "strides"}) s[1].Attr(a, "", onnx::AttributeProto::INTS, false);
    s[2].SetName("Mish").SinceVersion(18).Input(0, "X", "", "T").Output(0, "Y", "", "T").TypeConstraint("T", floats, "");
    s[3].SetName("Gelu").SinceVersion(20).Input(0, "X", "", "T").Output(0, "Y", "", "T").TypeConstraint("T", floats, "");
    s[3].Attr("approximate", "", onnx::AttributeProto::STRING, false);
    for (auto& schema : s) schema.Finalize();
    return s;
  }();
  return schemas;
}

struct OperatorVersion {
  std::string op;
  int opset;
  const onnx::OpSchema* schema;
};

// Every schema version of every operator with a reference kernel, from opset 7.
std::vector<OperatorVersion> operator_versions() {
  const int latest = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map().at("").second;
  std::vector<OperatorVersion> out;
  for (const std::string& op : kiln::ref::KernelRegistry::instance().op_types()) {
    for (int version = latest; version >= 7;) {
      const onnx::OpSchema* s = onnx::OpSchemaRegistry::Schema(op, version, "");
      if (!s) break;
      out.push_back({op, std::max(s->SinceVersion(), 7), s});
      version = s->SinceVersion() - 1;
    }
    // Kiln imports opsets up to 18: Gelu (20) is taken there.
    for (const onnx::OpSchema& s : newer_schemas())
      if (s.Name() == op) out.push_back({op, std::min(s.SinceVersion(), 18), &s});
  }
  return out;
}

class HostileShapes : public ::testing::TestWithParam<std::string> {};

TEST_P(HostileShapes, EveryOperatorRunsOrRefusesCleanly) {
  const Guards guards;
  const auto start = std::chrono::steady_clock::now();
  Runner runner(GetParam());
  int64_t operators = 0;
  std::set<std::string> covered;
  for (const auto& [op, opset, schema] : operator_versions()) {
    CaseMaker maker(op, *schema, opset);
    if (!maker.representable()) continue;
    ++operators;
    covered.insert(op);
    for (const SweepCase& c : maker.all()) runner.run(c);
  }
  std::vector<std::string> skipped;
  // ONNX Runtime's contrib QLinearAdd and QGemm have no schema in ONNX's
  // registry (reference_ops_test.cpp checks their refusals). The sweep makes
  // tensors of numbers: the operators on sequences, optionals and strings
  // are held to bad inputs in sequence_ops_test.cpp.
  static const std::set<std::string> elsewhere = {
      "QLinearAdd",         "QGemm",          "ConcatFromSequence", "Optional",        "OptionalGetElement",
      "OptionalHasElement", "SequenceAt",     "SequenceConstruct",  "SequenceEmpty",   "SequenceErase",
      "SequenceInsert",     "SequenceLength", "SequenceMap",        "SplitToSequence", "StringNormalizer"};
  for (const std::string& op : kiln::ref::KernelRegistry::instance().op_types())
    if (!covered.count(op) && !elsewhere.count(op)) skipped.push_back(op);
  const Tally& tally = runner.tally;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%lld operator versions, %lld cases: %lld ran, %lld refused, %lld not clean (%.1f s)\n", (long long)operators,
              (long long)tally.cases, (long long)tally.ran, (long long)tally.refused, (long long)tally.bad, seconds);
  // A good share must run, or the sweep tests only the refusals; and every
  // operator must be in it.
  EXPECT_GT(tally.ran, tally.cases / 10);
  EXPECT_EQ(skipped, std::vector<std::string>{});
}

INSTANTIATE_TEST_SUITE_P(Configs, HostileShapes, ::testing::Values("reference", "cpu", "cpu:portable"), config_name);

}  // namespace
