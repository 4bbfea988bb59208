// Every verifier diagnostic of the Gated DeltaNet ops.
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

func.func @v_heads_not_multiple(%qk: tensor<?x16x128xbf16>, %v: tensor<?x24x128xbf16>, %gb: tensor<?x24xbf16>) {
  // expected-error @below {{num_v_heads (24) must be a multiple of num_k_heads (16)}}
  %o = kiln.gated_delta_net layer 0 %qk, %qk, %v, %gb, %gb {num_k_heads = 16, num_v_heads = 24, head_k_dim = 128, head_v_dim = 128}
    : tensor<?x16x128xbf16>, tensor<?x16x128xbf16>, tensor<?x24x128xbf16>, tensor<?x24xbf16>, tensor<?x24xbf16> -> tensor<?x24x128xbf16>
  return
}

// -----
func.func @zero_head_dim(%qk: tensor<?x16x128xbf16>, %v: tensor<?x32x128xbf16>, %gb: tensor<?x32xbf16>) {
  // expected-error @below {{'head_k_dim' must be positive}}
  %o = kiln.gated_delta_net layer 0 %qk, %qk, %v, %gb, %gb {num_k_heads = 16, num_v_heads = 32, head_k_dim = 0, head_v_dim = 128}
    : tensor<?x16x128xbf16>, tensor<?x16x128xbf16>, tensor<?x32x128xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16> -> tensor<?x32x128xbf16>
  return
}

// -----
func.func @v_shape(%qk: tensor<?x16x128xbf16>, %v: tensor<?x32x64xbf16>, %gb: tensor<?x32xbf16>) {
  // expected-error @below {{'v'}}
  %o = kiln.gated_delta_net layer 0 %qk, %qk, %v, %gb, %gb {num_k_heads = 16, num_v_heads = 32, head_k_dim = 128, head_v_dim = 128}
    : tensor<?x16x128xbf16>, tensor<?x16x128xbf16>, tensor<?x32x64xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16> -> tensor<?x32x128xbf16>
  return
}

// -----
func.func @b_shape(%qk: tensor<?x16x128xbf16>, %v: tensor<?x32x128xbf16>, %g: tensor<?x32xbf16>, %b: tensor<?x16xbf16>) {
  // expected-error @below {{'b' must have shape [?, 32]}}
  %o = kiln.gated_delta_net layer 0 %qk, %qk, %v, %g, %b {num_k_heads = 16, num_v_heads = 32, head_k_dim = 128, head_v_dim = 128}
    : tensor<?x16x128xbf16>, tensor<?x16x128xbf16>, tensor<?x32x128xbf16>, tensor<?x32xbf16>, tensor<?x16xbf16> -> tensor<?x32x128xbf16>
  return
}

// -----
func.func @replay_partial(%qk: tensor<?x16x128xbf16>, %v: tensor<?x32x128xbf16>, %gb: tensor<?x32xbf16>,
                          %init: tensor<?x32x128xbf16>) {
  %s = kiln.cache_resource layer 0 unit [32, 128, 128] of f32 shard 0 : !kiln.cache<gdn_state>
  %k = kiln.cache_resource layer 0 unit [2, 3, 16, 128] of bf16 shard 2 speculative_only : !kiln.cache<gdn_replay_k>
  // expected-error @below {{replay slots are all-or-none: replay mode needs replay_k, replay_v and replay_gb}}
  %o = kiln.cached_gated_delta_net layer 0 %qk, %qk, %v, %gb, %gb state(%s : !kiln.cache<gdn_state>)
      replay_k(%k : !kiln.cache<gdn_replay_k>) outs(%init : tensor<?x32x128xbf16>)
      {num_k_heads = 16, num_v_heads = 32, head_k_dim = 128, head_v_dim = 128}
      : tensor<?x16x128xbf16>, tensor<?x16x128xbf16>, tensor<?x32x128xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16> -> tensor<?x32x128xbf16>
  return
}

// -----
func.func @state_slot_kind(%qk: tensor<?x16x128xbf16>, %v: tensor<?x32x128xbf16>, %gb: tensor<?x32xbf16>,
                           %init: tensor<?x32x128xbf16>) {
  %s = kiln.cache_resource layer 0 unit [32, 128, 128] of f32 shard 0 : !kiln.cache<ssm_state>
  // expected-error @below {{ssm_state}}
  %o = kiln.cached_gated_delta_net layer 0 %qk, %qk, %v, %gb, %gb state(%s : !kiln.cache<ssm_state>)
      outs(%init : tensor<?x32x128xbf16>)
      {num_k_heads = 16, num_v_heads = 32, head_k_dim = 128, head_v_dim = 128}
      : tensor<?x16x128xbf16>, tensor<?x16x128xbf16>, tensor<?x32x128xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16> -> tensor<?x32x128xbf16>
  return
}

// -----
// The per-draft GDN states exist only for speculation.
// expected-error @below {{a intermediate_gdn_state resource exists only for speculative decoding and must be marked 'speculative_only'}}
%i = kiln.cache_resource layer 0 unit [4, 32, 128, 128] of f32 shard 1 : !kiln.cache<intermediate_gdn_state>

// -----
// The layer's parameters are f32 (the checkpoint's bf16 values widen at load).
func.func @a_log_type(%qk: tensor<?x16x128xbf16>, %v: tensor<?x32x128xbf16>, %ab: tensor<?x32xbf16>,
                      %alog: tensor<32xbf16>, %dt: tensor<32xf32>) {
  // expected-error @below {{'a_log' must be f32, got 'bf16'}}
  %o = kiln.gated_delta_net layer 0 %qk, %qk, %v, %ab, %ab a_log(%alog : tensor<32xbf16>) dt_bias(%dt : tensor<32xf32>)
      {num_k_heads = 16, num_v_heads = 32, head_k_dim = 128, head_v_dim = 128}
    : tensor<?x16x128xbf16>, tensor<?x16x128xbf16>, tensor<?x32x128xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16> -> tensor<?x32x128xbf16>
  return
}

// -----
func.func @dt_bias_shape(%qk: tensor<?x16x128xbf16>, %v: tensor<?x32x128xbf16>, %ab: tensor<?x32xbf16>,
                         %alog: tensor<32xf32>, %dt: tensor<16xf32>) {
  // expected-error @below {{'dt_bias' must have shape [32]}}
  %o = kiln.gated_delta_net layer 0 %qk, %qk, %v, %ab, %ab a_log(%alog : tensor<32xf32>) dt_bias(%dt : tensor<16xf32>)
      {num_k_heads = 16, num_v_heads = 32, head_k_dim = 128, head_v_dim = 128}
    : tensor<?x16x128xbf16>, tensor<?x16x128xbf16>, tensor<?x32x128xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16> -> tensor<?x32x128xbf16>
  return
}

// -----
// The scratch holds kiln_rt_gdn_scratch_bytes_per_token bytes a token: 2 x (2 x 16 x 128
// + 32 x 128) + 8 x 32 + 5 x 256 = 17920.
func.func @scratch_width(%qk: tensor<?x16x128xbf16>, %v: tensor<?x32x128xbf16>, %ab: tensor<?x32xbf16>,
                         %alog: tensor<32xf32>, %s: tensor<?x1024xi8>) {
  // expected-error @below {{'scratch' must have shape [?, 17920]}}
  %o = kiln.gated_delta_net layer 0 %qk, %qk, %v, %ab, %ab a_log(%alog : tensor<32xf32>) dt_bias(%alog : tensor<32xf32>)
      scratch(%s : tensor<?x1024xi8>)
      {num_k_heads = 16, num_v_heads = 32, head_k_dim = 128, head_v_dim = 128}
    : tensor<?x16x128xbf16>, tensor<?x16x128xbf16>, tensor<?x32x128xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16> -> tensor<?x32x128xbf16>
  return
}
