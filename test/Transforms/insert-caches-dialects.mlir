// Regression: kiln-insert-caches builds tensor.dim / tensor.empty (the `outs` of each
// cached op) on a module that holds no tensor op; the kiln dialect and the pass load
// the tensor and arith dialects they create ops of, so this must not crash.
// RUN: kiln-opt %s -kiln-insert-caches | FileCheck %s
// RUN: kiln-opt %s -kiln-deploy=target=h200 | FileCheck %s --check-prefix=DEPLOY
// The pipeline's configure step supplies a default runtime; the target stays missing.
// RUN: sed -e "s/kiln.target = #kiln.target<\"h200\">, //" %s | not kiln-opt -kiln-deploy 2>&1 | FileCheck %s --check-prefix=NOTARGET

// CHECK-LABEL: func.func @f
// CHECK: %[[KV:.*]] = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 shard 1 : !kiln.cache<kv>
// CHECK: %[[E:.*]] = tensor.empty(%{{.*}}) : tensor<?x32x128xbf16>
// CHECK: kiln.cached_attention layer 0 {{.*}} kv(%[[KV]] : !kiln.cache<kv>) outs(%[[E]] : tensor<?x32x128xbf16>)

// DEPLOY: kiln.cached_attention layer 0 {{.*}}decode_kernel = "gqa_decode"

// NOTARGET: error: kiln-select-kernels needs a 'kiln.target' module attribute
module attributes {kiln.target = #kiln.target<"h200">, kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 1024, kv_dtype = bf16>} {
  func.func @f(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>) -> tensor<?x32x128xbf16> {
    %0 = kiln.attention layer 0 %q, %k, %k {num_heads = 32, num_kv_heads = 8, head_dim = 128}
      : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
    return %0 : tensor<?x32x128xbf16>
  }
}
