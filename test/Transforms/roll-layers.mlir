// RUN: kiln-opt %s -split-input-file -kiln-roll-layers=remarks=true -verify-diagnostics | FileCheck %s

// Three layers: the anchors (calls marked kiln.layer) split the step into a prologue
// (up to layer 0's attention), two segments (the ops after anchor i up to and including
// anchor i+1) and an epilogue. Each layer reads the previous layer's output through a
// view defined in the segment before (%in1, %in2): it is copied into the segment that
// reads it. The constants that differ (output and input offsets, scale, layer, KV
// offset) become the columns of the table, floats as their bits; the one that does not
// (%n) is hoisted out of the loop. The epilogue gets its own copy of the last view.

func.func private @kiln_rt_weights(!llvm.ptr) -> !llvm.ptr
func.func private @kiln_rt_linear(!llvm.ptr, !llvm.ptr, !llvm.ptr, i64, f32) -> i32
func.func private @kiln_rt_attention(!llvm.ptr, i32, i64, !llvm.ptr) -> i32

// CHECK-LABEL: func.func @step(
// CHECK-SAME:      %[[CTX:.*]]: !llvm.ptr {kiln.context}
// CHECK:         %[[W:.*]] = call @kiln_rt_weights(%[[CTX]])
// CHECK:         call @kiln_rt_attention({{.*}}) {kiln.layer = 0 : i64}
// CHECK:         %[[TABLE:.*]] = llvm.mlir.addressof @step_layer_table
// CHECK:         scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step
// CHECK:           %[[ROW:.*]] = arith.index_cast %[[I]] : index to i64
// CHECK:           %[[START:.*]] = arith.muli %[[ROW]], %{{.*}} : i64
// CHECK:           %[[AT0:.*]] = arith.addi %[[START]], %{{.*}} : i64
// CHECK:           %[[P0:.*]] = llvm.getelementptr %[[TABLE]][%[[AT0]]] : (!llvm.ptr, i64) -> !llvm.ptr, i64
// CHECK:           %[[OFF:.*]] = llvm.load %[[P0]] : !llvm.ptr -> i64
// CHECK:           %[[SCALEBITS:.*]] = llvm.load {{.*}} : !llvm.ptr -> i64
// CHECK:           %[[SCALE32:.*]] = arith.trunci %[[SCALEBITS]] : i64 to i32
// CHECK:           %[[SCALE:.*]] = arith.bitcast %[[SCALE32]] : i32 to f32
// CHECK:           %[[INOFF:.*]] = llvm.load {{.*}} : !llvm.ptr -> i64
// CHECK:           %[[LAYER64:.*]] = llvm.load {{.*}} : !llvm.ptr -> i64
// CHECK:           %[[LAYER:.*]] = arith.trunci %[[LAYER64]] : i64 to i32
// CHECK:           %[[KV:.*]] = llvm.load {{.*}} : !llvm.ptr -> i64
// CHECK:           %[[OUT:.*]] = llvm.getelementptr %[[W]][%[[OFF]]]
// CHECK:           %[[IN:.*]] = llvm.getelementptr %[[W]][%[[INOFF]]]
// CHECK:           call @kiln_rt_linear(%[[CTX]], %[[IN]], %[[OUT]], %{{.*}}, %[[SCALE]])
// CHECK:           call @kiln_rt_attention(%[[CTX]], %[[LAYER]], %[[KV]], %[[OUT]]) :
// CHECK-NOT:       kiln.layer
// CHECK:         }
// CHECK:         call @kiln_rt_linear(%[[CTX]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}})
// CHECK-NEXT:    return
// CHECK:       llvm.mlir.global internal constant @step_layer_table(dense<[100, 1065353216, 0, 1, 4096, 200, 1073741824, 100, 2, 8192]> : tensor<10xi64>)
// CHECK-SAME:    !llvm.array<10 x i64>

// expected-remark @below {{rolled 2 layer segments into a loop over a table of 5 columns (25 ops -> 50)}}
func.func @step(%ctx: !llvm.ptr {kiln.context}) {
  %w = call @kiln_rt_weights(%ctx) : (!llvm.ptr) -> !llvm.ptr
  %n = arith.constant 64 : i64
  %c0 = arith.constant 0 : i32
  %kv0 = arith.constant 0 : i64
  %off0 = arith.constant 0 : i64
  %in1 = llvm.getelementptr %w[%off0] : (!llvm.ptr, i64) -> !llvm.ptr, i8
  %a0 = call @kiln_rt_attention(%ctx, %c0, %kv0, %in1) {kiln.layer = 0 : i64} : (!llvm.ptr, i32, i64, !llvm.ptr) -> i32
  // Layer 1.
  %off1 = arith.constant 100 : i64
  %in2 = llvm.getelementptr %w[%off1] : (!llvm.ptr, i64) -> !llvm.ptr, i8
  %s1 = arith.constant 1.0 : f32
  %l1 = call @kiln_rt_linear(%ctx, %in1, %in2, %n, %s1) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, i64, f32) -> i32
  %c1 = arith.constant 1 : i32
  %kv1 = arith.constant 4096 : i64
  %a1 = call @kiln_rt_attention(%ctx, %c1, %kv1, %in2) {kiln.layer = 1 : i64} : (!llvm.ptr, i32, i64, !llvm.ptr) -> i32
  // Layer 2.
  %off2 = arith.constant 200 : i64
  %in3 = llvm.getelementptr %w[%off2] : (!llvm.ptr, i64) -> !llvm.ptr, i8
  %s2 = arith.constant 2.0 : f32
  %l2 = call @kiln_rt_linear(%ctx, %in2, %in3, %n, %s2) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, i64, f32) -> i32
  %c2 = arith.constant 2 : i32
  %kv2 = arith.constant 8192 : i64
  %a2 = call @kiln_rt_attention(%ctx, %c2, %kv2, %in3) {kiln.layer = 2 : i64} : (!llvm.ptr, i32, i64, !llvm.ptr) -> i32
  // Epilogue: reads the last layer's view.
  %s3 = arith.constant 3.0 : f32
  %l3 = call @kiln_rt_linear(%ctx, %in3, %in3, %n, %s3) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, i64, f32) -> i32
  return
}

// -----

// Layer 2 makes one call more than layer 1: the segments differ, nothing changes.

func.func private @kiln_rt_linear(!llvm.ptr, i64) -> i32
func.func private @kiln_rt_attention(!llvm.ptr, i32) -> i32

// CHECK-LABEL: func.func @different
// CHECK-NOT:     scf.for
// CHECK:         call @kiln_rt_attention({{.*}}) {kiln.layer = 0 : i64}
// CHECK-NEXT:    call @kiln_rt_linear
// CHECK-NEXT:    call @kiln_rt_attention({{.*}}) {kiln.layer = 1 : i64}
// CHECK-NEXT:    call @kiln_rt_linear
// CHECK-NEXT:    call @kiln_rt_linear
// CHECK-NEXT:    call @kiln_rt_attention({{.*}}) {kiln.layer = 2 : i64}
// CHECK-NEXT:    return
// CHECK-NOT:   llvm.mlir.global

// expected-remark @below {{not rolled: no two consecutive layer segments (or groups of up to 16) are equal}}
func.func @different(%ctx: !llvm.ptr {kiln.context}, %n: i64, %l0: i32, %l1: i32, %l2: i32) {
  %a0 = call @kiln_rt_attention(%ctx, %l0) {kiln.layer = 0 : i64} : (!llvm.ptr, i32) -> i32
  %x1 = call @kiln_rt_linear(%ctx, %n) : (!llvm.ptr, i64) -> i32
  %a1 = call @kiln_rt_attention(%ctx, %l1) {kiln.layer = 1 : i64} : (!llvm.ptr, i32) -> i32
  %x2 = call @kiln_rt_linear(%ctx, %n) : (!llvm.ptr, i64) -> i32
  %y2 = call @kiln_rt_linear(%ctx, %n) : (!llvm.ptr, i64) -> i32
  %a2 = call @kiln_rt_attention(%ctx, %l2) {kiln.layer = 2 : i64} : (!llvm.ptr, i32) -> i32
  return
}

// -----

// Each layer passes the status of the previous layer's call (not a pure value, so it
// cannot be copied) to its own call: the second segment reads a value of the first.

func.func private @kiln_rt_step(!llvm.ptr, i32) -> i32

// CHECK-LABEL: func.func @crossing
// CHECK-NOT:     scf.for
// CHECK:         %[[A0:.*]] = call @kiln_rt_step({{.*}}) {kiln.layer = 0 : i64}
// CHECK-NEXT:    %[[A1:.*]] = call @kiln_rt_step(%{{.*}}, %[[A0]]) {kiln.layer = 1 : i64}
// CHECK-NEXT:    call @kiln_rt_step(%{{.*}}, %[[A1]]) {kiln.layer = 2 : i64}

// expected-remark @below {{not rolled: no two consecutive layer segments (or groups of up to 16) are equal}}
func.func @crossing(%ctx: !llvm.ptr {kiln.context}, %s: i32) {
  %a0 = call @kiln_rt_step(%ctx, %s) {kiln.layer = 0 : i64} : (!llvm.ptr, i32) -> i32
  %a1 = call @kiln_rt_step(%ctx, %a0) {kiln.layer = 1 : i64} : (!llvm.ptr, i32) -> i32
  %a2 = call @kiln_rt_step(%ctx, %a1) {kiln.layer = 2 : i64} : (!llvm.ptr, i32) -> i32
  return
}

// -----

// The segments match, but the code after them uses the status of a call of the last
// rolled segment: after rolling it would not exist.

func.func private @kiln_rt_step(!llvm.ptr, i32) -> i32

// CHECK-LABEL: func.func @escaping
// CHECK-NOT:     scf.for
// CHECK:         call @kiln_rt_step({{.*}}) {kiln.layer = 0 : i64}
// CHECK-NEXT:    call @kiln_rt_step({{.*}}) {kiln.layer = 1 : i64}
// CHECK-NEXT:    %[[LAST:.*]] = call @kiln_rt_step({{.*}}) {kiln.layer = 2 : i64}
// CHECK-NEXT:    call @kiln_rt_step(%{{.*}}, %[[LAST]])
// CHECK-NEXT:    return

// expected-remark @below {{not rolled: a value of layer segment 1 that is not pure is used outside it}}
func.func @escaping(%ctx: !llvm.ptr {kiln.context}, %s: i32) {
  %a0 = call @kiln_rt_step(%ctx, %s) {kiln.layer = 0 : i64} : (!llvm.ptr, i32) -> i32
  %a1 = call @kiln_rt_step(%ctx, %s) {kiln.layer = 1 : i64} : (!llvm.ptr, i32) -> i32
  %a2 = call @kiln_rt_step(%ctx, %s) {kiln.layer = 2 : i64} : (!llvm.ptr, i32) -> i32
  %e = call @kiln_rt_step(%ctx, %a2) : (!llvm.ptr, i32) -> i32
  return
}

// -----

// One layer (and two: one segment) is nothing to roll.

func.func private @kiln_rt_step(!llvm.ptr, i32) -> i32

// CHECK-LABEL: func.func @single
// CHECK-NOT:     scf.for
// CHECK:         call @kiln_rt_step({{.*}}) {kiln.layer = 0 : i64}
// CHECK-NEXT:    return

// expected-remark @below {{not rolled: fewer than two layer segments}}
func.func @single(%ctx: !llvm.ptr {kiln.context}, %s: i32) {
  %a0 = call @kiln_rt_step(%ctx, %s) {kiln.layer = 0 : i64} : (!llvm.ptr, i32) -> i32
  return
}

// CHECK-LABEL: func.func @two
// CHECK-NOT:     scf.for
// CHECK:         call @kiln_rt_step({{.*}}) {kiln.layer = 0 : i64}
// CHECK-NEXT:    call @kiln_rt_step({{.*}}) {kiln.layer = 1 : i64}
// CHECK-NEXT:    return

// expected-remark @below {{not rolled: fewer than two layer segments}}
func.func @two(%ctx: !llvm.ptr {kiln.context}, %s: i32) {
  %a0 = call @kiln_rt_step(%ctx, %s) {kiln.layer = 0 : i64} : (!llvm.ptr, i32) -> i32
  %a1 = call @kiln_rt_step(%ctx, %s) {kiln.layer = 1 : i64} : (!llvm.ptr, i32) -> i32
  return
}

// -----

// A first layer unlike the others (DeepSeek's dense layers before its MoE layers): the
// run of equal segments after it rolls, the first segment stays as it was.

func.func private @kiln_rt_attention(!llvm.ptr, i32) -> i32
func.func private @kiln_rt_dense(!llvm.ptr) -> i32
func.func private @kiln_rt_moe(!llvm.ptr) -> i32

// CHECK-LABEL: func.func @prologue_layer
// CHECK:         call @kiln_rt_attention({{.*}}) {kiln.layer = 0 : i64}
// CHECK-NEXT:    call @kiln_rt_dense
// CHECK:         call @kiln_rt_attention({{.*}}) {kiln.layer = 1 : i64}
// CHECK:         scf.for
// CHECK:           call @kiln_rt_moe
// CHECK:           call @kiln_rt_attention
// CHECK-NOT:       kiln.layer
// CHECK:         }
// CHECK-NEXT:    call @kiln_rt_moe
// CHECK-NEXT:    return
// CHECK:       llvm.mlir.global internal constant @prologue_layer_layer_table(dense<[2, 3, 4]>

// expected-remark @below {{rolled 3 layer segments (3 groups of 1 from segment 1) into a loop over a table of 1 columns}}
func.func @prologue_layer(%ctx: !llvm.ptr {kiln.context}) {
  %c0 = arith.constant 0 : i32
  %a0 = call @kiln_rt_attention(%ctx, %c0) {kiln.layer = 0 : i64} : (!llvm.ptr, i32) -> i32
  %d0 = call @kiln_rt_dense(%ctx) : (!llvm.ptr) -> i32
  %c1 = arith.constant 1 : i32
  %a1 = call @kiln_rt_attention(%ctx, %c1) {kiln.layer = 1 : i64} : (!llvm.ptr, i32) -> i32
  %m1 = call @kiln_rt_moe(%ctx) : (!llvm.ptr) -> i32
  %c2 = arith.constant 2 : i32
  %a2 = call @kiln_rt_attention(%ctx, %c2) {kiln.layer = 2 : i64} : (!llvm.ptr, i32) -> i32
  %m2 = call @kiln_rt_moe(%ctx) : (!llvm.ptr) -> i32
  %c3 = arith.constant 3 : i32
  %a3 = call @kiln_rt_attention(%ctx, %c3) {kiln.layer = 3 : i64} : (!llvm.ptr, i32) -> i32
  %m3 = call @kiln_rt_moe(%ctx) : (!llvm.ptr) -> i32
  %c4 = arith.constant 4 : i32
  %a4 = call @kiln_rt_attention(%ctx, %c4) {kiln.layer = 4 : i64} : (!llvm.ptr, i32) -> i32
  %m4 = call @kiln_rt_moe(%ctx) : (!llvm.ptr) -> i32
  return
}

// -----

// A hybrid whose layers alternate (Mamba, attention, Mamba, ...): no two consecutive
// segments are equal, but consecutive pairs of them are, and the pairs roll.

func.func private @kiln_rt_attention(!llvm.ptr, i32) -> i32
func.func private @kiln_rt_ssm(!llvm.ptr, i32) -> i32
func.func private @kiln_rt_mlp(!llvm.ptr) -> i32

// CHECK-LABEL: func.func @alternating
// CHECK:         call @kiln_rt_attention({{.*}}) {kiln.layer = 0 : i64}
// CHECK:         scf.for
// CHECK:           call @kiln_rt_mlp
// CHECK-NEXT:      call @kiln_rt_ssm
// CHECK-NEXT:      call @kiln_rt_mlp
// CHECK-NEXT:      call @kiln_rt_attention
// CHECK-NOT:       kiln.layer
// CHECK:         }
// CHECK-NEXT:    call @kiln_rt_mlp
// CHECK-NEXT:    return
// CHECK:       llvm.mlir.global internal constant @alternating_layer_table(dense<[1, 2, 3, 4, 5, 6]>

// expected-remark @below {{rolled 6 layer segments (3 groups of 2 from segment 0) into a loop over a table of 2 columns}}
func.func @alternating(%ctx: !llvm.ptr {kiln.context}) {
  %c0 = arith.constant 0 : i32
  %a0 = call @kiln_rt_attention(%ctx, %c0) {kiln.layer = 0 : i64} : (!llvm.ptr, i32) -> i32
  %p0 = call @kiln_rt_mlp(%ctx) : (!llvm.ptr) -> i32
  %c1 = arith.constant 1 : i32
  %s1 = call @kiln_rt_ssm(%ctx, %c1) {kiln.layer = 1 : i64} : (!llvm.ptr, i32) -> i32
  %p1 = call @kiln_rt_mlp(%ctx) : (!llvm.ptr) -> i32
  %c2 = arith.constant 2 : i32
  %a2 = call @kiln_rt_attention(%ctx, %c2) {kiln.layer = 2 : i64} : (!llvm.ptr, i32) -> i32
  %p2 = call @kiln_rt_mlp(%ctx) : (!llvm.ptr) -> i32
  %c3 = arith.constant 3 : i32
  %s3 = call @kiln_rt_ssm(%ctx, %c3) {kiln.layer = 3 : i64} : (!llvm.ptr, i32) -> i32
  %p3 = call @kiln_rt_mlp(%ctx) : (!llvm.ptr) -> i32
  %c4 = arith.constant 4 : i32
  %a4 = call @kiln_rt_attention(%ctx, %c4) {kiln.layer = 4 : i64} : (!llvm.ptr, i32) -> i32
  %p4 = call @kiln_rt_mlp(%ctx) : (!llvm.ptr) -> i32
  %c5 = arith.constant 5 : i32
  %s5 = call @kiln_rt_ssm(%ctx, %c5) {kiln.layer = 5 : i64} : (!llvm.ptr, i32) -> i32
  %p5 = call @kiln_rt_mlp(%ctx) : (!llvm.ptr) -> i32
  %c6 = arith.constant 6 : i32
  %a6 = call @kiln_rt_attention(%ctx, %c6) {kiln.layer = 6 : i64} : (!llvm.ptr, i32) -> i32
  %p6 = call @kiln_rt_mlp(%ctx) : (!llvm.ptr) -> i32
  return
}

// -----

// Two runs in one step (an irregular hybrid pattern): the longer run (the attention
// layers, from segment 2: a segment ends with the next layer's first call) rolls first,
// then the other, each into its own loop and table.

func.func private @kiln_rt_attention(!llvm.ptr, i32) -> i32
func.func private @kiln_rt_ssm(!llvm.ptr, i32) -> i32

// CHECK-LABEL: func.func @two_runs
// CHECK:         call @kiln_rt_ssm({{.*}}) {kiln.layer = 0 : i64}
// CHECK:         llvm.mlir.addressof @two_runs_layer_table_0
// CHECK:         scf.for
// CHECK:           call @kiln_rt_ssm
// CHECK-NOT:       kiln.layer
// CHECK:         }
// CHECK:         scf.for
// CHECK:           call @kiln_rt_attention
// CHECK-NOT:       kiln.layer
// CHECK:         }
// CHECK-NEXT:    return
// CHECK-DAG:   llvm.mlir.global internal constant @two_runs_layer_table(dense<[3, 4, 5, 6, 7]>
// CHECK-DAG:   llvm.mlir.global internal constant @two_runs_layer_table_0(dense<[1, 2]>

// expected-remark @below {{rolled 5 layer segments (5 groups of 1 from segment 2) into a loop over a table of 1 columns}}
// expected-remark @below {{rolled 2 layer segments into a loop over a table of 1 columns}}
func.func @two_runs(%ctx: !llvm.ptr {kiln.context}) {
  %c0 = arith.constant 0 : i32
  %s0 = call @kiln_rt_ssm(%ctx, %c0) {kiln.layer = 0 : i64} : (!llvm.ptr, i32) -> i32
  %c1 = arith.constant 1 : i32
  %s1 = call @kiln_rt_ssm(%ctx, %c1) {kiln.layer = 1 : i64} : (!llvm.ptr, i32) -> i32
  %c2 = arith.constant 2 : i32
  %s2 = call @kiln_rt_ssm(%ctx, %c2) {kiln.layer = 2 : i64} : (!llvm.ptr, i32) -> i32
  %c3 = arith.constant 3 : i32
  %a3 = call @kiln_rt_attention(%ctx, %c3) {kiln.layer = 3 : i64} : (!llvm.ptr, i32) -> i32
  %c4 = arith.constant 4 : i32
  %a4 = call @kiln_rt_attention(%ctx, %c4) {kiln.layer = 4 : i64} : (!llvm.ptr, i32) -> i32
  %c5 = arith.constant 5 : i32
  %a5 = call @kiln_rt_attention(%ctx, %c5) {kiln.layer = 5 : i64} : (!llvm.ptr, i32) -> i32
  %c6 = arith.constant 6 : i32
  %a6 = call @kiln_rt_attention(%ctx, %c6) {kiln.layer = 6 : i64} : (!llvm.ptr, i32) -> i32
  %c7 = arith.constant 7 : i32
  %a7 = call @kiln_rt_attention(%ctx, %c7) {kiln.layer = 7 : i64} : (!llvm.ptr, i32) -> i32
  return
}

// -----

// Groups match (alternating attention and Mamba layers), but the code after them uses the
// status of a call of the last group: nothing rolls, and the remark names the group.

func.func private @kiln_rt_attention(!llvm.ptr, i32) -> i32
func.func private @kiln_rt_ssm(!llvm.ptr, i32) -> i32
func.func private @kiln_rt_step(!llvm.ptr, i32) -> i32

// CHECK-LABEL: func.func @escaping_group
// CHECK-NOT:     scf.for
// CHECK:         %[[S3:.*]] = call @kiln_rt_ssm({{.*}}) {kiln.layer = 3 : i64}
// CHECK-NEXT:    call @kiln_rt_attention({{.*}}) {kiln.layer = 4 : i64}
// CHECK-NEXT:    call @kiln_rt_step(%{{.*}}, %[[S3]])
// CHECK-NEXT:    return

// expected-remark @below {{not rolled: a value of layer segment 2 (a group of 2) that is not pure is used outside it}}
func.func @escaping_group(%ctx: !llvm.ptr {kiln.context}, %s: i32) {
  %a0 = call @kiln_rt_attention(%ctx, %s) {kiln.layer = 0 : i64} : (!llvm.ptr, i32) -> i32
  %s1 = call @kiln_rt_ssm(%ctx, %s) {kiln.layer = 1 : i64} : (!llvm.ptr, i32) -> i32
  %a2 = call @kiln_rt_attention(%ctx, %s) {kiln.layer = 2 : i64} : (!llvm.ptr, i32) -> i32
  %s3 = call @kiln_rt_ssm(%ctx, %s) {kiln.layer = 3 : i64} : (!llvm.ptr, i32) -> i32
  %a4 = call @kiln_rt_attention(%ctx, %s) {kiln.layer = 4 : i64} : (!llvm.ptr, i32) -> i32
  %e = call @kiln_rt_step(%ctx, %s3) : (!llvm.ptr, i32) -> i32
  return
}
