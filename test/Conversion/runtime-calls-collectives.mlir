// convert-kiln-to-runtime-calls of kiln.all_reduce: one call of kiln_rt_all_reduce on
// the input's and the output's pointers and the element count.
// RUN: kiln-opt %s --convert-kiln-to-runtime-calls | FileCheck %s

// CHECK-DAG: func.func private @kiln_rt_all_reduce(!llvm.ptr, !llvm.ptr, !llvm.ptr, i64) -> i32
// CHECK-LABEL: func.func @row_parallel_sum
// CHECK-SAME: (%[[CTX:[^:]*]]: !llvm.ptr {kiln.context}, %[[X:[^:]*]]: memref<?x64xbf16>
// CHECK: %[[IN:.*]] = llvm.inttoptr
// CHECK: %[[OUT:.*]] = llvm.inttoptr
// CHECK: %[[ROWS:.*]] = memref.dim %[[X]], %{{.*}}
// CHECK: %[[C64:.*]] = arith.constant 64 : index
// CHECK: %[[ELEMS:.*]] = arith.muli %[[ROWS]], %[[C64]] : index
// CHECK: %[[N:.*]] = arith.index_cast %[[ELEMS]] : index to i64
// CHECK: call @kiln_rt_all_reduce(%[[CTX]], %[[IN]], %[[OUT]], %[[N]]) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, i64) -> i32
// CHECK-NOT: kiln.all_reduce
module {
  func.func @row_parallel_sum(%ctx: !llvm.ptr {kiln.context}, %x: memref<?x64xbf16>) {
    kiln.all_reduce ins(%x : memref<?x64xbf16>) outs(%x : memref<?x64xbf16>)
    return
  }
}
