// No pass crashes on IR without configuration attributes; each says what is missing.
// RUN: not kiln-opt %s -kiln-insert-caches 2>&1 | FileCheck %s --check-prefix=INSERT
// RUN: not kiln-opt %s -kiln-plan-memory 2>&1 | FileCheck %s --check-prefix=PLAN
// RUN: not kiln-opt %s -kiln-select-kernels 2>&1 | FileCheck %s --check-prefix=SELECT
// RUN: kiln-opt %s -kiln-drop-speculative-resources -kiln-verify-config | FileCheck %s --check-prefix=OK

// INSERT: error: kiln-insert-caches needs a 'kiln.runtime' module attribute
// PLAN: error: kiln-plan-memory needs a 'kiln.runtime' module attribute
// SELECT: error: kiln-select-kernels needs a 'kiln.target' module attribute
// OK: kiln.attention layer 0
// kiln-deploy on this IR: see insert-caches-dialects.mlir.
module {
  func.func @f(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>) -> tensor<?x32x128xbf16> {
    %0 = kiln.attention layer 0 %q, %k, %k {num_heads = 32, num_kv_heads = 8, head_dim = 128}
      : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
    return %0 : tensor<?x32x128xbf16>
  }
}
