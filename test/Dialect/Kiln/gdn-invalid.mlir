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
func.func @beta_shape(%qk: tensor<?x16x128xbf16>, %v: tensor<?x32x128xbf16>, %g: tensor<?x32xbf16>, %b: tensor<?x16xbf16>) {
  // expected-error @below {{'beta'}}
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
