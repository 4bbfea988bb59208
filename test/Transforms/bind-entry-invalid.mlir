// RUN: kiln-opt %s -split-input-file --kiln-bind-entry -verify-diagnostics

// expected-error @below {{kiln-bind-entry needs exactly one function marked 'kiln.entry', found 0}}
module {
  func.func @forward(%ids: memref<?xi32>) {
    return
  }
}

// -----
// expected-error @below {{kiln-bind-entry needs exactly one function marked 'kiln.entry', found 2}}
module {
  func.func @a() attributes {kiln.entry} {
    return
  }
  func.func @b() attributes {kiln.entry} {
    return
  }
}

// -----
module {
  // expected-error @below {{the model function must be one block (straight-line code)}}
  func.func @forward(%ids: memref<?xi32> {kiln.input = #kiln<input token_ids>}) attributes {kiln.entry} {
    cf.br ^next
  ^next:
    return
  }
}

// -----
module {
  // expected-error @below {{'kiln_model_forward' is reserved for the entry point}}
  func.func private @kiln_model_forward()
  func.func @forward(%ids: memref<?xi32> {kiln.input = #kiln<input token_ids>}) attributes {kiln.entry} {
    return
  }
}

// -----
module {
  // expected-error @below {{argument 1 of the model function has no 'kiln.input' marker (token_ids, positions or logit_rows)}}
  func.func @forward(%ids: memref<?xi32> {kiln.input = #kiln<input token_ids>}, %extra: memref<?xi32>) attributes {kiln.entry} {
    return
  }
}

// -----
module {
  // expected-error @below {{argument 0 is not a buffer; run one-shot-bufferize first}}
  func.func @forward(%ids: tensor<?xi32> {kiln.input = #kiln<input token_ids>}) attributes {kiln.entry} {
    return
  }
}

// -----
module {
  // expected-error @below {{result 0 of the model function has no 'kiln.output' marker}}
  func.func @forward(%ids: memref<?xi32> {kiln.input = #kiln<input token_ids>}) -> memref<?xi32> attributes {kiln.entry} {
    return %ids : memref<?xi32>
  }
}

// -----
module {
  // expected-error @below {{result 0 is not a buffer; run one-shot-bufferize first}}
  func.func @forward() -> (tensor<4x8xbf16> {kiln.output = #kiln<output logits>}) attributes {kiln.entry} {
    %x = arith.constant dense<0.0> : tensor<4x8xbf16>
    return %x : tensor<4x8xbf16>
  }
}
