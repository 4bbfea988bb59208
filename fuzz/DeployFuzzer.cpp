//===- DeployFuzzer.cpp - libFuzzer target: MLIR parser + kiln-deploy -------===//
//
// The input is MLIR text, parsed with every dialect kiln-opt registers
// (kiln::registerAllDialects). A module that parses and verifies goes through the
// deploy pipeline (kiln::buildDeployPipeline), and a module the pipeline accepts is
// printed and parsed again, as kiln-opt does after every pass.
//
// An optional first line sets the deploy options, with kiln-opt's --kiln-deploy="..."
// keys, and can ask for the lowering pipeline after the deploy pipeline:
//
//   // deploy: target=l40s spec=mtp:3 ssm-mode=replay max-batch=8 usable-fraction=0.5
//   // deploy: spec=ngram:4 fill-kv force-kernel=attention=gqa_decode lower
//
// Without it the module's own attributes decide. What the harness bounds, and why:
//  - inputs over 64 KiB (libFuzzer's -max_len keeps them far smaller anyway);
//  - bracket nesting deeper than 200: the parser recurses once per level, and libFuzzer
//    runs on the main thread's 8 MiB stack. kiln-opt and kiln-compile parse on a
//    1 GiB stack instead; test/Tools/deep-nesting.test checks that.
//
// A finding is anything the sanitizers report, a crash, or a deployed module whose
// printed form does not parse again (abort). Diagnostics are expected and dropped.
//
//===----------------------------------------------------------------------===//
#include "kiln/Driver/Pipelines.h"
#include "FuzzRegistry.h"
#include "kiln/InitAll.h"
#include "kiln/Transforms/Pipeline.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace mlir;

namespace {

constexpr size_t kMaxInputBytes = 64 * 1024;
constexpr unsigned kMaxNesting = 200;

/// True when no bracket of any kind nests deeper than `limit`. Counts brackets inside
/// strings and `->` too, so it errs on the side of refusing.
bool nestingWithin(llvm::StringRef text, unsigned limit) {
  unsigned depth = 0;
  for (char c : text) {
    if (c == '(' || c == '[' || c == '{' || c == '<') {
      if (++depth > limit)
        return false;
    } else if ((c == ')' || c == ']' || c == '}' || c == '>') && depth > 0) {
      --depth;
    }
  }
  return true;
}

struct HarnessOptions {
  kiln::DeployOptions deploy;
  bool lower = false;
};

// One deploy option from its "key=value" word, by the field's type (a bare key sets a
// bool; a value that does not read leaves the field as it was).
void assign(std::string &field, llvm::StringRef value) { field = value.str(); }
void assign(std::optional<unsigned> &field, llvm::StringRef value) {
  unsigned result = 0;
  field = value.getAsInteger(10, result) ? std::nullopt : std::optional<unsigned>(result);
}
void assign(int &field, llvm::StringRef value) { (void)value.getAsInteger(10, field); }
void assign(double &field, llvm::StringRef value) { (void)value.getAsDouble(field); }
void assign(uint64_t &field, llvm::StringRef value) { (void)value.getAsInteger(10, field); }
void assign(bool &field, llvm::StringRef value) { field = value.empty() || value == "true"; }
void assign(std::vector<std::string> &field, llvm::StringRef value) {
  field.push_back(value.str());
}

/// Reads the "// deploy: ..." line. Keys and values it does not understand are skipped:
/// the pipeline sees only what a kiln-opt command line could give it.
HarnessOptions readOptions(llvm::StringRef firstLine) {
  HarnessOptions options;
  llvm::StringRef rest = firstLine.trim();
  if (!rest.consume_front("// deploy:"))
    return options;
  llvm::SmallVector<llvm::StringRef> words;
  rest.split(words, ' ', /*MaxSplit=*/-1, /*KeepEmpty=*/false);
  kiln::DeployOptions &d = options.deploy;
  for (llvm::StringRef word : words) {
    auto [key, value] = word.split('=');
    // The keys are kiln-deploy's option names (kiln/Transforms/DeployOptions.def).
#define KILN_DEPLOY_ROW(field, flag)                                                       \
  if (key == flag) {                                                                       \
    assign(d.field, value);                                                                \
    continue;                                                                              \
  }
#define KILN_DEPLOY_STRING(field, flag, category, help) KILN_DEPLOY_ROW(field, flag)
#define KILN_DEPLOY_COUNT(field, flag, category, help) KILN_DEPLOY_ROW(field, flag)
#define KILN_DEPLOY_SCALAR(type, field, flag, default, category, help)                     \
  KILN_DEPLOY_ROW(field, flag)
#define KILN_DEPLOY_LIST(field, flag, category, help) KILN_DEPLOY_ROW(field, flag)
#include "kiln/Transforms/DeployOptions.def"
#undef KILN_DEPLOY_ROW
    if (key == "lower")
      options.lower = true;
  }
  return options;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > kMaxInputBytes)
    return -1;
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  if (!nestingWithin(text, kMaxNesting))
    return -1;
  HarnessOptions options = readOptions(text.take_until([](char c) { return c == '\n'; }));

  // A fresh context per input: nothing carries over from one input to the next, and
  // memory stays bounded over long runs.
  MLIRContext context(kiln::fuzz::registry(), MLIRContext::Threading::DISABLED);
  context.getDiagEngine().registerHandler([](Diagnostic &) { return success(); });

  // MLIR's lexer reads one byte past the end of its buffer, where it expects the NUL
  // that files read by llvm::MemoryBuffer (what the tools parse) end with; libFuzzer's
  // input has none, so parse a copy that does.
  std::string source = text.str();
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(source, &context, "fuzz.mlir");
  if (!module)
    return 0;

  PassManager pm(&context);
  kiln::buildDeployPipeline(pm, options.deploy);
  if (failed(pm.run(*module)))
    return 0;

  // What the pipeline wrote must parse again.
  std::string printed;
  {
    llvm::raw_string_ostream os(printed);
    module->print(os);
  }
  OwningOpRef<ModuleOp> reparsed = parseSourceString<ModuleOp>(printed, &context, "printed.mlir");
  if (!reparsed) {
    std::fprintf(stderr, "kiln-fuzz-deploy: the deployed module does not parse again:\n%s\n",
                 printed.c_str());
    std::abort();
  }

  if (options.lower) {
    PassManager lower(&context);
    kiln::buildLoweringPipeline(lower);
    (void)lower.run(*module);
  }
  return 0;
}
