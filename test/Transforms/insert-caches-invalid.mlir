// RUN: kiln-opt %s -kiln-insert-caches -verify-diagnostics

// expected-error @below {{kiln-insert-caches needs a 'kiln.runtime' module attribute, e.g. #kiln.runtime<max_batch = 64, max_seq_len = 8192, kv_dtype = bf16>}}
module {
  func.func @f(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>) {
    %0 = kiln.attention layer 0 %q, %k, %k {num_heads = 32, num_kv_heads = 8, head_dim = 128}
      : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
    return
  }
}
