// kiln-pair-linears: two bias-free projections of one input with weights of one shape,
// with only memory-effect-free ops between them, become one kiln.linear_pair where the
// second was. Left alone: a projection with a bias, other inputs, other weight shapes,
// an op with memory effects between the two, an f32 (router) output.
// RUN: kiln-opt %s -split-input-file --kiln-pair-linears | FileCheck %s

// A layer's k and v (same shape) pair; q (another shape) stays; views between are pure.
// CHECK-LABEL: func.func @kv
// CHECK-SAME: (%[[X:[^:]*]]: memref<?x64xbf16>, %[[Q:[^:]*]]: memref<64x64xbf16>, %[[K:[^:]*]]: memref<32x64xbf16>, %[[V:[^:]*]]: memref<32x64xbf16>, %[[QO:[^:]*]]: memref<?x64xbf16>, %[[KO:[^:]*]]: memref<?x32xbf16>, %[[VO:[^:]*]]: memref<?x32xbf16>)
// CHECK: kiln.linear ins(%[[X]], %[[Q]] : memref<?x64xbf16>, memref<64x64xbf16>) outs(%[[QO]] :
// CHECK-NEXT: memref.cast
// CHECK-NEXT: kiln.linear_pair ins(%[[X]], %[[K]], %[[V]] : memref<?x64xbf16>, memref<32x64xbf16>, memref<32x64xbf16>) outs(%[[KO]], %[[VO]] : memref<?x32xbf16>, memref<?x32xbf16>)
// CHECK-NOT: kiln.linear ins
// CHECK: return
func.func @kv(%x: memref<?x64xbf16>, %q: memref<64x64xbf16>, %k: memref<32x64xbf16>,
              %v: memref<32x64xbf16>, %qo: memref<?x64xbf16>, %ko: memref<?x32xbf16>,
              %vo: memref<?x32xbf16>) -> memref<32x64xbf16, strided<[64, 1]>> {
  kiln.linear ins(%x, %q : memref<?x64xbf16>, memref<64x64xbf16>) outs(%qo : memref<?x64xbf16>)
  kiln.linear ins(%x, %k : memref<?x64xbf16>, memref<32x64xbf16>) outs(%ko : memref<?x32xbf16>)
  %c = memref.cast %v : memref<32x64xbf16> to memref<32x64xbf16, strided<[64, 1]>>
  kiln.linear ins(%x, %v : memref<?x64xbf16>, memref<32x64xbf16>) outs(%vo : memref<?x32xbf16>)
  return %c : memref<32x64xbf16, strided<[64, 1]>>
}

// -----

// Gate and up pair inside a layer loop's body; each iteration gets its pair.
// CHECK-LABEL: func.func @loop
// CHECK: scf.for
// CHECK: kiln.linear_pair ins(%{{.*}}, %{{.*}}, %{{.*}} : memref<?x64xbf16>, memref<128x64xbf16>, memref<128x64xbf16>) outs(
// CHECK: kiln.swiglu
func.func @loop(%x: memref<?x64xbf16>, %g: memref<128x64xbf16>, %u: memref<128x64xbf16>,
                %go: memref<?x128xbf16>, %uo: memref<?x128xbf16>, %o: memref<?x128xbf16>) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %c2 step %c1 {
    kiln.linear ins(%x, %g : memref<?x64xbf16>, memref<128x64xbf16>) outs(%go : memref<?x128xbf16>)
    kiln.linear ins(%x, %u : memref<?x64xbf16>, memref<128x64xbf16>) outs(%uo : memref<?x128xbf16>)
    kiln.swiglu ins(%go, %uo : memref<?x128xbf16>, memref<?x128xbf16>) outs(%o : memref<?x128xbf16>)
  }
  return
}

// -----

// Left alone: a bias; another input; an op that reads memory between the two; an f32
// output.
// CHECK-LABEL: func.func @unpaired
// CHECK-NOT: kiln.linear_pair
// CHECK: return
func.func @unpaired(%x: memref<?x64xbf16>, %y: memref<?x64xbf16>, %w: memref<32x64xbf16>,
                    %b: memref<32xbf16>, %o0: memref<?x32xbf16>, %o1: memref<?x32xbf16>,
                    %f0: memref<?x32xf32>, %f1: memref<?x32xf32>, %n: memref<64xbf16>,
                    %r: memref<?x64xbf16>) {
  kiln.linear ins(%x, %w : memref<?x64xbf16>, memref<32x64xbf16>) bias(%b : memref<32xbf16>) outs(%o0 : memref<?x32xbf16>)
  kiln.linear ins(%x, %w : memref<?x64xbf16>, memref<32x64xbf16>) outs(%o1 : memref<?x32xbf16>)
  kiln.linear ins(%y, %w : memref<?x64xbf16>, memref<32x64xbf16>) outs(%o0 : memref<?x32xbf16>)
  kiln.rms_norm ins(%x, %n : memref<?x64xbf16>, memref<64xbf16>) outs(%r : memref<?x64xbf16>) {epsilon = 1.0e-5 : f32}
  kiln.linear ins(%y, %w : memref<?x64xbf16>, memref<32x64xbf16>) outs(%o1 : memref<?x32xbf16>)
  kiln.linear ins(%x, %w : memref<?x64xbf16>, memref<32x64xbf16>) outs(%f0 : memref<?x32xf32>)
  kiln.linear ins(%x, %w : memref<?x64xbf16>, memref<32x64xbf16>) outs(%f1 : memref<?x32xf32>)
  return
}
