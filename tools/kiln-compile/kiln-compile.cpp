//===- kiln-compile.cpp - import a model, deploy it, report --------------===//
//
//   kiln-compile [MODEL] [options]
//
// MODEL is a Hugging Face config.json or a .mlir file (default: the bundled
// NVIDIA-Nemotron-Nano-9B-v2 config, on h200, without speculation). Runs the import,
// the deploy pipeline (`buildDeployPipeline`) and prints the report.
//
// Exit codes: 0 compiled and fits; 1 bad input or unsupported configuration (message
// on stderr, no report); 2 compiled but does not fit (report printed).
// See docs/kiln-compile.md.
//
//===----------------------------------------------------------------------===//
#include "kiln/Driver/Compile.h"
#include "kiln/Driver/DeployCommandLine.h"
#include "kiln/InitAll.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Support/thread.h"

using namespace mlir;
namespace cl = llvm::cl;

namespace {
using kiln::EmitKind;

cl::OptionCategory importCategory("Import");
cl::OptionCategory targetCategory("Target");
cl::OptionCategory specCategory("Speculative decoding");
cl::OptionCategory memoryCategory("Memory");
cl::OptionCategory outputCategory("Output");

cl::opt<std::string> modelPath(cl::Positional, cl::desc("[MODEL: config.json or .mlir]"),
                               cl::init(""), cl::cat(importCategory));
// The deploy flags (--target, --spec, --max-batch, ...): kiln/Transforms/DeployOptions.def.
kiln::DeployCommandLine deployFlags({targetCategory, specCategory, memoryCategory});
cl::opt<std::string> draftModelPath(
    "draft-model",
    cl::desc("config.json of the draft model of a two-model setup (--spec draft:N); its "
             "layers become draft layers of the compiled module"),
    cl::init(""), cl::cat(importCategory));
cl::opt<std::string> runtimeLibrary(
    "runtime-lib", cl::desc("libkiln_runtime.so to link a shared object against"),
#ifdef KILN_RUNTIME_LIBRARY
    cl::init(KILN_RUNTIME_LIBRARY),
#else
    cl::init(""),
#endif
    cl::cat(outputCategory));
cl::opt<kiln::ReportFormat> reportFormat(
    "report", cl::desc("report format"), cl::init(kiln::ReportFormat::text),
    cl::values(clEnumValN(kiln::ReportFormat::text, "text", "readable tables"),
               clEnumValN(kiln::ReportFormat::json, "json", "JSON (docs/report-schema.md)"),
               clEnumValN(kiln::ReportFormat::html, "html", "self-contained HTML page")),
    cl::cat(outputCategory));
cl::opt<EmitKind> emitKind(
    "emit", cl::desc("what to write"), cl::init(EmitKind::report),
    cl::values(clEnumValN(EmitKind::report, "report", "the deploy report"),
               clEnumValN(EmitKind::mlir, "mlir", "the deployed module (tensors, kiln ops)"),
               clEnumValN(EmitKind::lowered, "lowered",
                          "the module on buffers with runtime calls (before LLVM)"),
               clEnumValN(EmitKind::llvm, "llvm", "LLVM IR of the lowered model"),
               clEnumValN(EmitKind::so, "so", "a shared object (needs -o) linked against "
                                              "libkiln_runtime.so")),
    cl::cat(outputCategory));
cl::opt<bool> noRollLayers(
    "no-roll-layers",
    cl::desc("keep the step's layers unrolled (kiln-roll-layers off; for tests and "
             "comparisons: the calls are the same)"),
    cl::init(false), cl::Hidden, cl::cat(outputCategory));
cl::opt<bool> noFuseResidualNorm(
    "no-fuse-residual-norm",
    cl::desc("keep each residual add and the norm of its sum apart (kiln-fuse-residual-norm "
             "off; for comparisons: the bits are the same)"),
    cl::init(false), cl::Hidden, cl::cat(outputCategory));
cl::opt<bool> expandLayers(
    "expand-layers",
    cl::desc("copy a rolled import's layer loop once a layer before the lowering "
             "(kiln-expand-layers) rather than lowering it as a loop (for comparisons: "
             "the calls are the same)"),
    cl::init(false), cl::Hidden, cl::cat(outputCategory));
cl::opt<bool> pairLinears(
    "pair-linears",
    cl::desc("merge a layer's k and v projections (and its gate and up projections) into "
             "one strided-batched GEMM each (kiln-pair-linears; default on, "
             "--pair-linears=false keeps them apart)"),
    cl::init(true), cl::Hidden, cl::cat(outputCategory));
cl::opt<bool> pairRopes(
    "pair-ropes",
    cl::desc("rotate a layer's q and k in one launch (kiln-pair-ropes; default off until "
             "measured on a GPU)"),
    cl::init(false), cl::Hidden, cl::cat(outputCategory));
cl::opt<bool> fusePairSwiglu(
    "fuse-pair-swiglu",
    cl::desc("merge each gated MLP's gate and up projections and its SwiGLU, the skinny "
             "GEMM's epilogue at batch 1 (kiln-fuse-pair-swiglu; default off until measured "
             "on a GPU)"),
    cl::init(false), cl::Hidden, cl::cat(outputCategory));
cl::opt<bool> collectivesAtOneRank(
    "tp-collectives",
    cl::desc("build a dense model's per-rank graph even at --tp 1 (its all-reduces in place; "
             "for checking a one-rank NCCL run against a plain one)"),
    cl::init(false), cl::Hidden, cl::cat(importCategory));
cl::opt<unsigned> collectiveWorkspaceMib(
    "collective-workspace-mib",
    cl::desc("device memory (MiB) a tensor-parallel rank's plan reserves for its NCCL "
             "communicator (default 584: a one-rank communicator of PyTorch 2.11's NCCL on "
             "an H100); loading refuses a communicator that takes more"),
    cl::init(584), cl::cat(importCategory));
cl::opt<bool>
    noRollImport("no-roll-import",
                 cl::desc("import every layer unrolled instead of one layer loop (for tests and "
                          "comparisons: the deployed module and the calls are the same)"),
                 cl::init(false), cl::Hidden, cl::cat(importCategory));
cl::opt<bool> importOnly("import-only",
                         cl::desc("skip the deploy pipeline (emit/report the imported module)"),
                         cl::init(false), cl::cat(importCategory));
cl::opt<std::string> outputFile("o", cl::desc("output file"), cl::value_desc("filename"),
                                cl::init("-"), cl::cat(outputCategory));

std::string defaultModel() {
  return std::string(KILN_SOURCE_DIR) + "/examples/models/nvidia-nemotron-nano-9b-v2.json";
}

cl::opt<bool> verifyEach("verify-each",
                         cl::desc("verify the IR after every pass (slower; each stage's "
                                  "result is verified either way)"),
                         cl::init(false), cl::cat(outputCategory));

} // namespace

int compile(int argc, char **argv);

/// The MLIR parser and the passes recurse with the input's nesting; a large stack keeps
/// deeply nested (hostile) input a diagnostic instead of a stack overflow.
int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  int status = 1;
  llvm::thread worker(std::optional<unsigned>(1u << 30), [&] { status = compile(argc, argv); });
  worker.join();
  return status;
}

/// The flags, as one kiln::CompileOptions; the compilation is kiln::compile.
int compile(int argc, char **argv) {
  registerMLIRContextCLOptions();
  registerPassManagerCLOptions();
  registerAsmPrinterCLOptions();
  registerDefaultTimingManagerCLOptions();
  // --help shows Kiln's options only; MLIR's stay usable but hidden.
  cl::HideUnrelatedOptions({&importCategory, &targetCategory, &specCategory, &memoryCategory,
                            &outputCategory});
  cl::ParseCommandLineOptions(
      argc, argv,
      "kiln-compile: plan caches and kernels of an LLM for a GPU\n\n"
      "Exit codes: 0 compiled and fits; 1 bad input or unsupported configuration;\n"
      "2 compiled but does not fit (report printed).\n");
  if (std::string problem = deployFlags.validate(); !problem.empty()) {
    llvm::errs() << "kiln-compile: error: " << problem << "\n";
    return 1;
  }

  DialectRegistry registry;
  kiln::registerAllDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  // Every pass of the pipeline is a module pass, so a thread pool buys only a parallel
  // verifier, while every attribute and type lookup pays for the uniquer's locks: a
  // 16k-layer report takes 10.5 s threaded and 9.95 s not on an idle 2-core machine,
  // 20.6 and 13.2 s while another build runs. Threads stay available with
  // --mlir-disable-threading=false.
  if (auto *flag = cl::getRegisteredOptions().lookup("mlir-disable-threading");
      !flag || !flag->getNumOccurrences())
    context.disableMultithreading();
  // Dumping the whole module with every pass error buries the message; keep it opt-in.
  if (auto *flag = cl::getRegisteredOptions().lookup("mlir-print-op-on-diagnostic");
      !flag || !flag->getNumOccurrences())
    context.printOpOnDiagnostic(false);

  kiln::CompileOptions options;
  options.modelPath = modelPath.empty() ? defaultModel() : modelPath.getValue();
  options.draftModelPath = draftModelPath;
  options.importOnly = importOnly;
  options.collectivesAtOneRank = collectivesAtOneRank;
  options.rollImport = !noRollImport;
  options.deploy = deployFlags.get();
  options.lowering.rollLayers = !noRollLayers;
  options.lowering.fuseResidualNorm = !noFuseResidualNorm;
  options.lowering.pairLinears = pairLinears;
  options.lowering.pairRopes = pairRopes;
  options.lowering.fusePairSwiglu = fusePairSwiglu;
  options.lowering.collectiveBytes = uint64_t(collectiveWorkspaceMib) << 20;
  options.lowering.expandLayers = expandLayers;
  options.emit = emitKind;
  options.reportFormat = reportFormat;
  options.outputPath = outputFile;
  options.runtimeLibrary = runtimeLibrary;
  options.verifyEach = verifyEach;
  options.configurePassManager = [](PassManager &pm) -> LogicalResult {
    if (failed(applyPassManagerCLOptions(pm)))
      return failure();
    applyDefaultTimingPassManagerCLOptions(pm);
    return success();
  };
  return kiln::compile(context, options);
}
