#include "backends/cpu/onednn_kernel.hpp"

#include <cstring>

#include "runtime/ir/error.hpp"

namespace kiln::cpu {

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::memory reorder_constant(const dnnl::memory::desc& user, const void* data, const dnnl::memory::desc& want) {
  dnnl::memory src(user, cpu_engine(), const_cast<void*>(data));
  dnnl::memory dst(want, cpu_engine());
  dnnl::stream stream(cpu_engine());
  dnnl::reorder(src, dst).execute(stream, src, dst);
  stream.wait();
  return dst;
}

OneDnnKernel::OneDnnKernel(dnnl::primitive primitive, std::vector<std::pair<int, dnnl::memory::desc>> runtime_args,
                           std::unordered_map<int, dnnl::memory> constant_args, int sum_from)
    : primitive_(std::move(primitive)),
      runtime_args_(std::move(runtime_args)),
      constant_args_(std::move(constant_args)),
      sum_from_(sum_from) {
  for (size_t i = 0; i < runtime_args_.size(); ++i)
    if (runtime_args_[i].first == DNNL_ARG_DST) dst_index_ = int(i);
  if (sum_from_ >= 0 && dst_index_ < 0) ir::fail(ir::ErrorKind::Internal, "oneDNN kernel: a Sum post-op needs a destination");
  stream_ = dnnl::stream(cpu_engine());
  for (const auto& [id, memory] : constant_args_) exec_args_.push_back({id, memory.get()});
  for (const auto& [id, desc] : runtime_args_) {
    bound_.push_back(id == kNotBound ? dnnl::memory() : dnnl::memory(desc, cpu_engine(), DNNL_MEMORY_NONE));
    if (id != kNotBound) exec_args_.push_back({id, bound_.back().get()});
  }
}

void OneDnnKernel::run(void* const* args) const {
  try {
    // The sum post-op adds what the destination holds: put the residual there.
    if (sum_from_ >= 0 && args[sum_from_] != args[dst_index_])
      std::memcpy(args[dst_index_], args[sum_from_], runtime_args_[size_t(dst_index_)].second.get_size());
    for (size_t i = 0; i < bound_.size(); ++i)
      if (runtime_args_[i].first != kNotBound) bound_[i].set_data_handle(args[i]);
    dnnl::error::wrap_c_api(dnnl_primitive_execute(primitive_.get(), stream_.get(), int(exec_args_.size()), exec_args_.data()),
                            "could not execute a primitive");
    stream_.wait();
  } catch (const dnnl::error& e) {
    ir::fail(ir::ErrorKind::Internal, std::string("oneDNN primitive failed: ") + e.what());
  }
}

}  // namespace kiln::cpu
