// Custom syntax, generic form and bytecode all round-trip.
// RUN: kiln-opt %s | kiln-opt | FileCheck %s
// RUN: kiln-opt %s --mlir-print-op-generic | kiln-opt | FileCheck %s
// RUN: kiln-opt %s --emit-bytecode | kiln-opt | FileCheck %s

// CHECK-LABEL: module attributes
// CHECK-SAME: kiln.model = #kiln.model<name = "tiny-hybrid", model_type = "nemotron_h", num_layers = 4, dtype = bf16, weight_bytes = 1000>
// CHECK-SAME: kiln.runtime = #kiln.runtime<max_batch = 64, max_seq_len = 8192, kv_dtype = bf16, tp = 2, state_dtype = f32, max_step_tokens = 4096>
// CHECK-SAME: kiln.spec = #kiln.spec<mode = mtp, max_draft_len = 3, ssm = replay>
// CHECK-SAME: kiln.target = #kiln.target<"h200", sm = 90, sms = 132, memory = 150109880320, smem_per_block = 232448, features = [tma, wgmma, fp8, clusters]>
module attributes {
  kiln.target = #kiln.target<"h200">,
  kiln.runtime = #kiln.runtime<max_batch = 64, max_seq_len = 8192, page_size = 64, kv_dtype = bf16, tp = 2, state_dtype = f32, max_step_tokens = 4096>,
  kiln.spec = #kiln.spec<mode = mtp, max_draft_len = 3, ssm = replay>,
  kiln.model = #kiln.model<name = "tiny-hybrid", model_type = "nemotron_h", num_layers = 4, dtype = bf16, weight_bytes = 1000>
} {
  // CHECK-LABEL: func.func @model_ops
  func.func @model_ops(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>,
                       %mq: tensor<?x16x576xbf16>, %lat: tensor<?x576xbf16>,
                       %x: tensor<?x128x64xbf16>, %dt: tensor<?x128xbf16>,
                       %bc: tensor<?x8x128xbf16>, %cx: tensor<?x10240xbf16>) {
    // CHECK: kiln.attention layer 0 %{{.*}}, %{{.*}}, %{{.*}} {head_dim = 128 : i64, num_heads = 32 : i64, num_kv_heads = 8 : i64, sliding_window = 4096 : i64}
    %0 = kiln.attention layer 0 %q, %k, %k {num_heads = 32, num_kv_heads = 8, head_dim = 128, sliding_window = 4096}
      : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
    // CHECK: kiln.attention layer 5 {{.*}}draft = #kiln<draft mtp>
    %1 = kiln.attention layer 5 %q, %k, %k {num_heads = 32, num_kv_heads = 8, head_dim = 128, draft = #kiln<draft mtp>}
      : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
    // CHECK: kiln.mla_attention layer 1 {{.*}}kv_lora_rank = 512 : i64, num_heads = 16 : i64, qk_rope_head_dim = 64 : i64
    %2 = kiln.mla_attention layer 1 %mq, %lat {num_heads = 16, kv_lora_rank = 512, qk_rope_head_dim = 64}
      : tensor<?x16x576xbf16>, tensor<?x576xbf16> -> tensor<?x16x512xbf16>
    // CHECK: kiln.ssm layer 2 {{.*}} gate %{{.*}} : tensor<?x128x64xbf16> {head_dim = 64 : i64, n_groups = 8 : i64, num_heads = 128 : i64, state_size = 128 : i64}
    %3 = kiln.ssm layer 2 %x, %dt, %bc, %bc gate %x : tensor<?x128x64xbf16> {num_heads = 128, head_dim = 64, state_size = 128, n_groups = 8}
      : tensor<?x128x64xbf16>, tensor<?x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x128x64xbf16>
    // CHECK: kiln.causal_conv layer 2 %{{.*}} {conv_dim = 10240 : i64, kernel_size = 4 : i64, silu}
    %4 = kiln.causal_conv layer 2 %cx {conv_dim = 10240, kernel_size = 4, silu} : tensor<?x10240xbf16> -> tensor<?x10240xbf16>
    return
  }

  // A whole model's Mamba2 layer: the conv's weight and bias, the scan's f32 parameters
  // and its dt clamp.
  // CHECK-LABEL: func.func @mamba_parameters
  func.func @mamba_parameters(%x: tensor<?x128x64xbf16>, %dt: tensor<?x128xbf16>,
                              %bc: tensor<?x8x128xbf16>, %cx: tensor<?x10240xbf16>,
                              %p: tensor<128xf32>, %w: tensor<10240x4xbf16>,
                              %cb: tensor<10240xbf16>) {
    // CHECK: kiln.ssm layer 2 {{.*}} a_log(%{{.*}} : tensor<128xf32>) d(%{{.*}} : tensor<128xf32>) dt_bias(%{{.*}} : tensor<128xf32>) {dt_max = 1.000000e+02 : f32, dt_min = 1.000000e-03 : f32
    %0 = kiln.ssm layer 2 %x, %dt, %bc, %bc a_log(%p : tensor<128xf32>) d(%p : tensor<128xf32>) dt_bias(%p : tensor<128xf32>) {num_heads = 128, head_dim = 64, state_size = 128, n_groups = 8, dt_min = 0.001 : f32, dt_max = 100.0 : f32}
      : tensor<?x128x64xbf16>, tensor<?x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x128x64xbf16>
    // CHECK: kiln.ssm layer 3 {{.*}} a_log(%{{.*}} : tensor<128xf32>) {head_dim
    %1 = kiln.ssm layer 3 %x, %dt, %bc, %bc a_log(%p : tensor<128xf32>) {num_heads = 128, head_dim = 64, state_size = 128, n_groups = 8}
      : tensor<?x128x64xbf16>, tensor<?x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x128x64xbf16>
    // CHECK: kiln.causal_conv layer 2 %{{.*}} weight(%{{.*}} : tensor<10240x4xbf16>) bias(%{{.*}} : tensor<10240xbf16>) {conv_dim = 10240 : i64
    %2 = kiln.causal_conv layer 2 %cx weight(%w : tensor<10240x4xbf16>) bias(%cb : tensor<10240xbf16>) {conv_dim = 10240, kernel_size = 4, silu} : tensor<?x10240xbf16> -> tensor<?x10240xbf16>
    return
  }

  // CHECK-LABEL: func.func @cached_ops
  func.func @cached_ops(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>,
                        %x: tensor<?x128x64xbf16>, %dt: tensor<?x128xbf16>,
                        %bc: tensor<?x8x128xbf16>, %cx: tensor<?x10240xbf16>,
                        %mq: tensor<?x16x576xbf16>, %lat: tensor<?x576xbf16>,
                        %mo: tensor<?x16x512xbf16>) {
    // CHECK: %[[KV:.*]] = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 window 4096 shard 1 {bytes = 10 : i64, offset = 0 : i64, pool = "kv.w4096.d128.bf16"} : !kiln.cache<kv>
    %kv = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 window 4096 shard 1 {pool = "kv.w4096.d128.bf16", offset = 0, bytes = 10} : !kiln.cache<kv>
    // CHECK: kiln.cached_attention layer 0 {{.*}} kv(%[[KV]] : !kiln.cache<kv>) outs(%[[Q:[^ ]*]] : tensor<?x32x128xbf16>) {{{.*}}decode_kernel = "gqa_decode"{{.*}}prefill_kernel = "prefill_fmha"{{.*}}spec_dec_mode = #kiln<spec_dec_mode multi_token>{{.*}}} : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
    %0 = kiln.cached_attention layer 0 %q, %k, %k kv(%kv : !kiln.cache<kv>) outs(%q : tensor<?x32x128xbf16>)
      {num_heads = 32, num_kv_heads = 8, head_dim = 128, sliding_window = 4096,
       decode_kernel = "gqa_decode", prefill_kernel = "prefill_fmha", spec_dec_mode = #kiln<spec_dec_mode multi_token>}
      : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
    // An empty slot: a draft layer whose draft_kv was dropped.
    // CHECK: kiln.cached_attention layer 5 %{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} outs(%{{[^ ]*}} : tensor<?x32x128xbf16>) {draft = #kiln<draft mtp>
    %1 = kiln.cached_attention layer 5 %q, %k, %k outs(%q : tensor<?x32x128xbf16>) {num_heads = 32, num_kv_heads = 8, head_dim = 128, draft = #kiln<draft mtp>}
      : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x32x128xbf16>
    // CHECK: %[[LAT:.*]] = kiln.cache_resource layer 1 unit [576] of bf16 : !kiln.cache<mla_latent>
    %latc = kiln.cache_resource layer 1 unit [576] of bf16 : !kiln.cache<mla_latent>
    // CHECK: kiln.cached_mla_attention layer 1 %{{[^ ]*}}, %{{[^ ]*}} cache(%[[LAT]] : !kiln.cache<mla_latent>) outs(%{{[^ ]*}} : tensor<?x16x512xbf16>) {kv_lora_rank = 512 : i64, num_heads = 16 : i64, qk_rope_head_dim = 64 : i64} : tensor<?x16x576xbf16>, tensor<?x576xbf16> -> tensor<?x16x512xbf16>
    %m = kiln.cached_mla_attention layer 1 %mq, %lat cache(%latc : !kiln.cache<mla_latent>) outs(%mo : tensor<?x16x512xbf16>)
      {num_heads = 16, kv_lora_rank = 512, qk_rope_head_dim = 64} : tensor<?x16x576xbf16>, tensor<?x576xbf16> -> tensor<?x16x512xbf16>
    // CHECK: %[[S:.*]] = kiln.cache_resource layer 2 unit [128, 64, 128] of f32 shard 0 : !kiln.cache<ssm_state>
    %s = kiln.cache_resource layer 2 unit [128, 64, 128] of f32 shard 0 : !kiln.cache<ssm_state>
    // CHECK: %[[RX:.*]] = kiln.cache_resource layer 2 unit [2, 4, 128, 64] of bf16 shard 2 speculative_only : !kiln.cache<replay_x>
    %rx = kiln.cache_resource layer 2 unit [2, 4, 128, 64] of bf16 shard 2 speculative_only : !kiln.cache<replay_x>
    %rb = kiln.cache_resource layer 2 unit [2, 4, 8, 128] of bf16 shard 2 speculative_only : !kiln.cache<replay_b>
    %rdt = kiln.cache_resource layer 2 unit [2, 128, 4] of f32 shard 1 speculative_only : !kiln.cache<replay_dt>
    // CHECK: kiln.cached_ssm layer 2 {{.*}} state(%[[S]] : !kiln.cache<ssm_state>) replay_x(%[[RX]] : !kiln.cache<replay_x>) replay_b({{.*}}) replay_dt({{.*}}) outs(%{{[^ ]*}} : tensor<?x128x64xbf16>)
    %2 = kiln.cached_ssm layer 2 %x, %dt, %bc, %bc state(%s : !kiln.cache<ssm_state>)
      replay_x(%rx : !kiln.cache<replay_x>) replay_b(%rb : !kiln.cache<replay_b>)
      replay_dt(%rdt : !kiln.cache<replay_dt>)
      outs(%x : tensor<?x128x64xbf16>)
      {num_heads = 128, head_dim = 64, state_size = 128, n_groups = 8}
      : tensor<?x128x64xbf16>, tensor<?x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16> -> tensor<?x128x64xbf16>
    // CHECK: %[[CS:.*]] = kiln.cache_resource layer 2 unit [10240, 3] of bf16 shard 0 unmanaged : !kiln.cache<conv_state>
    %cs = kiln.cache_resource layer 2 unit [10240, 3] of bf16 shard 0 unmanaged : !kiln.cache<conv_state>
    %ci = kiln.cache_resource layer 2 unit [4, 10240, 3] of bf16 shard 1 speculative_only : !kiln.cache<intermediate_conv_state>
    // CHECK: kiln.cached_causal_conv layer 2 %{{.*}} state(%[[CS]] : !kiln.cache<conv_state>) intermediate(%{{.*}} : !kiln.cache<intermediate_conv_state>) outs(%{{[^ ]*}} : tensor<?x10240xbf16>)
    %3 = kiln.cached_causal_conv layer 2 %cx state(%cs : !kiln.cache<conv_state>) intermediate(%ci : !kiln.cache<intermediate_conv_state>)
      outs(%cx : tensor<?x10240xbf16>) {conv_dim = 10240, kernel_size = 4, silu} : tensor<?x10240xbf16> -> tensor<?x10240xbf16>
    return
  }

  // After bufferization the cached ops work on memrefs in place and have no result.
  // CHECK-LABEL: func.func @cached_ops_on_buffers
  func.func @cached_ops_on_buffers(%q: memref<?x32x128xbf16>, %k: memref<?x8x128xbf16>,
                                   %o: memref<?x32x128xbf16>, %x: memref<?x128x64xbf16>,
                                   %dt: memref<?x128xbf16>, %bc: memref<?x8x128xbf16>,
                                   %cx: memref<?x10240xbf16>, %co: memref<?x10240xbf16>) {
    %kv = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 shard 1 : !kiln.cache<kv>
    // CHECK: kiln.cached_attention layer 0 {{.*}} outs(%{{[^ ]*}} : memref<?x32x128xbf16>) {{{.*}}} : memref<?x32x128xbf16>, memref<?x8x128xbf16>, memref<?x8x128xbf16>{{$}}
    kiln.cached_attention layer 0 %q, %k, %k kv(%kv : !kiln.cache<kv>) outs(%o : memref<?x32x128xbf16>)
      {num_heads = 32, num_kv_heads = 8, head_dim = 128}
      : memref<?x32x128xbf16>, memref<?x8x128xbf16>, memref<?x8x128xbf16>
    %s = kiln.cache_resource layer 2 unit [128, 64, 128] of f32 shard 0 : !kiln.cache<ssm_state>
    // CHECK: kiln.cached_ssm layer 2 {{.*}} outs(%{{[^ ]*}} : memref<?x128x64xbf16>) {{{.*}}} : memref<?x128x64xbf16>, memref<?x128xbf16>, memref<?x8x128xbf16>, memref<?x8x128xbf16>{{$}}
    kiln.cached_ssm layer 2 %x, %dt, %bc, %bc gate %x : memref<?x128x64xbf16> state(%s : !kiln.cache<ssm_state>) outs(%x : memref<?x128x64xbf16>)
      {num_heads = 128, head_dim = 64, state_size = 128, n_groups = 8}
      : memref<?x128x64xbf16>, memref<?x128xbf16>, memref<?x8x128xbf16>, memref<?x8x128xbf16>
    %cs = kiln.cache_resource layer 2 unit [10240, 3] of bf16 shard 0 : !kiln.cache<conv_state>
    // CHECK: kiln.cached_causal_conv layer 2 {{.*}} outs(%{{[^ ]*}} : memref<?x10240xbf16>) {{{.*}}} : memref<?x10240xbf16>{{$}}
    kiln.cached_causal_conv layer 2 %cx state(%cs : !kiln.cache<conv_state>) outs(%co : memref<?x10240xbf16>)
      {conv_dim = 10240, kernel_size = 4} : memref<?x10240xbf16>
    return
  }
}
