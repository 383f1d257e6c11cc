#include "backends/cpu/onednn_convolution.hpp"

#include <cstring>
#include <dnnl.hpp>

#include "runtime/ir/error.hpp"

namespace kiln::cpu {

namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

tag plain_tag(size_t rank, bool grouped_weights = false) {
  if (grouped_weights) return rank == 4 ? tag::goiw : rank == 5 ? tag::goihw : tag::goidhw;
  return rank == 3 ? tag::ncw : rank == 4 ? tag::nchw : tag::ncdhw;
}

dnnl::algorithm eltwise(PostOp::Kind k) {
  switch (k) {
    case PostOp::Kind::Relu:
    case PostOp::Kind::LeakyRelu: return dnnl::algorithm::eltwise_relu;  // alpha is the negative slope
    case PostOp::Kind::Clip: return dnnl::algorithm::eltwise_clip_v2;
    case PostOp::Kind::Sigmoid: return dnnl::algorithm::eltwise_logistic;
    case PostOp::Kind::Tanh: return dnnl::algorithm::eltwise_tanh;
    case PostOp::Kind::HardSwish: return dnnl::algorithm::eltwise_hardswish;
    case PostOp::Kind::GeluErf: return dnnl::algorithm::eltwise_gelu_erf;
    case PostOp::Kind::Silu: return dnnl::algorithm::eltwise_swish;
    case PostOp::Kind::Sum: break;
  }
  return dnnl::algorithm::undef;
}

}  // namespace

std::vector<int64_t> ConvolutionShape::output() const {
  std::vector<int64_t> out{input[0], weights[0]};
  for (size_t d = 0; d + 2 < input.size(); ++d) {
    const int64_t extent = (weights[d + 2] - 1) * dilations[d] + 1;
    out.push_back((input[d + 2] + pads_begin[d] + pads_end[d] - extent) / strides[d] + 1);
  }
  return out;
}

struct OneDnnConvolution::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward primitive;
  dnnl::memory weights;  // in pd.weights_desc()'s layout
  dnnl::memory bias;
  dnnl::memory::desc src_md, dst_md;
  bool has_bias = false;
  bool has_sum = false;
};

OneDnnConvolution::OneDnnConvolution(const ConvolutionShape& s, const float* weights, const float* bias,
                                     const std::vector<PostOp>& post_ops)
    : impl_(std::make_unique<Impl>()) {
  const size_t rank = s.input.size();
  const size_t spatial = rank - 2;
  if (rank < 3 || rank > 5 || s.weights.size() != rank || s.strides.size() != spatial || s.dilations.size() != spatial ||
      s.pads_begin.size() != spatial || s.pads_end.size() != spatial || s.group < 1)
    ir::fail(ir::ErrorKind::InvalidArgument, "oneDNN convolution: inconsistent shape description");
  try {
    dnnl::memory::dims src(s.input.begin(), s.input.end()), dst;
    for (int64_t d : s.output()) dst.push_back(d);
    dnnl::memory::dims wei;
    if (s.group > 1) {
      wei.push_back(s.group);
      wei.push_back(s.weights[0] / s.group);
      wei.insert(wei.end(), s.weights.begin() + 1, s.weights.end());
    } else {
      wei.assign(s.weights.begin(), s.weights.end());
    }
    dnnl::memory::dims strides(s.strides.begin(), s.strides.end()), pads_l(s.pads_begin.begin(), s.pads_begin.end()),
        pads_r(s.pads_end.begin(), s.pads_end.end()), dilates;
    for (int64_t d : s.dilations) dilates.push_back(d - 1);  // oneDNN counts the gaps

    impl_->src_md = dnnl::memory::desc(src, dt::f32, plain_tag(rank));
    impl_->dst_md = dnnl::memory::desc(dst, dt::f32, plain_tag(rank));
    // `any` lets oneDNN pick the blocked weight layout its fastest kernel wants.
    dnnl::memory::desc wei_any(wei, dt::f32, tag::any);
    dnnl::memory::desc bias_md({s.weights[0]}, dt::f32, tag::x);
    impl_->has_bias = bias != nullptr;
    dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                         impl_->src_md, wei_any, impl_->has_bias ? bias_md : dnnl::memory::desc(),
                                         impl_->dst_md, strides, dilates, pads_l, pads_r);
    dnnl::post_ops ops;
    for (const PostOp& p : post_ops) {
      if (p.kind == PostOp::Kind::Sum) {
        ops.append_sum(1.0f);
        impl_->has_sum = true;
      } else {
        float alpha = p.alpha, beta = p.beta;
        if (p.kind == PostOp::Kind::Silu) alpha = 1.0f;  // x * sigmoid(alpha * x)
        ops.append_eltwise(1.0f, eltwise(p.kind), alpha, beta);
      }
    }
    dnnl::primitive_attr attr;
    attr.set_post_ops(ops);
    impl_->pd = dnnl::convolution_forward::primitive_desc(desc, attr, impl_->engine);
    impl_->primitive = dnnl::convolution_forward(impl_->pd);

    // Reorder the weights once into the chosen layout.
    dnnl::stream stream(impl_->engine);
    dnnl::memory user_weights({wei, dt::f32, plain_tag(wei.size(), s.group > 1)}, impl_->engine, const_cast<float*>(weights));
    impl_->weights = dnnl::memory(impl_->pd.weights_desc(), impl_->engine);
    dnnl::reorder(user_weights, impl_->weights).execute(stream, user_weights, impl_->weights);
    if (impl_->has_bias) {
      impl_->bias = dnnl::memory(bias_md, impl_->engine);
      std::memcpy(impl_->bias.get_data_handle(), bias, size_t(s.weights[0]) * sizeof(float));
    }
    stream.wait();
  } catch (const dnnl::error& e) {
    ir::fail(ir::ErrorKind::Unsupported, std::string("oneDNN cannot build this convolution: ") + e.what());
  }
}

OneDnnConvolution::~OneDnnConvolution() = default;

void OneDnnConvolution::run(const float* input, float* output, const float* residual) const {
  if (impl_->has_sum && !residual) ir::fail(ir::ErrorKind::Internal, "oneDNN convolution with a Sum post-op needs a residual");
  try {
    dnnl::stream stream(impl_->engine);
    dnnl::memory src(impl_->src_md, impl_->engine, const_cast<float*>(input));
    dnnl::memory dst(impl_->dst_md, impl_->engine, output);
    // The sum post-op adds what dst holds: put the residual there first.
    if (impl_->has_sum && residual != output) std::memcpy(output, residual, impl_->dst_md.get_size());
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, impl_->weights}, {DNNL_ARG_DST, dst}};
    if (impl_->has_bias) args[DNNL_ARG_BIAS] = impl_->bias;
    impl_->primitive.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& e) {
    ir::fail(ir::ErrorKind::Internal, std::string("oneDNN convolution failed: ") + e.what());
  }
}

std::string OneDnnConvolution::implementation() const { return impl_->pd.impl_info_str(); }

}  // namespace kiln::cpu
