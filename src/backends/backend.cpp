// What every backend shares, whichever are built in: the defaults of the
// Backend and Executable contract, and the artifact's copy to memory. Apart
// from the registry, so that a program may use backends without linking the
// cpu backend (the plugin artifacts' fuzz target).
#include <cstdlib>
#include <cstring>

#include "backends/backend.hpp"
#include "backends/reference/reference_backend.hpp"
#include "runtime/ir/huge_pages.hpp"

namespace kiln::backends {

void check_output_buffers(const std::vector<ir::Tensor>& outputs, const std::vector<ir::DType>& dtypes,
                          const std::vector<ir::Dims>& dims, const std::vector<std::string>& names) {
  for (size_t i = 0; i < outputs.size() && i < dims.size(); ++i)
    if (outputs[i].dtype() != dtypes[i] || outputs[i].dims() != dims[i])
      ir::fail(ir::ErrorKind::InvalidArgument, "output '" + names[i] + "' is " + ir::dtype_name(dtypes[i]) + " " +
                                                   ir::dims_to_string(dims[i]) + ", the buffer given for it is " +
                                                   ir::dtype_name(outputs[i].dtype()) + " " +
                                                   ir::dims_to_string(outputs[i].dims()));
}

void Executable::run_into(const std::map<std::string, ir::Tensor>& inputs, std::vector<ir::Tensor>& outputs) const {
  std::vector<ir::Tensor> produced = run(inputs);
  std::vector<ir::DType> dtypes;
  std::vector<ir::Dims> dims;
  std::vector<std::string> names;
  for (size_t i = 0; i < produced.size(); ++i) {
    dtypes.push_back(produced[i].dtype());
    dims.push_back(produced[i].dims());
    names.push_back(std::string("#").append(std::to_string(i)));  // not "#" + ...: GCC 12 warns falsely (-Wrestrict)
  }
  if (outputs.size() != produced.size())
    ir::fail(ir::ErrorKind::InvalidArgument,
             std::to_string(outputs.size()) + " output buffers for " + std::to_string(produced.size()) + " outputs");
  check_output_buffers(outputs, dtypes, dims, names);
  for (size_t i = 0; i < produced.size(); ++i) std::memcpy(outputs[i].raw(), produced[i].raw(), produced[i].nbytes());
}

LoadedArtifact copy_to_memory(const Artifact& artifact) {
  const size_t weights_at = (artifact.object.size() + artifact.program.size() + 63) / 64 * 64;
  const size_t bytes = weights_at + size_t(artifact.weights_bytes);
  std::shared_ptr<char> block(static_cast<char*>(ir::allocate_buffer(bytes)), &std::free);
  if (!block) ir::fail(ir::ErrorKind::Internal, "cannot allocate " + std::to_string(bytes) + " bytes for an artifact");
  char* p = block.get();
  std::memcpy(p, artifact.object.data(), artifact.object.size());
  std::memcpy(p + artifact.object.size(), artifact.program.data(), artifact.program.size());
  for (size_t i = 0; i < artifact.weights.size(); ++i)
    if (artifact.weights[i].second)
      std::memcpy(p + weights_at + artifact.weight_offsets[i], artifact.weights[i].first, artifact.weights[i].second);
  LoadedArtifact loaded;
  loaded.object = std::string_view(p, artifact.object.size());
  loaded.program = std::string_view(p + artifact.object.size(), artifact.program.size());
  loaded.weights = p + weights_at;
  loaded.weights_bytes = size_t(artifact.weights_bytes);
  loaded.keep_alive = std::move(block);
  return loaded;
}

std::vector<ir::Value> Executable::run_values(const std::map<std::string, ir::Value>& inputs) const {
  std::map<std::string, ir::Tensor> tensors;
  for (const auto& [name, v] : inputs) {
    if (!v.is_tensor())
      ir::fail(ir::ErrorKind::Internal, "input '" + name + "' is " + v.describe() + ", and this backend runs tensors only");
    tensors.emplace(name, v.tensor);
  }
  std::vector<ir::Tensor> produced = run(tensors);
  return {produced.begin(), produced.end()};
}

std::unique_ptr<Backend> Backend::fallback() const { return make_reference_backend(); }

std::vector<int64_t> Backend::claim(const ir::Graph& graph, const ir::Specialization& spec) const {
  std::vector<int64_t> groups(graph.nodes.size(), -1);
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    if (takes(graph.nodes[i], spec)) groups[i] = 0;
  return groups;
}

Artifact Executable::save() const {
  ir::fail(ir::ErrorKind::Unsupported, "this specialization runs on the reference executor, which keeps no compiled code");
}

std::unique_ptr<Executable> Backend::load(const LoadedArtifact&, std::shared_ptr<const ir::Graph>, const CompileOptions&) const {
  ir::fail(ir::ErrorKind::Unsupported, "backend '" + name() + "' does not load cached code");
}

std::string Backend::identity(const CompileOptions& options) const {
  return name() + " " + version() + " threads=" + std::to_string(options.threads) + " kernels=" + options.kernels +
         (options.precision == "fp32" ? "" : " precision=" + options.precision);
}

}  // namespace kiln::backends
