// Every verifier diagnostic of kiln.rope_pair.
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

func.func @f(%q: memref<?x8x64xbf16>, %k: memref<?x2x32xbf16>, %pos: memref<?xi32>,
             %qo: memref<?x8x64xbf16>, %ko: memref<?x2x32xbf16>) {
  // expected-error @below {{dimension 2 of 'input1' (32) must equal the head dimension (64)}}
  kiln.rope_pair ins(%q, %k, %pos : memref<?x8x64xbf16>, memref<?x2x32xbf16>, memref<?xi32>) outs(%qo, %ko : memref<?x8x64xbf16>, memref<?x2x32xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>}
  return
}

// -----

func.func @f(%q: memref<4x8x64xbf16>, %k: memref<5x2x64xbf16>, %pos: memref<4xi32>,
             %qo: memref<4x8x64xbf16>, %ko: memref<5x2x64xbf16>) {
  // expected-error @below {{dimension 0 of 'input1' (5) must equal the token count (4)}}
  kiln.rope_pair ins(%q, %k, %pos : memref<4x8x64xbf16>, memref<5x2x64xbf16>, memref<4xi32>) outs(%qo, %ko : memref<4x8x64xbf16>, memref<5x2x64xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>}
  return
}

// -----

func.func @f(%q: memref<?x8x64xbf16>, %k: memref<?x2x64xbf16>, %pos: memref<?xi64>,
             %qo: memref<?x8x64xbf16>, %ko: memref<?x2x64xbf16>) {
  // expected-error @below {{'positions' must have element type 'i32'}}
  kiln.rope_pair ins(%q, %k, %pos : memref<?x8x64xbf16>, memref<?x2x64xbf16>, memref<?xi64>) outs(%qo, %ko : memref<?x8x64xbf16>, memref<?x2x64xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>}
  return
}

// -----

func.func @f(%q: memref<?x8x64xf32>, %k: memref<?x2x64xbf16>, %pos: memref<?xi32>,
             %qo: memref<?x8x64xf32>, %ko: memref<?x2x64xbf16>) {
  // expected-error @below {{'input0' must have element type 'bf16'}}
  kiln.rope_pair ins(%q, %k, %pos : memref<?x8x64xf32>, memref<?x2x64xbf16>, memref<?xi32>) outs(%qo, %ko : memref<?x8x64xf32>, memref<?x2x64xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>}
  return
}

// -----

func.func @f(%q: memref<?x64xbf16>, %k: memref<?x2x64xbf16>, %pos: memref<?xi32>,
             %qo: memref<?x64xbf16>, %ko: memref<?x2x64xbf16>) {
  // expected-error @below {{'input0' must have rank 3, got 'memref<?x64xbf16>'}}
  kiln.rope_pair ins(%q, %k, %pos : memref<?x64xbf16>, memref<?x2x64xbf16>, memref<?xi32>) outs(%qo, %ko : memref<?x64xbf16>, memref<?x2x64xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>}
  return
}

// -----

func.func @f(%q: memref<?x8x64xbf16>, %k: memref<?x2x64xbf16>, %pos: memref<?xi32>,
             %qo: memref<?x8x64xbf16>, %ko: memref<?x4x64xbf16>) {
  // expected-error @below {{'input1' 'memref<?x2x64xbf16>' and 'init1' 'memref<?x4x64xbf16>' must have the same shape}}
  kiln.rope_pair ins(%q, %k, %pos : memref<?x8x64xbf16>, memref<?x2x64xbf16>, memref<?xi32>) outs(%qo, %ko : memref<?x8x64xbf16>, memref<?x4x64xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>}
  return
}

// -----

func.func @f(%q: memref<?x8x66xbf16>, %k: memref<?x2x66xbf16>, %pos: memref<?xi32>,
             %qo: memref<?x8x66xbf16>, %ko: memref<?x2x66xbf16>) {
  // expected-error @below {{'rotary_dim' 3 must be even, at least 2 and at most the head dimension 66}}
  kiln.rope_pair ins(%q, %k, %pos : memref<?x8x66xbf16>, memref<?x2x66xbf16>, memref<?xi32>) outs(%qo, %ko : memref<?x8x66xbf16>, memref<?x2x66xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>, rotary_dim = 3 : i64}
  return
}

// -----

func.func @f(%q: memref<?x8x65xbf16>, %k: memref<?x2x65xbf16>, %pos: memref<?xi32>,
             %qo: memref<?x8x65xbf16>, %ko: memref<?x2x65xbf16>) {
  // expected-error @below {{head dimension 65 must be even}}
  kiln.rope_pair ins(%q, %k, %pos : memref<?x8x65xbf16>, memref<?x2x65xbf16>, memref<?xi32>) outs(%qo, %ko : memref<?x8x65xbf16>, memref<?x2x65xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>}
  return
}
