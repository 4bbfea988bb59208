//===- AOT.h - lowered kiln modules to LLVM IR, objects, shared objects ---===//
//
// After the lowering pipeline (kiln/Driver/Pipelines.h) has produced the LLVM dialect:
// translation to LLVM IR, native code generation in process (LLVM 22), and a link
// with the system C compiler into a shared object that a serving process loads with
// only the CUDA driver and libkiln_runtime.so next to it.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_TARGET_AOT_H
#define KILN_TARGET_AOT_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace kiln {

/// Prints the LLVM IR of a module already in the LLVM dialect.
mlir::LogicalResult emitLLVMIR(mlir::ModuleOp module, llvm::raw_ostream &os);

struct SharedObjectOptions {
  std::string outputPath;   // the .so to write
  std::string runtimeLibrary; // libkiln_runtime.so to link (and find via $ORIGIN); may be empty
  std::string linker = "cc"; // C compiler driver used to link
};

/// Writes a shared object from a module already in the LLVM dialect. Errors are
/// emitted as diagnostics on the module.
mlir::LogicalResult emitSharedObject(mlir::ModuleOp module, const SharedObjectOptions &options);

} // namespace kiln

#endif
