// kiln.rope_pair (made by kiln-pair-ropes on buffers) round-trips in custom syntax,
// generic form and bytecode.
// RUN: kiln-opt %s | kiln-opt | FileCheck %s
// RUN: kiln-opt %s --mlir-print-op-generic | kiln-opt | FileCheck %s
// RUN: kiln-opt %s --emit-bytecode | kiln-opt | FileCheck %s

// CHECK-LABEL: func.func @pair
// CHECK: kiln.rope_pair ins(%{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} : memref<?x8x64xbf16>, memref<?x2x64xbf16>, memref<?xi32>) outs(%{{[^ ]*}}, %{{[^ ]*}} : memref<?x8x64xbf16>, memref<?x2x64xbf16>)
// CHECK-SAME: rope = #kiln.rope<type = llama3
// CHECK-SAME: rotary_dim = 32
func.func @pair(%q: memref<?x8x64xbf16>, %k: memref<?x2x64xbf16>, %pos: memref<?xi32>,
                %qo: memref<?x8x64xbf16>, %ko: memref<?x2x64xbf16>) {
  kiln.rope_pair ins(%q, %k, %pos : memref<?x8x64xbf16>, memref<?x2x64xbf16>, memref<?xi32>) outs(%qo, %ko : memref<?x8x64xbf16>, memref<?x2x64xbf16>) {rope = #kiln.rope<type = llama3, theta = 500000.0, factor = 8.0, low = 1.0, high = 4.0, original_max_position = 8192>, rotary_dim = 32 : i64}
  return
}
