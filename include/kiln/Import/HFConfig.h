//===- HFConfig.h - Hugging Face config.json -> kiln IR ----------------===//
//
// Turns a Hugging Face `config.json` into a kiln module: `kiln.model` and a default
// `kiln.runtime` on the module, and one `func.func @forward` with one kiln model op
// per cached layer op (`kiln.attention` / `kiln.mla_attention` per attention layer,
// `kiln.ssm` + `kiln.causal_conv` per Mamba2 layer; MLP and MoE layers need no kiln
// op). Draft layers (DeepSeek MTP layers, an optional Eagle3 head) are appended after
// the model's layers with a `draft` marker.
//
// Errors are reported as MLIR diagnostics on the context (the caller installs a
// handler) located at `file:line:col` when a position is known; the functions then
// return null / failure. Bad input never crashes.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_IMPORT_HFCONFIG_H
#define KILN_IMPORT_HFCONFIG_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace kiln {

struct ImportOptions {
  /// Append one Eagle3 draft decoder layer with the target's attention shapes
  /// (`draft = #kiln<draft eagle3>`).
  bool eagle3Head = false;
  /// Name recorded in `#kiln.model`; empty: the file name without `.json`
  /// (and without a trailing `.config`).
  std::string modelName;
  /// Default runtime written to the module (the deploy options may override it).
  unsigned maxBatch = 64;
  unsigned maxSeqLen = 8192; // clamped to max_position_embeddings when smaller
  unsigned pageSize = 64;
};

/// Hugging Face `model_type`s the importer understands.
llvm::ArrayRef<llvm::StringRef> supportedModelTypes();

/// Imports config.json text. `fileName` names the buffer in diagnostics.
mlir::OwningOpRef<mlir::ModuleOp> importHFConfig(llvm::StringRef json,
                                                 llvm::StringRef fileName,
                                                 mlir::MLIRContext *context,
                                                 const ImportOptions &options = {});

/// Reads `path` and imports it; a missing/unreadable file is an error diagnostic.
mlir::OwningOpRef<mlir::ModuleOp> importHFConfigFile(llvm::StringRef path,
                                                     mlir::MLIRContext *context,
                                                     const ImportOptions &options = {});

/// Merges a draft model (two-model speculation, `--spec draft:N`) into the target's
/// module: its ops become draft layers (`draft = #kiln<draft draft_model>`) numbered
/// after the target's layers, its functions move over as `draft_<name>`, and its
/// weights are added to the target's `weight_bytes`.
mlir::LogicalResult attachDraftModel(mlir::ModuleOp target,
                                     mlir::OwningOpRef<mlir::ModuleOp> draft);

} // namespace kiln

#endif
