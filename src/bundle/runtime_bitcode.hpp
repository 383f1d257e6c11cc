#pragma once
// The bundle runtimes (src/bundle/runtime/) as bitcode, embedded in libkiln:
// bundle_runtime.c for every target architecture, bundle_native.c for the
// host's only (native bundles link the host's libdnnl).
namespace llvm {
class Module;
}

namespace kiln::bundle {

// Links the bundle runtime into `m`, for the module's target triple. Throws
// ir::Error(Unsupported) if there is no bitcode for the triple's
// architecture, Internal if it does not link.
void link_bundle_runtime(llvm::Module& m);

// The same for native bundles' oneDNN runtime.
void link_native_runtime(llvm::Module& m);

}  // namespace kiln::bundle
