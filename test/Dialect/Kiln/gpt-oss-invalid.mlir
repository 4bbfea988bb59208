// Every verifier diagnostic of gpt-oss's additions: attention sinks, expert biases, the
// clamped SwiGLU and the checkpoint layout of a weight.
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

func.func @f(%q: tensor<?x4x64xbf16>, %k: tensor<?x2x64xbf16>, %s: tensor<2xf32>) {
  // expected-error @below {{'sinks' must have shape [4], got 'tensor<2xf32>'}}
  %0 = kiln.attention layer 0 %q, %k, %k sinks(%s : tensor<2xf32>) {num_heads = 4, num_kv_heads = 2, head_dim = 64} : tensor<?x4x64xbf16>, tensor<?x2x64xbf16>, tensor<?x2x64xbf16> -> tensor<?x4x64xbf16>
  return
}

// -----
func.func @f(%q: tensor<?x4x64xbf16>, %k: tensor<?x2x64xbf16>, %s: tensor<4xbf16>) {
  // expected-error @below {{'sinks' must be f32 (one logit a head), got 'tensor<4xbf16>'}}
  %0 = kiln.attention layer 0 %q, %k, %k sinks(%s : tensor<4xbf16>) {num_heads = 4, num_kv_heads = 2, head_dim = 64} : tensor<?x4x64xbf16>, tensor<?x2x64xbf16>, tensor<?x2x64xbf16> -> tensor<?x4x64xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x64xbf16>, %l: tensor<?x8xbf16>, %u: tensor<8x32x64xbf16>,
             %d: tensor<8x64x32xbf16>, %b: tensor<8x32xbf16>, %o: tensor<?x64xbf16>, %s: tensor<?x1744xi8>) {
  // expected-error @below {{'gate_bias' needs gated experts (a 'gate' weight)}}
  %r:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x8xbf16>) up(%u : tensor<8x32x64xbf16>) down(%d : tensor<8x64x32xbf16>) gate_bias(%b : tensor<8x32xbf16>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi8>) {top_k = 2 : i64} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  return
}

// -----
func.func @f(%x: tensor<?x64xbf16>, %l: tensor<?x8xbf16>, %g: tensor<8x32x64xbf16>,
             %d: tensor<8x64x32xbf16>, %b: tensor<8x32xbf16>, %o: tensor<?x64xbf16>, %s: tensor<?x1744xi8>) {
  // expected-error @below {{dimension 1 of 'down_bias' (32) must equal the hidden size (64)}}
  %r:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x8xbf16>) gate(%g : tensor<8x32x64xbf16>) up(%g : tensor<8x32x64xbf16>) down(%d : tensor<8x64x32xbf16>) down_bias(%b : tensor<8x32xbf16>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi8>) {top_k = 2 : i64} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  return
}

// -----
func.func @f(%x: tensor<?x64xbf16>, %l: tensor<?x8xbf16>, %g: tensor<8x32x64xbf16>,
             %d: tensor<8x64x32xbf16>, %b: tensor<8x32xf32>, %o: tensor<?x64xbf16>, %s: tensor<?x1744xi8>) {
  // expected-error @below {{'up_bias' must have element type 'bf16'}}
  %r:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x8xbf16>) gate(%g : tensor<8x32x64xbf16>) up(%g : tensor<8x32x64xbf16>) down(%d : tensor<8x64x32xbf16>) up_bias(%b : tensor<8x32xf32>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi8>) {top_k = 2 : i64} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  return
}

// -----
func.func @f(%x: tensor<?x64xbf16>, %l: tensor<?x8xbf16>, %g: tensor<8x32x64xbf16>,
             %d: tensor<8x64x32xbf16>, %o: tensor<?x64xbf16>, %s: tensor<?x1744xi8>) {
  // expected-error @below {{'swiglu_limit' and 'swiglu_alpha' go together (gpt-oss's clamped SwiGLU)}}
  %r:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x8xbf16>) gate(%g : tensor<8x32x64xbf16>) up(%g : tensor<8x32x64xbf16>) down(%d : tensor<8x64x32xbf16>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi8>) {top_k = 2 : i64, swiglu_limit = 7.0 : f32} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  return
}

// -----
func.func @f(%x: tensor<?x64xbf16>, %l: tensor<?x8xbf16>, %u: tensor<8x32x64xbf16>,
             %d: tensor<8x64x32xbf16>, %o: tensor<?x64xbf16>, %s: tensor<?x1744xi8>) {
  // expected-error @below {{the clamped SwiGLU needs gated experts (a 'gate' weight)}}
  %r:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x8xbf16>) up(%u : tensor<8x32x64xbf16>) down(%d : tensor<8x64x32xbf16>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi8>) {top_k = 2 : i64, swiglu_limit = 7.0 : f32, swiglu_alpha = 1.702 : f32} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  return
}

// -----
func.func @f(%x: tensor<?x64xbf16>, %l: tensor<?x8xbf16>, %g: tensor<8x32x64xbf16>,
             %d: tensor<8x64x32xbf16>, %o: tensor<?x64xbf16>, %s: tensor<?x1744xi8>) {
  // expected-error @below {{'swiglu_limit' must be positive and finite and 'swiglu_alpha' finite, got -7.000000e+00 and 1.702000e+00}}
  %r:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x8xbf16>) gate(%g : tensor<8x32x64xbf16>) up(%g : tensor<8x32x64xbf16>) down(%d : tensor<8x64x32xbf16>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi8>) {top_k = 2 : i64, swiglu_limit = -7.0 : f32, swiglu_alpha = 1.702 : f32} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  return
}

// -----
// expected-error @below {{'checkpoint_shape' holds 4096 elements, but the weight's type 'tensor<64x128xbf16>' holds 8192}}
kiln.weight @w {checkpoint_shape = array<i64: 64, 64>} : tensor<64x128xbf16>

// -----
// expected-error @below {{'checkpoint_shape' needs positive dimensions}}
kiln.weight @w {checkpoint_shape = array<i64: 0, 64>} : tensor<64x128xbf16>

// -----
// expected-error @below {{'transpose_checkpoint' needs a checkpoint tensor of rank >= 2}}
kiln.weight @w {transpose_checkpoint} : tensor<64xbf16>

// -----
// expected-error @below {{a stacked weight loads each checkpoint tensor as it is; 'checkpoint_shape', 'transpose_checkpoint' and 'mxfp4_checkpoint' do not apply}}
kiln.weight @"e.*.w" {transpose_checkpoint} : tensor<8x8x64xbf16>

// -----
// Units of one element: gpt-oss's interleaved gate/up biases.
kiln.weight @ok {row_groups = array<i64: 256, 1, 1>} : tensor<2x8x32xbf16>
// expected-error @below {{'row_groups' describes 3 groups of 2 units, which do not divide the weight's 512 elements evenly}}
kiln.weight @w {row_groups = array<i64: 3, 1, 1>} : tensor<2x8x32xbf16>

// -----
// expected-error @below {{an MXFP4 checkpoint tensor loads as bf16, not 'f32'}}
kiln.weight @w {mxfp4_checkpoint} : tensor<8x64xf32>

// -----
// expected-error @below {{an MXFP4 checkpoint tensor's last dimension (48) must be a multiple of its 32-value blocks}}
kiln.weight @w {mxfp4_checkpoint, checkpoint_shape = array<i64: 16, 48>} : tensor<8x96xbf16>
