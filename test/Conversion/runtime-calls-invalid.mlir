// RUN: kiln-opt %s -split-input-file --convert-kiln-to-runtime-calls -verify-diagnostics
// (An op that cannot be lowered also gets the conversion driver's "failed to legalize".)
// A kernel the runtime does not have cannot be lowered (the selected prefill kernel
// replaced by one the registry does not implement, as a module from elsewhere may carry;
// no variant of the table is planned now, so the name is one it does not list).
// RUN: kiln-opt %S/Inputs/tiny.mlir --kiln-deploy="target=h200" | sed 's/prefill_kernel = "prefill_fmha_sm90"/prefill_kernel = "prefill_fmha_sm100"/' > %t.planned.mlir
// RUN: not kiln-opt %t.planned.mlir --kiln-lower 2>&1 | FileCheck %s --check-prefix=PLANNED
// PLANNED: error: 'kiln.cached_attention' op kernel 'prefill_fmha_sm100' is planned but not implemented; it cannot be lowered
// PLANNED-NOT: kiln_model_forward

func.func @no_context(%x: memref<?x128xbf16>, %o: memref<?x128xbf16>) {
  // expected-error @below {{'kiln.add' op lowers to a runtime call, so its function needs an '!llvm.ptr {kiln.context}' argument (the runtime context)}}
  // expected-error @below {{failed to legalize operation 'kiln.add' that was explicitly marked illegal}}
  kiln.add ins(%x, %x : memref<?x128xbf16>, memref<?x128xbf16>) outs(%o : memref<?x128xbf16>)
  return
}

// -----
func.func @tensors(%ctx: !llvm.ptr {kiln.context}, %x: tensor<?x128xbf16>, %o: tensor<?x128xbf16>) -> tensor<?x128xbf16> {
  // expected-error @below {{'kiln.add' op lowers to a runtime call only on buffers; bufferize first}}
  // expected-error @below {{failed to legalize operation 'kiln.add' that was explicitly marked illegal}}
  %0 = kiln.add ins(%x, %x : tensor<?x128xbf16>, tensor<?x128xbf16>) outs(%o : tensor<?x128xbf16>) -> tensor<?x128xbf16>
  return %0 : tensor<?x128xbf16>
}

// -----
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>} {
  func.func @mla(%ctx: !llvm.ptr {kiln.context}, %q: memref<?x16x576xbf16>, %l: memref<?x576xbf16>, %o: memref<?x16x512xbf16>) {
    %c = kiln.cache_resource layer 3 unit [576] of bf16 {offset = 0 : i64} : !kiln.cache<mla_latent>
    // expected-error @below {{'kiln.cached_mla_attention' op layer 3: the cache-planning form of MLA (no kv_b) does not lower; import the model's whole graph}}
    // expected-error @below {{failed to legalize operation 'kiln.cached_mla_attention' that was explicitly marked illegal}}
    kiln.cached_mla_attention layer 3 %q, %l cache(%c : !kiln.cache<mla_latent>) outs(%o : memref<?x16x512xbf16>)
      {num_heads = 16, kv_lora_rank = 512, qk_rope_head_dim = 64} : memref<?x16x576xbf16>, memref<?x576xbf16>
    return
  }
}

// -----
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>} {
  func.func @ssm(%ctx: !llvm.ptr {kiln.context}, %x: memref<?x8x64xbf16>, %dt: memref<?x8xbf16>, %bc: memref<?x2x128xbf16>, %o: memref<?x8x64xbf16>) {
    %s = kiln.cache_resource layer 1 unit [8, 64, 128] of f32 {offset = 0 : i64} : !kiln.cache<ssm_state>
    // expected-error @below {{'kiln.cached_ssm' op layer 1: lowering needs the layer's parameters (a_log, d, dt_bias)}}
    // expected-error @below {{failed to legalize operation 'kiln.cached_ssm' that was explicitly marked illegal}}
    kiln.cached_ssm layer 1 %x, %dt, %bc, %bc state(%s : !kiln.cache<ssm_state>) outs(%o : memref<?x8x64xbf16>)
      {num_heads = 8, head_dim = 64, state_size = 128, n_groups = 2} : memref<?x8x64xbf16>, memref<?x8xbf16>, memref<?x2x128xbf16>, memref<?x2x128xbf16>
    return
  }
}

// -----
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>} {
  func.func @conv(%ctx: !llvm.ptr {kiln.context}, %x: memref<?x1024xbf16>, %o: memref<?x1024xbf16>) {
    %s = kiln.cache_resource layer 0 unit [1024, 3] of bf16 {offset = 0 : i64} : !kiln.cache<conv_state>
    // expected-error @below {{'kiln.cached_causal_conv' op layer 0: lowering needs the conv's weight (and bias, if any)}}
    // expected-error @below {{failed to legalize operation 'kiln.cached_causal_conv' that was explicitly marked illegal}}
    kiln.cached_causal_conv layer 0 %x state(%s : !kiln.cache<conv_state>) outs(%o : memref<?x1024xbf16>)
      {conv_dim = 1024, kernel_size = 4, silu} : memref<?x1024xbf16>
    return
  }
}

// -----
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>} {
  func.func @ssm_gate_in_scan(%ctx: !llvm.ptr {kiln.context}, %x: memref<?x8x64xbf16>, %dt: memref<?x8xbf16>, %bc: memref<?x2x128xbf16>, %p: memref<8xf32>, %o: memref<?x8x64xbf16>) {
    %s = kiln.cache_resource layer 1 unit [8, 64, 128] of f32 {offset = 0 : i64} : !kiln.cache<ssm_state>
    // expected-error @below {{'kiln.cached_ssm' op layer 1: a gate inside the scan is not lowered; apply it in a kiln.gated_rms_norm after the scan (Mamba2's order)}}
    // expected-error @below {{failed to legalize operation 'kiln.cached_ssm' that was explicitly marked illegal}}
    kiln.cached_ssm layer 1 %x, %dt, %bc, %bc gate %x : memref<?x8x64xbf16> a_log(%p : memref<8xf32>) state(%s : !kiln.cache<ssm_state>) outs(%o : memref<?x8x64xbf16>)
      {num_heads = 8, head_dim = 64, state_size = 128, n_groups = 2} : memref<?x8x64xbf16>, memref<?x8xbf16>, memref<?x2x128xbf16>, memref<?x2x128xbf16>
    return
  }
}

// -----
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>} {
  func.func @ssm_f16_state(%ctx: !llvm.ptr {kiln.context}, %x: memref<?x8x64xbf16>, %dt: memref<?x8xbf16>, %bc: memref<?x2x128xbf16>, %p: memref<8xf32>, %o: memref<?x8x64xbf16>) {
    %s = kiln.cache_resource layer 1 unit [8, 64, 128] of f16 {offset = 0 : i64} : !kiln.cache<ssm_state>
    // expected-error @below {{'kiln.cached_ssm' op layer 1: the state is 'f16', but the recurrent kernels keep f32 or bf16 states}}
    // expected-error @below {{failed to legalize operation 'kiln.cached_ssm' that was explicitly marked illegal}}
    kiln.cached_ssm layer 1 %x, %dt, %bc, %bc a_log(%p : memref<8xf32>) state(%s : !kiln.cache<ssm_state>) outs(%o : memref<?x8x64xbf16>)
      {num_heads = 8, head_dim = 64, state_size = 128, n_groups = 2} : memref<?x8x64xbf16>, memref<?x8xbf16>, memref<?x2x128xbf16>, memref<?x2x128xbf16>
    return
  }
}

// -----
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>} {
  func.func @strided_not_allowed(%ctx: !llvm.ptr {kiln.context}, %x: memref<?x256xbf16, strided<[512, 1]>>, %o: memref<?x256xbf16>) {
    // expected-error @below {{'kiln.add' op the runtime's kernels take dense row-major buffers, got 'memref<?x256xbf16, strided<[512, 1]>>'}}
    // expected-error @below {{failed to legalize operation 'kiln.add' that was explicitly marked illegal}}
    kiln.add ins(%x, %o : memref<?x256xbf16, strided<[512, 1]>>, memref<?x256xbf16>) outs(%o : memref<?x256xbf16>)
    return
  }
}

// -----
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>} {
  func.func @unplanned_kv(%ctx: !llvm.ptr {kiln.context}, %q: memref<?x2x64xbf16>, %k: memref<?x1x64xbf16>, %o: memref<?x2x64xbf16>) {
    %kv = kiln.cache_resource layer 2 unit [2, 1, 64] of bf16 : !kiln.cache<kv>
    // expected-error @below {{'kiln.cached_attention' op layer 2: the KV resource has no planned offset; run kiln-plan-memory}}
    // expected-error @below {{failed to legalize operation 'kiln.cached_attention' that was explicitly marked illegal}}
    kiln.cached_attention layer 2 %q, %k, %k kv(%kv : !kiln.cache<kv>) outs(%o : memref<?x2x64xbf16>)
      {num_heads = 2, num_kv_heads = 1, head_dim = 64} : memref<?x2x64xbf16>, memref<?x1x64xbf16>, memref<?x1x64xbf16>
    return
  }
}

// -----
func.func @no_runtime(%ctx: !llvm.ptr {kiln.context}, %q: memref<?x2x64xbf16>, %k: memref<?x1x64xbf16>, %o: memref<?x2x64xbf16>) {
  %kv = kiln.cache_resource layer 0 unit [2, 1, 64] of bf16 {offset = 0 : i64} : !kiln.cache<kv>
  // expected-error @below {{'kiln.cached_attention' op needs the module's 'kiln.runtime' to lower (page size)}}
  // expected-error @below {{failed to legalize operation 'kiln.cached_attention' that was explicitly marked illegal}}
  kiln.cached_attention layer 0 %q, %k, %k kv(%kv : !kiln.cache<kv>) outs(%o : memref<?x2x64xbf16>)
    {num_heads = 2, num_kv_heads = 1, head_dim = 64} : memref<?x2x64xbf16>, memref<?x1x64xbf16>, memref<?x1x64xbf16>
  return
}

// -----
module {
  kiln.weight @w : tensor<128xbf16>
  func.func @unplanned_weight(%ctx: !llvm.ptr {kiln.context}) {
    // expected-error @below {{'kiln.weight_ref' op weight 'w' has no planned offset; run kiln-plan-memory}}
    %w = kiln.weight_ref @w : memref<128xbf16>
    return
  }
}

// -----
module {
  func.func private @kiln_rt_add(!llvm.ptr, !llvm.ptr) -> i32
  func.func @clash(%ctx: !llvm.ptr {kiln.context}, %x: memref<?x128xbf16>, %o: memref<?x128xbf16>) {
    // expected-error @below {{'kiln.add' op calls 'kiln_rt_add' as '(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64) -> i32', but the module declares it as '(!llvm.ptr, !llvm.ptr) -> i32'}}
    // expected-error @below {{failed to legalize operation 'kiln.add' that was explicitly marked illegal}}
    kiln.add ins(%x, %x : memref<?x128xbf16>, memref<?x128xbf16>) outs(%o : memref<?x128xbf16>)
    return
  }
}

// -----
// A planned model (it has #kiln.device_memory) gets a manifest, which needs the plans,
// the logits output, the embedding and planned weights of a dtype the runtime loads.
// expected-error @below {{the manifest needs 'kiln.runtime', 'kiln.plan' and 'kiln.device_memory'; run kiln-plan-memory and kiln-plan-activations first}}
module attributes {kiln.device_memory = #kiln.device_memory<weights = 0, caches = 0, activations = 0, workspace = 0, io = 0, max_step_tokens = 4, max_logit_rows = 4, activation_buffers = 0>} {
}

// -----
// expected-error @below {{the manifest needs the model's logits output (kiln.output) and its embedding (kiln.embedding)}}
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>,
                   kiln.plan = #kiln.plan<total_bytes = 0, kv_bytes = 0, state_bytes = 0, speculative_bytes = 0, unmanaged_bytes = 0, budget_bytes = 0, kv_pages = 0, fits = true, pools = []>,
                   kiln.device_memory = #kiln.device_memory<weights = 0, caches = 0, activations = 0, workspace = 0, io = 0, max_step_tokens = 4, max_logit_rows = 4, activation_buffers = 0>} {
  func.func @kiln_model_forward(%ctx: !llvm.ptr {kiln.context}, %l: memref<4x512xbf16>) {
    kiln.output logits %l : memref<4x512xbf16>
    return
  }
}

// -----
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>,
                   kiln.plan = #kiln.plan<total_bytes = 0, kv_bytes = 0, state_bytes = 0, speculative_bytes = 0, unmanaged_bytes = 0, budget_bytes = 0, kv_pages = 0, fits = true, pools = []>,
                   kiln.device_memory = #kiln.device_memory<weights = 0, caches = 0, activations = 0, workspace = 0, io = 0, max_step_tokens = 4, max_logit_rows = 4, activation_buffers = 0>} {
  // expected-error @below {{weight 'embed' has no planned offset; run kiln-plan-memory}}
  kiln.weight @embed : tensor<512x128xbf16>
  func.func @kiln_model_forward(%ctx: !llvm.ptr {kiln.context}, %ids: memref<4xi32>, %t: memref<512x128xbf16>, %h: memref<4x128xbf16>, %l: memref<4x512xbf16>) {
    kiln.embedding ins(%ids, %t : memref<4xi32>, memref<512x128xbf16>) outs(%h : memref<4x128xbf16>)
    kiln.output logits %l : memref<4x512xbf16>
    return
  }
}

// -----
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>,
                   kiln.plan = #kiln.plan<total_bytes = 0, kv_bytes = 0, state_bytes = 0, speculative_bytes = 0, unmanaged_bytes = 0, budget_bytes = 0, kv_pages = 0, fits = true, pools = []>,
                   kiln.device_memory = #kiln.device_memory<weights = 0, caches = 0, activations = 0, workspace = 0, io = 0, max_step_tokens = 4, max_logit_rows = 4, activation_buffers = 0>} {
  // expected-error @below {{weight 'scale' has element type 'f8E4M3FN'; the runtime loads bf16, f16, f32 and i32}}
  kiln.weight @scale {offset = 0} : tensor<128xf8E4M3FN>
  func.func @kiln_model_forward(%ctx: !llvm.ptr {kiln.context}, %ids: memref<4xi32>, %t: memref<512x128xbf16>, %h: memref<4x128xbf16>, %l: memref<4x512xbf16>) {
    kiln.embedding ins(%ids, %t : memref<4xi32>, memref<512x128xbf16>) outs(%h : memref<4x128xbf16>)
    kiln.output logits %l : memref<4x512xbf16>
    return
  }
}

// -----
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>,
                   kiln.plan = #kiln.plan<total_bytes = 0, kv_bytes = 0, state_bytes = 0, speculative_bytes = 0, unmanaged_bytes = 0, budget_bytes = 0, kv_pages = 0, fits = true, pools = []>,
                   kiln.device_memory = #kiln.device_memory<weights = 0, caches = 0, activations = 0, workspace = 0, io = 0, max_step_tokens = 4, max_logit_rows = 4, activation_buffers = 0>} {
  // expected-error @below {{weight name 'lm head' contains whitespace or control characters}}
  kiln.weight @"lm head" {offset = 0} : tensor<128xbf16>
  func.func @kiln_model_forward(%ctx: !llvm.ptr {kiln.context}, %ids: memref<4xi32>, %t: memref<512x128xbf16>, %h: memref<4x128xbf16>, %l: memref<4x512xbf16>) {
    kiln.embedding ins(%ids, %t : memref<4xi32>, memref<512x128xbf16>) outs(%h : memref<4x128xbf16>)
    kiln.output logits %l : memref<4x512xbf16>
    return
  }
}

// -----
// kiln_rt_attention reads bf16, f16 and f8E4M3FN caches next to bf16 activations: an f32
// cache (--kv-dtype f32) is refused, not read as bf16 (an f16 one lowers:
// runtime-calls.mlir, test/Tools/kv-dtype-lowering.test).
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = f32>} {
  func.func @f32_cache(%ctx: !llvm.ptr {kiln.context}, %q: memref<?x2x64xbf16>, %k: memref<?x1x64xbf16>, %o: memref<?x2x64xbf16>) {
    %kv = kiln.cache_resource layer 0 unit [2, 1, 64] of f32 {offset = 0 : i64} : !kiln.cache<kv>
    // expected-error @below {{'kiln.cached_attention' op layer 0: the KV cache is 'f32', but the runtime's attention kernels read bf16, f16 or f8E4M3FN caches next to bf16 activations; compile with --kv-dtype bf16, f16 or fp8 to run the model}}
    // expected-error @below {{failed to legalize operation 'kiln.cached_attention' that was explicitly marked illegal}}
    kiln.cached_attention layer 0 %q, %k, %k kv(%kv : !kiln.cache<kv>) outs(%o : memref<?x2x64xbf16>)
      {num_heads = 2, num_kv_heads = 1, head_dim = 64} : memref<?x2x64xbf16>, memref<?x1x64xbf16>, memref<?x1x64xbf16>
    return
  }
}

// -----
// Activations other than bf16 are refused the same way.
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>} {
  func.func @f16_q(%ctx: !llvm.ptr {kiln.context}, %q: memref<?x2x64xf16>, %k: memref<?x1x64xf16>, %o: memref<?x2x64xf16>) {
    %kv = kiln.cache_resource layer 0 unit [2, 1, 64] of bf16 {offset = 0 : i64} : !kiln.cache<kv>
    // expected-error @below {{'kiln.cached_attention' op layer 0: q is 'f16', but the runtime's attention path takes bf16 activations only}}
    // expected-error @below {{failed to legalize operation 'kiln.cached_attention' that was explicitly marked illegal}}
    kiln.cached_attention layer 0 %q, %k, %k kv(%kv : !kiln.cache<kv>) outs(%o : memref<?x2x64xf16>)
      {num_heads = 2, num_kv_heads = 1, head_dim = 64} : memref<?x2x64xf16>, memref<?x1x64xf16>, memref<?x1x64xf16>
    return
  }
}

// -----
// The runtime's kernels take bf16 data, i32 indices and i8 scratch bytes only.
func.func @f32_data(%ctx: !llvm.ptr {kiln.context}, %x: memref<?x128xf32>, %o: memref<?x128xf32>) {
  // expected-error @below {{'kiln.add' op the runtime's kernels take bf16 tensors, i32 indices and i8 scratch, got 'memref<?x128xf32>'}}
  // expected-error @below {{failed to legalize operation 'kiln.add' that was explicitly marked illegal}}
  kiln.add ins(%x, %x : memref<?x128xf32>, memref<?x128xf32>) outs(%o : memref<?x128xf32>)
  return
}

// -----
// The latent cache must be bf16 or FP8 (the FP8 latent token): the MLA kernels read no
// f16 latent.
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, page_size = 16, kv_dtype = f16>} {
  func.func @f16_latent(%ctx: !llvm.ptr {kiln.context}, %q: memref<?x2x48xbf16>, %kpe: memref<?x16xbf16>,
                        %lat: memref<?x64xbf16>, %pos: memref<?xi32>, %kvb: memref<128x64xbf16>,
                        %s: memref<?x672xi8>, %o: memref<?x2x32xbf16>) {
    %c = kiln.cache_resource layer 0 unit [80] of f16 {offset = 0 : i64} : !kiln.cache<mla_latent>
    // expected-error @below {{layer 0: the latent cache is 'f16', but the MLA kernels read bf16 or f8E4M3FN caches; compile with --kv-dtype bf16 or fp8}}
    // expected-error @below {{failed to legalize operation 'kiln.cached_mla_attention' that was explicitly marked illegal}}
    kiln.cached_mla_attention layer 0 %q, %lat k_pe(%kpe : memref<?x16xbf16>)
      positions(%pos : memref<?xi32>) kv_b(%kvb : memref<128x64xbf16>) scratch(%s : memref<?x672xi8>)
      cache(%c : !kiln.cache<mla_latent>) outs(%o : memref<?x2x32xbf16>)
      {num_heads = 2, kv_lora_rank = 64, qk_rope_head_dim = 16, qk_nope_head_dim = 32,
       v_head_dim = 32, softmax_scale = 0.125 : f32, rope = #kiln.rope<type = default, theta = 10000.0>,
       decode_kernel = "mla_decode", prefill_kernel = "mla_prefill"}
      : memref<?x2x48xbf16>, memref<?x64xbf16>
    return
  }
}

// -----
// The whole-graph MLA op reads the page size from the module's kiln.runtime.
func.func @mla_no_runtime(%ctx: !llvm.ptr {kiln.context}, %q: memref<?x2x48xbf16>, %kpe: memref<?x16xbf16>,
                          %lat: memref<?x64xbf16>, %pos: memref<?xi32>, %kvb: memref<128x64xbf16>,
                          %s: memref<?x672xi8>, %o: memref<?x2x32xbf16>) {
  %c = kiln.cache_resource layer 0 unit [80] of bf16 {offset = 0 : i64} : !kiln.cache<mla_latent>
  // expected-error @below {{'kiln.cached_mla_attention' op needs the module's 'kiln.runtime' to lower (page size)}}
  // expected-error @below {{failed to legalize operation 'kiln.cached_mla_attention' that was explicitly marked illegal}}
  kiln.cached_mla_attention layer 0 %q, %lat k_pe(%kpe : memref<?x16xbf16>)
    positions(%pos : memref<?xi32>) kv_b(%kvb : memref<128x64xbf16>) scratch(%s : memref<?x672xi8>)
    cache(%c : !kiln.cache<mla_latent>) outs(%o : memref<?x2x32xbf16>)
    {num_heads = 2, kv_lora_rank = 64, qk_rope_head_dim = 16, qk_nope_head_dim = 32,
     v_head_dim = 32, softmax_scale = 0.125 : f32, rope = #kiln.rope<type = default, theta = 10000.0>,
     decode_kernel = "mla_decode", prefill_kernel = "mla_prefill"}
    : memref<?x2x48xbf16>, memref<?x64xbf16>
  return
}

// -----
// An unplanned latent resource (no offset) cannot be addressed.
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, page_size = 16, kv_dtype = bf16>} {
  func.func @mla_unplanned(%ctx: !llvm.ptr {kiln.context}, %q: memref<?x2x48xbf16>, %kpe: memref<?x16xbf16>,
                           %lat: memref<?x64xbf16>, %pos: memref<?xi32>, %kvb: memref<128x64xbf16>,
                           %s: memref<?x672xi8>, %o: memref<?x2x32xbf16>) {
    %c = kiln.cache_resource layer 4 unit [80] of bf16 : !kiln.cache<mla_latent>
    // expected-error @below {{layer 4: the latent resource has no planned offset; run kiln-plan-memory}}
    // expected-error @below {{failed to legalize operation 'kiln.cached_mla_attention' that was explicitly marked illegal}}
    kiln.cached_mla_attention layer 4 %q, %lat k_pe(%kpe : memref<?x16xbf16>)
      positions(%pos : memref<?xi32>) kv_b(%kvb : memref<128x64xbf16>) scratch(%s : memref<?x672xi8>)
      cache(%c : !kiln.cache<mla_latent>) outs(%o : memref<?x2x32xbf16>)
      {num_heads = 2, kv_lora_rank = 64, qk_rope_head_dim = 16, qk_nope_head_dim = 32,
       v_head_dim = 32, softmax_scale = 0.125 : f32, rope = #kiln.rope<type = default, theta = 10000.0>,
       decode_kernel = "mla_decode", prefill_kernel = "mla_prefill"}
      : memref<?x2x48xbf16>, memref<?x64xbf16>
    return
  }
}
