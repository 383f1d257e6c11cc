// The backends built into libkiln. Plugins (a later issue) join here.
#include "backends/backend.hpp"

#include "backends/cpu/cpu_backend.hpp"
#include "backends/reference/reference_backend.hpp"

namespace kiln::backends {

std::unique_ptr<Backend> make_backend(const std::string& name, int threads) {
  if (name == "cpu") return make_cpu_backend(threads);
  if (name == "reference") return make_reference_backend();
  return nullptr;
}

std::vector<std::string> backend_names() { return {"cpu", "reference"}; }

}  // namespace kiln::backends
