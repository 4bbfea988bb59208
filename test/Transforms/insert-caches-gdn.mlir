// RUN: kiln-opt %s --split-input-file --kiln-insert-caches | FileCheck %s

// Gated DeltaNet (Qwen3-Next's linear attention) without speculation: the recurrent
// state [v heads, k dim, v dim] in the SSM state dtype and the conv state, nothing
// speculative-only.
// CHECK-LABEL: func.func @no_spec
// CHECK-NOT: speculative_only
// CHECK: %[[CONV:.*]] = kiln.cache_resource layer 0 unit [8192, 3] of bf16 shard 0 : !kiln.cache<conv_state>
// CHECK: %[[S:.*]] = kiln.cache_resource layer 0 unit [32, 128, 128] of f32 shard 0 : !kiln.cache<gdn_state>
// CHECK: kiln.cached_causal_conv layer 0 {{.*}} state(%[[CONV]] : !kiln.cache<conv_state>) outs(
// CHECK: kiln.cached_gated_delta_net layer 0 {{.*}} state(%[[S]] : !kiln.cache<gdn_state>) outs(%{{[^ ]*}} : tensor<?x32x128xbf16>) {
// CHECK-NOT: speculative_only
module attributes {kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 1024, kv_dtype = bf16>} {
  func.func @no_spec(%xc: tensor<?x8192xbf16>, %qk: tensor<?x16x128xbf16>, %v: tensor<?x32x128xbf16>,
                     %gb: tensor<?x32xbf16>) {
    %c0 = kiln.causal_conv layer 0 %xc {conv_dim = 8192, kernel_size = 4, silu} : tensor<?x8192xbf16> -> tensor<?x8192xbf16>
    %o0 = kiln.gated_delta_net layer 0 %qk, %qk, %v, %gb, %gb {num_k_heads = 16, num_v_heads = 32, head_k_dim = 128, head_v_dim = 128}
      : tensor<?x16x128xbf16>, tensor<?x16x128xbf16>, tensor<?x32x128xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16> -> tensor<?x32x128xbf16>
    return
  }
}

// -----
// Rewind mode (ngram:3): the state after each of the 1 + 3 verified tokens, sharded by
// value head like the state itself.
// CHECK-LABEL: func.func @rewind
// CHECK: %[[CI:.*]] = kiln.cache_resource layer 0 unit [4, 8192, 3] of bf16 shard 1 speculative_only : !kiln.cache<intermediate_conv_state>
// CHECK: %[[SI:.*]] = kiln.cache_resource layer 0 unit [4, 32, 128, 128] of f32 shard 1 speculative_only : !kiln.cache<intermediate_gdn_state>
// CHECK: kiln.cached_gated_delta_net layer 0 {{.*}} intermediate(%[[SI]] : !kiln.cache<intermediate_gdn_state>)
module attributes {kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 1024, kv_dtype = bf16>,
                   kiln.spec = #kiln.spec<mode = ngram, max_draft_len = 3, ssm = rewind>} {
  func.func @rewind(%xc: tensor<?x8192xbf16>, %qk: tensor<?x16x128xbf16>, %v: tensor<?x32x128xbf16>,
                    %gb: tensor<?x32xbf16>) {
    %c0 = kiln.causal_conv layer 0 %xc {conv_dim = 8192, kernel_size = 4, silu} : tensor<?x8192xbf16> -> tensor<?x8192xbf16>
    %o0 = kiln.gated_delta_net layer 0 %qk, %qk, %v, %gb, %gb {num_k_heads = 16, num_v_heads = 32, head_k_dim = 128, head_v_dim = 128}
      : tensor<?x16x128xbf16>, tensor<?x16x128xbf16>, tensor<?x32x128xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16> -> tensor<?x32x128xbf16>
    return
  }
}

// -----
// Replay mode: k, v, g/beta of the last two steps and the index instead of per-draft
// states.
// CHECK-LABEL: func.func @replay
// CHECK-NOT: intermediate_gdn_state
// CHECK-DAG: kiln.cache_resource layer 0 unit [2, 3, 16, 128] of bf16 shard 2 speculative_only : !kiln.cache<gdn_replay_k>
// CHECK-DAG: kiln.cache_resource layer 0 unit [2, 3, 32, 128] of bf16 shard 2 speculative_only : !kiln.cache<gdn_replay_v>
// CHECK-DAG: kiln.cache_resource layer 0 unit [2, 32, 3, 2] of f32 shard 1 speculative_only : !kiln.cache<gdn_replay_gb>
// CHECK: kiln.cached_gated_delta_net layer 0 {{.*}} replay_k({{.*}}) replay_v({{.*}}) replay_gb({{.*}}) outs(
module attributes {kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 1024, kv_dtype = bf16>,
                   kiln.spec = #kiln.spec<mode = ngram, max_draft_len = 2, ssm = replay>} {
  func.func @replay(%qk: tensor<?x16x128xbf16>, %v: tensor<?x32x128xbf16>, %gb: tensor<?x32xbf16>) {
    %o0 = kiln.gated_delta_net layer 0 %qk, %qk, %v, %gb, %gb {num_k_heads = 16, num_v_heads = 32, head_k_dim = 128, head_v_dim = 128}
      : tensor<?x16x128xbf16>, tensor<?x16x128xbf16>, tensor<?x32x128xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16> -> tensor<?x32x128xbf16>
    return
  }
}
