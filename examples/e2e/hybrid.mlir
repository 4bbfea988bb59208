// The end-to-end test's hybrid model: two Mamba2 mixers (conv + SSM) and two GQA
// attention layers, small enough for an fp64 reference, plus one MTP draft layer
// (layer 4) so that `--spec mtp:3` applies: it only runs in kiln_model_draft_step, never
// in the prefill or decode steps. Compile:
//   kiln-compile examples/e2e/hybrid.mlir --emit=so -o hybrid.so [--spec mtp:3]
module attributes {
  kiln.model = #kiln.model<name = "e2e-hybrid", model_type = "nemotron_h", num_layers = 4, dtype = bf16>,
  kiln.target = #kiln.target<"h200">,
  kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, page_size = 16, kv_dtype = bf16>
} {
  func.func @forward(%xc: tensor<?x1024xbf16>, %x: tensor<?x8x64xbf16>, %dt: tensor<?x8xbf16>,
                     %bc: tensor<?x2x128xbf16>, %q: tensor<?x8x128xbf16>, %k: tensor<?x2x128xbf16>)
      -> (tensor<?x1024xbf16>, tensor<?x8x64xbf16>, tensor<?x8x128xbf16>,
          tensor<?x1024xbf16>, tensor<?x8x64xbf16>, tensor<?x8x128xbf16>) {
    %c0 = kiln.causal_conv layer 0 %xc {conv_dim = 1024, kernel_size = 4, silu} : tensor<?x1024xbf16> -> tensor<?x1024xbf16>
    %s0 = kiln.ssm layer 0 %x, %dt, %bc, %bc gate %x : tensor<?x8x64xbf16> {num_heads = 8, head_dim = 64, state_size = 128, n_groups = 2}
      : tensor<?x8x64xbf16>, tensor<?x8xbf16>, tensor<?x2x128xbf16>, tensor<?x2x128xbf16> -> tensor<?x8x64xbf16>
    %a1 = kiln.attention layer 1 %q, %k, %k {num_heads = 8, num_kv_heads = 2, head_dim = 128}
      : tensor<?x8x128xbf16>, tensor<?x2x128xbf16>, tensor<?x2x128xbf16> -> tensor<?x8x128xbf16>
    %c2 = kiln.causal_conv layer 2 %xc {conv_dim = 1024, kernel_size = 4, silu} : tensor<?x1024xbf16> -> tensor<?x1024xbf16>
    %s2 = kiln.ssm layer 2 %x, %dt, %bc, %bc gate %x : tensor<?x8x64xbf16> {num_heads = 8, head_dim = 64, state_size = 128, n_groups = 2}
      : tensor<?x8x64xbf16>, tensor<?x8xbf16>, tensor<?x2x128xbf16>, tensor<?x2x128xbf16> -> tensor<?x8x64xbf16>
    %a3 = kiln.attention layer 3 %q, %k, %k {num_heads = 8, num_kv_heads = 2, head_dim = 128}
      : tensor<?x8x128xbf16>, tensor<?x2x128xbf16>, tensor<?x2x128xbf16> -> tensor<?x8x128xbf16>
    %d4 = kiln.attention layer 4 %q, %k, %k {num_heads = 8, num_kv_heads = 2, head_dim = 128, draft = #kiln<draft mtp>}
      : tensor<?x8x128xbf16>, tensor<?x2x128xbf16>, tensor<?x2x128xbf16> -> tensor<?x8x128xbf16>
    return %c0, %s0, %a1, %c2, %s2, %a3 : tensor<?x1024xbf16>, tensor<?x8x64xbf16>, tensor<?x8x128xbf16>,
                                          tensor<?x1024xbf16>, tensor<?x8x64xbf16>, tensor<?x8x128xbf16>
  }
}
