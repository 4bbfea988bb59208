// gpt-oss's additions round-trip: attention sinks, biased experts with the clamped
// SwiGLU, and a weight the loader rearranges from the checkpoint's layout.
// RUN: kiln-opt %s | kiln-opt | FileCheck %s

// CHECK: kiln.weight @gate_up {checkpoint_shape = array<i64: 8, 64, 64>, row_groups = array<i64: 256, 1, 1>, transpose_checkpoint} : tensor<2x8x32x64xbf16>
kiln.weight @gate_up {checkpoint_shape = array<i64: 8, 64, 64>, transpose_checkpoint, row_groups = array<i64: 256, 1, 1>} : tensor<2x8x32x64xbf16>
// CHECK: kiln.weight @mxfp4 {checkpoint_shape = array<i64: 8, 64, 64>, mxfp4_checkpoint, row_groups = array<i64: 256, 1, 1>} : tensor<2x8x32x64xbf16>
kiln.weight @mxfp4 {mxfp4_checkpoint, checkpoint_shape = array<i64: 8, 64, 64>, row_groups = array<i64: 256, 1, 1>} : tensor<2x8x32x64xbf16>

// CHECK-LABEL: func.func @sinks
func.func @sinks(%q: tensor<?x4x64xbf16>, %k: tensor<?x2x64xbf16>, %s: tensor<4xf32>) -> tensor<?x4x64xbf16> {
  // CHECK: kiln.attention layer 0 %{{.*}}, %{{.*}}, %{{.*}} sinks(%{{.*}} : tensor<4xf32>) {head_dim = 64 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, sliding_window = 128 : i64}
  %0 = kiln.attention layer 0 %q, %k, %k sinks(%s : tensor<4xf32>) {num_heads = 4, num_kv_heads = 2, head_dim = 64, sliding_window = 128} : tensor<?x4x64xbf16>, tensor<?x2x64xbf16>, tensor<?x2x64xbf16> -> tensor<?x4x64xbf16>
  return %0 : tensor<?x4x64xbf16>
}

// CHECK-LABEL: func.func @biased_experts
func.func @biased_experts(%x: tensor<?x64xbf16>, %l: tensor<?x8xbf16>, %g: tensor<8x32x64xbf16>,
                          %d: tensor<8x64x32xbf16>, %gb: tensor<8x32xbf16>, %db: tensor<8x64xbf16>,
                          %o: tensor<?x64xbf16>, %s: tensor<?x1744xi8>) -> tensor<?x64xbf16> {
  // CHECK: kiln.moe {{.*}} gate_bias(%{{.*}} : tensor<8x32xbf16>) up_bias(%{{.*}} : tensor<8x32xbf16>) down_bias(%{{.*}} : tensor<8x64xbf16>) outs
  // CHECK-SAME: swiglu_alpha = 1.702000e+00 : f32, swiglu_limit = 7.000000e+00 : f32
  %r:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x8xbf16>) gate(%g : tensor<8x32x64xbf16>) up(%g : tensor<8x32x64xbf16>) down(%d : tensor<8x64x32xbf16>) gate_bias(%gb : tensor<8x32xbf16>) up_bias(%gb : tensor<8x32xbf16>) down_bias(%db : tensor<8x64xbf16>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi8>) {top_k = 2 : i64, normalize_top_k, round_weights, swiglu_limit = 7.0 : f32, swiglu_alpha = 1.702 : f32} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  return %r#0 : tensor<?x64xbf16>
}
