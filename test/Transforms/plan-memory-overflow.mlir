// Sizes that overflow 63 bits are errors naming the resource and the factors, never a
// wrapped (small) plan that "fits" (issue 13's fuzzing findings).
// RUN: kiln-opt %s -split-input-file -kiln-plan-memory -verify-diagnostics

// A unit of 2^62 elements of 4 bytes: the per-token bytes alone overflow.
module attributes {kiln.target = #kiln.target<"h200">,
                   kiln.runtime = #kiln.runtime<max_batch = 1, max_seq_len = 64, kv_dtype = bf16>} {
  func.func @unit() {
    // expected-error @+1 {{the bytes of one unit of layer 0 kv (unit [2 x 2147483648 x 1073741824] of 4 bytes x 64 tokens per sequence x 1 sequences (max_batch)) overflow 63 bits}}
    %0 = kiln.cache_resource layer 0 unit [2, 2147483648, 1073741824] of f32 : !kiln.cache<kv>
    return
  }
}

// -----

// A modest unit times 2^31 tokens x 2^21 sequences: the resource overflows.
module attributes {kiln.target = #kiln.target<"h200">,
                   kiln.runtime = #kiln.runtime<max_batch = 2097152, max_seq_len = 2147483648, kv_dtype = bf16>} {
  func.func @tokens() {
    // expected-error @+1 {{the bytes of layer 0 kv (unit [2 x 8 x 128] of 2 bytes x 2147483648 tokens per sequence x 2097152 sequences (max_batch)) overflow 63 bits; reduce max_batch or max_seq_len}}
    %0 = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 : !kiln.cache<kv>
    return
  }
}

// -----

// Each resource fits; their sum does not.
module attributes {kiln.target = #kiln.target<"h200">,
                   kiln.runtime = #kiln.runtime<max_batch = 1, max_seq_len = 64, kv_dtype = bf16>} {
  func.func @total() {
    %0 = kiln.cache_resource layer 0 unit [2147483648, 1073741824] of bf16 : !kiln.cache<ssm_state>
    // expected-error @+1 {{the cache plan's total overflows 63 bits at layer 1 ssm_state}}
    %1 = kiln.cache_resource layer 1 unit [2147483648, 1073741824] of bf16 : !kiln.cache<ssm_state>
    return
  }
}
