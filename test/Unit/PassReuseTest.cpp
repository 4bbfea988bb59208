// One pass manager, many modules: a pass instance must carry nothing from one run to the
// next (issue 12: kiln-plan-memory kept "the weights exceed the budget" across runs, so
// on modules B, A, B where only A's weights overflow, the second B failed).
#include "kiln/InitAll.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <string>

using namespace mlir;

namespace {

// A module whose declared weights are `weightBytes` on an H200, with one KV resource.
std::string moduleWithWeights(const std::string &weightBytes) {
  return "module attributes {kiln.target = #kiln.target<\"h200\">, "
         "kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 1024, kv_dtype = bf16>, "
         "kiln.model = #kiln.model<name = \"m\", model_type = \"llama\", num_layers = 1, "
         "dtype = bf16, weight_bytes = " +
         weightBytes +
         ">} {\n"
         "  func.func @f() {\n"
         "    %0 = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 : !kiln.cache<kv>\n"
         "    return\n"
         "  }\n"
         "}\n";
}

TEST(PassReuse, PlanMemoryForgetsTheLastModulesWeights) {
  DialectRegistry registry;
  kiln::registerAllDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  // Diagnostics of the overflowing module are expected; keep them off stderr.
  ScopedDiagnosticHandler quiet(&context, [](Diagnostic &) { return success(); });
  PassManager pm(&context);
  pm.addPass(kiln::createKilnPlanMemory());
  const std::string fits = moduleWithWeights("1000000");
  const std::string overflows = moduleWithWeights("1000000000000000");
  for (const std::string *text : {&fits, &overflows, &fits}) {
    OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(*text, &context);
    ASSERT_TRUE(module);
    const bool ok = succeeded(pm.run(*module));
    EXPECT_EQ(ok, text == &fits) << (text == &fits ? "a module that fits failed"
                                                   : "overflowing weights passed");
  }
}

} // namespace
