// Every verifier diagnostic of kiln.linear_pair.
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

func.func @f(%x: memref<?x64xbf16>, %w0: memref<32x64xbf16>, %w1: memref<16x64xbf16>,
             %o0: memref<?x32xbf16>, %o1: memref<?x32xbf16>) {
  // expected-error @below {{weight0 and weight1 differ in shape: a pair is one GEMM shape}}
  kiln.linear_pair ins(%x, %w0, %w1 : memref<?x64xbf16>, memref<32x64xbf16>, memref<16x64xbf16>) outs(%o0, %o1 : memref<?x32xbf16>, memref<?x32xbf16>)
  return
}

// -----

func.func @f(%x: memref<?x64xf32>, %w0: memref<32x64xbf16>, %w1: memref<32x64xbf16>,
             %o0: memref<?x32xbf16>, %o1: memref<?x32xbf16>) {
  // expected-error @below {{'input' must have element type 'bf16'}}
  kiln.linear_pair ins(%x, %w0, %w1 : memref<?x64xf32>, memref<32x64xbf16>, memref<32x64xbf16>) outs(%o0, %o1 : memref<?x32xbf16>, memref<?x32xbf16>)
  return
}

// -----

func.func @f(%x: memref<?x4x16xbf16>, %w0: memref<32x64xbf16>, %w1: memref<32x64xbf16>,
             %o0: memref<?x32xbf16>, %o1: memref<?x32xbf16>) {
  // expected-error @below {{'input' must have rank 2, got 'memref<?x4x16xbf16>'}}
  kiln.linear_pair ins(%x, %w0, %w1 : memref<?x4x16xbf16>, memref<32x64xbf16>, memref<32x64xbf16>) outs(%o0, %o1 : memref<?x32xbf16>, memref<?x32xbf16>)
  return
}

// -----

func.func @f(%x: memref<?x48xbf16>, %w0: memref<32x64xbf16>, %w1: memref<32x64xbf16>,
             %o0: memref<?x32xbf16>, %o1: memref<?x32xbf16>) {
  // expected-error @below {{dimension 1 of 'weight0' (64) must equal the input features (48)}}
  kiln.linear_pair ins(%x, %w0, %w1 : memref<?x48xbf16>, memref<32x64xbf16>, memref<32x64xbf16>) outs(%o0, %o1 : memref<?x32xbf16>, memref<?x32xbf16>)
  return
}

// -----

func.func @f(%x: memref<?x64xbf16>, %w0: memref<32x64xbf16>, %w1: memref<32x64xbf16>,
             %o0: memref<?x32xbf16>, %o1: memref<?x16xbf16>) {
  // expected-error @below {{dimension 1 of 'init1' (16) must equal the output features (32)}}
  kiln.linear_pair ins(%x, %w0, %w1 : memref<?x64xbf16>, memref<32x64xbf16>, memref<32x64xbf16>) outs(%o0, %o1 : memref<?x32xbf16>, memref<?x16xbf16>)
  return
}

// -----

func.func @f(%x: memref<8x64xbf16>, %w0: memref<32x64xbf16>, %w1: memref<32x64xbf16>,
             %o0: memref<8x32xbf16>, %o1: memref<4x32xbf16>) {
  // expected-error @below {{dimension 0 of 'init1' (4) must equal the rows (8)}}
  kiln.linear_pair ins(%x, %w0, %w1 : memref<8x64xbf16>, memref<32x64xbf16>, memref<32x64xbf16>) outs(%o0, %o1 : memref<8x32xbf16>, memref<4x32xbf16>)
  return
}
