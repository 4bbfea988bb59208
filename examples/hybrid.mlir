// A small Nemotron-H-like hybrid decoder: Mamba2 layers (conv + SSM) and GQA
// attention layers with NVIDIA-Nemotron-Nano-9B-v2 shapes, plus one MTP draft layer.
// Compile it: kiln-opt examples/hybrid.mlir --kiln-deploy="target=l40s spec=mtp:3"
module attributes {
  kiln.model = #kiln.model<name = "tiny-nemotron-h", model_type = "nemotron_h",
                           num_layers = 4, dtype = bf16, weight_bytes = 2000000000>,
  kiln.target = #kiln.target<"h200">,
  kiln.runtime = #kiln.runtime<max_batch = 128, max_seq_len = 8192, page_size = 64, kv_dtype = bf16>
} {
  func.func @forward(%xc: tensor<?x17408xbf16>, %x: tensor<?x128x80xbf16>, %dt: tensor<?x128xbf16>,
                     %bc: tensor<?x8x128xbf16>, %q: tensor<?x40x128xbf16>,
                     %k: tensor<?x8x128xbf16>) -> (tensor<?x128x80xbf16>, tensor<?x40x128xbf16>) {
    %c0 = kiln.causal_conv layer 0 %xc {conv_dim = 17408, kernel_size = 4, silu}
      : tensor<?x17408xbf16> -> tensor<?x17408xbf16>
    %s0 = kiln.ssm layer 0 %x, %dt, %bc, %bc gate %x : tensor<?x128x80xbf16>
      {num_heads = 128, head_dim = 80, state_size = 128, n_groups = 8}
      : tensor<?x128x80xbf16>, tensor<?x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x128x80xbf16>
    %a1 = kiln.attention layer 1 %q, %k, %k {num_heads = 40, num_kv_heads = 8, head_dim = 128}
      : tensor<?x40x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x40x128xbf16>
    %c2 = kiln.causal_conv layer 2 %xc {conv_dim = 17408, kernel_size = 4, silu}
      : tensor<?x17408xbf16> -> tensor<?x17408xbf16>
    %s2 = kiln.ssm layer 2 %x, %dt, %bc, %bc gate %x : tensor<?x128x80xbf16>
      {num_heads = 128, head_dim = 80, state_size = 128, n_groups = 8}
      : tensor<?x128x80xbf16>, tensor<?x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x128x80xbf16>
    %a3 = kiln.attention layer 3 %q, %k, %k {num_heads = 40, num_kv_heads = 8, head_dim = 128}
      : tensor<?x40x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x40x128xbf16>
    %d4 = kiln.attention layer 4 %q, %k, %k {num_heads = 40, num_kv_heads = 8, head_dim = 128, draft = #kiln<draft mtp>}
      : tensor<?x40x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x40x128xbf16>
    return %s2, %a3 : tensor<?x128x80xbf16>, tensor<?x40x128xbf16>
  }
}
