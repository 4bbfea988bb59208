// Target presets, custom targets and overrides print in the canonical full form.
// RUN: kiln-opt %s --split-input-file | FileCheck %s

// CHECK: kiln.target = #kiln.target<"my-gpu", sm = 120, sms = 0, memory = 0, smem_per_block = 101376, features = [tma, fp8, clusters]>
module attributes {kiln.target = #kiln.target<"my-gpu", sm = 120>} {}
// -----
// CHECK: kiln.target = #kiln.target<"l40s", sm = 89, sms = 142, memory = 1000, smem_per_block = 101376, features = [fp8]>
module attributes {kiln.target = #kiln.target<"l40s", memory = 1000>} {}
// -----
// A target may drop features (e.g. to test fallbacks), never add them.
// CHECK: kiln.target = #kiln.target<"h100", sm = 90, sms = 132, memory = 85020639232, smem_per_block = 232448, features = [tma]>
module attributes {kiln.target = #kiln.target<"h100", features = [tma]>} {}
// -----
// CHECK: kiln.runtime = #kiln.runtime<max_batch = 1, max_seq_len = 1, page_size = 8, kv_dtype = f8E4M3FN>
// CHECK-SAME: kiln.target = #kiln.target<"rtx5090", sm = 120, sms = 170, memory = 34190917632, smem_per_block = 101376, features = [tma, fp8, clusters]>
module attributes {kiln.target = #kiln.target<"rtx5090">, kiln.runtime = #kiln.runtime<max_batch = 1, max_seq_len = 1, page_size = 8, kv_dtype = f8E4M3FN>} {}
// -----
// CHECK: #kiln.spec<mode = eagle3, max_draft_len = 1>
// CHECK-SAME: #kiln.target<"b300", sm = 103, sms = 148, memory = 288400343040, smem_per_block = 232448, features = [tma, tcgen05, fp8, clusters]>
module attributes {kiln.target = #kiln.target<"b300">, kiln.spec = #kiln.spec<mode = eagle3, max_draft_len = 1, ssm = rewind>} {}
// -----
// A plan with no pools (a model without cache resources) round-trips.
// CHECK: kiln.plan = #kiln.plan<total_bytes = 0, kv_bytes = 0, state_bytes = 0, speculative_bytes = 0, unmanaged_bytes = 0, budget_bytes = 0, kv_pages = 0, fits = true, pools = []>
module attributes {kiln.plan = #kiln.plan<total_bytes = 0, kv_bytes = 0, state_bytes = 0, speculative_bytes = 0, unmanaged_bytes = 0, budget_bytes = 0, kv_pages = 0, fits = true, pools = []>} {}
