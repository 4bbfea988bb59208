// The verifiers of kiln.weight_family, kiln.weight_member and the kiln.layers marker.
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

// expected-error @below {{weight family 'model.layers.0.w' needs exactly one '{}' for the member index}}
kiln.weight_family @"model.layers.0.w" count 2 : tensor<8xbf16>

// -----

// expected-error @below {{weight family 'model.{}.layers.{}.w' needs exactly one '{}' for the member index}}
kiln.weight_family @"model.{}.layers.{}.w" count 2 : tensor<8xbf16>

// -----

// expected-error @below {{'count' failed to satisfy constraint}}
kiln.weight_family @"model.layers.{}.w" count 0 : tensor<8xbf16>

// -----

// expected-error @below {{'stride' (8) is less than a member's 16 bytes}}
kiln.weight_family @"model.layers.{}.w" count 2 {offset = 0 : i64, stride = 8 : i64} : tensor<8xbf16>

// -----

kiln.weight @"model.norm.weight" : tensor<8xbf16>
func.func @f(%i: index) -> tensor<8xbf16> {
  // expected-error @below {{'model.norm.weight' does not name a kiln.weight_family}}
  %w = kiln.weight_member @"model.norm.weight"[%i] : tensor<8xbf16>
  return %w : tensor<8xbf16>
}

// -----

kiln.weight_family @"model.layers.{}.w" count 2 : tensor<8xbf16>
func.func @f(%i: index) -> tensor<4xbf16> {
  // expected-error @below {{type 'tensor<4xbf16>' does not match weight family 'model.layers.{}.w' of type 'tensor<8xbf16>'}}
  %w = kiln.weight_member @"model.layers.{}.w"[%i] : tensor<4xbf16>
  return %w : tensor<4xbf16>
}

// -----

// expected-error @below {{'kiln.layers' is a unit attribute of a loop over the decoder layers (one induction variable, the layer index)}}
func.func @f() attributes {kiln.layers} {
  return
}

// -----

// A family's members are sharded as a kiln.weight is (one verifier for both).
// expected-error @below {{'shard' dimension 2 is not a dimension of 'tensor<32x64xbf16>'}}
kiln.weight_family @"model.layers.{}.q_proj.weight" count 2 {shard = #kiln.shard<dim = 2, parts = 2>} : tensor<32x64xbf16>

// -----

// expected-error @below {{'shard' segments sum to 24, but dimension 0 of 'tensor<32x64xbf16>' is 32}}
kiln.weight_family @"model.layers.{}.in_proj.weight" count 2 {shard = #kiln.shard<dim = 0, parts = 2, segments = [16, 8]>} : tensor<32x64xbf16>
