// The whole-graph MLA form's verifier: each malformed operand or attribute is named.
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

// Two heads, kv_lora_rank 64, qk_rope 16, qk_nope 32, v 32 (scratch 672 bytes a token).
func.func @f(%q: tensor<?x2x48xbf16>, %lat: tensor<?x64xbf16>, %kpe: tensor<?x16xbf16>,
             %pos: tensor<?xi32>, %kvb: tensor<128x64xbf16>, %s: tensor<?x672xi8>) {
  // expected-error @below {{the whole-graph form (kv_b given) needs 'positions'}}
  %0 = kiln.mla_attention layer 0 %q, %lat k_pe(%kpe : tensor<?x16xbf16>)
         kv_b(%kvb : tensor<128x64xbf16>) scratch(%s : tensor<?x672xi8>)
         {num_heads = 2, kv_lora_rank = 64, qk_rope_head_dim = 16, qk_nope_head_dim = 32,
          v_head_dim = 32, softmax_scale = 0.125 : f32, rope = #kiln.rope<type = default, theta = 10000.0>}
       : tensor<?x2x48xbf16>, tensor<?x64xbf16> -> tensor<?x2x32xbf16>
  return
}

// -----
func.func @f(%q: tensor<?x2x48xbf16>, %lat: tensor<?x64xbf16>, %kpe: tensor<?x16xbf16>,
             %pos: tensor<?xi32>, %kvb: tensor<128x64xbf16>, %s: tensor<?x672xi8>) {
  // expected-error @below {{the whole-graph form (kv_b given) needs 'softmax_scale'}}
  %0 = kiln.mla_attention layer 0 %q, %lat k_pe(%kpe : tensor<?x16xbf16>)
         positions(%pos : tensor<?xi32>) kv_b(%kvb : tensor<128x64xbf16>) scratch(%s : tensor<?x672xi8>)
         {num_heads = 2, kv_lora_rank = 64, qk_rope_head_dim = 16, qk_nope_head_dim = 32,
          v_head_dim = 32, rope = #kiln.rope<type = default, theta = 10000.0>}
       : tensor<?x2x48xbf16>, tensor<?x64xbf16> -> tensor<?x2x32xbf16>
  return
}

// -----
// The graph operands without kv_b: neither form.
func.func @f(%q: tensor<?x2x80xbf16>, %lat: tensor<?x80xbf16>, %kpe: tensor<?x16xbf16>) {
  // expected-error @below {{k_pe, positions, scratch, qk_nope_head_dim, v_head_dim, rope, rope_style and softmax_scale belong to the whole-graph form, which needs kv_b}}
  %0 = kiln.mla_attention layer 0 %q, %lat k_pe(%kpe : tensor<?x16xbf16>)
         {num_heads = 2, kv_lora_rank = 64, qk_rope_head_dim = 16}
       : tensor<?x2x80xbf16>, tensor<?x80xbf16> -> tensor<?x2x64xbf16>
  return
}

// -----
func.func @f(%q: tensor<?x2x44xbf16>, %lat: tensor<?x64xbf16>, %kpe: tensor<?x16xbf16>,
             %pos: tensor<?xi32>, %kvb: tensor<120x64xbf16>, %s: tensor<?x672xi8>) {
  // expected-error @below {{'qk_nope_head_dim' (28) must be a multiple of 8 (16-byte rows)}}
  %0 = kiln.mla_attention layer 0 %q, %lat k_pe(%kpe : tensor<?x16xbf16>)
         positions(%pos : tensor<?xi32>) kv_b(%kvb : tensor<120x64xbf16>) scratch(%s : tensor<?x672xi8>)
         {num_heads = 2, kv_lora_rank = 64, qk_rope_head_dim = 16, qk_nope_head_dim = 28,
          v_head_dim = 32, softmax_scale = 0.125 : f32, rope = #kiln.rope<type = default, theta = 10000.0>}
       : tensor<?x2x44xbf16>, tensor<?x64xbf16> -> tensor<?x2x32xbf16>
  return
}

// -----
func.func @f(%q: tensor<?x2x48xbf16>, %lat: tensor<?x64xbf16>, %kpe: tensor<?x16xbf16>,
             %pos: tensor<?xi32>, %kvb: tensor<128x64xbf16>, %s: tensor<?x672xi8>) {
  // expected-error @below {{'softmax_scale' must be a positive finite number, got 0}}
  %0 = kiln.mla_attention layer 0 %q, %lat k_pe(%kpe : tensor<?x16xbf16>)
         positions(%pos : tensor<?xi32>) kv_b(%kvb : tensor<128x64xbf16>) scratch(%s : tensor<?x672xi8>)
         {num_heads = 2, kv_lora_rank = 64, qk_rope_head_dim = 16, qk_nope_head_dim = 32,
          v_head_dim = 32, softmax_scale = 0.0 : f32, rope = #kiln.rope<type = default, theta = 10000.0>}
       : tensor<?x2x48xbf16>, tensor<?x64xbf16> -> tensor<?x2x32xbf16>
  return
}

// -----
// kv_b's rows are every head's nope key rows and value rows: 2 * (32 + 32).
func.func @f(%q: tensor<?x2x48xbf16>, %lat: tensor<?x64xbf16>, %kpe: tensor<?x16xbf16>,
             %pos: tensor<?xi32>, %kvb: tensor<96x64xbf16>, %s: tensor<?x672xi8>) {
  // expected-error @below {{'kv_b' must have shape [128, 64], got 'tensor<96x64xbf16>'}}
  %0 = kiln.mla_attention layer 0 %q, %lat k_pe(%kpe : tensor<?x16xbf16>)
         positions(%pos : tensor<?xi32>) kv_b(%kvb : tensor<96x64xbf16>) scratch(%s : tensor<?x672xi8>)
         {num_heads = 2, kv_lora_rank = 64, qk_rope_head_dim = 16, qk_nope_head_dim = 32,
          v_head_dim = 32, softmax_scale = 0.125 : f32, rope = #kiln.rope<type = default, theta = 10000.0>}
       : tensor<?x2x48xbf16>, tensor<?x64xbf16> -> tensor<?x2x32xbf16>
  return
}

// -----
// The scratch is sized by kiln_rt_mla_scratch_bytes_per_token.
func.func @f(%q: tensor<?x2x48xbf16>, %lat: tensor<?x64xbf16>, %kpe: tensor<?x16xbf16>,
             %pos: tensor<?xi32>, %kvb: tensor<128x64xbf16>, %s: tensor<?x512xi8>) {
  // expected-error @below {{'scratch' must have shape [?, 672], got 'tensor<?x512xi8>'}}
  %0 = kiln.mla_attention layer 0 %q, %lat k_pe(%kpe : tensor<?x16xbf16>)
         positions(%pos : tensor<?xi32>) kv_b(%kvb : tensor<128x64xbf16>) scratch(%s : tensor<?x512xi8>)
         {num_heads = 2, kv_lora_rank = 64, qk_rope_head_dim = 16, qk_nope_head_dim = 32,
          v_head_dim = 32, softmax_scale = 0.125 : f32, rope = #kiln.rope<type = default, theta = 10000.0>}
       : tensor<?x2x48xbf16>, tensor<?x64xbf16> -> tensor<?x2x32xbf16>
  return
}

// -----
func.func @f(%q: tensor<?x2x48xbf16>, %lat: tensor<?x64xbf16>, %kpe: tensor<?x16xbf16>,
             %pos: tensor<?xi64>, %kvb: tensor<128x64xbf16>, %s: tensor<?x672xi8>) {
  // expected-error @below {{'positions' must have element type 'i32'}}
  %0 = kiln.mla_attention layer 0 %q, %lat k_pe(%kpe : tensor<?x16xbf16>)
         positions(%pos : tensor<?xi64>) kv_b(%kvb : tensor<128x64xbf16>) scratch(%s : tensor<?x672xi8>)
         {num_heads = 2, kv_lora_rank = 64, qk_rope_head_dim = 16, qk_nope_head_dim = 32,
          v_head_dim = 32, softmax_scale = 0.125 : f32, rope = #kiln.rope<type = default, theta = 10000.0>}
       : tensor<?x2x48xbf16>, tensor<?x64xbf16> -> tensor<?x2x32xbf16>
  return
}

// -----
func.func @f(%q: tensor<?x2x48xf16>, %lat: tensor<?x64xbf16>, %kpe: tensor<?x16xbf16>,
             %pos: tensor<?xi32>, %kvb: tensor<128x64xbf16>, %s: tensor<?x672xi8>) {
  // expected-error @below {{'q' must have element type 'bf16'}}
  %0 = kiln.mla_attention layer 0 %q, %lat k_pe(%kpe : tensor<?x16xbf16>)
         positions(%pos : tensor<?xi32>) kv_b(%kvb : tensor<128x64xbf16>) scratch(%s : tensor<?x672xi8>)
         {num_heads = 2, kv_lora_rank = 64, qk_rope_head_dim = 16, qk_nope_head_dim = 32,
          v_head_dim = 32, softmax_scale = 0.125 : f32, rope = #kiln.rope<type = default, theta = 10000.0>}
       : tensor<?x2x48xf16>, tensor<?x64xbf16> -> tensor<?x2x32xbf16>
  return
}

// -----
// Every per-token operand has q's token count.
func.func @f(%q: tensor<4x2x48xbf16>, %lat: tensor<4x64xbf16>, %kpe: tensor<3x16xbf16>,
             %pos: tensor<4xi32>, %kvb: tensor<128x64xbf16>, %s: tensor<4x672xi8>) {
  // expected-error @below {{'k_pe'}}
  %0 = kiln.mla_attention layer 0 %q, %lat k_pe(%kpe : tensor<3x16xbf16>)
         positions(%pos : tensor<4xi32>) kv_b(%kvb : tensor<128x64xbf16>) scratch(%s : tensor<4x672xi8>)
         {num_heads = 2, kv_lora_rank = 64, qk_rope_head_dim = 16, qk_nope_head_dim = 32,
          v_head_dim = 32, softmax_scale = 0.125 : f32, rope = #kiln.rope<type = default, theta = 10000.0>}
       : tensor<4x2x48xbf16>, tensor<4x64xbf16> -> tensor<4x2x32xbf16>
  return
}

// -----
// The cached form verifies the same way.
func.func @f(%q: tensor<?x2x48xbf16>, %lat: tensor<?x64xbf16>, %kpe: tensor<?x16xbf16>,
             %pos: tensor<?xi32>, %kvb: tensor<128x64xbf16>, %s: tensor<?x672xi8>,
             %c: !kiln.cache<mla_latent>, %o: tensor<?x2x64xbf16>) {
  // expected-error @below {{'result' must have shape [?, 2, 32], got 'tensor<?x2x64xbf16>'}}
  %0 = kiln.cached_mla_attention layer 0 %q, %lat k_pe(%kpe : tensor<?x16xbf16>)
         positions(%pos : tensor<?xi32>) kv_b(%kvb : tensor<128x64xbf16>) scratch(%s : tensor<?x672xi8>)
         cache(%c : !kiln.cache<mla_latent>) outs(%o : tensor<?x2x64xbf16>)
         {num_heads = 2, kv_lora_rank = 64, qk_rope_head_dim = 16, qk_nope_head_dim = 32,
          v_head_dim = 32, softmax_scale = 0.125 : f32, rope = #kiln.rope<type = default, theta = 10000.0>}
       : tensor<?x2x48xbf16>, tensor<?x64xbf16> -> tensor<?x2x64xbf16>
  return
}
