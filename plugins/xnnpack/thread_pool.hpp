// XNNPACK on the host's threads.
//
// XNNPACK splits its work through pthreadpool's C API (the
// pthreadpool_parallelize_* functions, resolved when libXNNPACK is loaded).
// This plugin defines those functions itself, over the host's
// kiln_backend_threads::parallel_for, and hands XNNPACK a pthreadpool_t
// that is really the host's threads of the current run: XNNPACK runs on the
// Runtime's threads, within its budget, and no thread is started (the ABI
// forbids a plugin threads of its own). PyTorch drives its XNNPACK the same
// way, with its own implementation of this API.
//
// That works when libXNNPACK's calls bind to this plugin's definitions: the
// usual case, since the host opens a plugin with RTLD_LOCAL and libXNNPACK
// is loaded as this plugin's dependency, after it. If another
// pthreadpool was loaded into the process first (preloaded, or linked by
// the application), XNNPACK would call that one: reached() says so, and the
// plugin then gives XNNPACK no pool at all, which every pthreadpool
// implementation runs on the calling thread alone (slower, still within the
// budget, never another library's threads).
#pragma once

#include <string>

#include <pthreadpool.h>

#include "kiln/backend.h"

// The pool XNNPACK is given: the threads of the run in progress (set by
// whoever runs the XNNPACK runtime, which one run uses at a time).
struct pthreadpool {
  const kiln_backend_threads* threads = nullptr;
};

namespace kiln_xnnpack {

// Whether libXNNPACK's pthreadpool calls reach this plugin; if not, *why says what they reach.
bool pool_reached(std::string* why);

}  // namespace kiln_xnnpack
