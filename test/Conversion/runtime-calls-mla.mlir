// convert-kiln-to-runtime-calls on a DeepSeek layer's pieces: the whole-graph MLA op
// becomes one kiln_rt_mla_attention call (docs/abi.md), kv_a_layernorm on a column view
// kiln_rt_rms_norm_strided, DeepSeek-V2's group_limited_greedy router a kiln_rt_moe flag.
// RUN: kiln-opt %s -split-input-file --convert-kiln-to-runtime-calls | FileCheck %s

// Two heads, kv_lora_rank 64, qk_rope 16, qk_nope 32, v 32. k_pe is the rope column view
// of kv_a_proj_with_mqa's output (row stride 80, offset 64): its pointer is the view's
// first element, its row stride passed. Then tokens, heads 2, rank 64, rope 16, nope 32,
// v 32, page 16, the kernels mla_decode (3) and mla_prefill (15), spec mode 0, the
// scale, the style (complex_pairs 2) and the rope (yarn 3, theta, factor 4, low 2,
// high 6, original 64, attention_factor 1).
// CHECK-LABEL: func.func @mla_layer
// CHECK-DAG: %[[LAYER:.*]] = arith.constant 2 : i32
// CHECK-DAG: %[[OFFSET:.*]] = arith.constant 4096 : i64
// CHECK-DAG: %[[KSTRIDE:.*]] = arith.constant 80 : i64
// CHECK-DAG: %[[HEADS:.*]] = arith.constant 2 : i32
// CHECK-DAG: %[[RANK:.*]] = arith.constant 64 : i32
// CHECK-DAG: %[[ROPE:.*]] = arith.constant 16 : i32
// CHECK-DAG: %[[NOPE:.*]] = arith.constant 32 : i32
// CHECK-DAG: %[[PAGE:.*]] = arith.constant 16 : i32
// CHECK-DAG: %[[DECODE:.*]] = arith.constant 3 : i32
// CHECK-DAG: %[[PREFILL:.*]] = arith.constant 15 : i32
// CHECK-DAG: %[[SCALE:.*]] = arith.constant 1.250000e-01 : f32
// CHECK-DAG: %[[YARN:.*]] = arith.constant 3 : i32
// CHECK-DAG: %[[FACTOR:.*]] = arith.constant 4.000000e+00 : f32
// CHECK-DAG: %[[ORIG:.*]] = arith.constant 64 : i64
// CHECK: call @kiln_rt_mla_attention(%{{[^,]*}}, %[[LAYER]], %[[OFFSET]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[KSTRIDE]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[HEADS]], %[[RANK]], %[[ROPE]], %[[NOPE]], %{{[^,]*}}, %[[PAGE]], %[[DECODE]], %[[PREFILL]], %{{[^,]*}}, %[[SCALE]], %{{[^,]*}}, %[[YARN]], %{{[^,]*}}, %[[FACTOR]], %{{[^,]*}}, %{{[^,]*}}, %[[ORIG]], %{{[^)]*}}) {kiln.layer = 2 : i64}
// CHECK-SAME: : (!llvm.ptr, i32, i64, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i32, i32, i32, i32, i32, i32, i32, i32, i32, f32, i32, i32, f32, f32, f32, f32, i64, f32, i32) -> i32
// The strided norm: x's first element, its row stride 80, weight, out, rows, dim 64, eps.
// CHECK: %[[NSTRIDE:.*]] = arith.constant 80 : i64
// CHECK: call @kiln_rt_rms_norm_strided(%{{[^,]*}}, %{{[^,]*}}, %[[NSTRIDE]], {{.*}}) : (!llvm.ptr, !llvm.ptr, i64, !llvm.ptr, !llvm.ptr, i64, i64, f32) -> i32
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, page_size = 16, kv_dtype = bf16>} {
  func.func @mla_layer(%ctx: !llvm.ptr {kiln.context}, %q: memref<?x2x48xbf16>, %kva: memref<?x80xbf16>,
                       %lat: memref<?x64xbf16>, %pos: memref<?xi32>, %kvb: memref<128x64xbf16>,
                       %s: memref<?x672xi8>, %o: memref<?x2x32xbf16>, %w: memref<64xbf16>) {
    %c0 = arith.constant 0 : index
    %n = memref.dim %kva, %c0 : memref<?x80xbf16>
    %c = kiln.cache_resource layer 2 unit [80] of bf16 {offset = 4096 : i64} : !kiln.cache<mla_latent>
    %kpe = memref.subview %kva[0, 64] [%n, 16] [1, 1] : memref<?x80xbf16> to memref<?x16xbf16, strided<[80, 1], offset: 64>>
    kiln.cached_mla_attention layer 2 %q, %lat k_pe(%kpe : memref<?x16xbf16, strided<[80, 1], offset: 64>>)
      positions(%pos : memref<?xi32>) kv_b(%kvb : memref<128x64xbf16>) scratch(%s : memref<?x672xi8>)
      cache(%c : !kiln.cache<mla_latent>) outs(%o : memref<?x2x32xbf16>)
      {num_heads = 2, kv_lora_rank = 64, qk_rope_head_dim = 16, qk_nope_head_dim = 32,
       v_head_dim = 32, softmax_scale = 0.125 : f32,
       rope = #kiln.rope<type = yarn, theta = 10000.0, factor = 4.0, low = 2.0, high = 6.0, original_max_position = 64>,
       rope_style = #kiln<rope_style complex_pairs>,
       decode_kernel = "mla_decode", prefill_kernel = "mla_prefill"}
      : memref<?x2x48xbf16>, memref<?x64xbf16>
    %cv = memref.subview %kva[0, 0] [%n, 64] [1, 1] : memref<?x80xbf16> to memref<?x64xbf16, strided<[80, 1]>>
    kiln.rms_norm ins(%cv, %w : memref<?x64xbf16, strided<[80, 1]>>, memref<64xbf16>) outs(%lat : memref<?x64xbf16>) {epsilon = 1.0e-6 : f32}
    return
  }
}

// -----
// group_max adds KILN_MOE_GROUP_MAX (64) to the routing flags: softmax, no
// renormalization, groups 4.
// CHECK-LABEL: func.func @group_max_moe
// CHECK-DAG: %[[FLAGS:.*]] = arith.constant 64 : i32
// CHECK-DAG: %[[GROUPS:.*]] = arith.constant 4 : i32
// CHECK: call @kiln_rt_moe({{.*}}, %[[FLAGS]], %[[GROUPS]], {{[^)]*}})
module {
  func.func @group_max_moe(%ctx: !llvm.ptr {kiln.context}, %x: memref<?x64xbf16>, %l: memref<?x8xbf16>,
                           %g: memref<8x32x64xbf16>, %d: memref<8x64x32xbf16>, %o: memref<?x64xbf16>,
                           %s: memref<?x1744xi8>) {
    kiln.moe ins(%x, %l : memref<?x64xbf16>, memref<?x8xbf16>) gate(%g : memref<8x32x64xbf16>) up(%g : memref<8x32x64xbf16>) down(%d : memref<8x64x32xbf16>) outs(%o, %s : memref<?x64xbf16>, memref<?x1744xi8>) {top_k = 2 : i64, groups = 4 : i64, top_groups = 2 : i64, group_max}
    return
  }
}
