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
}

void OneDnnKernel::run(void* const* args) const {
  try {
    // The sum post-op adds what the destination holds: put the residual there.
    if (sum_from_ >= 0 && args[sum_from_] != args[dst_index_])
      std::memcpy(args[dst_index_], args[sum_from_], runtime_args_[size_t(dst_index_)].second.get_size());
    std::unordered_map<int, dnnl::memory> exec = constant_args_;
    for (size_t i = 0; i < runtime_args_.size(); ++i) {
      if (runtime_args_[i].first == kNotBound) continue;
      exec.emplace(runtime_args_[i].first, dnnl::memory(runtime_args_[i].second, cpu_engine(), args[i]));
    }
    dnnl::stream stream(cpu_engine());
    primitive_.execute(stream, exec);
    stream.wait();
  } catch (const dnnl::error& e) {
    ir::fail(ir::ErrorKind::Internal, std::string("oneDNN primitive failed: ") + e.what());
  }
}

}  // namespace kiln::cpu
