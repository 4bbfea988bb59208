//===- HFConfigFuzzer.cpp - libFuzzer target: config.json importer ---------===//
//
// The input is a Hugging Face config.json. What kiln-compile does with one, without the
// command line and the output:
//   1. kiln::importHFConfig, and when that imports, again with an Eagle3 head;
//   2. the deploy pipeline for the h200 (no speculation; eagle3:3 for the Eagle3 head);
//   3. for a whole model that fits (without the Eagle3 head): bufferization, entry
//      binding and the activation plan (kiln::buildActivationPlanningPipeline);
//   4. the report, as text and JSON, into a string.
//
// Bounded by the harness, not the importer: configs of more than 128 layers (the
// importer accepts up to 100,000; test/Import covers the limit and the time is linear,
// but a run on a 100,000-layer graph takes seconds under ASan and would slow the
// campaign to a crawl). The harness reads num_hidden_layers itself, with llvm::json,
// only after checking the nesting the way the importer does, so it never recurses
// deeper than the importer would.
//
// A finding is anything the sanitizers report or a crash. Diagnostics are expected
// and dropped.
//
//===----------------------------------------------------------------------===//
#include "kiln/Dialect/Kiln/Kiln.h"
#include "kiln/Driver/Pipelines.h"
#include "kiln/Import/HFConfig.h"
#include "FuzzRegistry.h"
#include "kiln/InitAll.h"
#include "kiln/Report/Report.h"
#include "kiln/Transforms/Pipeline.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <string>

using namespace mlir;

namespace {

constexpr size_t kMaxInputBytes = 64 * 1024;
constexpr int64_t kMaxLayers = 128;

/// True when the config names more layers than the harness runs (see above).
bool tooManyLayers(llvm::StringRef text) {
  if (kiln::findExcessiveJsonNesting(text, kiln::kMaxJsonNesting))
    return false; // the importer refuses it before parsing
  llvm::Expected<llvm::json::Value> value = llvm::json::parse(text);
  if (!value) {
    llvm::consumeError(value.takeError());
    return false;
  }
  const llvm::json::Object *root = value->getAsObject();
  if (!root)
    return false;
  for (llvm::StringRef key : {"num_hidden_layers", "num_nextn_predict_layers"})
    if (std::optional<int64_t> n = root->getInteger(key); n && *n > kMaxLayers)
      return true;
  if (std::optional<llvm::StringRef> pattern = root->getString("hybrid_override_pattern");
      pattern && static_cast<int64_t>(pattern->size()) > kMaxLayers)
    return true;
  return false;
}

bool hasEntry(ModuleOp module) {
  bool found = false;
  module.walk([&](Operation *op) {
    if (op->hasAttr(kiln::KilnDialect::kEntryAttrName))
      found = true;
  });
  return found;
}

/// Returns whether the config imported.
bool compile(llvm::StringRef text, bool eagle3) {
  MLIRContext context(kiln::fuzz::registry(), MLIRContext::Threading::DISABLED);
  context.getDiagEngine().registerHandler([](Diagnostic &) { return success(); });
  kiln::ImportOptions importOptions;
  importOptions.eagle3Head = eagle3;
  OwningOpRef<ModuleOp> module = kiln::importHFConfig(text, "fuzz.json", &context, importOptions);
  if (!module)
    return false;

  kiln::DeployOptions deploy;
  deploy.target = "h200";
  deploy.spec = eagle3 ? "eagle3:3" : "none";
  PassManager pm(&context);
  kiln::buildDeployPipeline(pm, deploy);
  // As kiln-compile's report does: the activation plan of the model function, on a
  // copy, whose device memory the report then shows (the Eagle3 head is a side
  // function kiln-compile leaves out; the harness plans only models without one).
  if (succeeded(pm.run(*module)) && !eagle3 && hasEntry(*module)) {
    OwningOpRef<ModuleOp> copy = module->clone();
    PassManager activations(&context);
    kiln::buildActivationPlanningPipeline(activations);
    if (succeeded(activations.run(*copy)))
      if (Attribute memory = (*copy)->getAttr(kiln::KilnDialect::kDeviceMemoryAttrName))
        (*module)->setAttr(kiln::KilnDialect::kDeviceMemoryAttrName, memory);
  }

  std::string report;
  llvm::raw_string_ostream os(report);
  kiln::ReportData data = kiln::collectReport(*module);
  kiln::printReport(data, kiln::ReportFormat::text, os);
  kiln::printReport(data, kiln::ReportFormat::json, os);
  return true;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > kMaxInputBytes)
    return -1;
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  if (tooManyLayers(text))
    return -1;
  if (compile(text, /*eagle3=*/false))
    compile(text, /*eagle3=*/true);
  return 0;
}
