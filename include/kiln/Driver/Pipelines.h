//===- Pipelines.h - Kiln's pipelines as a library -------------------------===//
//
// The stages a driver (kiln-compile, or an embedding model compiler) chains:
//   buildDeployPipeline     configure, insert caches, drop speculative-only resources,
//                           verify, select kernels, plan the caches and the weights
//   buildLoweringPipeline   one-shot bufferization, entry binding, activation plan,
//                           kiln ops to runtime calls, layers rolled into a loop,
//                           LLVM dialect
// The deploy options live in kiln/Transforms/Pipeline.h (DeployOptions).
//
//===----------------------------------------------------------------------===//
#ifndef KILN_DRIVER_PIPELINES_H
#define KILN_DRIVER_PIPELINES_H

#include "kiln/Transforms/Pipeline.h"

#include "mlir/Pass/PassManager.h"

namespace kiln {

/// Choices of the lowering pipelines.
struct LoweringOptions {
  /// Roll the repeated decoder layers of the step into a loop (kiln-roll-layers): the
  /// same calls, with compile time and code size independent of the layer count.
  bool rollLayers = true;
  /// Fuse each residual add with the norm of its sum (kiln-fuse-residual-norm): the
  /// same bits in one kernel instead of two.
  bool fuseResidualNorm = true;
  /// Device bytes a tensor-parallel rank's plan reserves for its NCCL communicator
  /// (kiln-plan-activations' collective-bytes; 584 MiB, a one-rank communicator of
  /// PyTorch 2.11's NCCL on an H100). Only models with collectives reserve it.
  uint64_t collectiveBytes = 584ull << 20;
  /// Copy every layer loop of a rolled import once a layer before bufferization
  /// (kiln-expand-layers), rather than lowering the loops that the lowering can take.
  bool expandLayers = false;
  /// Merge two projections of one input and one weight shape (a layer's k and v, its
  /// gate and up) into one strided-batched GEMM (kiln-pair-linears): one launch fewer
  /// each; +2-6% decode tokens/s at batch 1 and 16 on the 8B step (docs/performance.md).
  bool pairLinears = true;
  /// Rotate a layer's q and k in one launch (kiln-pair-ropes): one launch fewer a layer.
  /// Off until measured on a GPU.
  bool pairRopes = false;
  /// Merge each gated MLP's gate and up projections and its SwiGLU
  /// (kiln-fuse-pair-swiglu): at batch 1 the pair's skinny GEMM computes the SwiGLU as
  /// its epilogue, one launch fewer a layer. Off until measured on a GPU.
  bool fusePairSwiglu = false;
};

/// From a deployed tensor-level module to the LLVM dialect (what `--emit=llvm|so`
/// translates). The module needs `kiln.plan` (kiln-deploy) and one `kiln.entry`
/// function.
void buildLoweringPipeline(mlir::OpPassManager &pm, const LoweringOptions &options = {});

/// Bufferization, entry binding and the activation plan: enough to know every device
/// byte (`kiln.device_memory`) for the report.
void buildActivationPlanningPipeline(mlir::OpPassManager &pm,
                                     const LoweringOptions &options = {});

/// The part of the lowering that stays in Kiln's and upstream's dialects (buffers,
/// runtime calls), for inspection with `--emit=lowered` and in lit tests.
void buildBufferLoweringPipeline(mlir::OpPassManager &pm,
                                 const LoweringOptions &options = {});

} // namespace kiln

#endif
