#pragma once
#include <memory>

#include "backends/backend.hpp"

namespace kiln::backends {

std::unique_ptr<Backend> make_reference_backend();

}  // namespace kiln::backends
