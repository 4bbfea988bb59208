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

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

/// The share of the target's memory a plan may use unless told otherwise (the rest is
/// the CUDA context, the allocator's slack and other processes).
inline constexpr double kDefaultUsableFraction = 0.9;

/// Options of the deploy pipeline (rows of DeployOptions.def). Unset values keep what
/// the module already says.
struct DeployOptions {
#define KILN_DEPLOY_STRING(field, flag, category, help) std::string field;
#define KILN_DEPLOY_COUNT(field, flag, category, help) std::optional<unsigned> field;
#define KILN_DEPLOY_SCALAR(type, field, flag, default, category, help) type field = default;
#define KILN_DEPLOY_LIST(field, flag, category, help) std::vector<std::string> field;
#include "kiln/Transforms/DeployOptions.def"
};

/// Adds the deploy pipeline to `pm` (which must nest on builtin.module).
void buildDeployPipeline(mlir::OpPassManager &pm, const DeployOptions &options);

/// Registers the `kiln-deploy` pipeline (kiln/InitAll.h registers everything).
void registerDeployPipeline();

} // namespace kiln

#endif
