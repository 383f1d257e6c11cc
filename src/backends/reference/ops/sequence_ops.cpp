// Sequences of tensors: SequenceEmpty, SequenceConstruct, SequenceInsert,
// SequenceAt, SequenceErase, SequenceLength, SplitToSequence,
// ConcatFromSequence and SequenceMap.
#include <cstring>
#include <string>
#include <vector>

#include "backends/reference/kernel_registry.hpp"
#include "backends/reference/ops/op_util.hpp"

namespace kiln::ref {
namespace {

std::vector<Tensor> sequence_input(const KernelContext& ctx, size_t i) {
  ir::Value v = ctx.input_value(i);
  if (v.kind != ir::ValueKind::Sequence) ctx.fail("input " + std::to_string(i) + " is " + v.describe() + ", expected a sequence");
  return std::move(v.sequence);
}

// A position in a sequence of `size` tensors: negative counts from the back;
// `size` itself is valid where one may insert at the end.
size_t position(const KernelContext& ctx, size_t input, size_t size, bool end_allowed) {
  const Tensor& p = ctx.input(input);
  if (p.numel() != 1 || !ir::dtype_is_int(p.dtype()))
    ctx.fail("position must be a single integer, got " + ir::dims_to_string(p.dims()) + " of " + ir::dtype_name(p.dtype()));
  const int64_t n = int64_t(size), at = p.as_int64(0);
  const int64_t last = end_allowed ? n : n - 1;
  if (at < -n || at > last)
    ctx.fail("position " + std::to_string(at) + " is outside [" + std::to_string(-n) + ", " + std::to_string(last) +
             "] for a sequence of " + std::to_string(n) + " tensors");
  return size_t(at < 0 ? at + n : at);
}

void require_same_dtype(const KernelContext& ctx, const std::vector<Tensor>& seq, const Tensor& t) {
  if (!seq.empty() && seq[0].dtype() != t.dtype())
    ctx.fail(std::string("the tensor is ") + ir::dtype_name(t.dtype()) + ", the sequence holds " +
             ir::dtype_name(seq[0].dtype()));
}

void sequence_empty(KernelContext& ctx) {
  const int64_t code = ctx.attr_int("dtype", int64_t(DType::Float32));
  if (code < 1 || code > int64_t(DType::BFloat16)) ctx.fail("dtype " + std::to_string(code) + " is not an ONNX element type");
  ctx.set_output_value(0, ir::Value::of_sequence({}));
}

void sequence_construct(KernelContext& ctx) {
  std::vector<Tensor> seq;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& t = ctx.input(i);
    require_same_dtype(ctx, seq, t);
    seq.push_back(t);
  }
  ctx.set_output_value(0, ir::Value::of_sequence(std::move(seq)));
}

void sequence_insert(KernelContext& ctx) {
  std::vector<Tensor> seq = sequence_input(ctx, 0);
  const Tensor& t = ctx.input(1);
  require_same_dtype(ctx, seq, t);
  const size_t at = ctx.has_input(2) ? position(ctx, 2, seq.size(), true) : seq.size();
  seq.insert(seq.begin() + ptrdiff_t(at), t);
  ctx.set_output_value(0, ir::Value::of_sequence(std::move(seq)));
}

void sequence_at(KernelContext& ctx) {
  const std::vector<Tensor>& seq = sequence_input(ctx, 0);
  ctx.set_output(0, seq[position(ctx, 1, seq.size(), false)]);
}

void sequence_erase(KernelContext& ctx) {
  std::vector<Tensor> seq = sequence_input(ctx, 0);
  if (seq.empty()) ctx.fail("cannot erase from an empty sequence");
  const size_t at = ctx.has_input(1) ? position(ctx, 1, seq.size(), false) : seq.size() - 1;
  seq.erase(seq.begin() + ptrdiff_t(at));
  ctx.set_output_value(0, ir::Value::of_sequence(std::move(seq)));
}

void sequence_length(KernelContext& ctx) { ctx.set_output(0, Tensor::scalar<int64_t>(int64_t(sequence_input(ctx, 0).size()))); }

// Rows [begin, begin + count) of `t` along `axis`.
Tensor slice_axis(const Tensor& t, int64_t axis, int64_t begin, int64_t count) {
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= t.dim(int(i));
  for (int64_t i = axis + 1; i < t.rank(); ++i) inner *= t.dim(int(i));
  Dims dims = t.dims();
  const int64_t len = dims[size_t(axis)];
  dims[size_t(axis)] = count;
  Tensor out = Tensor::uninitialized(t.dtype(), dims);
  const size_t row = size_t(inner) * ir::dtype_size(t.dtype());
  const auto* src = static_cast<const char*>(t.raw());
  auto* dst = static_cast<char*>(out.raw());
  for (int64_t o = 0; o < outer; ++o)
    if (count) std::memcpy(dst + size_t(o * count) * row, src + size_t(o * len + begin) * row, size_t(count) * row);
  return out;
}

void require_numeric(const KernelContext& ctx, const Tensor& t, const char* what) {
  if (!ir::dtype_supported(t.dtype()))
    ctx.unsupported(std::string(what) + " of " + ir::dtype_name(t.dtype()) + " is not supported");
}

void split_to_sequence(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  require_numeric(ctx, x, "splitting a tensor");
  if (x.rank() == 0) ctx.fail("cannot split a scalar");
  const int64_t axis = normalize_axis(ctx, ctx.attr_int("axis", 0), x.rank());
  const int64_t len = x.dim(int(axis));
  std::vector<int64_t> sizes;
  bool squeeze = false;
  if (!ctx.has_input(1)) {
    // Without split: pieces of 1, the axis dropped unless keepdims.
    sizes.assign(size_t(len), 1);
    squeeze = ctx.attr_int("keepdims", 1) == 0;
  } else {
    const Tensor& split = ctx.input(1);
    if (!ir::dtype_is_int(split.dtype())) ctx.fail(std::string("split must be integers, got ") + ir::dtype_name(split.dtype()));
    if (split.rank() == 0) {
      const int64_t piece = split.as_int64(0);
      if (piece <= 0) ctx.fail("split is " + std::to_string(piece) + ", expected a positive size");
      for (int64_t at = 0; at < len; at += piece) sizes.push_back(std::min(piece, len - at));
    } else if (split.rank() == 1) {
      int64_t total = 0;
      for (int64_t i = 0; i < split.numel(); ++i) {
        const int64_t s = split.as_int64(i);
        if (s < 0 || s > len - total)
          ctx.fail("split " + ir::dims_to_string(Dims(split.to_int64_vector())) + " does not add up to axis " +
                   std::to_string(axis) + " of length " + std::to_string(len));
        total += s;
        sizes.push_back(s);
      }
      if (total != len)
        ctx.fail("split sizes add up to " + std::to_string(total) + ", axis " + std::to_string(axis) + " has length " +
                 std::to_string(len));
    } else {
      ctx.fail("split must be a scalar or a 1-D tensor, got shape " + ir::dims_to_string(split.dims()));
    }
  }
  std::vector<Tensor> seq;
  int64_t at = 0;
  for (int64_t s : sizes) {
    Tensor piece = slice_axis(x, axis, at, s);
    at += s;
    if (squeeze) {
      Dims d = piece.dims();
      d.erase(d.begin() + axis);
      piece = piece.reshaped(d);
    }
    seq.push_back(std::move(piece));
  }
  ctx.set_output_value(0, ir::Value::of_sequence(std::move(seq)));
}

// Concatenates along `axis` (new_axis = 0) or stacks along a new axis.
void concat_from_sequence(KernelContext& ctx) {
  const std::vector<Tensor>& seq = sequence_input(ctx, 0);
  if (seq.empty()) ctx.fail("cannot concatenate an empty sequence");
  const bool new_axis = ctx.attr_int("new_axis", 0) != 0;
  if (!ctx.has_attr("axis")) ctx.fail("required attribute 'axis' is missing");
  const Tensor& first = seq[0];
  require_numeric(ctx, first, "concatenating tensors");
  const int64_t rank = first.rank() + (new_axis ? 1 : 0);
  if (rank == 0) ctx.fail("cannot concatenate scalars (set new_axis to stack them)");
  const int64_t axis = normalize_axis(ctx, ctx.attr_int("axis"), rank);
  // Each part as a tensor of the result's rank.
  std::vector<Tensor> parts;
  int64_t total = 0;
  for (size_t k = 0; k < seq.size(); ++k) {
    Tensor t = seq[k];
    if (new_axis) {
      Dims d = t.dims();
      d.insert(d.begin() + axis, 1);
      t = t.reshaped(d);
    }
    Dims want = parts.empty() ? t.dims() : parts[0].dims(), got = t.dims();
    want[size_t(axis)] = got[size_t(axis)];
    if (t.dtype() != first.dtype() || got != want)
      ctx.fail("tensor " + std::to_string(k) + " is " + ir::dtype_name(t.dtype()) + " " + ir::dims_to_string(seq[k].dims()) +
               ", which does not concatenate with " + ir::dtype_name(first.dtype()) + " " + ir::dims_to_string(first.dims()) +
               " along axis " + std::to_string(axis));
    total += t.dim(int(axis));
    parts.push_back(std::move(t));
  }
  Dims dims = parts[0].dims();
  dims[size_t(axis)] = total;
  Tensor out = Tensor::uninitialized(first.dtype(), dims);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= dims[size_t(i)];
  for (int64_t i = axis + 1; i < rank; ++i) inner *= dims[size_t(i)];
  const size_t esize = ir::dtype_size(first.dtype());
  auto* dst = static_cast<char*>(out.raw());
  for (int64_t o = 0; o < outer; ++o)
    for (const Tensor& p : parts) {
      const size_t bytes = size_t(p.dim(int(axis)) * inner) * esize;
      std::memcpy(dst, static_cast<const char*>(p.raw()) + size_t(o) * bytes, bytes);
      dst += bytes;
    }
  ctx.set_output(0, std::move(out));
}

// The body runs once per element of the first sequence; further inputs
// that are sequences (of the same length) give their element, tensors
// themselves. Each body output collects into a sequence.
void sequence_map(KernelContext& ctx) {
  const ir::Graph& body = ctx.attr_graph("body");
  const size_t count = sequence_input(ctx, 0).size();
  std::vector<ir::Value> inputs;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    inputs.push_back(ctx.input_value(i));
    const ir::Value& v = inputs.back();
    if (v.kind == ir::ValueKind::Sequence && v.sequence.size() != count)
      ctx.fail("input " + std::to_string(i) + " is a sequence of " + std::to_string(v.sequence.size()) +
               " tensors, the first one of " + std::to_string(count));
    if (v.kind == ir::ValueKind::Optional) ctx.fail("input " + std::to_string(i) + " is an optional");
  }
  if (body.inputs.size() != inputs.size())
    ctx.fail("body takes " + std::to_string(body.inputs.size()) + " inputs, the node has " + std::to_string(inputs.size()));
  if (body.outputs.size() != ctx.num_outputs())
    ctx.fail("body makes " + std::to_string(body.outputs.size()) + " outputs, the node has " + std::to_string(ctx.num_outputs()));
  std::vector<std::vector<Tensor>> results(ctx.num_outputs());
  for (size_t k = 0; k < count; ++k) {
    std::vector<ir::Value> ins;
    for (const auto& v : inputs) ins.push_back(v.kind == ir::ValueKind::Sequence ? ir::Value(v.sequence[k]) : v);
    std::vector<ir::Value> outs = ctx.run_subgraph(body, ins);
    for (size_t j = 0; j < outs.size() && j < results.size(); ++j) {
      if (!outs[j].is_tensor())
        ctx.fail("body output " + std::to_string(j) + " is " + outs[j].describe() + ", expected a tensor");
      results[j].push_back(std::move(outs[j].tensor));
    }
  }
  for (size_t j = 0; j < results.size(); ++j) ctx.set_output_value(j, ir::Value::of_sequence(std::move(results[j])));
}

}  // namespace

void register_sequence_ops(KernelRegistry& r) {
  r.add("SequenceEmpty", &sequence_empty);
  r.add("SequenceConstruct", &sequence_construct);
  r.add("SequenceInsert", &sequence_insert);
  r.add("SequenceAt", &sequence_at);
  r.add("SequenceErase", &sequence_erase);
  r.add("SequenceLength", &sequence_length);
  r.add("SplitToSequence", &split_to_sequence);
  r.add("ConcatFromSequence", &concat_from_sequence);
  r.add("SequenceMap", &sequence_map);
}

}  // namespace kiln::ref
