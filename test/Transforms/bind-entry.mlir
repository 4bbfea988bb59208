// kiln-bind-entry turns the bufferized model function into the runtime's entry point
// `kiln_model_forward(%ctx: !llvm.ptr {kiln.context})` (docs/abi.md): its marked
// arguments become kiln.input ops, its marked results are handed over with kiln.output.
// RUN: kiln-opt %s -split-input-file --kiln-bind-entry | FileCheck %s

// CHECK-LABEL: func.func @kiln_model_forward
// CHECK-SAME: (%{{[^:]*}}: !llvm.ptr {kiln.context}) attributes {kiln.entry} {
// CHECK-NEXT: %[[IDS:.*]] = kiln.input token_ids : memref<?xi32>
// CHECK-NEXT: %[[POS:.*]] = kiln.input positions : memref<?xi32>
// CHECK-NEXT: %[[ROWS:.*]] = kiln.input logit_rows : memref<?xi32>
// CHECK: %[[T:.*]] = memref.dim %[[IDS]], %{{.*}} : memref<?xi32>
// CHECK: %[[R:.*]] = memref.dim %[[ROWS]], %{{.*}} : memref<?xi32>
// CHECK: %[[H:.*]] = memref.alloc(%[[T]]) : memref<?x8xbf16>
// CHECK: kiln.rope ins(%{{[^ ]*}}, %[[POS]] : memref<?x2x4xbf16>, memref<?xi32>)
// CHECK: %[[LOGITS:.*]] = memref.alloc(%[[R]]) : memref<?x8xbf16>
// CHECK: kiln.gather_rows ins(%[[H]], %[[ROWS]] : memref<?x8xbf16>, memref<?xi32>) outs(%[[LOGITS]] : memref<?x8xbf16>)
// CHECK-NEXT: kiln.output logits %[[LOGITS]] : memref<?x8xbf16>
// CHECK-NEXT: return{{$}}
// The other functions are not touched.
// CHECK-LABEL: func.func @helper(%{{[^:]*}}: memref<?xi32>) -> memref<?xi32>
module {
  func.func private @forward(%ids: memref<?xi32> {kiln.input = #kiln<input token_ids>},
                             %pos: memref<?xi32> {kiln.input = #kiln<input positions>},
                             %rows: memref<?xi32> {kiln.input = #kiln<input logit_rows>})
      -> (memref<?x8xbf16> {kiln.output = #kiln<output logits>}) attributes {kiln.entry} {
    %c0 = arith.constant 0 : index
    %t = memref.dim %ids, %c0 : memref<?xi32>
    %r = memref.dim %rows, %c0 : memref<?xi32>
    %h = memref.alloc(%t) : memref<?x8xbf16>
    %h3 = memref.expand_shape %h [[0], [1, 2]] output_shape [%t, 2, 4] : memref<?x8xbf16> into memref<?x2x4xbf16>
    %q = memref.alloc(%t) : memref<?x2x4xbf16>
    kiln.rope ins(%h3, %pos : memref<?x2x4xbf16>, memref<?xi32>) outs(%q : memref<?x2x4xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>}
    %logits = memref.alloc(%r) : memref<?x8xbf16>
    kiln.gather_rows ins(%h, %rows : memref<?x8xbf16>, memref<?xi32>) outs(%logits : memref<?x8xbf16>)
    return %logits : memref<?x8xbf16>
  }
  func.func @helper(%x: memref<?xi32>) -> memref<?xi32> {
    return %x : memref<?xi32>
  }
}

// -----
// The private model function becomes public; an input the step does not read still
// gets its kiln.input (the runtime always provides the three inputs it is marked with).
// CHECK-LABEL: func.func @kiln_model_forward
// CHECK-NEXT: kiln.input logit_rows : memref<?xi32>
// CHECK-NEXT: kiln.input token_ids : memref<?xi32>
// CHECK-NOT: kiln.input
// CHECK: kiln.output logits
module {
  func.func private @model(%rows: memref<?xi32> {kiln.input = #kiln<input logit_rows>},
                           %ids: memref<?xi32> {kiln.input = #kiln<input token_ids>})
      -> (memref<4x8xbf16> {kiln.output = #kiln<output logits>}) attributes {kiln.entry} {
    %logits = memref.alloc() : memref<4x8xbf16>
    return %logits : memref<4x8xbf16>
  }
}
