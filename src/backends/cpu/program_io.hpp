#pragma once
// A lowered Program as bytes, for the on-disk cache: its buffers, steps
// (kernels as data, loops as their code), inputs, outputs and memory plan,
// in CBOR, plus the constant bytes it points at. Loading makes every kernel
// again (oneDNN primitives are recreated, never recompiled) with constants
// pointing into the loaded weights; no graph pass, lowering or codegen runs.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "backends/cpu/jit.hpp"
#include "backends/cpu/program.hpp"
#include "runtime/ir/graph.hpp"

namespace kiln::cpu {

struct SavedProgram {
  std::string bytes;  // CBOR and blocks (backends/program_blocks.hpp)
  WeightsWriter weights;
  std::string summary;  // JSON for the cache manifest: the memory plan and the steps, readable
};

// `kernel_objects`: the portable kernels the program's calls link against,
// kept with it; `loops_object`: its loops' object (ProgramObjects::loops),
// kept with it. Throws ir::Error(Unsupported) if a step cannot be saved,
// saying which and why.
SavedProgram save_program(const Program& program, const std::vector<std::string>& step_symbols,
                          const Jit::KernelObjects& kernel_objects = {}, std::string_view loops_object = {});

// `graph`: the model's graph, for the initializers behind inputs with
// defaults. `keep_alive` owns the weights' memory (constants view it).
// `kernel_objects` receives the saved portable kernels (none if none), and
// `loops_object` the loops' object ("" if none).
// Throws ir::Error(InvalidModel) naming what is inconsistent. Remaking the
// kernels (oneDNN creating its primitives: most of a load) is independent
// work per kernel, handed to `run_all`, which may run it on any threads;
// by default it runs on the calling one.
// `bodies` loads the bodies of control-flow steps (a program with such steps
// fails to load without it).
using RunAll = std::function<void(DeferredWork&)>;
class BodyCompiler;
Program load_program(std::string_view bytes, const WeightsReader& weights, std::shared_ptr<void> keep_alive,
                     const ir::Graph& graph, std::vector<std::string>& step_symbols, Jit::KernelObjects* kernel_objects = nullptr,
                     const RunAll& run_all = nullptr, std::string* loops_object = nullptr, const BodyCompiler* bodies = nullptr);

}  // namespace kiln::cpu
