// With remarks, every rejected candidate is explained.
// RUN: kiln-opt %s -kiln-select-kernels="remarks=true" -verify-diagnostics
module attributes {kiln.target = #kiln.target<"rtx5090">, kiln.spec = #kiln.spec<mode = mtp, max_draft_len = 3>,
                   kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 1024, kv_dtype = bf16>} {
  func.func @f(%mq: tensor<?x16x576xbf16>, %l: tensor<?x576xbf16>, %out: tensor<?x16x512xbf16>) {
    %lat = kiln.cache_resource layer 1 unit [576] of bf16 : !kiln.cache<mla_latent>
    // The multi-token attempt (q_len 4) rejects both variants, so draft tokens take
    // the context path with the small-smem kernel.
    // expected-remark @+2 {{decode kernel 'mla_decode' rejected for mla_attention layer 1: needs 231936 B shared memory per block, sm_120 allows 101376}}
    // expected-remark @+1 {{decode kernel 'mla_decode_small_smem' rejected for mla_attention layer 1: verifies at most 1 query token per sequence, step needs 4}}
    %1 = kiln.cached_mla_attention layer 1 %mq, %l cache(%lat : !kiln.cache<mla_latent>) outs(%out : tensor<?x16x512xbf16>) {num_heads = 16, kv_lora_rank = 512, qk_rope_head_dim = 64}
      : tensor<?x16x576xbf16>, tensor<?x576xbf16> -> tensor<?x16x512xbf16>
    return
  }
}
