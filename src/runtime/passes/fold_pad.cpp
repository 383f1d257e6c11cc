// PyTorch exports avg_pool2d(padding=1) as Pad -> AveragePool, and models
// converted from TensorFlow pad explicitly before their convolutions. A Pad
// of zeros on the spatial axes read only by a Conv or an AveragePool becomes
// that node's own padding, which its kernel applies without a copy.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/passes/pad_amounts.hpp"
#include "runtime/passes/passes.hpp"

namespace kiln::passes {

namespace {

class PadFolder {
 public:
  explicit PadFolder(ir::Graph& graph) : g_(graph), uses_(ir::use_counts(graph)) {}

  // The pads of a constant-mode Pad of zeros that touches neither the batch
  // nor the channel axis, as [begin..., end...], or nothing.
  std::optional<std::vector<int64_t>> spatial_zero_pads(const ir::Node& pad) const {
    if (pad.op_type != "Pad" || !pad.domain.empty() || pad.outputs.size() != 1) return std::nullopt;
    if (const ir::Attribute* mode = pad.attr("mode"); mode && mode->s != "constant") return std::nullopt;
    if (pad.opset < 11) {
      if (const ir::Attribute* value = pad.attr("value"); value && value->f != 0) return std::nullopt;
    } else {
      if (pad.inputs.size() > 3 && !pad.inputs[3].empty()) return std::nullopt;  // axes: not exported by the cases above
      if (pad.inputs.size() > 2 && !pad.inputs[2].empty()) {
        const ir::Tensor* value = g_.constant(pad.inputs[2]);
        if (!value || value->numel() != 1 || value->as_double(0) != 0) return std::nullopt;
      }
    }
    auto pads = pad_amounts(g_, pad);
    const size_t rank = pads ? pads->size() / 2 : 0;
    if (!pads || pads->size() % 2 || rank < 3) return std::nullopt;
    for (size_t i = 0; i < pads->size(); ++i) {
      const bool batch_or_channel = i % rank < 2;
      if ((*pads)[i] < 0 || (batch_or_channel && (*pads)[i] != 0)) return std::nullopt;
    }
    return pads;
  }

  // Whether `consumer` can take the Pad's `pads` as its own.
  bool absorbs(const ir::Node& consumer, size_t rank) const {
    if (!consumer.domain.empty() || consumer.inputs.empty()) return false;
    if (const ir::Attribute* a = consumer.attr("auto_pad"); a && a->s != "NOTSET") return false;
    if (const ir::Attribute* p = consumer.attr("pads"); p && p->ints.size() != 2 * (rank - 2)) return false;
    if (consumer.op_type == "Conv") return true;
    if (consumer.op_type != "AveragePool") return false;
    // The padded zeros count in the average; they still do as the pool's
    // padding with count_include_pad. Its own padding must have counted too.
    if (const ir::Attribute* c = consumer.attr("ceil_mode"); c && c->i != 0) return false;
    const ir::Attribute* include = consumer.attr("count_include_pad");
    if (include && include->i != 0) return true;
    if (const ir::Attribute* p = consumer.attr("pads"))
      for (int64_t v : p->ints)
        if (v != 0) return false;
    return true;
  }

  int run() {
    std::map<std::string, size_t> reader;  // value -> the node reading it as input 0
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      if (!g_.nodes[i].inputs.empty()) reader.emplace(g_.nodes[i].inputs[0], i);
    std::vector<bool> removed(g_.nodes.size(), false);
    int folded = 0;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const ir::Node& pad = g_.nodes[i];
      const auto pads = spatial_zero_pads(pad);
      if (!pads || uses_[pad.outputs[0]] != 1) continue;
      auto r = reader.find(pad.outputs[0]);
      if (r == reader.end()) continue;
      ir::Node& consumer = g_.nodes[r->second];
      const size_t rank = pads->size() / 2, spatial = rank - 2;
      if (!absorbs(consumer, rank)) continue;
      const ir::Attribute* own = consumer.attr("pads");
      std::vector<int64_t> merged = own ? own->ints : std::vector<int64_t>(2 * spatial, 0);
      for (size_t d = 0; d < spatial; ++d) {
        merged[d] += (*pads)[2 + d];
        merged[spatial + d] += (*pads)[rank + 2 + d];
      }
      consumer.attributes["pads"] = ir::ints_attribute(std::move(merged));
      if (consumer.op_type == "AveragePool") consumer.attributes["count_include_pad"] = ir::int_attribute(1);
      consumer.inputs[0] = pad.inputs[0];
      removed[i] = true;
      ++folded;
    }
    ir::erase_nodes(g_, removed);
    return folded;
  }

 private:
  ir::Graph& g_;
  std::map<std::string, int> uses_;
};

}  // namespace

int fold_pad(ir::Graph& graph) { return PadFolder(graph).run(); }

}  // namespace kiln::passes
