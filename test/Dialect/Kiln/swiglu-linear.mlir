// kiln.swiglu_linear (made by kiln-fuse-swiglu-linear on buffers) round-trips in custom
// syntax, generic form and bytecode.
// RUN: kiln-opt %s | kiln-opt | FileCheck %s
// RUN: kiln-opt %s --mlir-print-op-generic | kiln-opt | FileCheck %s
// RUN: kiln-opt %s --emit-bytecode | kiln-opt | FileCheck %s

// CHECK-LABEL: func.func @down
// CHECK: kiln.swiglu_linear ins(%{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} : memref<?x128xbf16>, memref<?x128xbf16>, memref<32x128xbf16>) outs(%{{[^ ]*}}, %{{[^ ]*}} : memref<?x128xbf16>, memref<?x32xbf16>)
func.func @down(%gate: memref<?x128xbf16>, %up: memref<?x128xbf16>, %w: memref<32x128xbf16>,
                %h: memref<?x128xbf16>, %out: memref<?x32xbf16>) {
  kiln.swiglu_linear ins(%gate, %up, %w : memref<?x128xbf16>, memref<?x128xbf16>, memref<32x128xbf16>) outs(%h, %out : memref<?x128xbf16>, memref<?x32xbf16>)
  return
}
