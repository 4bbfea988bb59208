// RUN: kiln-opt %s -split-input-file | kiln-opt -split-input-file | FileCheck %s
// RUN: kiln-opt %s -split-input-file --mlir-print-op-generic | kiln-opt -split-input-file | FileCheck %s
// The ops an MTP module runs after the target (docs/mtp.md): kiln.argmax of the logit
// rows, kiln.next_tokens (each token's next token, the predictions at the logit rows),
// kiln.concat of two row blocks, and the draft_tokens output, on tensors and buffers.

// CHECK-LABEL: func.func @mtp_inputs
// CHECK: %[[PICKS:.*]] = kiln.argmax ins(%{{[^ ]*}} : tensor<?x512xbf16>) outs(%{{[^ ]*}} : tensor<?x1xi32>) -> tensor<?x1xi32>
// CHECK: kiln.next_tokens ins(%{{[^,]*}}, %[[PICKS]], %{{[^ ]*}} : tensor<?xi32>, tensor<?x1xi32>, tensor<?xi32>) outs(%{{[^ ]*}} : tensor<?xi32>) -> tensor<?xi32>
// CHECK: kiln.concat ins(%{{[^,]*}}, %{{[^ ]*}} : tensor<?x64xbf16>, tensor<?x64xbf16>) outs(%{{[^ ]*}} : tensor<?x128xbf16>) -> tensor<?x128xbf16>
func.func @mtp_inputs(%ids: tensor<?xi32>, %rows: tensor<?xi32>, %logits: tensor<?x512xbf16>,
                      %a: tensor<?x64xbf16>, %b: tensor<?x64xbf16>) -> (tensor<?xi32>, tensor<?x128xbf16>) {
  %c0 = arith.constant 0 : index
  %r = tensor.dim %rows, %c0 : tensor<?xi32>
  %t = tensor.dim %ids, %c0 : tensor<?xi32>
  %pi = tensor.empty(%r) : tensor<?x1xi32>
  %picks = kiln.argmax ins(%logits : tensor<?x512xbf16>) outs(%pi : tensor<?x1xi32>) -> tensor<?x1xi32>
  %ni = tensor.empty(%t) : tensor<?xi32>
  %next = kiln.next_tokens ins(%ids, %picks, %rows : tensor<?xi32>, tensor<?x1xi32>, tensor<?xi32>) outs(%ni : tensor<?xi32>) -> tensor<?xi32>
  %ci = tensor.empty(%t) : tensor<?x128xbf16>
  %both = kiln.concat ins(%a, %b : tensor<?x64xbf16>, tensor<?x64xbf16>) outs(%ci : tensor<?x128xbf16>) -> tensor<?x128xbf16>
  return %next, %both : tensor<?xi32>, tensor<?x128xbf16>
}

// -----
// CHECK-LABEL: func.func @mtp_buffers
// CHECK: kiln.argmax ins(%{{[^ ]*}} : memref<?x512xbf16>) outs(%[[D:[^ ]*]] : memref<?x1xi32>){{$}}
// CHECK: kiln.output draft_tokens %[[D]] : memref<?x1xi32>
func.func @mtp_buffers(%logits: memref<?x512xbf16>, %d: memref<?x1xi32>) {
  kiln.argmax ins(%logits : memref<?x512xbf16>) outs(%d : memref<?x1xi32>)
  kiln.output draft_tokens %d : memref<?x1xi32>
  return
}
