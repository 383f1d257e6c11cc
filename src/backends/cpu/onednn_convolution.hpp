#pragma once
// A convolution run by oneDNN: the primitive is created once, for fixed
// shapes, with its fused post-ops, and the weights are reordered once into
// the layout oneDNN prefers. Activations are plain NC(D)(H)W for now.
//
// oneDNN headers stay in the .cpp so that the rest of the backend does not
// depend on them.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::cpu {

// A step applied to the convolution's result, in order: an elementwise
// activation or the addition of a residual tensor of the output's shape.
struct PostOp {
  enum class Kind { Relu, LeakyRelu, Clip, Sigmoid, Tanh, HardSwish, GeluErf, Silu, Sum };
  Kind kind = Kind::Relu;
  float alpha = 0;  // LeakyRelu slope, Clip min
  float beta = 0;   // Clip max
};

struct ConvolutionShape {
  std::vector<int64_t> input;    // N, C, spatial...
  std::vector<int64_t> weights;  // M, C/group, kernel...
  std::vector<int64_t> strides, dilations;  // ONNX convention: 1 = dense
  std::vector<int64_t> pads_begin, pads_end;
  int64_t group = 1;
  std::vector<int64_t> output() const;
};

class OneDnnConvolution {
 public:
  // float32 only. Throws ir::Error when oneDNN rejects the configuration.
  OneDnnConvolution(const ConvolutionShape& shape, const float* weights, const float* bias,
                    const std::vector<PostOp>& post_ops);
  ~OneDnnConvolution();
  OneDnnConvolution(const OneDnnConvolution&) = delete;
  OneDnnConvolution& operator=(const OneDnnConvolution&) = delete;

  // `residual` (the output's shape) is required iff a Sum post-op was given.
  // Safe to call from several threads at once.
  void run(const float* input, float* output, const float* residual = nullptr) const;

  // oneDNN's name for the implementation it chose ("brg:avx512_core", ...).
  std::string implementation() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::cpu
