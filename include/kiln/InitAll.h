//===- InitAll.h - everything kiln-opt and kiln-compile register ----------===//
//
// One place that names the dialects Kiln's pipelines read and emit (so each tool can
// re-parse the output of every pass, the lowering included), the external models that
// make kiln ops bufferizable, and Kiln's passes and pipelines.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_INITALL_H
#define KILN_INITALL_H

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace kiln {
/// The kiln dialect, the upstream dialects of a model graph and of its lowering
/// (func, arith, math, tensor, memref, bufferization, cf, index, llvm, ub), and the
/// bufferization models of kiln, tensor, arith and func.
void registerAllDialects(mlir::DialectRegistry &registry);
/// Kiln's passes, `kiln-deploy`, `kiln-lower`, and the upstream passes the pipelines
/// use (one-shot-bufferize, canonicalize, ...).
void registerAllPasses();
} // namespace kiln

#endif
