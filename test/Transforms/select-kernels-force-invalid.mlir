// Overrides that name no kernel, or the wrong family.
// RUN: not kiln-opt %s -kiln-select-kernels="force=gqa_decode_v9" 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not kiln-opt %s -kiln-select-kernels="force=ssm=gqa_decode" 2>&1 | FileCheck %s --check-prefix=FAMILY
// RUN: kiln-opt %s -kiln-select-kernels="force=attention=gqa_decode" | FileCheck %s --check-prefix=OK
// UNKNOWN: error: kiln-select-kernels: forced kernel 'gqa_decode_v9' is not in the kernel registry
// FAMILY: error: kiln-select-kernels: forced kernel 'gqa_decode' serves attention, not ssm
// OK: decode_kernel = "gqa_decode"
module attributes {kiln.target = #kiln.target<"h200">,
                   kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 1024, kv_dtype = bf16>} {
  func.func @f(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>) {
    %kv = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 : !kiln.cache<kv>
    %0 = kiln.cached_attention layer 0 %q, %k, %k kv(%kv : !kiln.cache<kv>) outs(%q : tensor<?x32x128xbf16>) {num_heads = 32, num_kv_heads = 8, head_dim = 128}
      : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
    return
  }
}
