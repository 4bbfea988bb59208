//===- kiln-opt.cpp - Kiln's dialect and passes in an opt-style driver ----===//
//
// Registers exactly what kiln-compile registers (kiln/InitAll.h), so every pass's
// output, the lowering's included, parses again.
//
//===----------------------------------------------------------------------===//
#include "kiln/InitAll.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "llvm/Support/thread.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  kiln::registerAllDialects(registry);
  kiln::registerAllPasses();
  // The MLIR parser recurses once per nesting level: on a large stack, deeply nested
  // (hostile) input is a parse error, not a stack overflow.
  int status = 1;
  llvm::thread worker(std::optional<unsigned>(1u << 30), [&] {
    status = mlir::asMainReturnCode(
        mlir::MlirOptMain(argc, argv, "Kiln optimizer driver\n", registry));
  });
  worker.join();
  return status;
}
