#include "backends/cpu/program_io.hpp"
#include "backends/program_blocks.hpp"

#include <nlohmann/json.hpp>

#include "backends/cpu/codegen.hpp"
#include "backends/cpu/control_flow_kernel.hpp"
#include "backends/cpu/host_kernels.hpp"
#include "backends/cpu/onednn_kernel.hpp"
#include "backends/cpu/recurrent_kernel.hpp"
#include "runtime/ir/serialize.hpp"

namespace kiln::cpu {

using ir::json_field;
using nlohmann::json;

namespace {

constexpr int kFormat = 5;

json loop_to_json(const Loop& loop) {
  json operands = json::array(), code = json::array();
  for (const auto& o : loop.operands) operands.push_back({{"arg", o.arg}, {"strides", o.strides}, {"type", int(o.type)}});
  for (const auto& i : loop.code)
    code.push_back(
        {{"op", int(i.op)}, {"a", i.a}, {"b", i.b}, {"c", i.c}, {"alpha", i.alpha}, {"beta", i.beta}, {"type", int(i.type)}});
  return {{"shape", loop.shape}, {"operands", operands}, {"code", code}, {"stores", loop.stores}};
}

std::unique_ptr<Loop> loop_from_json(const json& j, const std::string& what) {
  auto loop = std::make_unique<Loop>();
  loop->shape = json_field<ir::Dims>(j, "shape", what);
  // The code generator refuses a type its loops do not compute in.
  auto type = [&](const json& o) { return ir::DType(json_field<int32_t>(o, "type", what)); };
  for (const json& o : json_field<json>(j, "operands", what))
    loop->operands.push_back({json_field<int>(o, "arg", what), json_field<std::vector<int64_t>>(o, "strides", what), type(o)});
  for (const json& i : json_field<json>(j, "code", what)) {
    const int op = json_field<int>(i, "op", what);
    if (op < 0 || op >= int(Loop::Op::Count)) ir::fail(ir::ErrorKind::InvalidModel, what + ": unknown loop operation");
    loop->code.push_back({Loop::Op(op), json_field<int>(i, "a", what), json_field<int>(i, "b", what),
                          json_field<float>(i, "alpha", what), json_field<float>(i, "beta", what), type(i),
                          json_field<int>(i, "c", what)});
  }
  loop->stores = json_field<std::vector<std::pair<int, int>>>(j, "stores", what);
  return loop;
}

json call_to_json(const Call& call) {
  json args = json::array();
  // Arrays, not objects: a portable resnet50 has thousands of arguments, and
  // each key is a string nlohmann makes again on reading.
  for (const auto& a : call.args) args.push_back({int(a.kind), a.value, a.real, a.values, a.byte_offset});
  return {{"function", call.function}, {"args", args}, {"returns_status", call.returns_status}};
}

std::unique_ptr<Call> call_from_json(const json& j, const std::string& what) {
  auto call = std::make_unique<Call>();
  call->function = json_field<std::string>(j, "function", what);
  call->returns_status = json_field<bool>(j, "returns_status", what);
  for (const json& a : json_field<json>(j, "args", what)) {
    if (!a.is_array() || a.size() != 5)
      ir::fail(ir::ErrorKind::InvalidModel, what + ": a call argument must be [kind, value, real, values, offset]");
    const int kind = a[0].get<int>();
    if (kind < 0 || kind > int(Call::Arg::Kind::Int64Array))
      ir::fail(ir::ErrorKind::InvalidModel, what + ": unknown call argument");
    call->args.push_back(
        {Call::Arg::Kind(kind), a[1].get<int64_t>(), a[2].get<float>(), a[3].get<std::vector<int64_t>>(), a[4].get<int64_t>()});
  }
  return call;
}

std::unique_ptr<Kernel> load_kernel(const json& j, const WeightsReader& weights, const BlockReader& blocks,
                                    const std::shared_ptr<void>& keep_alive, const BodyCompiler* bodies,
                                    const std::string& what) {
  const std::string kind = json_field<std::string>(j, "kind", what);
  if (kind == "onednn") return OneDnnKernel::load(j, weights, blocks, what);
  if (kind == "copy") return CopyKernel::load(j, what);
  if (kind == "concat") return ConcatKernel::load(j, what);
  if (kind == "strided_copy") return StridedCopyKernel::load(j, what);
  if (kind == "channels_last_mean") return ChannelsLastMeanKernel::load(j, what);
  if (kind == "gather") return GatherKernel::load(j, what);
  if (kind == "instance_norm") return InstanceNormKernel::load(j, what);
  if (kind == "dynamic_quantize") return DynamicQuantizeKernel::load(j, what);
  if (kind == "reference") return ReferenceKernel::load(j, what);
  if (kind == "recurrent") return RecurrentKernel::load(j, weights, blocks, what);
  if (kind == "control_flow") return ControlFlowKernel::load(j, weights, blocks, keep_alive, bodies, what);
  ir::fail(ir::ErrorKind::InvalidModel, what + ": unknown kernel kind '" + kind + "'");
}

}  // namespace

SavedProgram save_program(const Program& program, const std::vector<std::string>& step_symbols,
                          const Jit::KernelObjects& kernel_objects, std::string_view loops_object) {
  SavedProgram saved;
  BlockWriter blocks;
  json buffers = json::array(), steps = json::array(), constants = json::array(), summary_steps = json::array();
  for (const Buffer& b : program.buffers) buffers.push_back({int(b.kind), b.index, b.bytes, b.offset, b.name});
  for (size_t s = 0; s < program.steps.size(); ++s) {
    const Step& step = program.steps[s];
    json j = {{"label", step.label}, {"args", step.args}, {"writes", step.writes}, {"symbol", step_symbols.at(s)}};
    if (step.loop) {
      j["loop"] = loop_to_json(*step.loop);
      summary_steps.push_back("loop " + step_symbols[s] + ": " + step.label);
    } else if (step.call) {
      j["call"] = call_to_json(*step.call);
      summary_steps.push_back(step.call->function + ": " + step.label);
    } else {
      try {
        step.kernel->save(j["kernel"], saved.weights, blocks);
      } catch (const ir::Error& e) {
        ir::fail(e.kind(), "step '" + step.label + "' cannot be saved: " + e.what());
      }
      summary_steps.push_back(j["kernel"]["kind"].get<std::string>() + ": " + step.label);
    }
    steps.push_back(std::move(j));
  }
  for (const ir::Tensor& c : program.constants) constants.push_back(backends::save_constant(c, saved.weights));
  json defaults = json::array();
  for (const ir::Tensor& t : program.input_defaults) defaults.push_back(t.defined());
  json out_dtypes = json::array();
  for (ir::DType t : program.output_dtypes) out_dtypes.push_back(int(t));
  json j = {{"format", kFormat},
            {"family", int(program.family)},
            {"buffers", buffers},
            {"steps", steps},
            {"inputs", program.inputs},
            {"input_has_default", defaults},
            {"outputs", program.outputs},
            {"output_dtypes", out_dtypes},
            {"output_dims", program.output_dims},
            {"constants", constants},
            {"arena_bytes", program.arena_bytes},
            {"intermediate_bytes", program.intermediate_bytes},
            {"graph_nodes", program.graph_nodes},
            {"compiled_nodes", program.compiled_nodes},
            {"fallback_nodes", program.fallback_nodes}};
  if (!kernel_objects.empty()) {
    json kernels = json::array();
    for (const auto& k : kernel_objects) kernels.push_back({k.kernels, blocks.add(k.object.data(), k.object.size())});
    j["kernel_objects"] = std::move(kernels);
  }
  if (!loops_object.empty()) j["loops_object"] = blocks.add(loops_object.data(), loops_object.size());
  saved.bytes = blocks.finish(j);
  saved.summary = json({{"entry", kEntrySymbol},
                        {"kernels", program.family == KernelFamily::Portable ? "portable" : "native"},
                        {"arena_bytes", program.arena_bytes},
                        {"intermediate_bytes", program.intermediate_bytes},
                        {"buffers", program.buffers.size()},
                        {"steps", summary_steps}})
                      .dump();
  return saved;
}

Program load_program(std::string_view bytes, const WeightsReader& weights, std::shared_ptr<void> keep_alive,
                     const ir::Graph& graph, std::vector<std::string>& step_symbols, Jit::KernelObjects* kernel_objects,
                     const RunAll& run_all, std::string* loops_object, const BodyCompiler* bodies) {
  const std::string what = "cached program";
  const BlockReader blocks(bytes, what);
  const json& j = blocks.document();
  try {
    if (json_field<int>(j, "format", what) != kFormat) ir::fail(ir::ErrorKind::InvalidModel, what + ": unknown format");
    Program p;
    const int family = json_field<int>(j, "family", what);
    if (family != int(KernelFamily::Native) && family != int(KernelFamily::Portable))
      ir::fail(ir::ErrorKind::InvalidModel, what + ": unknown kernel family");
    p.family = KernelFamily(family);
    for (const json& b : json_field<json>(j, "buffers", what)) {
      const int kind = b.at(0).get<int>();
      if (kind < int(Buffer::Kind::Arena) || kind > int(Buffer::Kind::Constant))
        ir::fail(ir::ErrorKind::InvalidModel, what + ": unknown buffer kind");
      p.buffers.push_back(
          {Buffer::Kind(kind), b.at(1).get<int>(), b.at(2).get<int64_t>(), b.at(3).get<int64_t>(), b.at(4).get<std::string>()});
    }
    step_symbols.clear();
    DeferredWork kernel_loads;
    // By reference: the kernels are made from the document after this loop.
    const auto steps = j.find("steps");
    if (steps == j.end() || !steps->is_array())
      ir::fail(ir::ErrorKind::InvalidModel, what + ": field 'steps' is missing or not a list");
    for (const json& s : *steps) {
      Step step;
      step.label = json_field<std::string>(s, "label", what);
      const std::string where = what + " step '" + step.label + "'";
      step.args = json_field<std::vector<int>>(s, "args", where);
      step.writes = json_field<std::vector<char>>(s, "writes", where);
      for (int a : step.args)
        if (a < 0 || size_t(a) >= p.buffers.size()) ir::fail(ir::ErrorKind::InvalidModel, where + ": buffer out of range");
      if (s.contains("loop"))
        step.loop = loop_from_json(s["loop"], where);
      else if (s.contains("call"))
        step.call = call_from_json(s["call"], where);
      else {
        // Made once every step is read (by index: the vector grows until
        // then), possibly on other threads.
        if (!s.contains("kernel")) ir::fail(ir::ErrorKind::InvalidModel, where + ": field 'kernel' is missing");
        const json& kernel = s.at("kernel");
        kernel_loads.push_back([&p, &kernel, &weights, &blocks, &keep_alive, bodies, index = p.steps.size(), where] {
          p.steps[index].kernel = load_kernel(kernel, weights, blocks, keep_alive, bodies, where);
        });
      }
      step_symbols.push_back(json_field<std::string>(s, "symbol", where));
      if (!s.contains("kernel") && step_symbols.back().empty())
        ir::fail(ir::ErrorKind::InvalidModel, where + ": a step without a function");
      for (const auto& a : step.call ? step.call->args : std::vector<Call::Arg>{})
        if (a.kind == Call::Arg::Kind::Buffer && (a.value < 0 || size_t(a.value) >= step.args.size()))
          ir::fail(ir::ErrorKind::InvalidModel, where + ": a call argument names no buffer");
      p.steps.push_back(std::move(step));
    }
    p.inputs = json_field<std::vector<std::string>>(j, "inputs", what);
    const auto has_default = json_field<std::vector<bool>>(j, "input_has_default", what);
    if (has_default.size() != p.inputs.size())
      ir::fail(ir::ErrorKind::InvalidModel, what + ": input defaults do not match the inputs");
    for (size_t i = 0; i < p.inputs.size(); ++i) {
      auto it = graph.initializers.find(p.inputs[i]);
      if (has_default[i] && it == graph.initializers.end())
        ir::fail(ir::ErrorKind::InvalidModel, what + ": input '" + p.inputs[i] + "' has no initializer in the model");
      p.input_defaults.push_back(has_default[i] ? it->second : ir::Tensor());
    }
    p.outputs = json_field<std::vector<std::string>>(j, "outputs", what);
    for (int t : json_field<std::vector<int>>(j, "output_dtypes", what)) p.output_dtypes.push_back(ir::DType(t));
    p.output_dims = json_field<std::vector<ir::Dims>>(j, "output_dims", what);
    if (p.output_dtypes.size() != p.outputs.size() || p.output_dims.size() != p.outputs.size())
      ir::fail(ir::ErrorKind::InvalidModel, what + ": output types do not match the outputs");
    for (const json& c : json_field<json>(j, "constants", what))
      // Read only: generated code and kernels never write a constant.
      p.constants.push_back(backends::load_constant(c, weights, keep_alive, what));
    for (const Buffer& b : p.buffers) {
      const size_t limit = b.kind == Buffer::Kind::Input      ? p.inputs.size()
                           : b.kind == Buffer::Kind::Output   ? p.outputs.size()
                           : b.kind == Buffer::Kind::Constant ? p.constants.size()
                                                              : SIZE_MAX;
      if (b.index < 0 || size_t(b.index) >= limit)
        ir::fail(ir::ErrorKind::InvalidModel, what + ": buffer '" + b.name + "' has a bad index");
    }
    p.arena_bytes = json_field<int64_t>(j, "arena_bytes", what);
    p.intermediate_bytes = json_field<int64_t>(j, "intermediate_bytes", what);
    p.graph_nodes = json_field<int>(j, "graph_nodes", what);
    p.compiled_nodes = json_field<int>(j, "compiled_nodes", what);
    p.fallback_nodes = json_field<int>(j, "fallback_nodes", what);
    if (kernel_objects) {
      kernel_objects->clear();
      if (j.contains("kernel_objects"))
        for (const json& k : j["kernel_objects"]) {
          if (!k.is_array() || k.size() != 2 || !k[0].is_array() || k[0].empty())
            ir::fail(ir::ErrorKind::InvalidModel, what + ": a kernel object must be [[kernel, ...], block]");
          kernel_objects->push_back(
              {k[0].get<std::set<std::string>>(), std::string(blocks.block(k[1], what + ": portable kernels"))});
        }
    }
    if (loops_object) {
      loops_object->clear();
      if (j.contains("loops_object")) *loops_object = blocks.block(j["loops_object"], what + ": the loops' object");
    }
    for (const Buffer& b : p.buffers)
      if (b.kind == Buffer::Kind::Arena && (b.offset < 0 || b.bytes < 0 || b.offset + b.bytes > p.arena_bytes))
        ir::fail(ir::ErrorKind::InvalidModel, what + ": buffer '" + b.name + "' lies outside the arena");
    if (run_all)
      run_all(kernel_loads);
    else
      for (auto& load : kernel_loads) load();
    return p;
  } catch (const json::exception& e) {
    ir::fail(ir::ErrorKind::InvalidModel, what + " is malformed: " + e.what());
  } catch (const dnnl::error& e) {
    ir::fail(ir::ErrorKind::InvalidModel, what + ": oneDNN rejected a saved primitive: " + e.what());
  }
}

}  // namespace kiln::cpu
