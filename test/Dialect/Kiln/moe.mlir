// kiln.moe round-trips on tensors and buffers, and a stacked kiln.weight (a `*` in its
// name) parses.
// RUN: kiln-opt %s | FileCheck %s
// RUN: kiln-opt %s | kiln-opt | FileCheck %s

// CHECK: kiln.weight @"model.layers.0.mlp.experts.*.gate_proj.weight" : tensor<8x32x64xbf16>
kiln.weight @"model.layers.0.mlp.experts.*.gate_proj.weight" : tensor<8x32x64xbf16>

// CHECK-LABEL: func.func @tensors
func.func @tensors(%x: tensor<?x64xbf16>, %l: tensor<?x8xbf16>, %g: tensor<8x32x64xbf16>,
                   %d: tensor<8x64x32xbf16>, %o: tensor<?x64xbf16>, %s: tensor<?x1744xi8>)
    -> tensor<?x64xbf16> {
  // CHECK: %[[R:.*]]:2 = kiln.moe ins(%{{.*}}, %{{.*}} : tensor<?x64xbf16>, tensor<?x8xbf16>) gate(%{{.*}} : tensor<8x32x64xbf16>) up(%{{.*}} : tensor<8x32x64xbf16>) down(%{{.*}} : tensor<8x64x32xbf16>) outs(%{{.*}}, %{{.*}} : tensor<?x64xbf16>, tensor<?x1744xi8>) {normalize_top_k, round_weights, top_k = 2 : i64} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  %r:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x8xbf16>) gate(%g : tensor<8x32x64xbf16>) up(%g : tensor<8x32x64xbf16>) down(%d : tensor<8x64x32xbf16>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi8>) {top_k = 2 : i64, normalize_top_k, round_weights} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  // CHECK: return %[[R]]#0
  return %r#0 : tensor<?x64xbf16>
}

// CHECK-LABEL: func.func @buffers
func.func @buffers(%x: memref<?x64xbf16>, %l: memref<?x8xbf16>, %g: memref<8x32x64xbf16>,
                   %d: memref<8x64x32xbf16>, %o: memref<?x64xbf16>, %s: memref<?x1744xi8>) {
  // CHECK: kiln.moe ins({{.*}}) outs({{.*}} : memref<?x64xbf16>, memref<?x1744xi8>) {top_k = 2 : i64}{{$}}
  kiln.moe ins(%x, %l : memref<?x64xbf16>, memref<?x8xbf16>) gate(%g : memref<8x32x64xbf16>) up(%g : memref<8x32x64xbf16>) down(%d : memref<8x64x32xbf16>) outs(%o, %s : memref<?x64xbf16>, memref<?x1744xi8>) {top_k = 2 : i64}
  return
}

// DeepSeek-V3 / Nemotron-H routing: fp32 logits (a kiln.linear with an f32 result),
// sigmoid scores with a correction bias, expert groups, a routed scale, plain relu2
// experts and the fp32 combine.
// CHECK-LABEL: func.func @sigmoid_routing
func.func @sigmoid_routing(%x: tensor<?x64xbf16>, %r: tensor<8x64xbf16>, %li: tensor<?x8xf32>,
                           %bias: tensor<8xf32>, %u: tensor<8x32x64xbf16>,
                           %d: tensor<8x64x32xbf16>, %o: tensor<?x64xbf16>,
                           %s: tensor<?x1744xi8>) -> tensor<?x64xbf16> {
  // CHECK: kiln.linear ins(%{{.*}}, %{{.*}} : tensor<?x64xbf16>, tensor<8x64xbf16>) outs(%{{.*}} : tensor<?x8xf32>) -> tensor<?x8xf32>
  %l = kiln.linear ins(%x, %r : tensor<?x64xbf16>, tensor<8x64xbf16>) outs(%li : tensor<?x8xf32>) -> tensor<?x8xf32>
  // CHECK: kiln.moe ins(%{{.*}}, %{{.*}} : tensor<?x64xbf16>, tensor<?x8xf32>) up(%{{.*}} : tensor<8x32x64xbf16>) down(%{{.*}} : tensor<8x64x32xbf16>) score_bias(%{{.*}} : tensor<8xf32>) outs(%{{.*}}, %{{.*}} : tensor<?x64xbf16>, tensor<?x1744xi8>)
  // CHECK-SAME: accumulate_f32
  // CHECK-SAME: activation = #kiln<activation relu2>
  // CHECK-SAME: groups = 4 : i64
  // CHECK-SAME: routed_scale = 2.500000e+00 : f32
  // CHECK-SAME: scoring = #kiln<moe_scoring sigmoid>
  // CHECK-SAME: top_groups = 2 : i64
  %m:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x8xf32>) up(%u : tensor<8x32x64xbf16>) down(%d : tensor<8x64x32xbf16>) score_bias(%bias : tensor<8xf32>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi8>) {top_k = 2 : i64, normalize_top_k, scoring = #kiln<moe_scoring sigmoid>, groups = 4 : i64, top_groups = 2 : i64, routed_scale = 2.5 : f32, activation = #kiln<activation relu2>, accumulate_f32} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  return %m#0 : tensor<?x64xbf16>
}

// DeepSeek-V2's group_limited_greedy: softmax scores, each group ranked by its largest
// score (group_max), no renormalization.
// CHECK-LABEL: func.func @group_max_routing
func.func @group_max_routing(%x: tensor<?x64xbf16>, %l: tensor<?x8xf32>, %g: tensor<8x32x64xbf16>,
                             %d: tensor<8x64x32xbf16>, %o: tensor<?x64xbf16>,
                             %s: tensor<?x1744xi8>) -> tensor<?x64xbf16> {
  // CHECK: kiln.moe
  // CHECK-SAME: group_max
  // CHECK-SAME: groups = 4 : i64
  // CHECK-NOT: normalize_top_k
  // CHECK-SAME: top_groups = 2 : i64
  %m:2 = kiln.moe ins(%x, %l : tensor<?x64xbf16>, tensor<?x8xf32>) gate(%g : tensor<8x32x64xbf16>) up(%g : tensor<8x32x64xbf16>) down(%d : tensor<8x64x32xbf16>) outs(%o, %s : tensor<?x64xbf16>, tensor<?x1744xi8>) {top_k = 2 : i64, groups = 4 : i64, top_groups = 2 : i64, group_max} -> tensor<?x64xbf16>, tensor<?x1744xi8>
  return %m#0 : tensor<?x64xbf16>
}

// CHECK-LABEL: func.func @gated_shared_expert
func.func @gated_shared_expert(%x: tensor<?x64xbf16>, %w: tensor<1x64xbf16>, %v: tensor<?x64xbf16>,
                               %o: tensor<?x64xbf16>) -> tensor<?x64xbf16> {
  // CHECK: kiln.sigmoid_gate ins(%{{.*}}, %{{.*}}, %{{.*}} : tensor<?x64xbf16>, tensor<1x64xbf16>, tensor<?x64xbf16>) outs(%{{.*}} : tensor<?x64xbf16>) -> tensor<?x64xbf16>
  %r = kiln.sigmoid_gate ins(%x, %w, %v : tensor<?x64xbf16>, tensor<1x64xbf16>, tensor<?x64xbf16>) outs(%o : tensor<?x64xbf16>) -> tensor<?x64xbf16>
  return %r : tensor<?x64xbf16>
}
