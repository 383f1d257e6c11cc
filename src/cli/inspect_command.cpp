// kiln inspect MODEL [--json]: what a model takes, gives and needs.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "kiln/kiln.hpp"

namespace kiln::cli {

namespace {

struct InspectArgs {
  std::string model;
  bool json = false;
};

nlohmann::json info_json(const TensorInfo& t) {
  nlohmann::json shape = nlohmann::json::array();
  for (const auto& d : t.shape) {
    if (d.is_fixed()) shape.push_back(d.value);
    else shape.push_back(d.symbol.empty() ? nlohmann::json(nullptr) : nlohmann::json(d.symbol));
  }
  nlohmann::json j = {{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", t.rank_known ? shape : nlohmann::json(nullptr)}};
  if (t.has_default) j["has_default"] = true;
  return j;
}

void inspect(const InspectArgs& args) {
  RuntimeOptions opts;
  opts.log_level = LogLevel::Error;
  Runtime runtime(opts);
  Model model = Model::load(runtime, args.model);
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
  for (const auto& t : model.outputs()) std::cout << "  " << t.name << "  " << dtype_name(t.dtype) << " " << t.shape_string() << "\n";
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
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  auto* cmd = app.add_subcommand("inspect", "Show a model's opset, inputs, outputs and operators, and which operators are unsupported");
  cmd->add_option("MODEL", args->model, "ONNX model file")->required();
  cmd->add_flag("--json", args->json, "print JSON instead of a table");
  cmd->callback([args] { inspect(*args); });
}

}  // namespace kiln::cli
