// The cpu backend's JIT host: generated code compiles, runs, calls host
// functions through the explicit symbol table, and bad IR is an error.
#include <gtest/gtest.h>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <cmath>
#include <set>
#include <string>

#include "backends/cpu/jit.hpp"
#include "backends/cpu/portable_bitcode.hpp"
#include "runtime/ir/error.hpp"

namespace {

// out[i] = f(a[i]) + b[i] for i < n, where f is a host function float(float).
void build_kernel(llvm::Module& m, const char* name, const char* host_fn) {
  llvm::LLVMContext& c = m.getContext();
  llvm::IRBuilder<> b(c);
  auto* f32 = b.getFloatTy();
  auto* ptr = b.getPtrTy();
  auto* i64 = b.getInt64Ty();
  auto* fn = llvm::Function::Create(llvm::FunctionType::get(b.getVoidTy(), {ptr, ptr, ptr, i64}, false),
                                    llvm::Function::ExternalLinkage, name, m);
  llvm::FunctionCallee callee = m.getOrInsertFunction(host_fn, llvm::FunctionType::get(f32, {f32}, false));
  auto* entry = llvm::BasicBlock::Create(c, "entry", fn);
  auto* loop = llvm::BasicBlock::Create(c, "loop", fn);
  auto* done = llvm::BasicBlock::Create(c, "done", fn);
  b.SetInsertPoint(entry);
  b.CreateCondBr(b.CreateICmpSGT(fn->getArg(3), b.getInt64(0)), loop, done);
  b.SetInsertPoint(loop);
  auto* i = b.CreatePHI(i64, 2);
  i->addIncoming(b.getInt64(0), entry);
  auto* a = b.CreateLoad(f32, b.CreateGEP(f32, fn->getArg(0), i));
  auto* bv = b.CreateLoad(f32, b.CreateGEP(f32, fn->getArg(1), i));
  b.CreateStore(b.CreateFAdd(b.CreateCall(callee, {a}), bv), b.CreateGEP(f32, fn->getArg(2), i));
  auto* next = b.CreateAdd(i, b.getInt64(1));
  i->addIncoming(next, loop);
  b.CreateCondBr(b.CreateICmpSLT(next, fn->getArg(3)), loop, done);
  b.SetInsertPoint(done);
  b.CreateRetVoid();
}

float twice(float x) { return 2 * x; }

}  // namespace

TEST(CpuJit, DetectsTheHost) {
  auto h = kiln::cpu::detect_host();
  EXPECT_FALSE(h.triple.empty());
  EXPECT_FALSE(h.cpu.empty());
  EXPECT_TRUE(std::is_sorted(h.features.begin(), h.features.end()));
}

TEST(CpuJit, CompilesAndRunsGeneratedCodeCallingHostFunctions) {
  kiln::cpu::Jit jit({{"kiln_test_twice", reinterpret_cast<const void*>(&twice)}});
  auto unit = jit.new_module("kernels");
  build_kernel(*unit.module, "exp_add", "expf");
  build_kernel(*unit.module, "twice_add", "kiln_test_twice");
  EXPECT_EQ(jit.codegen_runs(), 0);
  const std::string object = jit.compile(std::move(unit));
  EXPECT_EQ(jit.codegen_runs(), 1);
  auto library = jit.link(object);
  // The same object links again beside the first (as a cached one would): no codegen, no name clash.
  auto again = jit.link(object);
  EXPECT_EQ(jit.codegen_runs(), 1);
  using Kernel = void (*)(const float*, const float*, float*, int64_t);
  auto exp_add = reinterpret_cast<Kernel>(jit.lookup(*library, "exp_add"));
  auto twice_add = reinterpret_cast<Kernel>(jit.lookup(*again, "twice_add"));

  std::vector<float> a(37), b(37), out(37);
  for (int i = 0; i < 37; ++i) {
    a[i] = float(i) / 10;
    b[i] = float(i);
  }
  exp_add(a.data(), b.data(), out.data(), 37);
  for (int i = 0; i < 37; ++i) EXPECT_NEAR(out[i], std::exp(a[i]) + b[i], 1e-5f * out[i]);
  twice_add(a.data(), b.data(), out.data(), 37);
  for (int i = 0; i < 37; ++i) EXPECT_FLOAT_EQ(out[i], 2 * a[i] + b[i]);
}

TEST(CpuJit, InvalidModulesAndMissingSymbolsAreErrors) {
  kiln::cpu::Jit jit;
  auto unit = jit.new_module("broken");
  llvm::IRBuilder<> b(*unit.context);
  auto* fn = llvm::Function::Create(llvm::FunctionType::get(b.getVoidTy(), false), llvm::Function::ExternalLinkage,
                                    "no_terminator", *unit.module);
  llvm::BasicBlock::Create(*unit.context, "entry", fn);  // a block without a terminator
  EXPECT_THROW(jit.compile(std::move(unit)), kiln::ir::Error);
  auto empty = jit.new_module("empty");
  auto library = jit.link(jit.compile(std::move(empty)));
  EXPECT_THROW(jit.lookup(*library, "does_not_exist"), kiln::ir::Error);
  EXPECT_THROW(jit.link("not an object file"), kiln::ir::Error);
}

namespace {

// out[0] = a > 0 ? kiln_test_twice(a) : -a: branches, all of them forward.
void build_choice(llvm::Module& m) {
  llvm::LLVMContext& c = m.getContext();
  llvm::IRBuilder<> b(c);
  auto* f32 = b.getFloatTy();
  auto* fn = llvm::Function::Create(llvm::FunctionType::get(b.getVoidTy(), {b.getPtrTy(), f32}, false),
                                    llvm::Function::ExternalLinkage, "choose", m);
  llvm::FunctionCallee twice_fn = m.getOrInsertFunction("kiln_test_twice", llvm::FunctionType::get(f32, {f32}, false));
  auto* entry = llvm::BasicBlock::Create(c, "entry", fn);
  auto* positive = llvm::BasicBlock::Create(c, "positive", fn);
  auto* other = llvm::BasicBlock::Create(c, "other", fn);
  auto* done = llvm::BasicBlock::Create(c, "done", fn);
  b.SetInsertPoint(entry);
  b.CreateCondBr(b.CreateFCmpOGT(fn->getArg(1), llvm::ConstantFP::get(f32, 0.0)), positive, other);
  b.SetInsertPoint(positive);
  b.CreateStore(b.CreateCall(twice_fn, {fn->getArg(1)}), fn->getArg(0));
  b.CreateBr(done);
  b.SetInsertPoint(other);
  b.CreateStore(b.CreateFNeg(fn->getArg(1)), fn->getArg(0));
  b.CreateBr(done);
  b.SetInsertPoint(done);
  b.CreateRetVoid();
}

}  // namespace

TEST(CpuJit, ModulesWithoutLoopsTakeTheFastPathAndStillRunCorrectly) {
  kiln::cpu::Jit jit({{"kiln_test_twice", reinterpret_cast<const void*>(&twice)}});
  auto with_loop = jit.new_module("loop");
  build_kernel(*with_loop.module, "exp_add", "expf");
  EXPECT_TRUE(kiln::cpu::has_loops(*with_loop.module));

  // A loop whose back edge goes to a block placed before it.
  auto two_block = jit.new_module("two_block_loop");
  {
    llvm::LLVMContext& c = *two_block.context;
    llvm::IRBuilder<> b(c);
    auto* fn = llvm::Function::Create(llvm::FunctionType::get(b.getVoidTy(), {b.getInt1Ty()}, false),
                                      llvm::Function::ExternalLinkage, "spin", *two_block.module);
    auto* entry = llvm::BasicBlock::Create(c, "entry", fn);
    auto* body = llvm::BasicBlock::Create(c, "body", fn);
    auto* latch = llvm::BasicBlock::Create(c, "latch", fn);
    auto* done = llvm::BasicBlock::Create(c, "done", fn);
    b.SetInsertPoint(entry);
    b.CreateBr(body);
    b.SetInsertPoint(body);
    b.CreateBr(latch);
    b.SetInsertPoint(latch);
    b.CreateCondBr(fn->getArg(0), body, done);
    b.SetInsertPoint(done);
    b.CreateRetVoid();
  }
  EXPECT_TRUE(kiln::cpu::has_loops(*two_block.module));

  auto straight = jit.new_module("straight");
  build_choice(*straight.module);
  EXPECT_FALSE(kiln::cpu::has_loops(*straight.module));
  auto library = jit.link(jit.compile(std::move(straight)));
  auto choose = reinterpret_cast<void (*)(float*, float)>(jit.lookup(*library, "choose"));
  float out = 0;
  choose(&out, 1.5f);
  EXPECT_EQ(out, 3.0f);
  choose(&out, -2.0f);
  EXPECT_EQ(out, 2.0f);
}

// Compiles reuse target machines: a module compiled after a loop-free one
// (whose code generation runs unoptimised) must come out as before.
TEST(CpuJit, ACompileAfterAFastPathOneIsStillOptimised) {
  kiln::cpu::Jit jit({{"kiln_test_twice", reinterpret_cast<const void*>(&twice)}});
  auto loop_object = [&] {
    auto unit = jit.new_module("loop");
    build_kernel(*unit.module, "twice_add", "kiln_test_twice");
    return jit.compile(std::move(unit));
  };
  const std::string first = loop_object();
  auto straight = jit.new_module("straight");
  build_choice(*straight.module);
  jit.compile(std::move(straight));
  EXPECT_EQ(loop_object(), first);
  EXPECT_EQ(jit.codegen_runs(), 3);
}

// Portable kernels compile when a program first calls them (those missing
// in one codegen run), once per Jit; a Jit given the objects from the cache
// links them instead, skipping one that defines a kernel linked already
// (its symbols would clash).
TEST(CpuJit, PortableKernelsCompileWhenFirstCalledAndLinkFromTheCache) {
  kiln::cpu::Jit jit;
  const auto copy = jit.portable_kernel_objects({"kiln_pk_copy_rows"});
  ASSERT_EQ(copy.size(), 1u);
  EXPECT_EQ(copy[0].kernels, std::set<std::string>{"kiln_pk_copy_rows"});
  EXPECT_EQ(jit.codegen_runs(), 1);
  const auto both = jit.portable_kernel_objects({"kiln_pk_copy_rows", "kiln_pk_softmax"});
  EXPECT_EQ(jit.codegen_runs(), 2);
  ASSERT_EQ(both.size(), 2u);

  kiln::cpu::Jit other;
  const auto together = other.portable_kernel_objects({"kiln_pk_copy_rows", "kiln_pk_softmax"});
  ASSERT_EQ(together.size(), 1u);
  EXPECT_EQ(other.codegen_runs(), 1);

  // A program whose `kernel_address` returns where its call of softmax goes.
  kiln::cpu::Jit warm;
  auto unit = warm.new_module("caller");
  kiln::cpu::declare_portable_kernels(*unit.module, {"kiln_pk_softmax"});
  llvm::IRBuilder<> b(*unit.context);
  auto* fn = llvm::Function::Create(llvm::FunctionType::get(b.getPtrTy(), false), llvm::Function::ExternalLinkage,
                                    "kernel_address", *unit.module);
  b.SetInsertPoint(llvm::BasicBlock::Create(*unit.context, "entry", fn));
  b.CreateRet(unit.module->getFunction("kiln_pk_softmax"));
  const std::string object = warm.compile(std::move(unit));
  auto library = warm.link(object, {"kiln_pk_copy_rows", "kiln_pk_softmax"}, both);
  auto address = reinterpret_cast<void* (*)()>(warm.lookup(*library, "kernel_address"));
  EXPECT_NE(address(), nullptr);
  auto again = warm.link(object, {"kiln_pk_copy_rows", "kiln_pk_softmax"}, together);
  EXPECT_EQ(reinterpret_cast<void* (*)()>(warm.lookup(*again, "kernel_address"))(), address());
  EXPECT_EQ(warm.codegen_runs(), 1);
}
