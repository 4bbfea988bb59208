// RUN: kiln-opt %s -split-input-file -kiln-insert-caches | FileCheck %s

// Without kiln.spec: no speculative-only resource is created; the draft layer's
// slot stays empty. Each cached op writes into a new tensor.empty sized like its
// input's token dimension.
// CHECK-LABEL: func.func @no_spec
// CHECK-SAME: (%[[XC:[^:]*]]: tensor<?x17408xbf16>, %[[X:[^:]*]]: tensor<?x128x80xbf16>, %{{[^:]*}}: tensor<?x128xbf16>, %{{[^:]*}}: tensor<?x8x128xbf16>, %[[Q:[^:]*]]: tensor<?x32x128xbf16>
// CHECK-NOT: speculative_only
// CHECK: %[[CONV:.*]] = kiln.cache_resource layer 0 unit [17408, 3] of bf16 shard 0 : !kiln.cache<conv_state>
// CHECK: %[[SSM:.*]] = kiln.cache_resource layer 0 unit [128, 80, 128] of f32 shard 0 : !kiln.cache<ssm_state>
// CHECK: %[[KV:.*]] = kiln.cache_resource layer 1 unit [2, 8, 128] of bf16 window 4096 shard 1 : !kiln.cache<kv>
// CHECK: %[[C0:.*]] = arith.constant 0 : index
// CHECK: %[[T0:.*]] = tensor.dim %[[XC]], %[[C0]] : tensor<?x17408xbf16>
// CHECK: %[[E0:.*]] = tensor.empty(%[[T0]]) : tensor<?x17408xbf16>
// CHECK: kiln.cached_causal_conv layer 0 %[[XC]] state(%[[CONV]] : !kiln.cache<conv_state>) outs(%[[E0]] : tensor<?x17408xbf16>) {
// CHECK: %[[T1:.*]] = tensor.dim %[[X]], %{{.*}} : tensor<?x128x80xbf16>
// CHECK: %[[E1:.*]] = tensor.empty(%[[T1]]) : tensor<?x128x80xbf16>
// CHECK: kiln.cached_ssm layer 0 {{.*}} state(%[[SSM]] : !kiln.cache<ssm_state>) outs(%[[E1]] : tensor<?x128x80xbf16>) {
// CHECK: %[[T2:.*]] = tensor.dim %[[Q]], %{{.*}} : tensor<?x32x128xbf16>
// CHECK: %[[E2:.*]] = tensor.empty(%[[T2]]) : tensor<?x32x128xbf16>
// CHECK: kiln.cached_attention layer 1 {{.*}} kv(%[[KV]] : !kiln.cache<kv>) outs(%[[E2]] : tensor<?x32x128xbf16>)
// CHECK: kiln.cached_attention layer 2 %{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} outs(%{{[^ ]*}} : tensor<?x32x128xbf16>) {draft = #kiln<draft mtp>
// CHECK-NOT: speculative_only
module attributes {kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 1024, kv_dtype = bf16>} {
  func.func @no_spec(%xc: tensor<?x17408xbf16>, %x: tensor<?x128x80xbf16>, %dt: tensor<?x128xbf16>,
                     %bc: tensor<?x8x128xbf16>, %q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>) {
    %c0 = kiln.causal_conv layer 0 %xc {conv_dim = 17408, kernel_size = 4, silu} : tensor<?x17408xbf16> -> tensor<?x17408xbf16>
    %s0 = kiln.ssm layer 0 %x, %dt, %bc, %bc {num_heads = 128, head_dim = 80, state_size = 128, n_groups = 8}
      : tensor<?x128x80xbf16>, tensor<?x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x128x80xbf16>
    %a1 = kiln.attention layer 1 %q, %k, %k {num_heads = 32, num_kv_heads = 8, head_dim = 128, sliding_window = 4096}
      : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
    %d2 = kiln.attention layer 2 %q, %k, %k {num_heads = 32, num_kv_heads = 8, head_dim = 128, draft = #kiln<draft mtp>}
      : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
    return
  }
}

// -----
// Rewind mode: intermediate SSM and conv states for 1 + 3 tokens; MTP layer KV.
// CHECK-LABEL: func.func @rewind
// CHECK: %[[CI:.*]] = kiln.cache_resource layer 0 unit [4, 17408, 3] of bf16 shard 1 speculative_only : !kiln.cache<intermediate_conv_state>
// CHECK: %[[SI:.*]] = kiln.cache_resource layer 0 unit [4, 128, 80, 128] of f32 shard 1 speculative_only : !kiln.cache<intermediate_ssm_state>
// CHECK: %[[DKV:.*]] = kiln.cache_resource layer 2 unit [2, 8, 128] of bf16 shard 1 speculative_only : !kiln.cache<draft_kv>
// CHECK: kiln.cached_causal_conv layer 0 {{.*}} intermediate(%[[CI]] : !kiln.cache<intermediate_conv_state>)
// CHECK: kiln.cached_ssm layer 0 {{.*}} intermediate(%[[SI]] : !kiln.cache<intermediate_ssm_state>)
// CHECK: kiln.cached_attention layer 2 {{.*}} kv(%[[DKV]] : !kiln.cache<draft_kv>)
module attributes {kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 1024, kv_dtype = bf16>,
                   kiln.spec = #kiln.spec<mode = mtp, max_draft_len = 3, ssm = rewind>} {
  func.func @rewind(%xc: tensor<?x17408xbf16>, %x: tensor<?x128x80xbf16>, %dt: tensor<?x128xbf16>,
                    %bc: tensor<?x8x128xbf16>, %q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>) {
    %c0 = kiln.causal_conv layer 0 %xc {conv_dim = 17408, kernel_size = 4, silu} : tensor<?x17408xbf16> -> tensor<?x17408xbf16>
    %s0 = kiln.ssm layer 0 %x, %dt, %bc, %bc {num_heads = 128, head_dim = 80, state_size = 128, n_groups = 8}
      : tensor<?x128x80xbf16>, tensor<?x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x128x80xbf16>
    %d2 = kiln.attention layer 2 %q, %k, %k {num_heads = 32, num_kv_heads = 8, head_dim = 128, draft = #kiln<draft mtp>}
      : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
    return
  }
}

// -----
// Replay mode: the three replay buffers instead of intermediate SSM states; ngram
// speculation uses no draft layer, so the MTP layer gets no KV.
// CHECK-LABEL: func.func @replay
// CHECK-NOT: intermediate_ssm_state
// CHECK-DAG: kiln.cache_resource layer 0 unit [2, 3, 128, 80] of bf16 shard 2 speculative_only : !kiln.cache<replay_x>
// CHECK-DAG: kiln.cache_resource layer 0 unit [2, 3, 8, 128] of bf16 shard 2 speculative_only : !kiln.cache<replay_b>
// CHECK-DAG: kiln.cache_resource layer 0 unit [2, 128, 3] of f32 shard 1 speculative_only : !kiln.cache<replay_dt>
// CHECK-NOT: replay_dacs
// CHECK-NOT: replay_index
// CHECK: kiln.cached_ssm layer 0 {{.*}} replay_x({{.*}}) replay_b({{.*}}) replay_dt({{.*}}) outs(
// CHECK-NOT: draft_kv
module attributes {kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 1024, kv_dtype = bf16>,
                   kiln.spec = #kiln.spec<mode = ngram, max_draft_len = 2, ssm = replay>} {
  func.func @replay(%x: tensor<?x128x80xbf16>, %dt: tensor<?x128xbf16>, %bc: tensor<?x8x128xbf16>,
                    %q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>) {
    %s0 = kiln.ssm layer 0 %x, %dt, %bc, %bc {num_heads = 128, head_dim = 80, state_size = 128, n_groups = 8}
      : tensor<?x128x80xbf16>, tensor<?x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x128x80xbf16>
    %d2 = kiln.attention layer 2 %q, %k, %k {num_heads = 32, num_kv_heads = 8, head_dim = 128, draft = #kiln<draft mtp>}
      : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
    return
  }
}

// -----
// MLA caches one 576-wide latent row per token, never sharded by heads.
// CHECK-LABEL: func.func @mla
// CHECK: kiln.cache_resource layer 0 unit [576] of bf16 : !kiln.cache<mla_latent>
// CHECK: %[[E:.*]] = tensor.empty(%{{.*}}) : tensor<?x128x512xbf16>
// CHECK: kiln.cached_mla_attention layer 0 {{.*}} cache(%{{[^ ]*}} : !kiln.cache<mla_latent>) outs(%[[E]] : tensor<?x128x512xbf16>)
module attributes {kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 1024, kv_dtype = bf16>} {
  func.func @mla(%q: tensor<?x128x576xbf16>, %l: tensor<?x576xbf16>) {
    %0 = kiln.mla_attention layer 0 %q, %l {num_heads = 128, kv_lora_rank = 512, qk_rope_head_dim = 64}
      : tensor<?x128x576xbf16>, tensor<?x576xbf16> -> tensor<?x128x512xbf16>
    return
  }
}
