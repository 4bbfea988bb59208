// The whole-graph form of MLA (kv_b given): custom syntax, generic form and bytecode
// round-trip, on tensors and cached.
// RUN: kiln-opt %s | kiln-opt | FileCheck %s
// RUN: kiln-opt %s --mlir-print-op-generic | kiln-opt | FileCheck %s
// RUN: kiln-opt %s --emit-bytecode | kiln-opt | FileCheck %s

// Two heads, kv_lora_rank 64, qk_rope 16, qk_nope 32, v 32: scratch is
// max(absorbed 2*(2*80 + 2*64 + 16), expanded 2*(2*2*48 + 2*64 + 16)) = 672 bytes a token.

// CHECK-LABEL: func.func @whole_graph
func.func @whole_graph(%q: tensor<?x2x48xbf16>, %lat: tensor<?x64xbf16>, %kpe: tensor<?x16xbf16>,
                       %pos: tensor<?xi32>, %kvb: tensor<128x64xbf16>, %s: tensor<?x672xi8>) {
  // CHECK: kiln.mla_attention layer 3 %{{[^ ]*}}, %{{[^ ]*}} k_pe(%{{[^ ]*}} : tensor<?x16xbf16>) positions(%{{[^ ]*}} : tensor<?xi32>) kv_b(%{{[^ ]*}} : tensor<128x64xbf16>) scratch(%{{[^ ]*}} : tensor<?x672xi8>)
  // CHECK-SAME: qk_nope_head_dim = 32 : i64
  // CHECK-SAME: rope = #kiln.rope<type = yarn, theta = 1.000000e+04 : f64, factor = 4.000000e+00 : f64
  // CHECK-SAME: rope_style = #kiln<rope_style deinterleave>
  // CHECK-SAME: softmax_scale = 1.250000e-01 : f32
  // CHECK-SAME: v_head_dim = 32 : i64
  // CHECK-SAME: -> tensor<?x2x32xbf16>
  %0 = kiln.mla_attention layer 3 %q, %lat k_pe(%kpe : tensor<?x16xbf16>)
         positions(%pos : tensor<?xi32>) kv_b(%kvb : tensor<128x64xbf16>)
         scratch(%s : tensor<?x672xi8>)
         {num_heads = 2, kv_lora_rank = 64, qk_rope_head_dim = 16, qk_nope_head_dim = 32,
          v_head_dim = 32, softmax_scale = 0.125 : f32,
          rope = #kiln.rope<type = yarn, theta = 10000.0, factor = 4.0, low = 2.0, high = 6.0, original_max_position = 64>,
          rope_style = #kiln<rope_style deinterleave>}
       : tensor<?x2x48xbf16>, tensor<?x64xbf16> -> tensor<?x2x32xbf16>
  return
}

// The cached form keeps the graph operands ahead of the cache slot; the default style
// (rotate_half) is the absent attribute.
// CHECK-LABEL: func.func @cached
func.func @cached(%q: tensor<?x2x48xbf16>, %lat: tensor<?x64xbf16>, %kpe: tensor<?x16xbf16>,
                  %pos: tensor<?xi32>, %kvb: tensor<128x64xbf16>, %s: tensor<?x672xi8>,
                  %c: !kiln.cache<mla_latent>, %o: tensor<?x2x32xbf16>) {
  // CHECK: kiln.cached_mla_attention layer 0 %{{[^ ]*}}, %{{[^ ]*}} k_pe({{.*}}) positions({{.*}}) kv_b({{.*}}) scratch({{.*}}) cache(%{{[^ ]*}} : !kiln.cache<mla_latent>) outs(%{{[^ ]*}} : tensor<?x2x32xbf16>)
  // CHECK-NOT: rope_style
  // CHECK-SAME: -> tensor<?x2x32xbf16>
  %0 = kiln.cached_mla_attention layer 0 %q, %lat k_pe(%kpe : tensor<?x16xbf16>)
         positions(%pos : tensor<?xi32>) kv_b(%kvb : tensor<128x64xbf16>)
         scratch(%s : tensor<?x672xi8>) cache(%c : !kiln.cache<mla_latent>)
         outs(%o : tensor<?x2x32xbf16>)
         {num_heads = 2, kv_lora_rank = 64, qk_rope_head_dim = 16, qk_nope_head_dim = 32,
          v_head_dim = 32, softmax_scale = 0.125 : f32,
          rope = #kiln.rope<type = default, theta = 10000.0>}
       : tensor<?x2x48xbf16>, tensor<?x64xbf16> -> tensor<?x2x32xbf16>
  return
}
