// Every verifier diagnostic of the whole-model ops, #kiln.rope and the markers of a
// model function (kiln.entry, kiln.input, kiln.output, kiln.context).
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

//===----------------------------------------------------------------------===//
// Tensors and buffers
//===----------------------------------------------------------------------===//

func.func @f(%x: tensor<?x128xbf16>, %w: memref<128xbf16>, %o: tensor<?x128xbf16>) {
  // expected-error @below {{mixes tensors and buffers; operands must all be tensors or all be memrefs}}
  %0 = kiln.rms_norm ins(%x, %w : tensor<?x128xbf16>, memref<128xbf16>) outs(%o : tensor<?x128xbf16>) {epsilon = 1.0e-5 : f32} -> tensor<?x128xbf16>
  return
}

// -----
func.func @f(%a: memref<?x128xbf16>, %b: memref<?x128xbf16>, %o: tensor<?x128xbf16>) {
  // expected-error @below {{mixes tensors and buffers; operands must all be tensors or all be memrefs}}
  %0 = kiln.add ins(%a, %b : memref<?x128xbf16>, memref<?x128xbf16>) outs(%o : tensor<?x128xbf16>) -> tensor<?x128xbf16>
  return
}

// -----
// A tensor init needs a result of its type; a buffer init has none.
func.func @f(%a: tensor<?x128xbf16>, %o: tensor<?x128xbf16>) {
  // expected-error @below {{expected the number of tensor results (0) to be equal to the number of output tensors (1)}}
  kiln.add ins(%a, %a : tensor<?x128xbf16>, tensor<?x128xbf16>) outs(%o : tensor<?x128xbf16>)
  return
}

// -----
func.func @f(%a: tensor<?x128xbf16>, %o: tensor<?x128xbf16>) {
  // expected-error @below {{expected type of operand #2 ('tensor<?x128xbf16>') to match type of corresponding result ('tensor<4x128xbf16>')}}
  %0 = kiln.add ins(%a, %a : tensor<?x128xbf16>, tensor<?x128xbf16>) outs(%o : tensor<?x128xbf16>) -> tensor<4x128xbf16>
  return
}

//===----------------------------------------------------------------------===//
// kiln.embedding
//===----------------------------------------------------------------------===//

// -----
func.func @f(%ids: tensor<?x1xi32>, %t: tensor<512x128xbf16>, %o: tensor<?x128xbf16>) {
  // expected-error @below {{'ids' must have rank 1, got 'tensor<?x1xi32>'}}
  %0 = kiln.embedding ins(%ids, %t : tensor<?x1xi32>, tensor<512x128xbf16>) outs(%o : tensor<?x128xbf16>) -> tensor<?x128xbf16>
  return
}

// -----
func.func @f(%ids: tensor<?xi32>, %t: tensor<512xbf16>, %o: tensor<?x128xbf16>) {
  // expected-error @below {{'table' must have rank 2, got 'tensor<512xbf16>'}}
  %0 = kiln.embedding ins(%ids, %t : tensor<?xi32>, tensor<512xbf16>) outs(%o : tensor<?x128xbf16>) -> tensor<?x128xbf16>
  return
}

// -----
func.func @f(%ids: tensor<?xi64>, %t: tensor<512x128xbf16>, %o: tensor<?x128xbf16>) {
  // expected-error @below {{'ids' must have element type 'i32', got 'i64'}}
  %0 = kiln.embedding ins(%ids, %t : tensor<?xi64>, tensor<512x128xbf16>) outs(%o : tensor<?x128xbf16>) -> tensor<?x128xbf16>
  return
}

// -----
func.func @f(%ids: tensor<?xi32>, %t: tensor<512x128xbf16>, %o: tensor<?x128xf32>) {
  // expected-error @below {{'init' must have element type 'bf16', got 'f32'}}
  %0 = kiln.embedding ins(%ids, %t : tensor<?xi32>, tensor<512x128xbf16>) outs(%o : tensor<?x128xf32>) -> tensor<?x128xf32>
  return
}

// -----
func.func @f(%ids: tensor<4xi32>, %t: tensor<512x128xbf16>, %o: tensor<8x128xbf16>) {
  // expected-error @below {{dimension 0 of 'init' (8) must equal the token count (4)}}
  %0 = kiln.embedding ins(%ids, %t : tensor<4xi32>, tensor<512x128xbf16>) outs(%o : tensor<8x128xbf16>) -> tensor<8x128xbf16>
  return
}

// -----
func.func @f(%ids: tensor<?xi32>, %t: tensor<512x128xbf16>, %o: tensor<?x64xbf16>) {
  // expected-error @below {{dimension 1 of 'init' (64) must equal the hidden size (128)}}
  %0 = kiln.embedding ins(%ids, %t : tensor<?xi32>, tensor<512x128xbf16>) outs(%o : tensor<?x64xbf16>) -> tensor<?x64xbf16>
  return
}

//===----------------------------------------------------------------------===//
// kiln.add_rms_norm
//===----------------------------------------------------------------------===//

// -----
func.func @f(%x: tensor<?x4x32xbf16>, %w: tensor<32xbf16>, %s: tensor<?x4x32xbf16>, %o: tensor<?x4x32xbf16>) {
  // expected-error @below {{'lhs' must have rank 2, got 'tensor<?x4x32xbf16>'}}
  %0:2 = kiln.add_rms_norm ins(%x, %x, %w : tensor<?x4x32xbf16>, tensor<?x4x32xbf16>, tensor<32xbf16>) outs(%s, %o : tensor<?x4x32xbf16>, tensor<?x4x32xbf16>) {epsilon = 1.0e-5 : f32} -> tensor<?x4x32xbf16>, tensor<?x4x32xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x128xbf16>, %y: tensor<?x64xbf16>, %w: tensor<128xbf16>, %s: tensor<?x128xbf16>, %o: tensor<?x128xbf16>) {
  // expected-error @below {{'lhs' 'tensor<?x128xbf16>' and 'rhs' 'tensor<?x64xbf16>' must have the same shape}}
  %0:2 = kiln.add_rms_norm ins(%x, %y, %w : tensor<?x128xbf16>, tensor<?x64xbf16>, tensor<128xbf16>) outs(%s, %o : tensor<?x128xbf16>, tensor<?x128xbf16>) {epsilon = 1.0e-5 : f32} -> tensor<?x128xbf16>, tensor<?x128xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x128xbf16>, %w: tensor<64xbf16>, %s: tensor<?x128xbf16>, %o: tensor<?x128xbf16>) {
  // expected-error @below {{dimension 0 of 'weight' (64) must equal the normalized size (128)}}
  %0:2 = kiln.add_rms_norm ins(%x, %x, %w : tensor<?x128xbf16>, tensor<?x128xbf16>, tensor<64xbf16>) outs(%s, %o : tensor<?x128xbf16>, tensor<?x128xbf16>) {epsilon = 1.0e-5 : f32} -> tensor<?x128xbf16>, tensor<?x128xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x128xbf16>, %w: tensor<128xf16>, %s: tensor<?x128xbf16>, %o: tensor<?x128xbf16>) {
  // expected-error @below {{'weight' must have element type 'bf16', got 'f16'}}
  %0:2 = kiln.add_rms_norm ins(%x, %x, %w : tensor<?x128xbf16>, tensor<?x128xbf16>, tensor<128xf16>) outs(%s, %o : tensor<?x128xbf16>, tensor<?x128xbf16>) {epsilon = 1.0e-5 : f32} -> tensor<?x128xbf16>, tensor<?x128xbf16>
  return
}

// -----
func.func @f(%x: memref<?x128xbf16>, %w: memref<128xbf16>, %s: memref<?x128xbf16>) {
  // expected-error @below {{'sum_init' and 'norm_init' are the same value (the norm would overwrite the residual)}}
  kiln.add_rms_norm ins(%x, %x, %w : memref<?x128xbf16>, memref<?x128xbf16>, memref<128xbf16>) outs(%s, %s : memref<?x128xbf16>, memref<?x128xbf16>) {epsilon = 1.0e-5 : f32}
  return
}

// -----
func.func @f(%x: tensor<?x128xbf16>, %w: tensor<128xbf16>, %s: tensor<?x128xbf16>, %o: tensor<?x128xbf16>) {
  // expected-error @below {{'epsilon' must be a positive finite number, got 0}}
  %0:2 = kiln.add_rms_norm ins(%x, %x, %w : tensor<?x128xbf16>, tensor<?x128xbf16>, tensor<128xbf16>) outs(%s, %o : tensor<?x128xbf16>, tensor<?x128xbf16>) {epsilon = 0.0 : f32} -> tensor<?x128xbf16>, tensor<?x128xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x128xbf16>, %w: tensor<128xbf16>, %s: tensor<?x128xbf16>, %o: tensor<?x128xbf16>) {
  // expected-error @below {{has both 'zero_centered' and 'f32_weight'; a norm's weight is zero-centered (1 + weight) or applied as is, not both}}
  %0:2 = kiln.add_rms_norm ins(%x, %x, %w : tensor<?x128xbf16>, tensor<?x128xbf16>, tensor<128xbf16>) outs(%s, %o : tensor<?x128xbf16>, tensor<?x128xbf16>) {epsilon = 1.0e-5 : f32, zero_centered, f32_weight} -> tensor<?x128xbf16>, tensor<?x128xbf16>
  return
}

//===----------------------------------------------------------------------===//
// kiln.rms_norm
//===----------------------------------------------------------------------===//

// -----
func.func @f(%x: tensor<128xbf16>, %w: tensor<128xbf16>, %o: tensor<128xbf16>) {
  // expected-error @below {{'input' must have rank 2 or 3, got 'tensor<128xbf16>'}}
  %0 = kiln.rms_norm ins(%x, %w : tensor<128xbf16>, tensor<128xbf16>) outs(%o : tensor<128xbf16>) {epsilon = 1.0e-5 : f32} -> tensor<128xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x128xbf16>, %w: tensor<1x128xbf16>, %o: tensor<?x128xbf16>) {
  // expected-error @below {{'weight' must have rank 1, got 'tensor<1x128xbf16>'}}
  %0 = kiln.rms_norm ins(%x, %w : tensor<?x128xbf16>, tensor<1x128xbf16>) outs(%o : tensor<?x128xbf16>) {epsilon = 1.0e-5 : f32} -> tensor<?x128xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x4x32xbf16>, %w: tensor<128xbf16>, %o: tensor<?x4x32xbf16>) {
  // expected-error @below {{dimension 0 of 'weight' (128) must equal the normalized size (32)}}
  %0 = kiln.rms_norm ins(%x, %w : tensor<?x4x32xbf16>, tensor<128xbf16>) outs(%o : tensor<?x4x32xbf16>) {epsilon = 1.0e-5 : f32} -> tensor<?x4x32xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x128xbf16>, %w: tensor<128xbf16>, %o: tensor<?x4x32xbf16>) {
  // expected-error @below {{'input' 'tensor<?x128xbf16>' and 'init' 'tensor<?x4x32xbf16>' must have the same shape}}
  %0 = kiln.rms_norm ins(%x, %w : tensor<?x128xbf16>, tensor<128xbf16>) outs(%o : tensor<?x4x32xbf16>) {epsilon = 1.0e-5 : f32} -> tensor<?x4x32xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x128xbf16>, %w: tensor<128xbf16>, %o: tensor<?x128xf16>) {
  // expected-error @below {{'init' must have element type 'bf16', got 'f16'}}
  %0 = kiln.rms_norm ins(%x, %w : tensor<?x128xbf16>, tensor<128xbf16>) outs(%o : tensor<?x128xf16>) {epsilon = 1.0e-5 : f32} -> tensor<?x128xf16>
  return
}

// -----
func.func @f(%x: tensor<?x128xbf16>, %w: tensor<128xbf16>, %o: tensor<?x128xbf16>) {
  // expected-error @below {{'epsilon' must be a positive finite number, got 0}}
  %0 = kiln.rms_norm ins(%x, %w : tensor<?x128xbf16>, tensor<128xbf16>) outs(%o : tensor<?x128xbf16>) {epsilon = 0.0 : f32} -> tensor<?x128xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x128xbf16>, %w: tensor<128xbf16>, %o: tensor<?x128xbf16>) {
  // expected-error @below {{'epsilon' must be a positive finite number, got INF}}
  %0 = kiln.rms_norm ins(%x, %w : tensor<?x128xbf16>, tensor<128xbf16>) outs(%o : tensor<?x128xbf16>) {epsilon = 0x7F800000 : f32} -> tensor<?x128xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x4x32xbf16>, %w: tensor<32xbf16>, %o: tensor<?x4x32xbf16>) {
  // expected-error @below {{has both 'zero_centered' and 'f32_weight'}}
  %0 = kiln.rms_norm ins(%x, %w : tensor<?x4x32xbf16>, tensor<32xbf16>) outs(%o : tensor<?x4x32xbf16>) {epsilon = 1.0e-5 : f32, f32_weight, zero_centered} -> tensor<?x4x32xbf16>
  return
}

//===----------------------------------------------------------------------===//
// kiln.linear
//===----------------------------------------------------------------------===//

// -----
func.func @f(%x: tensor<?x4x32xbf16>, %w: tensor<256x128xbf16>, %o: tensor<?x256xbf16>) {
  // expected-error @below {{'input' must have rank 2, got 'tensor<?x4x32xbf16>'}}
  %0 = kiln.linear ins(%x, %w : tensor<?x4x32xbf16>, tensor<256x128xbf16>) outs(%o : tensor<?x256xbf16>) -> tensor<?x256xbf16>
  return
}

// -----
// The weight is [out_features, in_features] (nn.Linear), not [in, out].
func.func @f(%x: tensor<?x128xbf16>, %w: tensor<128x256xbf16>, %o: tensor<?x256xbf16>) {
  // expected-error @below {{dimension 1 of 'weight' (256) must equal the input features (128)}}
  %0 = kiln.linear ins(%x, %w : tensor<?x128xbf16>, tensor<128x256xbf16>) outs(%o : tensor<?x256xbf16>) -> tensor<?x256xbf16>
  return
}

// -----
func.func @f(%x: tensor<4x128xbf16>, %w: tensor<256x128xbf16>, %o: tensor<8x256xbf16>) {
  // expected-error @below {{dimension 0 of 'init' (8) must equal the rows (4)}}
  %0 = kiln.linear ins(%x, %w : tensor<4x128xbf16>, tensor<256x128xbf16>) outs(%o : tensor<8x256xbf16>) -> tensor<8x256xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x128xbf16>, %w: tensor<256x128xbf16>, %o: tensor<?x128xbf16>) {
  // expected-error @below {{dimension 1 of 'init' (128) must equal the output features (256)}}
  %0 = kiln.linear ins(%x, %w : tensor<?x128xbf16>, tensor<256x128xbf16>) outs(%o : tensor<?x128xbf16>) -> tensor<?x128xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x128xbf16>, %w: tensor<256x128xbf16>, %o: tensor<?x256xf16>) {
  // expected-error @below {{'init' must have element type 'bf16', got 'f16'}}
  %0 = kiln.linear ins(%x, %w : tensor<?x128xbf16>, tensor<256x128xbf16>) outs(%o : tensor<?x256xf16>) -> tensor<?x256xf16>
  return
}

// -----
func.func @f(%x: tensor<?x128xbf16>, %w: tensor<256x128xbf16>, %b: tensor<1x256xbf16>, %o: tensor<?x256xbf16>) {
  // expected-error @below {{'bias' must have rank 1, got 'tensor<1x256xbf16>'}}
  %0 = kiln.linear ins(%x, %w : tensor<?x128xbf16>, tensor<256x128xbf16>) bias(%b : tensor<1x256xbf16>) outs(%o : tensor<?x256xbf16>) -> tensor<?x256xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x128xbf16>, %w: tensor<256x128xbf16>, %b: tensor<128xbf16>, %o: tensor<?x256xbf16>) {
  // expected-error @below {{dimension 0 of 'bias' (128) must equal the output features (256)}}
  %0 = kiln.linear ins(%x, %w : tensor<?x128xbf16>, tensor<256x128xbf16>) bias(%b : tensor<128xbf16>) outs(%o : tensor<?x256xbf16>) -> tensor<?x256xbf16>
  return
}

//===----------------------------------------------------------------------===//
// kiln.rope and #kiln.rope
//===----------------------------------------------------------------------===//

// -----
func.func @f(%x: tensor<?x128xbf16>, %p: tensor<?xi32>, %o: tensor<?x128xbf16>) {
  // expected-error @below {{'input' must have rank 3, got 'tensor<?x128xbf16>'}}
  %0 = kiln.rope ins(%x, %p : tensor<?x128xbf16>, tensor<?xi32>) outs(%o : tensor<?x128xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>} -> tensor<?x128xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x4x32xbf16>, %p: tensor<?xi64>, %o: tensor<?x4x32xbf16>) {
  // expected-error @below {{'positions' must have element type 'i32', got 'i64'}}
  %0 = kiln.rope ins(%x, %p : tensor<?x4x32xbf16>, tensor<?xi64>) outs(%o : tensor<?x4x32xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>} -> tensor<?x4x32xbf16>
  return
}

// -----
func.func @f(%x: tensor<4x4x32xbf16>, %p: tensor<5xi32>, %o: tensor<4x4x32xbf16>) {
  // expected-error @below {{dimension 0 of 'positions' (5) must equal the token count (4)}}
  %0 = kiln.rope ins(%x, %p : tensor<4x4x32xbf16>, tensor<5xi32>) outs(%o : tensor<4x4x32xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>} -> tensor<4x4x32xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x4x32xbf16>, %p: tensor<?xi32>, %o: tensor<?x2x64xbf16>) {
  // expected-error @below {{'input' 'tensor<?x4x32xbf16>' and 'init' 'tensor<?x2x64xbf16>' must have the same shape}}
  %0 = kiln.rope ins(%x, %p : tensor<?x4x32xbf16>, tensor<?xi32>) outs(%o : tensor<?x2x64xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>} -> tensor<?x2x64xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x4x33xbf16>, %p: tensor<?xi32>, %o: tensor<?x4x33xbf16>) {
  // expected-error @below {{head dimension 33 must be even}}
  %0 = kiln.rope ins(%x, %p : tensor<?x4x33xbf16>, tensor<?xi32>) outs(%o : tensor<?x4x33xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>} -> tensor<?x4x33xbf16>
  return
}

// -----
// expected-error @below {{#kiln.rope: theta must be a positive finite number}}
module attributes {test.rope = #kiln.rope<type = default, theta = 0.0>} {}

// -----
// expected-error @below {{#kiln.rope: factor must be a positive finite number}}
module attributes {test.rope = #kiln.rope<type = linear, theta = 10000.0, factor = -2.0>} {}

// -----
// expected-error @below {{#kiln.rope: attention_factor must be a positive finite number}}
module attributes {test.rope = #kiln.rope<type = yarn, theta = 10000.0, factor = 4.0, low = 1.0, high = 2.0, original_max_position = 4096, attention_factor = 0.0>} {}

// -----
// expected-error @below {{#kiln.rope: low must be finite}}
module attributes {test.rope = #kiln.rope<type = yarn, theta = 10000.0, factor = 4.0, low = 0x7FF0000000000000 : f64, high = 2.0, original_max_position = 4096>} {}

// -----
// expected-error @below {{#kiln.rope: type linear needs 'factor'}}
module attributes {test.rope = #kiln.rope<type = linear, theta = 10000.0>} {}

// -----
// expected-error @below {{#kiln.rope: type llama3 needs 'low' and 'high'}}
module attributes {test.rope = #kiln.rope<type = llama3, theta = 500000.0, factor = 8.0, low = 1.0, original_max_position = 8192>} {}

// -----
// expected-error @below {{#kiln.rope: type yarn needs original_max_position >= 1}}
module attributes {test.rope = #kiln.rope<type = yarn, theta = 10000.0, factor = 4.0, low = 1.0, high = 2.0>} {}

// -----
// expected-error @below {{#kiln.rope: llama3 needs high > low}}
module attributes {test.rope = #kiln.rope<type = llama3, theta = 500000.0, factor = 8.0, low = 4.0, high = 1.0, original_max_position = 8192>} {}

// -----
// expected-error @below {{expected ::kiln::RopeType to be one of: default, linear, llama3, yarn}}
// expected-error @below {{failed to parse Kiln_RopeAttr parameter 'type'}}
module attributes {test.rope = #kiln.rope<type = dynamic, theta = 10000.0>} {}

//===----------------------------------------------------------------------===//
// kiln.add, kiln.swiglu, kiln.gather_rows
//===----------------------------------------------------------------------===//

// -----
func.func @f(%a: tensor<?x128xbf16>, %b: tensor<?x64xbf16>, %o: tensor<?x128xbf16>) {
  // expected-error @below {{'lhs' 'tensor<?x128xbf16>' and 'rhs' 'tensor<?x64xbf16>' must have the same shape}}
  %0 = kiln.add ins(%a, %b : tensor<?x128xbf16>, tensor<?x64xbf16>) outs(%o : tensor<?x128xbf16>) -> tensor<?x128xbf16>
  return
}

// -----
func.func @f(%a: tensor<?x128xbf16>, %b: tensor<?x128xf32>, %o: tensor<?x128xbf16>) {
  // expected-error @below {{'rhs' must have element type 'bf16', got 'f32'}}
  %0 = kiln.add ins(%a, %b : tensor<?x128xbf16>, tensor<?x128xf32>) outs(%o : tensor<?x128xbf16>) -> tensor<?x128xbf16>
  return
}

// -----
func.func @f(%g: tensor<?x256xbf16>, %o: tensor<?x128xbf16>) {
  // expected-error @below {{'gate' 'tensor<?x256xbf16>' and 'init' 'tensor<?x128xbf16>' must have the same shape}}
  %0 = kiln.swiglu ins(%g, %g : tensor<?x256xbf16>, tensor<?x256xbf16>) outs(%o : tensor<?x128xbf16>) -> tensor<?x128xbf16>
  return
}

// -----
func.func @f(%g: tensor<?x256xbf16>, %o: tensor<?x256xf16>) {
  // expected-error @below {{'init' must have element type 'bf16', got 'f16'}}
  %0 = kiln.swiglu ins(%g, %g : tensor<?x256xbf16>, tensor<?x256xbf16>) outs(%o : tensor<?x256xf16>) -> tensor<?x256xf16>
  return
}

// -----
func.func @f(%x: tensor<?x128xbf16>, %r: tensor<?xi64>, %o: tensor<?x128xbf16>) {
  // expected-error @below {{'rows' must have element type 'i32', got 'i64'}}
  %0 = kiln.gather_rows ins(%x, %r : tensor<?x128xbf16>, tensor<?xi64>) outs(%o : tensor<?x128xbf16>) -> tensor<?x128xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x128xbf16>, %r: tensor<4xi32>, %o: tensor<8x128xbf16>) {
  // expected-error @below {{dimension 0 of 'init' (8) must equal the row count (4)}}
  %0 = kiln.gather_rows ins(%x, %r : tensor<?x128xbf16>, tensor<4xi32>) outs(%o : tensor<8x128xbf16>) -> tensor<8x128xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x128xbf16>, %r: tensor<?xi32>, %o: tensor<?x64xbf16>) {
  // expected-error @below {{dimension 1 of 'init' (64) must equal the row size (128)}}
  %0 = kiln.gather_rows ins(%x, %r : tensor<?x128xbf16>, tensor<?xi32>) outs(%o : tensor<?x64xbf16>) -> tensor<?x64xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x128xbf16>, %r: tensor<?x1xi32>, %o: tensor<?x128xbf16>) {
  // expected-error @below {{'rows' must have rank 1, got 'tensor<?x1xi32>'}}
  %0 = kiln.gather_rows ins(%x, %r : tensor<?x128xbf16>, tensor<?x1xi32>) outs(%o : tensor<?x128xbf16>) -> tensor<?x128xbf16>
  return
}

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

// -----
func.func @f() {
  // expected-error @below {{'kiln.weight_ref' op 'missing.weight' does not name a kiln.weight}}
  %0 = kiln.weight_ref @missing.weight : tensor<4xbf16>
  return
}

// -----
module {
  kiln.weight @w : tensor<128x64xbf16>
  func.func @f() {
    // expected-error @below {{type 'tensor<64x128xbf16>' does not match weight 'w' of type 'tensor<128x64xbf16>'}}
    %0 = kiln.weight_ref @w : tensor<64x128xbf16>
    return
  }
}

// -----
module {
  kiln.weight @w : tensor<128x64xbf16>
  func.func @f() {
    // expected-error @below {{type 'memref<128x64xf32>' does not match weight 'w' of type 'tensor<128x64xbf16>'}}
    %0 = kiln.weight_ref @w : memref<128x64xf32>
    return
  }
}

// -----
module {
  kiln.weight @w : tensor<128x64xbf16>
  func.func @f() {
    // expected-error @below {{result #0 must be statically shaped tensor of any type values or statically shaped memref of any type values, but got 'tensor<?x64xbf16>'}}
    %0 = kiln.weight_ref @w : tensor<?x64xbf16>
    return
  }
}

// -----
module {
  // expected-error @below {{'offset' must be >= 0}}
  kiln.weight @w {offset = -256} : tensor<128x64xbf16>
}

// -----
module {
  // expected-error @below {{weight 'huge' of type 'tensor<4294967296x4294967296xbf16>' has a byte size that overflows 64 bits}}
  kiln.weight @huge : tensor<4294967296x4294967296xbf16>
}

// -----
module {
  // expected-error @below {{attribute 'type' failed to satisfy constraint: type attribute of statically shaped tensor of any type values}}
  kiln.weight @w : tensor<?x64xbf16>
}

// -----
func.func @f() {
  // expected-error @below {{'kiln.weight' op expects parent op 'builtin.module'}}
  kiln.weight @w : tensor<128xbf16>
  return
}

//===----------------------------------------------------------------------===//
// Step buffers
//===----------------------------------------------------------------------===//

// -----
func.func @f() {
  // expected-error @below {{result #0 must be 1D memref of 32-bit signless integer values, but got 'memref<?xi64>'}}
  %0 = kiln.input token_ids : memref<?xi64>
  return
}

// -----
func.func @f(%t: index) {
  // expected-error @below {{needs 1 dynamic sizes for 'memref<?x128xbf16>', got 0}}
  %0 = kiln.activation_buffer offset 0 capacity 1024 : memref<?x128xbf16>
  return
}

// -----
func.func @f(%t: index) {
  // expected-error @below {{needs 0 dynamic sizes for 'memref<4x128xbf16>', got 1}}
  %0 = kiln.activation_buffer offset 0 capacity 1024 [%t] : memref<4x128xbf16>
  return
}

// -----
func.func @f(%t: index) {
  // expected-error @below {{needs a memref with the identity layout, got 'memref<?x128xbf16, strided<[256, 1]>>'}}
  %0 = kiln.activation_buffer offset 0 capacity 1024 [%t] : memref<?x128xbf16, strided<[256, 1]>>
  return
}

// -----
func.func @f(%p: !llvm.ptr, %t: index) {
  // expected-error @below {{needs 2 dynamic sizes for 'memref<?x?xbf16>', got 1}}
  %0 = kiln.buffer_from_pointer %p[%t] : !llvm.ptr -> memref<?x?xbf16>
  return
}

// -----
func.func @f(%p: !llvm.ptr, %t: index) {
  // expected-error @below {{needs 0 dynamic sizes for 'memref<4xbf16>', got 1}}
  %0 = kiln.buffer_from_pointer %p[%t] : !llvm.ptr -> memref<4xbf16>
  return
}

//===----------------------------------------------------------------------===//
// Markers of the model function and module attributes
//===----------------------------------------------------------------------===//

// -----
// expected-error @below {{'kiln.entry' is a unit attribute of the model function}}
func.func @f() attributes {kiln.entry = true} {
  return
}

// -----
// expected-error @below {{'kiln.entry' is a unit attribute of the model function}}
module attributes {kiln.entry} {}

// -----
// expected-error @below {{argument 0: 'kiln.input' must be #kiln<input token_ids|positions|logit_rows>}}
func.func @f(%ids: tensor<?xi32> {kiln.input = #kiln<output logits>}) {
  return
}

// -----
// expected-error @below {{argument 1: 'kiln.context' is a unit attribute}}
func.func @f(%ids: tensor<?xi32>, %ctx: !llvm.ptr {kiln.context = 1 : i32}) {
  return
}

// -----
// expected-error @below {{argument 0: unknown kiln argument attribute 'kiln.output'; expected kiln.input or kiln.context}}
func.func @f(%ids: tensor<?xi32> {kiln.output = #kiln<output logits>}) {
  return
}

// -----
// expected-error @below {{result 0: 'kiln.input' is not a kiln result attribute; expected kiln.output = #kiln<output logits>}}
func.func @f(%x: tensor<?x8xbf16>) -> (tensor<?x8xbf16> {kiln.input = #kiln<input token_ids>}) {
  return %x : tensor<?x8xbf16>
}

// -----
// expected-error @below {{result 0: 'kiln.output' is not a kiln result attribute; expected kiln.output = #kiln<output logits>}}
func.func @f(%x: tensor<?x8xbf16>) -> (tensor<?x8xbf16> {kiln.output = "logits"}) {
  return %x : tensor<?x8xbf16>
}

// -----
// expected-error @below {{'kiln.device_memory' must be a #kiln.device_memory attribute, got #kiln.plan}}
module attributes {kiln.device_memory = #kiln.plan<total_bytes = 0, kv_bytes = 0, state_bytes = 0, speculative_bytes = 0, unmanaged_bytes = 0, budget_bytes = 0, kv_pages = 0, fits = true, pools = []>} {}

// -----
module {
  // expected-error @below {{'kiln.device_memory' configures a compilation and belongs on a builtin.module}}
  func.func @f() attributes {kiln.device_memory = #kiln.device_memory<weights = 0, caches = 0, activations = 0, workspace = 0, io = 0, max_step_tokens = 0, max_logit_rows = 0, activation_buffers = 0>} {
    return
  }
}

// -----
// expected-error @below {{unknown kiln attribute 'kiln.input'; expected one of kiln.target, kiln.spec, kiln.runtime, kiln.model, kiln.plan, kiln.device_memory, kiln.entry}}
func.func @f() attributes {kiln.input = #kiln<input token_ids>} {
  return
}

// -----
func.func @f(%x: tensor<?x256xbf16>, %w: tensor<256xbf16>) {
  %e = tensor.empty() : tensor<4x256xbf16>
  %x4 = tensor.empty() : tensor<4x256xbf16>
  // expected-error @below {{'group_size' 96 must be positive and divide the width 256}}
  %0 = kiln.gated_rms_norm ins(%x4, %x4, %w : tensor<4x256xbf16>, tensor<4x256xbf16>, tensor<256xbf16>) outs(%e : tensor<4x256xbf16>) {group_size = 96, epsilon = 1.0e-5 : f32} -> tensor<4x256xbf16>
  return
}

// -----
func.func @f(%x: tensor<4x256xbf16>, %g: tensor<4x128xbf16>, %w: tensor<256xbf16>) {
  %e = tensor.empty() : tensor<4x256xbf16>
  // expected-error @below {{'input' 'tensor<4x256xbf16>' and 'gate' 'tensor<4x128xbf16>' must have the same shape}}
  %0 = kiln.gated_rms_norm ins(%x, %g, %w : tensor<4x256xbf16>, tensor<4x128xbf16>, tensor<256xbf16>) outs(%e : tensor<4x256xbf16>) {group_size = 128, epsilon = 1.0e-5 : f32} -> tensor<4x256xbf16>
  return
}

// -----
func.func @f(%x: tensor<4x256xbf16>) {
  %e = tensor.empty() : tensor<4x128xbf16>
  // expected-error @below {{'input' 'tensor<4x256xbf16>' and 'init' 'tensor<4x128xbf16>' must have the same shape}}
  %0 = kiln.activation relu2 ins(%x : tensor<4x256xbf16>) outs(%e : tensor<4x128xbf16>) -> tensor<4x128xbf16>
  return
}

// -----
func.func @f(%l: tensor<4x512xbf16>) {
  %e = tensor.empty() : tensor<4x2xi32>
  // expected-error @below {{dimension 1 of 'init' (2) must equal one token a row (1)}}
  %0 = kiln.argmax ins(%l : tensor<4x512xbf16>) outs(%e : tensor<4x2xi32>) -> tensor<4x2xi32>
  return
}

// -----
func.func @f(%l: tensor<4x512xf32>) {
  %e = tensor.empty() : tensor<4x1xi32>
  // expected-error @below {{'logits' must be bf16, got 'tensor<4x512xf32>'}}
  %0 = kiln.argmax ins(%l : tensor<4x512xf32>) outs(%e : tensor<4x1xi32>) -> tensor<4x1xi32>
  return
}

// -----
func.func @f(%ids: tensor<8xi32>, %p: tensor<3x1xi32>, %rows: tensor<2xi32>) {
  %e = tensor.empty() : tensor<8xi32>
  // expected-error @below {{dimension 0 of 'picks' (3) must equal the row count (2)}}
  %0 = kiln.next_tokens ins(%ids, %p, %rows : tensor<8xi32>, tensor<3x1xi32>, tensor<2xi32>) outs(%e : tensor<8xi32>) -> tensor<8xi32>
  return
}

// -----
func.func @f(%ids: tensor<8xi32>, %p: tensor<2x1xi32>, %rows: tensor<2xi32>) {
  %e = tensor.empty() : tensor<7xi32>
  // expected-error @below {{dimension 0 of 'init' (7) must equal the token count (8)}}
  %0 = kiln.next_tokens ins(%ids, %p, %rows : tensor<8xi32>, tensor<2x1xi32>, tensor<2xi32>) outs(%e : tensor<7xi32>) -> tensor<7xi32>
  return
}

// -----
func.func @f(%a: tensor<4x64xbf16>, %b: tensor<4x32xbf16>) {
  %e = tensor.empty() : tensor<4x128xbf16>
  // expected-error @below {{dimension 1 of 'init' (128) must equal the two widths (96)}}
  %0 = kiln.concat ins(%a, %b : tensor<4x64xbf16>, tensor<4x32xbf16>) outs(%e : tensor<4x128xbf16>) -> tensor<4x128xbf16>
  return
}

// -----
func.func @f(%a: tensor<4x64xbf16>, %b: tensor<3x64xbf16>) {
  %e = tensor.empty() : tensor<4x128xbf16>
  // expected-error @below {{dimension 0 of 'rhs' (3) must equal the row count (4)}}
  %0 = kiln.concat ins(%a, %b : tensor<4x64xbf16>, tensor<3x64xbf16>) outs(%e : tensor<4x128xbf16>) -> tensor<4x128xbf16>
  return
}

// -----
func.func @f(%d: memref<4x2xi32>) {
  // expected-error @below {{draft tokens must be a [rows, 1] i32 buffer, got 'memref<4x2xi32>'}}
  kiln.output draft_tokens %d : memref<4x2xi32>
  return
}

// -----
func.func @f(%l: memref<4x8x16xbf16>) {
  // expected-error @below {{logits must be a [rows, vocab] buffer, got 'memref<4x8x16xbf16>'}}
  kiln.output logits %l : memref<4x8x16xbf16>
  return
}
