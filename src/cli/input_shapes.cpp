// The input shapes of one specialization from --shape and --dim options.
#include "cli/commands.hpp"
#include "kiln/kiln.hpp"

namespace kiln::cli {

std::vector<std::pair<std::string, Shape>> input_shapes(const Model& model, const std::vector<std::string>& shape_options,
                                                        const std::map<std::string, int64_t>& dims) {
  std::map<std::string, Shape> given;
  for (const auto& s : shape_options) {
    auto [name, text] = split_assignment(s, "--shape");
    given[name] = parse_shape(text, "--shape " + s);
  }
  std::vector<std::pair<std::string, Shape>> shapes;
  for (const auto& info : model.inputs()) {
    if (auto it = given.find(info.name); it != given.end()) {
      shapes.push_back(*it);
      given.erase(it);
      continue;
    }
    if (info.has_default) continue;
    if (!info.rank_known)
      throw Error(ErrorCode::InvalidArgument,
                  "input '" + info.name + "' has no declared shape: pass --shape " + info.name + "=DIMS");
    Shape shape;
    for (const Dim& d : info.shape) {
      if (d.is_fixed())
        shape.push_back(d.value);
      else if (!d.symbol.empty() && dims.count(d.symbol))
        shape.push_back(dims.at(d.symbol));
      else
        throw Error(ErrorCode::InvalidArgument, "input '" + info.name + "' " + info.shape_string() + ": pass --shape " +
                                                    info.name + "=DIMS" +
                                                    (d.symbol.empty() ? "" : " or --dim " + d.symbol + "=N"));
    }
    shapes.push_back({info.name, shape});
  }
  if (!given.empty())
    throw Error(ErrorCode::InvalidArgument, "--shape names '" + given.begin()->first + "', which is not an input of the model");
  return shapes;
}

}  // namespace kiln::cli
