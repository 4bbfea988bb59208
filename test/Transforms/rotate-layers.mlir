// kiln-rotate-layers: a layer loop whose body ends with a residual add that the next
// iteration normalizes first gets that norm moved across the back edge: layer 0's norm
// before the loop, each iteration ending with the next layer's norm (a weight member at
// %layer + 1), the loop one trip shorter, the last layer copied after it (its resources
// declared with the function's at offset + ordinal * stride, its layer ops moved, its
// module paths named). kiln-fuse-residual-norm then fuses the pair inside the body.
// test/Compiled's RolledCalls tests run whole rotated models against unrolled imports.
// RUN: kiln-opt %s --split-input-file --kiln-rotate-layers -mlir-print-debuginfo | FileCheck %s
// RUN: kiln-opt %s --split-input-file --kiln-rotate-layers --kiln-fuse-residual-norm | FileCheck %s --check-prefix=FUSED
// RUN: kiln-opt %s --split-input-file --kiln-rotate-layers --kiln-expand-layers | FileCheck %s --check-prefix=EXPANDED

// CHECK-LABEL: func.func @forward
// CHECK-SAME:    (%[[H0:[^:]*]]: tensor<?x128xbf16>
// CHECK:         kiln.cache_resource layer 2 {{.*}} {bytes = 4096 : i64, offset = 8192 : i64, pool = "kv"}
// CHECK-DAG:     %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG:     %[[C1:.*]] = arith.constant 1 : index
// CHECK:         %[[ZERO:.*]] = arith.constant 0 : index
// CHECK:         %[[FIRST_W:.*]] = kiln.weight_member @"model.layers.{}.norm.weight"[%[[ZERO]]]
// CHECK:         %[[FIRST:.*]] = kiln.rms_norm ins(%[[H0]], %[[FIRST_W]] {{.*}} loc(#[[$L0:[a-z0-9]+]])
// CHECK:         %[[C2:.*]] = arith.constant 2 : index
// CHECK:         %[[LOOP:.*]]:2 = scf.for %[[L:.*]] = %[[C0]] to %[[C2]] step %[[C1]] iter_args(%[[X:.*]] = %[[H0]], %[[N:.*]] = %[[FIRST]])
// CHECK:           kiln.cache_resource layer 0 {{.*}} stride = 4096
// CHECK:           tensor.expand_shape %[[N]]
// CHECK:           kiln.attention layer 0
// CHECK:           %[[SUM:.*]] = kiln.add ins(%[[X]],
// CHECK:           %[[NEXT:.*]] = arith.addi %[[L]], %{{.*}} : index
// CHECK:           %[[NEXT_W:.*]] = kiln.weight_member @"model.layers.{}.norm.weight"[%[[NEXT]]]
// CHECK:           %[[NEXT_N:.*]] = kiln.rms_norm ins(%[[SUM]], %[[NEXT_W]]
// CHECK:           scf.yield %[[SUM]], %[[NEXT_N]]
// CHECK:         } {kiln.layers}
// The last layer: its norm is the loop's second result.
// CHECK-NOT:     kiln.rms_norm
// CHECK:         tensor.expand_shape %[[LOOP]]#1
// CHECK:         kiln.attention layer 2
// CHECK:         %[[LAST:.*]] = kiln.add ins(%[[LOOP]]#0,
// CHECK:         return %[[LAST]]
// CHECK:       #[[$L0]] = loc("model.layers.0.input_layernorm")

// FUSED-LABEL: func.func @forward
// FUSED:         kiln.rms_norm
// FUSED:         scf.for
// FUSED-NOT:       kiln.rms_norm
// FUSED:           %{{.*}}:2 = kiln.add_rms_norm
// FUSED:         } {kiln.layers}
// FUSED:         kiln.add ins

// Rotated and expanded: the unrolled module (the weight members at constant layers,
// in the loop at %layer + 1 too, become references to the members they name).
// EXPANDED-LABEL: func.func @forward
// EXPANDED-NOT:   kiln.weight_member
// EXPANDED-NOT:   scf.for
// EXPANDED:       kiln.weight_ref @model.layers.0.norm.weight
// EXPANDED:       kiln.attention layer 0
// EXPANDED:       kiln.weight_ref @model.layers.1.norm.weight
// EXPANDED:       kiln.attention layer 1
// EXPANDED:       kiln.weight_ref @model.layers.2.norm.weight
// EXPANDED:       kiln.attention layer 2
// EXPANDED-NOT:   kiln.weight_ref @model.layers.3
// EXPANDED:       return
module {
  kiln.weight_family @"model.layers.{}.norm.weight" count 3 {offset = 256 : i64, stride = 512 : i64} : tensor<128xbf16>
  func.func @forward(%h0: tensor<?x128xbf16>, %q: tensor<?x8x16xbf16>) -> tensor<?x128xbf16> {
    %c0 = arith.constant 0 : index
    %c3 = arith.constant 3 : index
    %c1 = arith.constant 1 : index
    %n = tensor.dim %h0, %c0 : tensor<?x128xbf16>
    %h = scf.for %layer = %c0 to %c3 step %c1 iter_args(%x = %h0) -> (tensor<?x128xbf16>) {
      %kv = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 {bytes = 4096 : i64, offset = 0 : i64, pool = "kv", stride = 4096 : i64} : !kiln.cache<kv>
      %w = kiln.weight_member @"model.layers.{}.norm.weight"[%layer] : tensor<128xbf16> loc("model.layers.{}.input_layernorm")
      %init = tensor.empty(%n) : tensor<?x128xbf16>
      %y = kiln.rms_norm ins(%x, %w : tensor<?x128xbf16>, tensor<128xbf16>) outs(%init : tensor<?x128xbf16>) {epsilon = 1.0e-5 : f32} -> tensor<?x128xbf16> loc("model.layers.{}.input_layernorm")
      %yq = tensor.expand_shape %y [[0], [1, 2]] output_shape [%n, 8, 16] : tensor<?x128xbf16> into tensor<?x8x16xbf16>
      %a = kiln.attention layer 0 %yq, %q, %q {num_heads = 8, num_kv_heads = 8, head_dim = 16} : tensor<?x8x16xbf16>, tensor<?x8x16xbf16>, tensor<?x8x16xbf16> -> tensor<?x8x16xbf16>
      %ac = tensor.collapse_shape %a [[0], [1, 2]] : tensor<?x8x16xbf16> into tensor<?x128xbf16>
      %sinit = tensor.empty(%n) : tensor<?x128xbf16>
      %s = kiln.add ins(%x, %ac : tensor<?x128xbf16>, tensor<?x128xbf16>) outs(%sinit : tensor<?x128xbf16>) -> tensor<?x128xbf16>
      scf.yield %s : tensor<?x128xbf16>
    } {kiln.layers}
    return %h : tensor<?x128xbf16>
  }
}

// -----

// Two layers would leave a loop of one trip (no loop after the canonicalizer): left as
// it is (kiln-expand-layers expands it where the norm is fused).
// CHECK-LABEL: func.func @two_layers
// CHECK:         scf.for {{.*}} iter_args(%{{[^,]*}} = %{{[^,]*}}) -> (tensor<?x128xbf16>)
// CHECK:           kiln.rms_norm
// CHECK:           scf.yield %{{[^,]*}} : tensor<?x128xbf16>
// FUSED-LABEL: func.func @two_layers
// EXPANDED-LABEL: func.func @two_layers
module {
  kiln.weight_family @"model.layers.{}.norm.weight" count 2 {offset = 256 : i64, stride = 512 : i64} : tensor<128xbf16>
  func.func @two_layers(%h0: tensor<?x128xbf16>) -> tensor<?x128xbf16> {
    %c0 = arith.constant 0 : index
    %c2 = arith.constant 2 : index
    %c1 = arith.constant 1 : index
    %n = tensor.dim %h0, %c0 : tensor<?x128xbf16>
    %h = scf.for %layer = %c0 to %c2 step %c1 iter_args(%x = %h0) -> (tensor<?x128xbf16>) {
      %w = kiln.weight_member @"model.layers.{}.norm.weight"[%layer] : tensor<128xbf16>
      %init = tensor.empty(%n) : tensor<?x128xbf16>
      %y = kiln.rms_norm ins(%x, %w : tensor<?x128xbf16>, tensor<128xbf16>) outs(%init : tensor<?x128xbf16>) {epsilon = 1.0e-5 : f32} -> tensor<?x128xbf16>
      %sinit = tensor.empty(%n) : tensor<?x128xbf16>
      %s = kiln.add ins(%x, %y : tensor<?x128xbf16>, tensor<?x128xbf16>) outs(%sinit : tensor<?x128xbf16>) -> tensor<?x128xbf16>
      scf.yield %s : tensor<?x128xbf16>
    } {kiln.layers}
    return %h : tensor<?x128xbf16>
  }
}

// -----

// A norm whose destination is read from memory the body writes cannot be computed
// before the loop: left as it is.
// CHECK-LABEL: func.func @norm_init_from_memory
// CHECK:         scf.for {{.*}} iter_args(%{{[^,]*}} = %{{[^,]*}}) -> (tensor<4x128xbf16>)
// FUSED-LABEL: func.func @norm_init_from_memory
// EXPANDED-LABEL: func.func @norm_init_from_memory
module {
  kiln.weight_family @"model.layers.{}.norm.weight" count 4 {offset = 256 : i64, stride = 512 : i64} : tensor<128xbf16>
  func.func @norm_init_from_memory(%h0: tensor<4x128xbf16>, %m: memref<4x128xbf16>) -> tensor<4x128xbf16> {
    %c0 = arith.constant 0 : index
    %c4 = arith.constant 4 : index
    %c1 = arith.constant 1 : index
    %h = scf.for %layer = %c0 to %c4 step %c1 iter_args(%x = %h0) -> (tensor<4x128xbf16>) {
      %w = kiln.weight_member @"model.layers.{}.norm.weight"[%layer] : tensor<128xbf16>
      %init = bufferization.to_tensor %m : memref<4x128xbf16> to tensor<4x128xbf16>
      %y = kiln.rms_norm ins(%x, %w : tensor<4x128xbf16>, tensor<128xbf16>) outs(%init : tensor<4x128xbf16>) {epsilon = 1.0e-5 : f32} -> tensor<4x128xbf16>
      %sinit = tensor.empty() : tensor<4x128xbf16>
      %s = kiln.add ins(%x, %y : tensor<4x128xbf16>, tensor<4x128xbf16>) outs(%sinit : tensor<4x128xbf16>) -> tensor<4x128xbf16>
      scf.yield %s : tensor<4x128xbf16>
    } {kiln.layers}
    return %h : tensor<4x128xbf16>
  }
}
