// The end-to-end test's MLA model: two DeepSeek-V3-shaped MLA layers with 16 heads and
// one MTP draft layer (layer 2, only in kiln_model_draft_step).
//   kiln-compile examples/e2e/mla.mlir --emit=so -o mla.so [--spec mtp:3]
module attributes {
  kiln.model = #kiln.model<name = "e2e-mla", model_type = "deepseek_v3", num_layers = 2, dtype = bf16>,
  kiln.target = #kiln.target<"h200">,
  kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, page_size = 64, kv_dtype = bf16>
} {
  func.func @forward(%q: tensor<?x16x576xbf16>, %l: tensor<?x576xbf16>) -> (tensor<?x16x512xbf16>, tensor<?x16x512xbf16>) {
    %0 = kiln.mla_attention layer 0 %q, %l {num_heads = 16, kv_lora_rank = 512, qk_rope_head_dim = 64}
      : tensor<?x16x576xbf16>, tensor<?x576xbf16> -> tensor<?x16x512xbf16>
    %1 = kiln.mla_attention layer 1 %q, %l {num_heads = 16, kv_lora_rank = 512, qk_rope_head_dim = 64}
      : tensor<?x16x576xbf16>, tensor<?x576xbf16> -> tensor<?x16x512xbf16>
    %2 = kiln.mla_attention layer 2 %q, %l {num_heads = 16, kv_lora_rank = 512, qk_rope_head_dim = 64, draft = #kiln<draft mtp>}
      : tensor<?x16x576xbf16>, tensor<?x576xbf16> -> tensor<?x16x512xbf16>
    return %0, %1 : tensor<?x16x512xbf16>, tensor<?x16x512xbf16>
  }
}
