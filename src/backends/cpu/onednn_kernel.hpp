#pragma once
// A oneDNN primitive as a step of a compiled specialization: created once at
// compile time, for fixed shapes and layouts, with its constant operands
// (weights reordered into the layout the primitive chose, bias, scale)
// bound once. At run time only the activation buffers change.
#include <dnnl.hpp>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/cpu/program.hpp"

namespace kiln::cpu {

class OneDnnKernel : public Kernel {
 public:
  // The argument id of a step argument oneDNN does not see (the residual).
  static constexpr int kNotBound = -1;
  // `runtime_args`: the DNNL_ARG_* of each step argument, in order, with the
  // layout of the buffer bound there. If `sum_from` >= 0, that argument (a
  // residual of the destination's layout) is copied into DNNL_ARG_DST first,
  // for a Sum post-op.
  // `implementation`: where `pd` stands in oneDNN's list of implementations
  // of its operation (0: the one oneDNN prefers), for making it again.
  // `threads`: the OpenMP threads it runs on, when fewer than the run's
  // (0: the run's); its descriptor must have been made with that many.
  OneDnnKernel(dnnl::primitive_desc_base pd, std::vector<std::pair<int, dnnl::memory::desc>> runtime_args,
               std::unordered_map<int, dnnl::memory> constant_args, int sum_from = -1, int implementation = 0, int threads = 0);
  // Makes the primitive (oneDNN compiles its code here), once, before the
  // first run. Kept apart from construction so that the lowering can leave it
  // to run beside LLVM code generation. The calling thread's OpenMP thread
  // count must be the one the descriptor was made with: oneDNN keys its
  // primitive cache by it.
  void create_primitive();
  // How long create_primitive() took, in milliseconds (0 before).
  double creation_ms() const { return creation_ms_; }
  // Not reentrant: the memory handles are rebound on every call, which
  // allocates nothing. Runs of one Runtime are serialised (cpu_backend.cpp).
  void run(void* const* args) const override;
  void save(nlohmann::json& out, WeightsWriter& weights, BlockWriter& blocks) const override;
  // The saved kernel made again, its constants pointing into `weights`.
  // Throws ir::Error(InvalidModel) if oneDNN no longer makes the same primitive.
  static std::unique_ptr<Kernel> load(const nlohmann::json& j, const WeightsReader& weights, const BlockReader& blocks,
                                      const std::string& what);
  // oneDNN's name for the implementation it chose ("jit:uni", "ref:any").
  std::string implementation() const { return pd_.impl_info_str(); }
  dnnl::primitive::kind primitive_kind() const { return pd_.get_kind(); }
  int implementation_index() const { return implementation_; }
  const dnnl::primitive_desc_base& descriptor() const { return pd_; }
  const std::vector<std::pair<int, dnnl::memory::desc>>& runtime_args() const { return runtime_args_; }
  const std::unordered_map<int, dnnl::memory>& constant_args() const { return constant_args_; }
  int sum_from() const { return sum_from_; }
  int threads() const { return threads_; }

 private:
  dnnl::primitive_desc_base pd_;
  dnnl::primitive primitive_;
  std::vector<std::pair<int, dnnl::memory::desc>> runtime_args_;
  std::unordered_map<int, dnnl::memory> constant_args_;
  mutable std::vector<dnnl::memory> bound_;  // per runtime argument (empty for kNotBound)
  std::vector<dnnl_exec_arg_t> exec_args_;   // constants and bound_, ready for dnnl_primitive_execute
  mutable dnnl::stream stream_;
  int sum_from_ = -1;
  int dst_index_ = -1;
  int implementation_ = 0;
  int threads_ = 0;
  double creation_ms_ = 0;
};

// oneDNN's implementations of one operation (an operation descriptor and its
// attributes), in its order of preference, each with its position in that
// order. Throws dnnl::error if oneDNN has none.
class OneDnnImplementations {
 public:
  OneDnnImplementations(const void* op_desc, const_dnnl_primitive_attr_t attr);
  ~OneDnnImplementations();
  OneDnnImplementations(const OneDnnImplementations&) = delete;
  OneDnnImplementations& operator=(const OneDnnImplementations&) = delete;
  // Moves to the next implementation; false past the last.
  bool next();
  int index() const { return index_; }
  dnnl::primitive_desc_base descriptor() const;

 private:
  dnnl_primitive_desc_iterator_t iterator_ = nullptr;
  int index_ = 0;
};

// Whether `kernel` is a OneDnnKernel: the only host kernel a native bundle runs.
bool is_onednn_kernel(const Kernel& kernel);

// The engine every kernel of the cpu backend uses.
const dnnl::engine& cpu_engine();

// Every primitive of the cpu backend takes its scratchpad as an argument (a
// step buffer in the run's arena), never oneDNN's own: that one belongs to
// the thread that created the primitive, and a run may come from any thread.
dnnl::primitive_attr user_scratchpad();

// Whether oneDNN makes a bf16 matmul on this CPU (it does only with AVX-512).
bool onednn_has_bf16();

// `data` (of `user` layout) copied into `dst`, on the calling thread alone
// (this runs beside other compile work, never with a run's threads).
void reorder_constant(const dnnl::memory::desc& user, const void* data, dnnl::memory dst);

}  // namespace kiln::cpu
