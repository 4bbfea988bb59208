// kiln.linear_pair_swiglu (made by kiln-fuse-pair-swiglu on buffers) round-trips in
// custom syntax, generic form and bytecode.
// RUN: kiln-opt %s | kiln-opt | FileCheck %s
// RUN: kiln-opt %s --mlir-print-op-generic | kiln-opt | FileCheck %s
// RUN: kiln-opt %s --emit-bytecode | kiln-opt | FileCheck %s

// CHECK-LABEL: func.func @gate_up
// CHECK: kiln.linear_pair_swiglu ins(%{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} : memref<?x64xbf16>, memref<128x64xbf16>, memref<128x64xbf16>) outs(%{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} : memref<?x128xbf16>, memref<?x128xbf16>, memref<?x128xbf16>)
func.func @gate_up(%x: memref<?x64xbf16>, %wg: memref<128x64xbf16>, %wu: memref<128x64xbf16>,
                   %g: memref<?x128xbf16>, %u: memref<?x128xbf16>, %h: memref<?x128xbf16>) {
  kiln.linear_pair_swiglu ins(%x, %wg, %wu : memref<?x64xbf16>, memref<128x64xbf16>, memref<128x64xbf16>) outs(%g, %u, %h : memref<?x128xbf16>, memref<?x128xbf16>, memref<?x128xbf16>)
  return
}
