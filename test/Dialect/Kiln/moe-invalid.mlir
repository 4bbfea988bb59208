// Every verifier diagnostic of kiln.moe and of stacked and regrouped weights.
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

func.func @f(%x: tensor<?x64xbf16>, %l: tensor<?x8xbf16>, %g: tensor<8x32x64xbf16>,
             %d: tensor<8x64x32xbf16>, %o: tensor<?x64xbf16>, %s: tensor<?x1744xi8>) {
  // expected-error @below {{top_k 9 exceeds the 8 experts}}
  %r:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x8xbf16>) gate(%g : tensor<8x32x64xbf16>) up(%g : tensor<8x32x64xbf16>) down(%d : tensor<8x64x32xbf16>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi8>) {top_k = 9 : i64} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  return
}

// -----
func.func @f(%x: tensor<?x64xbf16>, %l: tensor<?x8xbf16>, %g: tensor<8x32x64xbf16>,
             %d: tensor<8x64x32xbf16>, %o: tensor<?x64xbf16>, %s: tensor<?x600xi8>) {
  // expected-error @below {{dimension 1 of 'scratch' (600) must equal the bytes a token needs (kiln_moe_scratch_bytes_per_token) (1744)}}
  %r:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x8xbf16>) gate(%g : tensor<8x32x64xbf16>) up(%g : tensor<8x32x64xbf16>) down(%d : tensor<8x64x32xbf16>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x600xi8>) {top_k = 2 : i64} -> tensor<?x64xbf16>, tensor<?x600xi8>
  return
}

// -----
func.func @f(%x: tensor<?x64xbf16>, %l: tensor<?x4xbf16>, %g: tensor<8x32x64xbf16>,
             %d: tensor<8x64x32xbf16>, %o: tensor<?x64xbf16>, %s: tensor<?x1744xi8>) {
  // expected-error @below {{dimension 1 of 'logits' (4) must equal the expert count (8)}}
  %r:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x4xbf16>) gate(%g : tensor<8x32x64xbf16>) up(%g : tensor<8x32x64xbf16>) down(%d : tensor<8x64x32xbf16>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi8>) {top_k = 2 : i64} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  return
}

// -----
func.func @f(%x: tensor<?x64xbf16>, %l: tensor<?x8xbf16>, %g: tensor<8x32x64xbf16>,
             %d: tensor<8x32x64xbf16>, %o: tensor<?x64xbf16>, %s: tensor<?x1744xi8>) {
  // expected-error @below {{dimension 1 of 'down' (32) must equal the hidden size (64)}}
  %r:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x8xbf16>) gate(%g : tensor<8x32x64xbf16>) up(%g : tensor<8x32x64xbf16>) down(%d : tensor<8x32x64xbf16>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi8>) {top_k = 2 : i64} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  return
}

// -----
func.func @f(%x: tensor<?x64xbf16>, %l: tensor<?x8xbf16>, %g: tensor<8x32x64xbf16>,
             %d: tensor<8x64x32xbf16>, %o: tensor<?x64xbf16>, %s: tensor<?x1744xi32>) {
  // expected-error @below {{'scratch' must have element type 'i8', got 'i32'}}
  %r:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x8xbf16>) gate(%g : tensor<8x32x64xbf16>) up(%g : tensor<8x32x64xbf16>) down(%d : tensor<8x64x32xbf16>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi32>) {top_k = 2 : i64} -> tensor<?x64xbf16>, tensor<?x1744xi32>
  return
}

// -----
func.func @f(%x: tensor<?x64xbf16>, %l: tensor<?x8xf16>, %g: tensor<8x32x64xbf16>,
             %d: tensor<8x64x32xbf16>, %o: tensor<?x64xbf16>, %s: tensor<?x1744xi8>) {
  // expected-error @below {{'logits' must be 'bf16' or f32, got 'f16'}}
  %r:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x8xf16>) gate(%g : tensor<8x32x64xbf16>) up(%g : tensor<8x32x64xbf16>) down(%d : tensor<8x64x32xbf16>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi8>) {top_k = 2 : i64} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  return
}

// -----
func.func @f(%x: tensor<?x64xbf16>, %l: tensor<?x8xbf16>, %g: tensor<8x32xbf16>,
             %d: tensor<8x64x32xbf16>, %o: tensor<?x64xbf16>, %s: tensor<?x1744xi8>) {
  // expected-error @below {{'gate' must have rank 3, got 'tensor<8x32xbf16>'}}
  %r:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x8xbf16>) gate(%g : tensor<8x32xbf16>) up(%g : tensor<8x32xbf16>) down(%d : tensor<8x64x32xbf16>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi8>) {top_k = 2 : i64} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  return
}

// -----
func.func @f(%x: tensor<?x64xbf16>, %l: tensor<?x8xbf16>, %g: tensor<8x32x64xbf16>,
             %d: tensor<8x64x32xbf16>, %o: tensor<?x64xbf16>, %s: tensor<?x1744xi8>) {
  // expected-error @below {{'kiln.moe' op attribute 'top_k' failed to satisfy constraint}}
  %r:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x8xbf16>) gate(%g : tensor<8x32x64xbf16>) up(%g : tensor<8x32x64xbf16>) down(%d : tensor<8x64x32xbf16>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi8>) {top_k = 0 : i64} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  return
}

// -----
// expected-error @below {{weight 'a.*.b.*' holds more than one '*'}}
kiln.weight @"a.*.b.*" : tensor<2x2x4xbf16>

// -----
// expected-error @below {{stacked weight 'a.*.w' needs rank >= 2 (the leading dimension indexes '*')}}
kiln.weight @"a.*.w" : tensor<8xbf16>

// -----
func.func @f(%x: tensor<?x64xbf16>, %w: tensor<2x64xbf16>, %v: tensor<?x64xbf16>, %o: tensor<?x64xbf16>) {
  // expected-error @below {{dimension 0 of 'gate_weight' (2) must equal one gate output (1)}}
  %r = kiln.sigmoid_gate ins(%x, %w, %v : tensor<?x64xbf16>, tensor<2x64xbf16>, tensor<?x64xbf16>) outs(%o : tensor<?x64xbf16>) -> tensor<?x64xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x64xbf16>, %w: tensor<1x32xbf16>, %v: tensor<?x64xbf16>, %o: tensor<?x64xbf16>) {
  // expected-error @below {{dimension 1 of 'gate_weight' (32) must equal the input features (64)}}
  %r = kiln.sigmoid_gate ins(%x, %w, %v : tensor<?x64xbf16>, tensor<1x32xbf16>, tensor<?x64xbf16>) outs(%o : tensor<?x64xbf16>) -> tensor<?x64xbf16>
  return
}

// -----
func.func @f(%x: tensor<4x64xbf16>, %w: tensor<1x64xbf16>, %v: tensor<8x64xbf16>, %o: tensor<8x64xbf16>) {
  // expected-error @below {{dimension 0 of 'value' (8) must equal the rows (4)}}
  %r = kiln.sigmoid_gate ins(%x, %w, %v : tensor<4x64xbf16>, tensor<1x64xbf16>, tensor<8x64xbf16>) outs(%o : tensor<8x64xbf16>) -> tensor<8x64xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x64xbf16>, %w: tensor<1x64xf32>, %v: tensor<?x64xbf16>, %o: tensor<?x64xbf16>) {
  // expected-error @below {{'gate_weight' must have element type 'bf16', got 'f32'}}
  %r = kiln.sigmoid_gate ins(%x, %w, %v : tensor<?x64xbf16>, tensor<1x64xf32>, tensor<?x64xbf16>) outs(%o : tensor<?x64xbf16>) -> tensor<?x64xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x64xbf16>, %l: tensor<?x2048xbf16>, %g: tensor<2048x32x64xbf16>,
             %d: tensor<2048x64x32xbf16>, %o: tensor<?x64xbf16>, %s: tensor<?x1744xi8>) {
  // expected-error @below {{supports up to 1024 experts and top_k 32, got 2048 and 2}}
  %r:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x2048xbf16>) gate(%g : tensor<2048x32x64xbf16>) up(%g : tensor<2048x32x64xbf16>) down(%d : tensor<2048x64x32xbf16>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi8>) {top_k = 2 : i64} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  return
}

// -----
func.func @f(%x: tensor<?x64xbf16>, %l: tensor<?x64xbf16>, %g: tensor<64x32x64xbf16>,
             %d: tensor<64x64x32xbf16>, %o: tensor<?x64xbf16>, %s: tensor<?x1744xi8>) {
  // expected-error @below {{supports up to 1024 experts and top_k 32, got 64 and 33}}
  %r:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x64xbf16>) gate(%g : tensor<64x32x64xbf16>) up(%g : tensor<64x32x64xbf16>) down(%d : tensor<64x64x32xbf16>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi8>) {top_k = 33 : i64} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  return
}

// -----
func.func @f(%x: tensor<?x64xbf16>, %l: tensor<?x8xf32>, %u: tensor<8x32x64xbf16>,
             %d: tensor<8x64x32xbf16>, %b: tensor<8xf32>, %o: tensor<?x64xbf16>, %s: tensor<?x1744xi8>) {
  // expected-error @below {{top_groups 3 exceeds the 2 groups}}
  %r:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x8xf32>) up(%u : tensor<8x32x64xbf16>) down(%d : tensor<8x64x32xbf16>) score_bias(%b : tensor<8xf32>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi8>) {top_k = 2 : i64, groups = 2 : i64, top_groups = 3 : i64} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  return
}

// -----
func.func @f(%x: tensor<?x64xbf16>, %l: tensor<?x8xf32>, %u: tensor<8x32x64xbf16>,
             %d: tensor<8x64x32xbf16>, %b: tensor<8xf32>, %o: tensor<?x64xbf16>, %s: tensor<?x1744xi8>) {
  // expected-error @below {{3 groups do not split the 8 experts into equal groups of at least 2}}
  %r:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x8xf32>) up(%u : tensor<8x32x64xbf16>) down(%d : tensor<8x64x32xbf16>) score_bias(%b : tensor<8xf32>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi8>) {top_k = 2 : i64, groups = 3 : i64} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  return
}

// -----
func.func @f(%x: tensor<?x64xbf16>, %l: tensor<?x8xf32>, %u: tensor<8x32x64xbf16>,
             %d: tensor<8x64x32xbf16>, %b: tensor<8xf32>, %o: tensor<?x64xbf16>, %s: tensor<?x1744xi8>) {
  // expected-error @below {{8 groups do not split the 8 experts into equal groups of at least 2}}
  %r:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x8xf32>) up(%u : tensor<8x32x64xbf16>) down(%d : tensor<8x64x32xbf16>) score_bias(%b : tensor<8xf32>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi8>) {top_k = 2 : i64, groups = 8 : i64} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  return
}

// -----
func.func @f(%x: tensor<?x64xbf16>, %l: tensor<?x8xf32>, %u: tensor<8x32x64xbf16>,
             %d: tensor<8x64x32xbf16>, %b: tensor<8xf32>, %o: tensor<?x64xbf16>, %s: tensor<?x1744xi8>) {
  // expected-error @below {{the 1 kept groups hold 2 experts, fewer than top_k 3}}
  %r:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x8xf32>) up(%u : tensor<8x32x64xbf16>) down(%d : tensor<8x64x32xbf16>) score_bias(%b : tensor<8xf32>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi8>) {top_k = 3 : i64, groups = 4 : i64, top_groups = 1 : i64} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  return
}

// -----
func.func @f(%x: tensor<?x64xbf16>, %l: tensor<?x8xf32>, %u: tensor<8x32x64xbf16>,
             %d: tensor<8x64x32xbf16>, %b: tensor<8xf32>, %o: tensor<?x64xbf16>, %s: tensor<?x1744xi8>) {
  // expected-error @below {{routed_scale must be positive}}
  %r:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x8xf32>) up(%u : tensor<8x32x64xbf16>) down(%d : tensor<8x64x32xbf16>) score_bias(%b : tensor<8xf32>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi8>) {top_k = 2 : i64, routed_scale = 0.0 : f32} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  return
}

// -----
func.func @f(%x: tensor<?x64xbf16>, %l: tensor<?x8xf32>, %u: tensor<8x32x64xbf16>,
             %d: tensor<8x64x32xbf16>, %b: tensor<8xf32>, %o: tensor<?x64xbf16>, %s: tensor<?x1744xi8>) {
  // expected-error @below {{gated experts run SwiGLU: activation must be silu, got relu2}}
  %r:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x8xf32>) gate(%u : tensor<8x32x64xbf16>) up(%u : tensor<8x32x64xbf16>) down(%d : tensor<8x64x32xbf16>) score_bias(%b : tensor<8xf32>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi8>) {top_k = 2 : i64, activation = #kiln<activation relu2>} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  return
}

// -----
func.func @f(%x: tensor<?x64xbf16>, %l: tensor<?x8xf32>, %u: tensor<8x32x64xbf16>,
             %d: tensor<8x64x32xbf16>, %b: tensor<4xf32>, %o: tensor<?x64xbf16>, %s: tensor<?x1744xi8>) {
  // expected-error @below {{dimension 0 of 'score_bias' (4) must equal the expert count (8)}}
  %r:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x8xf32>) up(%u : tensor<8x32x64xbf16>) down(%d : tensor<8x64x32xbf16>) score_bias(%b : tensor<4xf32>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi8>) {top_k = 2 : i64} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  return
}

// -----
func.func @f(%x: tensor<?x64xbf16>, %l: tensor<?x8xf32>, %u: tensor<8x32x64xbf16>,
             %d: tensor<8x64x32xbf16>, %b: tensor<8xbf16>, %o: tensor<?x64xbf16>, %s: tensor<?x1744xi8>) {
  // expected-error @below {{'score_bias' must have element type 'f32', got 'bf16'}}
  %r:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x8xf32>) up(%u : tensor<8x32x64xbf16>) down(%d : tensor<8x64x32xbf16>) score_bias(%b : tensor<8xbf16>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi8>) {top_k = 2 : i64} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  return
}

// -----
// DeepSeek-V2's group_limited_greedy ranks groups; without groups there is nothing to rank.
func.func @f(%x: tensor<?x64xbf16>, %l: tensor<?x8xf32>, %u: tensor<8x32x64xbf16>,
             %d: tensor<8x64x32xbf16>, %o: tensor<?x64xbf16>, %s: tensor<?x1744xi8>) {
  // expected-error @below {{'group_max' chooses between groups; it needs groups > 1}}
  %r:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x8xf32>) gate(%u : tensor<8x32x64xbf16>) up(%u : tensor<8x32x64xbf16>) down(%d : tensor<8x64x32xbf16>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi8>) {top_k = 2 : i64, group_max} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  return
}

// -----
func.func @f(%x: tensor<?x64xbf16>, %w: tensor<8x64xbf16>, %b: tensor<8xbf16>, %o: tensor<?x8xf32>) {
  // expected-error @below {{an f32 result takes no bias}}
  %r = kiln.linear ins(%x, %w : tensor<?x64xbf16>, tensor<8x64xbf16>) bias(%b : tensor<8xbf16>) outs(%o : tensor<?x8xf32>) -> tensor<?x8xf32>
  return
}

// -----
// expected-error @below {{'row_groups' describes 4 groups of 48 units, which do not divide the weight's 16384 elements evenly}}
kiln.weight @w {row_groups = array<i64: 4, 32, 16>} : tensor<256x64xbf16>

// -----
// expected-error @below {{'row_groups' needs a group count and at least two parts, got 2 values}}
kiln.weight @w {row_groups = array<i64: 4, 64>} : tensor<256x64xbf16>

// -----
// expected-error @below {{'row_groups' values must be positive}}
kiln.weight @w {row_groups = array<i64: 4, 0, 64>} : tensor<256x64xbf16>

// -----
// expected-error @below {{a stacked weight cannot regroup its rows}}
kiln.weight @"e.*.w" {row_groups = array<i64: 2, 2, 2>} : tensor<8x8x64xbf16>
