// kiln.linear_pair (made by kiln-pair-linears on buffers) round-trips in custom syntax,
// generic form and bytecode.
// RUN: kiln-opt %s | kiln-opt | FileCheck %s
// RUN: kiln-opt %s --mlir-print-op-generic | kiln-opt | FileCheck %s
// RUN: kiln-opt %s --emit-bytecode | kiln-opt | FileCheck %s

// CHECK-LABEL: func.func @pair
// CHECK: kiln.linear_pair ins(%{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} : memref<?x64xbf16>, memref<32x64xbf16>, memref<32x64xbf16>) outs(%{{[^ ]*}}, %{{[^ ]*}} : memref<?x32xbf16>, memref<?x32xbf16>)
func.func @pair(%x: memref<?x64xbf16>, %w0: memref<32x64xbf16>, %w1: memref<32x64xbf16>,
                %o0: memref<?x32xbf16>, %o1: memref<?x32xbf16>) {
  kiln.linear_pair ins(%x, %w0, %w1 : memref<?x64xbf16>, memref<32x64xbf16>, memref<32x64xbf16>) outs(%o0, %o1 : memref<?x32xbf16>, memref<?x32xbf16>)
  return
}
