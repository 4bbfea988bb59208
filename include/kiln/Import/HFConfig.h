//===- HFConfig.h - Hugging Face config.json -> kiln IR ----------------===//
//
// Turns a Hugging Face `config.json` into a kiln module: `kiln.model` and a default
// `kiln.runtime` on the module, and the model:
//
//   - llama, mistral, qwen2, qwen3: the whole decoder graph. One `kiln.weight` per
//     tensor the model needs, by its Hugging Face name, in the order of use, and
//     `func.func @forward(token_ids, positions, logit_rows) -> logits` (marked
//     `kiln.entry`, arguments `kiln.input`, result `kiln.output`) from the embedding
//     through every layer (RMSNorm, q/k/v projections, RoPE (`#kiln.rope`),
//     `kiln.attention`, o projection, residual adds, SwiGLU MLP) to the gathered
//     logit rows, the final norm and the lm_head. `#kiln.model<weight_bytes>` is the
//     sum of the weights. lib/Import/DenseDecoder.cpp documents the graph.
//   - deepseek_v2/v3, nemotron_h: a skeleton of their cached ops in `@forward`
//     (`kiln.mla_attention` per layer; `kiln.ssm` + `kiln.causal_conv` per Mamba2
//     layer, `kiln.attention` per attention layer), fed by function arguments, with
//     no graph between them. DeepSeek MTP layers are appended with a `draft` marker.
//
// The dtype (`torch_dtype`, or transformers-5's `dtype`) is the weights' and the
// activations' element type. Other dtypes than bfloat16 import, with a warning: the
// runtime runs bfloat16 models only.
//
// An Eagle3 head (ImportOptions::eagle3Head) is one draft layer with the target's
// attention shapes: a separate function `@eagle3_head` holding its attention for a
// dense model, a draft layer appended to `@forward` for the skeletons.
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

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace kiln {

struct ImportOptions {
  /// Append one Eagle3 draft decoder layer with the target's attention shapes
  /// (`draft = #kiln<draft eagle3>`).
  bool eagle3Head = false;
  /// Draft tokens a step asked of MTP (`--spec mtp:N`; 0: none). A whole-graph DeepSeek
  /// model then runs its MTP module inside `@forward` after the target and hands back a
  /// draft token a logit row (docs/mtp.md); its module drafts one token, so N must be 1.
  unsigned mtpDrafts = 0;
  /// Tensor-parallel ranks (`--tp N`). For the dense decoder families (no MoE, MLA, SSM or
  /// draft layers, no o/down-projection bias) N > 1 builds one rank's graph
  /// (docs/tensor-parallel.md): heads and the MLP's intermediate divided, every sliced
  /// weight `shard`ed, a `kiln.all_reduce` after each row-parallel projection, and
  /// `#kiln.model`'s tp_ranks = N. Other families keep the whole graph (tp_ranks 1),
  /// which the plan divides.
  unsigned tp = 1;
  /// Build the per-rank form even at tp = 1: the all-reduces in place, every weight
  /// whole. For checking that a one-rank NCCL run equals the plain one bit for bit.
  bool collectivesAtOneRank = false;
  /// Build a run of alike decoder layers (every layer of llama, mistral, qwen2 and qwen3
  /// models whose layers share one window) as one `scf.for` marked `kiln.layers`, its
  /// weights as `kiln.weight_family`s: import and deploy then see one layer whatever the
  /// layer count, and kiln-expand-layers makes the same module as an unrolled import.
  bool rollLayers = true;
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
/// The most `[`/`{` levels a config.json may nest: llvm::json::parse recurses once per
/// level, so deeper text is refused before it is parsed.
constexpr unsigned kMaxJsonNesting = 64;

/// The (line, column) of the first bracket of `text` nested deeper than `limit`
/// (outside strings), or nullopt. Cheap enough to run before every parse.
std::optional<std::pair<unsigned, unsigned>> findExcessiveJsonNesting(llvm::StringRef text,
                                                                     unsigned limit);

mlir::OwningOpRef<mlir::ModuleOp> importHFConfig(llvm::StringRef json,
                                                 llvm::StringRef fileName,
                                                 mlir::MLIRContext *context,
                                                 const ImportOptions &options = {});

/// What a config.json's dimensions say without building the graph: its layer count and
/// weight bytes (parameters x dtype bytes; biases and q/k norms left out, so it never
/// exceeds the exact total). A driver can refuse a model whose weights alone cannot fit
/// before spending a minute on a graph of 100k layers. nullopt (with diagnostics) when
/// the config does not read.
struct ConfigEstimate {
  int64_t layers = 0;
  uint64_t weightBytes = 0;
};
std::optional<ConfigEstimate> estimateHFConfig(llvm::StringRef json, llvm::StringRef fileName,
                                               mlir::MLIRContext *context);

/// Reads `path` and imports it; a missing/unreadable file is an error diagnostic.
mlir::OwningOpRef<mlir::ModuleOp> importHFConfigFile(llvm::StringRef path,
                                                     mlir::MLIRContext *context,
                                                     const ImportOptions &options = {});

/// Merges a draft model (two-model speculation, `--spec draft:N`) into the target's
/// module, for planning and reporting (both models' caches and weights share the GPU);
/// the draft model is compiled to its own shared object for running. Its ops become
/// draft layers (`draft = #kiln<draft draft_model>`) numbered after the target's
/// layers, its `kiln.weight`s are renamed "draft.<name>" (their `kiln.weight_ref`s
/// follow), its functions move over as `draft_<name>` without `kiln.entry` (the
/// target's `@forward` stays the module's entry), and its weights are added to the
/// target's `weight_bytes`.
mlir::LogicalResult attachDraftModel(mlir::ModuleOp target,
                                     mlir::OwningOpRef<mlir::ModuleOp> draft);

} // namespace kiln

#endif
