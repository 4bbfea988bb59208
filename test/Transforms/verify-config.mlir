// RUN: kiln-opt %s -split-input-file -kiln-verify-config -verify-diagnostics

// Replay buffers without speculation: the replay mode needs a spec config.
module attributes {kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 1024, kv_dtype = bf16>} {
  func.func @f() {
    // expected-error @below {{SSM replay mode requires speculation: layer 0 replay_x is a replay buffer but the module has no 'kiln.spec'; add #kiln.spec<..., ssm = replay> or run kiln-drop-speculative-resources}}
    %rx = kiln.cache_resource layer 0 unit [2, 4, 128, 64] of bf16 speculative_only : !kiln.cache<replay_x>
    return
  }
}

// -----
// A leftover intermediate state without speculation is exactly the L40S leak.
module attributes {kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 1024, kv_dtype = bf16>} {
  func.func @f() {
    // expected-error @below {{speculative-only layer 3 intermediate_ssm_state without 'kiln.spec': speculation is off, so nothing would bind it; run kiln-drop-speculative-resources or add a #kiln.spec}}
    %i = kiln.cache_resource layer 3 unit [4, 128, 80, 128] of f32 speculative_only : !kiln.cache<intermediate_ssm_state>
    return
  }
}

// -----
// expected-error @below {{kiln.spec mode = mtp is one-model speculation and needs MTP draft layers (num_nextn_predict_layers > 0), but the model has none; use mode = draft_target or ngram, or a model that has them}}
module attributes {kiln.spec = #kiln.spec<mode = mtp, max_draft_len = 3>} {
  func.func @f(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>) {
    %0 = kiln.attention layer 0 %q, %k, %k {num_heads = 32, num_kv_heads = 8, head_dim = 128}
      : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
    return
  }
}

// -----
// expected-error @below {{kiln.spec mode = eagle3 is one-model speculation and needs an Eagle3 head layer, but the model has none}}
module attributes {kiln.spec = #kiln.spec<mode = eagle3, max_draft_len = 3>} {
  func.func @f(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>) {
    // An MTP layer does not serve Eagle3.
    %0 = kiln.attention layer 0 %q, %k, %k {num_heads = 32, num_kv_heads = 8, head_dim = 128, draft = #kiln<draft mtp>}
      : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
    return
  }
}

// -----
// expected-error @below {{kiln.spec max_draft_len = 8 exceeds 7, the most draft tokens Kiln's decode kernels verify in one step (q_len <= 8)}}
module attributes {kiln.spec = #kiln.spec<mode = ngram, max_draft_len = 8>} {}

// -----
// Valid: MTP with an MTP layer, replay mode on sm_90.
module attributes {kiln.target = #kiln.target<"h200">, kiln.spec = #kiln.spec<mode = mtp, max_draft_len = 3, ssm = replay>} {
  func.func @f(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>) {
    %0 = kiln.attention layer 1 %q, %k, %k {num_heads = 32, num_kv_heads = 8, head_dim = 128, draft = #kiln<draft mtp>}
      : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
    return
  }
}

// -----
// One rank's graph of 2 tensor-parallel ranks deployed for 4: its heads are already a
// half, so a quarter plan would be wrong.
// expected-error @below {{the graph was imported for 2 tensor-parallel ranks (one rank's heads and projections) but kiln.runtime has tp = 4; deploy it with tp = 2 or import again}}
module attributes {kiln.model = #kiln.model<name = "m", model_type = "llama", num_layers = 1, dtype = bf16, tp_ranks = 2>, kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 1024, kv_dtype = bf16, tp = 4>} {
}

// -----
// The same graph on its own 2 ranks is consistent.
module attributes {kiln.model = #kiln.model<name = "m", model_type = "llama", num_layers = 1, dtype = bf16, tp_ranks = 2>, kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 1024, kv_dtype = bf16, tp = 2>} {
}
