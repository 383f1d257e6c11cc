#include "backends/cpu/control_flow_kernel.hpp"

#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "backends/program_blocks.hpp"
#include "backends/reference/reference_executor.hpp"
#include "runtime/ir/control_flow_shapes.hpp"
#include "runtime/ir/serialize.hpp"

namespace kiln::cpu {

namespace {

using ir::json_field;
using nlohmann::json;

// A Loop with neither a trip count nor a condition that turns false would
// run forever; past this many iterations it fails (the reference kernel's bound).
constexpr int64_t kMaxLoopIterations = int64_t(1) << 24;

std::vector<const ir::Graph*> body_graphs(const ir::Node& node) {
  auto graph = [&](const char* name) -> const ir::Graph* {
    const ir::Attribute* a = node.attr(name);
    if (!a || a->kind != ir::Attribute::Kind::Graph || !a->g)
      ir::fail(ir::ErrorKind::InvalidModel, node.describe() + ": attribute '" + name + "' is missing or not a graph");
    return a->g.get();
  };
  if (node.op_type == "If") return {graph("then_branch"), graph("else_branch")};
  return {graph("body")};
}

// The argument holding node input `i`, or -1 if it is omitted.
int input_arg(const ir::Node& node, const std::vector<ReferenceKernel::Value>& reads, size_t i) {
  if (i >= node.inputs.size() || node.inputs[i].empty()) return -1;
  for (size_t r = 0; r < reads.size(); ++r)
    if (reads[r].name == node.inputs[i]) return int(r);
  return -1;
}

size_t element_bytes(const ReferenceKernel::Value& v) { return size_t(ir::checked_numel(v.dims)) * ir::dtype_size(v.dtype); }

// Element `index` of `count` along `axis` of a tensor of `dims`, as the
// strided pieces a slice is made of.
struct SliceCopy {
  int64_t outer = 1, inner_bytes = 0, count = 0;
  SliceCopy(const ir::Dims& dims, size_t axis, size_t element) : count(dims[axis]) {
    int64_t inner = 1;
    for (size_t i = 0; i < axis; ++i) outer *= dims[i];
    for (size_t i = axis + 1; i < dims.size(); ++i) inner *= dims[i];
    inner_bytes = inner * int64_t(element);
  }
  void gather(const char* whole, int64_t index, char* slice) const {
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(slice + o * inner_bytes, whole + (o * count + index) * inner_bytes, size_t(inner_bytes));
  }
  void scatter(const char* slice, int64_t index, char* whole) const {
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(whole + (o * count + index) * inner_bytes, slice + o * inner_bytes, size_t(inner_bytes));
  }
};

}  // namespace

ControlFlowKernel::ControlFlowKernel(const ir::Node& node, std::vector<Value> reads, std::vector<Value> writes,
                                     std::map<std::string, ir::Tensor> constants)
    : node_(node), reads_(std::move(reads)), writes_(std::move(writes)), constants_(std::move(constants)) {
  if (node_.op_type != "If" && node_.op_type != "Loop" && node_.op_type != "Scan")
    ir::fail(ir::ErrorKind::InvalidModel, node_.describe() + " is not control flow");
  if (node_.op_type == "Scan") {
    if (node_.opset < 9)
      ir::fail(ir::ErrorKind::Unsupported, node_.describe() + ": opset-8 Scan (batched) runs its reference kernel");
    const ir::Attribute* m = node_.attr("num_scan_inputs");
    if (!m || m->i < 1 || size_t(m->i) > node_.inputs.size())
      ir::fail(ir::ErrorKind::InvalidModel, node_.describe() + ": num_scan_inputs must be in [1, its number of inputs]");
  }
  if (node_.op_type == "Loop" && node_.inputs.size() < 2)
    ir::fail(ir::ErrorKind::InvalidModel, node_.describe() + ": a Loop takes M and cond (either may be empty) first");
  std::map<std::string, ir::ValueInfo> outer;
  for (const Value& r : reads_) outer.emplace(r.name, ir::ValueInfo{r.name, r.dtype, ir::Shape::from_dims(r.dims)});
  auto lookup = [&](const std::string& name) -> const ir::ValueInfo* {
    auto it = outer.find(name);
    return it == outer.end() ? nullptr : &it->second;
  };
  for (const ir::Graph* g : body_graphs(node_)) {
    Body b;
    auto standalone = std::make_shared<ir::Graph>(ir::standalone_body(*g, lookup, constants_));
    for (size_t i = g->inputs.size(); i < standalone->inputs.size(); ++i) {
      const std::string& name = standalone->inputs[i].name;
      int arg = -1;
      for (size_t r = 0; r < reads_.size() && arg < 0; ++r)
        if (reads_[r].name == name) arg = int(r);
      if (arg < 0)
        ir::fail(ir::ErrorKind::InvalidModel, node_.describe() + ": its body reads '" + name + "', which it is not given");
      b.captured.push_back(arg);
    }
    b.graph = std::move(standalone);
    bodies_.push_back(std::move(b));
  }
}

std::unique_ptr<ControlFlowKernel> ControlFlowKernel::compile(const ir::Node& node, std::vector<Value> reads,
                                                              std::vector<Value> writes,
                                                              const std::map<std::string, ir::Tensor>& constants,
                                                              const BodyCompiler& bodies) {
  auto k = plan(node, std::move(reads), std::move(writes), constants);
  for (Body& b : k->bodies_) b.executable = bodies.compile(*b.graph, b.shapes);
  return k;
}

std::unique_ptr<ControlFlowKernel> ControlFlowKernel::plan(const ir::Node& node, std::vector<Value> reads,
                                                           std::vector<Value> writes,
                                                           const std::map<std::string, ir::Tensor>& constants) {
  std::unique_ptr<ControlFlowKernel> k(new ControlFlowKernel(node, std::move(reads), std::move(writes), constants));
  const bool is_loop = node.op_type == "Loop", is_scan = node.op_type == "Scan";
  const int64_t m = is_scan ? node.attr("num_scan_inputs")->i : 0;  // checked by the constructor
  std::vector<int64_t> in_axes;
  if (is_scan) {
    const ir::Attribute* a = node.attr("scan_input_axes");
    in_axes = a ? a->ints : std::vector<int64_t>(size_t(m), 0);
    if (int64_t(in_axes.size()) != m)
      ir::fail(ir::ErrorKind::InvalidModel, node.describe() + ": scan_input_axes has the wrong length");
  }
  for (Body& b : k->bodies_) {
    std::map<std::string, std::pair<ir::DType, ir::Dims>> shapes;
    const size_t own = b.graph->inputs.size() - b.captured.size();
    for (size_t i = 0; i < own; ++i) {
      const std::string& name = b.graph->inputs[i].name;
      if (is_loop && i < 2) {
        shapes[name] = {i == 0 ? ir::DType::Int64 : ir::DType::Bool, {}};
        continue;
      }
      // Body input i is node input i: a Loop's carried values after M and
      // cond, a Scan's states and then its scan inputs (sliced).
      const int arg = input_arg(node, k->reads_, i);
      if (arg < 0) ir::fail(ir::ErrorKind::Unsupported, node.describe() + ": body input '" + name + "' has no value");
      ir::Dims dims = k->reads_[size_t(arg)].dims;
      if (is_scan && int64_t(i) >= int64_t(own) - m) {
        int64_t axis = in_axes[size_t(int64_t(i) - (int64_t(own) - m))];
        if (axis < 0) axis += int64_t(dims.size());
        if (axis < 0 || axis >= int64_t(dims.size()))
          ir::fail(ir::ErrorKind::InvalidModel, node.describe() + ": a scan input axis is out of range");
        dims.erase(dims.begin() + axis);
      }
      shapes[name] = {k->reads_[size_t(arg)].dtype, dims};
    }
    for (size_t c = 0; c < b.captured.size(); ++c) {
      const Value& v = k->reads_[size_t(b.captured[c])];
      shapes[b.graph->inputs[own + c].name] = {v.dtype, v.dims};
    }
    const ir::Specialization spec = ir::specialize(*b.graph, shapes, ref::constant_evaluator());
    for (const auto& o : b.graph->outputs) {
      auto it = spec.result.values.find(o.name);
      if (it == spec.result.values.end())
        ir::fail(ir::ErrorKind::InvalidModel, node.describe() + ": body output '" + o.name + "' is not made by the body");
      const ir::ValueInfo& v = it->second;
      if (!v.shape.is_concrete())
        ir::fail(ir::ErrorKind::Unsupported, node.describe() + ": the shape of body output '" + o.name + "' depends on data");
      b.outputs.push_back({o.name, v.dtype, v.shape.concrete()});
    }
    b.shapes = std::move(shapes);
  }
  k->check_outputs();
  return k;
}

namespace {

bool same_type(const ReferenceKernel::Value& a, const ReferenceKernel::Value& b) {
  return a.dtype == b.dtype && a.dims == b.dims;
}

// Node output i's argument, or -1 if the node leaves it out.
int output_arg(const ir::Node& node, size_t reads, size_t i) {
  if (i >= node.outputs.size() || node.outputs[i].empty()) return -1;
  int w = 0;
  for (size_t k = 0; k < i; ++k) w += !node.outputs[k].empty();
  return int(reads) + w;
}

int64_t normalized_axis(int64_t axis, size_t rank) { return axis < 0 ? axis + int64_t(rank) : axis; }

}  // namespace

void ControlFlowKernel::check_outputs() const {
  // Also run on a loaded kernel: every index the runs use is checked here.
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) ir::fail(ir::ErrorKind::Unsupported, node_.describe() + ": " + what);
  };
  auto written = [&](size_t i) -> const Value* {
    const int a = output_arg(node_, reads_.size(), i);
    return a < 0 ? nullptr : &writes_[size_t(a) - reads_.size()];
  };
  size_t written_outputs = 0;
  for (const auto& o : node_.outputs) written_outputs += !o.empty();
  expect(writes_.size() == written_outputs, "its outputs do not match the values it writes");
  if (node_.op_type == "If") {
    expect(input_arg(node_, reads_, 0) >= 0, "cond is missing");
    for (const Body& b : bodies_) {
      expect(b.outputs.size() == node_.outputs.size(), "a branch makes another number of outputs than the node has");
      for (size_t i = 0; i < b.outputs.size(); ++i)
        expect(!written(i) || same_type(*written(i), b.outputs[i]),
               "branch output " + std::to_string(i) + " has another type or shape than the node's");
    }
    return;
  }
  const Body& b = bodies_[0];
  const bool loop = node_.op_type == "Loop";
  const size_t first = loop ? 1 : 0;  // a Loop body's condition comes first
  const size_t own = b.graph->inputs.size() - b.captured.size();
  const size_t m = loop ? 0 : size_t(node_.attr("num_scan_inputs")->i);
  // Body input i is node input i (M and cond become the iteration number and condition).
  expect(own == node_.inputs.size() && own >= (loop ? 2 : m), "its body takes another number of inputs");
  const size_t n = loop ? own - 2 : own - m;
  int64_t length = -1;  // a Scan's
  if (!loop) {
    const size_t k = b.outputs.size() - std::min(b.outputs.size(), n);
    for (const auto& [name, count] : {std::pair<const char*, size_t>{"scan_input_axes", m},
                                      {"scan_input_directions", m},
                                      {"scan_output_axes", k},
                                      {"scan_output_directions", k}}) {
      const ir::Attribute* a = node_.attr(name);
      expect(!a || a->ints.size() == count, std::string(name) + " has " + std::to_string(a ? a->ints.size() : 0) +
                                                " entries, expected " + std::to_string(count));
    }
    const ir::Attribute* axes = node_.attr("scan_input_axes");
    for (size_t j = 0; j < m; ++j) {
      const int in = input_arg(node_, reads_, n + j);
      expect(in >= 0, "scan input " + std::to_string(j) + " is missing");
      const ir::Dims& dims = reads_[size_t(in)].dims;
      const int64_t axis = normalized_axis(axes ? axes->ints[j] : 0, dims.size());
      expect(axis >= 0 && size_t(axis) < dims.size() && (length < 0 || dims[size_t(axis)] == length),
             "scan input " + std::to_string(j) + " has no axis of the common sequence length");
      length = dims[size_t(axis)];
    }
  }
  expect(b.outputs.size() >= first + n && node_.outputs.size() <= b.outputs.size() - first,
         "the body's outputs do not fit the node's");
  if (loop)
    expect(b.outputs[0].dtype == ir::DType::Bool && ir::checked_numel(b.outputs[0].dims) == 1,
           "the body's condition is not one bool");
  for (size_t i = 0; i < n; ++i) {
    const int in = input_arg(node_, reads_, loop ? 2 + i : i);
    expect(in >= 0 && same_type(reads_[size_t(in)], b.outputs[first + i]),
           "carried value " + std::to_string(i) + " changes its type or shape");
    expect(!written(i) || same_type(*written(i), b.outputs[first + i]),
           "carried value " + std::to_string(i) + " has another type or shape than the node's output");
  }
  const ir::Attribute* axes = node_.attr("scan_output_axes");
  for (size_t j = 0; first + n + j < b.outputs.size(); ++j) {
    const Value* out = written(n + j);
    if (!out) continue;
    const Value& each = b.outputs[first + n + j];
    const int64_t axis = loop || !axes || j >= axes->ints.size() ? 0 : normalized_axis(axes->ints[j], each.dims.size() + 1);
    expect(axis >= 0 && size_t(axis) <= each.dims.size() && out->dtype == each.dtype && out->dims.size() == each.dims.size() + 1,
           "scan output " + std::to_string(j) + " does not stack its iterations");
    ir::Dims stacked = each.dims;
    stacked.insert(stacked.begin() + axis, out->dims[size_t(axis)]);
    expect(stacked == out->dims && (loop || out->dims[size_t(axis)] == length),
           "scan output " + std::to_string(j) + " does not stack its iterations");
  }
}

void ControlFlowKernel::add_inputs(const Body& body, void* const* args, std::map<std::string, ir::Tensor>& inputs) const {
  const size_t own = body.graph->inputs.size() - body.captured.size();
  for (size_t c = 0; c < body.captured.size(); ++c) {
    const Value& v = reads_[size_t(body.captured[c])];
    inputs[body.graph->inputs[own + c].name] = ir::Tensor::view(v.dtype, v.dims, args[body.captured[c]]);
  }
}

void ControlFlowKernel::run(void* const* args) const {
  if (node_.op_type == "If") return run_if(args);
  if (node_.op_type == "Loop") return run_loop(args);
  run_scan(args);
}

void ControlFlowKernel::run_if(void* const* args) const {
  const int cond = input_arg(node_, reads_, 0);
  if (cond < 0 || ir::checked_numel(reads_[size_t(cond)].dims) != 1)
    ir::fail(ir::ErrorKind::InvalidArgument, node_.describe() + ": cond must be a single element");
  const Value& c = reads_[size_t(cond)];
  const bool take_then = ir::Tensor::view(c.dtype, c.dims, args[cond]).as_double(0) != 0;
  const Body& b = bodies_[take_then ? 0 : 1];
  std::map<std::string, ir::Tensor> inputs;
  add_inputs(b, args, inputs);
  std::vector<ir::Tensor> outputs;
  for (size_t i = 0; i < b.outputs.size(); ++i) {
    const int a = output_arg(node_, reads_.size(), i);
    outputs.push_back(a >= 0 ? ir::Tensor::view(b.outputs[i].dtype, b.outputs[i].dims, args[a])
                             : ir::Tensor(b.outputs[i].dtype, b.outputs[i].dims));
  }
  b.executable->run_into(inputs, outputs);
}

// Carried values (Loop) and states (Scan): the node's inputs at first, then
// two buffers in turn, each iteration reading one and writing the other.
struct ControlFlowKernel::Carried {
  std::vector<ir::Tensor> current, spare[2];
  Carried(const ControlFlowKernel& k, void* const* args, size_t first, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const Value& v = k.reads_[size_t(input_arg(k.node_, k.reads_, first + i))];
      current.push_back(ir::Tensor::view(v.dtype, v.dims, args[input_arg(k.node_, k.reads_, first + i)]));
      for (auto& s : spare) s.push_back(ir::Tensor::uninitialized(v.dtype, v.dims));
    }
  }
  // Binds iteration `i`'s reads to `inputs` (body inputs from `first`) and its writes to `outputs` (from `out`).
  void bind(int64_t i, const ir::Graph& body, size_t first, std::map<std::string, ir::Tensor>& inputs,
            std::vector<ir::Tensor>& outputs, size_t out) const {
    for (size_t c = 0; c < current.size(); ++c) {
      inputs[body.inputs[first + c].name] = current[c];
      outputs[out + c] = spare[i % 2][c];
    }
  }
  void advance(int64_t i) { current = spare[i % 2]; }
  // The last values into the node's outputs.
  void finish(const ControlFlowKernel& k, void* const* args) const {
    for (size_t c = 0; c < current.size(); ++c) {
      const int a = output_arg(k.node_, k.reads_.size(), c);
      if (a >= 0 && current[c].nbytes()) std::memmove(args[a], current[c].raw(), current[c].nbytes());
    }
  }
};

void ControlFlowKernel::run_loop(void* const* args) const {
  const Body& b = bodies_[0];
  const size_t n = node_.inputs.size() - 2, k = b.outputs.size() - 1 - n;
  const int trip_arg = input_arg(node_, reads_, 0), cond_arg = input_arg(node_, reads_, 1);
  auto scalar = [&](int arg) {
    const Value& v = reads_[size_t(arg)];
    if (ir::checked_numel(v.dims) != 1)
      ir::fail(ir::ErrorKind::InvalidArgument, node_.describe() + ": '" + v.name + "' must be a single element");
    return ir::Tensor::view(v.dtype, v.dims, args[arg]);
  };
  const int64_t trip = trip_arg >= 0 ? scalar(trip_arg).as_int64(0) : INT64_MAX;
  bool cond = cond_arg >= 0 ? scalar(cond_arg).as_double(0) != 0 : true;

  std::map<std::string, ir::Tensor> inputs;
  add_inputs(b, args, inputs);
  ir::Tensor iteration = ir::Tensor::scalar<int64_t>(0), condition = ir::Tensor::scalar<bool>(cond);
  inputs[b.graph->inputs[0].name] = iteration;
  inputs[b.graph->inputs[1].name] = condition;
  Carried carried(*this, args, 2, n);
  std::vector<ir::Tensor> outputs(b.outputs.size()), unwanted(k);
  outputs[0] = ir::Tensor(ir::DType::Bool, b.outputs[0].dims);
  int64_t i = 0;
  for (; i < trip && cond; ++i) {
    if (i >= kMaxLoopIterations)
      ir::fail(ir::ErrorKind::InvalidArgument,
               node_.describe() + ": no trip count, and its condition stayed true for " + std::to_string(i) + " iterations");
    *iteration.data<int64_t>() = i;
    *condition.data<bool>() = cond;
    carried.bind(i, *b.graph, 2, inputs, outputs, 1);
    for (size_t j = 0; j < k; ++j) {
      const Value& each = b.outputs[1 + n + j];
      const int a = output_arg(node_, reads_.size(), n + j);
      if (a < 0) {
        if (!unwanted[j].defined()) unwanted[j] = ir::Tensor(each.dtype, each.dims);
        outputs[1 + n + j] = unwanted[j];
        continue;
      }
      // The shape inference that planned the output counted every trip.
      if (i >= writes_[size_t(a) - reads_.size()].dims[0])
        ir::fail(ir::ErrorKind::Internal, node_.describe() + ": more iterations than its scan outputs were planned for");
      outputs[1 + n + j] = ir::Tensor::view(each.dtype, each.dims, static_cast<char*>(args[a]) + size_t(i) * element_bytes(each));
    }
    b.executable->run_into(inputs, outputs);
    cond = outputs[0].as_double(0) != 0;
    carried.advance(i);
  }
  for (size_t j = 0; j < k; ++j) {
    const int a = output_arg(node_, reads_.size(), n + j);
    if (a >= 0 && writes_[size_t(a) - reads_.size()].dims[0] != i)
      ir::fail(ir::ErrorKind::Internal, node_.describe() + ": ran " + std::to_string(i) +
                                            " iterations, its scan outputs were planned for " +
                                            std::to_string(writes_[size_t(a) - reads_.size()].dims[0]));
  }
  carried.finish(*this, args);
}

void ControlFlowKernel::run_scan(void* const* args) const {
  const Body& b = bodies_[0];
  const size_t own = b.graph->inputs.size() - b.captured.size();
  const size_t m = size_t(node_.attr("num_scan_inputs")->i), n = own - m, k = b.outputs.size() - n;
  auto ints = [&](const char* name, size_t count) {
    const ir::Attribute* a = node_.attr(name);
    return a ? a->ints : std::vector<int64_t>(count, 0);
  };
  const std::vector<int64_t> in_axes = ints("scan_input_axes", m), in_dirs = ints("scan_input_directions", m),
                             out_axes = ints("scan_output_axes", k), out_dirs = ints("scan_output_directions", k);
  std::map<std::string, ir::Tensor> inputs;
  add_inputs(b, args, inputs);
  Carried states(*this, args, 0, n);
  std::vector<ir::Tensor> outputs(b.outputs.size());
  // Scan inputs and outputs along axis 0 are read and written in place,
  // others through a slice of their own.
  struct Sliced {
    int arg = -1;
    const Value* whole = nullptr;
    int64_t axis = 0;
    bool reverse = false;
    ir::Tensor slice;
  };
  std::vector<Sliced> ins(m), outs(k);
  int64_t length = 0;
  for (size_t j = 0; j < m; ++j) {
    Sliced& s = ins[j];
    s.arg = input_arg(node_, reads_, n + j);
    s.whole = &reads_[size_t(s.arg)];
    s.axis = normalized_axis(in_axes[j], s.whole->dims.size());
    s.reverse = in_dirs[j] != 0;
    length = s.whole->dims[size_t(s.axis)];
    ir::Dims dims = s.whole->dims;
    dims.erase(dims.begin() + s.axis);
    if (s.axis != 0) s.slice = ir::Tensor::uninitialized(s.whole->dtype, dims);
  }
  for (size_t j = 0; j < k; ++j) {
    Sliced& s = outs[j];
    const Value& each = b.outputs[n + j];
    s.arg = output_arg(node_, reads_.size(), n + j);
    s.whole = s.arg >= 0 ? &writes_[size_t(s.arg) - reads_.size()] : nullptr;
    s.axis = normalized_axis(out_axes[j], each.dims.size() + 1);
    s.reverse = out_dirs[j] != 0;
    if (s.arg < 0 || s.axis != 0) s.slice = ir::Tensor::uninitialized(each.dtype, each.dims);
  }
  for (int64_t t = 0; t < length; ++t) {
    for (size_t j = 0; j < m; ++j) {
      const Sliced& s = ins[j];
      const int64_t at = s.reverse ? length - 1 - t : t;
      const auto* whole = static_cast<const char*>(args[s.arg]);
      ir::Tensor in = s.slice;
      if (s.axis == 0) {
        ir::Dims dims(s.whole->dims.begin() + 1, s.whole->dims.end());
        const size_t bytes = size_t(ir::checked_numel(dims)) * ir::dtype_size(s.whole->dtype);
        in = ir::Tensor::view(s.whole->dtype, dims, const_cast<char*>(whole) + size_t(at) * bytes);
      } else {
        SliceCopy(s.whole->dims, size_t(s.axis), ir::dtype_size(s.whole->dtype)).gather(whole, at, static_cast<char*>(in.raw()));
      }
      inputs[b.graph->inputs[n + j].name] = in;
    }
    states.bind(t, *b.graph, 0, inputs, outputs, 0);
    for (size_t j = 0; j < k; ++j) {
      const Sliced& s = outs[j];
      const Value& each = b.outputs[n + j];
      const int64_t at = s.reverse ? length - 1 - t : t;
      outputs[n + j] = s.slice.defined() ? s.slice
                                         : ir::Tensor::view(each.dtype, each.dims,
                                                            static_cast<char*>(args[s.arg]) + size_t(at) * element_bytes(each));
    }
    b.executable->run_into(inputs, outputs);
    for (size_t j = 0; j < k; ++j) {
      const Sliced& s = outs[j];
      if (s.arg < 0 || s.axis == 0) continue;
      const int64_t at = s.reverse ? length - 1 - t : t;
      SliceCopy(s.whole->dims, size_t(s.axis), ir::dtype_size(s.whole->dtype))
          .scatter(static_cast<const char*>(s.slice.raw()), at, static_cast<char*>(args[s.arg]));
    }
    states.advance(t);
  }
  states.finish(*this, args);
}

int64_t ControlFlowKernel::fallback_nodes() const {
  int64_t n = 0;
  for (const Body& b : bodies_) n += b.executable->stats().fallback_nodes;
  return n;
}

// ---- saving and loading (the on-disk cache) ---------------------------------

namespace {

json values_json(const std::vector<ReferenceKernel::Value>& vs) {
  json j = json::array();
  for (const auto& v : vs) j.push_back({v.name, int(v.dtype), v.dims});
  return j;
}

std::vector<ReferenceKernel::Value> values_from(const json& list, const std::string& what) {
  if (!list.is_array()) ir::fail(ir::ErrorKind::InvalidModel, what + ": a list of values expected");
  std::vector<ReferenceKernel::Value> out;
  for (const json& v : list) {
    if (!v.is_array() || v.size() != 3) ir::fail(ir::ErrorKind::InvalidModel, what + ": a value must be [name, dtype, dims]");
    const auto dtype = ir::DType(v[1].get<int>());
    if (!ir::dtype_supported(dtype)) ir::fail(ir::ErrorKind::InvalidModel, what + ": a value of unsupported dtype");
    out.push_back({v[0].get<std::string>(), dtype, v[2].get<ir::Dims>()});
  }
  return out;
}

}  // namespace

void ControlFlowKernel::save(json& out, WeightsWriter& weights, BlockWriter& blocks) const {
  const auto values = values_json;
  json constants = json::object(), bodies = json::array();
  for (const auto& [name, t] : constants_) constants[name] = backends::save_constant(t, weights);
  for (const Body& b : bodies_) {
    backends::Artifact a;
    try {
      a = b.executable->save();
    } catch (const ir::Error& e) {
      ir::fail(e.kind(), "a body of " + node_.describe() + " cannot be saved: " + e.what());
    }
    bodies.push_back({{"object", blocks.add(a.object)},
                      {"program", blocks.add(a.program)},
                      {"weights", {weights.add(a), a.weights_bytes}},
                      {"outputs", values(b.outputs)}});
  }
  out = {{"kind", "control_flow"},    {"node", ir::node_to_json(node_)}, {"reads", values(reads_)},
         {"writes", values(writes_)}, {"constants", constants},          {"bodies", bodies}};
}

std::unique_ptr<Kernel> ControlFlowKernel::load(const json& j, const WeightsReader& weights, const BlockReader& blocks,
                                                const std::shared_ptr<void>& keep_alive, const BodyCompiler* compiler,
                                                const std::string& what) {
  if (!compiler) ir::fail(ir::ErrorKind::InvalidModel, what + ": a control-flow step outside the cpu backend");
  auto values = [&](const char* key) { return values_from(json_field<json>(j, key, what), what); };
  std::map<std::string, ir::Tensor> constants;
  const json saved_constants = json_field<json>(j, "constants", what);
  if (!saved_constants.is_object()) ir::fail(ir::ErrorKind::InvalidModel, what + ": 'constants' must be an object");
  for (const auto& [name, c] : saved_constants.items()) constants[name] = backends::load_constant(c, weights, keep_alive, what);
  std::unique_ptr<ControlFlowKernel> k(
      new ControlFlowKernel(ir::node_from_json(json_field<json>(j, "node", what)), values("reads"), values("writes"), constants));
  const json& bodies = json_field<json>(j, "bodies", what);
  if (!bodies.is_array() || bodies.size() != k->bodies_.size())
    ir::fail(ir::ErrorKind::InvalidModel, what + ": " + std::to_string(k->bodies_.size()) + " bodies expected");
  for (size_t i = 0; i < bodies.size(); ++i) {
    Body& b = k->bodies_[i];
    const json& saved = bodies[i];
    const auto place = json_field<std::vector<int64_t>>(saved, "weights", what);
    if (place.size() != 2) ir::fail(ir::ErrorKind::InvalidModel, what + ": a body's weights must be [offset, bytes]");
    backends::LoadedArtifact a;
    a.object = blocks.block(json_field<json>(saved, "object", what), what + ": a body's object");
    a.program = blocks.block(json_field<json>(saved, "program", what), what + ": a body's program");
    a.weights = static_cast<const char*>(weights.at(place[0], place[1], what + ": a body's weights"));
    a.weights_bytes = size_t(place[1]);
    a.keep_alive = keep_alive;
    b.executable = compiler->load(a, b.graph);
    b.outputs = values_from(json_field<json>(saved, "outputs", what), what);
  }
  k->check_outputs();
  return k;
}

}  // namespace kiln::cpu
