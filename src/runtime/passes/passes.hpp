#pragma once
// Graph passes: IR -> IR rewrites that keep the graph's meaning. Each returns
// how many nodes it changed, so a pipeline can report what it did.
#include <map>
#include <string>

#include "runtime/ir/graph.hpp"
#include "runtime/ir/shape_inference.hpp"

namespace kiln::passes {

// Replaces nodes whose inputs are all constants (initializers that are not
// graph inputs) by initializers holding their results, in topological order,
// so chains fold completely. Skips random ops, subgraph ops and results
// larger than `max_elements`.
int fold_constants(ir::Graph& graph, const ir::ConstantEvaluator& evaluator, int64_t max_elements = int64_t(1) << 24);

// Replaces every node whose outputs are all known (e.g. the constants a
// specialization computed: Shape -> Gather -> Concat on concrete shapes) by
// initializers holding those values.
int bake_constants(ir::Graph& graph, const std::map<std::string, ir::Tensor>& constants, int64_t max_elements = int64_t(1) << 24);

// Removes nodes none of whose outputs reach a graph output, and initializers
// nothing uses.
int remove_dead_nodes(ir::Graph& graph);

// A Conv whose only consumer is an inference-mode BatchNormalization, all
// parameters constant: the normalisation is folded into the convolution's
// weights and bias and the BatchNormalization node disappears. The new
// weights get their types in `spec`.
int fold_batch_norm(ir::Graph& graph, ir::Specialization& spec);

// Conv, MatMul and Gemm between DequantizeLinear nodes (8-bit activations,
// int8 weights symmetric about zero, per tensor or per output channel) whose
// result only a per-tensor QuantizeLinear reads, possibly through a Relu its
// saturation implies, become QLinearConv, QLinearMatMul and com.microsoft's
// QGemm; a float bias becomes int32 at the product's scale. An Add of two
// dequantized tensors, one of the result's shape, quantized (through a Relu
// likewise), becomes com.microsoft's QLinearAdd. A MaxPool between a
// DequantizeLinear and a QuantizeLinear of the same parameters pools the
// quantized values, and a QuantizeLinear of a DequantizeLinear with the same
// parameters is bypassed. New values get
// their types in `spec`.
// Only where int8_products_exact says the int8 kernels compute the same
// sums as the reference.
int fuse_qdq(ir::Graph& graph, ir::Specialization& spec);

// Whether oneDNN's int8 kernels compute int8 `weights` times 8-bit
// activations of type `activations` exactly on this CPU. With VNNI they
// always do. Without it (AVX2, AVX-512 before VNNI) they multiply with
// vpmaddubsw, which adds two products into 16 bits with saturation: exact
// for uint8 activations and weights within +-64 (255 * 64 * 2 < 2^15), not
// otherwise (and int8 activations get their weights halved). ONNX Runtime
// accepts the saturation there and documents it; Kiln keeps such an
// operator in float, where it gives the quantized model's own results.
bool int8_products_exact(ir::DType activations, const ir::Tensor& weights);

// A constant Pad of zeros on the spatial axes whose only reader is a Conv or
// an AveragePool (where the zeros counted in the average) becomes that
// node's padding.
int fold_pad(ir::Graph& graph);

// Every other inference-mode BatchNormalization with constant parameters on
// an input with spatial axes becomes a depthwise 1x1 Conv (weights
// scale / sqrt(var + eps), bias B - mean * that), which backends compile
// like any convolution, fusing the activation that follows.
int batch_norm_as_conv(ir::Graph& graph, ir::Specialization& spec);

// A float Concat along channels whose only reader is a MaxPool moves after
// it (a MaxPool per part); one whose only reader is a Conv (group 1,
// constant weights) becomes a Conv per part, with the weights split by
// input channel, summed by Adds. Adds the new values' types to `spec`.
int distribute_concat(ir::Graph& graph, ir::Specialization& spec);

// Nodes that at the specialization's shapes return their input unchanged
// become Identity: a Pad of zeros, a Slice of everything, an Expand or Tile
// to the same shape, a Cast to the same type, a Transpose that keeps the order,
// a Dropout that does not train (its mask, if named, becomes an initializer
// of ones).
int no_ops_as_identity(ir::Graph& graph, const ir::Specialization& spec);

// A float ReduceMean or ReduceMax over every spatial axis (2 and on, axes
// constant) becomes GlobalAveragePool or GlobalMaxPool; without keepdims,
// followed by a Flatten to N x C. Adds the new value's type to `spec`.
int reduce_as_global_pool(ir::Graph& graph, ir::Specialization& spec);

// Every If whose condition is one of `constants` (a specialization's)
// replaced by the nodes of the branch it takes, under names of their own,
// and Identity nodes giving the If's outputs; a branch whose nodes hold
// subgraphs stays an If. Whether any changed: the graph then needs
// specializing again, as its new values have no types yet.
bool inline_constant_ifs(ir::Graph& graph, const std::map<std::string, ir::Tensor>& constants);

// The passes a specialization runs before its backend compiles it:
// quantized operators fused (before constant folding dequantizes their
// weights), specialization constants baked in, constant folding, Pads folded,
// BatchNormalization folded or made a Conv, Concats distributed, spatial
// reductions made global pools, no-ops made Identity, dead nodes removed. New values get their types in `spec`.
void optimize_specialization(ir::Graph& graph, ir::Specialization& spec, const ir::ConstantEvaluator& evaluator);

}  // namespace kiln::passes
