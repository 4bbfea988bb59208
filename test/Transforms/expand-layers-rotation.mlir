// kiln-expand-layers{unsupported-only fuse-residual-norm} keeps a layer loop whose
// residual add feeds the next iteration's first norm when kiln-rotate-layers can move
// that pair into one iteration, and expands it, saying why, when it cannot.
// RUN: kiln-opt %s -split-input-file --kiln-expand-layers="unsupported-only fuse-residual-norm remarks" -verify-diagnostics | FileCheck %s

// Two layers would leave a rotated loop of one trip: expanded.
// CHECK-LABEL: func.func @two_layers
// CHECK-NOT:   scf.for
// CHECK:       kiln.weight_ref @model.layers.1.norm.weight
module {
  kiln.weight_family @"model.layers.{}.norm.weight" count 2 {offset = 0 : i64, stride = 256 : i64} : tensor<128xbf16>
  func.func @two_layers(%h0: tensor<?x128xbf16>) -> tensor<?x128xbf16> {
    %c0 = arith.constant 0 : index
    %c2 = arith.constant 2 : index
    %c1 = arith.constant 1 : index
    %n = tensor.dim %h0, %c0 : tensor<?x128xbf16>
    // expected-remark @below {{kiln-expand-layers: the layer loop is expanded: the residual add ending a layer and the next layer's norm fuse across iterations in the unrolled step (kiln-fuse-residual-norm), and kiln-rotate-layers cannot rotate the loop}}
    %h = scf.for %layer = %c0 to %c2 step %c1 iter_args(%x = %h0) -> (tensor<?x128xbf16>) {
      %w = kiln.weight_member @"model.layers.{}.norm.weight"[%layer] : tensor<128xbf16>
      %init = tensor.empty(%n) : tensor<?x128xbf16>
      %y = kiln.rms_norm ins(%x, %w : tensor<?x128xbf16>, tensor<128xbf16>) outs(%init : tensor<?x128xbf16>) {epsilon = 1.0e-5 : f32} -> tensor<?x128xbf16>
      %sum = tensor.empty(%n) : tensor<?x128xbf16>
      %z = kiln.add ins(%x, %y : tensor<?x128xbf16>, tensor<?x128xbf16>) outs(%sum : tensor<?x128xbf16>) -> tensor<?x128xbf16>
      scf.yield %z : tensor<?x128xbf16>
    } {kiln.layers}
    return %h : tensor<?x128xbf16>
  }
}

// -----

// Three layers: kiln-rotate-layers rotates it (test/Transforms/rotate-layers.mlir), so it
// stays a loop.
// CHECK-LABEL: func.func @three_layers
// CHECK:       scf.for
// CHECK:       } {kiln.layers}
module {
  kiln.weight_family @"model.layers.{}.norm.weight" count 3 {offset = 0 : i64, stride = 256 : i64} : tensor<128xbf16>
  func.func @three_layers(%h0: tensor<?x128xbf16>) -> tensor<?x128xbf16> {
    %c0 = arith.constant 0 : index
    %c3 = arith.constant 3 : index
    %c1 = arith.constant 1 : index
    %n = tensor.dim %h0, %c0 : tensor<?x128xbf16>
    %h = scf.for %layer = %c0 to %c3 step %c1 iter_args(%x = %h0) -> (tensor<?x128xbf16>) {
      %w = kiln.weight_member @"model.layers.{}.norm.weight"[%layer] : tensor<128xbf16>
      %init = tensor.empty(%n) : tensor<?x128xbf16>
      %y = kiln.rms_norm ins(%x, %w : tensor<?x128xbf16>, tensor<128xbf16>) outs(%init : tensor<?x128xbf16>) {epsilon = 1.0e-5 : f32} -> tensor<?x128xbf16>
      %sum = tensor.empty(%n) : tensor<?x128xbf16>
      %z = kiln.add ins(%x, %y : tensor<?x128xbf16>, tensor<?x128xbf16>) outs(%sum : tensor<?x128xbf16>) -> tensor<?x128xbf16>
      scf.yield %z : tensor<?x128xbf16>
    } {kiln.layers}
    return %h : tensor<?x128xbf16>
  }
}
