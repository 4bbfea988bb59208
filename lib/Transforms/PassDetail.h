//===- PassDetail.h - shared helpers of Kiln's passes ---------------------===//
#ifndef KILN_LIB_TRANSFORMS_PASSDETAIL_H
#define KILN_LIB_TRANSFORMS_PASSDETAIL_H

#include "kiln/Dialect/Kiln/Kiln.h"
#include "llvm/ADT/Twine.h"

#include <string>

namespace kiln {

/// "640.0 MiB", "1.50 GiB": sizes as people read them in diagnostics and reports.

/// Emits "<pass> needs a '<attr>' module attribute, e.g. <example>" on `module`.
mlir::LogicalResult emitMissingConfig(mlir::ModuleOp module, llvm::StringRef pass,
                                      llvm::StringRef attribute, llvm::StringRef example);
mlir::LogicalResult emitMissingRuntime(mlir::ModuleOp module, llvm::StringRef pass);
mlir::LogicalResult emitMissingTarget(mlir::ModuleOp module, llvm::StringRef pass);

/// "layer 3 intermediate_ssm_state": how diagnostics name a resource.
std::string describeResource(CacheResourceInterface resource);

} // namespace kiln

#endif
