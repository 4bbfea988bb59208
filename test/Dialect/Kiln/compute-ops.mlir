// The whole-model ops round-trip in custom syntax, generic form and bytecode: compute
// ops on tensors and on buffers, weights, step buffers, #kiln.rope, #kiln.device_memory
// and the entry/input/output/context markers.
// RUN: kiln-opt %s | kiln-opt | FileCheck %s
// RUN: kiln-opt %s --mlir-print-op-generic | kiln-opt | FileCheck %s
// RUN: kiln-opt %s --emit-bytecode | kiln-opt | FileCheck %s

// CHECK-LABEL: module attributes
// CHECK-SAME: kiln.device_memory = #kiln.device_memory<weights = 1048576, caches = 2097152, activations = 524288, workspace = 33554432, io = 65536, max_step_tokens = 2048, max_logit_rows = 64, activation_buffers = 12>
module attributes {
  kiln.device_memory = #kiln.device_memory<weights = 1048576, caches = 2097152, activations = 524288,
                                           workspace = 33554432, io = 65536, max_step_tokens = 2048,
                                           max_logit_rows = 64, activation_buffers = 12>
} {
  // CHECK: kiln.weight @model.embed_tokens.weight : tensor<512x128xbf16>
  kiln.weight @"model.embed_tokens.weight" : tensor<512x128xbf16>
  // CHECK: kiln.weight @model.norm.weight {offset = 131072 : i64} : tensor<128xbf16>
  kiln.weight @"model.norm.weight" {offset = 131072} : tensor<128xbf16>

  // CHECK-LABEL: func.func @tensors
  // CHECK-SAME: (%[[IDS:[^:]*]]: tensor<?xi32> {kiln.input = #kiln<input token_ids>}, %[[POS:[^:]*]]: tensor<?xi32> {kiln.input = #kiln<input positions>}, %[[ROWS:[^:]*]]: tensor<?xi32> {kiln.input = #kiln<input logit_rows>}
  // CHECK-SAME: -> (tensor<?x128xbf16> {kiln.output = #kiln<output logits>})
  // CHECK-SAME: attributes {kiln.entry}
  func.func @tensors(%ids: tensor<?xi32> {kiln.input = #kiln<input token_ids>},
                     %pos: tensor<?xi32> {kiln.input = #kiln<input positions>},
                     %rows: tensor<?xi32> {kiln.input = #kiln<input logit_rows>},
                     %x: tensor<?x128xbf16>, %x3: tensor<?x4x32xbf16>, %b: tensor<256xbf16>,
                     %init: tensor<?x128xbf16>, %init3: tensor<?x4x32xbf16>,
                     %init256: tensor<?x256xbf16>)
      -> (tensor<?x128xbf16> {kiln.output = #kiln<output logits>}) attributes {kiln.entry} {
    // CHECK: %[[WE:.*]] = kiln.weight_ref @model.embed_tokens.weight : tensor<512x128xbf16>
    %we = kiln.weight_ref @"model.embed_tokens.weight" : tensor<512x128xbf16>
    // CHECK: %[[WN:.*]] = kiln.weight_ref @model.norm.weight : tensor<128xbf16>
    %wn = kiln.weight_ref @"model.norm.weight" : tensor<128xbf16>
    // CHECK: %[[H:.*]] = kiln.embedding ins(%[[IDS]], %[[WE]] : tensor<?xi32>, tensor<512x128xbf16>) outs(%{{[^ ]*}} : tensor<?x128xbf16>) -> tensor<?x128xbf16>
    %h = kiln.embedding ins(%ids, %we : tensor<?xi32>, tensor<512x128xbf16>) outs(%init : tensor<?x128xbf16>) -> tensor<?x128xbf16>
    // CHECK: kiln.rms_norm ins(%[[H]], %[[WN]] : tensor<?x128xbf16>, tensor<128xbf16>) outs(%{{[^ ]*}} : tensor<?x128xbf16>) {epsilon = 9.99999974E-6 : f32} -> tensor<?x128xbf16>
    %n = kiln.rms_norm ins(%h, %wn : tensor<?x128xbf16>, tensor<128xbf16>) outs(%init : tensor<?x128xbf16>) {epsilon = 1.0e-5 : f32} -> tensor<?x128xbf16>
    // A per-head norm (Qwen3's q/k norms) normalizes the innermost dimension of rank 3.
    // CHECK: kiln.rms_norm ins(%{{[^ ]*}}, %{{[^ ]*}} : tensor<?x4x32xbf16>, tensor<32xbf16>) outs(%{{[^ ]*}} : tensor<?x4x32xbf16>) {epsilon = 9.99999997E-7 : f32} -> tensor<?x4x32xbf16>
    %wq = arith.constant dense<1.0> : tensor<32xbf16>
    %qn = kiln.rms_norm ins(%x3, %wq : tensor<?x4x32xbf16>, tensor<32xbf16>) outs(%init3 : tensor<?x4x32xbf16>) {epsilon = 1.0e-6 : f32} -> tensor<?x4x32xbf16>
    // The weight forms: Qwen3-Next's zero-centered weight, gpt-oss's weight on the fp32
    // normalized value.
    // CHECK: kiln.rms_norm ins(%[[H]], %[[WN]] : tensor<?x128xbf16>, tensor<128xbf16>) outs(%{{[^ ]*}} : tensor<?x128xbf16>) {epsilon = 9.99999997E-7 : f32, zero_centered} -> tensor<?x128xbf16>
    %nz = kiln.rms_norm ins(%h, %wn : tensor<?x128xbf16>, tensor<128xbf16>) outs(%init : tensor<?x128xbf16>) {epsilon = 1.0e-6 : f32, zero_centered} -> tensor<?x128xbf16>
    // CHECK: kiln.rms_norm ins(%[[H]], %[[WN]] : tensor<?x128xbf16>, tensor<128xbf16>) outs(%{{[^ ]*}} : tensor<?x128xbf16>) {epsilon = 9.99999974E-6 : f32, f32_weight} -> tensor<?x128xbf16>
    %nf = kiln.rms_norm ins(%h, %wn : tensor<?x128xbf16>, tensor<128xbf16>) outs(%init : tensor<?x128xbf16>) {epsilon = 1.0e-5 : f32, f32_weight} -> tensor<?x128xbf16>
    // CHECK: kiln.linear ins(%{{[^ ]*}}, %[[WE]] : tensor<?x128xbf16>, tensor<512x128xbf16>) outs(%{{[^ ]*}} : tensor<?x512xbf16>) -> tensor<?x512xbf16>
    %c0 = arith.constant 0 : index
    %t = tensor.dim %x, %c0 : tensor<?x128xbf16>
    %e512 = tensor.empty(%t) : tensor<?x512xbf16>
    %l = kiln.linear ins(%n, %we : tensor<?x128xbf16>, tensor<512x128xbf16>) outs(%e512 : tensor<?x512xbf16>) -> tensor<?x512xbf16>
    // CHECK: kiln.linear ins(%{{[^ ]*}}, %{{[^ ]*}} : tensor<?x128xbf16>, tensor<256x128xbf16>) bias(%{{[^ ]*}} : tensor<256xbf16>) outs(%{{[^ ]*}} : tensor<?x256xbf16>) -> tensor<?x256xbf16>
    %w2 = arith.constant dense<0.5> : tensor<256x128xbf16>
    %lb = kiln.linear ins(%x, %w2 : tensor<?x128xbf16>, tensor<256x128xbf16>) bias(%b : tensor<256xbf16>) outs(%init256 : tensor<?x256xbf16>) -> tensor<?x256xbf16>
    // CHECK: kiln.rope ins(%{{[^ ]*}}, %[[POS]] : tensor<?x4x32xbf16>, tensor<?xi32>) outs(%{{[^ ]*}} : tensor<?x4x32xbf16>) {rope = #kiln.rope<type = default, theta = 1.000000e+04 : f64>} -> tensor<?x4x32xbf16>
    %r0 = kiln.rope ins(%x3, %pos : tensor<?x4x32xbf16>, tensor<?xi32>) outs(%init3 : tensor<?x4x32xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>} -> tensor<?x4x32xbf16>
    // CHECK: kiln.rope {{.*}}rope = #kiln.rope<type = linear, theta = 1.000000e+04 : f64, factor = 4.000000e+00 : f64>
    %r1 = kiln.rope ins(%x3, %pos : tensor<?x4x32xbf16>, tensor<?xi32>) outs(%init3 : tensor<?x4x32xbf16>) {rope = #kiln.rope<type = linear, theta = 10000.0, factor = 4.0>} -> tensor<?x4x32xbf16>
    // CHECK: kiln.rope {{.*}}rope = #kiln.rope<type = llama3, theta = 5.000000e+05 : f64, factor = 8.000000e+00 : f64, low = 1.000000e+00 : f64, high = 4.000000e+00 : f64, original_max_position = 8192>
    %r2 = kiln.rope ins(%x3, %pos : tensor<?x4x32xbf16>, tensor<?xi32>) outs(%init3 : tensor<?x4x32xbf16>) {rope = #kiln.rope<type = llama3, theta = 500000.0, factor = 8.0, low = 1.0, high = 4.0, original_max_position = 8192>} -> tensor<?x4x32xbf16>
    // CHECK: kiln.rope {{.*}}rope = #kiln.rope<type = yarn, theta = 1.000000e+06 : f64, factor = 4.000000e+00 : f64, low = 1.200000e+01 : f64, high = 2.500000e+01 : f64, original_max_position = 32768, attention_factor = 1.138600e+00 : f64>
    %r3 = kiln.rope ins(%x3, %pos : tensor<?x4x32xbf16>, tensor<?xi32>) outs(%init3 : tensor<?x4x32xbf16>) {rope = #kiln.rope<type = yarn, theta = 1000000.0, factor = 4.0, low = 12.0, high = 25.0, original_max_position = 32768, attention_factor = 1.1386>} -> tensor<?x4x32xbf16>
    // CHECK: kiln.add ins(%[[H]], %{{[^ ]*}} : tensor<?x128xbf16>, tensor<?x128xbf16>) outs(%{{[^ ]*}} : tensor<?x128xbf16>) -> tensor<?x128xbf16>
    %s = kiln.add ins(%h, %n : tensor<?x128xbf16>, tensor<?x128xbf16>) outs(%init : tensor<?x128xbf16>) -> tensor<?x128xbf16>
    // CHECK: kiln.add_rms_norm ins(%[[H]], %{{[^ ]*}}, %[[WN]] : tensor<?x128xbf16>, tensor<?x128xbf16>, tensor<128xbf16>) outs(%{{[^ ]*}}, %{{[^ ]*}} : tensor<?x128xbf16>, tensor<?x128xbf16>) {epsilon = 9.99999974E-6 : f32} -> tensor<?x128xbf16>, tensor<?x128xbf16>
    %e128 = tensor.empty(%t) : tensor<?x128xbf16>
    %fs:2 = kiln.add_rms_norm ins(%h, %n, %wn : tensor<?x128xbf16>, tensor<?x128xbf16>, tensor<128xbf16>) outs(%init, %e128 : tensor<?x128xbf16>, tensor<?x128xbf16>) {epsilon = 1.0e-5 : f32} -> tensor<?x128xbf16>, tensor<?x128xbf16>
    // CHECK: kiln.add_rms_norm {{.*}} {epsilon = 9.99999974E-6 : f32, f32_weight} -> tensor<?x128xbf16>, tensor<?x128xbf16>
    %ff:2 = kiln.add_rms_norm ins(%h, %nf, %wn : tensor<?x128xbf16>, tensor<?x128xbf16>, tensor<128xbf16>) outs(%init, %e128 : tensor<?x128xbf16>, tensor<?x128xbf16>) {epsilon = 1.0e-5 : f32, f32_weight} -> tensor<?x128xbf16>, tensor<?x128xbf16>
    // CHECK: kiln.swiglu ins(%{{[^ ]*}}, %{{[^ ]*}} : tensor<?x256xbf16>, tensor<?x256xbf16>) outs(%{{[^ ]*}} : tensor<?x256xbf16>) -> tensor<?x256xbf16>
    %sw = kiln.swiglu ins(%lb, %lb : tensor<?x256xbf16>, tensor<?x256xbf16>) outs(%init256 : tensor<?x256xbf16>) -> tensor<?x256xbf16>
    // CHECK: %[[LAST:.*]] = kiln.gather_rows ins(%{{[^ ]*}}, %[[ROWS]] : tensor<?x128xbf16>, tensor<?xi32>) outs(%{{[^ ]*}} : tensor<?x128xbf16>) -> tensor<?x128xbf16>
    %last = kiln.gather_rows ins(%s, %rows : tensor<?x128xbf16>, tensor<?xi32>) outs(%init : tensor<?x128xbf16>) -> tensor<?x128xbf16>
    // CHECK: return %[[LAST]]
    return %last : tensor<?x128xbf16>
  }

  // On buffers the ops write their `outs` buffer and have no result.
  // Mamba2's output norm over a column view of a projection, and a non-gated MLP's
  // activation.
  // CHECK-LABEL: func.func @mamba_glue
  func.func @mamba_glue(%y: tensor<?x256xbf16>, %proj: tensor<?x776xbf16>, %w: tensor<256xbf16>,
                        %u: tensor<?x512xbf16>) -> (tensor<?x256xbf16>, tensor<?x512xbf16>) {
    %c0 = arith.constant 0 : index
    %n = tensor.dim %y, %c0 : tensor<?x256xbf16>
    %z = tensor.extract_slice %proj[0, 0] [%n, 256] [1, 1] : tensor<?x776xbf16> to tensor<?x256xbf16>
    %e = tensor.empty(%n) : tensor<?x256xbf16>
    // CHECK: kiln.gated_rms_norm ins(%{{.*}}, %{{.*}}, %{{.*}} : tensor<?x256xbf16>, tensor<?x256xbf16>, tensor<256xbf16>) outs(%{{.*}} : tensor<?x256xbf16>) {epsilon = 9.99999974E-6 : f32, group_size = 128 : i64} -> tensor<?x256xbf16>
    %0 = kiln.gated_rms_norm ins(%y, %z, %w : tensor<?x256xbf16>, tensor<?x256xbf16>, tensor<256xbf16>) outs(%e : tensor<?x256xbf16>) {group_size = 128, epsilon = 1.0e-5 : f32} -> tensor<?x256xbf16>
    %m = tensor.dim %u, %c0 : tensor<?x512xbf16>
    %e2 = tensor.empty(%m) : tensor<?x512xbf16>
    // CHECK: kiln.activation relu2 ins(%{{.*}} : tensor<?x512xbf16>) outs(%{{.*}} : tensor<?x512xbf16>) -> tensor<?x512xbf16>
    %1 = kiln.activation relu2 ins(%u : tensor<?x512xbf16>) outs(%e2 : tensor<?x512xbf16>) -> tensor<?x512xbf16>
    // CHECK: kiln.activation silu
    %2 = kiln.activation silu ins(%u : tensor<?x512xbf16>) outs(%e2 : tensor<?x512xbf16>) -> tensor<?x512xbf16>
    return %0, %1 : tensor<?x256xbf16>, tensor<?x512xbf16>
  }

  // CHECK-LABEL: func.func @buffers
  // CHECK-SAME: (%[[CTX:[^:]*]]: !llvm.ptr {kiln.context}
  func.func @buffers(%ctx: !llvm.ptr {kiln.context}, %x3: memref<?x4x32xbf16>,
                     %b: memref<256xbf16>, %w2: memref<256x128xbf16>, %wq: memref<32xbf16>) {
    // CHECK: %[[IDS:.*]] = kiln.input token_ids : memref<?xi32>
    %ids = kiln.input token_ids : memref<?xi32>
    // CHECK: %[[POS:.*]] = kiln.input positions : memref<?xi32>
    %pos = kiln.input positions : memref<?xi32>
    // CHECK: %[[ROWS:.*]] = kiln.input logit_rows : memref<?xi32>
    %rows = kiln.input logit_rows : memref<?xi32>
    // CHECK: %[[WE:.*]] = kiln.weight_ref @model.embed_tokens.weight : memref<512x128xbf16>
    %we = kiln.weight_ref @"model.embed_tokens.weight" : memref<512x128xbf16>
    %wn = kiln.weight_ref @"model.norm.weight" : memref<128xbf16>
    %c0 = arith.constant 0 : index
    %t = memref.dim %ids, %c0 : memref<?xi32>
    %r = memref.dim %rows, %c0 : memref<?xi32>
    // CHECK: %[[H:.*]] = kiln.activation_buffer offset 0 capacity 524288[%{{[^ ]*}}] : memref<?x128xbf16>
    %h = kiln.activation_buffer offset 0 capacity 524288 [%t] : memref<?x128xbf16>
    // CHECK: %[[N:.*]] = kiln.activation_buffer offset 524288 capacity 524288[%{{[^ ]*}}] : memref<?x128xbf16>
    %n = kiln.activation_buffer offset 524288 capacity 524288 [%t] : memref<?x128xbf16>
    %s = kiln.activation_buffer offset 1048576 capacity 524288 [%t] : memref<?x128xbf16>
    %q = kiln.activation_buffer offset 1572864 capacity 524288 [%t] : memref<?x4x32xbf16>
    %g = kiln.activation_buffer offset 2097152 capacity 1048576 [%t] : memref<?x256xbf16>
    // CHECK: kiln.activation_buffer offset 3145728 capacity 2048 : memref<4x256xbf16>
    %fixed = kiln.activation_buffer offset 3145728 capacity 2048 : memref<4x256xbf16>
    %last = kiln.activation_buffer offset 0 capacity 16384 [%r] : memref<?x128xbf16>
    // CHECK: kiln.embedding ins(%[[IDS]], %[[WE]] : memref<?xi32>, memref<512x128xbf16>) outs(%[[H]] : memref<?x128xbf16>){{$}}
    kiln.embedding ins(%ids, %we : memref<?xi32>, memref<512x128xbf16>) outs(%h : memref<?x128xbf16>)
    // CHECK: kiln.rms_norm ins(%[[H]], %{{[^ ]*}} : memref<?x128xbf16>, memref<128xbf16>) outs(%[[N]] : memref<?x128xbf16>) {epsilon = 9.99999974E-6 : f32}{{$}}
    kiln.rms_norm ins(%h, %wn : memref<?x128xbf16>, memref<128xbf16>) outs(%n : memref<?x128xbf16>) {epsilon = 1.0e-5 : f32}
    // CHECK: kiln.rms_norm ins(%{{[^ ]*}}, %{{[^ ]*}} : memref<?x4x32xbf16>, memref<32xbf16>) outs(%{{[^ ]*}} : memref<?x4x32xbf16>)
    kiln.rms_norm ins(%x3, %wq : memref<?x4x32xbf16>, memref<32xbf16>) outs(%q : memref<?x4x32xbf16>) {epsilon = 1.0e-6 : f32}
    // CHECK: kiln.linear ins(%[[N]], %{{[^ ]*}} : memref<?x128xbf16>, memref<256x128xbf16>) bias(%{{[^ ]*}} : memref<256xbf16>) outs(%{{[^ ]*}} : memref<?x256xbf16>){{$}}
    kiln.linear ins(%n, %w2 : memref<?x128xbf16>, memref<256x128xbf16>) bias(%b : memref<256xbf16>) outs(%g : memref<?x256xbf16>)
    // CHECK: kiln.linear ins(%[[N]], %{{[^ ]*}} : memref<?x128xbf16>, memref<256x128xbf16>) outs(%{{[^ ]*}} : memref<?x256xbf16>){{$}}
    kiln.linear ins(%n, %w2 : memref<?x128xbf16>, memref<256x128xbf16>) outs(%g : memref<?x256xbf16>)
    // CHECK: kiln.rope ins(%{{[^ ]*}}, %[[POS]] : memref<?x4x32xbf16>, memref<?xi32>) outs(%{{[^ ]*}} : memref<?x4x32xbf16>) {rope = #kiln.rope<type = default, theta = 1.000000e+04 : f64>}{{$}}
    kiln.rope ins(%x3, %pos : memref<?x4x32xbf16>, memref<?xi32>) outs(%q : memref<?x4x32xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>}
    // CHECK: kiln.add ins(%[[H]], %[[N]] : memref<?x128xbf16>, memref<?x128xbf16>) outs(%{{[^ ]*}} : memref<?x128xbf16>){{$}}
    kiln.add ins(%h, %n : memref<?x128xbf16>, memref<?x128xbf16>) outs(%s : memref<?x128xbf16>)
    // CHECK: kiln.swiglu ins(%{{[^ ]*}}, %{{[^ ]*}} : memref<?x256xbf16>, memref<?x256xbf16>) outs(%{{[^ ]*}} : memref<?x256xbf16>){{$}}
    kiln.swiglu ins(%g, %g : memref<?x256xbf16>, memref<?x256xbf16>) outs(%g : memref<?x256xbf16>)
    // CHECK: kiln.gather_rows ins(%{{[^ ]*}}, %[[ROWS]] : memref<?x128xbf16>, memref<?xi32>) outs(%[[LAST:[^ ]*]] : memref<?x128xbf16>){{$}}
    kiln.gather_rows ins(%s, %rows : memref<?x128xbf16>, memref<?xi32>) outs(%last : memref<?x128xbf16>)
    // CHECK: kiln.output logits %[[LAST]] : memref<?x128xbf16>
    kiln.output logits %last : memref<?x128xbf16>
    // CHECK: %[[BASE:.*]] = llvm.mlir.zero : !llvm.ptr
    // CHECK: kiln.buffer_from_pointer %[[BASE]][%{{[^ ]*}}] : !llvm.ptr -> memref<?x128xbf16>
    // CHECK: kiln.buffer_from_pointer %[[BASE]] : !llvm.ptr -> memref<16x8xf32>
    %base = llvm.mlir.zero : !llvm.ptr
    %dyn = kiln.buffer_from_pointer %base[%t] : !llvm.ptr -> memref<?x128xbf16>
    %static = kiln.buffer_from_pointer %base : !llvm.ptr -> memref<16x8xf32>
    return
  }
}
