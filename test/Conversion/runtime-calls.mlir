// convert-kiln-to-runtime-calls: every kiln op on buffers becomes one call of the
// runtime on the pointers of its own buffers (docs/abi.md); inputs, weights and planned
// activations become kiln.buffer_from_pointer over the runtime's base pointers; a
// planned model gets kiln_model_manifest().
// RUN: kiln-opt %s -split-input-file --convert-kiln-to-runtime-calls | FileCheck %s
// RUN: kiln-opt %s -split-input-file --convert-kiln-to-runtime-calls | FileCheck %s --check-prefix=GONE

// The runtime functions are declared once, with the context first.
// CHECK-DAG: func.func private @kiln_rt_input(!llvm.ptr, i32) -> !llvm.ptr
// CHECK-DAG: func.func private @kiln_rt_input_size(!llvm.ptr, i32) -> i64
// CHECK-DAG: func.func private @kiln_rt_weights(!llvm.ptr) -> !llvm.ptr
// CHECK-DAG: func.func private @kiln_rt_activations(!llvm.ptr) -> !llvm.ptr
// CHECK-DAG: func.func private @kiln_rt_embedding(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, i64) -> i32
// CHECK-DAG: func.func private @kiln_rt_rms_norm(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, f32) -> i32
// CHECK-DAG: func.func private @kiln_rt_add_rms_norm(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, f32) -> i32
// CHECK-DAG: func.func private @kiln_rt_linear(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, i64) -> i32
// CHECK-DAG: func.func private @kiln_rt_rope(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, i64, i64, i32, f32, f32, f32, f32, i64, f32) -> i32
// CHECK-DAG: func.func private @kiln_rt_add(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64) -> i32
// CHECK-DAG: func.func private @kiln_rt_swiglu(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64) -> i32
// CHECK-DAG: func.func private @kiln_rt_gather_rows(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, i64) -> i32
// CHECK-DAG: func.func private @kiln_rt_attention(!llvm.ptr, i32, i64, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i32, i32, i32, i32, i32, i32, i32, i32, f32, i32) -> i32
// CHECK-DAG: func.func private @kiln_rt_output(!llvm.ptr, i32, !llvm.ptr, i64, i64) -> i32

// CHECK-LABEL: func.func @kiln_model_forward
// CHECK-SAME: (%[[CTX:[^:]*]]: !llvm.ptr {kiln.context}) attributes {kiln.entry}
// The base pointers are fetched once, at the top.
// CHECK: %[[ACT:.*]] = call @kiln_rt_activations(%[[CTX]]) : (!llvm.ptr) -> !llvm.ptr
// CHECK: %[[WTS:.*]] = call @kiln_rt_weights(%[[CTX]]) : (!llvm.ptr) -> !llvm.ptr
// Inputs: data pointer and element count of KILN_RT_INPUT_TOKEN_IDS (0), POSITIONS
// (1), LOGIT_ROWS (2).
// CHECK: %[[K0:.*]] = arith.constant 0 : i32
// CHECK: %[[IDSP:.*]] = call @kiln_rt_input(%[[CTX]], %[[K0]]) : (!llvm.ptr, i32) -> !llvm.ptr
// CHECK: %[[IDSN:.*]] = call @kiln_rt_input_size(%[[CTX]], %[[K0]]) : (!llvm.ptr, i32) -> i64
// CHECK: %[[IDSI:.*]] = arith.index_cast %[[IDSN]] : i64 to index
// CHECK: %[[IDS:.*]] = kiln.buffer_from_pointer %[[IDSP]][%[[IDSI]]] : !llvm.ptr -> memref<?xi32>
// CHECK: %[[K1:.*]] = arith.constant 1 : i32
// CHECK: call @kiln_rt_input(%[[CTX]], %[[K1]])
// CHECK: %[[POS:.*]] = kiln.buffer_from_pointer
// CHECK: %[[K2:.*]] = arith.constant 2 : i32
// CHECK: %[[ROWSP:.*]] = call @kiln_rt_input(%[[CTX]], %[[K2]])
// CHECK: %[[ROWSI:.*]] = arith.index_cast %{{.*}} : i64 to index
// CHECK: %[[ROWS:.*]] = kiln.buffer_from_pointer %[[ROWSP]][%[[ROWSI]]] : !llvm.ptr -> memref<?xi32>
// CHECK: %[[T:.*]] = memref.dim %[[IDS]]
// CHECK: %[[R:.*]] = memref.dim %[[ROWS]]
// Weights: their planned offsets into the weight allocation.
// CHECK: %[[O0:.*]] = arith.constant 0 : i64
// CHECK: %[[WEP:.*]] = llvm.getelementptr %[[WTS]][%[[O0]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK: %[[WE:.*]] = kiln.buffer_from_pointer %[[WEP]] : !llvm.ptr -> memref<512x128xbf16>
// CHECK: %[[O1:.*]] = arith.constant 131072 : i64
// CHECK: %[[WNP:.*]] = llvm.getelementptr %[[WTS]][%[[O1]]]
// CHECK: %[[WN:.*]] = kiln.buffer_from_pointer %[[WNP]] : !llvm.ptr -> memref<128xbf16>
// CHECK: arith.constant 131328 : i64
// CHECK: %[[BIAS:.*]] = kiln.buffer_from_pointer {{.*}} : !llvm.ptr -> memref<128xbf16>
// CHECK: arith.constant 131584 : i64
// CHECK: kiln.buffer_from_pointer {{.*}} : !llvm.ptr -> memref<32xbf16>
// CHECK: arith.constant 131840 : i64
// CHECK: %[[WQ:.*]] = kiln.buffer_from_pointer {{.*}} : !llvm.ptr -> memref<128x128xbf16>
// Activations: their planned offsets into the arena, their dynamic sizes kept.
// CHECK: %[[A0:.*]] = arith.constant 0 : i64
// CHECK: %[[HP:.*]] = llvm.getelementptr %[[ACT]][%[[A0]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK: %[[H:.*]] = kiln.buffer_from_pointer %[[HP]][%[[T]]] : !llvm.ptr -> memref<?x128xbf16>
// CHECK: %[[A1:.*]] = arith.constant 65536 : i64
// CHECK: %[[NP:.*]] = llvm.getelementptr %[[ACT]][%[[A1]]]
// CHECK: %[[N:.*]] = kiln.buffer_from_pointer %[[NP]][%[[T]]] : !llvm.ptr -> memref<?x128xbf16>
// CHECK: %[[G:.*]] = kiln.buffer_from_pointer %[[GP:[0-9a-z_]+]][%[[T]]] : !llvm.ptr -> memref<?x128xbf16>

// embedding(ctx, ids, table, out, tokens, vocab, hidden): a buffer made over a runtime
// pointer passes that pointer; static sizes are constants, dynamic ones the sizes the
// buffer was made with.
// CHECK: %[[TOKENS:.*]] = arith.index_cast %[[IDSI]] : index to i64
// CHECK: %[[VOCAB:.*]] = arith.constant 512 : i64
// CHECK: %[[HIDDEN:.*]] = arith.constant 128 : i64
// CHECK: call @kiln_rt_embedding(%[[CTX]], %[[IDSP]], %[[WEP]], %[[HP]], %[[TOKENS]], %[[VOCAB]], %[[HIDDEN]]) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, i64) -> i32

// rms_norm(ctx, x, weight, out, rows, dim, eps)
// CHECK: %[[ROWS_:.*]] = arith.index_cast %[[T]] : index to i64
// CHECK: %[[DIM:.*]] = arith.constant 128 : i64
// CHECK: %[[EPS:.*]] = arith.constant 9.99999974E-6 : f32
// CHECK: call @kiln_rt_rms_norm(%[[CTX]], %[[HP]], %[[WNP]], %[[NP]], %[[ROWS_]], %[[DIM]], %[[EPS]])
// A per-head norm: rows are tokens x heads (the leading dimensions), dim the last; a
// reshape of a runtime buffer starts at its pointer.
// CHECK: %[[X3:.*]] = memref.expand_shape %[[H]]
// CHECK-NOT: memref.extract_aligned_pointer_as_index
// CHECK: %[[T3:.*]] = memref.dim %[[X3]], %{{.*}} : memref<?x4x32xbf16>
// CHECK: %[[C4:.*]] = arith.constant 4 : index
// CHECK: %[[LEAD:.*]] = arith.muli %[[T3]], %[[C4]] : index
// CHECK: %[[LEAD64:.*]] = arith.index_cast %[[LEAD]] : index to i64
// CHECK: %[[D32:.*]] = arith.constant 32 : i64
// CHECK: call @kiln_rt_rms_norm(%[[CTX]], %[[HP]], %{{[^,]*}}, %[[NP]], %[[LEAD64]], %[[D32]],

// linear(ctx, x, w, bias or null, out, m, n, k)
// CHECK: %[[NULL:.*]] = llvm.mlir.zero : !llvm.ptr
// CHECK: %[[M:.*]] = arith.index_cast %[[T]] : index to i64
// CHECK: %[[NN:.*]] = arith.constant 128 : i64
// CHECK: %[[K:.*]] = arith.constant 128 : i64
// CHECK: call @kiln_rt_linear(%[[CTX]], %[[NP]], %{{[^,]*}}, %[[NULL]], %{{[^,]*}}, %[[M]], %[[NN]], %[[K]])
// CHECK: call @kiln_rt_linear(%[[CTX]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}},

// rope(ctx, x, positions, out, tokens, heads, head_dim, rotary_dim, type, theta, factor,
//      low, high, original_max_position, attention_factor): rotary_dim 0 is the whole head;
//      llama3 is KILN_RT_ROPE_LLAMA3 (2).
// CHECK: %[[ROT:.*]] = arith.constant 0 : i64
// CHECK: %[[TYPE:.*]] = arith.constant 2 : i32
// CHECK: %[[THETA:.*]] = arith.constant 5.000000e+05 : f32
// CHECK: %[[FACTOR:.*]] = arith.constant 8.000000e+00 : f32
// CHECK: %[[LOW:.*]] = arith.constant 1.000000e+00 : f32
// CHECK: %[[HIGH:.*]] = arith.constant 4.000000e+00 : f32
// CHECK: %[[ORIG:.*]] = arith.constant 8192 : i64
// CHECK: %[[AF:.*]] = arith.constant 1.000000e+00 : f32
// CHECK: call @kiln_rt_rope(%[[CTX]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[ROT]], %[[TYPE]], %[[THETA]], %[[FACTOR]], %[[LOW]], %[[HIGH]], %[[ORIG]], %[[AF]])

// add / swiglu(ctx, a, b, out, elements)
// CHECK: call @kiln_rt_add(%[[CTX]],
// CHECK: call @kiln_rt_swiglu(%[[CTX]],
// add_rms_norm(ctx, a, b, weight, sum, out, rows, dim, eps)
// CHECK: %[[AROWS:.*]] = arith.index_cast %[[T]] : index to i64
// CHECK: %[[ADIM:.*]] = arith.constant 128 : i64
// CHECK: %[[AEPS:.*]] = arith.constant 9.99999974E-6 : f32
// CHECK: call @kiln_rt_add_rms_norm(%[[CTX]], %[[HP]], %[[NP]], %[[WNP]], %[[GP]], %[[HP]], %[[AROWS]], %[[ADIM]], %[[AEPS]])

// attention(ctx, layer, kv_offset, q, k, v, sinks, out, tokens, heads, kv_heads, head_dim,
//           page_size, window, decode_kernel, prefill_kernel, spec_dec_mode, scale, kv_dtype):
// the KV resource's planned offset, no sinks (null), gqa_decode (1), prefill_fmha (2),
// single_token (0).
// CHECK: %[[LAYER:.*]] = arith.constant 0 : i32
// CHECK: %[[KVOFF:.*]] = arith.constant 4096 : i64
// CHECK: %[[NOSINKS:.*]] = llvm.mlir.zero : !llvm.ptr
// CHECK: %[[HEADS:.*]] = arith.constant 2 : i32
// CHECK: %[[KVH:.*]] = arith.constant 2 : i32
// CHECK: %[[HD:.*]] = arith.constant 64 : i32
// CHECK: %[[PAGE:.*]] = arith.constant 16 : i32
// CHECK: %[[WIN:.*]] = arith.constant 128 : i32
// CHECK: %[[DEC:.*]] = arith.constant 1 : i32
// CHECK: %[[PRE:.*]] = arith.constant 2 : i32
// CHECK: %[[MODE:.*]] = arith.constant 0 : i32
// CHECK: %[[SCALE:.*]] = arith.constant 0.000000e+00 : f32
// CHECK: %[[KVDT:.*]] = arith.constant 0 : i32
// CHECK: call @kiln_rt_attention(%[[CTX]], %[[LAYER]], %[[KVOFF]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[NOSINKS]], %{{[^,]*}}, %{{[^,]*}}, %[[HEADS]], %[[KVH]], %[[HD]], %[[PAGE]], %[[WIN]], %[[DEC]], %[[PRE]], %[[MODE]], %[[SCALE]], %[[KVDT]])

// gather_rows(ctx, x, rows, out, num_rows, dim, num_source_rows)
// CHECK: %[[LAST:.*]] = kiln.buffer_from_pointer %[[LASTP:[0-9a-z_]+]][%[[R]]] : !llvm.ptr -> memref<?x128xbf16>
// CHECK: %[[NROWS:.*]] = arith.index_cast %[[ROWSI]] : index to i64
// CHECK: %[[GDIM:.*]] = arith.constant 128 : i64
// CHECK: %[[NSRC:.*]] = arith.index_cast %[[T]] : index to i64
// CHECK: call @kiln_rt_gather_rows(%[[CTX]], %[[GP]], %[[ROWSP]], %[[LASTP]], %[[NROWS]], %[[GDIM]], %[[NSRC]])
// CHECK: call @kiln_rt_linear(%[[CTX]],

// output(ctx, KILN_RT_OUTPUT_LOGITS (0), data, rows, cols)
// CHECK: %[[LOGITS:.*]] = arith.constant 0 : i32
// CHECK: %[[LR:.*]] = arith.index_cast %{{.*}} : index to i64
// CHECK: %[[LC:.*]] = arith.constant 512 : i64
// CHECK: call @kiln_rt_output(%[[CTX]], %[[LOGITS]], %{{[^,]*}}, %[[LR]], %[[LC]]) : (!llvm.ptr, i32, !llvm.ptr, i64, i64) -> i32
// CHECK-NEXT: return

// The manifest: the plan's numbers, then each weight with dtype, shape, offset and
// bytes; whitespace in the model name becomes '_'.
// CHECK: llvm.mlir.global internal constant @kiln_manifest_text("kiln-model 2\0Aname tiny_model\0Avocab_size 512\0Ahidden_size 128\0Anum_layers 1\0Amax_batch 4\0Amax_seq_len 256\0Apage_size 16\0Akv_pages 64\0Amax_step_tokens 256\0Amax_logit_rows 4\0Amax_draft_len 0\0Aweight_bytes 164608\0Acache_bytes 262144\0Aspeculative_bytes 0\0Aactivation_bytes 2048\0Aworkspace_bytes 33587712\0Aio_bytes 4608\0A
// CHECK-SAME: weight model.embed_tokens.weight bf16 512x128 0 131072\0A
// CHECK-SAME: weight model.norm.weight bf16 128 131072 256\0A
// CHECK-SAME: weight model.bias bf16 128 131328 256\0A
// CHECK-SAME: weight model.q_norm bf16 32 131584 64\0A
// CHECK-SAME: weight model.wq bf16 128x128 131840 32768\0A
// CHECK-SAME: end\0A\00")
// CHECK-LABEL: func.func @kiln_model_manifest() -> !llvm.ptr
// CHECK-NEXT: %[[TEXT:.*]] = llvm.mlir.addressof @kiln_manifest_text : !llvm.ptr
// CHECK-NEXT: return %[[TEXT]] : !llvm.ptr

// Nothing of the model's declarations is left, and no kiln op but the buffers.
// GONE-NOT: kiln.weight
// GONE-NOT: kiln.cache_resource
// GONE-NOT: kiln.activation_buffer
// GONE-NOT: kiln.input
// GONE-NOT: kiln.output
// GONE-NOT: kiln.cached_attention
module attributes {kiln.model = #kiln.model<name = "tiny model", model_type = "llama", num_layers = 1, dtype = bf16>,
                   kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, page_size = 16, kv_dtype = bf16>,
                   kiln.plan = #kiln.plan<total_bytes = 262144, kv_bytes = 262144, state_bytes = 0, speculative_bytes = 0, unmanaged_bytes = 0, budget_bytes = 0, kv_pages = 64, fits = true, pools = []>,
                   kiln.device_memory = #kiln.device_memory<weights = 164608, caches = 262144, activations = 2048, workspace = 33587712, io = 4608, max_step_tokens = 256, max_logit_rows = 4, activation_buffers = 3>} {
  kiln.weight @model.embed_tokens.weight {offset = 0} : tensor<512x128xbf16>
  kiln.weight @model.norm.weight {offset = 131072} : tensor<128xbf16>
  kiln.weight @model.bias {offset = 131328} : tensor<128xbf16>
  kiln.weight @model.q_norm {offset = 131584} : tensor<32xbf16>
  kiln.weight @model.wq {offset = 131840} : tensor<128x128xbf16>
  func.func @kiln_model_forward(%ctx: !llvm.ptr {kiln.context}) attributes {kiln.entry} {
    %kv = kiln.cache_resource layer 0 unit [2, 2, 64] of bf16 shard 1 {bytes = 262144 : i64, offset = 4096 : i64, pool = "kv.full.d64.bf16"} : !kiln.cache<kv>
    %ids = kiln.input token_ids : memref<?xi32>
    %pos = kiln.input positions : memref<?xi32>
    %rows = kiln.input logit_rows : memref<?xi32>
    %c0 = arith.constant 0 : index
    %t = memref.dim %ids, %c0 : memref<?xi32>
    %r = memref.dim %rows, %c0 : memref<?xi32>
    %we = kiln.weight_ref @model.embed_tokens.weight : memref<512x128xbf16>
    %wn = kiln.weight_ref @model.norm.weight : memref<128xbf16>
    %b = kiln.weight_ref @model.bias : memref<128xbf16>
    %wqn = kiln.weight_ref @model.q_norm : memref<32xbf16>
    %wq = kiln.weight_ref @model.wq : memref<128x128xbf16>
    %h = kiln.activation_buffer offset 0 capacity 65536 [%t] : memref<?x128xbf16>
    %n = kiln.activation_buffer offset 65536 capacity 65536 [%t] : memref<?x128xbf16>
    %g = kiln.activation_buffer offset 131072 capacity 65536 [%t] : memref<?x128xbf16>
    kiln.embedding ins(%ids, %we : memref<?xi32>, memref<512x128xbf16>) outs(%h : memref<?x128xbf16>)
    kiln.rms_norm ins(%h, %wn : memref<?x128xbf16>, memref<128xbf16>) outs(%n : memref<?x128xbf16>) {epsilon = 1.0e-5 : f32}
    %h3 = memref.expand_shape %h [[0], [1, 2]] output_shape [%t, 4, 32] : memref<?x128xbf16> into memref<?x4x32xbf16>
    %n3 = memref.expand_shape %n [[0], [1, 2]] output_shape [%t, 4, 32] : memref<?x128xbf16> into memref<?x4x32xbf16>
    kiln.rms_norm ins(%h3, %wqn : memref<?x4x32xbf16>, memref<32xbf16>) outs(%n3 : memref<?x4x32xbf16>) {epsilon = 1.0e-6 : f32}
    kiln.linear ins(%n, %wq : memref<?x128xbf16>, memref<128x128xbf16>) outs(%g : memref<?x128xbf16>)
    kiln.linear ins(%n, %wq : memref<?x128xbf16>, memref<128x128xbf16>) bias(%b : memref<128xbf16>) outs(%g : memref<?x128xbf16>)
    kiln.rope ins(%h3, %pos : memref<?x4x32xbf16>, memref<?xi32>) outs(%n3 : memref<?x4x32xbf16>) {rope = #kiln.rope<type = llama3, theta = 500000.0, factor = 8.0, low = 1.0, high = 4.0, original_max_position = 8192>}
    kiln.add ins(%h, %n : memref<?x128xbf16>, memref<?x128xbf16>) outs(%g : memref<?x128xbf16>)
    kiln.swiglu ins(%h, %n : memref<?x128xbf16>, memref<?x128xbf16>) outs(%g : memref<?x128xbf16>)
    kiln.add_rms_norm ins(%h, %n, %wn : memref<?x128xbf16>, memref<?x128xbf16>, memref<128xbf16>) outs(%g, %h : memref<?x128xbf16>, memref<?x128xbf16>) {epsilon = 1.0e-5 : f32}
    %q = memref.expand_shape %h [[0], [1, 2]] output_shape [%t, 2, 64] : memref<?x128xbf16> into memref<?x2x64xbf16>
    %k = memref.expand_shape %n [[0], [1, 2]] output_shape [%t, 2, 64] : memref<?x128xbf16> into memref<?x2x64xbf16>
    %o = memref.expand_shape %g [[0], [1, 2]] output_shape [%t, 2, 64] : memref<?x128xbf16> into memref<?x2x64xbf16>
    kiln.cached_attention layer 0 %q, %k, %k kv(%kv : !kiln.cache<kv>) outs(%o : memref<?x2x64xbf16>) {num_heads = 2, num_kv_heads = 2, head_dim = 64, sliding_window = 128, decode_kernel = "gqa_decode", prefill_kernel = "prefill_fmha", spec_dec_mode = #kiln<spec_dec_mode single_token>} : memref<?x2x64xbf16>, memref<?x2x64xbf16>, memref<?x2x64xbf16>
    %l = kiln.activation_buffer offset 0 capacity 4096 [%r] : memref<?x512xbf16>
    %last = kiln.activation_buffer offset 65536 capacity 1024 [%r] : memref<?x128xbf16>
    kiln.gather_rows ins(%g, %rows : memref<?x128xbf16>, memref<?xi32>) outs(%last : memref<?x128xbf16>)
    kiln.linear ins(%last, %we : memref<?x128xbf16>, memref<512x128xbf16>) outs(%l : memref<?x512xbf16>)
    kiln.output logits %l : memref<?x512xbf16>
    return
  }
}

// -----
// Any function with a kiln.context argument lowers in place: the embedder's own IR
// around the ops is kept, and a module without #kiln.device_memory (not a whole
// planned model) gets no manifest.
// CHECK-LABEL: func.func @embedder_layer
// CHECK-SAME: (%[[CTX:[^:]*]]: !llvm.ptr {kiln.context}, %[[X:[^:]*]]: memref<?x128xbf16>, %[[Y:[^:]*]]: memref<?x128xbf16>)
// CHECK: %[[SUM:.*]] = memref.alloc
// CHECK: memref.extract_aligned_pointer_as_index %[[X]]
// CHECK: memref.extract_aligned_pointer_as_index %[[Y]]
// CHECK: memref.extract_aligned_pointer_as_index %[[SUM]]
// CHECK: %[[ROWSX:.*]] = memref.dim %[[X]], %{{.*}}
// CHECK: %[[C128:.*]] = arith.constant 128 : index
// CHECK: %[[ELEMS:.*]] = arith.muli %[[ROWSX]], %[[C128]] : index
// CHECK: %[[N:.*]] = arith.index_cast %[[ELEMS]] : index to i64
// CHECK: call @kiln_rt_add(%[[CTX]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[N]])
// CHECK: memref.copy %[[SUM]], %[[Y]]
// CHECK-NOT: kiln_model_manifest
// CHECK-NOT: kiln_manifest_text
module {
  func.func @embedder_layer(%ctx: !llvm.ptr {kiln.context}, %x: memref<?x128xbf16>, %y: memref<?x128xbf16>) {
    %c0 = arith.constant 0 : index
    %t = memref.dim %x, %c0 : memref<?x128xbf16>
    %sum = memref.alloc(%t) : memref<?x128xbf16>
    kiln.add ins(%x, %y : memref<?x128xbf16>, memref<?x128xbf16>) outs(%sum : memref<?x128xbf16>)
    memref.copy %sum, %y : memref<?x128xbf16> to memref<?x128xbf16>
    return
  }
}

// -----
// kiln.moe: the buffers' pointers (no score bias: null), then tokens, hidden, inter,
// experts (from the buffers), top_k, the routing flags (KILN_MOE_NORMALIZE_TOP_K 1 |
// ROUND_WEIGHTS 2), groups 1 of 1, scale 1, the activation (silu 1, unread for gated
// experts) and the scratch's bytes per token.
// CHECK-LABEL: func.func @moe_layer
// CHECK-SAME: (%[[CTX:[^:]*]]: !llvm.ptr {kiln.context}, %[[X:[^:]*]]: memref<?x64xbf16>
// CHECK-DAG: %[[TOPK:.*]] = arith.constant 2 : i32
// CHECK-DAG: %[[FLAGS:.*]] = arith.constant 3 : i32
// CHECK-DAG: %[[ONE:.*]] = arith.constant 1 : i32
// CHECK-DAG: %[[SCALE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK-DAG: %[[SCRATCH:.*]] = arith.constant 1744 : i64
// CHECK-DAG: %[[HIDDEN:.*]] = arith.constant 64 : i64
// CHECK-DAG: %[[INTER:.*]] = arith.constant 32 : i64
// CHECK-DAG: %[[EXPERTS:.*]] = arith.constant 8 : i64
// CHECK-DAG: %[[NULL:.*]] = llvm.mlir.zero : !llvm.ptr
// CHECK: call @kiln_rt_moe(%[[CTX]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[NULL]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[HIDDEN]], %[[INTER]], %[[EXPERTS]], %[[TOPK]], %[[FLAGS]], %[[ONE]], %{{[^,]*}}, %[[SCALE]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[SCRATCH]]) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, i64, i64, i32, i32, i32, i32, f32, i32, f32, f32, i64) -> i32
module {
  func.func @moe_layer(%ctx: !llvm.ptr {kiln.context}, %x: memref<?x64xbf16>, %l: memref<?x8xbf16>,
                       %g: memref<8x32x64xbf16>, %d: memref<8x64x32xbf16>, %o: memref<?x64xbf16>,
                       %s: memref<?x1744xi8>) {
    kiln.moe ins(%x, %l : memref<?x64xbf16>, memref<?x8xbf16>) gate(%g : memref<8x32x64xbf16>) up(%g : memref<8x32x64xbf16>) down(%d : memref<8x64x32xbf16>) outs(%o, %s : memref<?x64xbf16>, memref<?x1744xi8>) {top_k = 2 : i64, normalize_top_k, round_weights}
    return
  }
}

// -----
// DeepSeek-style routing: the router's f32 linear (kiln_rt_linear_f32out, no bias), then
// kiln.moe with no gate (null), the score bias, flags NORMALIZE_TOP_K 1 | SIGMOID 8 |
// F32_LOGITS 16 | F32_COMBINE 32 = 57, groups 4 keeping 3, scale 2.5 and relu2 (0).
// CHECK-LABEL: func.func @sigmoid_moe_layer
// CHECK: call @kiln_rt_linear_f32out(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, i64) -> i32
// CHECK: %[[NULL:.*]] = llvm.mlir.zero : !llvm.ptr
// CHECK-DAG: %[[FLAGS:.*]] = arith.constant 57 : i32
// CHECK-DAG: %[[GROUPS:.*]] = arith.constant 4 : i32
// CHECK-DAG: %[[KEPT:.*]] = arith.constant 3 : i32
// CHECK-DAG: %[[SCALE:.*]] = arith.constant 2.500000e+00 : f32
// CHECK-DAG: %[[RELU2:.*]] = arith.constant 0 : i32
// CHECK: call @kiln_rt_moe(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[NULL]], %{{.*}}, %[[FLAGS]], %[[GROUPS]], %[[KEPT]], %[[SCALE]], %[[RELU2]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}})
module {
  func.func @sigmoid_moe_layer(%ctx: !llvm.ptr {kiln.context}, %x: memref<?x64xbf16>,
                               %r: memref<8x64xbf16>, %l: memref<?x8xf32>, %b: memref<8xf32>,
                               %u: memref<8x32x64xbf16>, %d: memref<8x64x32xbf16>,
                               %o: memref<?x64xbf16>, %s: memref<?x1744xi8>) {
    kiln.linear ins(%x, %r : memref<?x64xbf16>, memref<8x64xbf16>) outs(%l : memref<?x8xf32>)
    kiln.moe ins(%x, %l : memref<?x64xbf16>, memref<?x8xf32>) up(%u : memref<8x32x64xbf16>) down(%d : memref<8x64x32xbf16>) score_bias(%b : memref<8xf32>) outs(%o, %s : memref<?x64xbf16>, memref<?x1744xi8>) {top_k = 2 : i64, normalize_top_k, scoring = #kiln<moe_scoring sigmoid>, groups = 4 : i64, top_groups = 3 : i64, routed_scale = 2.5 : f32, activation = #kiln<activation relu2>, accumulate_f32}
    return
  }
}

// -----
// kiln.sigmoid_gate: x, the gate weight, value, out, then rows, dim and cols.
// CHECK-LABEL: func.func @gated
// CHECK-SAME: (%[[CTX:[^:]*]]: !llvm.ptr {kiln.context}, %[[X:[^:]*]]: memref<?x64xbf16>
// CHECK: %[[ROWS:.*]] = memref.dim %[[X]], %{{.*}}
// CHECK: %[[R:.*]] = arith.index_cast %[[ROWS]] : index to i64
// CHECK: %[[D:.*]] = arith.constant 64 : i64
// CHECK: call @kiln_rt_sigmoid_gate(%[[CTX]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[R]], %[[D]], %{{[^)]*}}) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, i64) -> i32
module {
  func.func @gated(%ctx: !llvm.ptr {kiln.context}, %x: memref<?x64xbf16>, %w: memref<1x64xbf16>, %v: memref<?x64xbf16>, %o: memref<?x64xbf16>) {
    kiln.sigmoid_gate ins(%x, %w, %v : memref<?x64xbf16>, memref<1x64xbf16>, memref<?x64xbf16>) outs(%o : memref<?x64xbf16>)
    return
  }
}

// -----
// A Mamba2 layer on column views: the conv reads xBC out of in_proj's output (row stride
// 776), the scan reads x, B, C out of the conv's output (row stride 512) and dt out of
// in_proj's (776); each passes its row stride. The state is f32 (code 2), the scan's
// parameters f32 pointers, dt_min 1e-3.
// CHECK-LABEL: func.func @mamba_layer
// CHECK: %[[CS:.*]] = arith.constant 776 : i64
// CHECK: call @kiln_rt_causal_conv({{.*}}, %[[CS]], {{[^)]*}}) {kiln.layer = 1 : i64} : (!llvm.ptr, i32, i64, i64, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, i32, i64, i32, i32, i32, i32, i32) -> i32
// CHECK: %[[XS:.*]] = arith.constant 512 : i64
// CHECK-NEXT: %[[DS:.*]] = arith.constant 776 : i64
// CHECK-NEXT: %[[BS:.*]] = arith.constant 512 : i64
// CHECK-NEXT: %[[MIN:.*]] = arith.constant 1.000000e-03 : f32
// CHECK-NEXT: %[[MAX:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT: %[[F32:.*]] = arith.constant 2 : i32
// CHECK: call @kiln_rt_mamba_ssm({{.*}}, %[[XS]], %[[DS]], %[[BS]], %[[MIN]], %[[MAX]], %[[F32]], {{[^)]*}}) {kiln.layer = 1 : i64} : (!llvm.ptr, i32, i64, i64, i64, i64, i64, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, i64, i64, i64, i64, i64, i64, f32, f32, i32, i32, i32, i32) -> i32
// CHECK: %[[GS:.*]] = arith.constant 776 : i64
// CHECK: call @kiln_rt_gated_rms_norm({{.*}}, %[[GS]], {{[^)]*}}) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, i64, i64, f32) -> i32
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>} {
  func.func @mamba_layer(%ctx: !llvm.ptr {kiln.context}, %proj: memref<?x776xbf16>, %w: memref<512x4xbf16>,
                         %cb: memref<512xbf16>, %conv: memref<?x512xbf16>, %p: memref<8xf32>,
                         %y: memref<?x8x32xbf16>, %nw: memref<256xbf16>, %o: memref<?x256xbf16>) {
    %c0 = arith.constant 0 : index
    %n = memref.dim %proj, %c0 : memref<?x776xbf16>
    %s = kiln.cache_resource layer 1 unit [8, 32, 64] of f32 {offset = 0 : i64} : !kiln.cache<ssm_state>
    %cs = kiln.cache_resource layer 1 unit [512, 3] of bf16 {offset = 262144 : i64} : !kiln.cache<conv_state>
    %z = memref.subview %proj[0, 0] [%n, 256] [1, 1] : memref<?x776xbf16> to memref<?x256xbf16, strided<[776, 1]>>
    %xbc = memref.subview %proj[0, 256] [%n, 512] [1, 1] : memref<?x776xbf16> to memref<?x512xbf16, strided<[776, 1], offset: 256>>
    %dt = memref.subview %proj[0, 768] [%n, 8] [1, 1] : memref<?x776xbf16> to memref<?x8xbf16, strided<[776, 1], offset: 768>>
    kiln.cached_causal_conv layer 1 %xbc weight(%w : memref<512x4xbf16>) bias(%cb : memref<512xbf16>) state(%cs : !kiln.cache<conv_state>) outs(%conv : memref<?x512xbf16>)
      {conv_dim = 512, kernel_size = 4, silu, decode_kernel = "conv_update", prefill_kernel = "conv_prefill_sequential"} : memref<?x512xbf16, strided<[776, 1], offset: 256>>
    %xs2 = memref.subview %conv[0, 0] [%n, 256] [1, 1] : memref<?x512xbf16> to memref<?x256xbf16, strided<[512, 1]>>
    %xs = memref.expand_shape %xs2 [[0], [1, 2]] output_shape [%n, 8, 32] : memref<?x256xbf16, strided<[512, 1]>> into memref<?x8x32xbf16, strided<[512, 32, 1]>>
    %b2 = memref.subview %conv[0, 256] [%n, 128] [1, 1] : memref<?x512xbf16> to memref<?x128xbf16, strided<[512, 1], offset: 256>>
    %b = memref.expand_shape %b2 [[0], [1, 2]] output_shape [%n, 2, 64] : memref<?x128xbf16, strided<[512, 1], offset: 256>> into memref<?x2x64xbf16, strided<[512, 64, 1], offset: 256>>
    %c2 = memref.subview %conv[0, 384] [%n, 128] [1, 1] : memref<?x512xbf16> to memref<?x128xbf16, strided<[512, 1], offset: 384>>
    %c = memref.expand_shape %c2 [[0], [1, 2]] output_shape [%n, 2, 64] : memref<?x128xbf16, strided<[512, 1], offset: 384>> into memref<?x2x64xbf16, strided<[512, 64, 1], offset: 384>>
    kiln.cached_ssm layer 1 %xs, %dt, %b, %c a_log(%p : memref<8xf32>) d(%p : memref<8xf32>) dt_bias(%p : memref<8xf32>) state(%s : !kiln.cache<ssm_state>) outs(%y : memref<?x8x32xbf16>)
      {num_heads = 8, head_dim = 32, state_size = 64, n_groups = 2, dt_min = 0.001 : f32, decode_kernel = "ssm_update", prefill_kernel = "ssm_prefill_sequential"}
      : memref<?x8x32xbf16, strided<[512, 32, 1]>>, memref<?x8xbf16, strided<[776, 1], offset: 768>>, memref<?x2x64xbf16, strided<[512, 64, 1], offset: 256>>, memref<?x2x64xbf16, strided<[512, 64, 1], offset: 384>>
    %yf = memref.collapse_shape %y [[0], [1, 2]] : memref<?x8x32xbf16> into memref<?x256xbf16>
    kiln.gated_rms_norm ins(%yf, %z, %nw : memref<?x256xbf16>, memref<?x256xbf16, strided<[776, 1]>>, memref<256xbf16>) outs(%o : memref<?x256xbf16>) {group_size = 128, epsilon = 1.0e-5 : f32}
    return
  }
}

// -----
// An f16 KV cache (--kv-dtype f16) next to bf16 activations lowers with its own code,
// KILN_RT_DTYPE_F16 = 1, as the call's last argument (the pool is read as fp16 operands;
// an f32 cache is refused: runtime-calls-invalid.mlir).
// CHECK-LABEL: func.func @f16_cache
// CHECK: %[[SCALE:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT: %[[F16:.*]] = arith.constant 1 : i32
// CHECK-NEXT: call @kiln_rt_attention({{.*}}, %[[SCALE]], %[[F16]]) {kiln.layer = 0 : i64}
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, page_size = 16, kv_dtype = f16>} {
  func.func @f16_cache(%ctx: !llvm.ptr {kiln.context}, %q: memref<?x2x64xbf16>, %k: memref<?x1x64xbf16>, %o: memref<?x2x64xbf16>) {
    %kv = kiln.cache_resource layer 0 unit [2, 1, 64] of f16 {offset = 0 : i64} : !kiln.cache<kv>
    kiln.cached_attention layer 0 %q, %k, %k kv(%kv : !kiln.cache<kv>) outs(%o : memref<?x2x64xbf16>)
      {num_heads = 2, num_kv_heads = 1, head_dim = 64, decode_kernel = "gqa_decode", prefill_kernel = "prefill_fmha", spec_dec_mode = #kiln<spec_dec_mode single_token>} : memref<?x2x64xbf16>, memref<?x1x64xbf16>, memref<?x1x64xbf16>
    return
  }
}

// -----
// Norms whose weight multiplies the fp32 normalized value call the offset forms, with the
// weight offset last: 1 for zero_centered (Qwen3-Next's 1 + weight), -0.0 for f32_weight
// (gpt-oss's weight as is). A plain norm keeps its calls.
// CHECK-LABEL: func.func @weight_forms
// CHECK: %[[EPS:.*]] = arith.constant 9.99999997E-7 : f32
// CHECK-NEXT: %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK-NEXT: call @kiln_rt_rms_norm_offset({{.*}}, %[[EPS]], %[[ONE]]) : (!llvm.ptr, !llvm.ptr, i64, i64, !llvm.ptr, !llvm.ptr, i64, i64, i64, f32, f32) -> i32
// CHECK: %[[EPS2:.*]] = arith.constant 9.99999974E-6 : f32
// CHECK-NEXT: %[[NEGZERO:.*]] = arith.constant -0.000000e+00 : f32
// CHECK-NEXT: call @kiln_rt_rms_norm_offset({{.*}}, %[[EPS2]], %[[NEGZERO]]) : (!llvm.ptr, !llvm.ptr, i64, i64, !llvm.ptr, !llvm.ptr, i64, i64, i64, f32, f32) -> i32
// CHECK: %[[EPS3:.*]] = arith.constant 9.99999974E-6 : f32
// CHECK-NEXT: call @kiln_rt_rms_norm(%{{[^)]*}}, %[[EPS3]]) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, f32) -> i32
// CHECK: %[[EPS4:.*]] = arith.constant 9.99999997E-7 : f32
// CHECK-NEXT: %[[ONE4:.*]] = arith.constant 1.000000e+00 : f32
// CHECK-NEXT: call @kiln_rt_add_rms_norm_offset({{.*}}, %[[EPS4]], %[[ONE4]]) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, f32, f32) -> i32
// CHECK: %[[EPS5:.*]] = arith.constant 9.99999974E-6 : f32
// CHECK-NEXT: %[[NEGZERO5:.*]] = arith.constant -0.000000e+00 : f32
// CHECK-NEXT: call @kiln_rt_add_rms_norm_offset({{.*}}, %[[EPS5]], %[[NEGZERO5]]) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, f32, f32) -> i32
// CHECK: %[[EPS6:.*]] = arith.constant 9.99999974E-6 : f32
// CHECK-NEXT: call @kiln_rt_add_rms_norm(%{{[^)]*}}, %[[EPS6]]) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, f32) -> i32
module {
  func.func @weight_forms(%ctx: !llvm.ptr {kiln.context}, %h: memref<?x128xbf16>, %o: memref<?x128xbf16>, %w: memref<128xbf16>, %s: memref<?x128xbf16>, %n: memref<?x128xbf16>) {
    kiln.rms_norm ins(%h, %w : memref<?x128xbf16>, memref<128xbf16>) outs(%n : memref<?x128xbf16>) {epsilon = 1.0e-6 : f32, zero_centered}
    kiln.rms_norm ins(%h, %w : memref<?x128xbf16>, memref<128xbf16>) outs(%n : memref<?x128xbf16>) {epsilon = 1.0e-5 : f32, f32_weight}
    kiln.rms_norm ins(%h, %w : memref<?x128xbf16>, memref<128xbf16>) outs(%n : memref<?x128xbf16>) {epsilon = 1.0e-5 : f32}
    kiln.add_rms_norm ins(%h, %o, %w : memref<?x128xbf16>, memref<?x128xbf16>, memref<128xbf16>) outs(%s, %n : memref<?x128xbf16>, memref<?x128xbf16>) {epsilon = 1.0e-6 : f32, zero_centered}
    kiln.add_rms_norm ins(%h, %o, %w : memref<?x128xbf16>, memref<?x128xbf16>, memref<128xbf16>) outs(%s, %n : memref<?x128xbf16>, memref<?x128xbf16>) {epsilon = 1.0e-5 : f32, f32_weight}
    kiln.add_rms_norm ins(%h, %o, %w : memref<?x128xbf16>, memref<?x128xbf16>, memref<128xbf16>) outs(%s, %n : memref<?x128xbf16>, memref<?x128xbf16>) {epsilon = 1.0e-5 : f32}
    return
  }
}
