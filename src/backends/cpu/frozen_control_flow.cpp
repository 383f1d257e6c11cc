#include "backends/cpu/frozen_control_flow.hpp"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include "backends/cpu/codegen.hpp"
#include "bundle/runtime/bundle_abi.h"
#include "runtime/ir/error.hpp"

namespace kiln::cpu {

namespace {

class FlowEmitter {
 public:
  FlowEmitter(llvm::Module& m, const FrozenControlFlow& flow) : m_(m), ctx_(m.getContext()), b_(ctx_), flow_(flow) {
    ptr_ = llvm::PointerType::getUnqual(ctx_);
    i64_ = llvm::Type::getInt64Ty(ctx_);
    i8_ = llvm::Type::getInt8Ty(ctx_);
  }

  llvm::Function* emit(const std::string& name) {
    static const char* const if_names[] = {"_then", "_else"};
    for (size_t i = 0; i < flow_.bodies.size(); ++i) {
      const std::string body = name + (flow_.kind == FrozenControlFlow::Kind::If ? if_names[i] : "_body");
      emit_bundle_entry(m_, flow_.bodies[i].program, body, {});
      entries_.push_back(m_.getFunction(body));
    }
    auto* i32 = llvm::Type::getInt32Ty(ctx_);
    fn_ = llvm::Function::Create(llvm::FunctionType::get(i32, {ptr_, ptr_}, false), llvm::Function::ExternalLinkage, name, m_);
    // Control code around calls, as the entry functions are: nothing to optimise.
    fn_->addFnAttr(llvm::Attribute::OptimizeNone);
    fn_->addFnAttr(llvm::Attribute::NoInline);
    args_ = fn_->getArg(0);
    threads_ = fn_->getArg(1);
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn_));
    // Every slot in the entry block: fixed stack slots, however many iterations.
    for (const auto& body : flow_.bodies)
      io_.push_back(b_.CreateAlloca(
          llvm::ArrayType::get(ptr_, std::max<size_t>(1, body.program.inputs.size() + body.program.outputs.size()))));
    current_ = b_.CreateAlloca(llvm::ArrayType::get(ptr_, std::max<size_t>(1, flow_.carried.size())));
    counter_ = b_.CreateAlloca(i64_);
    going_ = b_.CreateAlloca(i8_);
    arena_ = flow_.arena >= 0 ? arg(flow_.arena) : null();
    fail_ = llvm::BasicBlock::Create(ctx_, "fail", fn_);
    if (flow_.kind == FrozenControlFlow::Kind::If)
      emit_if();
    else
      emit_loop();
    b_.SetInsertPoint(fail_);
    b_.CreateRet(b_.getInt32(KILN_BUNDLE_ERROR_ARGUMENT));
    return fn_;
  }

 private:
  llvm::Value* null() { return llvm::ConstantPointerNull::get(ptr_); }
  llvm::Value* arg(int k) { return b_.CreateLoad(ptr_, b_.CreateConstInBoundsGEP1_64(ptr_, args_, uint64_t(k))); }
  llvm::Value* truth(int k) { return b_.CreateICmpNE(b_.CreateLoad(i8_, arg(k)), b_.getInt8(0)); }
  llvm::Value* odd(llvm::Value* iteration) { return b_.CreateICmpNE(b_.CreateAnd(iteration, b_.getInt64(1)), b_.getInt64(0)); }

  // Where a binding points at iteration `iteration` (null for an If).
  llvm::Value* where(const FrozenControlFlow::Binding& binding, bool input, llvm::Value* iteration) {
    using Kind = FrozenControlFlow::Binding::Kind;
    switch (binding.kind) {
      case Kind::Arg: return arg(binding.index);
      case Kind::Carried: {
        if (input) return b_.CreateLoad(ptr_, b_.CreateConstInBoundsGEP1_64(ptr_, current_, uint64_t(binding.index)));
        const auto& c = flow_.carried[size_t(binding.index)];
        return b_.CreateSelect(odd(iteration), arg(c.spare[1]), arg(c.spare[0]));
      }
      case Kind::Slice: {
        const auto& s = (input ? flow_.scan_inputs : flow_.scan_outputs)[size_t(binding.index)];
        llvm::Value* at = s.reverse ? b_.CreateSub(b_.getInt64(uint64_t(flow_.length - 1)), iteration) : iteration;
        return b_.CreateInBoundsGEP(i8_, arg(s.arg), b_.CreateMul(at, b_.getInt64(uint64_t(s.slice_bytes))));
      }
    }
    return nullptr;
  }

  // Calls body `i` for `iteration`; a failure returns its status.
  void call_body(size_t i, llvm::Value* iteration) {
    const FrozenControlFlow::Body& body = flow_.bodies[i];
    size_t slot = 0;
    for (const auto& in : body.inputs)
      b_.CreateStore(where(in, true, iteration), b_.CreateConstInBoundsGEP1_64(ptr_, io_[i], slot++));
    for (const auto& out : body.outputs)
      b_.CreateStore(where(out, false, iteration), b_.CreateConstInBoundsGEP1_64(ptr_, io_[i], slot++));
    auto* status = b_.CreateCall(entries_[i], {null(), io_[i], arena_, threads_, null()});
    auto* failed = llvm::BasicBlock::Create(ctx_, "body_failed", fn_);
    auto* next = llvm::BasicBlock::Create(ctx_, "body_done", fn_);
    b_.CreateCondBr(b_.CreateICmpNE(status, b_.getInt32(0)), failed, next);
    b_.SetInsertPoint(failed);
    b_.CreateRet(status);
    b_.SetInsertPoint(next);
  }

  void emit_if() {
    auto* then_block = llvm::BasicBlock::Create(ctx_, "then", fn_);
    auto* else_block = llvm::BasicBlock::Create(ctx_, "else", fn_);
    b_.CreateCondBr(truth(flow_.cond), then_block, else_block);
    for (size_t i = 0; i < 2; ++i) {
      b_.SetInsertPoint(i == 0 ? then_block : else_block);
      call_body(i, nullptr);
      b_.CreateRet(b_.getInt32(0));
    }
  }

  // Loop and Scan: iteration i reads the carried values' current buffers and
  // writes spare[i % 2], which become current.
  void emit_loop() {
    const bool loop = flow_.kind == FrozenControlFlow::Kind::Loop;
    for (size_t c = 0; c < flow_.carried.size(); ++c)
      b_.CreateStore(arg(flow_.carried[c].initial), b_.CreateConstInBoundsGEP1_64(ptr_, current_, c));
    b_.CreateStore(b_.getInt64(0), counter_);
    b_.CreateStore(loop && flow_.cond >= 0 ? b_.CreateZExt(truth(flow_.cond), i8_) : b_.getInt8(1), going_);
    llvm::Value* trip = b_.getInt64(uint64_t(loop ? INT64_MAX : flow_.length));
    if (loop && flow_.trip >= 0) trip = b_.CreateLoad(i64_, arg(flow_.trip));
    auto* header = llvm::BasicBlock::Create(ctx_, "header", fn_);
    auto* check = llvm::BasicBlock::Create(ctx_, "check", fn_);
    auto* iterate = llvm::BasicBlock::Create(ctx_, "iterate", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "done", fn_);
    b_.CreateBr(header);

    b_.SetInsertPoint(header);
    llvm::Value* i = b_.CreateLoad(i64_, counter_);
    llvm::Value* go = b_.CreateAnd(b_.CreateICmpSLT(i, trip), b_.CreateICmpNE(b_.CreateLoad(i8_, going_), b_.getInt8(0)));
    b_.CreateCondBr(go, check, done);

    // Past the slices the outputs hold, or running away: a Loop fails.
    b_.SetInsertPoint(check);
    const int64_t limit = flow_.length >= 0 ? flow_.length : kFrozenLoopIterations;
    b_.CreateCondBr(b_.CreateICmpSGE(i, b_.getInt64(uint64_t(limit))), fail_, iterate);

    b_.SetInsertPoint(iterate);
    if (loop) {
      b_.CreateStore(i, arg(flow_.iteration));
      b_.CreateStore(b_.CreateLoad(i8_, going_), arg(flow_.condition));
    }
    call_body(0, i);
    if (loop) b_.CreateStore(b_.CreateZExt(truth(flow_.next_condition), i8_), going_);
    for (size_t c = 0; c < flow_.carried.size(); ++c) {
      const auto& v = flow_.carried[c];
      b_.CreateStore(b_.CreateSelect(odd(i), arg(v.spare[1]), arg(v.spare[0])), b_.CreateConstInBoundsGEP1_64(ptr_, current_, c));
    }
    b_.CreateStore(b_.CreateAdd(i, b_.getInt64(1)), counter_);
    b_.CreateBr(header);

    b_.SetInsertPoint(done);
    if (loop && flow_.length >= 0) {
      auto* finish = llvm::BasicBlock::Create(ctx_, "finish", fn_);
      b_.CreateCondBr(b_.CreateICmpNE(b_.CreateLoad(i64_, counter_), b_.getInt64(uint64_t(flow_.length))), fail_, finish);
      b_.SetInsertPoint(finish);
    }
    for (size_t c = 0; c < flow_.carried.size(); ++c) {
      const auto& v = flow_.carried[c];
      if (v.result < 0 || v.bytes == 0) continue;
      b_.CreateMemMove(arg(v.result), llvm::MaybeAlign(1), b_.CreateLoad(ptr_, b_.CreateConstInBoundsGEP1_64(ptr_, current_, c)),
                       llvm::MaybeAlign(1), uint64_t(v.bytes));
    }
    b_.CreateRet(b_.getInt32(0));
  }

  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  const FrozenControlFlow& flow_;
  llvm::PointerType* ptr_;
  llvm::Type *i64_, *i8_;
  std::vector<llvm::Function*> entries_;
  llvm::Function* fn_ = nullptr;
  llvm::Value *args_ = nullptr, *threads_ = nullptr, *arena_ = nullptr;
  std::vector<llvm::Value*> io_;  // per body: its io array
  llvm::Value *current_ = nullptr, *counter_ = nullptr, *going_ = nullptr;
  llvm::BasicBlock* fail_ = nullptr;
};

}  // namespace

llvm::Function* emit_frozen_control_flow(llvm::Module& m, const FrozenControlFlow& flow, const std::string& name) {
  const size_t expected = flow.kind == FrozenControlFlow::Kind::If ? 2 : 1;
  if (flow.bodies.size() != expected)
    ir::fail(ir::ErrorKind::Internal, flow.label + ": " + std::to_string(flow.bodies.size()) + " bodies to emit");
  return FlowEmitter(m, flow).emit(name);
}

}  // namespace kiln::cpu
