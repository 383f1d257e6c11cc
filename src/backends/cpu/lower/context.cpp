#include "backends/cpu/lower/context.hpp"

#include <algorithm>
#include <new>

#include "backends/cpu/host_kernels.hpp"
#include "backends/cpu/lower/op_table.hpp"
#include "backends/cpu/thread_budget.hpp"
#include "runtime/ir/huge_pages.hpp"
#include "runtime/passes/memory_plan.hpp"

namespace kiln::cpu::lowering {

bool is_static(const ir::Specialization& spec, const std::string& name) {
  auto it = spec.result.values.find(name);
  if (it == spec.result.values.end() || !it->second.shape.is_concrete() || it->second.shape.rank() > DNNL_MAX_NDIMS ||
      !ir::dtype_supported(it->second.dtype) || it->second.dtype == DType::String)
    return false;
  __int128 bytes = __int128(ir::dtype_size(it->second.dtype));
  for (int64_t d : it->second.shape.concrete()) bytes = std::min(bytes * d, __int128(1) << 49);
  return bytes <= __int128(1) << 48;
}

Context::Context(const ir::Graph& graph, const ir::Specialization& spec, KernelFamily family, DeferredWork& deferred,
                 std::vector<ImplementationTrial>* trials, const Tuning& tuning, const BodyCompiler* bodies)
    : graph(graph),
      spec(spec),
      portable(family == KernelFamily::Portable),
      host_kernels(family == KernelFamily::Native),
      trials(family == KernelFamily::Native ? trials : nullptr),
      tuning(tuning),
      team_threads(omp_get_max_threads()),
      bodies(bodies),
      deferred_(deferred) {
  program.family = family;
}

Program Context::run() {
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    for (const auto& name : ir::values_read(graph.nodes[i])) consumers_[name].push_back(i);
    for (const auto& out : graph.nodes[i].outputs)
      if (!out.empty()) {
        producer_[out] = i;
        check_static(out);
      }
  }
  // Inputs with an initializer are inputs too: the caller may override them.
  for (const auto& in : graph.inputs) {
    program.inputs.push_back(in.name);
    auto init = graph.initializers.find(in.name);
    program.input_defaults.push_back(init == graph.initializers.end() ? ir::Tensor() : init->second);
    input_index_[in.name] = int(program.inputs.size()) - 1;
  }
  for (size_t k = 0; k < graph.outputs.size(); ++k) {
    const std::string& name = graph.outputs[k].name;
    check_static(name);
    program.outputs.push_back(name);
    program.output_dtypes.push_back(dtype(name));
    program.output_dims.push_back(dims(name));
    output_buffer_.push_back(add_buffer(Buffer::Kind::Output, int(k), bytes_of(name), name));
    output_of.emplace(name, int(k));
  }

  absorbed.assign(graph.nodes.size(), 0);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (absorbed[i]) continue;
    node = i;
    const size_t steps_before = program.steps.size();
    bool native = false;
    try {
      native = lower_node(*this, graph.nodes[i]);
    } catch (const dnnl::error&) {
      native = false;                  // oneDNN has no implementation for this case: the reference kernel runs it
    } catch (const std::bad_alloc&) {  // a table the node's sizes ask for (a resize's taps)
      ir::fail(ir::ErrorKind::Internal, graph.nodes[i].describe() + ": out of memory allocating what its compile needs");
    }
    if (!native) {
      if (program.steps.size() != steps_before) ir::fail(ir::ErrorKind::Internal, "lowering left a partial step");
      fallback(graph.nodes[i]);
    }
  }
  for (size_t k = 0; k < graph.outputs.size(); ++k) finish_output(int(k));
  sum_in_place();
  plan();
  return std::move(program);
}

void Context::check_static(const std::string& name) {
  if (!is_static(spec, name))
    ir::fail(ir::ErrorKind::Unsupported, "value '" + name + "' has no static shape and fixed-size type");
}
const ir::ValueInfo& Context::info(const std::string& name) const {
  auto it = spec.result.values.find(name);
  if (it == spec.result.values.end()) ir::fail(ir::ErrorKind::Internal, "lowering: no type for '" + name + "'");
  return it->second;
}
int64_t Context::bytes_of(const std::string& name) const {
  return ir::checked_numel(dims(name)) * int64_t(ir::dtype_size(dtype(name)));
}
const ir::Tensor* Context::constant(const std::string& name) const {
  return input_index_.count(name) ? nullptr : graph.constant(name);
}
std::optional<float> Context::scalar_constant(const std::string& name) const {
  const ir::Tensor* t = constant(name);
  if (!t || t->numel() != 1 || t->dtype() != DType::Float32) return std::nullopt;
  return t->data<float>()[0];
}
bool Context::available(const std::string& name) const {
  auto it = producer_.find(name);
  return it == producer_.end() || it->second < node;
}
bool Context::single_use(const std::string& name) const {
  auto it = consumers_.find(name);
  return it != consumers_.end() && it->second.size() == 1 && !output_of.count(name);
}
bool Context::only_first_output_wanted(const ir::Node& n) const {
  for (size_t i = 1; i < n.outputs.size(); ++i) {
    const std::string& name = n.outputs[i];
    if (!name.empty() && (consumers_.count(name) || output_of.count(name))) return false;
  }
  return true;
}
const std::vector<size_t>& Context::consumers(const std::string& name) const {
  static const std::vector<size_t> none;
  auto it = consumers_.find(name);
  return it == consumers_.end() ? none : it->second;
}

int Context::add_buffer(Buffer::Kind kind, int index, int64_t bytes, const std::string& name) {
  Buffer b;
  b.kind = kind;
  b.index = index;
  b.bytes = bytes;
  b.name = name;
  program.buffers.push_back(b);
  return int(program.buffers.size()) - 1;
}

Context::Val& Context::val(const std::string& name) {
  auto it = vals.find(name);
  if (it != vals.end()) return it->second;
  Val v;
  if (auto in = input_index_.find(name); in != input_index_.end()) {
    v.buffer = add_buffer(Buffer::Kind::Input, in->second, bytes_of(name), name);
  } else if (const ir::Tensor* t = constant(name)) {
    program.constants.push_back(*t);
    v.buffer = add_buffer(Buffer::Kind::Constant, int(program.constants.size()) - 1, int64_t(t->nbytes()), name);
  } else {
    ir::fail(ir::ErrorKind::Internal, "lowering: '" + name + "' is read before it is computed");
  }
  if (auto type = onednn_type(dtype(name))) v.layout = plain_md(dims(name), *type);
  return vals[name] = v;
}

int Context::define(const std::string& name, const md& layout, bool plain) {
  int buffer = -1;
  auto out = output_of.find(name);
  if (plain && out != output_of.end()) {
    buffer = output_buffer_[size_t(out->second)];
  } else {
    const int64_t bytes = onednn_type(dtype(name)) ? int64_t(layout.get_size()) : bytes_of(name);
    buffer = add_buffer(Buffer::Kind::Arena, 0, bytes, name);
  }
  Val v;
  v.buffer = buffer;
  v.layout = plain ? plain_layout(name) : layout;
  v.blocked = !plain;
  vals[name] = v;
  return buffer;
}
int Context::define_plain(const std::string& name) { return define(name, plain_layout(name), true); }

md Context::plain_layout(const std::string& name) const {
  const auto type = onednn_type(dtype(name));
  return type ? plain_md(dims(name), *type) : md();
}

int Context::as_layout(const std::string& name, const md& want) {
  Val& v = val(name);
  if (v.layout == want) return v.buffer;
  for (const auto& [layout, buffer] : v.copies)
    if (layout == want) return buffer;
  const int buffer = add_buffer(Buffer::Kind::Arena, 0, int64_t(want.get_size()), name + "#layout");
  add_reorder("reorder " + name, v.buffer, buffer, v.layout, want);
  vals[name].copies.emplace_back(want, buffer);
  return buffer;
}
int Context::plain(const std::string& name) {
  const Val& v = val(name);
  if (!v.blocked) return v.buffer;
  return as_layout(name, plain_layout(name));
}

void Context::add_kernel(const std::string& label, std::vector<int> args, std::vector<char> writes,
                         std::unique_ptr<Kernel> kernel) {
  Step s;
  s.label = label;
  s.args = std::move(args);
  s.writes = std::move(writes);
  s.kernel = std::move(kernel);
  program.steps.push_back(std::move(s));
}

void Context::add_primitive(const std::string& label, const dnnl::primitive_desc_base& pd, std::vector<int> args,
                            std::vector<char> writes, std::vector<std::pair<int, md>> rt_args,
                            std::unordered_map<int, dnnl::memory> constants, int sum_from) {
  const md scratch = pd.query_md(dnnl::query::scratchpad_md);
  if (scratch.get_size() > 0) {
    args.push_back(add_buffer(Buffer::Kind::Arena, 0, int64_t(scratch.get_size()), label + "#scratchpad"));
    writes.push_back(1);
    rt_args.push_back({DNNL_ARG_SCRATCHPAD, scratch});
  }
  const int threads = omp_get_max_threads();
  auto kernel = std::make_unique<OneDnnKernel>(pd, std::move(rt_args), std::move(constants), sum_from, 0,
                                               threads < team_threads ? threads : 0);
  OneDnnKernel* k = kernel.get();
  add_kernel(label, std::move(args), std::move(writes), std::move(kernel));
  // A native bundle makes its primitives again from their descriptors.
  if (program.family != KernelFamily::NativeBundle) defer_creation(k, label, threads);
}

void Context::defer_creation(OneDnnKernel* k, const std::string& label, int threads) {
  deferred_.push_back([k, label, threads] {
    OmpThreads scope(threads);
    try {
      k->create_primitive();
    } catch (const dnnl::error& e) {
      ir::fail(ir::ErrorKind::Internal, label + ": oneDNN could not create the primitive it described: " + e.what());
    }
  });
}

void Context::add_reorder(const std::string& label, int src, int dst, const md& from, const md& to) {
  const dnnl::reorder::primitive_desc pd(cpu_engine(), from, cpu_engine(), to, user_scratchpad());
  add_primitive(label, pd, {src, dst}, {0, 1}, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}}, {});
}

dnnl::memory Context::constant_memory(const md& user, const void* data, const md& want, std::shared_ptr<const void> keep) {
  dnnl::memory dst(want, cpu_engine());
  // Before the reorder first touches it (see huge_pages.hpp).
  ir::advise_huge_pages(dst.get_data_handle(), want.get_size());
  deferred_.push_back([user, data, dst, keep = std::move(keep)] {
    try {
      reorder_constant(user, data, dst);
    } catch (const dnnl::error& e) {
      ir::fail(ir::ErrorKind::Internal, std::string("reordering a weight for oneDNN failed: ") + e.what());
    }
  });
  return dst;
}

bool Context::touches_empty(const ir::Node& n) {
  auto empty = [&](const std::string& name) { return !name.empty() && ir::checked_numel(dims(name)) == 0; };
  const auto read = ir::values_read(n);
  return std::any_of(read.begin(), read.end(), empty) || std::any_of(n.outputs.begin(), n.outputs.end(), empty);
}

void Context::fallback(const ir::Node& n) {
  std::vector<int> args;
  std::vector<char> writes;
  std::vector<ReferenceKernel::Value> reads, outs;
  for (const auto& name : ir::values_read(n)) {
    args.push_back(plain(name));
    writes.push_back(0);
    reads.push_back({name, dtype(name), dims(name)});
  }
  for (const auto& name : n.outputs) {
    if (name.empty()) continue;
    args.push_back(define_plain(name));
    writes.push_back(1);
    outs.push_back({name, dtype(name), dims(name)});
  }
  add_kernel(n.describe(), std::move(args), std::move(writes), std::make_unique<ReferenceKernel>(n, reads, outs));
  program.fallback_nodes++;
}

int Context::add_constant(ir::Tensor t, const std::string& name) {
  program.constants.push_back(std::move(t));
  return add_buffer(Buffer::Kind::Constant, int(program.constants.size()) - 1, int64_t(program.constants.back().nbytes()), name);
}

void Context::add_call(const std::string& label, std::vector<int> args, std::vector<char> writes, Call call) {
  Step s;
  s.label = label;
  s.args = std::move(args);
  s.writes = std::move(writes);
  s.call = std::make_unique<Call>(std::move(call));
  program.steps.push_back(std::move(s));
}

Call::Arg Context::scratch(std::vector<int>& args, std::vector<char>& writes, size_t bytes, const std::string& label) {
  if (bytes == 0) return Call::null();
  args.push_back(add_buffer(Buffer::Kind::Arena, 0, int64_t(bytes), label + "#scratch"));
  writes.push_back(1);
  return Call::buffer(int(args.size()) - 1);
}

void Context::finish_output(int k) {
  const std::string& name = program.outputs[size_t(k)];
  const int target = output_buffer_[size_t(k)];
  node = graph.nodes.size();
  Val& v = val(name);
  if (v.buffer == target) return;
  if (v.blocked) {
    add_reorder("output " + name, v.buffer, target, v.layout, plain_layout(name));
  } else if (!host_kernels) {
    add_call("output " + name, {v.buffer, target}, {0, 1},
             {"kiln_pk_copy_rows",
              {Call::i64(1), Call::i64(bytes_of(name)), Call::buffer(0), Call::i64(0), Call::buffer(1), Call::i64(0)}});
  } else {
    add_kernel("output " + name, {v.buffer, target}, {0, 1}, std::make_unique<CopyKernel>(bytes_of(name)));
  }
}

// A Sum post-op adds what the destination holds, so OneDnnKernel copies
// the residual there first (for resnet50 at batch 8, 26 MB before some
// convolutions). Where nothing reads the residual's buffer after the step,
// the destination takes that buffer instead and there is nothing to copy.
void Context::sum_in_place() {
  auto uses = [&](size_t step, int buffer) {
    const auto& args = program.steps[step].args;
    return std::count(args.begin(), args.end(), buffer);
  };
  for (const SumStep& sum : sum_steps_) {
    std::vector<int>& args = program.steps[sum.step].args;
    const int residual = args[sum.residual], dst = args[sum.dst];
    const Buffer &r = program.buffers[size_t(residual)], &d = program.buffers[size_t(dst)];
    if (residual == dst || r.kind != Buffer::Kind::Arena || d.kind != Buffer::Kind::Arena || r.bytes != d.bytes) continue;
    // The primitive must not read the residual's buffer as a source.
    bool free = uses(sum.step, residual) == 1;
    for (size_t t = 0; t < program.steps.size() && free; ++t)
      if (t > sum.step ? uses(t, residual) > 0 : t < sum.step && uses(t, dst) > 0) free = false;
    if (!free) continue;
    for (size_t t = sum.step; t < program.steps.size(); ++t)
      std::replace(program.steps[t].args.begin(), program.steps[t].args.end(), dst, residual);
  }
}

void Context::plan() {
  std::vector<passes::BufferRequest> requests;
  std::map<int, size_t> index;
  for (size_t s = 0; s < program.steps.size(); ++s)
    for (int b : program.steps[s].args) {
      if (program.buffers[size_t(b)].kind != Buffer::Kind::Arena) continue;
      auto it = index.find(b);
      if (it == index.end()) {
        index[b] = requests.size();
        requests.push_back({std::to_string(b), program.buffers[size_t(b)].bytes, s, s});
      } else {
        requests[it->second].last = s;
      }
    }
  passes::MemoryPlan plan = passes::plan_buffers(requests);
  for (const auto& [b, i] : index) program.buffers[size_t(b)].offset = plan.slots.at(requests[i].name).offset;
  program.arena_bytes = plan.arena_bytes;
  program.intermediate_bytes = plan.intermediate_bytes;
}

}  // namespace kiln::cpu::lowering
