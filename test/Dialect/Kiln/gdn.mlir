// The Gated DeltaNet ops print and parse back (model form and cached form, rewind and
// replay slots).
// RUN: kiln-opt %s | kiln-opt | FileCheck %s

// CHECK-LABEL: func.func @model_form
// CHECK: kiln.gated_delta_net layer 3 %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {head_k_dim = 128 : i64, head_v_dim = 128 : i64, num_k_heads = 16 : i64, num_v_heads = 32 : i64}
func.func @model_form(%qk: tensor<?x16x128xbf16>, %v: tensor<?x32x128xbf16>, %gb: tensor<?x32xbf16>) -> tensor<?x32x128xbf16> {
  %o = kiln.gated_delta_net layer 3 %qk, %qk, %v, %gb, %gb {num_k_heads = 16, num_v_heads = 32, head_k_dim = 128, head_v_dim = 128}
    : tensor<?x16x128xbf16>, tensor<?x16x128xbf16>, tensor<?x32x128xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16> -> tensor<?x32x128xbf16>
  return %o : tensor<?x32x128xbf16>
}

// CHECK-LABEL: func.func @cached_rewind
// CHECK: kiln.cached_gated_delta_net layer 0 {{.*}} state(%{{.*}} : !kiln.cache<gdn_state>) intermediate(%{{.*}} : !kiln.cache<intermediate_gdn_state>) outs(
func.func @cached_rewind(%qk: tensor<?x16x128xbf16>, %v: tensor<?x32x128xbf16>, %gb: tensor<?x32xbf16>,
                         %init: tensor<?x32x128xbf16>) -> tensor<?x32x128xbf16> {
  %s = kiln.cache_resource layer 0 unit [32, 128, 128] of f32 shard 0 : !kiln.cache<gdn_state>
  %i = kiln.cache_resource layer 0 unit [4, 32, 128, 128] of f32 shard 1 speculative_only : !kiln.cache<intermediate_gdn_state>
  %o = kiln.cached_gated_delta_net layer 0 %qk, %qk, %v, %gb, %gb state(%s : !kiln.cache<gdn_state>)
      intermediate(%i : !kiln.cache<intermediate_gdn_state>) outs(%init : tensor<?x32x128xbf16>)
      {num_k_heads = 16, num_v_heads = 32, head_k_dim = 128, head_v_dim = 128}
      : tensor<?x16x128xbf16>, tensor<?x16x128xbf16>, tensor<?x32x128xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16> -> tensor<?x32x128xbf16>
  return %o : tensor<?x32x128xbf16>
}

// CHECK-LABEL: func.func @cached_replay
// CHECK: replay_k(%{{.*}} : !kiln.cache<gdn_replay_k>) replay_v(%{{.*}} : !kiln.cache<gdn_replay_v>) replay_gb(%{{.*}} : !kiln.cache<gdn_replay_gb>) outs(
func.func @cached_replay(%qk: tensor<?x16x128xbf16>, %v: tensor<?x32x128xbf16>, %gb: tensor<?x32xbf16>,
                         %init: tensor<?x32x128xbf16>) -> tensor<?x32x128xbf16> {
  %s = kiln.cache_resource layer 0 unit [32, 128, 128] of f32 shard 0 : !kiln.cache<gdn_state>
  %k = kiln.cache_resource layer 0 unit [2, 3, 16, 128] of bf16 shard 2 speculative_only : !kiln.cache<gdn_replay_k>
  %vv = kiln.cache_resource layer 0 unit [2, 3, 32, 128] of bf16 shard 2 speculative_only : !kiln.cache<gdn_replay_v>
  %g = kiln.cache_resource layer 0 unit [2, 32, 3, 2] of f32 shard 1 speculative_only : !kiln.cache<gdn_replay_gb>
  %o = kiln.cached_gated_delta_net layer 0 %qk, %qk, %v, %gb, %gb state(%s : !kiln.cache<gdn_state>)
      replay_k(%k : !kiln.cache<gdn_replay_k>) replay_v(%vv : !kiln.cache<gdn_replay_v>)
      replay_gb(%g : !kiln.cache<gdn_replay_gb>)
      outs(%init : tensor<?x32x128xbf16>)
      {num_k_heads = 16, num_v_heads = 32, head_k_dim = 128, head_v_dim = 128}
      : tensor<?x16x128xbf16>, tensor<?x16x128xbf16>, tensor<?x32x128xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16> -> tensor<?x32x128xbf16>
  return %o : tensor<?x32x128xbf16>
}
