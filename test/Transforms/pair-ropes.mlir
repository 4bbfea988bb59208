// kiln-pair-ropes: two kiln.ropes at the same positions with the same parameters, whose
// outputs are allocations apart from the other rope's buffers, with only allocations and
// memory-effect-free ops between them, become one kiln.rope_pair where the second was.
// Left alone: other positions, other parameters, an op with memory effects between the
// two, an output that is a view of the other rope's input, buffers that are not
// allocations.
// RUN: kiln-opt %s -split-input-file --kiln-pair-ropes | FileCheck %s

#llama3 = #kiln.rope<type = llama3, theta = 500000.0, factor = 8.0, low = 1.0, high = 4.0, original_max_position = 8192>

// A layer's q and k, each output allocated just before its rope.
// CHECK-LABEL: func.func @qk
// CHECK-SAME: (%[[Q:[^:]*]]: memref<?x8x64xbf16>, %[[K:[^:]*]]: memref<?x2x64xbf16>, %[[POS:[^:]*]]: memref<?xi32>
// CHECK: %[[QO:.*]] = memref.alloc
// CHECK: %[[KO:.*]] = memref.alloc
// CHECK-NEXT: kiln.rope_pair ins(%[[Q]], %[[K]], %[[POS]] : memref<?x8x64xbf16>, memref<?x2x64xbf16>, memref<?xi32>) outs(%[[QO]], %[[KO]] : memref<?x8x64xbf16>, memref<?x2x64xbf16>) {rope = #kiln.rope<type = llama3
// CHECK-NOT: kiln.rope ins
// CHECK: return
func.func @qk(%q: memref<?x8x64xbf16>, %k: memref<?x2x64xbf16>, %pos: memref<?xi32>, %n: index)
    -> (memref<?x8x64xbf16>, memref<?x2x64xbf16>) {
  %qo = memref.alloc(%n) : memref<?x8x64xbf16>
  kiln.rope ins(%q, %pos : memref<?x8x64xbf16>, memref<?xi32>) outs(%qo : memref<?x8x64xbf16>) {rope = #llama3}
  %ko = memref.alloc(%n) : memref<?x2x64xbf16>
  kiln.rope ins(%k, %pos : memref<?x2x64xbf16>, memref<?xi32>) outs(%ko : memref<?x2x64xbf16>) {rope = #llama3}
  return %qo, %ko : memref<?x8x64xbf16>, memref<?x2x64xbf16>
}

// -----

// Partial rope pairs when both rotate the same dims; other positions or another
// rotary_dim do not.
// CHECK-LABEL: func.func @partial
// CHECK: kiln.rope_pair
// CHECK-SAME: rotary_dim = 16
// CHECK-LABEL: func.func @other_positions
// CHECK-NOT: kiln.rope_pair
// CHECK-LABEL: func.func @other_rotary
// CHECK-NOT: kiln.rope_pair
// CHECK: return
func.func @partial(%q: memref<?x8x64xbf16>, %k: memref<?x2x64xbf16>, %pos: memref<?xi32>, %n: index) {
  %qo = memref.alloc(%n) : memref<?x8x64xbf16>
  kiln.rope ins(%q, %pos : memref<?x8x64xbf16>, memref<?xi32>) outs(%qo : memref<?x8x64xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>, rotary_dim = 16 : i64}
  %ko = memref.alloc(%n) : memref<?x2x64xbf16>
  kiln.rope ins(%k, %pos : memref<?x2x64xbf16>, memref<?xi32>) outs(%ko : memref<?x2x64xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>, rotary_dim = 16 : i64}
  return
}
func.func @other_positions(%q: memref<?x8x64xbf16>, %k: memref<?x2x64xbf16>, %pos: memref<?xi32>, %pos2: memref<?xi32>, %n: index) {
  %qo = memref.alloc(%n) : memref<?x8x64xbf16>
  kiln.rope ins(%q, %pos : memref<?x8x64xbf16>, memref<?xi32>) outs(%qo : memref<?x8x64xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>}
  %ko = memref.alloc(%n) : memref<?x2x64xbf16>
  kiln.rope ins(%k, %pos2 : memref<?x2x64xbf16>, memref<?xi32>) outs(%ko : memref<?x2x64xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>}
  return
}
func.func @other_rotary(%q: memref<?x8x64xbf16>, %k: memref<?x2x64xbf16>, %pos: memref<?xi32>, %n: index) {
  %qo = memref.alloc(%n) : memref<?x8x64xbf16>
  kiln.rope ins(%q, %pos : memref<?x8x64xbf16>, memref<?xi32>) outs(%qo : memref<?x8x64xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>, rotary_dim = 16 : i64}
  %ko = memref.alloc(%n) : memref<?x2x64xbf16>
  kiln.rope ins(%k, %pos : memref<?x2x64xbf16>, memref<?xi32>) outs(%ko : memref<?x2x64xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>}
  return
}

// -----

// An op with memory effects between the two stops the search.
// CHECK-LABEL: func.func @effect_between
// CHECK-NOT: kiln.rope_pair
// CHECK: return
func.func @effect_between(%q: memref<?x8x64xbf16>, %k: memref<?x2x64xbf16>, %pos: memref<?xi32>, %n: index, %x: memref<?x128xbf16>, %y: memref<?x128xbf16>) {
  %qo = memref.alloc(%n) : memref<?x8x64xbf16>
  kiln.rope ins(%q, %pos : memref<?x8x64xbf16>, memref<?xi32>) outs(%qo : memref<?x8x64xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>}
  kiln.add ins(%x, %x : memref<?x128xbf16>, memref<?x128xbf16>) outs(%y : memref<?x128xbf16>)
  %ko = memref.alloc(%n) : memref<?x2x64xbf16>
  kiln.rope ins(%k, %pos : memref<?x2x64xbf16>, memref<?xi32>) outs(%ko : memref<?x2x64xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>}
  return
}

// -----

// The second rotates what the first wrote (a view of its output): one launch would
// read it while writing it. Buffers that are not allocations (arguments) are not
// known apart either.
// CHECK-LABEL: func.func @reads_first_output
// CHECK-NOT: kiln.rope_pair
// CHECK-LABEL: func.func @arguments
// CHECK-NOT: kiln.rope_pair
// CHECK: return
func.func @reads_first_output(%q: memref<?x8x64xbf16>, %pos: memref<?xi32>, %n: index) {
  %qo = memref.alloc(%n) : memref<?x8x64xbf16>
  kiln.rope ins(%q, %pos : memref<?x8x64xbf16>, memref<?xi32>) outs(%qo : memref<?x8x64xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>}
  %again = memref.cast %qo : memref<?x8x64xbf16> to memref<?x8x64xbf16>
  %o = memref.alloc(%n) : memref<?x8x64xbf16>
  kiln.rope ins(%again, %pos : memref<?x8x64xbf16>, memref<?xi32>) outs(%o : memref<?x8x64xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>}
  return
}
func.func @arguments(%q: memref<?x8x64xbf16>, %k: memref<?x2x64xbf16>, %pos: memref<?xi32>,
                     %qo: memref<?x8x64xbf16>, %ko: memref<?x2x64xbf16>) {
  kiln.rope ins(%q, %pos : memref<?x8x64xbf16>, memref<?xi32>) outs(%qo : memref<?x8x64xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>}
  kiln.rope ins(%k, %pos : memref<?x2x64xbf16>, memref<?xi32>) outs(%ko : memref<?x2x64xbf16>) {rope = #kiln.rope<type = default, theta = 10000.0>}
  return
}
