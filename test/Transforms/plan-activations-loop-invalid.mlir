// RUN: kiln-opt %s -split-input-file --kiln-plan-activations -verify-diagnostics
// Layer loops (scf.for marked kiln.layers) are planned once for every iteration; what
// the plan cannot keep in one place is refused.

// A loop that is not a layer loop is not straight-line code.
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>} {
  func.func @kiln_model_forward(%ctx: !llvm.ptr {kiln.context}) {
    %c0 = arith.constant 0 : index
    %c2 = arith.constant 2 : index
    %c1 = arith.constant 1 : index
    // expected-error @below {{kiln-plan-activations needs straight-line code (one block) and layer loops (scf.for marked kiln.layers) at the top}}
    scf.for %i = %c0 to %c2 step %c1 {
      %a = memref.alloc() : memref<4x128xbf16>
    }
    return
  }
}

// -----
// The carried value must start in a buffer of the plan.
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>} {
  func.func @kiln_model_forward(%ctx: !llvm.ptr {kiln.context}, %h0: memref<4x128xbf16>) {
    %c0 = arith.constant 0 : index
    %c2 = arith.constant 2 : index
    %c1 = arith.constant 1 : index
    // expected-error @below {{a value a layer loop carries must start in a buffer allocated before the loop and be yielded from a buffer allocated in its body}}
    %h = scf.for %i = %c0 to %c2 step %c1 iter_args(%x = %h0) -> (memref<4x128xbf16>) {
      %a = memref.alloc() : memref<4x128xbf16>
      kiln.add ins(%x, %x : memref<4x128xbf16>, memref<4x128xbf16>) outs(%a : memref<4x128xbf16>)
      scf.yield %a : memref<4x128xbf16>
    } {kiln.layers}
    return
  }
}

// -----
// The initial buffer must die at the loop: the loop overwrites it.
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>} {
  func.func @kiln_model_forward(%ctx: !llvm.ptr {kiln.context}) {
    %c0 = arith.constant 0 : index
    %c2 = arith.constant 2 : index
    %c1 = arith.constant 1 : index
    %h0 = memref.alloc() : memref<4x128xbf16>
    // expected-error @below {{the initial buffer of a layer loop's carried value is used after the loop starts}}
    %h = scf.for %i = %c0 to %c2 step %c1 iter_args(%x = %h0) -> (memref<4x128xbf16>) {
      %a = memref.alloc() : memref<4x128xbf16>
      kiln.add ins(%x, %x : memref<4x128xbf16>, memref<4x128xbf16>) outs(%a : memref<4x128xbf16>)
      scf.yield %a : memref<4x128xbf16>
    } {kiln.layers}
    %b = memref.alloc() : memref<4x128xbf16>
    kiln.add ins(%h0, %h : memref<4x128xbf16>, memref<4x128xbf16>) outs(%b : memref<4x128xbf16>)
    return
  }
}
