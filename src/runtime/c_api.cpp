// The C API over the C++ API. Every entry point catches everything: no
// exception crosses into C.
#include <memory>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/kiln.hpp"
#include "runtime/ir/value.hpp"

struct kiln_runtime {
  kiln::Runtime runtime;
};

struct kiln_model {
  kiln::Model model;
  // Backing storage for kiln_tensor_info pointers, built once at load.
  struct InfoStorage {
    std::vector<int64_t> dims;
    std::vector<std::string> symbols;
    std::vector<const char*> symbol_ptrs;
  };
  std::vector<InfoStorage> inputs, outputs;
};

struct kiln_tensor {
  kiln::Tensor tensor;
};

namespace {

thread_local std::string last_error;

kiln_status fail(kiln_status s, const std::string& message) {
  last_error = message;
  return s;
}

template <typename F>
kiln_status guarded(F&& f) {
  try {
    f();
    return KILN_OK;
  } catch (const kiln::Error& e) {
    return fail(kiln_status(int(e.code())), e.what());
  } catch (const std::bad_alloc&) {
    return fail(KILN_ERROR_INTERNAL, "out of memory");
  } catch (const std::exception& e) {
    return fail(KILN_ERROR_INTERNAL, e.what());
  } catch (...) {
    return fail(KILN_ERROR_INTERNAL, "unknown error");
  }
}

#define KILN_REQUIRE(cond, what)                                                                  \
  do {                                                                                            \
    if (!(cond)) return fail(KILN_ERROR_INVALID_ARGUMENT, std::string(__func__) + ": " + (what)); \
  } while (0)

kiln_model::InfoStorage make_storage(const kiln::TensorInfo& t) {
  kiln_model::InfoStorage s;
  for (const auto& d : t.shape) {
    s.dims.push_back(d.value);
    s.symbols.push_back(d.symbol);
  }
  for (const auto& sym : s.symbols) s.symbol_ptrs.push_back(sym.c_str());
  return s;
}

void fill_info(const kiln::TensorInfo& t, const kiln_model::InfoStorage& s, kiln_tensor_info* out) {
  out->name = t.name.c_str();
  out->dtype = kiln_dtype(int(t.dtype));
  out->rank = t.rank_known ? int64_t(t.shape.size()) : -1;
  out->dims = s.dims.data();
  out->symbols = s.symbol_ptrs.data();
  out->has_default = t.has_default ? 1 : 0;
}

// Strings (std::string elements) do not cross the C API.
bool valid_dtype(kiln_dtype d) { return int(d) != int(kiln::DType::String) && kiln::dtype_size(kiln::DType(int(d))) != 0; }

// Why the C API cannot run `model` ("" if it can): it passes tensors of numbers only.
std::string c_api_refusal(const kiln::Model& model) {
  for (const auto* list : {&model.inputs(), &model.outputs()})
    for (const auto& info : *list) {
      const char* what = list == &model.inputs() ? "input '" : "output '";
      if (info.kind != kiln::ValueKind::Tensor)
        return std::string(what) + info.name + "' is " + kiln::ir::value_kind_phrase(kiln::ir::ValueKind(int(info.kind))) +
               ": the C API runs tensors only (use the C++ API's Model::run_values)";
      if (info.dtype == kiln::DType::String)
        return std::string(what) + info.name + "' is a string tensor: the C API runs tensors of numbers only";
    }
  return {};
}

}  // namespace

extern "C" {

uint32_t kiln_c_api_version(void) { return KILN_C_API_VERSION; }
const char* kiln_last_error(void) { return last_error.c_str(); }

const char* kiln_status_name(kiln_status s) {
  switch (s) {
    case KILN_OK: return "ok";
    case KILN_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case KILN_ERROR_INVALID_MODEL: return "invalid model";
    case KILN_ERROR_UNSUPPORTED: return "unsupported";
    case KILN_ERROR_IO: return "i/o error";
    case KILN_ERROR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

const char* kiln_dtype_name(kiln_dtype d) { return valid_dtype(d) ? kiln::dtype_name(kiln::DType(int(d))) : "unknown"; }
size_t kiln_dtype_size(kiln_dtype d) { return kiln::dtype_size(kiln::DType(int(d))); }

kiln_status kiln_runtime_create(const kiln_runtime_options* options, kiln_runtime** out) {
  KILN_REQUIRE(out, "out is null");
  *out = nullptr;
  kiln::RuntimeOptions o;
  if (options) {
    KILN_REQUIRE(options->struct_size >= offsetof(kiln_runtime_options, log_level) + sizeof(int32_t),
                 "options->struct_size is " + std::to_string(options->struct_size) + ", set it to sizeof(kiln_runtime_options)");
    o.threads = options->threads;
    if (options->cache_dir) o.cache_dir = options->cache_dir;
    KILN_REQUIRE(options->log_level >= KILN_LOG_DEFAULT && options->log_level <= KILN_LOG_OFF,
                 "options->log_level " + std::to_string(options->log_level) + " is not a kiln_log_level");
    if (options->log_level != KILN_LOG_DEFAULT) o.log_level = kiln::LogLevel(options->log_level - KILN_LOG_DEBUG);
    if (options->struct_size >= offsetof(kiln_runtime_options, cache_max_bytes) + sizeof(int64_t)) {
      o.cache = options->no_cache == 0;
      KILN_REQUIRE(options->cache_max_bytes >= 0, "options->cache_max_bytes is negative");
      o.cache_max_bytes = options->cache_max_bytes;
    }
    if (options->struct_size >= offsetof(kiln_runtime_options, kernels) + sizeof(const char*) && options->kernels)
      o.kernels = options->kernels;
    if (options->struct_size >= offsetof(kiln_runtime_options, cache_key_file) + sizeof(const char*) && options->cache_key_file)
      o.cache_key_file = options->cache_key_file;
    if (options->struct_size >= offsetof(kiln_runtime_options, precision) + sizeof(const char*) && options->precision)
      o.precision = options->precision;
    if (options->struct_size >= offsetof(kiln_runtime_options, remote_cache) + sizeof(const char*) && options->remote_cache)
      o.remote_cache = options->remote_cache;
    if (options->struct_size >= offsetof(kiln_runtime_options, remote_cache_read_only) + sizeof(int32_t))
      o.remote_cache_read_only = options->remote_cache_read_only != 0;
  }
  return guarded([&] { *out = new kiln_runtime{kiln::Runtime(o)}; });
}

void kiln_runtime_destroy(kiln_runtime* runtime) { delete runtime; }

static kiln_status finish_load(kiln::Model m, kiln_model** out) {
  auto* km = new kiln_model{std::move(m), {}, {}};
  for (const auto& t : km->model.inputs()) km->inputs.push_back(make_storage(t));
  for (const auto& t : km->model.outputs()) km->outputs.push_back(make_storage(t));
  *out = km;
  return KILN_OK;
}

kiln_status kiln_model_load(kiln_runtime* runtime, const char* path, kiln_model** out) {
  KILN_REQUIRE(out, "out is null");
  *out = nullptr;
  KILN_REQUIRE(runtime, "runtime is null");
  KILN_REQUIRE(path, "path is null");
  return guarded([&] { finish_load(kiln::Model::load(runtime->runtime, path), out); });
}

kiln_status kiln_model_load_from_memory(kiln_runtime* runtime, const void* data, size_t size, const char* external_data_dir,
                                        kiln_model** out) {
  const kiln_load_options options = {sizeof(kiln_load_options), external_data_dir, 0};
  return kiln_model_load_from_memory_with_options(runtime, data, size, &options, out);
}

kiln_status kiln_model_load_from_memory_with_options(kiln_runtime* runtime, const void* data, size_t size,
                                                     const kiln_load_options* options, kiln_model** out) {
  KILN_REQUIRE(out, "out is null");
  *out = nullptr;
  KILN_REQUIRE(runtime, "runtime is null");
  KILN_REQUIRE(data || size == 0, "data is null");
  kiln::Model::MemoryLoadOptions o;
  if (options) {
    KILN_REQUIRE(options->struct_size >= offsetof(kiln_load_options, cache) + sizeof(int32_t),
                 "options->struct_size is " + std::to_string(options->struct_size) + ", set it to sizeof(kiln_load_options)");
    if (options->external_data_dir) o.external_data_dir = options->external_data_dir;
    o.cache = options->cache != 0;
  }
  return guarded([&] { finish_load(kiln::Model::load_from_memory(runtime->runtime, data, size, o), out); });
}

void kiln_model_destroy(kiln_model* model) { delete model; }

size_t kiln_model_input_count(const kiln_model* model) { return model ? model->model.inputs().size() : 0; }
size_t kiln_model_output_count(const kiln_model* model) { return model ? model->model.outputs().size() : 0; }

kiln_status kiln_model_input_info(const kiln_model* model, size_t index, kiln_tensor_info* out) {
  KILN_REQUIRE(model && out, "model and out must not be null");
  KILN_REQUIRE(index < model->inputs.size(), "input index " + std::to_string(index) + " is out of range (the model has " +
                                                 std::to_string(model->inputs.size()) + " inputs)");
  fill_info(model->model.inputs()[index], model->inputs[index], out);
  return KILN_OK;
}

kiln_status kiln_model_output_info(const kiln_model* model, size_t index, kiln_tensor_info* out) {
  KILN_REQUIRE(model && out, "model and out must not be null");
  KILN_REQUIRE(index < model->outputs.size(), "output index " + std::to_string(index) + " is out of range (the model has " +
                                                  std::to_string(model->outputs.size()) + " outputs)");
  fill_info(model->model.outputs()[index], model->outputs[index], out);
  return KILN_OK;
}

kiln_status kiln_model_run(const kiln_model* model, const char* const* input_names, const kiln_tensor* const* inputs,
                           size_t input_count, kiln_tensor** outputs, size_t output_count) {
  KILN_REQUIRE(model, "model is null");
  KILN_REQUIRE(input_count == 0 || (input_names && inputs), "input_names and inputs must not be null");
  KILN_REQUIRE(outputs || output_count == 0, "outputs is null");
  KILN_REQUIRE(output_count == model->model.outputs().size(), "output_count is " + std::to_string(output_count) +
                                                                  ", the model has " +
                                                                  std::to_string(model->model.outputs().size()) + " outputs");
  for (size_t i = 0; i < output_count; ++i) outputs[i] = nullptr;
  const std::string refusal = c_api_refusal(model->model);
  KILN_REQUIRE(refusal.empty(), "model '" + model->model.source() + "': " + refusal);
  std::vector<std::pair<std::string, kiln::Tensor>> ins;
  for (size_t i = 0; i < input_count; ++i) {
    KILN_REQUIRE(input_names[i] && inputs[i], "input " + std::to_string(i) + " has a null name or tensor");
    ins.emplace_back(input_names[i], inputs[i]->tensor);
  }
  return guarded([&] {
    std::vector<kiln::Tensor> outs = model->model.run(ins);
    std::vector<std::unique_ptr<kiln_tensor>> made;
    for (auto& t : outs) made.push_back(std::make_unique<kiln_tensor>(kiln_tensor{std::move(t)}));
    for (size_t i = 0; i < made.size(); ++i) outputs[i] = made[i].release();
  });
}

kiln_status kiln_tensor_create(kiln_dtype dtype, const int64_t* dims, size_t rank, kiln_tensor** out) {
  KILN_REQUIRE(out, "out is null");
  *out = nullptr;
  KILN_REQUIRE(valid_dtype(dtype), "dtype " + std::to_string(int(dtype)) + " is not a kiln_dtype");
  KILN_REQUIRE(dims || rank == 0, "dims is null");
  kiln::Shape shape(dims, dims + rank);
  return guarded([&] { *out = new kiln_tensor{kiln::Tensor(kiln::DType(int(dtype)), shape)}; });
}

kiln_status kiln_tensor_create_view(kiln_dtype dtype, const int64_t* dims, size_t rank, void* data, size_t nbytes,
                                    kiln_tensor** out) {
  KILN_REQUIRE(out, "out is null");
  *out = nullptr;
  KILN_REQUIRE(valid_dtype(dtype), "dtype " + std::to_string(int(dtype)) + " is not a kiln_dtype");
  KILN_REQUIRE(dims || rank == 0, "dims is null");
  KILN_REQUIRE(data, "data is null");
  kiln::Shape shape(dims, dims + rank);
  return guarded([&] {
    kiln::Tensor t = kiln::Tensor::view(kiln::DType(int(dtype)), shape, data);
    if (t.nbytes() != nbytes)
      throw kiln::Error(kiln::ErrorCode::InvalidArgument,
                        "kiln_tensor_create_view: shape " + kiln::shape_to_string(shape) + " of " + kiln::dtype_name(t.dtype()) +
                            " needs " + std::to_string(t.nbytes()) + " bytes, got " + std::to_string(nbytes));
    *out = new kiln_tensor{t};
  });
}

void kiln_tensor_destroy(kiln_tensor* tensor) { delete tensor; }
kiln_dtype kiln_tensor_dtype(const kiln_tensor* t) { return t ? kiln_dtype(int(t->tensor.dtype())) : KILN_FLOAT32; }
size_t kiln_tensor_rank(const kiln_tensor* t) { return t ? t->tensor.shape().size() : 0; }
const int64_t* kiln_tensor_dims(const kiln_tensor* t) { return t ? t->tensor.shape().data() : nullptr; }
size_t kiln_tensor_element_count(const kiln_tensor* t) { return t ? size_t(t->tensor.numel()) : 0; }
size_t kiln_tensor_nbytes(const kiln_tensor* t) { return t ? t->tensor.nbytes() : 0; }
void* kiln_tensor_data(kiln_tensor* t) { return t ? t->tensor.data() : nullptr; }

}  // extern "C"
