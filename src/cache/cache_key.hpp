#pragma once
// The key of a cache entry: a hash over everything that decides the code a
// specialization compiles to. Two keys are equal only if the model content,
// the input shapes and dtypes, the backend with its version, options, target
// and CPU, and the Kiln build itself are all equal.
#include <string>

#include <nlohmann/json.hpp>

namespace kiln::cache {

// XXH3-128 of the bytes, as 32 hex digits.
std::string hash_hex(const void* data, size_t size);

// The same over bytes that come in pieces.
class Hasher {
 public:
  Hasher();
  ~Hasher();
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;
  void update(const void* data, size_t size);
  std::string hex() const;

 private:
  void* state_;
};

// The identity of this Kiln build: the GNU build-id of the binary holding
// this code (libkiln), or a hash of that file if it has none; "" if neither
// can be found (then nothing may be cached). Computed once.
const std::string& build_id();

struct KeyInputs {
  std::string model_hash;        // ir::Model::content_hash
  std::string model_source;      // for people only: not hashed (a moved file is the same model)
  std::string specialization;    // "image:float32:1x3x224x224"
  std::string backend_identity;  // Backend::identity(): backend, version, options, target, CPU, libraries
};

struct Key {
  std::string hex;          // the entry's name
  nlohmann::json readable;  // the inputs, for the manifest and `kiln cache ls`
};

Key make_key(const KeyInputs& in);

}  // namespace kiln::cache
