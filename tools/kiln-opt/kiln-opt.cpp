//===- kiln-opt.cpp - Kiln's dialect and passes in an opt-style driver ----===//
//
// Registers exactly what kiln-compile registers (kiln/InitAll.h), so every pass's
// output, the lowering's included, parses again.
//
//===----------------------------------------------------------------------===//
#include "kiln/InitAll.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  kiln::registerAllDialects(registry);
  kiln::registerAllPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "Kiln optimizer driver\n", registry));
}
