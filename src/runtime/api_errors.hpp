#pragma once
// Internal errors (ir::Error) become the public kiln::Error at the API's
// edge: every public entry point of the C++ API runs its body through
// translate_errors.
#include <new>
#include <stdexcept>

#include "kiln/kiln.hpp"
#include "runtime/ir/error.hpp"

namespace kiln {

inline ErrorCode to_code(ir::ErrorKind k) {
  switch (k) {
    case ir::ErrorKind::InvalidModel: return ErrorCode::InvalidModel;
    case ir::ErrorKind::Unsupported: return ErrorCode::Unsupported;
    case ir::ErrorKind::InvalidArgument: return ErrorCode::InvalidArgument;
    case ir::ErrorKind::Io: return ErrorCode::Io;
    case ir::ErrorKind::Internal: return ErrorCode::Internal;
  }
  return ErrorCode::Internal;
}

// Runs f, turning every internal failure into kiln::Error.
template <typename F>
decltype(auto) translate_errors(F&& f) {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const ir::Error& e) {
    throw Error(to_code(e.kind()), e.what());
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::Internal, "out of memory");
  } catch (const std::exception& e) {
    throw Error(ErrorCode::Internal, e.what());
  }
}

}  // namespace kiln
