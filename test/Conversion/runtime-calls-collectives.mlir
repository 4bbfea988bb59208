// convert-kiln-to-runtime-calls of kiln.all_reduce: one call of kiln_rt_all_reduce on
// the input's and the output's pointers and the element count.
// RUN: kiln-opt %s -split-input-file --convert-kiln-to-runtime-calls | FileCheck %s

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

// -----
// The vocabulary-parallel embedding calls kiln_rt_embedding_rank (the context's rank
// picks the rows); kiln.all_gather calls kiln_rt_all_gather on the input, the blocks,
// the output, the rows, the columns and the graph's ranks.
// CHECK-DAG: func.func private @kiln_rt_embedding_rank(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, i64) -> i32
// CHECK-DAG: func.func private @kiln_rt_all_gather(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, i64) -> i32
// CHECK-LABEL: func.func @vocab_parallel
// CHECK: call @kiln_rt_embedding_rank(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}})
// CHECK: %[[R:.*]] = arith.constant 2 : i64
// CHECK: call @kiln_rt_all_gather(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[R]])
// CHECK-NOT: kiln.all_gather
module {
  func.func @vocab_parallel(%ctx: !llvm.ptr {kiln.context}, %ids: memref<?xi32>, %table: memref<128x64xbf16>,
                            %e: memref<?x64xbf16>, %l: memref<?x128xbf16>, %o: memref<?x256xbf16>,
                            %blk: memref<2x?x128xbf16>) {
    kiln.embedding ins(%ids, %table : memref<?xi32>, memref<128x64xbf16>) outs(%e : memref<?x64xbf16>) {vocab_parallel}
    kiln.all_gather ins(%l : memref<?x128xbf16>) outs(%o, %blk : memref<?x256xbf16>, memref<2x?x128xbf16>)
    return
  }
}
