// Every verifier and parser diagnostic of the kiln dialect.
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

// expected-error @below {{unsupported SM 75; Kiln supports sm_80, sm_86, sm_89, sm_90, sm_100, sm_103, sm_120, sm_121}}
module attributes {kiln.target = #kiln.target<"t4", sm = 75>} {}

// -----
// expected-error @below {{unknown target preset 'h300' (known: a100, a10g, l4, l40s, h100, h200, b200, b300, rtx5090, rtx-pro-6000, dgx-spark, or sm_XY); a custom target needs 'sm = N'}}
module attributes {kiln.target = #kiln.target<"h300">} {}

// -----
// expected-error @below {{feature 'wgmma' is not available on sm_80}}
module attributes {kiln.target = #kiln.target<"a100", features = [wgmma]>} {}

// -----
// expected-error @below {{feature 'tcgen05' is not available on sm_120}}
module attributes {kiln.target = #kiln.target<"rtx5090", features = [tma, tcgen05]>} {}

// -----
// expected-error @below {{smem_per_block = 232448 is outside (0, 101376], the opt-in shared memory per block of sm_89}}
module attributes {kiln.target = #kiln.target<"l40s", smem_per_block = 232448>} {}

// -----
// expected-error @below {{#kiln.target needs a non-empty name}}
module attributes {kiln.target = #kiln.target<"", sm = 90>} {}

// -----
// expected-error @below {{unknown target feature 'dpx'; known: tma, wgmma, tcgen05, fp8, clusters}}
module attributes {kiln.target = #kiln.target<"h200", features = [dpx]>} {}

// -----
// expected-error @below {{unknown #kiln.target key 'memory_gb'; expected sm, sms, memory, smem_per_block or features}}
module attributes {kiln.target = #kiln.target<"h200", memory_gb = 141>} {}

// -----
// expected-error @below {{#kiln.spec: max_draft_len must be >= 1 (got 0); to turn speculation off remove the 'kiln.spec' attribute}}
module attributes {kiln.spec = #kiln.spec<mode = mtp, max_draft_len = 0>} {}

// -----
// expected-error @below {{expected ::kiln::SpecMode to be one of: mtp, eagle3, draft_target, ngram}}
// expected-error @below {{failed to parse Kiln_SpecAttr parameter 'mode'}}
module attributes {kiln.spec = #kiln.spec<mode = medusa, max_draft_len = 2>} {}

// -----
// expected-error @below {{#kiln.runtime: max_batch must be >= 1}}
module attributes {kiln.runtime = #kiln.runtime<max_batch = 0, max_seq_len = 8, kv_dtype = bf16>} {}

// -----
// expected-error @below {{#kiln.runtime: max_seq_len must be >= 1}}
module attributes {kiln.runtime = #kiln.runtime<max_batch = 1, max_seq_len = 0, kv_dtype = bf16>} {}

// -----
// expected-error @below {{#kiln.runtime: page_size = 48 must be a power of two in [8, 256]}}
module attributes {kiln.runtime = #kiln.runtime<max_batch = 1, max_seq_len = 8, page_size = 48, kv_dtype = bf16>} {}

// -----
// expected-error @below {{#kiln.runtime: page_size = 512 must be a power of two in [8, 256]}}
module attributes {kiln.runtime = #kiln.runtime<max_batch = 1, max_seq_len = 8, page_size = 512, kv_dtype = bf16>} {}

// -----
// expected-error @below {{#kiln.runtime: kv_ring_window = 128 needs an explicit max_step_tokens (it bounds the ring)}}
module attributes {kiln.runtime = #kiln.runtime<max_batch = 1, max_seq_len = 8, kv_dtype = bf16, kv_ring_window = 128>} {}

// -----
// expected-error @below {{#kiln.runtime: cuda_graph_batches is empty (leave it out to capture every batch, or set cuda_graphs = 0 for none)}}
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 8, kv_dtype = bf16, cuda_graph_batches = []>} {}

// -----
// expected-error @below {{#kiln.runtime: cuda_graph_batches[0] = 0 outside [1, max_batch 4]}}
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 8, kv_dtype = bf16, cuda_graph_batches = [0, 2]>} {}

// -----
// expected-error @below {{#kiln.runtime: cuda_graph_batches must be ascending without repeats (2 then 2)}}
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 8, kv_dtype = bf16, cuda_graph_batches = [1, 2, 2]>} {}

// -----
// expected-error @below {{#kiln.runtime: cuda_graphs = 4097 > 4096 step shapes}}
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 8, kv_dtype = bf16, cuda_graphs = 4097>} {}

// -----
// expected-error @below {{#kiln.runtime: tp = 3 must be a power of two}}
module attributes {kiln.runtime = #kiln.runtime<max_batch = 1, max_seq_len = 8, kv_dtype = bf16, tp = 3>} {}

// -----
// expected-error @below {{#kiln.runtime: kv_dtype 'i8' is not one of bf16, f16, f32, f8E4M3FN, f8E5M2}}
module attributes {kiln.runtime = #kiln.runtime<max_batch = 1, max_seq_len = 8, kv_dtype = i8>} {}

// -----
// expected-error @below {{#kiln.runtime: state_dtype 'f64' is not one of bf16, f16, f32}}
module attributes {kiln.runtime = #kiln.runtime<max_batch = 1, max_seq_len = 8, kv_dtype = bf16, state_dtype = f64>} {}

// -----
// expected-error @below {{'kiln.target' must be a #kiln.target attribute, got "h200"}}
module attributes {kiln.target = "h200"} {}

// -----
// expected-error @below {{'kiln.spec' must be a #kiln.spec attribute}}
module attributes {kiln.spec = #kiln.target<"h200">} {}

// -----
// expected-error @below {{'kiln.runtime' must be a #kiln.runtime attribute}}
module attributes {kiln.runtime = 1} {}

// -----
// expected-error @below {{'kiln.model' must be a #kiln.model attribute}}
module attributes {kiln.model = "llama"} {}

// -----
// expected-error @below {{'kiln.plan' must be a #kiln.plan attribute}}
module attributes {kiln.plan = unit} {}

// -----
module {
  // expected-error @below {{'kiln.target' configures a compilation and belongs on a builtin.module}}
  func.func @f() attributes {kiln.target = #kiln.target<"h200">} { return }
}

// -----
// expected-error @below {{unknown kiln attribute 'kiln.targets'; expected one of kiln.target, kiln.spec, kiln.runtime, kiln.model, kiln.plan}}
module attributes {kiln.targets = #kiln.target<"h200">} {}

// -----
func.func @f() {
  // expected-error @below {{'layer' must be >= 0, got -1}}
  %0 = kiln.cache_resource layer -1 unit [2, 8, 128] of bf16 : !kiln.cache<kv>
  return
}

// -----
func.func @f() {
  // expected-error @below {{'unit' shape must not be empty}}
  %0 = kiln.cache_resource layer 0 unit [] of bf16 : !kiln.cache<kv>
  return
}

// -----
func.func @f() {
  // expected-error @below {{'unit' dimensions must be positive, got 0}}
  %0 = kiln.cache_resource layer 0 unit [2, 0, 128] of bf16 : !kiln.cache<kv>
  return
}

// -----
func.func @f() {
  // expected-error @below {{element type must be an integer or float type, got 'index'}}
  %0 = kiln.cache_resource layer 0 unit [2] of index : !kiln.cache<kv>
  return
}

// -----
func.func @f() {
  // expected-error @below {{a intermediate_ssm_state resource exists only for speculative decoding and must be marked 'speculative_only'}}
  %0 = kiln.cache_resource layer 0 unit [4, 8, 64, 128] of f32 : !kiln.cache<intermediate_ssm_state>
  return
}

// -----
func.func @f() {
  // expected-error @below {{a ssm_state resource is needed without speculation and must not be marked 'speculative_only'}}
  %0 = kiln.cache_resource layer 0 unit [8, 64, 128] of f32 speculative_only : !kiln.cache<ssm_state>
  return
}

// -----
func.func @f() {
  // expected-error @below {{'shard' = 3 is not a dimension of 'unit' (rank 3)}}
  %0 = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 shard 3 : !kiln.cache<kv>
  return
}

// -----
func.func @f() {
  // expected-error @below {{'window' must be positive, got 0}}
  %0 = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 window 0 : !kiln.cache<kv>
  return
}

// -----
func.func @f() {
  // expected-error @below {{'window' only applies to per-token (KV) resources, not ssm_state}}
  %0 = kiln.cache_resource layer 0 unit [8, 64, 128] of f32 window 128 : !kiln.cache<ssm_state>
  return
}

// -----
func.func @f() {
  // expected-error @below {{'offset' must be >= 0}}
  %0 = kiln.cache_resource layer 0 unit [8, 64, 128] of f32 {offset = -4} : !kiln.cache<ssm_state>
  return
}

// -----
func.func @f() {
  // expected-error @below {{'bytes' must be >= 0}}
  %0 = kiln.cache_resource layer 0 unit [8, 64, 128] of f32 {bytes = -4} : !kiln.cache<ssm_state>
  return
}

// -----
func.func @f(%q: tensor<?x32x128xbf16>, %k: tensor<?x6x128xbf16>) {
  // expected-error @below {{num_heads (32) must be a multiple of num_kv_heads (6)}}
  %0 = kiln.attention layer 0 %q, %k, %k {num_heads = 32, num_kv_heads = 6, head_dim = 128}
    : tensor<?x32x128xbf16>, tensor<?x6x128xbf16>, tensor<?x6x128xbf16> -> tensor<?x32x128xbf16>
  return
}

// -----
func.func @f(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>) {
  // expected-error @below {{'num_kv_heads' must be positive, got 0}}
  %0 = kiln.attention layer 0 %q, %k, %k {num_heads = 32, num_kv_heads = 0, head_dim = 128}
    : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
  return
}

// -----
func.func @f(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>) {
  // expected-error @below {{'layer' must be >= 0, got -2}}
  %0 = kiln.attention layer -2 %q, %k, %k {num_heads = 32, num_kv_heads = 8, head_dim = 128}
    : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
  return
}

// -----
func.func @f(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>) {
  // expected-error @below {{'sliding_window' must be positive, got -1}}
  %0 = kiln.attention layer 0 %q, %k, %k {num_heads = 32, num_kv_heads = 8, head_dim = 128, sliding_window = -1}
    : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
  return
}

// -----
func.func @f(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x64xbf16>) {
  // expected-error @below {{'k' must have shape [?, 8, 128], got 'tensor<?x8x64xbf16>'}}
  %0 = kiln.attention layer 0 %q, %k, %k {num_heads = 32, num_kv_heads = 8, head_dim = 128}
    : tensor<?x32x128xbf16>, tensor<?x8x64xbf16>, tensor<?x8x64xbf16> -> tensor<?x32x128xbf16>
  return
}

// -----
func.func @f(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>) {
  // expected-error @below {{'result' must have shape [?, 32, 128], got 'tensor<?x32xbf16>'}}
  %0 = kiln.attention layer 0 %q, %k, %k {num_heads = 32, num_kv_heads = 8, head_dim = 128}
    : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32xbf16>
  return
}

// -----
func.func @f(%q: tensor<?x16x576xbf16>, %l: tensor<?x512xbf16>) {
  // expected-error @below {{'latent' must have shape [?, 576], got 'tensor<?x512xbf16>'}}
  %0 = kiln.mla_attention layer 0 %q, %l {num_heads = 16, kv_lora_rank = 512, qk_rope_head_dim = 64}
    : tensor<?x16x576xbf16>, tensor<?x512xbf16> -> tensor<?x16x512xbf16>
  return
}

// -----
func.func @f(%q: tensor<?x16x576xbf16>, %l: tensor<?x576xbf16>) {
  // expected-error @below {{'kv_lora_rank' must be positive, got 0}}
  %0 = kiln.mla_attention layer 0 %q, %l {num_heads = 16, kv_lora_rank = 0, qk_rope_head_dim = 64}
    : tensor<?x16x576xbf16>, tensor<?x576xbf16> -> tensor<?x16x512xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x128x64xbf16>, %dt: tensor<?x128xbf16>, %b: tensor<?x6x128xbf16>) {
  // expected-error @below {{num_heads (128) must be a multiple of n_groups (6)}}
  %0 = kiln.ssm layer 0 %x, %dt, %b, %b {num_heads = 128, head_dim = 64, state_size = 128, n_groups = 6}
    : tensor<?x128x64xbf16>, tensor<?x128xbf16>, tensor<?x6x128xbf16>, tensor<?x6x128xbf16> -> tensor<?x128x64xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x128x64xbf16>, %dt: tensor<?x128xbf16>, %b: tensor<?x8x128xbf16>) {
  // expected-error @below {{'dt' must have shape [?, 128], got 'tensor<?x8x128xbf16>'}}
  %0 = kiln.ssm layer 0 %x, %b, %b, %b {num_heads = 128, head_dim = 64, state_size = 128, n_groups = 8}
    : tensor<?x128x64xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x128x64xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x128x64xbf16>, %dt: tensor<?x128xbf16>, %b: tensor<?x8x128xbf16>) {
  // expected-error @below {{'state_size' must be positive, got 0}}
  %0 = kiln.ssm layer 0 %x, %dt, %b, %b {num_heads = 128, head_dim = 64, state_size = 0, n_groups = 8}
    : tensor<?x128x64xbf16>, tensor<?x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x128x64xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x8x64xbf16>, %dt: tensor<?x8xbf16>, %b: tensor<?x2x64xbf16>, %p: tensor<8xbf16>) {
  // expected-error @below {{'a_log' must be f32, got 'bf16'}}
  %0 = kiln.ssm layer 0 %x, %dt, %b, %b a_log(%p : tensor<8xbf16>) {num_heads = 8, head_dim = 64, state_size = 64, n_groups = 2}
    : tensor<?x8x64xbf16>, tensor<?x8xbf16>, tensor<?x2x64xbf16>, tensor<?x2x64xbf16> -> tensor<?x8x64xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x8x64xbf16>, %dt: tensor<?x8xbf16>, %b: tensor<?x2x64xbf16>, %p: tensor<16xf32>) {
  // expected-error @below {{'d' must have shape [8], got 'tensor<16xf32>'}}
  %0 = kiln.ssm layer 0 %x, %dt, %b, %b d(%p : tensor<16xf32>) {num_heads = 8, head_dim = 64, state_size = 64, n_groups = 2}
    : tensor<?x8x64xbf16>, tensor<?x8xbf16>, tensor<?x2x64xbf16>, tensor<?x2x64xbf16> -> tensor<?x8x64xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x8x64xbf16>, %dt: tensor<?x8xbf16>, %b: tensor<?x2x64xbf16>, %p: tensor<8xf32>) {
  // expected-error @below {{has 'd' or 'dt_bias' but no 'a_log' (the parameters come together)}}
  %0 = kiln.ssm layer 0 %x, %dt, %b, %b dt_bias(%p : tensor<8xf32>) {num_heads = 8, head_dim = 64, state_size = 64, n_groups = 2}
    : tensor<?x8x64xbf16>, tensor<?x8xbf16>, tensor<?x2x64xbf16>, tensor<?x2x64xbf16> -> tensor<?x8x64xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x8x64xbf16>, %dt: tensor<?x8xbf16>, %b: tensor<?x2x64xbf16>, %p: tensor<8xf32>) {
  // expected-error @below {{'dt_min' must be finite and >= 0}}
  %0 = kiln.ssm layer 0 %x, %dt, %b, %b a_log(%p : tensor<8xf32>) {num_heads = 8, head_dim = 64, state_size = 64, n_groups = 2, dt_min = -1.0 : f32}
    : tensor<?x8x64xbf16>, tensor<?x8xbf16>, tensor<?x2x64xbf16>, tensor<?x2x64xbf16> -> tensor<?x8x64xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x1024xbf16>, %w: tensor<1024x3xbf16>) {
  // expected-error @below {{'weight' must have shape [1024, 4], got 'tensor<1024x3xbf16>'}}
  %0 = kiln.causal_conv layer 0 %x weight(%w : tensor<1024x3xbf16>) {conv_dim = 1024, kernel_size = 4} : tensor<?x1024xbf16> -> tensor<?x1024xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x1024xbf16>, %cb: tensor<1024xbf16>) {
  // expected-error @below {{has a 'bias' but no 'weight'}}
  %0 = kiln.causal_conv layer 0 %x bias(%cb : tensor<1024xbf16>) {conv_dim = 1024, kernel_size = 4} : tensor<?x1024xbf16> -> tensor<?x1024xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x1024xbf16>) {
  // expected-error @below {{'kernel_size' must be in [2, 4], got 5}}
  %0 = kiln.causal_conv layer 0 %x {conv_dim = 1024, kernel_size = 5} : tensor<?x1024xbf16> -> tensor<?x1024xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x1024xbf16>) {
  // expected-error @below {{'x' must have shape [?, 2048], got 'tensor<?x1024xbf16>'}}
  %0 = kiln.causal_conv layer 0 %x {conv_dim = 2048, kernel_size = 4} : tensor<?x1024xbf16> -> tensor<?x1024xbf16>
  return
}

// -----
func.func @f(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>) {
  // expected-error @below {{slot 'kv' of layer 0 must hold a resource}}
  %0 = kiln.cached_attention layer 0 %q, %k, %k outs(%q : tensor<?x32x128xbf16>) {num_heads = 32, num_kv_heads = 8, head_dim = 128}
    : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
  return
}

// -----
func.func @f(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>) {
  %s = kiln.cache_resource layer 0 unit [8, 64, 128] of f32 : !kiln.cache<ssm_state>
  // expected-error @below {{slot 'kv' expects !kiln.cache<kv>, got '!kiln.cache<ssm_state>'}}
  %0 = kiln.cached_attention layer 0 %q, %k, %k kv(%s : !kiln.cache<ssm_state>) outs(%q : tensor<?x32x128xbf16>) {num_heads = 32, num_kv_heads = 8, head_dim = 128}
    : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
  return
}

// -----
func.func @f(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>) {
  %kv = kiln.cache_resource layer 5 unit [2, 8, 128] of bf16 : !kiln.cache<kv>
  // A draft layer's KV exists only for speculation: a plain kv resource is wrong there.
  // expected-error @below {{slot 'kv' expects !kiln.cache<draft_kv>, got '!kiln.cache<kv>'}}
  %0 = kiln.cached_attention layer 5 %q, %k, %k kv(%kv : !kiln.cache<kv>) outs(%q : tensor<?x32x128xbf16>) {num_heads = 32, num_kv_heads = 8, head_dim = 128, draft = #kiln<draft mtp>}
    : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
  return
}

// -----
func.func @f(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>) {
  %kv = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 speculative_only : !kiln.cache<draft_kv>
  // expected-error @below {{slot 'kv' expects !kiln.cache<kv>, got '!kiln.cache<draft_kv>'}}
  %0 = kiln.cached_attention layer 0 %q, %k, %k kv(%kv : !kiln.cache<draft_kv>) outs(%q : tensor<?x32x128xbf16>) {num_heads = 32, num_kv_heads = 8, head_dim = 128}
    : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
  return
}

// -----
func.func @f(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>) {
  %kv = kiln.cache_resource layer 1 unit [2, 8, 128] of bf16 : !kiln.cache<kv>
  // expected-error @below {{slot 'kv' holds the resource of layer 1, but the op is layer 0}}
  %0 = kiln.cached_attention layer 0 %q, %k, %k kv(%kv : !kiln.cache<kv>) outs(%q : tensor<?x32x128xbf16>) {num_heads = 32, num_kv_heads = 8, head_dim = 128}
    : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
  return
}

// -----
func.func @f(%q: tensor<?x16x576xbf16>, %l: tensor<?x576xbf16>, %o: tensor<?x16x512xbf16>) {
  // expected-error @below {{slot 'cache' of layer 0 must hold a resource}}
  %0 = kiln.cached_mla_attention layer 0 %q, %l outs(%o : tensor<?x16x512xbf16>) {num_heads = 16, kv_lora_rank = 512, qk_rope_head_dim = 64}
    : tensor<?x16x576xbf16>, tensor<?x576xbf16> -> tensor<?x16x512xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x128x64xbf16>, %dt: tensor<?x128xbf16>, %b: tensor<?x8x128xbf16>) {
  %s = kiln.cache_resource layer 0 unit [128, 64, 128] of f32 : !kiln.cache<ssm_state>
  %rx = kiln.cache_resource layer 0 unit [2, 4, 128, 64] of bf16 speculative_only : !kiln.cache<replay_x>
  // expected-error @below {{replay slots are all-or-none: replay mode needs replay_x, replay_b and replay_dt}}
  %0 = kiln.cached_ssm layer 0 %x, %dt, %b, %b state(%s : !kiln.cache<ssm_state>) replay_x(%rx : !kiln.cache<replay_x>)
    outs(%x : tensor<?x128x64xbf16>) {num_heads = 128, head_dim = 64, state_size = 128, n_groups = 8}
    : tensor<?x128x64xbf16>, tensor<?x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x128x64xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x128x64xbf16>, %dt: tensor<?x128xbf16>, %b: tensor<?x8x128xbf16>) {
  %s = kiln.cache_resource layer 0 unit [128, 64, 128] of f32 : !kiln.cache<ssm_state>
  %i = kiln.cache_resource layer 0 unit [4, 128, 64, 128] of f32 speculative_only : !kiln.cache<intermediate_ssm_state>
  %rx = kiln.cache_resource layer 0 unit [2, 4, 128, 64] of bf16 speculative_only : !kiln.cache<replay_x>
  %rb = kiln.cache_resource layer 0 unit [2, 4, 8, 128] of bf16 speculative_only : !kiln.cache<replay_b>
  %rdt = kiln.cache_resource layer 0 unit [2, 128, 4] of f32 speculative_only : !kiln.cache<replay_dt>
  // expected-error @below {{'intermediate' (rewind mode) and the replay slots (replay mode) are exclusive}}
  %0 = kiln.cached_ssm layer 0 %x, %dt, %b, %b state(%s : !kiln.cache<ssm_state>) intermediate(%i : !kiln.cache<intermediate_ssm_state>)
    replay_x(%rx : !kiln.cache<replay_x>) replay_b(%rb : !kiln.cache<replay_b>)
    replay_dt(%rdt : !kiln.cache<replay_dt>)
    outs(%x : tensor<?x128x64xbf16>)
    {num_heads = 128, head_dim = 64, state_size = 128, n_groups = 8}
    : tensor<?x128x64xbf16>, tensor<?x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x128x64xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x1024xbf16>) {
  %s = kiln.cache_resource layer 0 unit [1024, 3] of bf16 : !kiln.cache<conv_state>
  // expected-error @below {{slot 'intermediate' expects !kiln.cache<intermediate_conv_state>, got '!kiln.cache<conv_state>'}}
  %0 = kiln.cached_causal_conv layer 0 %x state(%s : !kiln.cache<conv_state>) intermediate(%s : !kiln.cache<conv_state>)
    outs(%x : tensor<?x1024xbf16>) {conv_dim = 1024, kernel_size = 4} : tensor<?x1024xbf16> -> tensor<?x1024xbf16>
  return
}
