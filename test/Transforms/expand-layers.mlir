// kiln-expand-layers: a layer loop's body copied once a layer, its weight families as
// their members (member-major, at offset + i * stride), its resources declared with the
// function's (at offset + i * stride), its layer ops moved to their layers and its
// module paths named. test/Import/rolled-import.test checks whole models against the
// unrolled import.
// RUN: kiln-opt %s --kiln-expand-layers -mlir-print-debuginfo | FileCheck %s

// CHECK-LABEL: module
// CHECK-NOT:   kiln.weight_family
// CHECK:       kiln.weight @model.layers.0.norm.weight {offset = 256 : i64} : tensor<128xbf16> loc(#[[$N0:.*]])
// CHECK-NEXT:  kiln.weight @model.layers.0.w.weight {offset = 512 : i64} : tensor<128x128xbf16>
// CHECK-NEXT:  kiln.weight @model.layers.1.norm.weight {offset = 33536 : i64} : tensor<128xbf16>
// CHECK-NEXT:  kiln.weight @model.layers.1.w.weight {offset = 33792 : i64} : tensor<128x128xbf16>
// CHECK-NEXT:  kiln.weight @model.norm.weight
// CHECK-LABEL: func.func @forward
// CHECK-NEXT:  kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 {bytes = 4096 : i64, offset = 0 : i64, pool = "kv"}
// CHECK-NEXT:  kiln.cache_resource layer 1 unit [2, 8, 128] of bf16 {bytes = 4096 : i64, offset = 4096 : i64, pool = "kv"}
// CHECK-NOT:   scf.for
// CHECK:       kiln.weight_ref @model.layers.0.norm.weight
// CHECK:       kiln.rms_norm {{.*}} loc(#[[$L0:.*]])
// CHECK:       kiln.attention layer 0
// CHECK:       kiln.weight_ref @model.layers.1.norm.weight
// CHECK:       kiln.rms_norm {{.*}} loc(#[[$L1:.*]])
// CHECK:       kiln.attention layer 1
// CHECK-NOT:   arith.constant 2 : index
// CHECK:       return
// CHECK-DAG:   #[[$N0]] = loc("model.layers.0.norm.weight"
// CHECK-DAG:   #[[$L0]] = loc("model.layers.0.input_layernorm"
// CHECK-DAG:   #[[$L1]] = loc("model.layers.1.input_layernorm"
module {
  kiln.weight @"model.embed_tokens.weight" {offset = 0 : i64} : tensor<128xbf16>
  kiln.weight_family @"model.layers.{}.norm.weight" count 2 {offset = 256 : i64, stride = 33280 : i64} : tensor<128xbf16> loc("model.layers.{}.norm.weight")
  kiln.weight_family @"model.layers.{}.w.weight" count 2 {offset = 512 : i64, stride = 33280 : i64} : tensor<128x128xbf16>
  kiln.weight @model.norm.weight {offset = 66816 : i64} : tensor<128xbf16>
  func.func @forward(%h0: tensor<?x128xbf16>, %q: tensor<?x8x16xbf16>) -> tensor<?x128xbf16> {
    %c0 = arith.constant 0 : index
    %c2 = arith.constant 2 : index
    %c1 = arith.constant 1 : index
    %n = tensor.dim %h0, %c0 : tensor<?x128xbf16>
    %h = scf.for %layer = %c0 to %c2 step %c1 iter_args(%x = %h0) -> (tensor<?x128xbf16>) {
      %kv = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 {bytes = 4096 : i64, offset = 0 : i64, pool = "kv", stride = 4096 : i64} : !kiln.cache<kv>
      %w = kiln.weight_member @"model.layers.{}.norm.weight"[%layer] : tensor<128xbf16> loc("model.layers.{}.input_layernorm")
      %init = tensor.empty(%n) : tensor<?x128xbf16>
      %y = kiln.rms_norm ins(%x, %w : tensor<?x128xbf16>, tensor<128xbf16>) outs(%init : tensor<?x128xbf16>) {epsilon = 1.0e-5 : f32} -> tensor<?x128xbf16> loc("model.layers.{}.input_layernorm")
      %a = kiln.attention layer 0 %q, %q, %q {num_heads = 8, num_kv_heads = 8, head_dim = 16} : tensor<?x8x16xbf16>, tensor<?x8x16xbf16>, tensor<?x8x16xbf16> -> tensor<?x8x16xbf16>
      scf.yield %y : tensor<?x128xbf16>
    } {kiln.layers}
    return %h : tensor<?x128xbf16>
  }
}
