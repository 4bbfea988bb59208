// RUN: kiln-opt %s -split-input-file -kiln-plan-memory -verify-diagnostics

// expected-error @below {{kiln-plan-memory needs a 'kiln.runtime' module attribute, e.g. #kiln.runtime<max_batch = 64, max_seq_len = 8192, kv_dtype = bf16>}}
module attributes {kiln.target = #kiln.target<"h200">} {}

// -----
module attributes {kiln.target = #kiln.target<"h200">,
                   kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 512, kv_dtype = bf16, tp = 4>} {
  func.func @f() {
    // expected-error @below {{tp = 4 does not divide dimension 0 (6) of layer 0 ssm_state; choose a tp that divides it}}
    %0 = kiln.cache_resource layer 0 unit [6, 64, 128] of f32 shard 0 : !kiln.cache<ssm_state>
    return
  }
}

// -----
// Does not fit: the error names budget, total and the largest consumers, added up by
// kind and speculative-only status.
// Notes say what would fit, one limit changed at a time.
// expected-error @below {{memory plan does not fit on 'l4': needs 40.00 GiB, budget 19.79 GiB (21.99 GiB x 0.9); largest consumers: 2 x kv 40.00 GiB}}
// expected-note @below {{fits with max_batch 126 (at max_seq_len 20480)}}
// expected-note @below {{fits with max_seq_len 10112 (at max_batch 256)}}
module attributes {kiln.target = #kiln.target<"l4">,
                   kiln.runtime = #kiln.runtime<max_batch = 256, max_seq_len = 20480, kv_dtype = bf16>} {
  func.func @f() {
    %0 = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 : !kiln.cache<kv>
    %1 = kiln.cache_resource layer 1 unit [2, 8, 128] of bf16 : !kiln.cache<kv>
    return
  }
}

// -----
// expected-error @below {{model weights (93.13 GiB per rank) exceed the usable 71.26 GiB of 'h100' (79.18 GiB x 0.9); use more tensor-parallel ranks or a larger target}}
module attributes {kiln.target = #kiln.target<"h100">,
                   kiln.model = #kiln.model<name = "llama-70b", model_type = "llama", num_layers = 80, dtype = bf16, weight_bytes = 100000000000>,
                   kiln.runtime = #kiln.runtime<max_batch = 1, max_seq_len = 512, kv_dtype = bf16>} {
  func.func @f() {
    %0 = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 : !kiln.cache<kv>
    return
  }
}
