// convert-kiln-to-llvm: kiln.buffer_from_pointer becomes a contiguous memref descriptor
// over its pointer, everything else goes to the LLVM dialect with upstream patterns,
// and Kiln's markers are dropped.
// RUN: kiln-opt %s -split-input-file --convert-kiln-to-llvm -verify-diagnostics | FileCheck %s

// CHECK-LABEL: llvm.func @kiln_model_forward
// CHECK-SAME: (%[[CTX:[^:]*]]: !llvm.ptr) {
// CHECK: %[[THREE:.*]] = llvm.mlir.constant(3 : index) : i64
// CHECK: %[[BASE:.*]] = llvm.call @kiln_rt_activations(%[[CTX]]) : (!llvm.ptr) -> !llvm.ptr
// The descriptor of memref<?x4x8xbf16>: allocated and aligned pointer, offset 0, sizes
// [3, 4, 8] and row-major strides [32, 8, 1].
// CHECK: %[[D0:.*]] = llvm.mlir.poison : !llvm.struct<(ptr, ptr, i64, array<3 x i64>, array<3 x i64>)>
// CHECK: %[[D1:.*]] = llvm.insertvalue %[[BASE]], %[[D0]][0]
// CHECK: %[[D2:.*]] = llvm.insertvalue %[[BASE]], %[[D1]][1]
// CHECK: %[[ZERO:.*]] = llvm.mlir.constant(0 : index) : i64
// CHECK: %[[D3:.*]] = llvm.insertvalue %[[ZERO]], %[[D2]][2]
// CHECK: %[[FOUR:.*]] = llvm.mlir.constant(4 : index) : i64
// CHECK: %[[EIGHT:.*]] = llvm.mlir.constant(8 : index) : i64
// CHECK: %[[ONE:.*]] = llvm.mlir.constant(1 : index) : i64
// CHECK: %[[D4:.*]] = llvm.insertvalue %[[EIGHT]], %[[D3]][3, 2]
// CHECK: %[[D5:.*]] = llvm.insertvalue %[[ONE]], %[[D4]][4, 2]
// CHECK: %[[S1:.*]] = llvm.mul %[[ONE]], %[[EIGHT]] : i64
// CHECK: %[[D6:.*]] = llvm.insertvalue %[[FOUR]], %[[D5]][3, 1]
// CHECK: %[[D7:.*]] = llvm.insertvalue %[[S1]], %[[D6]][4, 1]
// CHECK: %[[S0:.*]] = llvm.mul %[[S1]], %[[FOUR]] : i64
// CHECK: %[[D8:.*]] = llvm.insertvalue %[[THREE]], %[[D7]][3, 0]
// CHECK: %[[D9:.*]] = llvm.insertvalue %[[S0]], %[[D8]][4, 0]
// The view and the pointer extraction of the runtime-call lowering go through the
// descriptor.
// CHECK: llvm.extractvalue %[[D9]][1]
// CHECK: %[[PTR:.*]] = llvm.inttoptr
// CHECK: llvm.call @kiln_rt_use(%[[CTX]], %[[PTR]], %{{.*}}) : (!llvm.ptr, !llvm.ptr, i64) -> i32
// CHECK-NEXT: llvm.return
// CHECK-NOT: kiln.
// CHECK-NOT: unrealized_conversion_cast
// CHECK-NOT: memref.
// CHECK-NOT: func.
// CHECK-NOT: arith.
module {
  func.func private @kiln_rt_activations(!llvm.ptr) -> !llvm.ptr
  func.func private @kiln_rt_use(!llvm.ptr, !llvm.ptr, i64) -> i32
  func.func @kiln_model_forward(%ctx: !llvm.ptr {kiln.context}) attributes {kiln.entry} {
    %base = call @kiln_rt_activations(%ctx) : (!llvm.ptr) -> !llvm.ptr
    %c3 = arith.constant 3 : index
    %buf = kiln.buffer_from_pointer %base[%c3] : !llvm.ptr -> memref<?x4x8xbf16>
    %flat = memref.collapse_shape %buf [[0, 1], [2]] : memref<?x4x8xbf16> into memref<?x8xbf16>
    %c0 = arith.constant 0 : index
    %rows = memref.dim %flat, %c0 : memref<?x8xbf16>
    %p = memref.extract_aligned_pointer_as_index %flat : memref<?x8xbf16> -> index
    %pi = arith.index_cast %p : index to i64
    %pp = llvm.inttoptr %pi : i64 to !llvm.ptr
    %n = arith.index_cast %rows : index to i64
    %r = call @kiln_rt_use(%ctx, %pp, %n) : (!llvm.ptr, !llvm.ptr, i64) -> i32
    return
  }
}

// -----
// A static buffer needs no size operands.
// CHECK-LABEL: llvm.func @static_buffer
// CHECK-SAME: (%[[P:[^:]*]]: !llvm.ptr) -> i64
// CHECK: %[[D:.*]] = llvm.mlir.poison : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)>
// CHECK: llvm.insertvalue %[[P]], %[[D]][0]
// CHECK: %[[SIXTEEN:.*]] = llvm.mlir.constant(16 : index) : i64
// CHECK: llvm.insertvalue %[[SIXTEEN]], %{{.*}}[3, 0]
func.func @static_buffer(%p: !llvm.ptr) -> index {
  %buf = kiln.buffer_from_pointer %p : !llvm.ptr -> memref<16x8xf32>
  %i = memref.extract_aligned_pointer_as_index %buf : memref<16x8xf32> -> index
  return %i : index
}

// -----
// Every buffer of a compiled step lives in a planned arena.
func.func @leftover(%ctx: !llvm.ptr {kiln.context}, %n: index) {
  // expected-error @below {{buffer allocation left in a compiled step: every buffer must live in a planned arena (run kiln-plan-activations)}}
  %a = memref.alloc(%n) : memref<?x8xbf16>
  return
}

// -----
func.func @leftover_stack() {
  // expected-error @below {{buffer allocation left in a compiled step}}
  %a = memref.alloca() : memref<8xbf16>
  return
}
