// RUN: kiln-opt %s -split-input-file -convert-kiln-to-cuda -verify-diagnostics

// expected-error @below {{convert-kiln-to-cuda needs the memory plan ('kiln.plan'); run kiln-plan-memory (or kiln-deploy) first}}
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>} {}

// -----
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>,
                   kiln.plan = #kiln.plan<total_bytes = 0, kv_bytes = 0, state_bytes = 0, speculative_bytes = 0, unmanaged_bytes = 0, budget_bytes = 0, kv_pages = 0, fits = true, pools = []>} {
  func.func @f(%x: tensor<?x128x64xbf16>, %dt: tensor<?x128xbf16>, %b: tensor<?x8x128xbf16>) {
    %s = kiln.cache_resource layer 0 unit [128, 64, 128] of f32 {offset = 0, bytes = 1} : !kiln.cache<ssm_state>
    // expected-error @below {{kernel 'ssm_chunk_scan' of ssm layer 0 is planned but not implemented; it cannot be lowered}}
    %0 = kiln.cached_ssm layer 0 %x, %dt, %b, %b state(%s : !kiln.cache<ssm_state>)
      {num_heads = 128, head_dim = 64, state_size = 128, n_groups = 8, decode_kernel = "ssm_update", prefill_kernel = "ssm_chunk_scan"}
      : tensor<?x128x64xbf16>, tensor<?x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x128x64xbf16>
    return
  }
}

// -----
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>,
                   kiln.plan = #kiln.plan<total_bytes = 0, kv_bytes = 0, state_bytes = 0, speculative_bytes = 0, unmanaged_bytes = 0, budget_bytes = 0, kv_pages = 0, fits = true, pools = []>} {
  func.func @f(%x: tensor<?x1024xbf16>) {
    %s = kiln.cache_resource layer 0 unit [1024, 3] of bf16 : !kiln.cache<conv_state>
    // expected-error @below {{causal_conv layer 0 has no 'decode_kernel'; run kiln-select-kernels first}}
    %0 = kiln.cached_causal_conv layer 0 %x state(%s : !kiln.cache<conv_state>) {conv_dim = 1024, kernel_size = 4}
      : tensor<?x1024xbf16> -> tensor<?x1024xbf16>
    return
  }
}

// -----
// expected-error @below {{convert-kiln-to-cuda found no cached op; run kiln-insert-caches (or kiln-deploy) first}}
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>,
                   kiln.plan = #kiln.plan<total_bytes = 0, kv_bytes = 0, state_bytes = 0, speculative_bytes = 0, unmanaged_bytes = 0, budget_bytes = 0, kv_pages = 0, fits = true, pools = []>} {}

// -----
// expected-error @below {{convert-kiln-to-cuda needs a 'kiln.runtime' module attribute}}
module attributes {kiln.plan = #kiln.plan<total_bytes = 0, kv_bytes = 0, state_bytes = 0, speculative_bytes = 0, unmanaged_bytes = 0, budget_bytes = 0, kv_pages = 0, fits = true, pools = []>} {}

// -----
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>,
                   kiln.plan = #kiln.plan<total_bytes = 0, kv_bytes = 0, state_bytes = 0, speculative_bytes = 0, unmanaged_bytes = 0, budget_bytes = 0, kv_pages = 0, fits = true, pools = []>} {
  func.func @f(%x: tensor<?x1024xbf16>) {
    %s = kiln.cache_resource layer 0 unit [1024, 3] of bf16 : !kiln.cache<conv_state>
    // expected-error @below {{resource in slot 'state' of layer 0 has no planned offset; run kiln-plan-memory first}}
    %0 = kiln.cached_causal_conv layer 0 %x state(%s : !kiln.cache<conv_state>)
      {conv_dim = 1024, kernel_size = 4, decode_kernel = "conv_update", prefill_kernel = "conv_prefill_sequential"}
      : tensor<?x1024xbf16> -> tensor<?x1024xbf16>
    return
  }
}
