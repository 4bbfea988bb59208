// kiln-expand-layers names a weight member whose layer it cannot tell.
// RUN: kiln-opt %s --split-input-file --kiln-expand-layers -verify-diagnostics

module {
  kiln.weight_family @"model.layers.{}.norm.weight" count 2 {offset = 0 : i64, stride = 256 : i64} : tensor<128xbf16>
  func.func @member_at_an_argument(%h0: tensor<4x128xbf16>, %i: index) -> tensor<4x128xbf16> {
    %c0 = arith.constant 0 : index
    %c2 = arith.constant 2 : index
    %c1 = arith.constant 1 : index
    %h = scf.for %layer = %c0 to %c2 step %c1 iter_args(%x = %h0) -> (tensor<4x128xbf16>) {
      // expected-error @+1 {{a weight member of a layer loop must be read at a layer the loop's index gives}}
      %w = kiln.weight_member @"model.layers.{}.norm.weight"[%i] : tensor<128xbf16>
      %init = tensor.empty() : tensor<4x128xbf16>
      %y = kiln.rms_norm ins(%x, %w : tensor<4x128xbf16>, tensor<128xbf16>) outs(%init : tensor<4x128xbf16>) {epsilon = 1.0e-5 : f32} -> tensor<4x128xbf16>
      scf.yield %y : tensor<4x128xbf16>
    } {kiln.layers}
    return %h : tensor<4x128xbf16>
  }
}

// -----

module {
  kiln.weight_family @"model.layers.{}.norm.weight" count 2 {offset = 0 : i64, stride = 256 : i64} : tensor<128xbf16>
  func.func @member_outside_a_loop(%h0: tensor<4x128xbf16>, %i: index) -> tensor<4x128xbf16> {
    // expected-error @+1 {{a weight member outside a layer loop must be read at a constant layer}}
    %w = kiln.weight_member @"model.layers.{}.norm.weight"[%i] : tensor<128xbf16>
    %init = tensor.empty() : tensor<4x128xbf16>
    %y = kiln.rms_norm ins(%h0, %w : tensor<4x128xbf16>, tensor<128xbf16>) outs(%init : tensor<4x128xbf16>) {epsilon = 1.0e-5 : f32} -> tensor<4x128xbf16>
    return %y : tensor<4x128xbf16>
  }
}
