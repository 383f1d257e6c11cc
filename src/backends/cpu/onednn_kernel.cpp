#include "backends/cpu/onednn_kernel.hpp"
#include "backends/program_blocks.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "backends/cpu/thread_budget.hpp"
#include "backends/cpu/winograd_weights.hpp"
#include "runtime/ir/error.hpp"
#include "runtime/ir/serialize.hpp"

namespace kiln::cpu {

bool is_onednn_kernel(const Kernel& kernel) { return dynamic_cast<const OneDnnKernel*>(&kernel) != nullptr; }

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

void reorder_constant(const dnnl::memory::desc& user, const void* data, dnnl::memory dst) {
  const dnnl::memory::dims d = user.dims();
  if (d.size() == 4 && d[2] == 3 && d[3] == 3 &&
      user == dnnl::memory::desc(d, dnnl::memory::data_type::f32, dnnl::memory::format_tag::oihw) &&
      winograd_weights(static_cast<const float*>(data), d[0], d[1], dst))
    return;
  OmpThreads one(1);
  dnnl::memory src(user, cpu_engine(), const_cast<void*>(data));
  dnnl::stream stream(cpu_engine());
  dnnl::reorder(src, dst).execute(stream, src, dst);
  stream.wait();
}

bool onednn_has_bf16() {
  static const bool has = [] {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    try {
      const dnnl::memory::desc a({16, 16}, dt::bf16, tag::ab), c({16, 16}, dt::f32, tag::ab);
      dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, a, c), cpu_engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return has;
}

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

OneDnnKernel::OneDnnKernel(dnnl::primitive_desc_base pd, std::vector<std::pair<int, dnnl::memory::desc>> runtime_args,
                           std::unordered_map<int, dnnl::memory> constant_args, int sum_from, int implementation, int threads)
    : pd_(std::move(pd)),
      runtime_args_(std::move(runtime_args)),
      constant_args_(std::move(constant_args)),
      sum_from_(sum_from),
      implementation_(implementation),
      threads_(threads) {
  if (threads_ < 0) ir::fail(ir::ErrorKind::Internal, "oneDNN kernel: a negative thread count");
  for (size_t i = 0; i < runtime_args_.size(); ++i)
    if (runtime_args_[i].first == DNNL_ARG_DST) dst_index_ = int(i);
  if (sum_from_ >= 0 && dst_index_ < 0) ir::fail(ir::ErrorKind::Internal, "oneDNN kernel: a Sum post-op needs a destination");
  stream_ = dnnl::stream(cpu_engine());
  for (const auto& [id, memory] : constant_args_) exec_args_.push_back({id, memory.get()});
  for (const auto& [id, desc] : runtime_args_) {
    bound_.push_back(id == kNotBound ? dnnl::memory() : dnnl::memory(desc, cpu_engine(), DNNL_MEMORY_NONE));
    if (id != kNotBound) exec_args_.push_back({id, bound_.back().get()});
  }
}

void OneDnnKernel::create_primitive() {
  if (primitive_) return;
  const auto start = std::chrono::steady_clock::now();
  primitive_ = dnnl::primitive(pd_.get());
  creation_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

OneDnnImplementations::OneDnnImplementations(const void* op_desc, const_dnnl_primitive_attr_t attr) {
  dnnl::error::wrap_c_api(dnnl_primitive_desc_iterator_create(&iterator_, op_desc, attr, cpu_engine().get(), nullptr),
                          "oneDNN has no implementation of this operation");
}

OneDnnImplementations::~OneDnnImplementations() { dnnl_primitive_desc_iterator_destroy(iterator_); }

bool OneDnnImplementations::next() {
  if (dnnl_primitive_desc_iterator_next(iterator_) != dnnl_success) return false;
  ++index_;
  return true;
}

dnnl::primitive_desc_base OneDnnImplementations::descriptor() const {
  return dnnl::primitive_desc_base(dnnl_primitive_desc_iterator_fetch(iterator_));
}

void OneDnnKernel::run(void* const* args) const {
  if (!primitive_) ir::fail(ir::ErrorKind::Internal, "oneDNN kernel run before its primitive was created");
  try {
    // The sum post-op adds what the destination holds: put the residual there.
    if (sum_from_ >= 0 && args[sum_from_] != args[dst_index_])
      std::memcpy(args[dst_index_], args[sum_from_], runtime_args_[size_t(dst_index_)].second.get_size());
    for (size_t i = 0; i < bound_.size(); ++i)
      if (runtime_args_[i].first != kNotBound) bound_[i].set_data_handle(args[i]);
    std::optional<OmpThreads> fewer;
    if (threads_ > 0) fewer.emplace(threads_);
    dnnl::error::wrap_c_api(dnnl_primitive_execute(primitive_.get(), stream_.get(), int(exec_args_.size()), exec_args_.data()),
                            "could not execute a primitive");
    stream_.wait();
  } catch (const dnnl::error& e) {
    ir::fail(ir::ErrorKind::Internal, std::string("oneDNN primitive failed: ") + e.what());
  }
}

}  // namespace kiln::cpu

// ---- saving and loading (the on-disk cache) ---------------------------------
//
// oneDNN 2.x descriptors are plain C structs: a primitive is saved as its
// operation descriptor (or, for reorder and concat, its memory descriptors)
// and its post-ops, and created again from them. The cache key holds the
// oneDNN version and the CPU, so the same implementation is picked again; the
// layouts of the saved constants are still checked against the new primitive.

namespace kiln::cpu {

namespace {

using nlohmann::json;

json md_json(const dnnl_memory_desc_t* md, BlockWriter& blocks) { return blocks.add(md, sizeof *md); }

dnnl_memory_desc_t md_from_json(const json& j, const BlockReader& blocks, const std::string& what) {
  const std::string_view bytes = blocks.block(j, what + ": a oneDNN memory descriptor", sizeof(dnnl_memory_desc_t));
  dnnl_memory_desc_t md;
  std::memcpy(&md, bytes.data(), sizeof md);
  return md;
}

size_t op_desc_size(dnnl_primitive_kind_t kind) {
  switch (kind) {
    case dnnl_convolution: return sizeof(dnnl_convolution_desc_t);
    case dnnl_deconvolution: return sizeof(dnnl_deconvolution_desc_t);
    case dnnl_eltwise: return sizeof(dnnl_eltwise_desc_t);
    case dnnl_softmax: return sizeof(dnnl_softmax_desc_t);
    case dnnl_softmax_v2: return sizeof(dnnl_softmax_v2_desc_t);
    case dnnl_pooling: return sizeof(dnnl_pooling_desc_t);
    case dnnl_pooling_v2: return sizeof(dnnl_pooling_v2_desc_t);
    case dnnl_layer_normalization: return sizeof(dnnl_layer_normalization_desc_t);
    case dnnl_batch_normalization: return sizeof(dnnl_batch_normalization_desc_t);
    case dnnl_inner_product: return sizeof(dnnl_inner_product_desc_t);
    case dnnl_binary: return sizeof(dnnl_binary_desc_t);
    case dnnl_matmul: return sizeof(dnnl_matmul_desc_t);
    case dnnl_resampling: return sizeof(dnnl_resampling_desc_t);
    case dnnl_reduction: return sizeof(dnnl_reduction_desc_t);
    default: return 0;
  }
}

// DNNL_RUNTIME_F32_VAL is a NaN, so compared by its bits.
bool is_runtime_value(float v) {
  const float runtime = DNNL_RUNTIME_F32_VAL;
  return std::memcmp(&v, &runtime, sizeof v) == 0;
}
bool is_runtime_value(int32_t v) { return v == DNNL_RUNTIME_S32_VAL; }

const dnnl_memory_desc_t* query_md(const_dnnl_primitive_desc_t pd, dnnl_query_t what, int index) {
  const dnnl_memory_desc_t* md = dnnl_primitive_desc_query_md(pd, what, index);
  if (!md) ir::fail(ir::ErrorKind::Internal, "oneDNN primitive has no memory descriptor for query " + std::to_string(int(what)));
  return md;
}

// The arguments a primitive's zero points may apply to.
constexpr int kZeroPointArgs[] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};

// Output scales and zero points: given values, or bound at run time.
json quantization_json(const_dnnl_primitive_attr_t attr) {
  json q = json::object();
  dnnl_dim_t count = 0;
  int mask = 0;
  const float* scales = nullptr;
  dnnl::error::wrap_c_api(dnnl_primitive_attr_get_output_scales(attr, &count, &mask, &scales), "query output scales");
  const bool runtime_scales = count == 1 && is_runtime_value(scales[0]);
  if (mask != 0 || count != 1 || scales[0] != 1.0f)
    q["output_scales"] = {{"mask", mask},
                          {"runtime", runtime_scales},
                          {"values", runtime_scales ? std::vector<float>{} : std::vector<float>(scales, scales + count)}};
  for (int arg : {DNNL_ARG_SRC_0, DNNL_ARG_SRC_1}) {
    // oneDNN 2.6 declares this query on a non-const attribute; it only reads it.
    dnnl::error::wrap_c_api(dnnl_primitive_attr_get_scales(const_cast<dnnl_primitive_attr_t>(attr), arg, &count, &mask, &scales),
                            "query argument scales");
    if (mask == 0 && count == 1 && scales[0] == 1.0f) continue;
    q["scales"].push_back({{"arg", arg}, {"mask", mask}, {"values", std::vector<float>(scales, scales + count)}});
  }
  for (int arg : kZeroPointArgs) {
    const int32_t* points = nullptr;
    dnnl::error::wrap_c_api(dnnl_primitive_attr_get_zero_points(attr, arg, &count, &mask, &points), "query zero points");
    const bool runtime = count == 1 && is_runtime_value(points[0]);
    if (mask == 0 && count == 1 && points[0] == 0) continue;
    q["zero_points"].push_back({{"arg", arg},
                                {"mask", mask},
                                {"runtime", runtime},
                                {"values", runtime ? std::vector<int32_t>{} : std::vector<int32_t>(points, points + count)}});
  }
  return q;
}

void set_quantization(dnnl::primitive_attr& attr, const json& q, const std::string& what) {
  try {
    if (q.contains("output_scales")) {
      const json& s = q["output_scales"];
      std::vector<float> values = ir::json_field<std::vector<float>>(s, "values", what);
      if (ir::json_field<bool>(s, "runtime", what)) values = {DNNL_RUNTIME_F32_VAL};
      if (values.empty()) ir::fail(ir::ErrorKind::InvalidModel, what + ": output scales without values");
      attr.set_output_scales(ir::json_field<int>(s, "mask", what), values);
    }
    if (q.contains("scales"))
      for (const json& s : q["scales"]) {
        const int arg = ir::json_field<int>(s, "arg", what);
        if (arg != DNNL_ARG_SRC_0 && arg != DNNL_ARG_SRC_1)
          ir::fail(ir::ErrorKind::InvalidModel, what + ": scales for argument " + std::to_string(arg));
        const std::vector<float> values = ir::json_field<std::vector<float>>(s, "values", what);
        if (values.empty()) ir::fail(ir::ErrorKind::InvalidModel, what + ": scales without values");
        attr.set_scales(arg, ir::json_field<int>(s, "mask", what), values);
      }
    if (q.contains("zero_points"))
      for (const json& z : q["zero_points"]) {
        const int arg = ir::json_field<int>(z, "arg", what);
        if (std::find(std::begin(kZeroPointArgs), std::end(kZeroPointArgs), arg) == std::end(kZeroPointArgs))
          ir::fail(ir::ErrorKind::InvalidModel, what + ": zero points for argument " + std::to_string(arg));
        std::vector<int32_t> values = ir::json_field<std::vector<int32_t>>(z, "values", what);
        if (ir::json_field<bool>(z, "runtime", what)) values = {DNNL_RUNTIME_S32_VAL};
        if (values.empty()) ir::fail(ir::ErrorKind::InvalidModel, what + ": zero points without values");
        attr.set_zero_points(arg, ir::json_field<int>(z, "mask", what), values);
      }
  } catch (const dnnl::error& e) {
    ir::fail(ir::ErrorKind::InvalidModel, what + ": saved quantization attributes refused by oneDNN: " + e.what());
  }
}

// Scales and zero points as many as their mask says over the argument's
// dims, or one bound at run time (which the lowering only makes per tensor):
// oneDNN takes a saved mask and count as they are and would read past the
// values of a tampered entry.
void check_quantization(const dnnl::primitive_desc_base& pd, const std::string& what) {
  const_dnnl_primitive_attr_t attr = nullptr;
  dnnl::error::wrap_c_api(dnnl_primitive_desc_get_attr(pd.get(), &attr), "query attributes");
  auto check = [&](int arg, dnnl_dim_t count, int mask, bool runtime, const char* kind) {
    const dnnl_memory_desc_t* md = dnnl_primitive_desc_query_md(pd.get(), dnnl_query_exec_arg_md, arg);
    dnnl_dim_t want = 1;
    for (int d = 0; md && d < DNNL_MAX_NDIMS; ++d)
      if (mask & (1 << d)) want *= d < md->ndims ? md->dims[d] : 0;
    const bool ok = md && md->ndims > 0 && mask >= 0 && mask < (1 << md->ndims) && (runtime ? mask == 0 : count == want);
    if (!ok)
      ir::fail(ir::ErrorKind::InvalidModel, what + ": saved " + kind + " of argument " + std::to_string(arg) + " (mask " +
                                                std::to_string(mask) + ", " + std::to_string(count) + " values) do not fit it");
  };
  dnnl_dim_t count = 0;
  int mask = 0;
  const float* scales = nullptr;
  dnnl::error::wrap_c_api(dnnl_primitive_attr_get_output_scales(attr, &count, &mask, &scales), "query output scales");
  if (mask != 0 || count != 1 || scales[0] != 1.0f)
    check(DNNL_ARG_DST, count, mask, count == 1 && is_runtime_value(scales[0]), "output scales");
  for (int arg : {DNNL_ARG_SRC_0, DNNL_ARG_SRC_1}) {
    dnnl::error::wrap_c_api(dnnl_primitive_attr_get_scales(const_cast<dnnl_primitive_attr_t>(attr), arg, &count, &mask, &scales),
                            "query argument scales");
    if (mask != 0 || count != 1 || scales[0] != 1.0f) check(arg, count, mask, false, "scales");
  }
  for (int arg : kZeroPointArgs) {
    const int32_t* points = nullptr;
    dnnl::error::wrap_c_api(dnnl_primitive_attr_get_zero_points(attr, arg, &count, &mask, &points), "query zero points");
    if (mask != 0 || count != 1 || points[0] != 0)
      check(arg, count, mask, count == 1 && is_runtime_value(points[0]), "zero points");
  }
}

}  // namespace

void OneDnnKernel::save(json& out, WeightsWriter& weights, BlockWriter& blocks) const {
  const_dnnl_primitive_desc_t pd = pd_.get();
  dnnl_primitive_kind_t kind;
  dnnl::error::wrap_c_api(dnnl_primitive_desc_query(pd, dnnl_query_primitive_kind, 0, &kind), "query primitive kind");
  json prim = {{"kind", int(kind)}};
  if (kind == dnnl_reorder) {
    prim["src"] = md_json(query_md(pd, dnnl_query_src_md, 0), blocks);
    prim["dst"] = md_json(query_md(pd, dnnl_query_dst_md, 0), blocks);
  } else if (kind == dnnl_concat) {
    int n = 0;
    dnnl::error::wrap_c_api(dnnl_primitive_desc_query(pd, dnnl_query_num_of_inputs_s32, 0, &n), "query concat inputs");
    const dnnl_memory_desc_t* dst = query_md(pd, dnnl_query_dst_md, 0);
    prim["dst"] = md_json(dst, blocks);
    // The axis is not queryable: it is the one dimension where a source is
    // shorter than the destination (any axis gives the same result if none is).
    int axis = 0;
    for (int i = 0; i < n; ++i) {
      const dnnl_memory_desc_t* src = query_md(pd, dnnl_query_src_md, i);
      prim["srcs"].push_back(md_json(src, blocks));
      for (int d = 0; d < dst->ndims; ++d)
        if (src->dims[d] != dst->dims[d]) axis = d;
    }
    prim["axis"] = axis;
  } else {
    const size_t size = op_desc_size(kind);
    if (size == 0)
      ir::fail(ir::ErrorKind::Unsupported, "oneDNN primitive kind " + std::to_string(int(kind)) + " cannot be saved");
    const void* desc = nullptr;
    dnnl::error::wrap_c_api(dnnl_primitive_desc_query(pd, dnnl_query_op_d, 0, &desc), "query operation descriptor");
    prim["desc"] = blocks.add(desc, size);
    if (implementation_ > 0) prim["implementation"] = {implementation_, pd_.impl_info_str()};
  }
  const_dnnl_primitive_attr_t attr = nullptr;
  const_dnnl_post_ops_t post_ops = nullptr;
  dnnl::error::wrap_c_api(dnnl_primitive_desc_get_attr(pd, &attr), "query attributes");
  dnnl::error::wrap_c_api(dnnl_primitive_attr_get_post_ops(attr, &post_ops), "query post-ops");
  json ops = json::array();
  for (int i = 0; i < dnnl_post_ops_len(post_ops); ++i) {
    float scale = 1, alpha = 0, beta = 0;
    dnnl_alg_kind_t alg;
    switch (dnnl_post_ops_get_kind(post_ops, i)) {
      case dnnl_sum:
        dnnl::error::wrap_c_api(dnnl_post_ops_get_params_sum(post_ops, i, &scale), "query a sum post-op");
        ops.push_back({{"sum", scale}});
        break;
      case dnnl_eltwise:
        dnnl::error::wrap_c_api(dnnl_post_ops_get_params_eltwise(post_ops, i, &scale, &alg, &alpha, &beta), "query a post-op");
        ops.push_back({{"eltwise", int(alg)}, {"scale", scale}, {"alpha", alpha}, {"beta", beta}});
        break;
      default: ir::fail(ir::ErrorKind::Unsupported, "a oneDNN post-op of this kind cannot be saved");
    }
  }
  prim["post_ops"] = ops;
  prim["quantization"] = quantization_json(attr);
  json runtime = json::array(), constants = json::array();
  for (const auto& [id, desc] : runtime_args_) runtime.push_back({id, md_json(&desc.data, blocks)});
  for (const auto& [id, memory] : constant_args_) {
    const dnnl::memory::desc desc = memory.get_desc();
    const size_t bytes = desc.get_size();
    constants.push_back({id, md_json(&desc.data, blocks), weights.add(memory.get_data_handle(), bytes), bytes});
  }
  out = {{"kind", "onednn"}, {"primitive", prim}, {"runtime_args", runtime}, {"constants", constants}, {"sum_from", sum_from_}};
  if (threads_ > 0) out["threads"] = threads_;
}

std::unique_ptr<Kernel> OneDnnKernel::load(const json& j, const WeightsReader& weights, const BlockReader& blocks,
                                           const std::string& what) {
  const json prim = ir::json_field<json>(j, "primitive", what);
  // A kernel made for fewer threads than the run's is made again so, its
  // descriptor included.
  const int threads = j.contains("threads") ? ir::json_field<int>(j, "threads", what) : 0;
  if (threads < 0 || threads > 1024) ir::fail(ir::ErrorKind::InvalidModel, what + ": a bad thread count");
  std::optional<OmpThreads> fewer;
  if (threads > 0) fewer.emplace(threads);
  dnnl::post_ops ops;
  for (const json& op : ir::json_field<json>(prim, "post_ops", what)) {
    if (op.contains("sum"))
      ops.append_sum(ir::json_field<float>(op, "sum", what));
    else
      ops.append_eltwise(ir::json_field<float>(op, "scale", what), dnnl::algorithm(ir::json_field<int>(op, "eltwise", what)),
                         ir::json_field<float>(op, "alpha", what), ir::json_field<float>(op, "beta", what));
  }
  dnnl::primitive_attr attr = user_scratchpad();
  attr.set_post_ops(ops);
  if (prim.contains("quantization")) set_quantization(attr, prim["quantization"], what);
  const auto kind = dnnl_primitive_kind_t(ir::json_field<int>(prim, "kind", what));
  const dnnl_engine_t engine = cpu_engine().get();
  dnnl_primitive_desc_t pd = nullptr;
  dnnl_status_t status;
  dnnl::primitive_desc_base owned;
  int implementation = 0;  // oneDNN's preferred one
  if (kind == dnnl_reorder) {
    const dnnl_memory_desc_t src = md_from_json(ir::json_field<json>(prim, "src", what), blocks, what);
    const dnnl_memory_desc_t dst = md_from_json(ir::json_field<json>(prim, "dst", what), blocks, what);
    status = dnnl_reorder_primitive_desc_create(&pd, &src, engine, &dst, engine, attr.get());
  } else if (kind == dnnl_concat) {
    const dnnl_memory_desc_t dst = md_from_json(ir::json_field<json>(prim, "dst", what), blocks, what);
    std::vector<dnnl_memory_desc_t> srcs;
    for (const json& s : ir::json_field<json>(prim, "srcs", what)) srcs.push_back(md_from_json(s, blocks, what));
    status = dnnl_concat_primitive_desc_create(&pd, &dst, int(srcs.size()), ir::json_field<int>(prim, "axis", what), srcs.data(),
                                               attr.get(), engine);
  } else {
    const size_t size = op_desc_size(kind);
    if (size == 0)
      ir::fail(ir::ErrorKind::InvalidModel, what + ": a oneDNN primitive of unknown kind " + std::to_string(int(kind)));
    const std::string_view desc =
        blocks.block(ir::json_field<json>(prim, "desc", what),
                     what + ": oneDNN operation descriptor of kind " + std::to_string(int(kind)), int64_t(size));
    std::vector<int64_t> aligned((size + 7) / 8);  // the descriptors hold 64-bit fields
    std::memcpy(aligned.data(), desc.data(), size);
    if (!prim.contains("implementation")) {
      status = dnnl_primitive_desc_create(&pd, aligned.data(), attr.get(), engine, nullptr);
    } else {
      // Not the implementation oneDNN prefers: the compile timed another one.
      const json& chosen = prim["implementation"];
      if (!chosen.is_array() || chosen.size() != 2 || !chosen[0].is_number_integer() || !chosen[1].is_string())
        ir::fail(ir::ErrorKind::InvalidModel, what + ": a oneDNN implementation must be [index, name]");
      implementation = chosen[0].get<int>();
      const std::string name = chosen[1].get<std::string>();
      try {
        OneDnnImplementations all(aligned.data(), attr.get());
        while (all.index() < implementation && all.next()) {
        }
        owned = all.descriptor();
        if (all.index() != implementation || owned.impl_info_str() != name)
          ir::fail(ir::ErrorKind::InvalidModel, what + ": oneDNN no longer offers implementation " +
                                                    std::to_string(implementation) + " (" + name + ") of the saved primitive");
        status = dnnl_success;
      } catch (const dnnl::error& e) {
        status = e.status;
      }
    }
  }
  if (status != dnnl_success)
    ir::fail(ir::ErrorKind::InvalidModel,
             what + ": oneDNN cannot create the saved primitive again (status " + std::to_string(int(status)) + ")");
  if (!owned) owned = dnnl::primitive_desc_base(pd);
  check_quantization(owned, what);

  std::unordered_map<int, dnnl::memory> constants;
  for (const json& c : ir::json_field<json>(j, "constants", what)) {
    if (!c.is_array() || c.size() != 4)
      ir::fail(ir::ErrorKind::InvalidModel, what + ": a constant must be [id, desc, offset, bytes]");
    const int id = c[0].get<int>();
    const dnnl_memory_desc_t saved = md_from_json(c[1], blocks, what);
    // The weights were reordered for the layout the primitive chose when it
    // was compiled: the primitive made now must want the same one. Scales
    // and zero points bound at run time have no layout to ask for: one
    // value of their type.
    const dnnl_memory_desc_t* want = dnnl_primitive_desc_query_md(owned.get(), dnnl_query_exec_arg_md, id);
    const bool zero_point = std::any_of(std::begin(kZeroPointArgs), std::end(kZeroPointArgs),
                                        [&](int arg) { return id == (DNNL_ARG_ATTR_ZERO_POINTS | arg); });
    if (id == DNNL_ARG_ATTR_OUTPUT_SCALES || zero_point) {
      const dnnl_data_type_t type = zero_point ? dnnl_s32 : dnnl_f32;
      if (saved.ndims != 1 || saved.dims[0] != 1 || saved.data_type != type)
        ir::fail(ir::ErrorKind::InvalidModel, what + ": a run-time scale or zero point must be one value");
    } else if (!want || !dnnl_memory_desc_equal(want, &saved))
      ir::fail(ir::ErrorKind::InvalidModel, what + ": the recreated oneDNN primitive wants argument " + std::to_string(id) +
                                                " in another layout than the saved weights");
    const dnnl::memory::desc desc(saved);
    const void* data = weights.at(c[2].get<int64_t>(), c[3].get<int64_t>(), what);
    if (int64_t(desc.get_size()) != c[3].get<int64_t>()) ir::fail(ir::ErrorKind::InvalidModel, what + ": constant size mismatch");
    constants[id] = dnnl::memory(desc, cpu_engine(), const_cast<void*>(data));  // read only: a weight is never written
  }
  std::vector<std::pair<int, dnnl::memory::desc>> runtime;
  for (const json& r : ir::json_field<json>(j, "runtime_args", what)) {
    if (!r.is_array() || r.size() != 2) ir::fail(ir::ErrorKind::InvalidModel, what + ": a runtime argument must be [id, desc]");
    runtime.push_back({r[0].get<int>(), dnnl::memory::desc(md_from_json(r[1], blocks, what))});
  }
  auto kernel = std::make_unique<OneDnnKernel>(std::move(owned), std::move(runtime), std::move(constants),
                                               ir::json_field<int>(j, "sum_from", what), implementation, threads);
  kernel->create_primitive();
  return kernel;
}

}  // namespace kiln::cpu
