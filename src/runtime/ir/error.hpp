#pragma once
// The one exception type used inside the library. The public API turns it into
// kiln::Error (C++) or a status code plus message (C); nothing else escapes.
#include <stdexcept>
#include <string>

namespace kiln::ir {

enum class ErrorKind {
  InvalidModel,     // malformed or inconsistent model file
  Unsupported,      // valid ONNX we do not implement (op, dtype, domain)
  InvalidArgument,  // wrong input from the caller (name, dtype, shape)
  Io,               // file system
  Internal,
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

[[noreturn]] inline void fail(ErrorKind kind, const std::string& message) { throw Error(kind, message); }

}  // namespace kiln::ir
