#include "bundle/bundle_codegen.hpp"

#include <llvm/IR/Constants.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Linker/Linker.h>
#include <llvm/Object/ArchiveWriter.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Triple.h>

#include <dnnl.h>

#include <algorithm>
#include <set>

#include "backends/cpu/codegen.hpp"
#include "backends/cpu/portable_bitcode.hpp"
#include "backends/program_blocks.hpp"
#include "bundle/runtime/bundle_abi.h"
#include "bundle/runtime/bundle_cpu_features.h"
#include "bundle/runtime/bundle_native.h"
#include "bundle/runtime_bitcode.hpp"
#include "runtime/ir/error.hpp"

namespace kiln::bundle {

namespace {

// Gives every function defined in `m` the compiler's CPU and features, as
// the compiler would, kept (kKeepTargetAttribute) when `m` is linked into
// the module another compiler (another CPU's) compiles.
void pin_target(llvm::Module& m, const cpu::TargetCompiler& compiler) {
  const cpu::Target& target = compiler.target();
  const bool wide = compiler.vector_config().bytes == 64;
  for (llvm::Function& f : m) {
    if (f.isDeclaration()) continue;
    f.addFnAttr("target-cpu", target.cpu.empty() ? "generic" : target.cpu);
    f.addFnAttr("target-features", target.features);
    if (wide) f.addFnAttr("prefer-vector-width", "512");  // as jit.cpp's optimise_and_emit says why
    f.addFnAttr(cpu::kKeepTargetAttribute);
  }
}

std::string entry_name(const BundlePlan& plan, size_t variant, int64_t batch) {
  return plan.name + "_v" + std::to_string(variant) + "_b" + std::to_string(batch) + "_entry";
}

class BundleEmitter {
 public:
  BundleEmitter(llvm::Module& m, const BundlePlan& plan, const std::vector<const cpu::TargetCompiler*>& cpus)
      : m_(m), ctx_(m.getContext()), b_(ctx_), plan_(plan), cpus_(cpus) {
    ptr_ = llvm::PointerType::getUnqual(ctx_);
    i64_ = llvm::Type::getInt64Ty(ctx_);
    i32_ = llvm::Type::getInt32Ty(ctx_);
  }

  void emit() {
    std::vector<llvm::Constant*> specs;
    auto* spec_type = llvm::StructType::get(ctx_, {i64_, i64_, ptr_});
    for (const BundleSpecialization& spec : plan_.specs)
      specs.push_back(llvm::ConstantStruct::get(
          spec_type, {i(spec.batch), i(spec.program->arena_bytes), plan_.native ? native_table(spec) : null()}));
    std::vector<llvm::Constant*> variants;
    auto* variant_type = llvm::StructType::get(ctx_, {ptr_, ptr_, ptr_});
    for (size_t v = 0; v < cpus_.size(); ++v) {
      std::vector<llvm::Constant*> entries;
      for (const BundleSpecialization& spec : plan_.specs) entries.push_back(runtime(entry_name(plan_, v, spec.batch)));
      const std::string& cpu = cpus_[v]->target().cpu;
      variants.push_back(llvm::ConstantStruct::get(
          variant_type, {string(cpu.empty() ? "generic" : cpu), string(bundle_cpu_features(*cpus_[v])),
                         global(llvm::ConstantArray::get(llvm::ArrayType::get(ptr_, entries.size()), entries), "entries")}));
    }
    auto* tensor_type = llvm::StructType::get(ctx_, {ptr_, i64_, i32_, i32_, i64_});
    auto tensors = [&](const std::vector<BundleTensor>& list, const char* what) -> llvm::Constant* {
      std::vector<llvm::Constant*> items;
      for (const auto& t : list)
        items.push_back(llvm::ConstantStruct::get(
            tensor_type, {string(t.name), i(t.item_bytes), i32(t.batched ? 1 : 0), i32(int32_t(t.dtype)), i(t.outer)}));
      return global(llvm::ConstantArray::get(llvm::ArrayType::get(tensor_type, items.size()), items), what);
    };
    llvm::Constant* embedded = llvm::ConstantPointerNull::get(ptr_);
    if (plan_.embedded_weights) {
      // Typed as bytes: codegen of a large float array is ten times slower (TOOLCHAIN-FACTS.md).
      auto* data = llvm::ConstantDataArray::getString(ctx_, *plan_.embedded_weights, false);
      auto* g =
          new llvm::GlobalVariable(m_, data->getType(), true, llvm::GlobalValue::InternalLinkage, data, plan_.name + "_weights");
      g->setAlignment(llvm::Align(KILN_BUNDLE_ALIGNMENT));
      embedded = g;
    }
    auto* desc_type =
        llvm::StructType::get(ctx_, {i32_, i32_, i32_, i32_, ptr_, ptr_, ptr_, i64_, i64_, ptr_, ptr_, ptr_, i32_, i32_, ptr_});
    desc_ =
        global(llvm::ConstantStruct::get(
                   desc_type,
                   {i32(KILN_BUNDLE_ABI_VERSION), i32(int32_t(plan_.inputs.size())), i32(int32_t(plan_.outputs.size())),
                    i32(int32_t(plan_.specs.size())), tensors(plan_.inputs, "inputs"), tensors(plan_.outputs, "outputs"),
                    global(llvm::ConstantArray::get(llvm::ArrayType::get(spec_type, specs.size()), specs), "specs"),
                    i(int64_t(plan_.weights_bytes)), i(int64_t(plan_.weights_checksum)), embedded,
                    plan_.native ? runtime("kiln_bundle_native_create") : null(),
                    plan_.native ? runtime("kiln_bundle_native_destroy") : null(), i32(int32_t(variants.size())), i32(0),
                    global(llvm::ConstantArray::get(llvm::ArrayType::get(variant_type, variants.size()), variants), "variants")}),
               "desc");

    // The exported API: thin calls into the runtime with this bundle's descriptor.
    wrap("create", "kiln_bundle_create", {ptr_, ptr_},
         [&](llvm::Function* f) { return std::vector<llvm::Value*>{desc_, f->getArg(0), null(), i(0), f->getArg(1)}; });
    wrap("create_from_memory", "kiln_bundle_create", {ptr_, i64_, ptr_},
         [&](llvm::Function* f) { return std::vector<llvm::Value*>{desc_, null(), f->getArg(0), f->getArg(1), f->getArg(2)}; });
    wrap("check_weights", "kiln_bundle_check_weights", {ptr_, i64_},
         [&](llvm::Function* f) { return std::vector<llvm::Value*>{desc_, f->getArg(0), f->getArg(1)}; });
    forward("destroy", "kiln_bundle_destroy");
    forward("last_error", "kiln_bundle_last_error");
    forward("cpu", "kiln_bundle_cpu");
    forward("set_parallel_for", "kiln_bundle_set_parallel_for");
    forward("set_batch_rule", "kiln_bundle_set_batch_rule");
    forward("run", "kiln_bundle_run");
    // The static API: portable bundles only (a native bundle's primitives live in its handle).
    for (size_t s = 0; s < plan_.specs.size() && !plan_.native; ++s)
      wrap("run_b" + std::to_string(plan_.specs[s].batch), "kiln_bundle_run_static", {ptr_, ptr_, ptr_, ptr_, ptr_, ptr_},
           [&](llvm::Function* f) {
             return std::vector<llvm::Value*>{desc_,        i32(int32_t(s)), f->getArg(0), f->getArg(1),
                                              f->getArg(2), f->getArg(3),    f->getArg(4), f->getArg(5)};
           });
    // Everything else is internal: two bundles in one program do not clash.
    for (llvm::Function& f : m_)
      if (!f.isDeclaration() && !exported_.count(f.getName().str())) f.setLinkage(llvm::GlobalValue::InternalLinkage);
    for (llvm::GlobalVariable& g : m_.globals())
      if (!g.isDeclaration()) g.setLinkage(llvm::GlobalValue::InternalLinkage);
  }

 private:
  llvm::Constant* i(int64_t v) { return llvm::ConstantInt::get(i64_, uint64_t(v)); }
  llvm::Constant* i32(int32_t v) { return llvm::ConstantInt::get(i32_, uint64_t(uint32_t(v))); }
  llvm::Constant* null() { return llvm::ConstantPointerNull::get(ptr_); }
  llvm::Constant* string(const std::string& s) {
    auto* data = llvm::ConstantDataArray::getString(ctx_, s, true);
    return new llvm::GlobalVariable(m_, data->getType(), true, llvm::GlobalValue::PrivateLinkage, data, plan_.name + "_str");
  }
  llvm::GlobalVariable* global(llvm::Constant* value, const std::string& what) {
    return new llvm::GlobalVariable(m_, value->getType(), true, llvm::GlobalValue::InternalLinkage, value,
                                    plan_.name + "_" + what);
  }

  // Raw bytes (a oneDNN descriptor), aligned for the 64-bit fields they hold.
  llvm::Constant* blob(std::string_view bytes) {
    auto* data =
        llvm::ConstantDataArray::get(ctx_, llvm::ArrayRef<uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
    auto* g = new llvm::GlobalVariable(m_, data->getType(), true, llvm::GlobalValue::PrivateLinkage, data, plan_.name + "_dnnl");
    g->setAlignment(llvm::Align(16));
    g->setUnnamedAddr(llvm::GlobalValue::UnnamedAddr::Global);  // identical descriptors are merged
    return g;
  }
  template <typename T>
  llvm::Constant* array_of(llvm::Type* type, const std::vector<T>& items, const std::string& what) {
    if (items.empty()) return null();
    return global(llvm::ConstantArray::get(llvm::ArrayType::get(type, items.size()), items), what);
  }

  // The spec's kiln_bundle_native_table (bundle_native.h), from the saved kernels.
  llvm::Constant* native_table(const BundleSpecialization& spec) {
    auto* arg_type = llvm::StructType::get(ctx_, {i32_, i32_, ptr_, i64_, i64_});
    auto* f32 = llvm::Type::getFloatTy(ctx_);
    auto* post_type = llvm::StructType::get(ctx_, {i32_, i32_, f32, f32, f32, i32_});
    auto* prim_type = llvm::StructType::get(
        ctx_, {i32_, i32_, i32_, i32_, i32_, i32_, i32_, i32_, ptr_, ptr_, ptr_, ptr_, ptr_, ptr_, ptr_, i32_, i32_, ptr_});
    auto f = [&](float v) { return llvm::ConstantFP::get(f32, double(v)); };
    std::vector<llvm::Constant*> prims;
    const backends::BlockReader saved(spec.primitives, "the native bundle's primitives");
    auto blob = [&](const nlohmann::json& ref, const std::string& what) { return this->blob(saved.block(ref, what)); };
    for (const nlohmann::json& k : saved.document()) {
      const nlohmann::json& prim = k.at("primitive");
      const int32_t kind = prim.at("kind").get<int32_t>();
      llvm::Constant *desc = null(), *dst = null();
      std::vector<llvm::Constant*> srcs, posts, runtime_args, constants;
      if (kind == dnnl_reorder) {
        desc = blob(prim.at("src"), "a reorder's source");
        dst = blob(prim.at("dst"), "a reorder's destination");
      } else if (kind == dnnl_concat) {
        dst = blob(prim.at("dst"), "a concat's destination");
        for (const auto& src : prim.at("srcs")) srcs.push_back(blob(src, "a concat's source"));
      } else {
        desc = blob(prim.at("desc"), "an operation descriptor");
      }
      for (const auto& op : prim.at("post_ops")) {
        const bool sum = op.contains("sum");
        posts.push_back(llvm::ConstantStruct::get(
            post_type, {i32(sum ? KILN_BUNDLE_NATIVE_POST_SUM : KILN_BUNDLE_NATIVE_POST_ELTWISE),
                        i32(sum ? 0 : op.at("eltwise").get<int32_t>()), f(op.at(sum ? "sum" : "scale").get<float>()),
                        f(sum ? 0 : op.at("alpha").get<float>()), f(sum ? 0 : op.at("beta").get<float>()), i32(0)}));
      }
      auto arg = [&](const nlohmann::json& a, bool constant) {
        return llvm::ConstantStruct::get(arg_type,
                                         {i32(a.at(0).get<int32_t>()), i32(0), blob(a.at(1), "an argument"),
                                          i(constant ? a.at(2).get<int64_t>() : 0), i(constant ? a.at(3).get<int64_t>() : 0)});
      };
      const std::vector<llvm::Constant*> quantization = this->quantization(prim.value("quantization", nlohmann::json::object()));
      for (const auto& r : k.at("runtime_args")) runtime_args.push_back(arg(r, false));
      for (const auto& c : k.at("constants")) constants.push_back(arg(c, true));
      prims.push_back(llvm::ConstantStruct::get(
          prim_type,
          {i32(kind), i32(k.at("sum_from").get<int32_t>()), i32(prim.value("axis", 0)), i32(int32_t(srcs.size())),
           i32(int32_t(posts.size())), i32(int32_t(runtime_args.size())), i32(int32_t(constants.size())), i32(0), desc, dst,
           array_of(ptr_, srcs, "srcs"), array_of(post_type, posts, "post_ops"), array_of(arg_type, runtime_args, "args"),
           array_of(arg_type, constants, "constants"), string(k.at("label").get<std::string>()),
           i32(int32_t(quantization.size())), i32(0), array_of(quantization_type(), quantization, "quantization")}));
    }
    const dnnl_version_t* v = dnnl_version();
    auto* table_type = llvm::StructType::get(ctx_, {i32_, i32_, i32_, i32_, ptr_});
    return global(llvm::ConstantStruct::get(table_type, {i32(v->major), i32(v->minor), i32(int32_t(prims.size())), i32(0),
                                                         array_of(prim_type, prims, "primitives")}),
                  "native_b" + std::to_string(spec.batch));
  }

  // A primitive's kiln_bundle_native_quantization entries, from the
  // "quantization" object OneDnnKernel::save() writes: the bundle runtime
  // sets them on the primitive's attributes.
  llvm::StructType* quantization_type() { return llvm::StructType::get(ctx_, {i32_, i32_, i32_, i32_, i64_, ptr_}); }
  std::vector<llvm::Constant*> quantization(const nlohmann::json& q) {
    std::vector<llvm::Constant*> entries;
    auto entry = [&](int32_t kind, int32_t arg, const nlohmann::json& e, bool floats) {
      const bool runtime = e.value("runtime", false);
      llvm::Constant* values = null();
      size_t count = 0;
      if (floats) {
        const auto v = e.at("values").get<std::vector<float>>();
        if (!v.empty()) values = global(llvm::ConstantDataArray::get(ctx_, v), "scales");
        count = v.size();
      } else {
        const auto v = e.at("values").get<std::vector<int32_t>>();
        if (!v.empty())
          values = global(
              llvm::ConstantDataArray::get(ctx_, llvm::ArrayRef<uint32_t>(reinterpret_cast<const uint32_t*>(v.data()), v.size())),
              "zero_points");
        count = v.size();
      }
      entries.push_back(llvm::ConstantStruct::get(quantization_type(), {i32(kind), i32(arg), i32(e.at("mask").get<int32_t>()),
                                                                        i32(runtime ? 1 : 0), i(int64_t(count)), values}));
    };
    if (q.contains("output_scales")) entry(KILN_BUNDLE_NATIVE_OUTPUT_SCALES, DNNL_ARG_DST, q.at("output_scales"), true);
    for (const auto& s : q.value("scales", nlohmann::json::array()))
      entry(KILN_BUNDLE_NATIVE_SCALES, s.at("arg").get<int32_t>(), s, true);
    for (const auto& z : q.value("zero_points", nlohmann::json::array()))
      entry(KILN_BUNDLE_NATIVE_ZERO_POINTS, z.at("arg").get<int32_t>(), z, false);
    return entries;
  }

  llvm::Function* runtime(const std::string& name) {
    llvm::Function* f = m_.getFunction(name);
    if (!f || f->isDeclaration()) ir::fail(ir::ErrorKind::Internal, "the bundle runtime has no '" + name + "'");
    return f;
  }

  // NAME_<suffix>(params...) { return fn(args(f)...); }
  template <typename Args>
  void wrap(const std::string& suffix, const std::string& fn_name, std::vector<llvm::Type*> params, Args args) {
    llvm::Function* fn = runtime(fn_name);
    auto* type = llvm::FunctionType::get(fn->getReturnType(), params, false);
    const std::string name = plan_.name + "_" + suffix;
    auto* f = llvm::Function::Create(type, llvm::Function::ExternalLinkage, name, m_);
    exported_.insert(name);
    // Called before create's CPU check: the runtime's baseline target, not the bundle's.
    for (const char* a : {"target-cpu", "target-features", "tune-cpu"})
      if (fn->hasFnAttribute(a)) f->addFnAttr(fn->getFnAttribute(a));
    f->addFnAttr(cpu::kKeepTargetAttribute);
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", f));
    auto* result = b_.CreateCall(fn, args(f));
    if (type->getReturnType()->isVoidTy())
      b_.CreateRetVoid();
    else
      b_.CreateRet(result);
  }
  // The same parameters (the handle first): NAME_<suffix> = fn.
  void forward(const std::string& suffix, const std::string& fn_name) {
    llvm::Function* fn = runtime(fn_name);
    std::vector<llvm::Type*> params(fn->getFunctionType()->param_begin(), fn->getFunctionType()->param_end());
    wrap(suffix, fn_name, params, [&](llvm::Function* f) {
      std::vector<llvm::Value*> v;
      for (auto& a : f->args()) v.push_back(&a);
      return v;
    });
  }

  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  const BundlePlan& plan_;
  const std::vector<const cpu::TargetCompiler*>& cpus_;
  llvm::PointerType* ptr_;
  llvm::Type *i64_, *i32_;
  llvm::Constant* desc_ = nullptr;
  std::set<std::string> exported_;
};

}  // namespace

std::string compile_bundle(const BundlePlan& plan, const std::vector<const cpu::TargetCompiler*>& cpus) {
  if (cpus.empty() || cpus.size() > KILN_BUNDLE_MAX_VARIANTS)
    ir::fail(ir::ErrorKind::InvalidArgument, "a bundle holds code for 1 to " + std::to_string(KILN_BUNDLE_MAX_VARIANTS) +
                                                 " CPUs, not " + std::to_string(cpus.size()));
  if (plan.specs.empty() || plan.specs.size() > KILN_BUNDLE_MAX_SPECS)
    ir::fail(ir::ErrorKind::InvalidArgument, "a bundle holds 1 to " + std::to_string(KILN_BUNDLE_MAX_SPECS) +
                                                 " batch sizes, not " + std::to_string(plan.specs.size()));
  if (plan.inputs.size() + plan.outputs.size() > KILN_BUNDLE_MAX_IO)
    ir::fail(ir::ErrorKind::InvalidArgument,
             "a bundle has at most " + std::to_string(KILN_BUNDLE_MAX_IO) + " inputs and outputs");
  auto unit = cpus[0]->new_module(plan.name);
  std::set<std::string> kernels;
  for (const BundleSpecialization& spec : plan.specs) kernels.merge(cpu::called_kernels(*spec.program));
  // Each CPU's entries and kernels in a module of their own (the kernels'
  // names are the same in each), pinned to that CPU, then linked into one:
  // their internal names are made unique, the entries' are already.
  for (size_t v = 0; v < cpus.size(); ++v) {
    auto code = std::make_unique<llvm::Module>(plan.name + "_v" + std::to_string(v), *unit.context);
    code->setDataLayout(unit.module->getDataLayout());
    code->setTargetTriple(unit.module->getTargetTriple());
    cpu::declare_portable_kernels(*code, kernels);
    for (const BundleSpecialization& spec : plan.specs)
      cpu::emit_bundle_entry(*code, *spec.program, entry_name(plan, v, spec.batch), spec.constant_offsets);
    // Only the kernels the entries call: linking and optimising the whole
    // library cost most of a small bundle's freeze.
    cpu::link_kernel_bitcode(*code, cpus[v]->vector_config());
    pin_target(*code, *cpus[v]);
    if (llvm::Linker::linkModules(*unit.module, std::move(code)))
      ir::fail(ir::ErrorKind::Internal, "the code for cpu '" + cpus[v]->target().cpu + "' does not link into the bundle");
  }
  link_bundle_runtime(*unit.module);
  if (plan.native) link_native_runtime(*unit.module);
  try {
    BundleEmitter(*unit.module, plan, cpus).emit();
  } catch (const nlohmann::json::exception& e) {
    ir::fail(ir::ErrorKind::Internal, std::string("native bundle: a saved oneDNN kernel is malformed: ") + e.what());
  }
  return cpus[0]->compile(std::move(unit), cpu::Jit::Optimise::Full);
}

std::string bundle_cpu_features(const cpu::TargetCompiler& compiler) {
#define KILN_FEATURE_NAME(name, word, mask, os_state) name,
  static const std::vector<std::string> x86 = {KILN_BUNDLE_X86_FEATURES(KILN_FEATURE_NAME)};
  static const std::vector<std::string> aarch64 = {KILN_BUNDLE_AARCH64_FEATURES(KILN_FEATURE_NAME)};
#undef KILN_FEATURE_NAME
  const llvm::Triple triple(compiler.target().triple);
  const std::vector<std::string> has = compiler.features();
  std::string list;
  for (const std::string& name : triple.isAArch64() ? aarch64 : triple.isX86() ? x86 : std::vector<std::string>{})
    if (std::binary_search(has.begin(), has.end(), name)) list += (list.empty() ? "" : ",") + name;
  return list;
}

std::string static_archive(const std::string& object, const std::string& member_name) {
  std::vector<llvm::NewArchiveMember> members(1);
  members[0].Buf = llvm::MemoryBuffer::getMemBuffer(object, member_name, false);
  members[0].MemberName = member_name;
  auto archive = llvm::writeArchiveToBuffer(members, llvm::SymtabWritingMode::NormalSymtab, llvm::object::Archive::K_GNU,
                                            /*Deterministic=*/true, /*Thin=*/false);
  if (!archive) {
    std::string msg;
    llvm::raw_string_ostream os(msg);
    os << archive.takeError();
    ir::fail(ir::ErrorKind::Internal, "cannot write a static library: " + os.str());
  }
  return std::string((*archive)->getBufferStart(), (*archive)->getBufferSize());
}

}  // namespace kiln::bundle
