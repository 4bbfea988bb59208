// The report reads a compiled module as is (--import-only skips the pipeline): plan,
// pools, resource bytes and pools, kernels, spec-dec modes.
// RUN: not kiln-compile %s --import-only --report json | FileCheck %s
// RUN: not kiln-compile %s --import-only --report text | FileCheck %s --check-prefix=TEXT
// RUN: sh -c 'kiln-compile %s --import-only --report json > %t.nofit.json; test $? -eq 2'
// RUN: python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['memory']['fits'] is False" %t.nofit.json

// CHECK:      "model": {
// CHECK-NEXT:   "name": "tiny-hybrid",
// CHECK-NEXT:   "model_type": "nemotron_h",
// CHECK-NEXT:   "num_layers": 3
// CHECK-NEXT: },
// CHECK-NEXT: "target": {
// CHECK-NEXT:   "name": "l40s",
// CHECK-NEXT:   "sm": 89,
// CHECK-NEXT:   "memory_bytes": [[MEM:[0-9]+]]
// CHECK-NEXT: },
// CHECK-NEXT: "spec": {
// CHECK-NEXT:   "mode": "mtp",
// CHECK-NEXT:   "max_draft_len": 3,
// CHECK-NEXT:   "ssm_mode": "rewind"
// CHECK-NEXT: },
// CHECK-NEXT: "resources": [
// CHECK-NEXT:   {
// CHECK-NEXT:     "name": "layer0.kv",
// CHECK-NEXT:     "layer": 0,
// CHECK-NEXT:     "kind": "kv",
// CHECK-NEXT:     "speculative_only": false,
// CHECK-NEXT:     "bytes": 1000,
// CHECK-NEXT:     "pool": "kv"
// CHECK-NEXT:   },
// CHECK:          "name": "layer1.ssm_state",
// CHECK:          "pool": "state"
// CHECK:          "name": "layer1.intermediate_ssm_state",
// CHECK-NEXT:     "layer": 1,
// CHECK-NEXT:     "kind": "intermediate_ssm_state",
// CHECK-NEXT:     "speculative_only": true,
// CHECK-NEXT:     "bytes": 4000,
// CHECK-NEXT:     "pool": "unmanaged"
// CHECK:          "name": "layer2.draft_kv",
// CHECK-NEXT:     "layer": 2,
// CHECK-NEXT:     "kind": "draft_kv",
// CHECK-NEXT:     "speculative_only": true,
// CHECK:      "kernels": [
// CHECK-NEXT:   {
// CHECK-NEXT:     "layer": 0,
// CHECK-NEXT:     "op": "attention",
// CHECK-NEXT:     "phase": "decode",
// CHECK-NEXT:     "kernel": "gqa_decode",
// CHECK-NEXT:     "spec_dec_mode": "multi_token",
// CHECK-NEXT:     "implemented": true
// CHECK-NEXT:   },
// CHECK-NEXT:   {
// CHECK-NEXT:     "layer": 0,
// CHECK-NEXT:     "op": "attention",
// CHECK-NEXT:     "phase": "prefill",
// CHECK-NEXT:     "kernel": "prefill_fmha",
// CHECK:          "op": "ssm",
// CHECK-NEXT:     "phase": "decode",
// CHECK-NEXT:     "kernel": "ssm_update_spec",
// CHECK-NEXT:     "spec_dec_mode": null
// CHECK:          "op": "mla_attention",
// CHECK:      "memory": {
// CHECK-NEXT:   "total_bytes": 7500,
// CHECK-NEXT:   "kv_bytes": 1500,
// CHECK-NEXT:   "state_bytes": 2000,
// CHECK-NEXT:   "speculative_bytes": 4500,
// CHECK-NEXT:   "unmanaged_bytes": 4000,
// CHECK-NEXT:   "budget_bytes": 5000,
// CHECK-NEXT:   "fits": false
// CHECK-NEXT: }

// TEXT: model   tiny-hybrid (nemotron_h, 3 layers
// TEXT: target  l40s (sm_89
// TEXT: spec    mtp, max_draft_len 3, ssm rewind
// TEXT: Memory (budget 4.88 KiB): DOES NOT FIT
// TEXT: WARNING: 3.91 KiB are UNMANAGED allocations outside Kiln's pools
// TEXT: Largest consumers (by kind)
// TEXT-NEXT: 1 x intermediate_ssm_state (speculative-only) {{ *}}3.91 KiB
// TEXT-NEXT: 1 x ssm_state {{ *}}1.95 KiB
// TEXT: Largest single resources
// TEXT-NEXT: layer1.intermediate_ssm_state {{ *}}3.91 KiB  (unmanaged, speculative-only)

module attributes {
  kiln.target = #kiln.target<"l40s">,
  kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 128, page_size = 64, kv_dtype = bf16, tp = 1>,
  kiln.spec = #kiln.spec<mode = mtp, max_draft_len = 3, ssm = rewind>,
  kiln.model = #kiln.model<name = "tiny-hybrid", model_type = "nemotron_h", num_layers = 3, dtype = bf16, weight_bytes = 100>,
  kiln.plan = #kiln.plan<total_bytes = 7500, kv_bytes = 1500, state_bytes = 2000, speculative_bytes = 4500,
                         unmanaged_bytes = 4000, budget_bytes = 5000, kv_pages = 8, fits = false,
                         pools = [#kiln.pool<"kv.full.d128.bf16", category = kv, offset = 0, bytes = 1500, resources = 2>,
                                  #kiln.pool<"state", category = state, offset = 1500, bytes = 2000, resources = 1>]>
} {
  func.func @forward(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>,
                     %x: tensor<?x16x64xbf16>, %dt: tensor<?x16xbf16>, %bc: tensor<?x2x128xbf16>,
                     %mq: tensor<?x16x576xbf16>, %lat: tensor<?x576xbf16>,
                     %o0: tensor<?x32x128xbf16>, %o1: tensor<?x16x64xbf16>, %o2: tensor<?x16x512xbf16>) {
    %kv = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 shard 1 {pool = "kv.full.d128.bf16", offset = 0, bytes = 1000} : !kiln.cache<kv>
    %0 = kiln.cached_attention layer 0 %q, %k, %k kv(%kv : !kiln.cache<kv>) outs(%o0 : tensor<?x32x128xbf16>)
      {num_heads = 32, num_kv_heads = 8, head_dim = 128,
       decode_kernel = "gqa_decode", prefill_kernel = "prefill_fmha", spec_dec_mode = #kiln<spec_dec_mode multi_token>}
      : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
    %s = kiln.cache_resource layer 1 unit [16, 64, 128] of f32 shard 0 {pool = "state", offset = 1500, bytes = 2000} : !kiln.cache<ssm_state>
    %i = kiln.cache_resource layer 1 unit [4, 16, 64, 128] of f32 shard 1 speculative_only unmanaged {bytes = 4000} : !kiln.cache<intermediate_ssm_state>
    %1 = kiln.cached_ssm layer 1 %x, %dt, %bc, %bc state(%s : !kiln.cache<ssm_state>) intermediate(%i : !kiln.cache<intermediate_ssm_state>)
      outs(%o1 : tensor<?x16x64xbf16>)
      {num_heads = 16, head_dim = 64, state_size = 128, n_groups = 2,
       decode_kernel = "ssm_update_spec", prefill_kernel = "ssm_chunk_scan"}
      : tensor<?x16x64xbf16>, tensor<?x16xbf16>, tensor<?x2x128xbf16>, tensor<?x2x128xbf16> -> tensor<?x16x64xbf16>
    %d = kiln.cache_resource layer 2 unit [576] of bf16 speculative_only {pool = "kv.full.d128.bf16", offset = 1000, bytes = 500} : !kiln.cache<draft_kv>
    %2 = kiln.cached_mla_attention layer 2 %mq, %lat cache(%d : !kiln.cache<draft_kv>) outs(%o2 : tensor<?x16x512xbf16>)
      {num_heads = 16, kv_lora_rank = 512, qk_rope_head_dim = 64, draft = #kiln<draft mtp>,
       decode_kernel = "mla_decode", prefill_kernel = "mla_prefill", spec_dec_mode = #kiln<spec_dec_mode multi_token>}
      : tensor<?x16x576xbf16>, tensor<?x576xbf16> -> tensor<?x16x512xbf16>
    return
  }
}
