// Every verifier diagnostic of kiln.all_reduce and of a weight's #kiln.shard.
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

func.func @f(%x: tensor<?x64xbf16>, %o: tensor<?x32xbf16>) {
  // expected-error @below {{'input' 'tensor<?x64xbf16>' and 'init' 'tensor<?x32xbf16>' must have the same shape}}
  %0 = kiln.all_reduce ins(%x : tensor<?x64xbf16>) outs(%o : tensor<?x32xbf16>) -> tensor<?x32xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x64xf32>, %o: tensor<?x64xf32>) {
  // expected-error @below {{'input' must have element type 'bf16', got 'f32'}}
  %0 = kiln.all_reduce ins(%x : tensor<?x64xf32>) outs(%o : tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----
func.func @f(%x: memref<8x64xbf16>, %o: memref<8x64xbf16>) {
  // expected-error @below {{expected the number of tensor results (1) to be equal to the number of output tensors (0)}}
  %0 = kiln.all_reduce ins(%x : memref<8x64xbf16>) outs(%o : memref<8x64xbf16>) -> tensor<8x64xbf16>
  return
}

// -----
// expected-error @below {{'shard' dimension 2 is not a dimension of 'tensor<64x32xbf16>'}}
kiln.weight @w {shard = #kiln.shard<dim = 2, parts = 2>} : tensor<64x32xbf16>

// -----
// expected-error @below {{a sharded weight is read as a block of the checkpoint tensor}}
kiln.weight @w {shard = #kiln.shard<dim = 0, parts = 2>, transpose_checkpoint} : tensor<64x32xbf16>

// -----
// expected-error @below {{#kiln.shard: parts = 0 must be in [1, 1024]}}
kiln.weight @w {shard = #kiln.shard<dim = 0, parts = 0>} : tensor<64x32xbf16>

// -----
// Segments: one rank's sizes, which sum to the weight's size along the shard dimension.
// expected-error @below {{'shard' segments sum to 40, but dimension 0 of 'tensor<64x32xbf16>' is 64}}
kiln.weight @w {shard = #kiln.shard<dim = 0, parts = 2, segments = [16, 16, 8]>} : tensor<64x32xbf16>

// -----
// expected-error @below {{#kiln.shard: segment size 0 must be >= 1}}
kiln.weight @w {shard = #kiln.shard<dim = 0, parts = 2, segments = [64, 0]>} : tensor<64x32xbf16>

// -----
// expected-error @below {{#kiln.shard: 'segments' lists at least one size}}
kiln.weight @w {shard = #kiln.shard<dim = 0, parts = 2, segments = []>} : tensor<64x32xbf16>

// -----
// A stack's dimension 0 indexes its tensors (the experts): each of them is sharded.
// expected-error @below {{stacked weight 'e.*.w' is sharded along a dimension of each stacked tensor ('shard' dimension >= 1; dimension 0 indexes '*')}}
kiln.weight @"e.*.w" {shard = #kiln.shard<dim = 0, parts = 2>} : tensor<8x64x32xbf16>

// -----
// kiln.all_gather: [rows, cols] -> [rows, ranks * cols] through [ranks, rows, cols] blocks.
func.func @f(%x: tensor<?x64xbf16>, %o: tensor<?x96xbf16>, %b: tensor<2x?x64xbf16>) {
  // expected-error @below {{dimension 1 of 'init' (96) must equal the ranks times the input's columns (128)}}
  %0:2 = kiln.all_gather ins(%x : tensor<?x64xbf16>) outs(%o, %b : tensor<?x96xbf16>, tensor<2x?x64xbf16>) -> tensor<?x96xbf16>, tensor<2x?x64xbf16>
  return
}

// -----
func.func @f(%x: tensor<?x64xbf16>, %o: tensor<?x128xbf16>, %b: tensor<?x?x64xbf16>) {
  // expected-error @below {{'blocks' must have a static rank count (dimension 0) of at least 1, got 'tensor<?x?x64xbf16>'}}
  %0:2 = kiln.all_gather ins(%x : tensor<?x64xbf16>) outs(%o, %b : tensor<?x128xbf16>, tensor<?x?x64xbf16>) -> tensor<?x128xbf16>, tensor<?x?x64xbf16>
  return
}

// -----
func.func @f(%x: tensor<4x64xbf16>, %o: tensor<4x128xbf16>, %b: tensor<2x3x64xbf16>) {
  // expected-error @below {{dimension 1 of 'blocks' (3) must equal the row count (4)}}
  %0:2 = kiln.all_gather ins(%x : tensor<4x64xbf16>) outs(%o, %b : tensor<4x128xbf16>, tensor<2x3x64xbf16>) -> tensor<4x128xbf16>, tensor<2x3x64xbf16>
  return
}

// -----
func.func @f(%x: tensor<4x64xbf16>, %o: tensor<4x128xbf16>, %b: tensor<2x4x32xbf16>) {
  // expected-error @below {{dimension 2 of 'blocks' (32) must equal the input's columns (64)}}
  %0:2 = kiln.all_gather ins(%x : tensor<4x64xbf16>) outs(%o, %b : tensor<4x128xbf16>, tensor<2x4x32xbf16>) -> tensor<4x128xbf16>, tensor<2x4x32xbf16>
  return
}

// -----
func.func @f(%x: tensor<4x64xf32>, %o: tensor<4x128xf32>, %b: tensor<2x4x64xf32>) {
  // expected-error @below {{'input' must have element type 'bf16', got 'f32'}}
  %0:2 = kiln.all_gather ins(%x : tensor<4x64xf32>) outs(%o, %b : tensor<4x128xf32>, tensor<2x4x64xf32>) -> tensor<4x128xf32>, tensor<2x4x64xf32>
  return
}

// -----
func.func @f(%x: tensor<4x64xbf16>, %o: tensor<4x128xbf16>, %b: tensor<8x64xbf16>) {
  // expected-error @below {{'blocks' must have rank 3, got 'tensor<8x64xbf16>'}}
  %0:2 = kiln.all_gather ins(%x : tensor<4x64xbf16>) outs(%o, %b : tensor<4x128xbf16>, tensor<8x64xbf16>) -> tensor<4x128xbf16>, tensor<8x64xbf16>
  return
}
