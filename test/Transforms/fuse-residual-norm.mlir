// kiln-fuse-residual-norm: a residual add followed by the RMSNorm of its sum becomes one
// kiln.add_rms_norm yielding both, in the norm's place; other uses of the sum read the
// fused op's first result. Left alone: a sum used before the norm, a norm of something
// else, per-head (rank-3) norms.
// RUN: kiln-opt %s -split-input-file --kiln-fuse-residual-norm | FileCheck %s

// CHECK-LABEL: func.func @layer
// CHECK-SAME: (%[[H:[^:]*]]: tensor<?x128xbf16>, %[[O:[^:]*]]: tensor<?x128xbf16>, %[[W:[^:]*]]: tensor<128xbf16>, %[[SI:[^:]*]]: tensor<?x128xbf16>, %[[NI:[^:]*]]: tensor<?x128xbf16>)
// CHECK-NOT: kiln.add ins
// CHECK-NOT: kiln.rms_norm
// CHECK: %[[F:.*]]:2 = kiln.add_rms_norm ins(%[[H]], %[[O]], %[[W]] : tensor<?x128xbf16>, tensor<?x128xbf16>, tensor<128xbf16>) outs(%[[SI]], %[[NI]] : tensor<?x128xbf16>, tensor<?x128xbf16>) {epsilon = 9.99999974E-6 : f32} -> tensor<?x128xbf16>, tensor<?x128xbf16>
// CHECK: %[[G:.*]] = kiln.swiglu ins(%[[F]]#1, %[[F]]#0 :
// CHECK: return %[[F]]#0, %[[G]]
func.func @layer(%h: tensor<?x128xbf16>, %o: tensor<?x128xbf16>, %w: tensor<128xbf16>,
                 %si: tensor<?x128xbf16>, %ni: tensor<?x128xbf16>) -> (tensor<?x128xbf16>, tensor<?x128xbf16>) {
  %s = kiln.add ins(%h, %o : tensor<?x128xbf16>, tensor<?x128xbf16>) outs(%si : tensor<?x128xbf16>) -> tensor<?x128xbf16>
  %n = kiln.rms_norm ins(%s, %w : tensor<?x128xbf16>, tensor<128xbf16>) outs(%ni : tensor<?x128xbf16>) {epsilon = 1.0e-5 : f32} -> tensor<?x128xbf16>
  %g = kiln.swiglu ins(%n, %s : tensor<?x128xbf16>, tensor<?x128xbf16>) outs(%o : tensor<?x128xbf16>) -> tensor<?x128xbf16>
  return %s, %g : tensor<?x128xbf16>, tensor<?x128xbf16>
}

// -----

// The sum is read before the norm: the fused op, in the norm's place, would come too late.
// CHECK-LABEL: func.func @used_before
// CHECK: kiln.add ins
// CHECK: kiln.swiglu
// CHECK: kiln.rms_norm
// CHECK-NOT: kiln.add_rms_norm
func.func @used_before(%h: tensor<?x128xbf16>, %o: tensor<?x128xbf16>, %w: tensor<128xbf16>,
                       %si: tensor<?x128xbf16>, %ni: tensor<?x128xbf16>) -> (tensor<?x128xbf16>, tensor<?x128xbf16>) {
  %s = kiln.add ins(%h, %o : tensor<?x128xbf16>, tensor<?x128xbf16>) outs(%si : tensor<?x128xbf16>) -> tensor<?x128xbf16>
  %g = kiln.swiglu ins(%s, %o : tensor<?x128xbf16>, tensor<?x128xbf16>) outs(%o : tensor<?x128xbf16>) -> tensor<?x128xbf16>
  %n = kiln.rms_norm ins(%s, %w : tensor<?x128xbf16>, tensor<128xbf16>) outs(%ni : tensor<?x128xbf16>) {epsilon = 1.0e-5 : f32} -> tensor<?x128xbf16>
  return %n, %g : tensor<?x128xbf16>, tensor<?x128xbf16>
}

// -----

// A norm of a non-sum and a per-head norm stay as they are.
// CHECK-LABEL: func.func @not_a_residual
// CHECK: kiln.rms_norm
// CHECK: kiln.add ins
// CHECK: kiln.rms_norm
// CHECK-NOT: kiln.add_rms_norm
func.func @not_a_residual(%h: tensor<?x128xbf16>, %w: tensor<128xbf16>, %ni: tensor<?x128xbf16>,
                          %q: tensor<?x4x32xbf16>, %qw: tensor<32xbf16>) -> (tensor<?x128xbf16>, tensor<?x4x32xbf16>) {
  %n = kiln.rms_norm ins(%h, %w : tensor<?x128xbf16>, tensor<128xbf16>) outs(%ni : tensor<?x128xbf16>) {epsilon = 1.0e-5 : f32} -> tensor<?x128xbf16>
  %s = kiln.add ins(%q, %q : tensor<?x4x32xbf16>, tensor<?x4x32xbf16>) outs(%q : tensor<?x4x32xbf16>) -> tensor<?x4x32xbf16>
  %qn = kiln.rms_norm ins(%s, %qw : tensor<?x4x32xbf16>, tensor<32xbf16>) outs(%q : tensor<?x4x32xbf16>) {epsilon = 1.0e-6 : f32} -> tensor<?x4x32xbf16>
  return %n, %qn : tensor<?x128xbf16>, tensor<?x4x32xbf16>
}

// -----

// On buffers (after bufferization) nothing is fused.
// CHECK-LABEL: func.func @buffers
// CHECK: kiln.add ins
// CHECK: kiln.rms_norm
func.func @buffers(%h: memref<?x128xbf16>, %w: memref<128xbf16>, %s: memref<?x128xbf16>, %n: memref<?x128xbf16>) {
  kiln.add ins(%h, %h : memref<?x128xbf16>, memref<?x128xbf16>) outs(%s : memref<?x128xbf16>)
  kiln.rms_norm ins(%s, %w : memref<?x128xbf16>, memref<128xbf16>) outs(%n : memref<?x128xbf16>) {epsilon = 1.0e-5 : f32}
  return
}

// -----

// The norm's weight form travels into the fused op: zero_centered (Qwen3-Next) and
// f32_weight (gpt-oss) alike.
// CHECK-LABEL: func.func @weight_forms
// CHECK-NOT: kiln.rms_norm
// CHECK: kiln.add_rms_norm {{.*}} {epsilon = 9.99999997E-7 : f32, zero_centered}
// CHECK: kiln.add_rms_norm {{.*}} {epsilon = 9.99999974E-6 : f32, f32_weight}
func.func @weight_forms(%h: tensor<?x128xbf16>, %o: tensor<?x128xbf16>, %w: tensor<128xbf16>,
                        %si: tensor<?x128xbf16>, %ni: tensor<?x128xbf16>) -> (tensor<?x128xbf16>, tensor<?x128xbf16>) {
  %s = kiln.add ins(%h, %o : tensor<?x128xbf16>, tensor<?x128xbf16>) outs(%si : tensor<?x128xbf16>) -> tensor<?x128xbf16>
  %n = kiln.rms_norm ins(%s, %w : tensor<?x128xbf16>, tensor<128xbf16>) outs(%ni : tensor<?x128xbf16>) {epsilon = 1.0e-6 : f32, zero_centered} -> tensor<?x128xbf16>
  %s2 = kiln.add ins(%s, %n : tensor<?x128xbf16>, tensor<?x128xbf16>) outs(%si : tensor<?x128xbf16>) -> tensor<?x128xbf16>
  %n2 = kiln.rms_norm ins(%s2, %w : tensor<?x128xbf16>, tensor<128xbf16>) outs(%ni : tensor<?x128xbf16>) {epsilon = 1.0e-5 : f32, f32_weight} -> tensor<?x128xbf16>
  return %s2, %n2 : tensor<?x128xbf16>, tensor<?x128xbf16>
}
