#pragma once
// Reading and writing NumPy .npy files (format versions 1.0-3.0, little-endian,
// C order) for the kiln command and the tests.
#include <string>

#include "kiln/kiln.hpp"

namespace kiln::npy {

// Throws kiln::Error with the file name and what is wrong.
Tensor load(const std::string& path);
void save(const std::string& path, const Tensor& tensor);

}  // namespace kiln::npy
