// The spec-dec rules come out of the kernel registry, per target SM and MLA.
// GQA + one-model spec: multi-token on every SM, sm_120 included (the TensorRT-LLM fix).
// MLA + one-model spec: multi-token where the multi-token MLA variant fits in shared
// memory (226.5 KiB: sm_90, sm_100/103), extend-context elsewhere (163 KiB on sm_80,
// 99 KiB on sm_86/89/120/121).
// RUN: for sm in 80 86 89 90 100 103 120 121; do sed -e "s/SM/$sm/" %s | kiln-opt -kiln-select-kernels | FileCheck %s --check-prefix=GQA; done
// RUN: for sm in 90 100 103; do sed -e "s/SM/$sm/" %s | kiln-opt -kiln-select-kernels | FileCheck %s --check-prefix=MLA-MT; done
// RUN: for sm in 80 86 89 120 121; do sed -e "s/SM/$sm/" %s | kiln-opt -kiln-select-kernels | FileCheck %s --check-prefix=MLA-EXT; done
// RUN: for mode in eagle3 draft_target ngram; do sed -e "s/SM/120/" -e "s/mode = mtp/mode = $mode/" %s | kiln-opt -kiln-select-kernels | FileCheck %s --check-prefix=GQA; done
// RUN: sed -e "s/SM/90/" -e "s/kiln.spec = #kiln.spec<mode = mtp, max_draft_len = 3>, //" %s | kiln-opt -kiln-select-kernels | FileCheck %s --check-prefix=NOSPEC

// GQA: kiln.cached_attention layer 0 {{.*}}decode_kernel = "gqa_decode"{{.*}}prefill_kernel = "prefill_fmha", spec_dec_mode = #kiln<spec_dec_mode multi_token>
// GQA: kiln.cached_attention layer 2 {{.*}}decode_kernel = "gqa_decode"{{.*}}spec_dec_mode = #kiln<spec_dec_mode single_token>
// MLA-MT: kiln.cached_mla_attention layer 1 {{.*}}decode_kernel = "mla_decode"{{.*}}spec_dec_mode = #kiln<spec_dec_mode multi_token>
// MLA-EXT: kiln.cached_mla_attention layer 1 {{.*}}decode_kernel = "mla_decode_small_smem"{{.*}}spec_dec_mode = #kiln<spec_dec_mode extend_context>
// NOSPEC: kiln.cached_attention layer 0 {{.*}}spec_dec_mode = #kiln<spec_dec_mode single_token>
// NOSPEC: kiln.cached_mla_attention layer 1 {{.*}}decode_kernel = "mla_decode"{{.*}}spec_dec_mode = #kiln<spec_dec_mode single_token>
module attributes {kiln.spec = #kiln.spec<mode = mtp, max_draft_len = 3>, kiln.target = #kiln.target<"gpu", sm = SM>,
                   kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 1024, kv_dtype = bf16>} {
  func.func @f(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>, %mq: tensor<?x128x576xbf16>, %l: tensor<?x576xbf16>,
               %out: tensor<?x128x512xbf16>) {
    %kv = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 : !kiln.cache<kv>
    %lat = kiln.cache_resource layer 1 unit [576] of bf16 : !kiln.cache<mla_latent>
    %d = kiln.cache_resource layer 2 unit [2, 8, 128] of bf16 speculative_only : !kiln.cache<draft_kv>
    %0 = kiln.cached_attention layer 0 %q, %k, %k kv(%kv : !kiln.cache<kv>) outs(%q : tensor<?x32x128xbf16>) {num_heads = 32, num_kv_heads = 8, head_dim = 128}
      : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
    %1 = kiln.cached_mla_attention layer 1 %mq, %l cache(%lat : !kiln.cache<mla_latent>) outs(%out : tensor<?x128x512xbf16>) {num_heads = 128, kv_lora_rank = 512, qk_rope_head_dim = 64}
      : tensor<?x128x576xbf16>, tensor<?x576xbf16> -> tensor<?x128x512xbf16>
    %2 = kiln.cached_attention layer 2 %q, %k, %k kv(%d : !kiln.cache<draft_kv>) outs(%q : tensor<?x32x128xbf16>) {num_heads = 32, num_kv_heads = 8, head_dim = 128, draft = #kiln<draft draft_model>}
      : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
    return
  }
}
