//===- Pipeline.h - kiln-deploy as a library -------------------------------===//
//
// The deploy pipeline for embedders: configure the module from options, insert
// caches, drop speculative-only resources when speculation is off, validate the
// configuration, select kernels, plan memory.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_TRANSFORMS_PIPELINE_H
#define KILN_TRANSFORMS_PIPELINE_H

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Pass/PassManager.h"

#include <optional>
#include <string>
#include <vector>

namespace kiln {

/// Options of the deploy pipeline. Unset values keep what the module already says.
struct DeployOptions {
  std::string target;              // preset ("h200") or "sm_XY"; empty: keep
  std::string spec;                // "none", "mtp:3", "eagle3:3", "draft:4", "ngram:3"
  std::string ssmMode;             // "rewind" or "replay"; empty: rewind
  std::optional<unsigned> maxBatch, maxSeqLen, pageSize, tp, maxStepTokens;
  std::string kvDtype;             // "bf16", "f16", "f32", "fp8"; empty: keep
  double usableFraction = 0.9;     // share of device memory the plan may use
  bool fillKv = false;             // give the KV pools all memory left over
  uint64_t reserveBytes = 0;       // kept out of the cache budget (activations, workspace)
  bool emitRemarks = false;        // explain rejected kernel candidates
  std::vector<std::string> force;  // kernel overrides: "variant" or "family=variant"
};

/// Adds the deploy pipeline to `pm` (which must nest on builtin.module).
void buildDeployPipeline(mlir::OpPassManager &pm, const DeployOptions &options);

/// Registers the `kiln-deploy` pipeline (kiln/InitAll.h registers everything).
void registerDeployPipeline();

} // namespace kiln

#endif
