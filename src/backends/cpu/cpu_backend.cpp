// Threading. oneDNN here is an OpenMP build; the generated loops of a
// program with oneDNN primitives run on the same OpenMP team (and so does
// ChannelsLastMeanKernel), those of a portable program and the other host
// kernels on TBB. All stay inside one budget of N threads per Runtime:
// - every run executes on the budget's runner thread (thread_budget.hpp
//   says why), one at a time and in the order the calls arrive, each with
//   the whole budget: concurrent calls are safe and fair, but two runs never
//   add up to 2N busy threads;
// - the entry function runs inside a tbb::task_arena of N slots, so TBB
//   loops use at most N threads;
// - the runner's OpenMP thread count is N while it runs, so each oneDNN
//   primitive and team loop uses at most N threads; primitives and loops
//   take turns, never nested;
// - the runner's first run starts its OpenMP team (omp_team.hpp says how;
//   not when the backend is made, since the idle team's spinning slowed the
//   compile that followed: mlp's 7-9 ms became 11-12); making the backend
//   starts LLVM's JIT on another thread of the arena;
// - a compile runs on the calling thread; it borrows the arena's other
//   threads (for oneDNN's code generation and weight reorders, beside LLVM's)
//   only while no run is running or waiting.
// Primitives are created with the same OpenMP thread count they run with
// (oneDNN keys its choices by thread count).
#include "backends/cpu/cpu_backend.hpp"

#include <llvm/Config/llvm-config.h>
#include <oneapi/dnnl/dnnl.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>
#include <tbb/task_group.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>

#include "backends/cpu/codegen.hpp"
#include "backends/cpu/control_flow_kernel.hpp"
#include "backends/cpu/host_kernels.hpp"
#include "backends/cpu/interpreter/backend.hpp"
#include "backends/cpu/jit.hpp"
#include "backends/cpu/lowering.hpp"
#include "backends/cpu/onednn_kernel.hpp"
#include "backends/cpu/program_io.hpp"
#include "backends/cpu/step_profile.hpp"
#include "backends/cpu/thread_budget.hpp"
#include "backends/pipeline.hpp"
#include "runtime/ir/huge_pages.hpp"

namespace kiln::backends {

namespace {

using cpu::OmpThreads;
using cpu::ThreadBudget;

// Scratch arenas, reused across runs. A run takes one when its turn comes,
// so the runs waiting hold none, and since runs execute one at a time the
// pool keeps a single arena.
class ArenaPool {
 public:
  class Lease {
   public:
    explicit Lease(ArenaPool& pool) : pool_(pool), arena_(pool.acquire()) {}
    ~Lease() { pool_.release(arena_); }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    char* get() const { return arena_; }

   private:
    ArenaPool& pool_;
    char* arena_;
  };

  explicit ArenaPool(int64_t bytes) : bytes_((bytes + 63) / 64 * 64) {}
  ~ArenaPool() {
    for (char* a : free_) std::free(a);
  }
  char* acquire() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!free_.empty()) {
        char* a = free_.back();
        free_.pop_back();
        return a;
      }
    }
    if (bytes_ == 0) return nullptr;
    char* a = static_cast<char*>(ir::allocate_buffer(size_t(bytes_)));
    if (!a) ir::fail(ir::ErrorKind::Internal, "cannot allocate a scratch arena of " + std::to_string(bytes_) + " bytes");
    return a;
  }
  void release(char* a) {
    if (!a) return;
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(a);
  }

 private:
  int64_t bytes_;
  std::mutex mutex_;
  std::vector<char*> free_;
};

class CpuExecutable : public Executable {
 public:
  CpuExecutable(cpu::Program program, cpu::ProgramObjects objects, std::vector<std::string> step_symbols,
                std::shared_ptr<cpu::Jit> jit, std::shared_ptr<ThreadBudget> budget,
                std::shared_ptr<void> mapped_weights = nullptr, const cpu::Jit::KernelObjects& kernel_objects = {})
      : mapped_weights_(std::move(mapped_weights)),
        program_(std::move(program)),
        objects_(std::move(objects)),
        step_symbols_(std::move(step_symbols)),
        jit_(std::move(jit)),
        kernels_called_(cpu::called_kernels(program_)),
        threads_(program_.family == cpu::KernelFamily::Portable ? cpu::tbb_threads() : cpu::team_threads()),
        code_(cpu::link_program(objects_, step_symbols_, kernels_called_, *jit_, kernel_objects)),
        budget_(std::move(budget)),
        arenas_(program_.arena_bytes),
        profile_(program_.steps.size()) {
    for (const auto& step : program_.steps) kernels_.push_back(step.kernel.get());
    for (const auto& c : program_.constants) constants_.push_back(c.raw());
  }

  ~CpuExecutable() override {
    profile_.print(std::to_string(program_.steps.size()) + " steps", [&](size_t s) {
      const cpu::Step& step = program_.steps[s];
      // "ref" marks the nodes that fell back to the reference kernels: the first place to look.
      const char* kind = step.loop                                                      ? "loop  "
                         : step.call                                                    ? "call  "
                         : dynamic_cast<const cpu::ReferenceKernel*>(step.kernel.get()) ? "ref   "
                                                                                        : "kernel";
      return std::string(kind) + " " + step.label;
    });
  }

  ExecutableStats stats() const override {
    return {program_.graph_nodes, program_.compiled_nodes, program_.fallback_nodes, program_.arena_bytes,
            program_.intermediate_bytes};
  }

  Artifact save() const override {
    // The kernels it calls go along, so that a warm start compiles nothing.
    cpu::SavedProgram saved =
        cpu::save_program(program_, step_symbols_, jit_->portable_kernel_objects(kernels_called_), objects_.loops);
    Artifact a;
    a.object = objects_.entry;
    a.program = std::move(saved.bytes);
    put_weights(saved.weights, a);
    a.summary = std::move(saved.summary);
    return a;
  }

  std::vector<ir::Tensor> run(const std::map<std::string, ir::Tensor>& inputs) const override {
    std::vector<ir::Tensor> outputs;
    for (size_t k = 0; k < program_.outputs.size(); ++k) outputs.emplace_back(program_.output_dtypes[k], program_.output_dims[k]);
    execute(inputs, outputs);
    return outputs;
  }

  void run_into(const std::map<std::string, ir::Tensor>& inputs, std::vector<ir::Tensor>& outputs) const override {
    if (outputs.size() != program_.outputs.size())
      ir::fail(ir::ErrorKind::InvalidArgument,
               std::to_string(outputs.size()) + " output buffers for " + std::to_string(program_.outputs.size()) + " outputs");
    check_output_buffers(outputs, program_.output_dtypes, program_.output_dims, program_.outputs);
    execute(inputs, outputs);
  }

 private:
  void execute(const std::map<std::string, ir::Tensor>& inputs, std::vector<ir::Tensor>& outputs) const {
    // The io table on the stack for the usual handful of inputs and outputs:
    // a run with caller buffers allocates nothing.
    const size_t n_io = program_.inputs.size() + outputs.size();
    std::array<void*, 32> small;
    std::vector<void*> large(n_io > small.size() ? n_io : 0);
    void** io = n_io > small.size() ? large.data() : small.data();
    for (size_t i = 0; i < program_.inputs.size(); ++i) {
      auto it = inputs.find(program_.inputs[i]);
      const ir::Tensor* t = it != inputs.end()                     ? &it->second
                            : program_.input_defaults[i].defined() ? &program_.input_defaults[i]
                                                                   : nullptr;
      if (!t) ir::fail(ir::ErrorKind::InvalidArgument, "input '" + program_.inputs[i] + "' is missing");
      io[i] = const_cast<void*>(t->raw());
    }
    for (size_t k = 0; k < outputs.size(); ++k) io[program_.inputs.size() + k] = outputs[k].raw();
    cpu::RunStatus status;
    int32_t rc = 0;
    budget_->hold([&] {
      ArenaPool::Lease arena(arenas_);
      rc = !profile_.enabled() ? code_.entry(kernels_.data(), constants_.data(), io, arena.get(), &status, threads_)
                               : run_profiled(io, arena.get(), status);
    });
    if (rc == 0) return;
    if (status.step >= 0 && size_t(status.step) < program_.steps.size() && program_.steps[size_t(status.step)].call) {
      const cpu::Step& step = program_.steps[size_t(status.step)];
      throw ir::Error(ir::ErrorKind::InvalidArgument, step.label + ": " + cpu::describe_call_failure(*step.call, status.code));
    }
    throw ir::Error(status.kind, status.error);
  }

  // KILN_PROFILE: the steps one by one, timed (what the entry function does, from C++).
  int32_t run_profiled(void* const* io, char* arena, cpu::RunStatus& status) const {
    profile_.begin_run();
    for (size_t s = 0; s < program_.steps.size(); ++s) {
      const cpu::Step& step = program_.steps[s];
      std::vector<void*> args;
      for (int b : step.args) {
        const cpu::Buffer& buf = program_.buffers[size_t(b)];
        switch (buf.kind) {
          case cpu::Buffer::Kind::Arena: args.push_back(arena + buf.offset); break;
          case cpu::Buffer::Kind::Input: args.push_back(io[size_t(buf.index)]); break;
          case cpu::Buffer::Kind::Output: args.push_back(io[program_.inputs.size() + size_t(buf.index)]); break;
          case cpu::Buffer::Kind::Constant: args.push_back(const_cast<void*>(constants_[size_t(buf.index)])); break;
        }
      }
      const auto start = std::chrono::steady_clock::now();
      if (step.kernel) {
        if (cpu::run_kernel(step.kernel.get(), args.data(), &status)) return 1;
      } else if (step.call) {
        if (int64_t code = reinterpret_cast<cpu::CallFn>(code_.steps[s])(threads_, args.data())) {
          status.step = int64_t(s);
          status.code = code;
          return 1;
        }
      } else {
        for (int64_t v : cpu::loop_arguments(*step.loop)) args.push_back(reinterpret_cast<void*>(v));
        int64_t n = 1;
        for (int64_t d : step.loop->shape) n *= d;
        threads_->parallel_for(nullptr, cpu::loop_chunks(n), reinterpret_cast<kiln_pk_task_fn>(code_.steps[s]), args.data());
      }
      profile_.add(s, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    return 0;
  }

  std::shared_ptr<void> mapped_weights_;  // a cache entry's files, which kernels point into
  cpu::Program program_;
  cpu::ProgramObjects objects_;  // what the cache stores
  std::vector<std::string> step_symbols_;
  std::shared_ptr<cpu::Jit> jit_;
  std::set<std::string> kernels_called_;  // of the portable kernel library
  // Where parallel loops run: beside oneDNN, on its OpenMP team (omp_team.hpp
  // says why); in a portable program, on TBB.
  const kiln_pk_threads* threads_;
  cpu::CompiledProgram code_;  // owns the linked code (before jit_ goes)
  std::shared_ptr<ThreadBudget> budget_;
  std::vector<const cpu::Kernel*> kernels_;
  std::vector<const void*> constants_;
  mutable ArenaPool arenas_;
  mutable cpu::StepProfile profile_;  // runs are serialised
};

// The budget as other backends (plugins) use it.
class BudgetThreads : public HostThreads {
 public:
  explicit BudgetThreads(std::shared_ptr<ThreadBudget> budget) : budget_(std::move(budget)) {}
  int count() const override { return budget_->threads; }
  void run_in_turn(const std::function<void()>& f) override { budget_->hold(f); }
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& body) override {
    budget_->arena.execute([&] {
      tbb::parallel_for(tbb::blocked_range<int64_t>(0, n),
                        [&](const tbb::blocked_range<int64_t>& r) { body(r.begin(), r.end()); });
    });
  }

 private:
  std::shared_ptr<ThreadBudget> budget_;
};

// The bodies of a program's If, Loop and Scan nodes compile on the backend
// compiling the program (its interpreter taking what data decides), with
// the program's options.
class CpuBodies : public cpu::BodyCompiler {
 public:
  CpuBodies(const Backend& cpu, const Backend& interpreter, const CompileOptions& options)
      : backends_{&cpu, &interpreter}, options_(options) {}
  std::unique_ptr<Executable> compile(const ir::Graph& body, const InputShapes& shapes) const override {
    return compile_for_shapes(body, shapes, backends_, options_).executable;
  }
  std::unique_ptr<Executable> load(const LoadedArtifact& artifact, std::shared_ptr<const ir::Graph> body) const override {
    return load_partitioned(artifact, std::move(body), backends_, options_).executable;
  }

 private:
  std::vector<const Backend*> backends_;
  const CompileOptions& options_;
};

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(int threads)
      : budget_(std::make_shared<ThreadBudget>(threads)), interpreter_(make_interpreter_backend(budget_)) {
    // LLVM's JIT (about 1 ms) is made on another thread of the budget while
    // the caller goes on to load a model; a failure shows at first use.
    if (threads > 1) budget_->arena.execute([&] { jit_made_.run([this] { make_jit_quietly(); }); });
  }
  ~CpuBackend() noexcept override {
    budget_->arena.execute([&] { jit_made_.wait(); });  // the task catches everything
  }

  std::string name() const override { return "cpu"; }
  std::string version() const override { return "cpu-5"; }
  bool supports(const ir::Node& node) const override { return cpu::lowers_natively(node); }
  bool takes(const ir::Node& node, const ir::Specialization& spec) const override { return cpu::lowers(node, spec); }
  std::unique_ptr<Backend> fallback() const override { return make_interpreter_backend(budget_); }
  std::shared_ptr<HostThreads> host_threads() const override { return std::make_shared<BudgetThreads>(budget_); }

  std::unique_ptr<Executable> compile(std::shared_ptr<const ir::Graph> graph, const ir::Specialization& spec,
                                      const CompileOptions& options) const override {
    OmpThreads omp(budget_->threads);
    cpu::Program program;
    cpu::DeferredWork deferred;
    std::vector<cpu::ImplementationTrial> trials;
    const CpuBodies bodies(*this, *interpreter_, options);
    try {
      program = cpu::lower(*graph, spec, options.kernels == "portable" ? cpu::KernelFamily::Portable : cpu::KernelFamily::Native,
                           &deferred, &trials, cpu::Tuning::of(options), &bodies);
    } catch (const ir::Error& e) {
      if (e.kind() != ir::ErrorKind::Unsupported) throw;
      // Shapes that depend on data cannot be planned statically. The
      // runtime's partitioner never sends such nodes here; a caller that
      // compiles a whole graph directly gets the interpreter, which an
      // entry under the cpu backend's key could not hold.
      return interpret_uncached(std::move(graph), budget_,
                                std::string("the cpu backend could not compile this graph (") + e.what() + ") and interprets it");
    }
    std::vector<std::string> step_symbols;
    cpu::ProgramObjects objects;
    generate_code(program, deferred, objects, step_symbols);
    cpu::choose_implementations(program, trials, *budget_, cpu::trial_policy(options));
    return std::make_unique<CpuExecutable>(std::move(program), std::move(objects), std::move(step_symbols), jit_shared(),
                                           budget_);
  }

  std::unique_ptr<Executable> load(const LoadedArtifact& artifact, std::shared_ptr<const ir::Graph> graph,
                                   const CompileOptions& options) const override {
    // Primitives are created in the threading context that runs them.
    OmpThreads omp(budget_->threads);
    std::vector<std::string> step_symbols;
    cpu::Jit::KernelObjects kernel_objects;
    cpu::ProgramObjects objects;
    const CpuBodies bodies(*this, *interpreter_, options);
    cpu::Program program = cpu::load_program(
        artifact.program, WeightsReader(artifact.weights, artifact.weights_bytes), artifact.keep_alive, *graph, step_symbols,
        &kernel_objects,
        [&](cpu::DeferredWork& loads) {
          if (artifact.check) loads.insert(loads.begin(), [&] { artifact.check->run(); });
          run_beside(loads, [] {});
        },
        &objects.loops, &bodies);
    objects.entry = std::string(artifact.object);
    return std::make_unique<CpuExecutable>(std::move(program), std::move(objects), std::move(step_symbols), jit_shared(), budget_,
                                           artifact.keep_alive, kernel_objects);
  }

  std::string identity(const CompileOptions& options) const override {
    const cpu::HostInfo& host = jit().host();
    const dnnl_version_t* v = dnnl_version();
    const cpu::Tuning tuning = cpu::Tuning::of(options);
    std::string id = Backend::identity(options) + " target=" + host.triple + " cpu=" + host.cpu + " features=";
    for (const auto& f : host.features) id += f;
    id += " onednn=" + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) + "-" +
          v->hash + " dnnl_md=" + std::to_string(sizeof(dnnl_memory_desc_t)) + " llvm=" + LLVM_VERSION_STRING +
          " channel_blocks_from=" + std::to_string(tuning.channel_blocks_from) + " winograd=" + (tuning.winograd ? "1" : "0");
    return id;
  }

  // bf16: oneDNN 2.6 makes bf16 convolutions and matmuls only on CPUs with
  // AVX-512 (natively with AVX512_BF16); on others it has no implementation
  // at all, not even a reference one (measured on AVX2: every descriptor
  // refused). Where it has them, the lowering does not use them yet.
  std::string refuses_precision(const std::string& precision) const override {
    if (precision == "fp32") return "";
    if (precision != "bf16") return Backend::refuses_precision(precision);
    if (!cpu::onednn_has_bf16())
      return "oneDNN " + std::to_string(dnnl_version()->major) + "." + std::to_string(dnnl_version()->minor) +
             " has no bf16 convolution or matmul on this CPU (" + jit().host().cpu + "; they need AVX-512); use 'fp32'";
    return "this CPU has oneDNN's bf16 kernels, but Kiln's cpu backend does not compile bf16 yet; use 'fp32'";
  }

  int64_t codegen_runs() const override { return jit().codegen_runs(); }

 private:
  // LLVM code generation, and beside it the deferred work (oneDNN's own
  // code generation, weight reorders), about as long as each other.
  void generate_code(const cpu::Program& program, cpu::DeferredWork& deferred, cpu::ProgramObjects& objects,
                     std::vector<std::string>& step_symbols) const {
    run_beside(deferred, [&] { objects = cpu::compile_program(program, jit(), step_symbols); });
  }

  // Runs `main` on the calling thread and the tasks on the budget's threads,
  // the calling one included once `main` is done. The other threads help only
  // when no run is using them, so a compile or a load never adds to a run's
  // N busy threads. Each task makes oneDNN primitives for an OpenMP team of
  // the budget's size, whichever thread it runs on.
  void run_beside(cpu::DeferredWork& tasks, const std::function<void()>& main) const {
    if (budget_->threads == 1 || tasks.size() < 2 || !budget_->try_borrow()) {
      for (auto& task : tasks) task();
      main();
      return;
    }
    struct GiveBack {
      ThreadBudget& budget;
      ~GiveBack() { budget.give_back(); }
    } give_back{*budget_};
    budget_->arena.execute([&] {
      tbb::task_group helpers;
      helpers.run([&] {
        tbb::parallel_for(size_t(0), tasks.size(), [&](size_t i) {
          OmpThreads omp(budget_->threads);
          tasks[i]();
        });
      });
      std::exception_ptr failed;
      try {
        main();
      } catch (...) {
        failed = std::current_exception();
      }
      helpers.wait();  // rethrows what a task threw
      if (failed) std::rethrow_exception(failed);
    });
  }

  void make_jit_quietly() const {
    try {
      jit();
    } catch (...) {  // call_once did not complete: the first use tries again and reports
    }
  }
  cpu::Jit& jit() const { return *jit_shared(); }
  const std::shared_ptr<cpu::Jit>& jit_shared() const {
    std::call_once(jit_once_, [this] { jit_ = std::make_shared<cpu::Jit>(cpu::codegen_host_symbols()); });
    return jit_;
  }

  std::shared_ptr<ThreadBudget> budget_;
  std::unique_ptr<Backend> interpreter_;  // for the bodies of control flow
  mutable std::once_flag jit_once_;
  tbb::task_group jit_made_;
  mutable std::shared_ptr<cpu::Jit> jit_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) { return std::make_unique<CpuBackend>(threads); }

}  // namespace kiln::backends
