//===- Compile.h - one compilation, as a library ---------------------------===//
//
// What kiln-compile does, for tools and embedders: import a Hugging Face config.json
// (or parse a .mlir kiln module), run the deploy pipeline, then print the report or
// lower the model and emit MLIR, LLVM IR or a shared object. One options struct holds
// every choice; kiln-compile's flags fill it (docs/kiln-compile.md).
//
//===----------------------------------------------------------------------===//
#ifndef KILN_DRIVER_COMPILE_H
#define KILN_DRIVER_COMPILE_H

#include "kiln/Driver/Pipelines.h"
#include "kiln/Report/Report.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <functional>
#include <string>

namespace kiln {

/// What a compilation writes.
enum class EmitKind {
  report,  // the deploy report (text, JSON or HTML)
  mlir,    // the deployed module (tensors, kiln ops)
  lowered, // the module on buffers with runtime calls (before LLVM)
  llvm,    // LLVM IR of the lowered model
  so       // a shared object linked against libkiln_runtime.so
};

struct CompileOptions {
  std::string modelPath;      // config.json or .mlir ("-": stdin)
  std::string draftModelPath; // with --spec draft:N: a second config merged for planning
  bool importOnly = false;    // skip the deploy pipeline
  /// A dense model's per-rank form at --tp 1: the all-reduces in place (one-rank NCCL
  /// runs against plain ones; ImportOptions::collectivesAtOneRank).
  bool collectivesAtOneRank = false;
  /// Import a model's alike layers as one layer loop (ImportOptions::rollLayers); off:
  /// every layer unrolled from the start (for comparisons: the same module after
  /// kiln-expand-layers).
  bool rollImport = true;
  DeployOptions deploy;       // the deploy options (DeployOptions.def); unset target:
                              // h200 for a config; unset spec: none for a config
  LoweringOptions lowering;
  EmitKind emit = EmitKind::report;
  ReportFormat reportFormat = ReportFormat::text;
  std::string outputPath = "-"; // "-": stdout (a shared object needs a file)
  std::string runtimeLibrary;   // libkiln_runtime.so a shared object links against
  bool verifyEach = false;      // verify after every pass (else once per stage)
  /// Applied to every pass manager the compilation creates (e.g. a tool's timing and
  /// IR-printing flags).
  std::function<mlir::LogicalResult(mlir::PassManager &)> configurePassManager;
  /// Prefix of the driver's own messages ("<tool>: error: ...").
  std::string toolName = "kiln-compile";
};

/// Runs one compilation; diagnostics go to stderr, the output to `outputPath`, written
/// through a temporary file and renamed (an existing file survives a failure; an output
/// naming an input is refused). Returns the exit code: 0 compiled (and the plan fits),
/// 1 bad input or unsupported configuration, 2 compiled but the plan does not fit (the
/// report is still written).
int compile(mlir::MLIRContext &context, const CompileOptions &options);

} // namespace kiln

#endif
