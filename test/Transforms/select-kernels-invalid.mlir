// RUN: kiln-opt %s -split-input-file -kiln-select-kernels="force=mla_decode" -verify-diagnostics

module attributes {kiln.target = #kiln.target<"h200">, kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 1024, kv_dtype = bf16>} {
  func.func @f(%q: tensor<?x32x96xbf16>, %k: tensor<?x8x96xbf16>) {
    %kv = kiln.cache_resource layer 0 unit [2, 8, 96] of bf16 : !kiln.cache<kv>
    // expected-error @below {{no decode kernel for attention layer 0 on 'h200' (sm_90); gqa_decode: head dim 96 not in {64, 128, 256}}}
    %0 = kiln.cached_attention layer 0 %q, %k, %k kv(%kv : !kiln.cache<kv>) outs(%q : tensor<?x32x96xbf16>) {num_heads = 32, num_kv_heads = 8, head_dim = 96}
      : tensor<?x32x96xbf16>, tensor<?x8x96xbf16>, tensor<?x8x96xbf16> -> tensor<?x32x96xbf16>
    return
  }
}

// -----
module attributes {kiln.target = #kiln.target<"h200">, kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 1024, page_size = 256, kv_dtype = bf16>} {
  func.func @f(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>) {
    %kv = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 : !kiln.cache<kv>
    // expected-error @below {{gqa_decode: page size 256 not in {16, 32, 64, 128}}}
    %0 = kiln.cached_attention layer 0 %q, %k, %k kv(%kv : !kiln.cache<kv>) outs(%q : tensor<?x32x128xbf16>) {num_heads = 32, num_kv_heads = 8, head_dim = 128}
      : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
    return
  }
}

// -----
module attributes {kiln.target = #kiln.target<"h200">, kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 1024, kv_dtype = f8E5M2>} {
  func.func @f(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>) {
    %kv = kiln.cache_resource layer 0 unit [2, 8, 128] of f8E5M2 : !kiln.cache<kv>
    // expected-error @below {{gqa_decode: dtype f8E5M2 not in {bf16, f16, f8E4M3FN}}}
    %0 = kiln.cached_attention layer 0 %q, %k, %k kv(%kv : !kiln.cache<kv>) outs(%q : tensor<?x32x128xbf16>) {num_heads = 32, num_kv_heads = 8, head_dim = 128}
      : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
    return
  }
}

// -----
// expected-error @below {{kiln-select-kernels needs a 'kiln.target' module attribute, e.g. #kiln.target<"h200">}}
module attributes {kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 1024, kv_dtype = bf16>} {}

// -----
// A forced MLA kernel that does not fit in sm_120's shared memory.
module attributes {kiln.target = #kiln.target<"rtx5090">, kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 1024, kv_dtype = bf16>} {
  func.func @f(%mq: tensor<?x128x576xbf16>, %l: tensor<?x576xbf16>, %out: tensor<?x128x512xbf16>) {
    %lat = kiln.cache_resource layer 1 unit [576] of bf16 : !kiln.cache<mla_latent>
    // expected-error @below {{forced kernel 'mla_decode' cannot run mla_attention layer 1 on 'rtx5090': needs 231936 B shared memory per block, sm_120 allows 101376}}
    %1 = kiln.cached_mla_attention layer 1 %mq, %l cache(%lat : !kiln.cache<mla_latent>) outs(%out : tensor<?x128x512xbf16>) {num_heads = 128, kv_lora_rank = 512, qk_rope_head_dim = 64}
      : tensor<?x128x576xbf16>, tensor<?x576xbf16> -> tensor<?x128x512xbf16>
    return
  }
}
