// One-shot bufferization of kiln ops: each op writes its result into the buffer of its
// `outs` operand (the tensor.empty becomes the allocation), kiln.weight_ref becomes a
// memref of the weight, and since kernels never read their output nothing is copied.
// RUN: kiln-opt %s -split-input-file --one-shot-bufferize="bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map" | FileCheck %s

// CHECK-LABEL: func.func @chain
// CHECK-SAME: (%[[IDS:[^:]*]]: memref<?xi32>, %[[POS:[^:]*]]: memref<?xi32>, %[[ROWS:[^:]*]]: memref<?xi32>) -> memref<?x512xbf16>
// CHECK-NOT: memref.copy
// CHECK: %[[T:.*]] = memref.dim %[[IDS]], %{{.*}} : memref<?xi32>
// CHECK: %[[R:.*]] = memref.dim %[[ROWS]], %{{.*}} : memref<?xi32>
// CHECK: %[[WE:.*]] = kiln.weight_ref @embed : memref<512x128xbf16>
// CHECK: %[[H:.*]] = memref.alloc(%[[T]]) {{.*}}: memref<?x128xbf16>
// CHECK: kiln.embedding ins(%[[IDS]], %[[WE]] : memref<?xi32>, memref<512x128xbf16>) outs(%[[H]] : memref<?x128xbf16>){{$}}
// CHECK: %[[WN:.*]] = kiln.weight_ref @norm : memref<128xbf16>
// CHECK: %[[N:.*]] = memref.alloc(%[[T]]) {{.*}}: memref<?x128xbf16>
// CHECK: kiln.rms_norm ins(%[[H]], %[[WN]] : memref<?x128xbf16>, memref<128xbf16>) outs(%[[N]] : memref<?x128xbf16>)
// CHECK: %[[Q:.*]] = memref.alloc(%[[T]]) {{.*}}: memref<?x128xbf16>
// CHECK: kiln.linear ins(%[[N]], %{{[^ ]*}} : memref<?x128xbf16>, memref<128x128xbf16>) bias(%{{[^ ]*}} : memref<128xbf16>) outs(%[[Q]] : memref<?x128xbf16>){{$}}
// Views of a buffer stay views of it.
// CHECK: %[[Q3:.*]] = memref.expand_shape %[[Q]] {{\[\[}}0], [1, 2]] output_shape [%[[T]], 2, 64] : memref<?x128xbf16> into memref<?x2x64xbf16>
// CHECK: %[[QR:.*]] = memref.alloc(%[[T]]) {{.*}}: memref<?x2x64xbf16>
// CHECK: kiln.rope ins(%[[Q3]], %[[POS]] : memref<?x2x64xbf16>, memref<?xi32>) outs(%[[QR]] : memref<?x2x64xbf16>)
// CHECK: %[[QF:.*]] = memref.collapse_shape %[[QR]] {{\[\[}}0], [1, 2]] : memref<?x2x64xbf16> into memref<?x128xbf16>
// CHECK: %[[S:.*]] = memref.alloc(%[[T]]) {{.*}}: memref<?x128xbf16>
// CHECK: kiln.add ins(%[[H]], %[[QF]] : memref<?x128xbf16>, memref<?x128xbf16>) outs(%[[S]] : memref<?x128xbf16>)
// CHECK: %[[G:.*]] = memref.alloc(%[[T]]) {{.*}}: memref<?x128xbf16>
// CHECK: kiln.swiglu ins(%[[S]], %[[N]] : memref<?x128xbf16>, memref<?x128xbf16>) outs(%[[G]] : memref<?x128xbf16>)
// CHECK: %[[LAST:.*]] = memref.alloc(%[[R]]) {{.*}}: memref<?x128xbf16>
// CHECK: kiln.gather_rows ins(%[[G]], %[[ROWS]] : memref<?x128xbf16>, memref<?xi32>) outs(%[[LAST]] : memref<?x128xbf16>)
// CHECK: %[[LOGITS:.*]] = memref.alloc(%[[R]]) {{.*}}: memref<?x512xbf16>
// CHECK: kiln.linear ins(%[[LAST]], %[[WE]] : memref<?x128xbf16>, memref<512x128xbf16>) outs(%[[LOGITS]] : memref<?x512xbf16>)
// CHECK-NOT: memref.copy
// CHECK-NOT: bufferization.
// CHECK: return %[[LOGITS]] : memref<?x512xbf16>
module {
  kiln.weight @embed : tensor<512x128xbf16>
  kiln.weight @norm : tensor<128xbf16>
  kiln.weight @wq : tensor<128x128xbf16>
  kiln.weight @bq : tensor<128xbf16>
  func.func @chain(%ids: tensor<?xi32>, %pos: tensor<?xi32>, %rows: tensor<?xi32>) -> tensor<?x512xbf16> {
    %c0 = arith.constant 0 : index
    %t = tensor.dim %ids, %c0 : tensor<?xi32>
    %r = tensor.dim %rows, %c0 : tensor<?xi32>
    %we = kiln.weight_ref @embed : tensor<512x128xbf16>
    %e0 = tensor.empty(%t) : tensor<?x128xbf16>
    %h = kiln.embedding ins(%ids, %we : tensor<?xi32>, tensor<512x128xbf16>) outs(%e0 : tensor<?x128xbf16>) -> tensor<?x128xbf16>
    %wn = kiln.weight_ref @norm : tensor<128xbf16>
    %e1 = tensor.empty(%t) : tensor<?x128xbf16>
    %n = kiln.rms_norm ins(%h, %wn : tensor<?x128xbf16>, tensor<128xbf16>) outs(%e1 : tensor<?x128xbf16>) {epsilon = 1.0e-5 : f32} -> tensor<?x128xbf16>
    %wq = kiln.weight_ref @wq : tensor<128x128xbf16>
    %bq = kiln.weight_ref @bq : tensor<128xbf16>
    %e2 = tensor.empty(%t) : tensor<?x128xbf16>
    %q = kiln.linear ins(%n, %wq : tensor<?x128xbf16>, tensor<128x128xbf16>) bias(%bq : tensor<128xbf16>) outs(%e2 : tensor<?x128xbf16>) -> tensor<?x128xbf16>
    %q3 = tensor.expand_shape %q [[0], [1, 2]] output_shape [%t, 2, 64] : tensor<?x128xbf16> into tensor<?x2x64xbf16>
    %e3 = tensor.empty(%t) : tensor<?x2x64xbf16>
    %qr = kiln.rope ins(%q3, %pos : tensor<?x2x64xbf16>, tensor<?xi32>) outs(%e3 : tensor<?x2x64xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>} -> tensor<?x2x64xbf16>
    %qf = tensor.collapse_shape %qr [[0], [1, 2]] : tensor<?x2x64xbf16> into tensor<?x128xbf16>
    %e4 = tensor.empty(%t) : tensor<?x128xbf16>
    %s = kiln.add ins(%h, %qf : tensor<?x128xbf16>, tensor<?x128xbf16>) outs(%e4 : tensor<?x128xbf16>) -> tensor<?x128xbf16>
    %e5 = tensor.empty(%t) : tensor<?x128xbf16>
    %g = kiln.swiglu ins(%s, %n : tensor<?x128xbf16>, tensor<?x128xbf16>) outs(%e5 : tensor<?x128xbf16>) -> tensor<?x128xbf16>
    %e6 = tensor.empty(%r) : tensor<?x128xbf16>
    %last = kiln.gather_rows ins(%g, %rows : tensor<?x128xbf16>, tensor<?xi32>) outs(%e6 : tensor<?x128xbf16>) -> tensor<?x128xbf16>
    %e7 = tensor.empty(%r) : tensor<?x512xbf16>
    %logits = kiln.linear ins(%last, %we : tensor<?x128xbf16>, tensor<512x128xbf16>) outs(%e7 : tensor<?x512xbf16>) -> tensor<?x512xbf16>
    return %logits : tensor<?x512xbf16>
  }
}

// -----
// A cached op bufferizes the same way; its cache resource is untouched.
// CHECK-LABEL: func.func @cached
// CHECK-SAME: (%[[Q:[^:]*]]: memref<?x2x64xbf16>, %[[K:[^:]*]]: memref<?x1x64xbf16>)
// CHECK: %[[KV:.*]] = kiln.cache_resource layer 0
// CHECK: %[[O:.*]] = memref.alloc(%{{.*}}) {{.*}}: memref<?x2x64xbf16>
// CHECK: kiln.cached_attention layer 0 %[[Q]], %[[K]], %[[K]] kv(%[[KV]] : !kiln.cache<kv>) outs(%[[O]] : memref<?x2x64xbf16>) {{{.*}}} : memref<?x2x64xbf16>, memref<?x1x64xbf16>, memref<?x1x64xbf16>{{$}}
// CHECK-NOT: memref.copy
// CHECK: return %[[O]] : memref<?x2x64xbf16>
module {
  func.func @cached(%q: tensor<?x2x64xbf16>, %k: tensor<?x1x64xbf16>) -> tensor<?x2x64xbf16> {
    %kv = kiln.cache_resource layer 0 unit [2, 1, 64] of bf16 : !kiln.cache<kv>
    %c0 = arith.constant 0 : index
    %t = tensor.dim %q, %c0 : tensor<?x2x64xbf16>
    %e = tensor.empty(%t) : tensor<?x2x64xbf16>
    %a = kiln.cached_attention layer 0 %q, %k, %k kv(%kv : !kiln.cache<kv>) outs(%e : tensor<?x2x64xbf16>)
      {num_heads = 2, num_kv_heads = 1, head_dim = 64} : tensor<?x2x64xbf16>, tensor<?x1x64xbf16>, tensor<?x1x64xbf16> -> tensor<?x2x64xbf16>
    return %a : tensor<?x2x64xbf16>
  }
}

// -----
// An init whose value is still needed (an input of the same op, or read later) is not
// written in place: the op gets a new buffer, and as kernels never read their output
// there is still no copy.
// CHECK-LABEL: func.func @init_still_needed
// CHECK-SAME: (%[[X:[^:]*]]: memref<?x128xbf16>, %[[W:[^:]*]]: memref<128x128xbf16>)
// CHECK: %[[L:.*]] = memref.alloc(%{{.*}}) {{.*}}: memref<?x128xbf16>
// CHECK: kiln.linear ins(%[[X]], %[[W]] : memref<?x128xbf16>, memref<128x128xbf16>) outs(%[[L]] : memref<?x128xbf16>)
// CHECK: %[[S:.*]] = memref.alloc(%{{.*}}) {{.*}}: memref<?x128xbf16>
// CHECK: kiln.add ins(%[[L]], %[[X]] : memref<?x128xbf16>, memref<?x128xbf16>) outs(%[[S]] : memref<?x128xbf16>)
// CHECK-NOT: memref.copy
// CHECK: return %[[S]]
module {
  func.func @init_still_needed(%x: tensor<?x128xbf16>, %w: tensor<128x128xbf16>) -> tensor<?x128xbf16> {
    %l = kiln.linear ins(%x, %w : tensor<?x128xbf16>, tensor<128x128xbf16>) outs(%x : tensor<?x128xbf16>) -> tensor<?x128xbf16>
    %s = kiln.add ins(%l, %x : tensor<?x128xbf16>, tensor<?x128xbf16>) outs(%x : tensor<?x128xbf16>) -> tensor<?x128xbf16>
    return %s : tensor<?x128xbf16>
  }
}
