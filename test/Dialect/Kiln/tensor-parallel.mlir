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
module attributes {kiln.model = #kiln.model<name = "m", model_type = "llama", num_layers = 1, dtype = bf16, tp_ranks = 2>} {
  kiln.weight @q {shard = #kiln.shard<dim = 0, parts = 2>} : tensor<32x64xbf16>
}
