// kiln-plan-activations places every memref.alloc of a step in one activation arena:
// buffers whose lifetimes do not overlap share bytes, dynamic sizes are bounded by the
// step limits, and the module gets #kiln.device_memory.
// RUN: kiln-opt %s -split-input-file --kiln-plan-activations | FileCheck %s
// kiln-deploy's max-step-tokens sets the bound of every token dimension.
// RUN: kiln-opt %S/../Conversion/Inputs/tiny.mlir --kiln-deploy="target=h200 max-step-tokens=64" --one-shot-bufferize="bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map" --kiln-bind-entry --canonicalize --kiln-plan-activations | FileCheck %s --check-prefix=STEP64

// max_batch 4, max_seq_len 256, no speculation: max_step_tokens = max(4, min(256, 2048))
// = 256, max_logit_rows = 4. A [?, 128] bf16 buffer of tokens takes 256 x 128 x 2 =
// 65536 bytes, one of logit rows 4 x 128 x 2 = 1024.
// weights: the last weight ends at 131072 + 256. caches: kiln.plan's total. io: 3 x 1024
// (token arrays) + 7 x 256. workspace: 32 MiB + the split-KV region align256(P + P / 1023
// + 32) with P = 16 x 4 x 1 x (1 + 1) x 4 = 512: 33555200, plus the padding that makes
// the total a whole number of 2 MiB pages (cudaMalloc's granule): 17 x 2 MiB = 35651584
// in all.
// CHECK-LABEL: module attributes
// CHECK-SAME: kiln.device_memory = #kiln.device_memory<weights = 131328, caches = 262144, activations = 131072, workspace = 35122432, io = 4608, max_step_tokens = 256, max_logit_rows = 4, activation_buffers = 4, cuda_graphs = 8388608>
// CHECK-LABEL: func.func @kiln_model_forward
// CHECK: %[[IDS:.*]] = kiln.input token_ids
// CHECK: %[[ROWS:.*]] = kiln.input logit_rows
// CHECK: %[[T:.*]] = memref.dim %[[IDS]]
// CHECK: %[[R:.*]] = memref.dim %[[ROWS]]
// a: live from its allocation to the add that reads it.
// CHECK: %[[A:.*]] = kiln.activation_buffer offset 0 capacity 65536[%[[T]]] : memref<?x128xbf16>
// CHECK: kiln.embedding {{.*}} outs(%[[A]] :
// b overlaps a: its own bytes.
// CHECK: %[[B:.*]] = kiln.activation_buffer offset 65536 capacity 65536[%[[T]]] : memref<?x128xbf16>
// CHECK: kiln.add ins(%[[A]], %[[A]] : {{.*}} outs(%[[B]] :
// c is first written by an add that reads b for the last time, and an add may write
// over its inputs (OverwritesInputsOpInterface): c goes exactly over b. (b could not go
// over a: a's dealloc keeps it live past b's add.)
// CHECK: %[[C:.*]] = kiln.activation_buffer offset 65536 capacity 65536[%[[T]]] : memref<?x128xbf16>
// CHECK: kiln.add ins(%[[B]], %[[B]] : {{.*}} outs(%[[C]] :
// The logits live to the end (handed to the runtime) and reuse a's bytes.
// CHECK: %[[L:.*]] = kiln.activation_buffer offset 0 capacity 1024[%[[R]]] : memref<?x128xbf16>
// CHECK: kiln.gather_rows ins(%[[C]], %[[ROWS]] : {{.*}} outs(%[[L]] :
// CHECK: kiln.output logits %[[L]]
// CHECK-NOT: memref.alloc
// CHECK-NOT: memref.dealloc
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>,
                   kiln.plan = #kiln.plan<total_bytes = 262144, kv_bytes = 262144, state_bytes = 0, speculative_bytes = 0, unmanaged_bytes = 0, budget_bytes = 0, kv_pages = 16, fits = true, pools = []>} {
  kiln.weight @embed {offset = 0} : tensor<512x128xbf16>
  kiln.weight @norm {offset = 131072} : tensor<128xbf16>
  func.func @kiln_model_forward(%ctx: !llvm.ptr {kiln.context}) attributes {kiln.entry} {
    %ids = kiln.input token_ids : memref<?xi32>
    %rows = kiln.input logit_rows : memref<?xi32>
    %c0 = arith.constant 0 : index
    %t = memref.dim %ids, %c0 : memref<?xi32>
    %r = memref.dim %rows, %c0 : memref<?xi32>
    %w = kiln.weight_ref @embed : memref<512x128xbf16>
    %a = memref.alloc(%t) : memref<?x128xbf16>
    kiln.embedding ins(%ids, %w : memref<?xi32>, memref<512x128xbf16>) outs(%a : memref<?x128xbf16>)
    %b = memref.alloc(%t) : memref<?x128xbf16>
    kiln.add ins(%a, %a : memref<?x128xbf16>, memref<?x128xbf16>) outs(%b : memref<?x128xbf16>)
    memref.dealloc %a : memref<?x128xbf16>
    %c = memref.alloc(%t) : memref<?x128xbf16>
    kiln.add ins(%b, %b : memref<?x128xbf16>, memref<?x128xbf16>) outs(%c : memref<?x128xbf16>)
    %l = memref.alloc(%r) : memref<?x128xbf16>
    kiln.gather_rows ins(%c, %rows : memref<?x128xbf16>, memref<?xi32>) outs(%l : memref<?x128xbf16>)
    kiln.output logits %l : memref<?x128xbf16>
    return
  }
}

// -----
// A view keeps its buffer alive: a is read through v by the rope, so c (allocated after
// b's and a's last direct use) cannot take a's bytes and takes b's. Sizes are bounded
// through views and memref.dim; max_step_tokens comes from kiln.runtime (100 tokens:
// 100 x 128 x 2 = 25600 bytes, a multiple of 256). A static buffer takes its exact
// size; the weights without a planned offset count for nothing yet. The workspace pads
// the total to 17 x 2 MiB again.
// CHECK-LABEL: module attributes
// CHECK-SAME: kiln.device_memory = #kiln.device_memory<weights = 131072, caches = 0, activations = 51200, workspace = 35466240, io = 3072, max_step_tokens = 100, max_logit_rows = 4, activation_buffers = 4, cuda_graphs = 8388608>
// CHECK-LABEL: func.func @kiln_model_forward
// CHECK: %[[A:.*]] = kiln.activation_buffer offset 0 capacity 25600[%{{.*}}] : memref<?x128xbf16>
// CHECK: %[[V:.*]] = memref.expand_shape %[[A]]
// CHECK: %[[B:.*]] = kiln.activation_buffer offset 25600 capacity 25600[%{{.*}}] : memref<?x128xbf16>
// CHECK: kiln.add ins(%[[A]], %[[A]] : {{.*}} outs(%[[B]] :
// CHECK: %[[C:.*]] = kiln.activation_buffer offset 25600 capacity 25600[%{{.*}}] : memref<?x2x64xbf16>
// CHECK: kiln.rope ins(%[[V]], %{{[^ ]*}} : {{.*}} outs(%[[C]] :
// After the rope every other buffer is dead: offset 0 again.
// CHECK: kiln.activation_buffer offset 0 capacity 2048 : memref<8x128xbf16>
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16, max_step_tokens = 100>} {
  kiln.weight @embed {offset = 0} : tensor<512x128xbf16>
  kiln.weight @unplanned : tensor<128xbf16>
  func.func @kiln_model_forward(%ctx: !llvm.ptr {kiln.context}) attributes {kiln.entry} {
    %ids = kiln.input token_ids : memref<?xi32>
    %pos = kiln.input positions : memref<?xi32>
    %c0 = arith.constant 0 : index
    %t = memref.dim %ids, %c0 : memref<?xi32>
    %w = kiln.weight_ref @embed : memref<512x128xbf16>
    %a = memref.alloc(%t) : memref<?x128xbf16>
    kiln.embedding ins(%ids, %w : memref<?xi32>, memref<512x128xbf16>) outs(%a : memref<?x128xbf16>)
    %v = memref.expand_shape %a [[0], [1, 2]] output_shape [%t, 2, 64] : memref<?x128xbf16> into memref<?x2x64xbf16>
    %b = memref.alloc(%t) : memref<?x128xbf16>
    kiln.add ins(%a, %a : memref<?x128xbf16>, memref<?x128xbf16>) outs(%b : memref<?x128xbf16>)
    %tv = memref.dim %v, %c0 : memref<?x2x64xbf16>
    %c = memref.alloc(%tv) : memref<?x2x64xbf16>
    kiln.rope ins(%v, %pos : memref<?x2x64xbf16>, memref<?xi32>) outs(%c : memref<?x2x64xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>}
    %s = memref.alloc() : memref<8x128xbf16>
    kiln.embedding ins(%ids, %w : memref<?xi32>, memref<512x128xbf16>) outs(%s : memref<8x128xbf16>)
    return
  }
}

// STEP64: kiln.device_memory = #kiln.device_memory<weights = 426752, caches = 262144, activations = 98304, workspace = {{[0-9]+}}, io = 2304, max_step_tokens = 64, max_logit_rows = 4, activation_buffers = 19, cuda_graphs = 8388608>
// STEP64-SAME: kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16, max_step_tokens = 64>
// STEP64: kiln.activation_buffer offset 0 capacity 16384[%{{.*}}] : memref<?x128xbf16>
// STEP64: kiln.activation_buffer offset {{[0-9]+}} capacity 32768[%{{.*}}] : memref<?x256xbf16>
// STEP64: kiln.activation_buffer offset {{[0-9]+}} capacity 4096[%{{.*}}] : memref<?x512xbf16>
// STEP64-NOT: memref.alloc

// -----

// The fused residual norm writes its sum exactly over the residual and its normed rows
// over the sublayer output when both die there: four [tokens, hidden] buffers live at
// once in the op take the bytes of two. A summand that is read again later keeps its
// bytes, and an op that may not overwrite its inputs (linear) never gets theirs.
// CHECK-LABEL: func.func @residual
// CHECK: %[[H:.*]] = kiln.activation_buffer offset 0 capacity 65536
// CHECK: %[[O:.*]] = kiln.activation_buffer offset 65536 capacity 65536
// CHECK: %[[S:.*]] = kiln.activation_buffer offset 0 capacity 65536
// CHECK: %[[N:.*]] = kiln.activation_buffer offset 65536 capacity 65536
// CHECK: kiln.add_rms_norm ins(%[[H]], %[[O]], %{{.*}} : {{.*}}) outs(%[[S]], %[[N]] :
// CHECK: %[[L:.*]] = kiln.activation_buffer offset 131072 capacity 65536
// CHECK: kiln.linear ins(%[[N]], {{.*}} outs(%[[L]] :
// s is read again below, so only l can be overwritten: the second sum goes over l and
// its normed rows first-fit (over n, dead since the linear).
// CHECK: %[[S2:.*]] = kiln.activation_buffer offset 131072 capacity 65536
// CHECK: %[[N2:.*]] = kiln.activation_buffer offset 65536 capacity 65536
// CHECK: kiln.add_rms_norm ins(%[[S]], %[[L]], %{{.*}} : {{.*}}) outs(%[[S2]], %[[N2]] :
// CHECK: %[[X:.*]] = kiln.activation_buffer offset 0 capacity 65536
// CHECK: kiln.add ins(%[[S]], %[[N2]] : {{.*}} outs(%[[X]] :
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>} {
  kiln.weight @norm {offset = 0} : tensor<128xbf16>
  kiln.weight @proj {offset = 256} : tensor<128x128xbf16>
  func.func @residual(%ctx: !llvm.ptr {kiln.context}) {
    %ids = kiln.input token_ids : memref<?xi32>
    %c0 = arith.constant 0 : index
    %t = memref.dim %ids, %c0 : memref<?xi32>
    %w = kiln.weight_ref @norm : memref<128xbf16>
    %p = kiln.weight_ref @proj : memref<128x128xbf16>
    %h = memref.alloc(%t) : memref<?x128xbf16>
    %o = memref.alloc(%t) : memref<?x128xbf16>
    kiln.add ins(%h, %h : memref<?x128xbf16>, memref<?x128xbf16>) outs(%o : memref<?x128xbf16>)
    %s = memref.alloc(%t) : memref<?x128xbf16>
    %n = memref.alloc(%t) : memref<?x128xbf16>
    kiln.add_rms_norm ins(%h, %o, %w : memref<?x128xbf16>, memref<?x128xbf16>, memref<128xbf16>) outs(%s, %n : memref<?x128xbf16>, memref<?x128xbf16>) {epsilon = 1.0e-5 : f32}
    %l = memref.alloc(%t) : memref<?x128xbf16>
    kiln.linear ins(%n, %p : memref<?x128xbf16>, memref<128x128xbf16>) outs(%l : memref<?x128xbf16>)
    %s2 = memref.alloc(%t) : memref<?x128xbf16>
    %n2 = memref.alloc(%t) : memref<?x128xbf16>
    kiln.add_rms_norm ins(%s, %l, %w : memref<?x128xbf16>, memref<?x128xbf16>, memref<128xbf16>) outs(%s2, %n2 : memref<?x128xbf16>, memref<?x128xbf16>) {epsilon = 1.0e-5 : f32}
    %x = memref.alloc(%t) : memref<?x128xbf16>
    kiln.add ins(%s, %n2 : memref<?x128xbf16>, memref<?x128xbf16>) outs(%x : memref<?x128xbf16>)
    return
  }
}
