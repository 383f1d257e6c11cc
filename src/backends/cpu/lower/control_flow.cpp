// If, Loop and Scan: in the JIT, one host step that runs bodies compiled
// with the program (control_flow_kernel.hpp); in a bundle, a generated step
// calling the bodies lowered as programs of their own (frozen_control_flow.hpp).
#include <algorithm>

#include "backends/cpu/control_flow_kernel.hpp"
#include "backends/cpu/frozen_control_flow.hpp"
#include "backends/cpu/lower/context.hpp"
#include "backends/cpu/lower/families.hpp"
#include "backends/reference/reference_executor.hpp"
#include "runtime/passes/passes.hpp"

namespace kiln::cpu::lowering {

namespace {

struct Operands {
  std::vector<ReferenceKernel::Value> reads, writes;
  std::map<std::string, ir::Tensor> constants;  // the enclosing values the bodies read that are fixed
};

Operands operands(Context& cx, const ir::Node& n) {
  Operands o;
  const auto read = ir::values_read(n);
  size_t direct = 0;  // the node's own inputs come first, the bodies' enclosing values after
  for (const auto& in : n.inputs) direct += !in.empty();
  for (size_t i = 0; i < read.size(); ++i) {
    const std::string& name = read[i];
    o.reads.push_back({name, cx.dtype(name), cx.dims(name)});
    // The enclosing values a body reads that are fixed: the body's weights.
    // (The specialization's constants include what it folded; inputs the
    // caller may override are not fixed.)
    auto c = cx.spec.result.constants.find(name);
    if (i >= direct && c != cx.spec.result.constants.end() && !cx.graph.find_input(name)) o.constants[name] = c->second;
  }
  for (const auto& name : n.outputs)
    if (!name.empty()) o.writes.push_back({name, cx.dtype(name), cx.dims(name)});
  return o;
}

// The argument holding node input `i` (reads first), or -1 if it is omitted.
int input_arg(const ir::Node& n, const Operands& o, size_t i) {
  if (i >= n.inputs.size() || n.inputs[i].empty()) return -1;
  for (size_t r = 0; r < o.reads.size(); ++r)
    if (o.reads[r].name == n.inputs[i]) return int(r);
  return -1;
}
// The argument holding node output `i` (after the reads), or -1 if the node leaves it out.
int output_arg(const ir::Node& n, const Operands& o, size_t i) {
  if (i >= n.outputs.size() || n.outputs[i].empty()) return -1;
  int w = 0;
  for (size_t k = 0; k < i; ++k) w += !n.outputs[k].empty();
  return int(o.reads.size()) + w;
}

int64_t bytes(const ReferenceKernel::Value& v) { return ir::checked_numel(v.dims) * int64_t(ir::dtype_size(v.dtype)); }

// Builds the step's frozen control flow and its arguments beyond the
// node's reads and writes. Throws ir::Error saying why a bundle cannot hold it.
class FrozenLowering {
 public:
  FrozenLowering(Context& cx, const ir::Node& n) : cx_(cx), n_(n), o_(operands(cx, n)) {}

  void lower() {
    using Kind = FrozenControlFlow::Kind;
    flow_.kind = n_.op_type == "If" ? Kind::If : n_.op_type == "Loop" ? Kind::Loop : Kind::Scan;
    flow_.label = n_.describe();
    // First what may refuse the node, then the step's buffers.
    const auto planned = ControlFlowKernel::plan(n_, o_.reads, o_.writes, o_.constants);
    if (flow_.kind == Kind::If) {
      flow_.cond = scalar(0, ir::DType::Bool, "cond");
      if (flow_.cond < 0) refuse("cond is missing");
    } else if (flow_.kind == Kind::Loop) {
      flow_.trip = scalar(0, ir::DType::Int64, "M (the trip count)");
      flow_.cond = scalar(1, ir::DType::Bool, "cond");
    } else {
      for (const char* axes : {"scan_input_axes", "scan_output_axes"})
        if (const ir::Attribute* a = n_.attr(axes))
          for (int64_t axis : a->ints)
            if (axis != 0)
              refuse(std::string(axes) +
                     " has an axis other than 0: a bundle scans along axis 0 only (transpose the tensor first)");
    }
    const auto& bodies = planned->bodies();
    for (size_t i = 0; i < bodies.size(); ++i) flow_.bodies.push_back(body(bodies[i], i));

    for (const auto& r : o_.reads) add(cx_.plain(r.name), 0);  // argument i is read i
    for (const auto& w : o_.writes) add(cx_.define_plain(w.name), 1);
    if (flow_.kind == Kind::Loop) {
      flow_.iteration = scratch(8, "iteration");
      flow_.condition = scratch(1, "condition");
      flow_.next_condition = scratch(1, "next condition");
    }
    plan_iterations(bodies[0]);
    int64_t arena = 0;
    for (size_t i = 0; i < bodies.size(); ++i) {
      bind_inputs(bodies[i], flow_.bodies[i]);
      bind_outputs(flow_.bodies[i]);
      arena = std::max(arena, flow_.bodies[i].program.arena_bytes);
    }
    if (arena > 0) flow_.arena = scratch(arena, "bodies' arena");
    Step s;
    s.label = flow_.label;
    s.args = std::move(args_);
    s.writes = std::move(writes_);
    s.flow = std::make_shared<FrozenControlFlow>(std::move(flow_));
    cx_.program.steps.push_back(std::move(s));
  }

 private:
  int add(int buffer, char written) {
    args_.push_back(buffer);
    writes_.push_back(written);
    return int(args_.size()) - 1;
  }
  int scratch(int64_t size, const std::string& what) {
    return add(cx_.add_buffer(Buffer::Kind::Arena, 0, size, n_.describe() + "#" + what), 1);
  }
  [[noreturn]] void refuse(const std::string& why) const { ir::fail(ir::ErrorKind::Unsupported, why); }

  // Node input `i`, one element of `dtype` (-1 if omitted).
  int scalar(size_t i, ir::DType dtype, const std::string& what) const {
    const int a = input_arg(n_, o_, i);
    if (a >= 0 && (o_.reads[size_t(a)].dtype != dtype || ir::checked_numel(o_.reads[size_t(a)].dims) != 1))
      refuse(what + " is not one " + ir::dtype_name(dtype) + " element");
    return a;
  }

  // The carried values (Loop) or states (Scan), the scan inputs and outputs.
  void plan_iterations(const ControlFlowKernel::Body& body) {
    if (flow_.kind == FrozenControlFlow::Kind::If) return;
    const bool loop = flow_.kind == FrozenControlFlow::Kind::Loop;
    const size_t own = body.graph->inputs.size() - body.captured.size();
    const size_t m = loop ? 0 : size_t(n_.attr("num_scan_inputs")->i);
    const size_t carried = loop ? own - 2 : own - m, first_in = loop ? 2 : 0, first_out = loop ? 1 : 0;
    for (size_t c = 0; c < carried; ++c) {
      FrozenControlFlow::Carried v;
      v.initial = input_arg(n_, o_, first_in + c);  // present: plan() checked
      v.result = output_arg(n_, o_, c);
      v.bytes = bytes(body.outputs[first_out + c]);
      for (int& spare : v.spare) spare = scratch(v.bytes, "carried " + std::to_string(c));
      flow_.carried.push_back(v);
    }
    auto directions = [&](const char* name, size_t count) {
      const ir::Attribute* a = n_.attr(name);
      return a ? a->ints : std::vector<int64_t>(count, 0);
    };
    const size_t k = body.outputs.size() - first_out - carried;
    if (!loop) {
      const auto reverse = directions("scan_input_directions", m);
      for (size_t j = 0; j < m; ++j) {
        const auto& whole = o_.reads[size_t(input_arg(n_, o_, carried + j))];
        flow_.length = whole.dims[0];
        flow_.scan_inputs.push_back(
            {input_arg(n_, o_, carried + j), bytes(whole) / std::max<int64_t>(1, whole.dims[0]), reverse[j] != 0});
      }
    }
    const auto reverse = loop ? std::vector<int64_t>(k, 0) : directions("scan_output_directions", k);
    for (size_t j = 0; j < k; ++j) {
      const int a = output_arg(n_, o_, carried + j);
      scan_output_.push_back(a < 0 ? -1 : int(flow_.scan_outputs.size()));
      if (a < 0) continue;
      if (loop) flow_.length = o_.writes[size_t(a) - o_.reads.size()].dims[0];
      flow_.scan_outputs.push_back({a, bytes(body.outputs[first_out + carried + j]), reverse[j] != 0});
    }
  }

  // Body `i`, specialized and lowered as the JIT's CpuBodies would, with the
  // portable kernels, and bound to the step's arguments.
  FrozenControlFlow::Body body(const ControlFlowKernel::Body& planned, size_t i) {
    static const char* const if_names[] = {"then_branch", "else_branch"};
    const std::string name = flow_.kind == FrozenControlFlow::Kind::If ? if_names[i] : "body";
    // As backends::specialize_and_optimize, which the cpu backend's library cannot call.
    ir::Graph graph = *planned.graph;
    ir::Specialization spec = ir::specialize(graph, planned.shapes, ref::constant_evaluator());
    if (passes::inline_constant_ifs(graph, spec.result.constants))
      spec = ir::specialize(graph, planned.shapes, ref::constant_evaluator());
    passes::optimize_specialization(graph, spec, ref::constant_evaluator());
    if (!spec.dynamic.empty()) {
      std::string values;
      for (size_t v = 0; v < spec.dynamic.size() && v < 3; ++v) values += (v ? ", '" : "'") + spec.dynamic[v] + "'";
      refuse("the shape of " + values + (spec.dynamic.size() > 3 ? " and more" : "") + " in its " + name +
             " depends on the data");
    }
    FrozenControlFlow::Body b;
    try {
      b.program = cpu::lower(graph, spec, KernelFamily::Portable);
    } catch (const ir::Error& e) {
      refuse("its " + name + " cannot be lowered: " + e.what());
    }
    for (const Step& s : b.program.steps)
      if (s.kernel) {
        auto why = b.program.fallback_reasons.find(s.label);
        refuse("its " + name + " runs " + s.label + " on a reference kernel, which a bundle does not hold" +
               (why == b.program.fallback_reasons.end() ? "" : " (" + why->second + ")"));
      }
    if (b.program.outputs.size() != planned.outputs.size())
      refuse("its " + name + " makes another number of outputs than planned");
    for (size_t k = 0; k < b.program.outputs.size(); ++k)
      if (b.program.output_dims[k] != planned.outputs[k].dims)
        refuse("output " + std::to_string(k) + " of its " + name + " has another shape than planned");
    for (const std::string& input : b.program.inputs)
      if (std::none_of(planned.graph->inputs.begin(), planned.graph->inputs.end(),
                       [&](const ir::ValueInfo& v) { return v.name == input; }))
        refuse("its " + name + " takes '" + input + "', which it is not given");
    return b;
  }

  void bind_inputs(const ControlFlowKernel::Body& planned, FrozenControlFlow::Body& b) {
    using Binding = FrozenControlFlow::Binding;
    const size_t own = planned.graph->inputs.size() - planned.captured.size();
    const size_t carried = flow_.carried.size();
    for (const std::string& input : b.program.inputs) {
      size_t g = 0;
      while (planned.graph->inputs[g].name != input) ++g;  // checked by body()
      if (g >= own) {
        b.inputs.push_back({Binding::Kind::Arg, planned.captured[g - own]});
      } else if (flow_.kind == FrozenControlFlow::Kind::Loop) {
        b.inputs.push_back(g == 0   ? Binding{Binding::Kind::Arg, flow_.iteration}
                           : g == 1 ? Binding{Binding::Kind::Arg, flow_.condition}
                                    : Binding{Binding::Kind::Carried, int(g - 2)});
      } else {
        b.inputs.push_back(g < carried ? Binding{Binding::Kind::Carried, int(g)}
                                       : Binding{Binding::Kind::Slice, int(g - carried)});
      }
    }
    // The body's weights become inputs after its own, bound to constants of the step.
    for (Buffer& buffer : b.program.buffers)
      if (buffer.kind == Buffer::Kind::Constant) {
        buffer.kind = Buffer::Kind::Input;
        buffer.index += int(b.program.inputs.size());
      }
    for (size_t c = 0; c < b.program.constants.size(); ++c) {
      b.program.inputs.push_back(flow_.label + " constant " + std::to_string(c));
      b.inputs.push_back({Binding::Kind::Arg, add(cx_.add_constant(b.program.constants[c], b.program.inputs.back()), 0)});
    }
    b.program.constants.clear();
  }

  void bind_outputs(FrozenControlFlow::Body& b) {
    using Binding = FrozenControlFlow::Binding;
    const bool loop = flow_.kind == FrozenControlFlow::Kind::Loop;
    const size_t first = loop ? 1 : 0, carried = flow_.carried.size();
    for (size_t k = 0; k < b.program.outputs.size(); ++k) {
      const int64_t size = ir::checked_numel(b.program.output_dims[k]) * int64_t(ir::dtype_size(b.program.output_dtypes[k]));
      if (flow_.kind == FrozenControlFlow::Kind::If) {
        const int a = output_arg(n_, o_, k);
        b.outputs.push_back({Binding::Kind::Arg, a >= 0 ? a : scratch(size, "unused output")});
      } else if (loop && k == 0) {
        b.outputs.push_back({Binding::Kind::Arg, flow_.next_condition});
      } else if (k - first < carried) {
        b.outputs.push_back({Binding::Kind::Carried, int(k - first)});
      } else {
        const int j = scan_output_[k - first - carried];
        b.outputs.push_back(j >= 0 ? Binding{Binding::Kind::Slice, j}
                                   : Binding{Binding::Kind::Arg, scratch(size, "unused scan output")});
      }
    }
  }

  Context& cx_;
  const ir::Node& n_;
  Operands o_;
  FrozenControlFlow flow_;
  std::vector<int> args_;
  std::vector<char> writes_;
  std::vector<int> scan_output_;  // per scan output of the body: its index in flow_.scan_outputs, -1 if left out
};

}  // namespace

bool lower_control_flow(Context& cx, const ir::Node& n) {
  if (!cx.bodies) {
    // Only bundles lower without a body compiler, and their programs call no
    // host code: bodies as programs of their own, or why a bundle cannot hold them.
    if (cx.host_kernels) return false;
    try {
      FrozenLowering(cx, n).lower();
    } catch (const ir::Error& e) {
      // The freeze error names the node already.
      std::string why = e.what();
      if (why.rfind(n.describe() + ": ", 0) == 0) why.erase(0, n.describe().size() + 2);
      if (n.op_type == "If") why += "; or fix the inputs its condition depends on with --constant (it becomes the branch taken)";
      cx.program.fallback_reasons[n.describe()] = why;
      return false;
    }
    cx.compiled();
    return true;
  }
  Operands o = operands(cx, n);
  std::unique_ptr<ControlFlowKernel> kernel;
  try {
    kernel = ControlFlowKernel::compile(n, o.reads, o.writes, o.constants, *cx.bodies);
  } catch (const ir::Error&) {
    // A body that does not compile: the reference kernel runs the node,
    // and reports what is wrong if the data takes it there.
    return false;
  }
  std::vector<int> args;
  std::vector<char> written;
  for (const auto& r : o.reads) {
    args.push_back(cx.plain(r.name));
    written.push_back(0);
  }
  for (const auto& w : o.writes) {
    args.push_back(cx.define_plain(w.name));
    written.push_back(1);
  }
  cx.program.fallback_nodes += int(kernel->fallback_nodes());
  cx.add_kernel(n.describe(), std::move(args), std::move(written), std::move(kernel));
  cx.compiled();
  return true;
}

}  // namespace kiln::cpu::lowering
