// A remark names layer, kind and bytes of every dropped resource.
// RUN: kiln-opt %s -kiln-drop-speculative-resources -verify-diagnostics
// (Debian's LLVM is built with statistics compiled out, so --mlir-pass-statistics
// prints empty reports; these remarks carry the same numbers.)

module attributes {kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 1024, kv_dtype = bf16>} {
  func.func @no_spec(%x: tensor<?x128x80xbf16>, %dt: tensor<?x128xbf16>, %bc: tensor<?x8x128xbf16>,
                     %q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>, %xc: tensor<?x17408xbf16>) {
    %s = kiln.cache_resource layer 0 unit [128, 80, 128] of f32 shard 0 : !kiln.cache<ssm_state>
    // expected-remark @below {{dropped speculative-only layer 0 intermediate_ssm_state (160.00 MiB): speculation is off}}
    %i = kiln.cache_resource layer 0 unit [4, 128, 80, 128] of f32 shard 1 speculative_only : !kiln.cache<intermediate_ssm_state>
    // expected-remark @below {{dropped speculative-only layer 2 draft_kv (32.00 MiB): speculation is off}}
    %d = kiln.cache_resource layer 2 unit [2, 8, 128] of bf16 shard 1 speculative_only : !kiln.cache<draft_kv>
    %cs = kiln.cache_resource layer 0 unit [17408, 3] of bf16 : !kiln.cache<conv_state>
    // expected-remark @below {{dropped speculative-only layer 0 intermediate_conv_state (3.19 MiB): speculation is off}}
    %ci = kiln.cache_resource layer 0 unit [4, 17408, 3] of bf16 speculative_only : !kiln.cache<intermediate_conv_state>
    %0 = kiln.cached_ssm layer 0 %x, %dt, %bc, %bc state(%s : !kiln.cache<ssm_state>) intermediate(%i : !kiln.cache<intermediate_ssm_state>) outs(%x : tensor<?x128x80xbf16>)
      {num_heads = 128, head_dim = 80, state_size = 128, n_groups = 8}
      : tensor<?x128x80xbf16>, tensor<?x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x128x80xbf16>
    %1 = kiln.cached_attention layer 2 %q, %k, %k kv(%d : !kiln.cache<draft_kv>) outs(%q : tensor<?x32x128xbf16>) {num_heads = 32, num_kv_heads = 8, head_dim = 128, draft = #kiln<draft mtp>}
      : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
    %2 = kiln.cached_causal_conv layer 0 %xc state(%cs : !kiln.cache<conv_state>) intermediate(%ci : !kiln.cache<intermediate_conv_state>) outs(%xc : tensor<?x17408xbf16>)
      {conv_dim = 17408, kernel_size = 4} : tensor<?x17408xbf16> -> tensor<?x17408xbf16>
    return
  }
}

