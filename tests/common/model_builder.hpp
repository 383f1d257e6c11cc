#pragma once
// Builds small ONNX models in memory for tests, through the real protobuf
// classes, so that the importer sees exactly what a file would hold.
#include <onnx/onnx_pb.h>

#include <initializer_list>
#include <string>
#include <vector>

namespace kiln::test {

class ModelBuilder {
 public:
  explicit ModelBuilder(int64_t opset = 13) {
    model_.set_ir_version(8);
    auto* o = model_.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    model_.mutable_graph()->set_name("test");
  }

  onnx::GraphProto& graph() { return *model_.mutable_graph(); }
  onnx::ModelProto& model() { return model_; }

  // Dims: a number, or a symbol given as a string; "" for an unnamed dim.
  struct D {
    D(int64_t v) : value(v) {}
    D(int v) : value(v) {}
    D(const char* s) : symbol(s), is_symbol(true) {}
    int64_t value = 0;
    std::string symbol;
    bool is_symbol = false;
  };

  static void set_type(onnx::ValueInfoProto* v, const std::string& name, int elem, std::initializer_list<D> dims) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    auto* shape = tt->mutable_shape();
    for (const auto& d : dims) {
      auto* dim = shape->add_dim();
      if (d.is_symbol) {
        if (!d.symbol.empty()) dim->set_dim_param(d.symbol);
      } else {
        dim->set_dim_value(d.value);
      }
    }
  }

  ModelBuilder& input(const std::string& name, int elem, std::initializer_list<D> dims) {
    set_type(graph().add_input(), name, elem, dims);
    return *this;
  }
  ModelBuilder& output(const std::string& name, int elem, std::initializer_list<D> dims) {
    set_type(graph().add_output(), name, elem, dims);
    return *this;
  }
  // Sequences of tensors and optionals (of a tensor, or of a sequence when `of_sequence`), of rank unknown.
  static onnx::TypeProto tensor_type(int elem) {
    onnx::TypeProto t;
    t.mutable_tensor_type()->set_elem_type(elem);
    return t;
  }
  static onnx::TypeProto sequence_type(int elem) {
    onnx::TypeProto t;
    *t.mutable_sequence_type()->mutable_elem_type() = tensor_type(elem);
    return t;
  }
  static onnx::TypeProto optional_type(int elem, bool of_sequence = false) {
    onnx::TypeProto t;
    *t.mutable_optional_type()->mutable_elem_type() = of_sequence ? sequence_type(elem) : tensor_type(elem);
    return t;
  }
  ModelBuilder& typed_input(const std::string& name, const onnx::TypeProto& type) {
    auto* v = graph().add_input();
    v->set_name(name);
    *v->mutable_type() = type;
    return *this;
  }
  ModelBuilder& typed_output(const std::string& name, const onnx::TypeProto& type) {
    auto* v = graph().add_output();
    v->set_name(name);
    *v->mutable_type() = type;
    return *this;
  }
  ModelBuilder& output_untyped(const std::string& name) {
    graph().add_output()->set_name(name);
    return *this;
  }

  onnx::NodeProto& node(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs,
                        const std::string& name = "") {
    auto* n = graph().add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (auto& i : inputs) n->add_input(i);
    for (auto& o : outputs) n->add_output(o);
    return *n;
  }

  static onnx::TensorProto float_tensor(const std::string& name, std::vector<int64_t> dims, std::vector<float> values) {
    onnx::TensorProto t;
    t.set_name(name);
    t.set_data_type(onnx::TensorProto::FLOAT);
    for (auto d : dims) t.add_dims(d);
    for (float v : values) t.add_float_data(v);
    return t;
  }
  static onnx::TensorProto int64_tensor(const std::string& name, std::vector<int64_t> dims, std::vector<int64_t> values) {
    onnx::TensorProto t;
    t.set_name(name);
    t.set_data_type(onnx::TensorProto::INT64);
    for (auto d : dims) t.add_dims(d);
    for (auto v : values) t.add_int64_data(v);
    return t;
  }
  ModelBuilder& initializer(const onnx::TensorProto& t) {
    *graph().add_initializer() = t;
    return *this;
  }

  static void attr_int(onnx::NodeProto& n, const std::string& name, int64_t v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr_float(onnx::NodeProto& n, const std::string& name, float v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  static void attr_ints(onnx::NodeProto& n, const std::string& name, std::vector<int64_t> v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (auto x : v) a->add_ints(x);
  }
  static void attr_string(onnx::NodeProto& n, const std::string& name, const std::string& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v);
  }
  static void attr_strings(onnx::NodeProto& n, const std::string& name, std::vector<std::string> v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRINGS);
    for (auto& x : v) a->add_strings(x);
  }
  static void attr_graph(onnx::NodeProto& n, const std::string& name, const onnx::GraphProto& g) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::GRAPH);
    *a->mutable_g() = g;
  }
  static void attr_tensor(onnx::NodeProto& n, const std::string& name, const onnx::TensorProto& t) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::TENSOR);
    *a->mutable_t() = t;
  }

  std::string bytes() const { return model_.SerializeAsString(); }

 private:
  onnx::ModelProto model_;
};

}  // namespace kiln::test
