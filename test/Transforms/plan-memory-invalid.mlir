// RUN: kiln-opt %s -split-input-file -kiln-plan-memory -verify-diagnostics

// expected-error @below {{kiln-plan-memory needs a 'kiln.runtime' module attribute, e.g. #kiln.runtime<max_batch = 64, max_seq_len = 8192, kv_dtype = bf16>}}
module attributes {kiln.target = #kiln.target<"h200">} {}

// -----
module attributes {kiln.target = #kiln.target<"h200">,
                   kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 512, kv_dtype = bf16, tp = 4>} {
  func.func @f() {
    // expected-error @below {{tp = 4 does not divide dimension 0 (6) of layer 0 ssm_state; choose a tp that divides it}}
    %0 = kiln.cache_resource layer 0 unit [6, 64, 128] of f32 shard 0 : !kiln.cache<ssm_state>
    return
  }
}

// -----
// Does not fit: the error names budget, total and the largest consumers, added up by
// kind and speculative-only status.
// Notes say what would fit, one limit changed at a time.
// expected-error @below {{memory plan does not fit on 'l4': needs 40.00 GiB, budget 19.79 GiB (21.99 GiB x 0.9); largest consumers: 2 x kv 40.00 GiB}}
// expected-note @below {{fits with max_batch 126 (at max_seq_len 20480)}}
// expected-note @below {{fits with max_seq_len 10112 (at max_batch 256)}}
module attributes {kiln.target = #kiln.target<"l4">,
                   kiln.runtime = #kiln.runtime<max_batch = 256, max_seq_len = 20480, kv_dtype = bf16>} {
  func.func @f() {
    %0 = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 : !kiln.cache<kv>
    %1 = kiln.cache_resource layer 1 unit [2, 8, 128] of bf16 : !kiln.cache<kv>
    return
  }
}

// -----
// expected-error @below {{model weights (93.13 GiB per rank) exceed the usable 71.26 GiB of 'h100' (79.18 GiB x 0.9); use more tensor-parallel ranks or a larger target}}
module attributes {kiln.target = #kiln.target<"h100">,
                   kiln.model = #kiln.model<name = "llama-70b", model_type = "llama", num_layers = 80, dtype = bf16, weight_bytes = 100000000000>,
                   kiln.runtime = #kiln.runtime<max_batch = 1, max_seq_len = 512, kv_dtype = bf16>} {
  func.func @f() {
    %0 = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 : !kiln.cache<kv>
    return
  }
}

// -----
// A rewind plan whose per-draft SSM states do not fit: the notes include the other
// recovery mode's speculative-only bytes (asked of the cached op) and the plan then.
// expected-error @below {{memory plan does not fit on 'l4': needs 20.00 GiB, budget 19.79 GiB (21.99 GiB x 0.9); largest consumers: 1 x intermediate_ssm_state (speculative-only) 16.00 GiB, 1 x ssm_state 4.00 GiB}}
// expected-note @below {{fits with max_batch 1013 (at max_seq_len 512)}}
// expected-note @below {{fits with max_draft_len 2}}
// expected-note @below {{with --ssm-mode replay the speculative-only states take 148.00 MiB instead of 16.00 GiB: the plan fits (4.14 GiB)}}
module attributes {kiln.target = #kiln.target<"l4">,
                   kiln.runtime = #kiln.runtime<max_batch = 1024, max_seq_len = 512, kv_dtype = bf16>,
                   kiln.spec = #kiln.spec<mode = ngram, max_draft_len = 3, ssm = rewind>} {
  func.func @ssm(%x: tensor<?x128x64xbf16>, %dt: tensor<?x128xbf16>, %bc: tensor<?x8x128xbf16>, %init: tensor<?x128x64xbf16>) {
    %s = kiln.cache_resource layer 0 unit [128, 64, 128] of f32 shard 0 : !kiln.cache<ssm_state>
    %i = kiln.cache_resource layer 0 unit [4, 128, 64, 128] of f32 shard 1 speculative_only : !kiln.cache<intermediate_ssm_state>
    %0 = kiln.cached_ssm layer 0 %x, %dt, %bc, %bc state(%s : !kiln.cache<ssm_state>) intermediate(%i : !kiln.cache<intermediate_ssm_state>) outs(%init : tensor<?x128x64xbf16>)
      {num_heads = 128, head_dim = 64, state_size = 128, n_groups = 8}
      : tensor<?x128x64xbf16>, tensor<?x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x128x64xbf16>
    return
  }
}
