// fill-kv: KV pages take what the budget leaves after the states.
// RUN: kiln-opt %s -split-input-file -kiln-plan-memory="fill-kv=true usable-fraction=0.5" | FileCheck %s
// budget = 150109880320 * 0.5 = 75054940160; states 2 MiB; a page = 64 tokens x 4 KiB
// (+ 256 B alignment slack): (75054940160 - 2097152) / 262400 = 286024.
// CHECK-LABEL: module attributes
// CHECK-SAME: kv_pages = 286024
// CHECK-SAME: fits = true
module attributes {kiln.target = #kiln.target<"h200">,
                   kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 1024, kv_dtype = bf16>} {
  func.func @f() {
    %0 = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 : !kiln.cache<kv>
    %1 = kiln.cache_resource layer 1 unit [8, 64, 128] of f32 : !kiln.cache<ssm_state>
    return
  }
}

// -----
// A ring pool (kv_ring_window) keeps its fixed size; the pages fill what it and the
// states leave: the window-128 ring is ceil((128 + 256 - 1) / 64) + 1 = 7 pages x 8
// slots x 64 tokens x 4 KiB = 14680064; (75054940160 - 14680064) / 262400 = 285976
// pages for the full layer.
// CHECK-LABEL: module attributes
// CHECK-SAME: kv_pages = 285976
// CHECK: kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 {bytes = 74966892544 : i64
// CHECK: kiln.cache_resource layer 1 unit [2, 8, 128] of bf16 window 128 {bytes = 14680064 : i64
module attributes {kiln.target = #kiln.target<"h200">,
                   kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 1024, kv_dtype = bf16, max_step_tokens = 256, kv_ring_window = 128>} {
  func.func @f() {
    %0 = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 : !kiln.cache<kv>
    %1 = kiln.cache_resource layer 1 unit [2, 8, 128] of bf16 window 128 : !kiln.cache<kv>
    return
  }
}
