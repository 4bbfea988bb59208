// RUN: kiln-opt %s -split-input-file -kiln-plan-memory -verify-diagnostics | FileCheck %s

// Two KV pools (sliding window and full), one state pool; offsets 256-byte aligned,
// pools in a fixed order; totals by category, speculative bytes as a cross-cut.
// CHECK-LABEL: module attributes
// CHECK-SAME: kiln.plan = #kiln.plan<total_bytes = 51380224, kv_bytes = 16777216, state_bytes = 34603008, speculative_bytes = 33554432, unmanaged_bytes = 0, budget_bytes = 135098892288, kv_pages = 32, fits = true, pools = [#kiln.pool<"kv.full.d128.bf16", category = kv, offset = 0, bytes = 8388608, resources = 1>, #kiln.pool<"kv.w512.d128.bf16", category = kv, offset = 8388608, bytes = 8388608, resources = 1>, #kiln.pool<"state", category = state, offset = 16777216, bytes = 34603008, resources = 2>]>
// CHECK: kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 {bytes = 8388608 : i64, offset = 0 : i64, pool = "kv.full.d128.bf16"}
// CHECK: kiln.cache_resource layer 1 unit [2, 8, 128] of bf16 window 512 {bytes = 8388608 : i64, offset = 8388608 : i64, pool = "kv.w512.d128.bf16"}
// CHECK: kiln.cache_resource layer 2 unit [8, 64, 128] of f32 {bytes = 1048576 : i64, offset = 16777216 : i64, pool = "state"}
// CHECK: kiln.cache_resource layer 2 unit [4, 64, 64, 128] of f32 speculative_only {bytes = 33554432 : i64, offset = 17825792 : i64, pool = "state"}
module attributes {kiln.target = #kiln.target<"h200">, kiln.spec = #kiln.spec<mode = ngram, max_draft_len = 3>,
                   kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 512, kv_dtype = bf16>} {
  func.func @f() {
    %0 = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 : !kiln.cache<kv>
    %1 = kiln.cache_resource layer 1 unit [2, 8, 128] of bf16 window 512 : !kiln.cache<kv>
    %2 = kiln.cache_resource layer 2 unit [8, 64, 128] of f32 : !kiln.cache<ssm_state>
    %3 = kiln.cache_resource layer 2 unit [4, 64, 64, 128] of f32 speculative_only : !kiln.cache<intermediate_ssm_state>
    return
  }
}

// -----
// With kv_ring_window = 128 the window's pool is a ring per slot (kiln_rt_ring_pages):
// ceil((128 + 256 - 1) / 64) + 1 = 7 pages of 64 tokens a slot, 448 tokens x 4 slots x
// 4096 bytes = 7340032, against 4096 tokens a slot (67108864) for the full layer; a
// window other than the ring's (64) keeps a full pool; kv_pages counts the full pools.
// CHECK-LABEL: module attributes
// CHECK-SAME: kv_bytes = 141557760
// CHECK-SAME: kv_pages = 256
// CHECK: kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 {bytes = 67108864 : i64
// CHECK: kiln.cache_resource layer 1 unit [2, 8, 128] of bf16 window 128 {bytes = 7340032 : i64, {{.*}}pool = "kv.w128.d128.bf16"}
// CHECK: kiln.cache_resource layer 2 unit [2, 8, 128] of bf16 window 64 {bytes = 67108864 : i64, {{.*}}pool = "kv.w64.d128.bf16"}
module attributes {kiln.target = #kiln.target<"h200">,
                   kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 4096, kv_dtype = bf16, max_step_tokens = 256, kv_ring_window = 128>} {
  func.func @f() {
    %0 = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 : !kiln.cache<kv>
    %1 = kiln.cache_resource layer 1 unit [2, 8, 128] of bf16 window 128 : !kiln.cache<kv>
    %2 = kiln.cache_resource layer 2 unit [2, 8, 128] of bf16 window 64 : !kiln.cache<kv>
    return
  }
}

// -----
// A ring window no layer has: a warning naming the layers' windows, full pools.
// CHECK-LABEL: module attributes
// CHECK: kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 window 64 {bytes = 8388608 : i64
// expected-warning @below {{kiln-plan-memory: kv_ring_window 100 is no layer's sliding window; every KV pool is planned in full (the layers' windows: 64)}}
module attributes {kiln.target = #kiln.target<"h200">,
                   kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 512, kv_dtype = bf16, max_step_tokens = 256, kv_ring_window = 100>} {
  func.func @f() {
    %0 = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 window 64 : !kiln.cache<kv>
    return
  }
}

// -----
// A ring longer than a sequence's pages is capped at them: window 480 with steps of 256
// needs 13 pages of 64, max_seq_len 512 has 8.
// CHECK-LABEL: module attributes
// CHECK: kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 window 480 {bytes = 8388608 : i64
module attributes {kiln.target = #kiln.target<"h200">,
                   kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 512, kv_dtype = bf16, max_step_tokens = 256, kv_ring_window = 480>} {
  func.func @f() {
    %0 = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 window 480 : !kiln.cache<kv>
    return
  }
}

// -----
// A sliding-window pool holds as many pages as a full one: KV pages are one id space
// shared by every layer (one block table), so a window of 128 tokens under a
// max_seq_len of 512 does not shrink its pool.
// CHECK-LABEL: module attributes
// CHECK-SAME: kv_bytes = 16777216
// CHECK-SAME: kv_pages = 32
// CHECK: kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 {bytes = 8388608 : i64
// CHECK: kiln.cache_resource layer 1 unit [2, 8, 128] of bf16 window 128 {bytes = 8388608 : i64, offset = 8388608 : i64, pool = "kv.w128.d128.bf16"}
module attributes {kiln.target = #kiln.target<"h200">,
                   kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 512, kv_dtype = bf16>} {
  func.func @f() {
    %0 = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 : !kiln.cache<kv>
    %1 = kiln.cache_resource layer 1 unit [2, 8, 128] of bf16 window 128 : !kiln.cache<kv>
    return
  }
}

// -----
// tp = 4 divides heads; weights per rank come off the budget.
// CHECK-LABEL: module attributes
// CHECK-SAME: total_bytes = 3145728, kv_bytes = 2097152, state_bytes = 1048576
// CHECK-SAME: budget_bytes = 130098892288
module attributes {kiln.target = #kiln.target<"h200">,
                   kiln.model = #kiln.model<name = "m", model_type = "llama", num_layers = 1, dtype = bf16, weight_bytes = 20000000000>,
                   kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 512, kv_dtype = bf16, tp = 4>} {
  func.func @f() {
    %0 = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 shard 1 : !kiln.cache<kv>
    %1 = kiln.cache_resource layer 1 unit [32, 64, 128] of f32 shard 0 : !kiln.cache<ssm_state>
    return
  }
}

// -----
// An unmanaged resource is planned but warned about loudly.
// CHECK-LABEL: module attributes
// CHECK-SAME: unmanaged_bytes = 524288
module attributes {kiln.target = #kiln.target<"h200">,
                   kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 512, kv_dtype = bf16>} {
  func.func @f() {
    // expected-warning @below {{layer 7 conv_state (512.00 KiB) is unmanaged: it is allocated outside Kiln's pools, per layer, and no cache manager accounts for it}}
    %0 = kiln.cache_resource layer 7 unit [32768, 2] of f16 unmanaged : !kiln.cache<conv_state>
    return
  }
}

// -----
// No memory size: planned, not checked.
// CHECK-LABEL: module attributes
// CHECK-SAME: budget_bytes = 0, kv_pages = 0, fits = true
// expected-warning @below {{kiln-plan-memory: the target's memory size is unknown; the plan is not checked against a budget}}
module attributes {kiln.target = #kiln.target<"sm_90">,
                   kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 512, kv_dtype = bf16>} {
  func.func @f() {
    %0 = kiln.cache_resource layer 0 unit [8, 64, 128] of f32 : !kiln.cache<ssm_state>
    return
  }
}
