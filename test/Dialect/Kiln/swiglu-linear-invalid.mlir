// Every verifier diagnostic of kiln.swiglu_linear.
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

func.func @f(%gate: memref<?x128xbf16>, %up: memref<?x64xbf16>, %w: memref<32x128xbf16>,
             %h: memref<?x128xbf16>, %out: memref<?x32xbf16>) {
  // expected-error @below {{up 'memref<?x64xbf16>' differs from gate 'memref<?x128xbf16>': one [rows, features] shape}}
  kiln.swiglu_linear ins(%gate, %up, %w : memref<?x128xbf16>, memref<?x64xbf16>, memref<32x128xbf16>) outs(%h, %out : memref<?x128xbf16>, memref<?x32xbf16>)
  return
}

// -----

func.func @f(%gate: memref<?x128xbf16>, %up: memref<?x128xbf16>, %w: memref<32x128xbf16>,
             %h: memref<4x128xbf16>, %out: memref<?x32xbf16>) {
  // expected-error @below {{scratch 'memref<4x128xbf16>' differs from gate 'memref<?x128xbf16>': one [rows, features] shape}}
  kiln.swiglu_linear ins(%gate, %up, %w : memref<?x128xbf16>, memref<?x128xbf16>, memref<32x128xbf16>) outs(%h, %out : memref<4x128xbf16>, memref<?x32xbf16>)
  return
}

// -----

func.func @f(%gate: memref<?x128xf32>, %up: memref<?x128xbf16>, %w: memref<32x128xbf16>,
             %h: memref<?x128xbf16>, %out: memref<?x32xbf16>) {
  // expected-error @below {{'gate' must have element type 'bf16', got 'f32'}}
  kiln.swiglu_linear ins(%gate, %up, %w : memref<?x128xf32>, memref<?x128xbf16>, memref<32x128xbf16>) outs(%h, %out : memref<?x128xbf16>, memref<?x32xbf16>)
  return
}

// -----

func.func @f(%gate: memref<?x128xbf16>, %up: memref<?x128xbf16>, %w: memref<32x64xbf16>,
             %h: memref<?x128xbf16>, %out: memref<?x32xbf16>) {
  // expected-error @below {{dimension 1 of 'weight' (64) must equal the gate's features (128)}}
  kiln.swiglu_linear ins(%gate, %up, %w : memref<?x128xbf16>, memref<?x128xbf16>, memref<32x64xbf16>) outs(%h, %out : memref<?x128xbf16>, memref<?x32xbf16>)
  return
}

// -----

func.func @f(%gate: memref<4x128xbf16>, %up: memref<4x128xbf16>, %w: memref<32x128xbf16>,
             %h: memref<4x128xbf16>, %out: memref<5x32xbf16>) {
  // expected-error @below {{dimension 0 of 'init' (5) must equal the rows (4)}}
  kiln.swiglu_linear ins(%gate, %up, %w : memref<4x128xbf16>, memref<4x128xbf16>, memref<32x128xbf16>) outs(%h, %out : memref<4x128xbf16>, memref<5x32xbf16>)
  return
}

// -----

func.func @f(%gate: memref<?x128xbf16>, %up: memref<?x128xbf16>, %w: memref<32x128xbf16>,
             %h: memref<?x128xbf16>, %out: memref<?x16xbf16>) {
  // expected-error @below {{dimension 1 of 'init' (16) must equal the output features (32)}}
  kiln.swiglu_linear ins(%gate, %up, %w : memref<?x128xbf16>, memref<?x128xbf16>, memref<32x128xbf16>) outs(%h, %out : memref<?x128xbf16>, memref<?x16xbf16>)
  return
}

// -----

func.func @f(%gate: memref<?x4x32xbf16>, %up: memref<?x4x32xbf16>, %w: memref<32x128xbf16>,
             %h: memref<?x4x32xbf16>, %out: memref<?x32xbf16>) {
  // expected-error @below {{'gate' must have rank 2, got 'memref<?x4x32xbf16>'}}
  kiln.swiglu_linear ins(%gate, %up, %w : memref<?x4x32xbf16>, memref<?x4x32xbf16>, memref<32x128xbf16>) outs(%h, %out : memref<?x4x32xbf16>, memref<?x32xbf16>)
  return
}
