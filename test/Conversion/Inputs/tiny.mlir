// A whole one-layer Llama-like model (GQA attention and a SwiGLU MLP): every compute
// op, weights, the entry's inputs and its logits output. Shared by the Conversion and
// Tools tests.
module attributes {kiln.model = #kiln.model<name = "tiny", model_type = "llama", num_layers = 1, dtype = bf16>,
                   kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>} {
  kiln.weight @"model.embed_tokens.weight" : tensor<512x128xbf16>
  kiln.weight @"model.layers.0.input_layernorm.weight" : tensor<128xbf16>
  kiln.weight @"model.layers.0.self_attn.q_proj.weight" : tensor<128x128xbf16>
  kiln.weight @"model.layers.0.self_attn.k_proj.weight" : tensor<64x128xbf16>
  kiln.weight @"model.layers.0.self_attn.v_proj.weight" : tensor<64x128xbf16>
  kiln.weight @"model.layers.0.self_attn.o_proj.weight" : tensor<128x128xbf16>
  kiln.weight @"model.layers.0.post_attention_layernorm.weight" : tensor<128xbf16>
  kiln.weight @"model.layers.0.mlp.gate_proj.weight" : tensor<256x128xbf16>
  kiln.weight @"model.layers.0.mlp.up_proj.weight" : tensor<256x128xbf16>
  kiln.weight @"model.layers.0.mlp.down_proj.weight" : tensor<128x256xbf16>
  kiln.weight @"model.norm.weight" : tensor<128xbf16>
  func.func @forward(%ids: tensor<?xi32> {kiln.input = #kiln<input token_ids>},
                     %pos: tensor<?xi32> {kiln.input = #kiln<input positions>},
                     %rows: tensor<?xi32> {kiln.input = #kiln<input logit_rows>})
      -> (tensor<?x512xbf16> {kiln.output = #kiln<output logits>}) attributes {kiln.entry} {
    %c0 = arith.constant 0 : index
    %t = tensor.dim %ids, %c0 : tensor<?xi32>
    %r = tensor.dim %rows, %c0 : tensor<?xi32>
    %we = kiln.weight_ref @"model.embed_tokens.weight" : tensor<512x128xbf16>
    %e0 = tensor.empty(%t) : tensor<?x128xbf16>
    %h = kiln.embedding ins(%ids, %we : tensor<?xi32>, tensor<512x128xbf16>) outs(%e0 : tensor<?x128xbf16>) -> tensor<?x128xbf16>
    %wn = kiln.weight_ref @"model.layers.0.input_layernorm.weight" : tensor<128xbf16>
    %e1 = tensor.empty(%t) : tensor<?x128xbf16>
    %n = kiln.rms_norm ins(%h, %wn : tensor<?x128xbf16>, tensor<128xbf16>) outs(%e1 : tensor<?x128xbf16>) {epsilon = 1.0e-5 : f32} -> tensor<?x128xbf16>
    %wq = kiln.weight_ref @"model.layers.0.self_attn.q_proj.weight" : tensor<128x128xbf16>
    %wk = kiln.weight_ref @"model.layers.0.self_attn.k_proj.weight" : tensor<64x128xbf16>
    %wv = kiln.weight_ref @"model.layers.0.self_attn.v_proj.weight" : tensor<64x128xbf16>
    %e2 = tensor.empty(%t) : tensor<?x128xbf16>
    %q2 = kiln.linear ins(%n, %wq : tensor<?x128xbf16>, tensor<128x128xbf16>) outs(%e2 : tensor<?x128xbf16>) -> tensor<?x128xbf16>
    %e3 = tensor.empty(%t) : tensor<?x64xbf16>
    %k2 = kiln.linear ins(%n, %wk : tensor<?x128xbf16>, tensor<64x128xbf16>) outs(%e3 : tensor<?x64xbf16>) -> tensor<?x64xbf16>
    %e4 = tensor.empty(%t) : tensor<?x64xbf16>
    %v2 = kiln.linear ins(%n, %wv : tensor<?x128xbf16>, tensor<64x128xbf16>) outs(%e4 : tensor<?x64xbf16>) -> tensor<?x64xbf16>
    %q = tensor.expand_shape %q2 [[0], [1, 2]] output_shape [%t, 2, 64] : tensor<?x128xbf16> into tensor<?x2x64xbf16>
    %k = tensor.expand_shape %k2 [[0], [1, 2]] output_shape [%t, 1, 64] : tensor<?x64xbf16> into tensor<?x1x64xbf16>
    %v = tensor.expand_shape %v2 [[0], [1, 2]] output_shape [%t, 1, 64] : tensor<?x64xbf16> into tensor<?x1x64xbf16>
    %e5 = tensor.empty(%t) : tensor<?x2x64xbf16>
    %qr = kiln.rope ins(%q, %pos : tensor<?x2x64xbf16>, tensor<?xi32>) outs(%e5 : tensor<?x2x64xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>} -> tensor<?x2x64xbf16>
    %e6 = tensor.empty(%t) : tensor<?x1x64xbf16>
    %kr = kiln.rope ins(%k, %pos : tensor<?x1x64xbf16>, tensor<?xi32>) outs(%e6 : tensor<?x1x64xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>} -> tensor<?x1x64xbf16>
    %a = kiln.attention layer 0 %qr, %kr, %v {num_heads = 2, num_kv_heads = 1, head_dim = 64} : tensor<?x2x64xbf16>, tensor<?x1x64xbf16>, tensor<?x1x64xbf16> -> tensor<?x2x64xbf16>
    %a2 = tensor.collapse_shape %a [[0], [1, 2]] : tensor<?x2x64xbf16> into tensor<?x128xbf16>
    %wo = kiln.weight_ref @"model.layers.0.self_attn.o_proj.weight" : tensor<128x128xbf16>
    %e7 = tensor.empty(%t) : tensor<?x128xbf16>
    %o = kiln.linear ins(%a2, %wo : tensor<?x128xbf16>, tensor<128x128xbf16>) outs(%e7 : tensor<?x128xbf16>) -> tensor<?x128xbf16>
    %e8 = tensor.empty(%t) : tensor<?x128xbf16>
    %h1 = kiln.add ins(%h, %o : tensor<?x128xbf16>, tensor<?x128xbf16>) outs(%e8 : tensor<?x128xbf16>) -> tensor<?x128xbf16>
    %wpn = kiln.weight_ref @"model.layers.0.post_attention_layernorm.weight" : tensor<128xbf16>
    %m0 = tensor.empty(%t) : tensor<?x128xbf16>
    %n2 = kiln.rms_norm ins(%h1, %wpn : tensor<?x128xbf16>, tensor<128xbf16>) outs(%m0 : tensor<?x128xbf16>) {epsilon = 1.0e-5 : f32} -> tensor<?x128xbf16>
    %wg = kiln.weight_ref @"model.layers.0.mlp.gate_proj.weight" : tensor<256x128xbf16>
    %wu = kiln.weight_ref @"model.layers.0.mlp.up_proj.weight" : tensor<256x128xbf16>
    %wd = kiln.weight_ref @"model.layers.0.mlp.down_proj.weight" : tensor<128x256xbf16>
    %m1 = tensor.empty(%t) : tensor<?x256xbf16>
    %g = kiln.linear ins(%n2, %wg : tensor<?x128xbf16>, tensor<256x128xbf16>) outs(%m1 : tensor<?x256xbf16>) -> tensor<?x256xbf16>
    %m2 = tensor.empty(%t) : tensor<?x256xbf16>
    %u = kiln.linear ins(%n2, %wu : tensor<?x128xbf16>, tensor<256x128xbf16>) outs(%m2 : tensor<?x256xbf16>) -> tensor<?x256xbf16>
    %m3 = tensor.empty(%t) : tensor<?x256xbf16>
    %act = kiln.swiglu ins(%g, %u : tensor<?x256xbf16>, tensor<?x256xbf16>) outs(%m3 : tensor<?x256xbf16>) -> tensor<?x256xbf16>
    %m4 = tensor.empty(%t) : tensor<?x128xbf16>
    %d = kiln.linear ins(%act, %wd : tensor<?x256xbf16>, tensor<128x256xbf16>) outs(%m4 : tensor<?x128xbf16>) -> tensor<?x128xbf16>
    %m5 = tensor.empty(%t) : tensor<?x128xbf16>
    %h2 = kiln.add ins(%h1, %d : tensor<?x128xbf16>, tensor<?x128xbf16>) outs(%m5 : tensor<?x128xbf16>) -> tensor<?x128xbf16>
    %e9 = tensor.empty(%r) : tensor<?x128xbf16>
    %last = kiln.gather_rows ins(%h2, %rows : tensor<?x128xbf16>, tensor<?xi32>) outs(%e9 : tensor<?x128xbf16>) -> tensor<?x128xbf16>
    %wf = kiln.weight_ref @"model.norm.weight" : tensor<128xbf16>
    %e10 = tensor.empty(%r) : tensor<?x128xbf16>
    %nf = kiln.rms_norm ins(%last, %wf : tensor<?x128xbf16>, tensor<128xbf16>) outs(%e10 : tensor<?x128xbf16>) {epsilon = 1.0e-5 : f32} -> tensor<?x128xbf16>
    %e11 = tensor.empty(%r) : tensor<?x512xbf16>
    %logits = kiln.linear ins(%nf, %we : tensor<?x128xbf16>, tensor<512x128xbf16>) outs(%e11 : tensor<?x512xbf16>) -> tensor<?x512xbf16>
    return %logits : tensor<?x512xbf16>
  }
}
