// kiln-expand-layers{unsupported-only} (the lowering pipelines) keeps the layer loops
// that the lowering takes as loops and expands the others, with a remark why.
// RUN: kiln-opt %s -split-input-file --kiln-expand-layers="unsupported-only remarks" -verify-diagnostics | FileCheck %s --check-prefix=KEEP
// RUN: kiln-opt %s -split-input-file --kiln-expand-layers="unsupported-only fuse-residual-norm remarks" -verify-diagnostics=only-expected 2>&1 | FileCheck %s --check-prefix=FUSED

// A body whose residual add feeds the next iteration's first norm: kept, unless the
// norm fusion runs after (the unrolled step fuses that pair across layers).
// KEEP:      scf.for
// KEEP:      } {kiln.layers}
// FUSED-NOT: scf.for
// FUSED:     kiln.weight_ref @model.layers.1.norm.weight
module {
  kiln.weight_family @"model.layers.{}.norm.weight" count 2 {offset = 0 : i64, stride = 256 : i64} : tensor<128xbf16>
  func.func @forward(%h0: tensor<?x128xbf16>) -> tensor<?x128xbf16> {
    %c0 = arith.constant 0 : index
    %c2 = arith.constant 2 : index
    %c1 = arith.constant 1 : index
    %n = tensor.dim %h0, %c0 : tensor<?x128xbf16>
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
// Bounds that are not constants: expanded (the expansion itself then refuses them).
func.func @forward(%h0: tensor<4x128xbf16>, %n: index) -> tensor<4x128xbf16> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  // expected-remark @below {{kiln-expand-layers: the layer loop is expanded: its bounds are not constants with step 1}}
  // expected-error @below {{kiln-expand-layers: a layer loop needs constant bounds and step 1}}
  %h = scf.for %layer = %c0 to %n step %c1 iter_args(%x = %h0) -> (tensor<4x128xbf16>) {
    scf.yield %x : tensor<4x128xbf16>
  } {kiln.layers}
  return %h : tensor<4x128xbf16>
}
