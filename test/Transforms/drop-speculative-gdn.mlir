// Gated DeltaNet through the generic slot interface: without kiln.spec the per-draft
// states and the replay buffers are erased and their slots emptied, the state kept.
// RUN: kiln-opt %s -split-input-file -kiln-drop-speculative-resources="remarks=false" | FileCheck %s

// CHECK-LABEL: func.func @rewind_dropped
// CHECK-NOT: speculative_only
// CHECK: kiln.cached_gated_delta_net layer 0 {{.*}} state(%{{[^ ]*}} : !kiln.cache<gdn_state>) outs(
// CHECK-NOT: intermediate(
module attributes {kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 1024, kv_dtype = bf16>} {
  func.func @rewind_dropped(%qk: tensor<?x16x128xbf16>, %v: tensor<?x32x128xbf16>, %gb: tensor<?x32xbf16>) {
    %s = kiln.cache_resource layer 0 unit [32, 128, 128] of f32 shard 0 : !kiln.cache<gdn_state>
    %i = kiln.cache_resource layer 0 unit [4, 32, 128, 128] of f32 shard 1 speculative_only : !kiln.cache<intermediate_gdn_state>
    %o = kiln.cached_gated_delta_net layer 0 %qk, %qk, %v, %gb, %gb state(%s : !kiln.cache<gdn_state>)
        intermediate(%i : !kiln.cache<intermediate_gdn_state>) outs(%v : tensor<?x32x128xbf16>)
        {num_k_heads = 16, num_v_heads = 32, head_k_dim = 128, head_v_dim = 128}
        : tensor<?x16x128xbf16>, tensor<?x16x128xbf16>, tensor<?x32x128xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16> -> tensor<?x32x128xbf16>
    return
  }
}

// -----
// CHECK-LABEL: func.func @replay_dropped
// CHECK-NOT: replay_
// CHECK: kiln.cached_gated_delta_net layer 0 {{.*}} state(%{{[^ ]*}} : !kiln.cache<gdn_state>) outs(
// CHECK-NOT: replay_
module attributes {kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 1024, kv_dtype = bf16>} {
  func.func @replay_dropped(%qk: tensor<?x16x128xbf16>, %v: tensor<?x32x128xbf16>, %gb: tensor<?x32xbf16>) {
    %s = kiln.cache_resource layer 0 unit [32, 128, 128] of f32 shard 0 : !kiln.cache<gdn_state>
    %k = kiln.cache_resource layer 0 unit [2, 3, 16, 128] of bf16 shard 2 speculative_only : !kiln.cache<gdn_replay_k>
    %vv = kiln.cache_resource layer 0 unit [2, 3, 32, 128] of bf16 shard 2 speculative_only : !kiln.cache<gdn_replay_v>
    %g = kiln.cache_resource layer 0 unit [2, 32, 3, 2] of f32 shard 1 speculative_only : !kiln.cache<gdn_replay_gb>
    %o = kiln.cached_gated_delta_net layer 0 %qk, %qk, %v, %gb, %gb state(%s : !kiln.cache<gdn_state>)
        replay_k(%k : !kiln.cache<gdn_replay_k>) replay_v(%vv : !kiln.cache<gdn_replay_v>)
        replay_gb(%g : !kiln.cache<gdn_replay_gb>)
        outs(%v : tensor<?x32x128xbf16>)
        {num_k_heads = 16, num_v_heads = 32, head_k_dim = 128, head_v_dim = 128}
        : tensor<?x16x128xbf16>, tensor<?x16x128xbf16>, tensor<?x32x128xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16> -> tensor<?x32x128xbf16>
    return
  }
}
