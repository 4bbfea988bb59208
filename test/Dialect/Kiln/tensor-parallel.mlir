// kiln.all_reduce: the sum over the tensor-parallel ranks after a row-parallel
// projection; it round-trips on tensors and on buffers.
// RUN: kiln-opt %s -split-input-file | kiln-opt -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @row_parallel_sum
// CHECK: %[[P:.*]] = kiln.linear
// CHECK: kiln.all_reduce ins(%[[P]] : tensor<?x64xbf16>) outs(%[[P]] : tensor<?x64xbf16>) -> tensor<?x64xbf16>
func.func @row_parallel_sum(%x: tensor<?x32xbf16>, %w: tensor<64x32xbf16>, %o: tensor<?x64xbf16>) -> tensor<?x64xbf16> {
  %p = kiln.linear ins(%x, %w : tensor<?x32xbf16>, tensor<64x32xbf16>) outs(%o : tensor<?x64xbf16>) -> tensor<?x64xbf16>
  %s = kiln.all_reduce ins(%p : tensor<?x64xbf16>) outs(%p : tensor<?x64xbf16>) -> tensor<?x64xbf16>
  return %s : tensor<?x64xbf16>
}

// -----
// CHECK-LABEL: func.func @in_place_on_buffers
// CHECK: kiln.all_reduce ins(%{{.*}} : memref<8x64xbf16>) outs(%{{.*}} : memref<8x64xbf16>)
// CHECK-NOT: ->
func.func @in_place_on_buffers(%x: memref<8x64xbf16>) {
  kiln.all_reduce ins(%x : memref<8x64xbf16>) outs(%x : memref<8x64xbf16>)
  return
}

// -----
// A tensor-parallel rank's block of a checkpoint tensor, and the model's ranks.
// CHECK: kiln.model = #kiln.model<name = "m", model_type = "llama", num_layers = 1, dtype = bf16, tp_ranks = 2>
// CHECK: kiln.weight @q {shard = #kiln.shard<dim = 0, parts = 2>} : tensor<32x64xbf16>
// A fused projection's segments (one rank's sizes) and a stack of experts sharded along
// each expert's intermediate features.
// CHECK: kiln.weight @in_proj {shard = #kiln.shard<dim = 0, parts = 2, segments = [16, 16, 8, 8, 4]>} : tensor<52x64xbf16>
// CHECK: kiln.weight @"experts.*.up_proj.weight" {shard = #kiln.shard<dim = 1, parts = 2>} : tensor<8x32x64xbf16>
module attributes {kiln.model = #kiln.model<name = "m", model_type = "llama", num_layers = 1, dtype = bf16, tp_ranks = 2>} {
  kiln.weight @q {shard = #kiln.shard<dim = 0, parts = 2>} : tensor<32x64xbf16>
  kiln.weight @in_proj {shard = #kiln.shard<dim = 0, parts = 2, segments = [16, 16, 8, 8, 4]>} : tensor<52x64xbf16>
  kiln.weight @"experts.*.up_proj.weight" {shard = #kiln.shard<dim = 1, parts = 2>} : tensor<8x32x64xbf16>
}

// -----
// The vocabulary-parallel embedding (a rank's rows, then the sum) and the lm_head's
// gather of the ranks' logit columns through NCCL's blocks.
// CHECK-LABEL: func.func @vocab_parallel
// CHECK: %[[E:.*]] = kiln.embedding ins(%{{.*}}, %{{.*}} : tensor<?xi32>, tensor<128x64xbf16>) outs(%{{.*}} : tensor<?x64xbf16>) {vocab_parallel} -> tensor<?x64xbf16>
// CHECK: kiln.all_reduce ins(%[[E]] : tensor<?x64xbf16>)
// CHECK: %[[G:.*]]:2 = kiln.all_gather ins(%{{.*}} : tensor<?x128xbf16>) outs(%{{.*}}, %{{.*}} : tensor<?x256xbf16>, tensor<2x?x128xbf16>) -> tensor<?x256xbf16>, tensor<2x?x128xbf16>
// CHECK: return %[[G]]#0
func.func @vocab_parallel(%ids: tensor<?xi32>, %table: tensor<128x64xbf16>, %e: tensor<?x64xbf16>,
                          %l: tensor<?x128xbf16>, %o: tensor<?x256xbf16>, %blk: tensor<2x?x128xbf16>) -> tensor<?x256xbf16> {
  %h = kiln.embedding ins(%ids, %table : tensor<?xi32>, tensor<128x64xbf16>) outs(%e : tensor<?x64xbf16>) {vocab_parallel} -> tensor<?x64xbf16>
  %s = kiln.all_reduce ins(%h : tensor<?x64xbf16>) outs(%h : tensor<?x64xbf16>) -> tensor<?x64xbf16>
  %g:2 = kiln.all_gather ins(%l : tensor<?x128xbf16>) outs(%o, %blk : tensor<?x256xbf16>, tensor<2x?x128xbf16>) -> tensor<?x256xbf16>, tensor<2x?x128xbf16>
  return %g#0 : tensor<?x256xbf16>
}

// -----
// CHECK-LABEL: func.func @gather_on_buffers
// CHECK: kiln.all_gather ins(%{{.*}} : memref<4x128xbf16>) outs(%{{.*}}, %{{.*}} : memref<4x512xbf16>, memref<4x4x128xbf16>)
// CHECK-NOT: ->
func.func @gather_on_buffers(%x: memref<4x128xbf16>, %o: memref<4x512xbf16>, %blk: memref<4x4x128xbf16>) {
  kiln.all_gather ins(%x : memref<4x128xbf16>) outs(%o, %blk : memref<4x512xbf16>, memref<4x4x128xbf16>)
  return
}
