#include "backends/cpu/codegen.hpp"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <cmath>
#include <map>

#include "runtime/ir/error.hpp"

namespace kiln::cpu {

namespace {

}  // namespace

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
void run_loop(LoopFn fn, void* const* args, int64_t n, int64_t grain) {
  if (n <= grain) {
    fn(args, 0, n);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, grain),
                    [&](const tbb::blocked_range<int64_t>& r) { fn(args, r.begin(), r.end()); });
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

std::string loop_name(const std::string& entry, size_t step) { return entry + "_loop" + std::to_string(step); }

class Emitter {
 public:
  Emitter(llvm::Module& m) : m_(m), ctx_(m.getContext()), b_(ctx_) {
    ptr_ = llvm::PointerType::getUnqual(ctx_);
    i64_ = llvm::Type::getInt64Ty(ctx_);
    i32_ = llvm::Type::getInt32Ty(ctx_);
    f32_ = llvm::Type::getFloatTy(ctx_);
  }

  void entry(const Program& p, const std::string& name) {
    auto* fn_type = llvm::FunctionType::get(i32_, {ptr_, ptr_, ptr_, ptr_, ptr_}, false);
    auto* fn = llvm::Function::Create(fn_type, llvm::Function::ExternalLinkage, name, m_);
    // Straight-line calls gain nothing from optimisation and would cost most
    // of the compile time: only the loops are optimised.
    fn->addFnAttr(llvm::Attribute::OptimizeNone);
    fn->addFnAttr(llvm::Attribute::NoInline);
    auto* kernels = fn->getArg(0);
    auto* constants = fn->getArg(1);
    auto* io = fn->getArg(2);
    auto* arena = fn->getArg(3);
    auto* status = fn->getArg(4);
    auto* block = llvm::BasicBlock::Create(ctx_, "entry", fn);
    auto* fail = llvm::BasicBlock::Create(ctx_, "fail", fn);
    b_.SetInsertPoint(fail);
    b_.CreateRet(b_.getInt32(1));
    b_.SetInsertPoint(block);

    auto* run_kernel_type = llvm::FunctionType::get(i32_, {ptr_, ptr_, ptr_}, false);
    auto run_kernel_fn = m_.getOrInsertFunction("kiln_cpu_run_kernel", run_kernel_type);
    auto* parallel_type = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx_), {ptr_, ptr_, i64_, i64_}, false);
    auto parallel_fn = m_.getOrInsertFunction("kiln_cpu_parallel_for", parallel_type);

    // Every step's argument array lives in the entry block: static stack slots.
    std::vector<llvm::Value*> arg_arrays;
    for (const Step& step : p.steps)
      arg_arrays.push_back(b_.CreateAlloca(llvm::ArrayType::get(ptr_, std::max<size_t>(step.args.size(), 1))));
    const int64_t num_inputs = int64_t(p.inputs.size());
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
          case Buffer::Kind::Constant: where = load_ptr(constants, buf.index); break;
        }
        b_.CreateStore(where, b_.CreateConstInBoundsGEP1_64(ptr_, args, a));
      }
      if (step.kernel) {
        loop_names.push_back("");
        auto* result = b_.CreateCall(run_kernel_fn, {load_ptr(kernels, int64_t(s)), args, status});
        auto* next = llvm::BasicBlock::Create(ctx_, "step" + std::to_string(s + 1), fn);
        b_.CreateCondBr(b_.CreateICmpNE(result, b_.getInt32(0)), fail, next);
        b_.SetInsertPoint(next);
      } else {
        Loop loop = *step.loop;
        collapse(loop);
        int64_t n = 1;
        for (int64_t d : loop.shape) n *= d;
        // Identical loops (every layer of a transformer has the same ones)
        // are generated once.
        const std::string key = loop_key(loop);
        auto& body = loops_by_key_[key];
        if (!body) body = loop_function(loop, loop_name(name, s));
        loop_names.push_back(body->getName().str());
        // Chunks of at least 16K elements: below that, threads cost more than they save.
        b_.CreateCall(parallel_fn, {body, args, b_.getInt64(uint64_t(n)), b_.getInt64(16384)});
      }
    }
    b_.CreateRet(b_.getInt32(0));
  }

  std::vector<std::string> loop_names;  // per step: its loop function, or ""

 private:
  static std::string loop_key(const Loop& loop) {
    std::string k;
    auto put = [&](const void* p, size_t n) { k.append(static_cast<const char*>(p), n); };
    auto ints = [&](const std::vector<int64_t>& v) {
      const size_t n = v.size();
      put(&n, sizeof n);
      put(v.data(), n * sizeof(int64_t));
    };
    ints(loop.shape);
    for (const auto& o : loop.operands) {
      put(&o.arg, sizeof o.arg);
      ints(o.strides);
    }
    k += '|';
    for (const auto& in : loop.code) {
      put(&in.op, sizeof in.op);
      put(&in.a, sizeof in.a);
      put(&in.b, sizeof in.b);
      put(&in.alpha, sizeof in.alpha);
      put(&in.beta, sizeof in.beta);
    }
    k += '|';
    for (const auto& st : loop.stores) put(&st, sizeof st);
    return k;
  }

  llvm::Value* load_ptr(llvm::Value* table, int64_t index) {
    return b_.CreateLoad(ptr_, b_.CreateConstInBoundsGEP1_64(ptr_, table, uint64_t(index)));
  }

  llvm::Value* intrinsic(llvm::Intrinsic::ID id, std::vector<llvm::Value*> args) {
    return b_.CreateIntrinsic(id, {f32_}, args);
  }
  llvm::Value* libm(const char* name, llvm::Value* x) {
    auto fn = m_.getOrInsertFunction(name, llvm::FunctionType::get(f32_, {f32_}, false));
    return b_.CreateCall(fn, {x});
  }
  llvm::Constant* f(float v) { return llvm::ConstantFP::get(f32_, v); }
  llvm::Value* select_positive(llvm::Value* x, llvm::Value* pos, llvm::Value* neg) {
    return b_.CreateSelect(b_.CreateFCmpOGT(x, f(0)), pos, neg);
  }
  llvm::Value* exp(llvm::Value* x) { return intrinsic(llvm::Intrinsic::exp, {x}); }

  llvm::Value* apply(const Loop::Instr& in, llvm::Value* a, llvm::Value* b) {
    using Op = Loop::Op;
    switch (in.op) {
      case Op::Load: break;
      case Op::Constant: return f(in.alpha);
      case Op::Add: return b_.CreateFAdd(a, b);
      case Op::Sub: return b_.CreateFSub(a, b);
      case Op::Mul: return b_.CreateFMul(a, b);
      case Op::Div: return b_.CreateFDiv(a, b);
      case Op::Max: return intrinsic(llvm::Intrinsic::maxnum, {a, b});
      case Op::Min: return intrinsic(llvm::Intrinsic::minnum, {a, b});
      case Op::Pow: return intrinsic(llvm::Intrinsic::pow, {a, b});
      case Op::PRelu: return select_positive(a, a, b_.CreateFMul(a, b));
      case Op::Neg: return b_.CreateFNeg(a);
      case Op::Abs: return intrinsic(llvm::Intrinsic::fabs, {a});
      case Op::Relu: return select_positive(a, a, f(0));
      case Op::LeakyRelu: return select_positive(a, a, b_.CreateFMul(a, f(in.alpha)));
      case Op::Sigmoid: return b_.CreateFDiv(f(1), b_.CreateFAdd(f(1), exp(b_.CreateFNeg(a))));
      case Op::Tanh: return libm("tanhf", a);
      case Op::Exp: return exp(a);
      case Op::Log: return intrinsic(llvm::Intrinsic::log, {a});
      case Op::Sqrt: return intrinsic(llvm::Intrinsic::sqrt, {a});
      case Op::Erf: return libm("erff", a);
      case Op::Reciprocal: return b_.CreateFDiv(f(1), a);
      case Op::Floor: return intrinsic(llvm::Intrinsic::floor, {a});
      case Op::Ceil: return intrinsic(llvm::Intrinsic::ceil, {a});
      case Op::Clip: return intrinsic(llvm::Intrinsic::minnum, {intrinsic(llvm::Intrinsic::maxnum, {a, f(in.alpha)}), f(in.beta)});
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

  // void fn(void* const* args, int64_t begin, int64_t end) over flat
  // elements [begin, end) of the loop's (collapsed) shape: rows of the last
  // dim, operand offsets recomputed once per row.
  llvm::Function* loop_function(const Loop& loop, const std::string& name) {
    auto* saved = b_.GetInsertBlock();
    auto* fn_type = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx_), {ptr_, i64_, i64_}, false);
    auto* fn = llvm::Function::Create(fn_type, llvm::Function::ExternalLinkage, name, m_);
    fn->addFnAttr(llvm::Attribute::NoUnwind);
    auto* args = fn->getArg(0);
    auto* begin = fn->getArg(1);
    auto* end = fn->getArg(2);
    auto* entry = llvm::BasicBlock::Create(ctx_, "entry", fn);
    auto* row_head = llvm::BasicBlock::Create(ctx_, "row_head", fn);
    auto* row_body = llvm::BasicBlock::Create(ctx_, "row_body", fn);
    auto* inner = llvm::BasicBlock::Create(ctx_, "inner", fn);
    auto* row_end = llvm::BasicBlock::Create(ctx_, "row_end", fn);
    auto* exit = llvm::BasicBlock::Create(ctx_, "exit", fn);

    const size_t rank = loop.shape.size();
    const int64_t row_len = loop.shape.back();
    b_.SetInsertPoint(entry);
    std::vector<llvm::Value*> operand_base;
    for (const auto& o : loop.operands) operand_base.push_back(load_ptr(args, o.arg));
    std::vector<llvm::Value*> store_base;
    for (const auto& [instr, arg] : loop.stores) store_base.push_back(load_ptr(args, arg));
    b_.CreateBr(row_head);

    b_.SetInsertPoint(row_head);
    auto* i = b_.CreatePHI(i64_, 2, "i");
    i->addIncoming(begin, entry);
    b_.CreateCondBr(b_.CreateICmpSLT(i, end), row_body, exit);

    b_.SetInsertPoint(row_body);
    auto* row = b_.CreateUDiv(i, b_.getInt64(uint64_t(row_len)));
    auto* j0 = b_.CreateURem(i, b_.getInt64(uint64_t(row_len)));
    auto* remaining = b_.CreateAdd(j0, b_.CreateSub(end, i));
    auto* j_end = b_.CreateSelect(b_.CreateICmpSLT(remaining, b_.getInt64(uint64_t(row_len))), remaining,
                                  b_.getInt64(uint64_t(row_len)));
    // Each operand's element offset at the start of this row.
    std::vector<llvm::Value*> row_ptr;
    for (size_t o = 0; o < loop.operands.size(); ++o) {
      llvm::Value* offset = b_.getInt64(0);
      llvm::Value* rest = row;
      for (size_t d = rank - 1; d-- > 0;) {
        const int64_t stride = loop.operands[o].strides[d];
        auto* idx = d == 0 ? rest : b_.CreateURem(rest, b_.getInt64(uint64_t(loop.shape[d])));
        if (stride) offset = b_.CreateAdd(offset, b_.CreateMul(idx, b_.getInt64(uint64_t(stride))));
        if (d) rest = b_.CreateUDiv(rest, b_.getInt64(uint64_t(loop.shape[d])));
      }
      row_ptr.push_back(b_.CreateInBoundsGEP(f32_, operand_base[o], offset));
    }
    auto* row_start = b_.CreateMul(row, b_.getInt64(uint64_t(row_len)));
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
        values.push_back(b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, row_ptr[size_t(in.a)], at)));
      } else {
        values.push_back(apply(in, in.a >= 0 ? values[size_t(in.a)] : nullptr, in.b >= 0 ? values[size_t(in.b)] : nullptr));
      }
    }
    auto* flat = b_.CreateAdd(row_start, j);
    for (size_t s = 0; s < loop.stores.size(); ++s)
      b_.CreateStore(values[size_t(loop.stores[s].first)], b_.CreateInBoundsGEP(f32_, store_base[s], flat));
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
  llvm::Type *ptr_, *i64_, *i32_, *f32_;
};

}  // namespace

Jit::SymbolTable codegen_host_symbols() {
  return {
      {"kiln_cpu_run_kernel", reinterpret_cast<const void*>(&run_kernel)},
      {"kiln_cpu_parallel_for", reinterpret_cast<const void*>(&run_loop)},
  };
}

std::string compile_program(const Program& program, Jit& jit, std::vector<std::string>& loop_symbols) {
  auto unit = jit.new_module(kEntrySymbol);
  Emitter emitter(*unit.module);
  emitter.entry(program, kEntrySymbol);
  loop_symbols = emitter.loop_names;
  return jit.compile(std::move(unit));
}

CompiledProgram link_program(const std::string& object, const std::vector<std::string>& loop_symbols, Jit& jit) {
  CompiledProgram c;
  c.library = jit.link(object);
  c.entry = reinterpret_cast<EntryFn>(jit.lookup(*c.library, kEntrySymbol));
  for (const auto& name : loop_symbols)
    c.loops.push_back(name.empty() ? nullptr : reinterpret_cast<LoopFn>(jit.lookup(*c.library, name)));
  return c;
}

}  // namespace kiln::cpu
