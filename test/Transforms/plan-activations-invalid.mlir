// RUN: kiln-opt %s -split-input-file --kiln-plan-activations -verify-diagnostics

// A size that does not come from the step's inputs or constants cannot be bounded.
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>} {
  func.func @kiln_model_forward(%ctx: !llvm.ptr {kiln.context}, %n: index) {
    // expected-error @below {{cannot bound dimension 0 of this 'memref<?x128xbf16>' buffer; dynamic sizes must come from the step's inputs (kiln.input) or constants}}
    %a = memref.alloc(%n) : memref<?x128xbf16>
    return
  }
}

// -----
// Arithmetic on a token count is not traced either.
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>} {
  func.func @kiln_model_forward(%ctx: !llvm.ptr {kiln.context}) {
    %ids = kiln.input token_ids : memref<?xi32>
    %c0 = arith.constant 0 : index
    %t = memref.dim %ids, %c0 : memref<?xi32>
    %t2 = arith.addi %t, %t : index
    // expected-error @below {{cannot bound dimension 1 of this 'memref<4x?xbf16>' buffer}}
    %a = memref.alloc(%t2) : memref<4x?xbf16>
    return
  }
}

// -----
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>} {
  func.func @kiln_model_forward(%ctx: !llvm.ptr {kiln.context}) {
    // expected-error @below {{stack buffers (memref.alloca) are not supported in a compiled step}}
    %a = memref.alloca() : memref<4x128xbf16>
    return
  }
}

// -----
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>} {
  // expected-error @below {{kiln-plan-activations needs straight-line code (one block)}}
  func.func @kiln_model_forward(%ctx: !llvm.ptr {kiln.context}) {
    cf.br ^next
  ^next:
    %a = memref.alloc() : memref<4x128xbf16>
    return
  }
}

// -----
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>} {
  func.func @kiln_model_forward(%ctx: !llvm.ptr {kiln.context}) {
    // expected-error @below {{activation buffers need the identity layout, got 'memref<4x128xbf16, strided<[256, 1]>>'}}
    %a = memref.alloc() : memref<4x128xbf16, strided<[256, 1]>>
    return
  }
}

// -----
module attributes {kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>} {
  func.func @kiln_model_forward(%ctx: !llvm.ptr {kiln.context}) {
    // expected-error @below {{the size of this 'memref<4294967296x4294967296xbf16>' buffer overflows 64 bits}}
    %a = memref.alloc() : memref<4294967296x4294967296xbf16>
    return
  }
}

// -----
// expected-error @below {{kiln-plan-activations needs a 'kiln.runtime' module attribute}}
module {
  func.func @kiln_model_forward(%ctx: !llvm.ptr {kiln.context}) {
    return
  }
}

// -----
// The device total (here the io region of 2^24-token steps alone) must fit the
// target's memory.
// expected-error @below {{the compiled model needs 234.00 MiB of device memory, more than the 1.00 MiB of 'tiny': io 192.00 MiB, workspace 34.00 MiB, cuda graphs 8.00 MiB, weights 0 B, caches 0 B, activations 0 B (steps of up to 16777216 tokens); lower max_step_tokens or max_batch}}
module attributes {kiln.target = #kiln.target<"tiny", sm = 90, sms = 1, memory = 1048576>, kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16, max_step_tokens = 16777216>} {
  func.func @kiln_model_forward(%ctx: !llvm.ptr {kiln.context}) {
    return
  }
}
