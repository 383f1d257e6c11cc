// Linking embedded bitcode: a target's copy is found or the error names the
// library and the architectures there are; what a library defines ends up
// internal unless kept external; the kernel library's two linkages, and
// only the kernels a module declares are linked.
#include <gtest/gtest.h>
#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/raw_ostream.h>

#include <string>

#include "backends/cpu/embedded_bitcode.hpp"
#include "backends/cpu/portable_bitcode.hpp"
#include "runtime/ir/error.hpp"

namespace {

using kiln::cpu::EmbeddedBitcode;

// A library defining `int32_t NAME(void) { return 1; }` for each name, and a global `lib_data`.
std::string library_bitcode(std::initializer_list<const char*> names) {
  llvm::LLVMContext ctx;
  llvm::Module lib("lib", ctx);
  lib.setTargetTriple("x86_64-unknown-linux-gnu");
  auto* i32 = llvm::Type::getInt32Ty(ctx);
  for (const char* name : names) {
    auto* f = llvm::Function::Create(llvm::FunctionType::get(i32, false), llvm::Function::ExternalLinkage, name, lib);
    llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", f));
    b.CreateRet(llvm::ConstantInt::get(i32, 1));
  }
  new llvm::GlobalVariable(lib, i32, true, llvm::GlobalValue::ExternalLinkage, llvm::ConstantInt::get(i32, 7), "lib_data");
  std::string bytes;
  llvm::raw_string_ostream os(bytes);
  llvm::WriteBitcodeToFile(lib, os);
  os.flush();
  return bytes;
}

TEST(EmbeddedBitcode, MissingArchitectureNamesTheLibraryAndWhatThereIs) {
  llvm::LLVMContext ctx;
  llvm::Module m("m", ctx);
  m.setTargetTriple("riscv64-unknown-linux-gnu");
  const EmbeddedBitcode copies[] = {{"x86_64", "a"}, {"aarch64", "b"}};
  try {
    kiln::cpu::bitcode_for(m, copies, "test runtime");
    FAIL() << "riscv64 found a copy";
  } catch (const kiln::ir::Error& e) {
    EXPECT_EQ(e.kind(), kiln::ir::ErrorKind::Unsupported);
    EXPECT_EQ(std::string(e.what()), "no test runtime for target 'riscv64-unknown-linux-gnu' (built for: x86_64, aarch64)");
  }
  m.setTargetTriple("aarch64-unknown-linux-gnu");
  EXPECT_EQ(kiln::cpu::bitcode_for(m, copies, "test runtime"), "b");
}

TEST(EmbeddedBitcode, LinkedDefinitionsAreInternalUnlessKept) {
  const std::string bytes = library_bitcode({"lib_hidden", "lib_kept"});
  llvm::LLVMContext ctx;
  llvm::Module m("m", ctx);
  m.setTargetTriple("x86_64-unknown-linux-gnu");
  const auto defined = kiln::cpu::link_bitcode(m, bytes, "test library", [](llvm::StringRef name) { return name == "lib_kept"; });
  ASSERT_EQ(defined.size(), 2u);
  EXPECT_TRUE(m.getFunction("lib_hidden")->hasInternalLinkage());
  EXPECT_TRUE(m.getFunction("lib_kept")->hasExternalLinkage());
  EXPECT_TRUE(m.getGlobalVariable("lib_data", true)->hasInternalLinkage());
}

TEST(EmbeddedBitcode, BadBytesAreAnInternalErrorNamingTheLibrary) {
  llvm::LLVMContext ctx;
  llvm::Module m("m", ctx);
  m.setTargetTriple("x86_64-unknown-linux-gnu");
  try {
    kiln::cpu::link_bitcode(m, "not bitcode", "test library");
    FAIL() << "garbage linked";
  } catch (const kiln::ir::Error& e) {
    EXPECT_EQ(e.kind(), kiln::ir::ErrorKind::Internal);
    EXPECT_NE(std::string(e.what()).find("test library for x86_64 does not load"), std::string::npos) << e.what();
  }
}

TEST(EmbeddedBitcode, KernelsStayExternalOnlyWhenShared) {
  for (const auto linkage : {kiln::cpu::KernelLinkage::Specialized, kiln::cpu::KernelLinkage::Shared}) {
    llvm::LLVMContext ctx;
    llvm::Module m("m", ctx);
    m.setTargetTriple("x86_64-unknown-linux-gnu");
    kiln::cpu::declare_portable_kernels(m, {"kiln_pk_gemm", "kiln_pk_max_pool2d"});
    kiln::cpu::link_kernel_bitcode(m, {32, 16}, linkage);
    const llvm::Function* gemm = m.getFunction("kiln_pk_gemm");
    ASSERT_NE(gemm, nullptr);
    const bool shared = linkage == kiln::cpu::KernelLinkage::Shared;
    EXPECT_EQ(gemm->hasExternalLinkage(), shared);
    const llvm::Function* pool = m.getFunction("kiln_pk_max_pool2d");
    ASSERT_NE(pool, nullptr);
    EXPECT_EQ(pool->hasExternalLinkage(), shared);
    if (!shared) {
      EXPECT_TRUE(gemm->hasFnAttribute(llvm::Attribute::NoInline));
      EXPECT_TRUE(pool->hasFnAttribute(llvm::Attribute::AlwaysInline));
    }
    const llvm::GlobalVariable* bytes = m.getGlobalVariable("kiln_pk_vector_bytes", true);
    ASSERT_NE(bytes, nullptr);
    EXPECT_TRUE(bytes->hasInternalLinkage());
    EXPECT_EQ(llvm::cast<llvm::ConstantInt>(bytes->getInitializer())->getSExtValue(), 32);
  }
}

// A graph calling one small kernel compiled the whole library (seconds, in
// the JIT and in every bundle) before: what is linked must stay what is called.
TEST(EmbeddedBitcode, OnlyTheDeclaredKernelsAndWhatTheyCallAreLinked) {
  for (const auto linkage : {kiln::cpu::KernelLinkage::Specialized, kiln::cpu::KernelLinkage::Shared}) {
    llvm::LLVMContext ctx;
    llvm::Module m("m", ctx);
    m.setTargetTriple("x86_64-unknown-linux-gnu");
    kiln::cpu::declare_portable_kernels(m, {"kiln_pk_copy_rows"});
    kiln::cpu::link_kernel_bitcode(m, {32, 16}, linkage);
    size_t defined = 0;
    for (const llvm::Function& f : m) defined += !f.isDeclaration();
    EXPECT_FALSE(m.getFunction("kiln_pk_copy_rows")->isDeclaration());
    EXPECT_EQ(m.getFunction("kiln_pk_gemm"), nullptr);
    EXPECT_EQ(m.getFunction("kiln_pk_conv2d"), nullptr);
    // The library defines some 680 functions.
    EXPECT_LT(defined, 20u);
  }
}

TEST(EmbeddedBitcode, DeclaringAnUnknownKernelIsAnInternalErrorNamingIt) {
  llvm::LLVMContext ctx;
  llvm::Module m("m", ctx);
  m.setTargetTriple("x86_64-unknown-linux-gnu");
  try {
    kiln::cpu::declare_portable_kernels(m, {"kiln_pk_no_such_kernel"});
    FAIL() << "declared a kernel the library does not have";
  } catch (const kiln::ir::Error& e) {
    EXPECT_EQ(e.kind(), kiln::ir::ErrorKind::Internal);
    EXPECT_NE(std::string(e.what()).find("'kiln_pk_no_such_kernel' is not a kernel"), std::string::npos) << e.what();
  }
}

}  // namespace
