//===- AOT.cpp - LLVM IR, native objects and shared objects ---------------===//
#include "kiln/Target/AOT.h"

#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"

using namespace mlir;

namespace {
std::unique_ptr<llvm::Module> translate(ModuleOp module, llvm::LLVMContext &context) {
  DialectRegistry registry;
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  module.getContext()->appendDialectRegistry(registry);
  std::unique_ptr<llvm::Module> llvmModule = translateModuleToLLVMIR(module, context);
  if (!llvmModule)
    module.emitError() << "kiln: translation to LLVM IR failed (is the module lowered "
                          "to the LLVM dialect?)";
  return llvmModule;
}

/// Emits a native, position-independent object of `llvmModule` into `path`.
LogicalResult emitObject(ModuleOp module, llvm::Module &llvmModule, StringRef path) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  llvm::Triple triple(llvm::sys::getDefaultTargetTriple());
  std::string error;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return module.emitError() << "kiln: no LLVM target for '" << triple.str() << "': " << error;
  llvm::TargetOptions options;
  // The forward is a straight line of runtime calls (the work is in the kernels), so
  // code quality does not matter, while the optimizing code generator is superlinear in
  // the size of that one function (a 2,048-layer model took minutes): fast instruction
  // selection and register allocation keep the object linear in the layers.
  std::unique_ptr<llvm::TargetMachine> machine(target->createTargetMachine(
      triple, "generic", "", options, llvm::Reloc::PIC_, std::nullopt,
      llvm::CodeGenOptLevel::None));
  if (!machine)
    return module.emitError() << "kiln: cannot create a target machine for " << triple.str();
  llvmModule.setTargetTriple(triple);
  llvmModule.setDataLayout(machine->createDataLayout());

  std::error_code ec;
  llvm::raw_fd_ostream out(path, ec, llvm::sys::fs::OF_None);
  if (ec)
    return module.emitError() << "kiln: cannot write '" << path << "': " << ec.message();
  llvm::legacy::PassManager codegen;
  if (machine->addPassesToEmitFile(codegen, out, nullptr, llvm::CodeGenFileType::ObjectFile))
    return module.emitError() << "kiln: the target cannot emit object files";
  codegen.run(llvmModule);
  out.flush();
  return success();
}
} // namespace

LogicalResult kiln::emitLLVMIR(ModuleOp module, llvm::raw_ostream &os) {
  llvm::LLVMContext context;
  std::unique_ptr<llvm::Module> llvmModule = translate(module, context);
  if (!llvmModule)
    return failure();
  llvmModule->print(os, nullptr);
  return success();
}

LogicalResult kiln::emitSharedObject(ModuleOp module, const SharedObjectOptions &options) {
  if (options.outputPath.empty() || options.outputPath == "-")
    return module.emitError() << "kiln: a shared object needs an output file (-o model.so)";
  llvm::LLVMContext context;
  std::unique_ptr<llvm::Module> llvmModule = translate(module, context);
  if (!llvmModule)
    return failure();

  SmallString<128> objectPath;
  if (std::error_code ec = llvm::sys::fs::createTemporaryFile("kiln-model", "o", objectPath))
    return module.emitError() << "kiln: cannot create a temporary object file: "
                              << ec.message();
  llvm::scope_exit removeObject([&] { llvm::sys::fs::remove(objectPath); });
  if (failed(emitObject(module, *llvmModule, objectPath)))
    return failure();

  llvm::ErrorOr<std::string> linker = llvm::sys::findProgramByName(options.linker);
  if (!linker)
    return module.emitError() << "kiln: linker '" << options.linker
                              << "' not found on PATH; a C compiler driver links the "
                                 "shared object";
  // Link next to the target and rename on success: a failed link leaves an existing
  // file untouched.
  SmallString<128> linkedPath;
  int linkedFd = -1;
  if (std::error_code ec = llvm::sys::fs::createUniqueFile(
          options.outputPath + ".kiln-tmp-%%%%%%", linkedFd, linkedPath))
    return module.emitError() << "kiln: cannot create a file beside '" << options.outputPath
                              << "': " << ec.message();
  llvm::sys::Process::SafelyCloseFileDescriptor(linkedFd);
  llvm::scope_exit removeLinked([&] { llvm::sys::fs::remove(linkedPath); });
  SmallVector<std::string> args = {*linker, "-shared", "-o", std::string(linkedPath),
                                   std::string(objectPath)};
  if (!options.runtimeLibrary.empty()) {
    // The model finds libkiln_runtime.so next to itself, or through LD_LIBRARY_PATH.
    args.push_back(options.runtimeLibrary);
    args.push_back("-Wl,-rpath,$ORIGIN");
  }
  SmallVector<StringRef> argRefs(args.begin(), args.end());
  std::string message;
  int status = llvm::sys::ExecuteAndWait(*linker, argRefs, std::nullopt, {}, 0, 0, &message);
  if (status != 0)
    return module.emitError() << "kiln: linking '" << options.outputPath << "' failed ("
                              << (message.empty() ? "exit " + std::to_string(status) : message)
                              << ")";
  if (std::error_code ec = llvm::sys::fs::rename(linkedPath, options.outputPath))
    return module.emitError() << "kiln: cannot replace '" << options.outputPath
                              << "': " << ec.message();
  return success();
}
