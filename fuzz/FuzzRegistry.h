// The dialect registry the compiler fuzzers share: built once per process (every
// libFuzzer input makes a fresh MLIRContext from it).
#ifndef KILN_FUZZ_FUZZREGISTRY_H
#define KILN_FUZZ_FUZZREGISTRY_H

#include "kiln/InitAll.h"

#include "mlir/IR/DialectRegistry.h"

namespace kiln::fuzz {

inline const mlir::DialectRegistry &registry() {
  static const mlir::DialectRegistry *instance = [] {
    auto *r = new mlir::DialectRegistry;
    kiln::registerAllDialects(*r);
    return r;
  }();
  return *instance;
}

} // namespace kiln::fuzz

#endif
