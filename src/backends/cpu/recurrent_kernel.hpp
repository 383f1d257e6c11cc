#pragma once
// RNN, GRU and LSTM in float32: the input projection of every time step in
// one oneDNN matmul, then per step one small matmul with the recurrent
// weights and the gates in vector code. Directions and groups of batch rows
// (independent recurrences) run in parallel on the run's OpenMP team.
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/program.hpp"

namespace kiln::cpu {

// The layer, as the lowering read it off the node.
struct RecurrentLayer {
  enum class Cell { Rnn, Gru, Lstm };
  // The activation functions ONNX allows, with their alpha and beta.
  enum class Act { Sigmoid, Tanh, Relu, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus };
  struct Activation {
    Act act = Act::Sigmoid;
    float alpha = 0, beta = 0;
  };

  Cell cell = Cell::Lstm;
  int64_t seq = 0, batch = 0, input = 0, hidden = 0, directions = 1;
  bool reverse = false;      // direction "reverse" (a bidirectional layer's second runs backwards)
  bool batch_major = false;  // layout 1: X [batch, seq, input], Y [batch, seq, directions, hidden]
  bool linear_before_reset = false, input_forget = false;
  float clip = 0;                            // none when <= 0
  std::vector<Activation> activations;       // per direction: f, g (GRU, LSTM), h (LSTM)
  bool sequence_lens = false;                // the node has them: rows of different lengths may come
  bool sequence_lens_int64 = false;          // else int32
  bool y = false, y_h = false, y_c = false;  // the outputs wanted
  int64_t chunks = 1;                        // groups of batch rows per direction, run in parallel

  int64_t gates() const { return cell == Cell::Lstm ? 4 : cell == Cell::Gru ? 3 : 1; }
  int64_t activations_per_direction() const { return cell == Cell::Lstm ? 3 : cell == Cell::Gru ? 2 : 1; }
  // initial_h, initial_c, Y_h and Y_c.
  std::vector<int64_t> state_dims() const {
    return batch_major ? std::vector<int64_t>{batch, directions, hidden} : std::vector<int64_t>{directions, batch, hidden};
  }
};

// A oneDNN matmul the kernel runs, with where its scratchpad starts in the
// kernel's scratch (bytes; each product has its own, as they run at once).
struct RecurrentProduct {
  std::unique_ptr<Kernel> kernel;  // a OneDnnKernel: args source, destination[, scratchpad]
  int64_t scratchpad = -1;         // none when < 0
};

// The products, as the lowering made them (weights reordered once for
// oneDNN's packed layout): `projection` X [seq * batch, input] times every
// direction's W, plus the biases, into the gates [seq * batch, directions *
// gates * hidden]; `steps` a state [rows, hidden] times one direction's R
// into [rows, gates * hidden], for item (d, part) at (d * parts + part) *
// per_item (a GRU whose reset comes first has two per item: the update and
// reset gates, then the hidden gate), followed, when the node has
// sequence_lens, by one single-row item per direction.
// args: X, R's bias of a GRU's hidden gate ([directions, hidden]: used only
// with linear_before_reset), sequence_lens, initial_h and, for LSTM,
// initial_c and P (the lowering passes constants for those the node lacks),
// then the outputs Y, Y_h, Y_c that are wanted, then the scratch.
class RecurrentKernel : public Kernel {
 public:
  RecurrentKernel(std::string node, RecurrentLayer layer, RecurrentProduct projection, std::vector<RecurrentProduct> steps);
  void run(void* const* args) const override;
  void save(nlohmann::json& out, WeightsWriter& weights, BlockWriter& blocks) const override;
  static std::unique_ptr<Kernel> load(const nlohmann::json& j, const WeightsReader& weights, const BlockReader& blocks,
                                      const std::string& what);

  // The kernel's name of an ONNX activation, in lower case as
  // ref::recurrent_activations gives it; false if it has none.
  static bool activation_named(const std::string& name, RecurrentLayer::Act& act);
  // Products per item: 2 for a GRU without linear_before_reset.
  static int64_t products_per_item(const RecurrentLayer& l);
  // The state floats the kernel's scratch begins with; the products'
  // scratchpads follow, from the next multiple of 64 bytes.
  static int64_t state_floats(const RecurrentLayer& l);

 private:
  std::string node_;
  RecurrentLayer l_;
  RecurrentProduct projection_;
  std::vector<RecurrentProduct> steps_;
};

}  // namespace kiln::cpu
