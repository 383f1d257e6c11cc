// If, Loop and Scan: one host step that runs bodies compiled with the
// program (control_flow_kernel.hpp).
#include "backends/cpu/control_flow_kernel.hpp"
#include "backends/cpu/lower/context.hpp"
#include "backends/cpu/lower/families.hpp"

namespace kiln::cpu::lowering {

bool lower_control_flow(Context& cx, const ir::Node& n) {
  // A bundle has no host code to call bodies with.
  if (!cx.bodies) return false;
  std::vector<ReferenceKernel::Value> reads, writes;
  std::map<std::string, ir::Tensor> constants;
  const auto read = ir::values_read(n);
  size_t direct = 0;  // the node's own inputs come first, the bodies' enclosing values after
  for (const auto& in : n.inputs) direct += !in.empty();
  for (size_t i = 0; i < read.size(); ++i) {
    const std::string& name = read[i];
    reads.push_back({name, cx.dtype(name), cx.dims(name)});
    // The enclosing values a body reads that are fixed: the body's weights.
    // (The specialization's constants include what it folded; inputs the
    // caller may override are not fixed.)
    auto c = cx.spec.result.constants.find(name);
    if (i >= direct && c != cx.spec.result.constants.end() && !cx.graph.find_input(name)) constants[name] = c->second;
  }
  for (const auto& name : n.outputs)
    if (!name.empty()) writes.push_back({name, cx.dtype(name), cx.dims(name)});
  std::unique_ptr<ControlFlowKernel> kernel;
  try {
    kernel = ControlFlowKernel::compile(n, reads, writes, constants, *cx.bodies);
  } catch (const ir::Error&) {
    // A body that does not compile: the reference kernel runs the node,
    // and reports what is wrong if the data takes it there.
    return false;
  }
  std::vector<int> args;
  std::vector<char> written;
  for (const auto& r : reads) {
    args.push_back(cx.plain(r.name));
    written.push_back(0);
  }
  for (const auto& w : writes) {
    args.push_back(cx.define_plain(w.name));
    written.push_back(1);
  }
  cx.program.fallback_nodes += int(kernel->fallback_nodes());
  cx.add_kernel(n.describe(), std::move(args), std::move(written), std::move(kernel));
  cx.compiled();
  return true;
}

}  // namespace kiln::cpu::lowering
