//===- Compile.cpp - one compilation, as a library ------------------------===//
//
// The flow of kiln-compile (include/kiln/Driver/Compile.h): read the model, refuse what
// cannot fit early, import, deploy, then report or lower and emit.
//
//===----------------------------------------------------------------------===//
#include "kiln/Driver/Compile.h"

#include "kiln/Dialect/Kiln/Kiln.h"
#include "kiln/Import/HFConfig.h"
#include "kiln/Target/AOT.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <optional>

using namespace mlir;

namespace kiln {
namespace {

bool hasEntry(ModuleOp module) {
  return llvm::any_of(module.getOps<func::FuncOp>(), [](func::FuncOp fn) {
    return fn->hasAttr(KilnDialect::kEntryAttrName);
  });
}

/// Functions besides the model function that hold kiln ops (an Eagle3 head skeleton, a
/// merged draft model): planned and reported, but not part of the compiled model.
SmallVector<func::FuncOp> sideFunctions(ModuleOp module) {
  SmallVector<func::FuncOp> side;
  for (auto fn : module.getOps<func::FuncOp>()) {
    if (fn->hasAttr(KilnDialect::kEntryAttrName) || fn.isExternal())
      continue;
    bool hasKilnOps = false;
    fn.walk([&](Operation *op) { hasKilnOps |= isa<KilnDialect>(op->getDialect()); });
    if (hasKilnOps)
      side.push_back(fn);
  }
  return side;
}

/// A pass manager of the compilation: the caller's configuration; the IR is verified
/// once at the end of the stage rather than after every pass (the verifier was a fifth
/// of compile time), unless verifyEach.
LogicalResult configure(PassManager &pm, const CompileOptions &o) {
  if (o.configurePassManager && failed(o.configurePassManager(pm)))
    return failure();
  pm.enableVerifier(o.verifyEach);
  return success();
}

/// Runs a stage and verifies its result once.
LogicalResult runStage(PassManager &pm, ModuleOp module, const CompileOptions &o) {
  if (failed(pm.run(module)))
    return failure();
  return o.verifyEach ? success() : verify(module);
}

/// For a whole model, runs the buffer lowering on a copy to learn its activation
/// arena, and records `kiln.device_memory` (weights, caches, activations, workspace,
/// io) on the module for the report.
LogicalResult planDeviceMemory(ModuleOp module, const CompileOptions &o) {
  auto plan = module->getAttrOfType<PlanAttr>(KilnDialect::kPlanAttrName);
  if (!plan || !hasEntry(module))
    return success();
  OwningOpRef<ModuleOp> copy = module.clone();
  for (func::FuncOp fn : sideFunctions(*copy))
    fn.erase();
  PassManager pm(module.getContext(), ModuleOp::getOperationName());
  if (failed(configure(pm, o)))
    return failure();
  buildActivationPlanningPipeline(pm, o.lowering);
  if (failed(runStage(pm, *copy, o)))
    return failure();
  if (Attribute memory = (*copy)->getAttr(KilnDialect::kDeviceMemoryAttrName))
    module->setAttr(KilnDialect::kDeviceMemoryAttrName, memory);
  return success();
}

/// kiln-expand-layers with the tool's pass-manager options (a stage of its own in
/// --mlir-timing); a module without layer loops is left as it is.
LogicalResult expandLayers(ModuleOp module, const CompileOptions &o) {
  // Layer loops sit at the top of a function: an unrolled module skips the stage and
  // its verification of every op.
  bool rolled = llvm::any_of(module.getOps<func::FuncOp>(), [](func::FuncOp fn) {
    return !fn.isExternal() && llvm::any_of(fn.front(), [](Operation &op) {
      return op.hasAttr(KilnDialect::kLayersAttrName);
    });
  });
  if (!rolled)
    return success();
  PassManager pm(module.getContext(), ModuleOp::getOperationName());
  if (failed(configure(pm, o)))
    return failure();
  pm.addPass(createKilnExpandLayers());
  return runStage(pm, module, o);
}

/// The deploy pipeline with the tool's pass-manager options; the pass result.
LogicalResult runDeploy(ModuleOp module, const DeployOptions &options,
                        const CompileOptions &o) {
  PassManager pm(module.getContext(), ModuleOp::getOperationName());
  if (failed(configure(pm, o)))
    return failure();
  buildDeployPipeline(pm, options);
  return runStage(pm, module, o);
}

/// --fill-kv gives the KV pools what the budget leaves, but the activations, workspace,
/// per-step buffers and the CUDA graphs' and communicator's reserves are only known after the
/// activation plan: they are planned on a copy deployed without fill-kv (none of them depends on
/// the KV page count), and their bytes are reserved. nullopt when the copy cannot be planned (the
/// final device check still guards the result).
std::optional<uint64_t> nonCacheDeviceBytes(ModuleOp module, DeployOptions options,
                                            const CompileOptions &o) {
  if (!hasEntry(module))
    return std::nullopt;
  OwningOpRef<ModuleOp> probe = module.clone();
  options.fillKv = false;
  // A copy that does not fit still plans its activations; its diagnostics are not the
  // user's business (the real deploy reports).
  ScopedDiagnosticHandler quiet(module.getContext(), [](Diagnostic &) { return success(); });
  (void)runDeploy(*probe, options, o);
  if (!(*probe)->hasAttr(KilnDialect::kPlanAttrName) || failed(planDeviceMemory(*probe, o)))
    return std::nullopt;
  auto memory = (*probe)->getAttrOfType<DeviceMemoryAttr>(
      KilnDialect::kDeviceMemoryAttrName);
  if (!memory)
    return std::nullopt;
  uint64_t bytes = 0;
  for (uint64_t part : {memory.getActivations(), memory.getWorkspace(), memory.getIo(),
                        memory.getCudaGraphs(), memory.getCollectives()})
    if (__builtin_add_overflow(bytes, part, &bytes))
      return std::nullopt;
  return bytes;
}

/// Layers beyond which a model whose weights alone cannot fit is refused from its
/// config, without its graph or report (the largest published models have ~100 layers).
constexpr int64_t kQuickRefusalLayers = 1024;

/// A config of more than kQuickRefusalLayers layers whose weights alone exceed the
/// target's usable memory is refused before its graph is built: importing and deploying
/// 100k layers takes a minute, for a report of 100k lines and the same verdict. The
/// message is kiln-plan-memory's; the estimate never exceeds the exact weights, so
/// nothing that fits is refused. Smaller models get the full report as before.
std::optional<std::string> weightsCannotFit(StringRef text, StringRef path,
                                            const DeployOptions &flags,
                                            MLIRContext *context) {
  TargetAttr target = TargetAttr::getPreset(
      context, flags.target.empty() ? std::string("h200") : flags.target);
  if (!target || target.getMemoryBytes() == 0)
    return std::nullopt;
  std::optional<ConfigEstimate> estimate;
  {
    // A config that does not read is the import's to report.
    ScopedDiagnosticHandler quiet(context, [](Diagnostic &) { return success(); });
    estimate = estimateHFConfig(text, path, context);
  }
  if (!estimate || estimate->layers <= kQuickRefusalLayers)
    return std::nullopt;
  const uint64_t ranks = flags.tp.value_or(1);
  const uint64_t weights = estimate->weightBytes / ranks;
  const uint64_t usable =
      static_cast<uint64_t>(target.getMemoryBytes() * flags.usableFraction);
  if (weights < usable)
    return std::nullopt;
  char fraction[32];
  std::snprintf(fraction, sizeof(fraction), "%g", flags.usableFraction);
  return "model weights (" + formatBytes(weights) + " per rank, estimated from the " +
         std::to_string(estimate->layers) + "-layer config) exceed the usable " +
         formatBytes(usable) + " of '" + target.getName().str() + "' (" +
         formatBytes(target.getMemoryBytes()) + " x " + std::string(fraction) +
         "); use more tensor-parallel ranks or a larger target";
}

/// Writes the output through a temporary file beside `path`, renamed over it only when
/// everything was written: a failure leaves an existing file as it was. "-" is stdout.
LogicalResult writeOutput(StringRef path, StringRef tool,
                          llvm::function_ref<LogicalResult(llvm::raw_ostream &)> write) {
  if (path == "-")
    return write(llvm::outs());
  SmallString<128> temporary;
  int fd = -1;
  if (std::error_code ec = llvm::sys::fs::createUniqueFile(path + ".kiln-tmp-%%%%%%", fd,
                                                           temporary)) {
    llvm::errs() << tool << ": error: cannot create a file beside '" << path
                 << "': " << ec.message() << "\n";
    return failure();
  }
  llvm::scope_exit removeTemporary([&] { llvm::sys::fs::remove(temporary); });
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    if (failed(write(os)))
      return failure();
    os.flush();
    if (os.has_error()) {
      llvm::errs() << tool << ": error: writing '" << path
                   << "' failed: " << os.error().message() << "\n";
      os.clear_error();
      return failure();
    }
  }
  if (std::error_code ec = llvm::sys::fs::rename(temporary, path)) {
    llvm::errs() << tool << ": error: cannot replace '" << path << "': " << ec.message()
                 << "\n";
    return failure();
  }
  return success();
}

/// True when `output` names the same file as one of the inputs (also through a hard
/// link), which writing would destroy.
bool overwritesInput(StringRef output, ArrayRef<std::string> inputs) {
  if (output == "-")
    return false;
  for (const std::string &input : inputs) {
    bool same = false;
    if (!input.empty() && !llvm::sys::fs::equivalent(input, output, same) && same)
      return true;
  }
  return false;
}

/// "none" or "<mode>:<N>" with N >= 1.
bool validSpec(llvm::StringRef spec, std::string &mode) {
  if (spec == "none") {
    mode = "none";
    return true;
  }
  auto [name, count] = spec.split(':');
  unsigned n = 0;
  if (count.empty() || count.getAsInteger(10, n) || n == 0)
    return false;
  mode = name.str();
  return name == "mtp" || name == "eagle3" || name == "draft" || name == "ngram";
}

/// "file:line:col: " instead of the loc(...) syntax; the layer name of a NameLoc goes
/// after the severity.
std::string describeLocation(Location loc, std::string &layerName) {
  if (auto name = dyn_cast<NameLoc>(loc)) {
    layerName = name.getName().getValue().str();
    // A layer loop's body (model.layers.{}) speaks for its first layer, as its ops'
    // layer attributes do; the importer's loops start at layer 0.
    if (size_t hole = layerName.find("{}"); hole != std::string::npos)
      layerName.replace(hole, 2, "0");
    loc = name.getChildLoc();
  }
  std::string out;
  llvm::raw_string_ostream os(out);
  if (auto file = dyn_cast<FileLineColLoc>(loc))
    os << file.getFilename().getValue() << ":" << file.getLine() << ":" << file.getColumn()
       << ": ";
  else if (!isa<UnknownLoc>(loc))
    os << loc << ": ";
  return out;
}

bool hasDraftLayers(ModuleOp module, DraftKind kind) {
  bool found = false;
  module.walk([&](Operation *op) {
    if (auto draft = op->getAttrOfType<DraftKindAttr>("draft"))
      if (draft.getValue() == kind)
        found = true;
  });
  return found;
}
} // namespace

int compile(MLIRContext &context, const CompileOptions &o) {
  // Validate options before doing any work.
  auto fail = [&](const llvm::Twine &message, int exitCode = 1) {
    llvm::errs() << o.toolName << ": error: " << message << "\n";
    return exitCode;
  };
  const DeployOptions &flags = o.deploy;
  const std::string &specName = flags.spec, &targetName = flags.target;
  std::string specMode;
  if (!specName.empty() && !validSpec(specName, specMode))
    return fail("invalid --spec '" + specName +
                "'; expected none, mtp:N, eagle3:N, draft:N or ngram:N (N >= 1)");
  if (!targetName.empty() && !TargetAttr::getPreset(&context, targetName)) {
    std::string presets;
    for (const TargetPreset &preset : targetPresets())
      presets += (presets.empty() ? "" : ", ") + preset.name.str();
    return fail("unknown target '" + targetName + "'; expected a preset (" + presets +
                ") or sm_XY with a supported SM");
  }

  const std::string &path = o.modelPath, &draftModelPath = o.draftModelPath;
  const EmitKind emitKind = o.emit;
  if (overwritesInput(o.outputPath, {path, draftModelPath}))
    return fail("-o '" + o.outputPath + "' is an input of this compilation; refusing to "
                "overwrite it");
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFileOrSTDIN(path, /*IsText=*/true);
  if (!buffer)
    return fail("cannot read '" + path + "': " + buffer.getError().message());

  // Diagnostics go to stderr, with the source line where the location is known.
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(std::move(*buffer), llvm::SMLoc());
  llvm::StringRef text = sourceMgr.getMemoryBuffer(sourceMgr.getMainFileID())->getBuffer();

  OwningOpRef<ModuleOp> module;
  bool isMlir = llvm::StringRef(path).ends_with(".mlir");
  {
    // Input errors show the offending source line.
    SourceMgrDiagnosticHandler inputHandler(sourceMgr, &context, llvm::errs());
    if (isMlir) {
      module = parseSourceFile<ModuleOp>(sourceMgr, ParserConfig(&context));
    } else {
      if (!o.importOnly)
        if (std::optional<std::string> tooBig = weightsCannotFit(text, path, flags, &context))
          return fail(*tooBig, 2);
      ImportOptions importOptions;
      importOptions.eagle3Head = specMode == "eagle3";
      // One rank's graph at --tp N; with a separate draft model the target stays whole
      // (the draft's graph would be the whole model's, and one module divides alike).
      if (draftModelPath.empty())
        importOptions.tp = static_cast<unsigned>(flags.tp.value_or(1));
      importOptions.collectivesAtOneRank = o.collectivesAtOneRank;
      // A draft model's merge renames and renumbers the target's layers one by one.
      importOptions.rollLayers = o.rollImport && draftModelPath.empty();
      if (specMode == "mtp")
        llvm::StringRef(specName).substr(specName.find(':') + 1)
            .getAsInteger(10, importOptions.mtpDrafts);
      module = importHFConfig(text, path, &context, importOptions);
    }
  }
  if (!module)
    return 1;
  if (!draftModelPath.empty()) {
    if (specMode != "draft")
      return fail("--draft-model needs a two-model spec, --spec draft:N");
    llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> draftBuffer =
        llvm::MemoryBuffer::getFile(draftModelPath, /*IsText=*/true);
    if (!draftBuffer)
      return fail("cannot read '" + draftModelPath + "': " +
                  draftBuffer.getError().message());
    unsigned draftId = sourceMgr.AddNewSourceBuffer(std::move(*draftBuffer), llvm::SMLoc());
    SourceMgrDiagnosticHandler draftHandler(sourceMgr, &context, llvm::errs());
    ImportOptions draftOptions;
    draftOptions.rollLayers = false;
    OwningOpRef<ModuleOp> draft = importHFConfig(sourceMgr.getMemoryBuffer(draftId)->getBuffer(),
                                                 draftModelPath, &context, draftOptions);
    if (!draft || failed(attachDraftModel(*module, std::move(draft))))
      return 1;
  }
  // Later diagnostics (passes) are about the model, not a line of the input.
  ScopedDiagnosticHandler passHandler(&context, [](Diagnostic &diag) {
    auto print = [](Diagnostic &d) {
      std::string layerName;
      llvm::errs() << describeLocation(d.getLocation(), layerName);
      switch (d.getSeverity()) {
      case DiagnosticSeverity::Error: llvm::errs() << "error: "; break;
      case DiagnosticSeverity::Warning: llvm::errs() << "warning: "; break;
      case DiagnosticSeverity::Remark: llvm::errs() << "remark: "; break;
      case DiagnosticSeverity::Note: llvm::errs() << "note: "; break;
      }
      if (!layerName.empty())
        llvm::errs() << layerName << ": ";
      llvm::errs() << d << "\n";
    };
    print(diag);
    for (Diagnostic &note : diag.getNotes())
      print(note);
    return success();
  });

  if (specMode == "mtp" && !hasDraftLayers(*module, DraftKind::mtp)) {
    emitError(module->getLoc())
        << "--spec " << specName
        << " asks for MTP, but the model has no MTP layers (num_nextn_predict_layers)";
    return 1;
  }

  const bool lowers = emitKind == EmitKind::llvm || emitKind == EmitKind::so ||
                     emitKind == EmitKind::lowered;
  bool ranPipeline = false;
  if (!o.importOnly) {
    DeployOptions options = flags;
    if (options.target.empty() && !(*module)->hasAttr(KilnDialect::kTargetAttrName))
      options.target = "h200";
    if (options.spec.empty() && !isMlir)
      options.spec = "none";
    if (options.fillKv)
      if (std::optional<uint64_t> nonCache = nonCacheDeviceBytes(*module, options, o))
        if (__builtin_add_overflow(options.reserveBytes, *nonCache, &options.reserveBytes))
          return fail("--reserve-bytes plus the activations overflow 64 bits");

    LogicalResult result = runDeploy(*module, options, o);
    auto plan = (*module)->getAttrOfType<PlanAttr>(KilnDialect::kPlanAttrName);
    bool doesNotFit = plan && !plan.getFits();
    if (failed(result) && !doesNotFit)
      return 1;
    ranPipeline = true;
    // The lowering plans the activations of the module itself; a report (or the
    // deployed module) gets them planned on a copy, with the layer loops as the
    // lowering takes them, so its numbers are the shared object's.
    if (succeeded(result) && !lowers && failed(planDeviceMemory(*module, o)))
      return 1;
    // The deployed module shows every layer. The report lists a loop's layers itself,
    // and the lowering takes the loops as loops (expanding those it cannot take).
    if (emitKind == EmitKind::mlir && failed(expandLayers(*module, o)))
      return 1;
  }

  if (lowers) {
    auto plan = (*module)->getAttrOfType<PlanAttr>(KilnDialect::kPlanAttrName);
    if (!ranPipeline || !plan || !plan.getFits())
      return fail("--emit=" + std::string(emitKind == EmitKind::so      ? "so"
                                          : emitKind == EmitKind::llvm ? "llvm"
                                                                       : "lowered") +
                  " needs a compiled model that fits; see the report (--emit=report)");
    if (!hasEntry(*module))
      return fail("--emit=so|llvm|lowered needs a whole model (a function marked kiln.entry); "
                  "this module has only cache ops");
    // A whole graph planned per rank would need the whole model on one GPU (one rank's
    // graph lowers: kiln_model_load_rank loads each rank's weight blocks).
    if (ModuleConfig config = getModuleConfig(*module);
        config.runtime.getTp() > 1 && !(config.model && config.model.getTpRanks() > 1))
      return fail("--emit=so|llvm|lowered runs the model on one GPU: --tp " +
                  std::to_string(config.runtime.getTp()) +
                  " plans and reports tensor parallelism of this model, but it has no "
                  "per-rank graph yet (gpt-oss, Qwen3-Next, an Eagle3 head, DeepSeek's MTP "
                  "module, or a bias on a row-parallel projection: o_proj, down_proj, "
                  "out_proj); lower with --tp 1");
    if (SmallVector<func::FuncOp> side = sideFunctions(*module); !side.empty())
      return fail("--emit=so|llvm|lowered compiles the model function only, but '@" +
                  side.front().getSymName() +
                  "' holds kiln ops too (a draft model compiles to its own shared object "
                  "for kiln-run --draft-model; Eagle3 heads are not lowered yet)");
    PassManager lowering(&context, ModuleOp::getOperationName());
    if (failed(configure(lowering, o)))
      return 1;
    if (emitKind == EmitKind::lowered)
      buildBufferLoweringPipeline(lowering, o.lowering);
    else
      buildLoweringPipeline(lowering, o.lowering);
    if (failed(runStage(lowering, *module, o)))
      return 1;
    if (emitKind == EmitKind::so) {
      SharedObjectOptions soOptions;
      soOptions.outputPath = o.outputPath;
      soOptions.runtimeLibrary = o.runtimeLibrary;
      return failed(emitSharedObject(*module, soOptions)) ? 1 : 0;
    }
  }

  LogicalResult written = writeOutput(o.outputPath, o.toolName, [&](llvm::raw_ostream &os) {
    if (emitKind == EmitKind::mlir || emitKind == EmitKind::lowered) {
      module->print(os);
      os << "\n";
      return success();
    }
    if (emitKind == EmitKind::llvm)
      return emitLLVMIR(*module, os);
    printReport(*module, o.reportFormat, os);
    return success();
  });
  if (failed(written))
    return 1;

  auto plan = (*module)->getAttrOfType<PlanAttr>(KilnDialect::kPlanAttrName);
  if (plan && !plan.getFits()) {
    llvm::errs() << o.toolName
                 << ": compiled, but the plan does not fit the budget (exit code 2); the "
                    "report lists the largest consumers\n";
    return 2;
  }
  return 0;
}

} // namespace kiln
