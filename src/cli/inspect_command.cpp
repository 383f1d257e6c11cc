// kiln inspect MODEL [--plugin PATH]... [--shape NAME=DIMS]... [--dim SYMBOL=N]... [--json]:
// what a model takes, gives and needs, and, for concrete input shapes, which
// backend takes each node.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "kiln/kiln.hpp"

namespace kiln::cli {

namespace {

struct InspectArgs {
  std::string model;
  std::vector<std::string> plugins, shapes, dims;
  std::string backend = "cpu";
  bool json = false;
};

nlohmann::json info_json(const TensorInfo& t) {
  nlohmann::json shape = nlohmann::json::array();
  for (const auto& d : t.shape) {
    if (d.is_fixed())
      shape.push_back(d.value);
    else
      shape.push_back(d.symbol.empty() ? nlohmann::json(nullptr) : nlohmann::json(d.symbol));
  }
  nlohmann::json j = {
      {"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", t.rank_known ? shape : nlohmann::json(nullptr)}};
  if (t.has_default) j["has_default"] = true;
  return j;
}

void inspect(const InspectArgs& args) {
  RuntimeOptions opts;
  opts.log_level = LogLevel::Error;
  opts.plugins = args.plugins;
  opts.backend = args.backend;
  opts.cache = false;
  Runtime runtime(opts);
  Model model = Model::load(runtime, args.model);
  // The node x backend table needs concrete shapes: declared ones, or given.
  std::vector<NodePlacement> placement;
  std::string no_placement;
  try {
    placement = model.placement(input_shapes(model, args.shapes, parse_dims(args.dims, model.inputs())));
  } catch (const Error& e) {
    if (!args.shapes.empty() || !args.dims.empty()) throw;  // asked for: its error is the answer
    no_placement = e.what();
  }
  auto hist = model.op_histogram();
  auto unsupported = model.unsupported_ops();
  int nodes = 0;
  for (const auto& [op, n] : hist) nodes += n;

  if (args.json) {
    nlohmann::json j;
    j["model"] = model.source();
    j["producer"] = model.producer();
    j["opset"] = model.opset();
    j["inputs"] = nlohmann::json::array();
    for (const auto& t : model.inputs()) j["inputs"].push_back(info_json(t));
    j["outputs"] = nlohmann::json::array();
    for (const auto& t : model.outputs()) j["outputs"].push_back(info_json(t));
    j["nodes"] = nodes;
    j["operators"] = hist;
    j["unsupported"] = unsupported;
    j["supported"] = unsupported.empty();
    j["placement"] = nlohmann::json::array();
    for (const auto& p : placement) j["placement"].push_back({{"node", p.node}, {"op_type", p.op_type}, {"backend", p.backend}});
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::cout << "model     " << model.source() << "\n";
  if (!model.producer().empty()) std::cout << "producer  " << model.producer() << "\n";
  std::cout << "opset     " << model.opset() << "\n";
  std::cout << "inputs\n";
  for (const auto& t : model.inputs())
    std::cout << "  " << t.name << "  " << dtype_name(t.dtype) << " " << t.shape_string()
              << (t.has_default ? "  (optional, has a default)" : "") << "\n";
  std::cout << "outputs\n";
  for (const auto& t : model.outputs())
    std::cout << "  " << t.name << "  " << dtype_name(t.dtype) << " " << t.shape_string() << "\n";
  std::cout << "operators (" << nodes << " nodes)\n";
  for (const auto& [op, n] : hist) {
    bool ok = std::find(unsupported.begin(), unsupported.end(), op) == unsupported.end();
    std::printf("  %-28s %5d  %s\n", op.c_str(), n, ok ? "supported" : "UNSUPPORTED");
  }
  if (unsupported.empty()) {
    std::cout << "all operators are supported\n";
  } else {
    std::cout << unsupported.size() << " operator type(s) unsupported:";
    for (const auto& op : unsupported) std::cout << " " << op;
    std::cout << "\n";
  }
  if (placement.empty()) {
    std::cout << "backends: " << no_placement << "\n";
    return;
  }
  // Operator x backend: how many nodes of each operator each backend takes.
  std::map<std::string, std::map<std::string, int>> table;
  std::vector<std::string> backends;
  for (const auto& p : placement) {
    table[p.op_type][p.backend]++;
    if (std::find(backends.begin(), backends.end(), p.backend) == backends.end()) backends.push_back(p.backend);
  }
  std::cout << "backends (" << placement.size() << " nodes after graph passes)\n";
  std::printf("  %-28s", "operator");
  for (const auto& b : backends) std::printf(" %12s", b.c_str());
  std::printf("\n");
  for (const auto& [op, by] : table) {
    std::printf("  %-28s", op.c_str());
    for (const auto& b : backends) by.count(b) ? std::printf(" %12d", by.at(b)) : std::printf(" %12s", "-");
    std::printf("\n");
  }
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  auto* cmd =
      app.add_subcommand("inspect", "Show a model's opset, inputs, outputs and operators, and which operators are unsupported");
  cmd->add_option("MODEL", args->model, "ONNX model file")->required();
  cmd->add_option("--plugin", args->plugins,
                  "backend plugin: a shared library or a directory of them (repeatable; also $KILN_PLUGIN_PATH)");
  cmd->add_option("--backend", args->backend, "backend: cpu, reference or a plugin's name");
  cmd->add_option("--shape", args->shapes, "NAME=1x3x224x224: an input's shape, for the node x backend table");
  cmd->add_option("--dim", args->dims, "SYMBOL=VALUE for symbolic dimensions, for the node x backend table");
  cmd->add_flag("--json", args->json, "print JSON instead of a table");
  cmd->callback([args] { inspect(*args); });
}

}  // namespace kiln::cli
