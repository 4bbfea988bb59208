//===- PassDetail.h - shared helpers of Kiln's passes ---------------------===//
#ifndef KILN_LIB_TRANSFORMS_PASSDETAIL_H
#define KILN_LIB_TRANSFORMS_PASSDETAIL_H

#include "kiln/Dialect/Kiln/Kiln.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"
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

/// The pairing passes (kiln-pair-linears, kiln-pair-ropes): every OpT under `root` that
/// `pairable` accepts and `partnerOf` finds a later partner for becomes, with that
/// partner, the op `merge` builds where the partner was (a builder there, the two ops'
/// fused location); both are erased. A partner pairs once. Returns the pairs made.
template <typename OpT, typename Pairable, typename PartnerOf, typename Merge>
unsigned mergePairs(mlir::Operation *root, Pairable pairable, PartnerOf partnerOf, Merge merge) {
  llvm::SmallVector<std::pair<OpT, OpT>> pairs;
  llvm::DenseSet<mlir::Operation *> taken;
  root->walk([&](OpT first) {
    if (taken.contains(first) || !pairable(first))
      return;
    if (OpT second = partnerOf(first)) {
      pairs.emplace_back(first, second);
      taken.insert(second);
    }
  });
  for (auto [first, second] : pairs) {
    mlir::OpBuilder builder(second);
    merge(builder, builder.getFusedLoc({first.getLoc(), second.getLoc()}), first, second);
    first->erase();
    second->erase();
  }
  return pairs.size();
}

} // namespace kiln

#endif
