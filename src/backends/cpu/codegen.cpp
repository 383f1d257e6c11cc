#include "backends/cpu/codegen.hpp"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Transforms/Utils/Cloning.h>
#include <llvm/Transforms/Utils/ValueMapper.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <cmath>
#include <map>
#include <set>

#include "backends/cpu/frozen_control_flow.hpp"
#include "backends/cpu/onednn_kernel.hpp"
#include "backends/cpu/portable_bitcode.hpp"
#include "bundle/runtime/bundle_abi.h"
#include "runtime/ir/error.hpp"

namespace kiln::cpu {

// Exceptions must not unwind through generated frames: they stop here and
// become a status the entry function returns.
int32_t run_kernel(const Kernel* kernel, void* const* args, RunStatus* status) {
  try {
    kernel->run(args);
    return 0;
  } catch (const ir::Error& e) {
    status->error = e.what();
    status->kind = e.kind();
  } catch (const std::exception& e) {
    status->error = e.what();
  } catch (...) {
    status->error = "unknown exception in a kernel";
  }
  return 1;
}

// Runs inside the Runtime's task arena, so its threads are the budget's.
void tbb_parallel_for(void* /*host*/, int64_t n, kiln_pk_task_fn fn, void* task) {
  if (n <= 1) {
    if (n == 1) fn(task, 0, 1);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, 1),
                    [&](const tbb::blocked_range<int64_t>& r) { fn(task, r.begin(), r.end()); });
}

const kiln_pk_threads* tbb_threads() {
  static const kiln_pk_threads threads{&tbb_parallel_for, nullptr};
  return &threads;
}

std::string describe_call_failure(const Call& call, int64_t code) {
  if (call.function == "kiln_pk_gather" || call.function == "kiln_pk_gather_elements")
    return "index " + std::to_string(code - 1) + " (in flattened order) is out of range for the gathered axis";
  if (call.function == "kiln_pk_nll_loss")
    return "target " + std::to_string(code - 1) + " (in flattened order) is not a class, nor the ignored index";
  if (call.function == "kiln_pk_recurrent")
    return "sequence_lens[" + std::to_string(code - 1) + "] is outside [0, sequence length]";
  return call.function + " failed with status " + std::to_string(code);
}

void call_failed(RunStatus* status, int64_t step, int64_t code) {
  status->step = step;
  status->code = code;
}

namespace {

// Merges adjacent dims that every operand walks contiguously, so the inner
// loop is as long as possible.
void collapse(Loop& loop) {
  ir::Dims shape;
  std::vector<std::vector<int64_t>> strides(loop.operands.size());
  for (size_t d = 0; d < loop.shape.size(); ++d) {
    bool merge = !shape.empty();
    for (size_t o = 0; merge && o < loop.operands.size(); ++o)
      merge = strides[o].back() == loop.operands[o].strides[d] * loop.shape[d];
    if (merge) {
      shape.back() *= loop.shape[d];
      for (size_t o = 0; o < loop.operands.size(); ++o) strides[o].back() = loop.operands[o].strides[d];
    } else {
      shape.push_back(loop.shape[d]);
      for (size_t o = 0; o < loop.operands.size(); ++o) strides[o].push_back(loop.operands[o].strides[d]);
    }
  }
  if (shape.empty()) {
    shape.push_back(1);
    for (auto& s : strides) s.push_back(0);
  }
  loop.shape = shape;
  for (size_t o = 0; o < loop.operands.size(); ++o) loop.operands[o].strides = strides[o];
}

std::string step_name(const std::string& entry, size_t step) { return entry + "_step" + std::to_string(step); }

// Whether a loop's operand walks its shape in row-major order.
bool dense(const Loop& loop, const Loop::Operand& o) {
  int64_t stride = 1;
  for (size_t d = loop.shape.size(); d-- > 0; stride *= loop.shape[d])
    if (o.strides[d] != stride) return false;
  return true;
}

// The shape, then each operand's outer strides unless it is dense, of a
// collapsed loop: what its function reads after the step's buffers.
std::vector<int64_t> shape_arguments(const Loop& collapsed) {
  std::vector<int64_t> values = collapsed.shape;
  for (const auto& o : collapsed.operands)
    if (!dense(collapsed, o)) values.insert(values.end(), o.strides.begin(), o.strides.end() - 1);
  return values;
}

class Emitter {
 public:
  Emitter(llvm::Module& m) : m_(m), ctx_(m.getContext()), b_(ctx_) {
    ptr_ = llvm::PointerType::getUnqual(ctx_);
    i64_ = llvm::Type::getInt64Ty(ctx_);
    i32_ = llvm::Type::getInt32Ty(ctx_);
    f32_ = llvm::Type::getFloatTy(ctx_);
    f64_ = llvm::Type::getDoubleTy(ctx_);
  }

  // `bundle`: the entry of a frozen bundle instead (constants at fixed
  // offsets from a weights pointer, failures as a bundle status, and the
  // oneDNN steps of a native bundle run by kiln_bundle_native_execute).
  void entry(const Program& p, const std::string& name, const std::vector<int64_t>* bundle_constants = nullptr) {
    const bool bundle = bundle_constants != nullptr;
    auto* fn_type = bundle ? llvm::FunctionType::get(i32_, {ptr_, ptr_, ptr_, ptr_, ptr_}, false)
                           : llvm::FunctionType::get(i32_, {ptr_, ptr_, ptr_, ptr_, ptr_, ptr_}, false);
    auto* fn = llvm::Function::Create(fn_type, llvm::Function::ExternalLinkage, name, m_);
    // Straight-line calls gain nothing from optimisation and would cost most
    // of the compile time: only the loops are optimised.
    fn->addFnAttr(llvm::Attribute::OptimizeNone);
    fn->addFnAttr(llvm::Attribute::NoInline);
    llvm::Value *kernels = nullptr, *constants = nullptr, *status = nullptr;
    llvm::Value *weights = nullptr, *io = nullptr, *arena = nullptr, *threads = nullptr, *native = nullptr;
    if (bundle) {
      weights = fn->getArg(0);
      io = fn->getArg(1);
      arena = fn->getArg(2);
      threads = fn->getArg(3);
      native = fn->getArg(4);
    } else {
      kernels = fn->getArg(0);
      constants = fn->getArg(1);
      io = fn->getArg(2);
      arena = fn->getArg(3);
      status = fn->getArg(4);
      threads = fn->getArg(5);
    }
    auto* block = llvm::BasicBlock::Create(ctx_, "entry", fn);
    auto* fail = llvm::BasicBlock::Create(ctx_, "fail", fn);
    b_.SetInsertPoint(fail);
    b_.CreateRet(b_.getInt32(bundle ? KILN_BUNDLE_ERROR_INDEX : 1));
    b_.SetInsertPoint(block);
    // Every step's argument array lives in the entry block: static stack slots.
    std::vector<llvm::Value*> arg_arrays;
    for (const Step& step : p.steps) {
      const size_t slots = step.args.size() + (step.loop ? loop_arguments(*step.loop).size() : 0);
      arg_arrays.push_back(b_.CreateAlloca(llvm::ArrayType::get(ptr_, std::max<size_t>(slots, 1))));
    }

    // Host functions of the JIT; a bundle's oneDNN steps call into bundle_native.c.
    llvm::FunctionCallee run_kernel_fn, failed_fn;
    if (bundle) {
      run_kernel_fn =
          m_.getOrInsertFunction("kiln_bundle_native_execute", llvm::FunctionType::get(i32_, {ptr_, i32_, ptr_}, false));
    } else {
      run_kernel_fn = m_.getOrInsertFunction("kiln_cpu_run_kernel", llvm::FunctionType::get(i32_, {ptr_, ptr_, ptr_}, false));
      failed_fn = m_.getOrInsertFunction("kiln_cpu_call_failed",
                                         llvm::FunctionType::get(llvm::Type::getVoidTy(ctx_), {ptr_, i64_, i64_}, false));
    }
    // threads->parallel_for, or null: serial.
    auto* threads_set = llvm::BasicBlock::Create(ctx_, "threads_set", fn);
    auto* threads_known = llvm::BasicBlock::Create(ctx_, "threads_known", fn);
    b_.CreateCondBr(b_.CreateIsNull(threads), threads_known, threads_set);
    b_.SetInsertPoint(threads_set);
    auto* pf_loaded = b_.CreateLoad(ptr_, threads);
    auto* host_loaded = b_.CreateLoad(ptr_, b_.CreateConstInBoundsGEP1_64(ptr_, threads, 1));
    b_.CreateBr(threads_known);
    b_.SetInsertPoint(threads_known);
    auto* parallel_for = b_.CreatePHI(ptr_, 2, "parallel_for");
    parallel_for->addIncoming(llvm::ConstantPointerNull::get(llvm::PointerType::getUnqual(ctx_)), block);
    parallel_for->addIncoming(pf_loaded, threads_set);
    auto* host = b_.CreatePHI(ptr_, 2, "host");
    host->addIncoming(llvm::ConstantPointerNull::get(llvm::PointerType::getUnqual(ctx_)), block);
    host->addIncoming(host_loaded, threads_set);
    auto* task_type = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx_), {ptr_, i64_, i64_}, false);
    auto* parallel_type = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx_), {ptr_, i64_, ptr_, ptr_}, false);
    const int64_t num_inputs = int64_t(p.inputs.size());
    uint32_t native_steps = 0;  // a bundle's oneDNN steps so far: their index in its native table
    for (size_t s = 0; s < p.steps.size(); ++s) {
      const Step& step = p.steps[s];
      auto* args = arg_arrays[s];
      for (size_t a = 0; a < step.args.size(); ++a) {
        const Buffer& buf = p.buffers[size_t(step.args[a])];
        llvm::Value* where = nullptr;
        switch (buf.kind) {
          case Buffer::Kind::Arena: where = b_.CreateConstInBoundsGEP1_64(b_.getInt8Ty(), arena, uint64_t(buf.offset)); break;
          case Buffer::Kind::Input: where = load_ptr(io, buf.index); break;
          case Buffer::Kind::Output: where = load_ptr(io, num_inputs + buf.index); break;
          case Buffer::Kind::Constant:
            where =
                bundle ? b_.CreateConstInBoundsGEP1_64(b_.getInt8Ty(), weights, uint64_t(bundle_constants->at(size_t(buf.index))))
                       : load_ptr(constants, buf.index);
            break;
        }
        b_.CreateStore(where, b_.CreateConstInBoundsGEP1_64(ptr_, args, a));
      }
      if (step.kernel || step.flow) {
        step_names.push_back("");
        llvm::Value* result = nullptr;
        if (step.flow) {
          if (!bundle) ir::fail(ir::ErrorKind::Internal, "step '" + step.label + "' is a bundle's control flow");
          result = b_.CreateCall(emit_frozen_control_flow(m_, *step.flow, step_name(name, s)), {args, threads});
        } else if (bundle) {
          if (!is_onednn_kernel(*step.kernel))
            ir::fail(ir::ErrorKind::Unsupported, "step '" + step.label + "' needs a host kernel, which a bundle cannot call");
          result = b_.CreateCall(run_kernel_fn, {native, b_.getInt32(native_steps++), args});
        } else {
          result = b_.CreateCall(run_kernel_fn, {load_ptr(kernels, int64_t(s)), args, status});
        }
        auto* failed = llvm::BasicBlock::Create(ctx_, "step" + std::to_string(s) + "_failed", fn);
        auto* next = llvm::BasicBlock::Create(ctx_, "step" + std::to_string(s + 1), fn);
        b_.CreateCondBr(b_.CreateICmpNE(result, b_.getInt32(0)), failed, next);
        b_.SetInsertPoint(failed);
        b_.CreateRet(result);
        b_.SetInsertPoint(next);
      } else if (step.call) {
        llvm::Function* wrapper = call_function(*step.call, step.args.size(), step_name(name, s));
        step_names.push_back(wrapper->getName().str());
        auto* code = b_.CreateCall(wrapper, {threads, args});
        if (step.call->returns_status) {
          auto* failed = llvm::BasicBlock::Create(ctx_, "step" + std::to_string(s) + "_failed", fn);
          auto* next = llvm::BasicBlock::Create(ctx_, "step" + std::to_string(s + 1), fn);
          b_.CreateCondBr(b_.CreateICmpNE(code, b_.getInt64(0)), failed, next);
          b_.SetInsertPoint(failed);
          if (!bundle) b_.CreateCall(failed_fn, {status, b_.getInt64(uint64_t(s)), code});
          b_.CreateBr(fail);
          b_.SetInsertPoint(next);
        }
      } else {
        Loop loop = *step.loop;
        collapse(loop);
        int64_t n = 1;
        for (int64_t d : loop.shape) n *= d;
        // A vectorised loop costs several milliseconds to compile, so loops
        // that differ only in their shape and outer strides (a transformer's
        // layers, EfficientNet's SiLU and squeeze-and-excitation scales at
        // each size) share one function, which reads them after the step's
        // buffers in its argument array.
        const std::vector<int64_t> extra = shape_arguments(loop);
        for (size_t k = 0; k < extra.size(); ++k)
          b_.CreateStore(b_.CreateIntToPtr(b_.getInt64(uint64_t(extra[k])), ptr_),
                         b_.CreateConstInBoundsGEP1_64(ptr_, args, step.args.size() + k));
        auto& body = loops_by_key_[loop_key(loop, step.args.size())];
        if (!body) body = loop_function(loop, step.args.size(), step_name(name, s));
        step_names.push_back(body->getName().str());
        const int64_t chunks = loop_chunks(n);
        if (chunks == 1) {
          b_.CreateCall(task_type, body, {args, b_.getInt64(0), b_.getInt64(1)});
        } else {
          auto* par = llvm::BasicBlock::Create(ctx_, "step" + std::to_string(s) + "_parallel", fn);
          auto* ser = llvm::BasicBlock::Create(ctx_, "step" + std::to_string(s) + "_serial", fn);
          auto* next = llvm::BasicBlock::Create(ctx_, "step" + std::to_string(s + 1), fn);
          b_.CreateCondBr(b_.CreateIsNull(parallel_for), ser, par);
          b_.SetInsertPoint(par);
          b_.CreateCall(parallel_type, parallel_for, {host, b_.getInt64(uint64_t(chunks)), body, args});
          b_.CreateBr(next);
          b_.SetInsertPoint(ser);
          b_.CreateCall(task_type, body, {args, b_.getInt64(0), b_.getInt64(uint64_t(chunks))});
          b_.CreateBr(next);
          b_.SetInsertPoint(next);
        }
      }
    }
    b_.CreateRet(b_.getInt32(0));
  }

  std::vector<std::string> step_names;  // per step: its loop or call function, or ""
  std::set<std::string> loop_functions() const {
    std::set<std::string> names;
    for (const auto& [key, fn] : loops_by_key_) names.insert(fn->getName().str());
    return names;
  }

 private:
  // What a loop's function depends on: not the shape, nor an operand's
  // strides but the innermost (which vectorisation needs to know).
  static std::string loop_key(const Loop& loop, size_t buffers) {
    std::string k;
    auto put = [&](const void* p, size_t n) { k.append(static_cast<const char*>(p), n); };
    const size_t rank = loop.shape.size();
    put(&rank, sizeof rank);
    put(&buffers, sizeof buffers);
    for (const auto& o : loop.operands) {
      const bool is_dense = dense(loop, o);
      put(&o.arg, sizeof o.arg);
      put(&is_dense, sizeof is_dense);
      put(&o.strides.back(), sizeof o.strides.back());
      put(&o.type, sizeof o.type);
    }
    k += '|';
    for (const auto& in : loop.code) {
      put(&in.op, sizeof in.op);
      put(&in.a, sizeof in.a);
      put(&in.b, sizeof in.b);
      put(&in.alpha, sizeof in.alpha);
      put(&in.beta, sizeof in.beta);
      put(&in.type, sizeof in.type);
      put(&in.c, sizeof in.c);
    }
    k += '|';
    for (const auto& st : loop.stores) put(&st, sizeof st);
    return k;
  }

  llvm::Value* load_ptr(llvm::Value* table, int64_t index) {
    return b_.CreateLoad(ptr_, b_.CreateConstInBoundsGEP1_64(ptr_, table, uint64_t(index)));
  }

  llvm::Value* intrinsic(llvm::Intrinsic::ID id, std::vector<llvm::Value*> args) { return b_.CreateIntrinsic(id, {f32_}, args); }
  llvm::Constant* f(float v) { return llvm::ConstantFP::get(f32_, v); }
  llvm::Value* select_positive(llvm::Value* x, llvm::Value* pos, llvm::Value* neg) {
    return b_.CreateSelect(b_.CreateFCmpOGT(x, f(0)), pos, neg);
  }
  // a * b + c, fused where the target has FMA (the portable kernels' vexp is
  // compiled with -ffp-contract=fast, so it fuses the same steps).
  llvm::Value* muladd(llvm::Value* a, llvm::Value* b, llvm::Value* c) { return intrinsic(llvm::Intrinsic::fmuladd, {a, b, c}); }
  // exp in plain arithmetic, so that loops with it vectorise (llvm.exp
  // becomes one libm call per element: RetinaNet's Sigmoid over 8 million
  // scores took 20 ms). The portable kernels' vexp, step for step: Cody-Waite
  // reduction to r in [-ln2/2, ln2/2], a degree-6 Taylor polynomial (a couple
  // of ulp), 2^n put into the exponent bits; 0 below 2^-125, inf above
  // FLT_MAX. No fast-math flags are set, so the rounding through
  // the magic constant survives optimisation.
  llvm::Value* exp(llvm::Value* x) {
    const float lo = -86.6433525f, hi = 88.7228394f, magic = 12582912.0f;
    llvm::Value* xc = b_.CreateSelect(b_.CreateFCmpOLT(x, f(lo)), f(lo), x);
    xc = b_.CreateSelect(b_.CreateFCmpOGT(xc, f(hi)), f(hi), xc);
    llvm::Value* t = muladd(xc, f(1.44269504088896341f), f(magic));
    llvm::Value* n = b_.CreateFSub(t, f(magic));
    llvm::Value* ni = b_.CreateSub(b_.CreateBitCast(t, i32_), b_.CreateBitCast(f(magic), i32_));
    llvm::Value* r = muladd(n, f(-0.693359375f), xc);
    r = muladd(n, f(2.12194440e-4f), r);
    llvm::Value* p = f(1.0f / 720.0f);
    for (float c : {1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f}) p = muladd(p, r, f(c));
    // 2^n as 2^(n - 1) * 2, so that n = 128 (x near hi) stays finite.
    llvm::Value* scale = b_.CreateBitCast(b_.CreateShl(b_.CreateAdd(ni, b_.getInt32(126)), 23), f32_);
    llvm::Value* y = b_.CreateFMul(b_.CreateFMul(p, scale), f(2));
    y = b_.CreateSelect(b_.CreateFCmpOLT(x, f(lo)), f(0), y);
    // A NaN fails every comparison above and stays NaN throughout.
    return b_.CreateSelect(b_.CreateFCmpOGT(x, f(hi)), llvm::ConstantFP::getInfinity(f32_), y);
  }

  // erf and tanh in plain arithmetic too (libm's are one call per element:
  // a GELU over 255k values took 0.54 ms). Near 0 an odd Taylor polynomial
  // (relative error under 1e-7 below the switch point), elsewhere through
  // exp; both computed and one selected, so that the loop vectorises. tanh
  // is vmath.hpp's vtanh, step for step.
  llvm::Value* odd_series(llvm::Value* x, std::initializer_list<float> coefficients) {
    llvm::Value* x2 = b_.CreateFMul(x, x);
    llvm::Value* p = nullptr;
    for (auto c = std::rbegin(coefficients); c != std::rend(coefficients); ++c) p = p ? muladd(p, x2, f(*c)) : f(*c);
    return b_.CreateFMul(x, p);
  }
  llvm::Value* erf(llvm::Value* x) {
    const float k = 1.12837916709551257f;  // 2 / sqrt(pi)
    llvm::Value* near = odd_series(x, {k, -k / 3, k / 10, -k / 42, k / 216, -k / 1320});
    // Abramowitz and Stegun 7.1.26 (absolute error 1.5e-7) for |x| >= 0.5.
    llvm::Value* ax = intrinsic(llvm::Intrinsic::fabs, {x});
    llvm::Value* t = b_.CreateFDiv(f(1), muladd(ax, f(0.3275911f), f(1)));
    llvm::Value* p = f(1.061405429f);
    for (float c : {-1.453152027f, 1.421413741f, -0.284496736f, 0.254829592f}) p = muladd(p, t, f(c));
    llvm::Value* far = b_.CreateFSub(f(1), b_.CreateFMul(b_.CreateFMul(p, t), exp(b_.CreateFNeg(b_.CreateFMul(ax, ax)))));
    far = intrinsic(llvm::Intrinsic::copysign, {far, x});
    return b_.CreateSelect(b_.CreateFCmpOLT(ax, f(0.5f)), near, far);
  }
  llvm::Value* tanh(llvm::Value* x) {
    llvm::Value* near =
        odd_series(x, {1.0f, -1.0f / 3, 2.0f / 15, -17.0f / 315, 62.0f / 2835, -1382.0f / 155925, 21844.0f / 6081075});
    // 1 - 2 / (e^2|x| + 1): 1 once e^2|x| overflows.
    llvm::Value* ax = intrinsic(llvm::Intrinsic::fabs, {x});
    llvm::Value* far = b_.CreateFSub(f(1), b_.CreateFDiv(f(2), b_.CreateFAdd(exp(b_.CreateFAdd(ax, ax)), f(1))));
    far = intrinsic(llvm::Intrinsic::copysign, {far, x});
    return b_.CreateSelect(b_.CreateFCmpOLT(ax, f(0.4f)), near, far);
  }

  llvm::Value* apply(const Loop& loop, const Loop::Instr& in, const std::vector<llvm::Value*>& values) {
    using Op = Loop::Op;
    llvm::Value* a = in.a >= 0 ? values[size_t(in.a)] : nullptr;
    llvm::Value* b = in.b >= 0 ? values[size_t(in.b)] : nullptr;
    if (in.type != ir::DType::Float32 || (in.a >= 0 && loop.code[size_t(in.a)].type != ir::DType::Float32) ||
        (in.b >= 0 && loop.code[size_t(in.b)].type != ir::DType::Float32) || in.op >= Op::Cast || in.op == Op::Max ||
        in.op == Op::Min)
      return apply_typed(loop, in, values);
    switch (in.op) {
      default: break;  // Load, and what apply_typed computes
      case Op::Constant: return f(in.alpha);
      case Op::Add: return b_.CreateFAdd(a, b);
      case Op::Sub: return b_.CreateFSub(a, b);
      case Op::Mul: return b_.CreateFMul(a, b);
      case Op::Div: return b_.CreateFDiv(a, b);
      case Op::Pow: return intrinsic(llvm::Intrinsic::pow, {a, b});
      case Op::PRelu: return select_positive(a, a, b_.CreateFMul(a, b));
      case Op::Neg: return b_.CreateFNeg(a);
      case Op::Abs: return intrinsic(llvm::Intrinsic::fabs, {a});
      case Op::Relu: return select_positive(a, a, f(0));
      case Op::LeakyRelu: return select_positive(a, a, b_.CreateFMul(a, f(in.alpha)));
      case Op::Sigmoid: return b_.CreateFDiv(f(1), b_.CreateFAdd(f(1), exp(b_.CreateFNeg(a))));
      case Op::Tanh: return tanh(a);
      case Op::Exp: return exp(a);
      case Op::Log: return intrinsic(llvm::Intrinsic::log, {a});
      case Op::Sqrt: return intrinsic(llvm::Intrinsic::sqrt, {a});
      case Op::Erf: return erf(a);
      case Op::Reciprocal: return b_.CreateFDiv(f(1), a);
      case Op::Floor: return intrinsic(llvm::Intrinsic::floor, {a});
      case Op::Ceil: return intrinsic(llvm::Intrinsic::ceil, {a});
      case Op::Clip:
        return intrinsic(llvm::Intrinsic::minnum, {intrinsic(llvm::Intrinsic::maxnum, {a, f(in.alpha)}), f(in.beta)});
      case Op::HardSigmoid: {
        auto* lin = b_.CreateFAdd(b_.CreateFMul(a, f(in.alpha)), f(in.beta));
        return intrinsic(llvm::Intrinsic::maxnum, {f(0), intrinsic(llvm::Intrinsic::minnum, {f(1), lin})});
      }
      case Op::HardSwish: {
        auto* lin = b_.CreateFAdd(b_.CreateFMul(a, f(1.0f / 6)), f(0.5f));
        return b_.CreateFMul(a, intrinsic(llvm::Intrinsic::maxnum, {f(0), intrinsic(llvm::Intrinsic::minnum, {f(1), lin})}));
      }
      case Op::Softplus: return intrinsic(llvm::Intrinsic::log, {b_.CreateFAdd(exp(a), f(1))});
      case Op::Elu: return select_positive(a, a, b_.CreateFMul(f(in.alpha), b_.CreateFSub(exp(a), f(1))));
      case Op::Selu:
        return b_.CreateFMul(f(in.beta), select_positive(a, a, b_.CreateFMul(f(in.alpha), b_.CreateFSub(exp(a), f(1)))));
      case Op::Softsign: return b_.CreateFDiv(a, b_.CreateFAdd(f(1), intrinsic(llvm::Intrinsic::fabs, {a})));
    }
    ir::fail(ir::ErrorKind::Internal, "code generation: unknown loop instruction");
  }

  // ---- loops of any element type ------------------------------------------
  static bool floating(ir::DType t) { return t == ir::DType::Float32 || t == ir::DType::Float64 || t == ir::DType::Float16; }
  static bool is_signed(ir::DType t) { return ir::dtype_is_signed_int(t); }

  llvm::Type* element_type(ir::DType t) {
    switch (t) {
      case ir::DType::Float32: return f32_;
      case ir::DType::Float64: return f64_;
      case ir::DType::Float16: return b_.getHalfTy();
      case ir::DType::Bool:
      case ir::DType::UInt8:
      case ir::DType::Int8: return b_.getInt8Ty();
      case ir::DType::UInt16:
      case ir::DType::Int16: return b_.getInt16Ty();
      case ir::DType::UInt32:
      case ir::DType::Int32: return i32_;
      case ir::DType::UInt64:
      case ir::DType::Int64: return i64_;
      default: break;
    }
    ir::fail(ir::ErrorKind::Internal, std::string("code generation: a loop over ") + ir::dtype_name(t) + " values");
  }
  llvm::Constant* constant(ir::DType t, double v) {
    return floating(t) ? llvm::ConstantFP::get(element_type(t), v)
                       : llvm::ConstantInt::get(element_type(t), uint64_t(int64_t(v)), is_signed(t));
  }
  llvm::Value* less(ir::DType t, llvm::Value* a, llvm::Value* b) {
    return floating(t) ? b_.CreateFCmpOLT(a, b) : is_signed(t) ? b_.CreateICmpSLT(a, b) : b_.CreateICmpULT(a, b);
  }
  llvm::Value* greater(ir::DType t, llvm::Value* a, llvm::Value* b) {
    return floating(t) ? b_.CreateFCmpOGT(a, b) : is_signed(t) ? b_.CreateICmpSGT(a, b) : b_.CreateICmpUGT(a, b);
  }
  llvm::Value* is_nan(ir::DType t, llvm::Value* a) { return floating(t) ? b_.CreateFCmpUNO(a, a) : b_.getFalse(); }

  // Tensor::cast's conversions: float to integer truncates and saturates (NaN
  // to 0), to bool is "not zero" (a double through float first).
  llvm::Value* convert(llvm::Value* v, ir::DType from, ir::DType to) {
    if (from == to) return v;
    // To and from float16 through float, as ir::Half converts.
    if (from == ir::DType::Float16) return convert(b_.CreateFPExt(v, f32_), ir::DType::Float32, to);
    if (to == ir::DType::Float16) return b_.CreateFPTrunc(convert(v, from, ir::DType::Float32), element_type(to));
    llvm::Type* want = element_type(to);
    if (to == ir::DType::Bool) {
      llvm::Value* nonzero = floating(from) ? b_.CreateFCmpUNE(b_.CreateFPTrunc(v, f32_), llvm::ConstantFP::get(f32_, 0.0))
                                            : b_.CreateICmpNE(v, llvm::ConstantInt::get(v->getType(), 0));
      return b_.CreateZExt(nonzero, want);
    }
    if (floating(from) && floating(to)) return b_.CreateFPCast(v, want);
    if (floating(from))
      return b_.CreateIntrinsic(is_signed(to) ? llvm::Intrinsic::fptosi_sat : llvm::Intrinsic::fptoui_sat, {want, v->getType()},
                                {v});
    const bool from_signed = is_signed(from);
    if (floating(to)) return from_signed ? b_.CreateSIToFP(v, want) : b_.CreateUIToFP(v, want);
    return b_.CreateIntCast(v, want, from_signed);
  }
  llvm::Value* to_double(llvm::Value* v, ir::DType from) { return convert(v, from, ir::DType::Float64); }
  llvm::Value* libm(const char* name, std::vector<llvm::Value*> args) {
    std::vector<llvm::Type*> params(args.size(), f64_);
    return b_.CreateCall(m_.getOrInsertFunction(name, llvm::FunctionType::get(f64_, params, false)), args);
  }

  llvm::Value* apply_typed(const Loop& loop, const Loop::Instr& in, const std::vector<llvm::Value*>& values) {
    // The reference kernels compute float16 in float, rounding each result.
    const bool half = in.type == ir::DType::Float16 && in.op != Loop::Op::Cast;
    auto operand = [&](int k, ir::DType& type) -> llvm::Value* {
      if (k < 0) return nullptr;
      type = loop.code[size_t(k)].type;
      if (type != ir::DType::Float16 || in.op == Loop::Op::Cast) return values[size_t(k)];
      type = ir::DType::Float32;
      return b_.CreateFPExt(values[size_t(k)], f32_);
    };
    const ir::DType t = half ? ir::DType::Float32 : in.type;
    ir::DType ta = t, tb = t, tc = t;
    llvm::Value *a = operand(in.a, ta), *b = operand(in.b, tb), *c = operand(in.c, tc);
    llvm::Value* r = compute(in, t, ta, tb, a, b, c);
    return half ? b_.CreateFPTrunc(r, element_type(ir::DType::Float16)) : r;
  }

  llvm::Value* compute(const Loop::Instr& in, ir::DType t, ir::DType ta, ir::DType tb, llvm::Value* a, llvm::Value* b,
                       llvm::Value* c) {
    using Op = Loop::Op;
    const bool fp = floating(t);
    auto from_double = [&](llvm::Value* d) { return convert(d, ir::DType::Float64, t); };
    switch (in.op) {
      case Op::Constant: return constant(t, in.alpha);
      case Op::Add: return fp ? b_.CreateFAdd(a, b) : b_.CreateAdd(a, b);
      case Op::Sub: return fp ? b_.CreateFSub(a, b) : b_.CreateSub(a, b);
      case Op::Mul: return fp ? b_.CreateFMul(a, b) : b_.CreateMul(a, b);
      case Op::Div:
        if (fp) return b_.CreateFDiv(a, b);
        break;  // integer division needs a check for zero, which loops do not make
      case Op::Max:
      case Op::Min: {
        // The reference's, numpy's: a if a is NaN or beyond b, else b.
        llvm::Value* beyond = in.op == Op::Max ? greater(t, a, b) : less(t, a, b);
        return b_.CreateSelect(b_.CreateOr(is_nan(t, a), beyond), a, b);
      }
      case Op::Neg: return fp ? b_.CreateFNeg(a) : b_.CreateNeg(a);
      case Op::Abs:
        if (fp) return b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, a);
        return is_signed(t) ? b_.CreateBinaryIntrinsic(llvm::Intrinsic::abs, a, b_.getFalse()) : a;
      case Op::Relu: return b_.CreateSelect(greater(t, a, constant(t, 0)), a, constant(t, 0));
      case Op::Floor: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::floor, a);
      case Op::Ceil: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::ceil, a);
      case Op::Sqrt: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, a);
      case Op::Reciprocal: return b_.CreateFDiv(constant(t, 1), a);
      case Op::Pow:  // the exponent of any type; computed in double, as the reference does
        return from_double(libm("pow", {to_double(a, ta), to_double(b, tb)}));
      case Op::Cast: return convert(a, ta, t);
      case Op::Where: return b_.CreateSelect(b_.CreateICmpNE(a, b_.getInt8(0)), b, c);
      case Op::ClipBetween: {
        llvm::Value* v = a;
        if (b) v = b_.CreateSelect(less(t, v, b), b, v);
        if (c) v = b_.CreateSelect(greater(t, v, c), c, v);
        return v;
      }
      case Op::Mod: {
        if (!fp) break;  // as Div
        llvm::Value* r = b_.CreateFRem(a, b);
        if (in.alpha != 0) return r;
        llvm::Value* zero = constant(t, 0);
        llvm::Value* other_sign = b_.CreateXor(b_.CreateFCmpOLT(r, zero), b_.CreateFCmpOLT(b, zero));
        return b_.CreateSelect(b_.CreateAnd(b_.CreateFCmpUNE(r, zero), other_sign), b_.CreateFAdd(r, b), r);
      }
      case Op::BitShift: {
        const unsigned bits = a->getType()->getIntegerBitWidth();
        llvm::Value* past = b_.CreateICmpUGE(b, llvm::ConstantInt::get(b->getType(), bits));
        llvm::Value* by = b_.CreateSelect(past, llvm::ConstantInt::get(b->getType(), 0), b);
        llvm::Value* shifted = in.alpha == 0 ? b_.CreateShl(a, by) : b_.CreateLShr(a, by);
        return b_.CreateSelect(past, llvm::ConstantInt::get(a->getType(), 0), shifted);
      }
      case Op::Not: return b_.CreateXor(a, b_.getInt8(1));
      case Op::Sign: {
        llvm::Value* zero = constant(t, 0);
        llvm::Value* v = is_signed(t) || fp ? b_.CreateSelect(less(t, a, zero), constant(t, -1), a) : a;
        return b_.CreateSelect(greater(t, a, zero), constant(t, 1), v);
      }
      case Op::Round: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::roundeven, a);
      case Op::IsNaN: return b_.CreateZExt(b_.CreateFCmpUNO(a, a), b_.getInt8Ty());
      case Op::IsInf: {
        llvm::Value* inf =
            b_.CreateFCmpOEQ(b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, a), llvm::ConstantFP::getInfinity(a->getType()));
        llvm::Value* wanted = b_.CreateSelect(b_.CreateFCmpOLT(a, llvm::ConstantFP::get(a->getType(), 0)),
                                              b_.getInt1(in.alpha != 0), b_.getInt1(in.beta != 0));
        return b_.CreateZExt(b_.CreateAnd(inf, wanted), b_.getInt8Ty());
      }
      case Op::Libm: {
        static const char* const names[] = {"sin",  "cos",  "tan",   "asin",  "acos", "atan",
                                            "sinh", "cosh", "asinh", "acosh", "atanh"};
        static_assert(std::size(names) == size_t(Loop::LibmFunction::Count));
        const auto k = size_t(in.alpha);
        if (in.alpha < 0 || k >= std::size(names) || float(k) != in.alpha) break;
        return from_double(libm(names[k], {to_double(a, ta)}));
      }
      case Op::ThresholdedRelu: return b_.CreateSelect(greater(t, a, constant(t, in.alpha)), a, constant(t, 0));
      case Op::Shrink: {
        llvm::Value* v = to_double(a, ta);
        llvm::Value* lambd = llvm::ConstantFP::get(f64_, double(in.alpha));
        llvm::Value* bias = llvm::ConstantFP::get(f64_, double(in.beta));
        llvm::Value* r = b_.CreateSelect(b_.CreateFCmpOGT(v, lambd), b_.CreateFSub(v, bias), llvm::ConstantFP::get(f64_, 0.0));
        r = b_.CreateSelect(b_.CreateFCmpOLT(v, b_.CreateFNeg(lambd)), b_.CreateFAdd(v, bias), r);
        return from_double(r);
      }
      case Op::Celu: {
        llvm::Value* x = to_double(a, ta);
        llvm::Value* alpha = llvm::ConstantFP::get(f64_, double(in.alpha));
        llvm::Value* zero = llvm::ConstantFP::get(f64_, 0.0);
        llvm::Value* e =
            b_.CreateFMul(alpha, b_.CreateFSub(libm("exp", {b_.CreateFDiv(x, alpha)}), llvm::ConstantFP::get(f64_, 1.0)));
        // std::max(0.0, x) and std::min(0.0, e), NaN included.
        llvm::Value* hi = b_.CreateSelect(b_.CreateFCmpOLT(zero, x), x, zero);
        llvm::Value* lo = b_.CreateSelect(b_.CreateFCmpOLT(e, zero), e, zero);
        return from_double(b_.CreateFAdd(hi, lo));
      }
      default: break;
    }
    ir::fail(ir::ErrorKind::Internal, std::string("code generation: loop instruction ") + std::to_string(int(in.op)) + " over " +
                                          ir::dtype_name(t) + " values");
  }

  // int64_t fn(const kiln_pk_threads* threads, void* const* args): the
  // portable kernel called with the step's buffers and its shapes as
  // constants; returns the kernel's status (0 for kernels without one).
  llvm::Function* call_function(const Call& call, size_t num_args, const std::string& name) {
    llvm::Function* kernel = m_.getFunction(call.function);
    if (!kernel) ir::fail(ir::ErrorKind::Internal, "portable kernel '" + call.function + "' is not in the kernel library");
    llvm::FunctionType* type = kernel->getFunctionType();
    auto mismatch = [&](const std::string& what) {
      ir::fail(ir::ErrorKind::Internal, "call of portable kernel '" + call.function + "': " + what);
    };
    if (type->getNumParams() != call.args.size() + 1)
      mismatch(std::to_string(call.args.size() + 1) + " arguments for " + std::to_string(type->getNumParams()) + " parameters");
    auto* saved = b_.GetInsertBlock();
    auto* fn =
        llvm::Function::Create(llvm::FunctionType::get(i64_, {ptr_, ptr_}, false), llvm::Function::ExternalLinkage, name, m_);
    fn->addFnAttr(llvm::Attribute::NoUnwind);
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn));
    std::vector<llvm::Value*> values{fn->getArg(0)};
    for (size_t i = 0; i < call.args.size(); ++i) {
      const Call::Arg& a = call.args[i];
      llvm::Type* want = type->getParamType(unsigned(i + 1));
      llvm::Type* have = nullptr;
      llvm::Value* v = nullptr;
      switch (a.kind) {
        case Call::Arg::Kind::Buffer:
          if (a.value < 0 || size_t(a.value) >= num_args) mismatch("argument " + std::to_string(i) + " names no buffer");
          have = ptr_;
          v = load_ptr(fn->getArg(1), a.value);
          if (a.byte_offset) v = b_.CreateInBoundsGEP(b_.getInt8Ty(), v, b_.getInt64(uint64_t(a.byte_offset)));
          break;
        case Call::Arg::Kind::Null:
          have = ptr_;
          v = llvm::ConstantPointerNull::get(llvm::PointerType::getUnqual(ctx_));
          break;
        case Call::Arg::Kind::Int64:
          have = i64_;
          v = b_.getInt64(uint64_t(a.value));
          break;
        case Call::Arg::Kind::Int32:
          have = i32_;
          v = b_.getInt32(uint32_t(a.value));
          break;
        case Call::Arg::Kind::Float:
          have = f32_;
          v = f(a.real);
          break;
        case Call::Arg::Kind::Int64Array: {
          auto* init = llvm::ConstantDataArray::get(
              ctx_, llvm::ArrayRef<uint64_t>(reinterpret_cast<const uint64_t*>(a.values.data()), a.values.size()));
          v = new llvm::GlobalVariable(m_, init->getType(), true, llvm::GlobalValue::PrivateLinkage, init, name + "_c");
          have = ptr_;
          break;
        }
      }
      if (want != have) mismatch("argument " + std::to_string(i) + " has the wrong type");
      values.push_back(v);
    }
    auto* result = b_.CreateCall(kernel, values);
    if (call.returns_status != type->getReturnType()->isIntegerTy(64)) mismatch("status return does not match");
    b_.CreateRet(call.returns_status ? static_cast<llvm::Value*>(result) : b_.getInt64(0));
    b_.SetInsertPoint(saved);
    return fn;
  }

  // void fn(void* const* args, int64_t first_chunk, int64_t end_chunk) over
  // flat elements [first_chunk, end_chunk) * kLoopChunk of the loop's
  // (collapsed) shape: rows of the last dim, operand offsets recomputed once
  // per row. `args` holds the step's `buffers`, then its shape_arguments. Its
  // type is kiln_pk_task_fn's, so the host's parallel_for runs it.
  llvm::Function* loop_function(const Loop& loop, size_t buffers, const std::string& name) {
    auto* saved = b_.GetInsertBlock();
    auto* fn_type = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx_), {ptr_, i64_, i64_}, false);
    auto* fn = llvm::Function::Create(fn_type, llvm::Function::ExternalLinkage, name, m_);
    fn->addFnAttr(llvm::Attribute::NoUnwind);
    auto* args = fn->getArg(0);
    auto* entry = llvm::BasicBlock::Create(ctx_, "entry", fn);
    auto* row_head = llvm::BasicBlock::Create(ctx_, "row_head", fn);
    auto* row_body = llvm::BasicBlock::Create(ctx_, "row_body", fn);
    auto* inner = llvm::BasicBlock::Create(ctx_, "inner", fn);
    auto* row_end = llvm::BasicBlock::Create(ctx_, "row_end", fn);
    auto* exit = llvm::BasicBlock::Create(ctx_, "exit", fn);

    const size_t rank = loop.shape.size();
    b_.SetInsertPoint(entry);
    size_t next_arg = buffers;
    auto shape_argument = [&] { return b_.CreatePtrToInt(load_ptr(args, int64_t(next_arg++)), i64_); };
    std::vector<llvm::Value*> shape;
    for (size_t d = 0; d < rank; ++d) shape.push_back(shape_argument());
    // Per operand: its strides, the innermost a constant (none for a dense one).
    std::vector<std::vector<llvm::Value*>> strides(loop.operands.size());
    for (size_t o = 0; o < loop.operands.size(); ++o) {
      if (dense(loop, loop.operands[o])) continue;
      for (size_t d = 0; d + 1 < rank; ++d) strides[o].push_back(shape_argument());
      strides[o].push_back(b_.getInt64(uint64_t(loop.operands[o].strides.back())));
    }
    llvm::Value* n = shape[0];
    for (size_t d = 1; d < rank; ++d) n = b_.CreateMul(n, shape[d]);
    llvm::Value* row_len = shape.back();
    auto* begin = b_.CreateMul(fn->getArg(1), b_.getInt64(uint64_t(kLoopChunk)));
    auto* chunk_end = b_.CreateMul(fn->getArg(2), b_.getInt64(uint64_t(kLoopChunk)));
    auto* end = b_.CreateSelect(b_.CreateICmpSLT(chunk_end, n), chunk_end, n);
    std::map<int, llvm::Value*> base_of;
    auto base = [&](int arg) {
      auto [it, added] = base_of.try_emplace(arg, nullptr);
      if (added) it->second = load_ptr(args, arg);
      return it->second;
    };
    std::vector<llvm::Value*> operand_base;
    for (const auto& o : loop.operands) operand_base.push_back(base(o.arg));
    std::vector<llvm::Value*> store_base;
    for (const auto& [instr, arg] : loop.stores) store_base.push_back(base(arg));
    b_.CreateBr(row_head);

    b_.SetInsertPoint(row_head);
    auto* i = b_.CreatePHI(i64_, 2, "i");
    i->addIncoming(begin, entry);
    b_.CreateCondBr(b_.CreateICmpSLT(i, end), row_body, exit);

    b_.SetInsertPoint(row_body);
    auto* row = b_.CreateUDiv(i, row_len);
    auto* j0 = b_.CreateURem(i, row_len);
    auto* remaining = b_.CreateAdd(j0, b_.CreateSub(end, i));
    auto* j_end = b_.CreateSelect(b_.CreateICmpSLT(remaining, row_len), remaining, row_len);
    // Each operand's element offset at the start of this row.
    auto* row_start = b_.CreateMul(row, row_len);
    std::vector<llvm::Value*> row_ptr;
    for (size_t o = 0; o < loop.operands.size(); ++o) {
      // A dense operand's row starts where the stores' does: the same address
      // expression, so that a loop writing in place still vectorises.
      llvm::Type* type = element_type(loop.operands[o].type);
      if (strides[o].empty()) {
        row_ptr.push_back(b_.CreateInBoundsGEP(type, operand_base[o], row_start));
        continue;
      }
      llvm::Value* offset = b_.getInt64(0);
      llvm::Value* rest = row;
      for (size_t d = rank - 1; d-- > 0;) {
        auto* idx = d == 0 ? rest : b_.CreateURem(rest, shape[d]);
        offset = b_.CreateAdd(offset, b_.CreateMul(idx, strides[o][d]));
        if (d) rest = b_.CreateUDiv(rest, shape[d]);
      }
      row_ptr.push_back(b_.CreateInBoundsGEP(type, operand_base[o], offset));
    }
    // What each instruction reads must come before it (a saved program is read back).
    for (size_t k = 0; k < loop.code.size(); ++k) {
      const Loop::Instr& in = loop.code[k];
      const bool load = in.op == Loop::Op::Load;
      if (load ? in.a < 0 || size_t(in.a) >= loop.operands.size() || loop.operands[size_t(in.a)].type != in.type
               : in.a >= int(k) || in.b >= int(k) || in.c >= int(k))
        ir::fail(ir::ErrorKind::Internal, "code generation: loop instruction " + std::to_string(k) + " reads what is not there");
    }
    for (const auto& [instr, arg] : loop.stores)
      if (instr < 0 || size_t(instr) >= loop.code.size())
        ir::fail(ir::ErrorKind::Internal, "code generation: a loop stores what it does not compute");
    std::vector<llvm::Value*> store_row;
    for (size_t s = 0; s < store_base.size(); ++s)
      store_row.push_back(
          b_.CreateInBoundsGEP(element_type(loop.code[size_t(loop.stores[s].first)].type), store_base[s], row_start));
    auto* has_work = b_.CreateICmpSLT(j0, j_end);
    b_.CreateCondBr(has_work, inner, row_end);

    b_.SetInsertPoint(inner);
    auto* j = b_.CreatePHI(i64_, 2, "j");
    j->addIncoming(j0, row_body);
    std::vector<llvm::Value*> values;
    for (const auto& in : loop.code) {
      if (in.op == Loop::Op::Load) {
        const int64_t inner_stride = loop.operands[size_t(in.a)].strides.back();
        auto* at = inner_stride ? b_.CreateMul(j, b_.getInt64(uint64_t(inner_stride))) : b_.getInt64(0);
        llvm::Type* type = element_type(in.type);
        values.push_back(b_.CreateLoad(type, b_.CreateInBoundsGEP(type, row_ptr[size_t(in.a)], at)));
      } else {
        values.push_back(apply(loop, in, values));
      }
    }
    for (size_t s = 0; s < loop.stores.size(); ++s) {
      llvm::Value* v = values[size_t(loop.stores[s].first)];
      b_.CreateStore(v, b_.CreateInBoundsGEP(v->getType(), store_row[s], j));
    }
    auto* j_next = b_.CreateAdd(j, b_.getInt64(1));
    j->addIncoming(j_next, inner);
    b_.CreateCondBr(b_.CreateICmpSLT(j_next, j_end), inner, row_end);

    b_.SetInsertPoint(row_end);
    auto* i_next = b_.CreateAdd(i, b_.CreateSub(j_end, j0));
    i->addIncoming(i_next, row_end);
    b_.CreateBr(row_head);

    b_.SetInsertPoint(exit);
    b_.CreateRetVoid();
    b_.SetInsertPoint(saved);
    return fn;
  }

  std::map<std::string, llvm::Function*> loops_by_key_;
  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  llvm::Type *ptr_, *i64_, *i32_, *f32_, *f64_;
};

}  // namespace

std::vector<int64_t> loop_arguments(const Loop& loop) {
  Loop collapsed = loop;
  collapse(collapsed);
  return shape_arguments(collapsed);
}

Jit::SymbolTable codegen_host_symbols() {
  return {
      {"kiln_cpu_run_kernel", reinterpret_cast<const void*>(&run_kernel)},
      {"kiln_cpu_call_failed", reinterpret_cast<const void*>(&call_failed)},
  };
}

void emit_bundle_entry(llvm::Module& m, const Program& program, const std::string& name,
                       const std::vector<int64_t>& constant_offsets) {
  if (constant_offsets.size() != program.constants.size())
    ir::fail(ir::ErrorKind::Internal, "bundle entry '" + name + "': constant offsets do not match the constants");
  Emitter emitter(m);
  emitter.entry(program, name, &constant_offsets);
}

ProgramObjects compile_program(const Program& program, Jit& jit, std::vector<std::string>& step_symbols) {
  auto unit = jit.new_module(kEntrySymbol);
  // The kernels themselves live in the Jit's shared library (see Jit::link).
  if (const std::set<std::string> kernels = called_kernels(program); !kernels.empty())
    declare_portable_kernels(*unit.module, kernels);
  Emitter emitter(*unit.module);
  emitter.entry(program, kEntrySymbol);
  step_symbols = emitter.step_names;
  ProgramObjects objects;
  const std::set<std::string> loops = emitter.loop_functions();
  if (!loops.empty()) {
    // The loops move to a module of their own; the entry keeps declarations.
    llvm::ValueToValueMapTy map;
    std::unique_ptr<llvm::Module> loop_module =
        llvm::CloneModule(*unit.module, map, [&](const llvm::GlobalValue* v) { return loops.count(v->getName().str()) > 0; });
    for (llvm::Function& f : *unit.module)
      if (loops.count(f.getName().str())) f.deleteBody();
    objects.loops = jit.compile(*loop_module);
  }
  objects.entry = jit.compile(std::move(unit));
  return objects;
}

std::set<std::string> called_kernels(const Program& program) {
  std::set<std::string> names;
  for (const Step& s : program.steps) {
    if (s.call) names.insert(s.call->function);
    if (s.flow)
      for (const auto& body : s.flow->bodies) names.merge(called_kernels(body.program));
  }
  return names;
}

CompiledProgram link_program(const ProgramObjects& objects, const std::vector<std::string>& step_symbols,
                             const std::set<std::string>& kernels, Jit& jit, const Jit::KernelObjects& kernel_objects) {
  CompiledProgram c;
  c.library = jit.link(objects.entry, kernels, kernel_objects, objects.loops);
  c.entry = reinterpret_cast<EntryFn>(jit.lookup(*c.library, kEntrySymbol));
  for (const auto& name : step_symbols) c.steps.push_back(name.empty() ? nullptr : jit.lookup(*c.library, name));
  return c;
}

}  // namespace kiln::cpu
