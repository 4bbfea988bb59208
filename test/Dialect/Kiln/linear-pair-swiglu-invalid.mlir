// Every verifier diagnostic of kiln.linear_pair_swiglu.
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

func.func @f(%x: memref<?x64xbf16>, %wg: memref<128x64xbf16>, %wu: memref<64x64xbf16>,
             %g: memref<?x128xbf16>, %u: memref<?x128xbf16>, %h: memref<?x128xbf16>) {
  // expected-error @below {{weight0 and weight1 differ in shape: a pair is one GEMM shape}}
  kiln.linear_pair_swiglu ins(%x, %wg, %wu : memref<?x64xbf16>, memref<128x64xbf16>, memref<64x64xbf16>) outs(%g, %u, %h : memref<?x128xbf16>, memref<?x128xbf16>, memref<?x128xbf16>)
  return
}

// -----

func.func @f(%x: memref<?x64xbf16>, %wg: memref<128x64xbf16>, %wu: memref<128x64xbf16>,
             %g: memref<?x128xf32>, %u: memref<?x128xbf16>, %h: memref<?x128xbf16>) {
  // expected-error @below {{'gate' must have element type 'bf16', got 'f32'}}
  kiln.linear_pair_swiglu ins(%x, %wg, %wu : memref<?x64xbf16>, memref<128x64xbf16>, memref<128x64xbf16>) outs(%g, %u, %h : memref<?x128xf32>, memref<?x128xbf16>, memref<?x128xbf16>)
  return
}

// -----

func.func @f(%x: memref<?x64xbf16>, %wg: memref<128x64xbf16>, %wu: memref<128x64xbf16>,
             %g: memref<?x128xbf16>, %u: memref<?x128xbf16>, %h: memref<?x4x32xbf16>) {
  // expected-error @below {{'init' must have rank 2, got 'memref<?x4x32xbf16>'}}
  kiln.linear_pair_swiglu ins(%x, %wg, %wu : memref<?x64xbf16>, memref<128x64xbf16>, memref<128x64xbf16>) outs(%g, %u, %h : memref<?x128xbf16>, memref<?x128xbf16>, memref<?x4x32xbf16>)
  return
}

// -----

func.func @f(%x: memref<?x32xbf16>, %wg: memref<128x64xbf16>, %wu: memref<128x64xbf16>,
             %g: memref<?x128xbf16>, %u: memref<?x128xbf16>, %h: memref<?x128xbf16>) {
  // expected-error @below {{dimension 1 of 'weight0' (64) must equal the input features (32)}}
  kiln.linear_pair_swiglu ins(%x, %wg, %wu : memref<?x32xbf16>, memref<128x64xbf16>, memref<128x64xbf16>) outs(%g, %u, %h : memref<?x128xbf16>, memref<?x128xbf16>, memref<?x128xbf16>)
  return
}

// -----

func.func @f(%x: memref<4x64xbf16>, %wg: memref<128x64xbf16>, %wu: memref<128x64xbf16>,
             %g: memref<4x128xbf16>, %u: memref<5x128xbf16>, %h: memref<4x128xbf16>) {
  // expected-error @below {{dimension 0 of 'up' (5) must equal the rows (4)}}
  kiln.linear_pair_swiglu ins(%x, %wg, %wu : memref<4x64xbf16>, memref<128x64xbf16>, memref<128x64xbf16>) outs(%g, %u, %h : memref<4x128xbf16>, memref<5x128xbf16>, memref<4x128xbf16>)
  return
}

// -----

func.func @f(%x: memref<?x64xbf16>, %wg: memref<128x64xbf16>, %wu: memref<128x64xbf16>,
             %g: memref<?x128xbf16>, %u: memref<?x128xbf16>, %h: memref<?x64xbf16>) {
  // expected-error @below {{dimension 1 of 'init' (64) must equal the output features (128)}}
  kiln.linear_pair_swiglu ins(%x, %wg, %wu : memref<?x64xbf16>, memref<128x64xbf16>, memref<128x64xbf16>) outs(%g, %u, %h : memref<?x128xbf16>, memref<?x128xbf16>, memref<?x64xbf16>)
  return
}
