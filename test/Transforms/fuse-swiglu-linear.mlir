// kiln-fuse-swiglu-linear: a kiln.swiglu whose output is an allocation read only by the
// next kiln.linear of its block (no bias, bf16 out), with only allocations and
// memory-effect-free ops between them, becomes one kiln.swiglu_linear where the linear
// was, the allocation kept as its scratch. Left alone: an output something else reads, a
// linear with a bias, an op with memory effects between the two, an output that is not
// an allocation or is read through a view, gate and output of different types.
// RUN: kiln-opt %s -split-input-file --kiln-fuse-swiglu-linear | FileCheck %s

// A gated MLP's activation and down projection.
// CHECK-LABEL: func.func @mlp
// CHECK-SAME: (%[[G:[^:]*]]: memref<?x128xbf16>, %[[U:[^:]*]]: memref<?x128xbf16>, %[[W:[^:]*]]: memref<32x128xbf16>
// CHECK: %[[H:.*]] = memref.alloc
// CHECK-NEXT: %[[O:.*]] = memref.alloc
// CHECK-NEXT: kiln.swiglu_linear ins(%[[G]], %[[U]], %[[W]] : memref<?x128xbf16>, memref<?x128xbf16>, memref<32x128xbf16>) outs(%[[H]], %[[O]] : memref<?x128xbf16>, memref<?x32xbf16>)
// CHECK-NEXT: return %[[O]]
func.func @mlp(%gate: memref<?x128xbf16>, %up: memref<?x128xbf16>, %w: memref<32x128xbf16>,
               %n: index) -> memref<?x32xbf16> {
  %h = memref.alloc(%n) : memref<?x128xbf16>
  kiln.swiglu ins(%gate, %up : memref<?x128xbf16>, memref<?x128xbf16>) outs(%h : memref<?x128xbf16>)
  %o = memref.alloc(%n) : memref<?x32xbf16>
  kiln.linear ins(%h, %w : memref<?x128xbf16>, memref<32x128xbf16>) outs(%o : memref<?x32xbf16>)
  return %o : memref<?x32xbf16>
}

// -----

// The SwiGLU's output read again after the projection: the merged op may leave it
// unwritten, so nothing is merged.
// CHECK-LABEL: func.func @read_again
// CHECK: kiln.swiglu ins
// CHECK: kiln.linear ins
// CHECK-NOT: kiln.swiglu_linear
func.func @read_again(%gate: memref<?x128xbf16>, %up: memref<?x128xbf16>, %w: memref<32x128xbf16>,
                      %n: index) -> (memref<?x32xbf16>, memref<?x128xbf16>) {
  %h = memref.alloc(%n) : memref<?x128xbf16>
  kiln.swiglu ins(%gate, %up : memref<?x128xbf16>, memref<?x128xbf16>) outs(%h : memref<?x128xbf16>)
  %o = memref.alloc(%n) : memref<?x32xbf16>
  kiln.linear ins(%h, %w : memref<?x128xbf16>, memref<32x128xbf16>) outs(%o : memref<?x32xbf16>)
  return %o, %h : memref<?x32xbf16>, memref<?x128xbf16>
}

// -----

// A projection with a bias, and one whose output is another type: left alone.
// CHECK-LABEL: func.func @bias
// CHECK-NOT: kiln.swiglu_linear
// CHECK-LABEL: func.func @f32_out
// CHECK-NOT: kiln.swiglu_linear
// CHECK: return
func.func @bias(%gate: memref<?x128xbf16>, %up: memref<?x128xbf16>, %w: memref<32x128xbf16>,
                %b: memref<32xbf16>, %n: index) -> memref<?x32xbf16> {
  %h = memref.alloc(%n) : memref<?x128xbf16>
  kiln.swiglu ins(%gate, %up : memref<?x128xbf16>, memref<?x128xbf16>) outs(%h : memref<?x128xbf16>)
  %o = memref.alloc(%n) : memref<?x32xbf16>
  kiln.linear ins(%h, %w : memref<?x128xbf16>, memref<32x128xbf16>) bias(%b : memref<32xbf16>) outs(%o : memref<?x32xbf16>)
  return %o : memref<?x32xbf16>
}
func.func @f32_out(%gate: memref<?x128xbf16>, %up: memref<?x128xbf16>, %w: memref<32x128xbf16>,
                   %n: index) -> memref<?x32xf32> {
  %h = memref.alloc(%n) : memref<?x128xbf16>
  kiln.swiglu ins(%gate, %up : memref<?x128xbf16>, memref<?x128xbf16>) outs(%h : memref<?x128xbf16>)
  %o = memref.alloc(%n) : memref<?x32xf32>
  kiln.linear ins(%h, %w : memref<?x128xbf16>, memref<32x128xbf16>) outs(%o : memref<?x32xf32>)
  return %o : memref<?x32xf32>
}

// -----

// An op with memory effects between the two (it could write gate or up): left alone.
// CHECK-LABEL: func.func @effect_between
// CHECK-NOT: kiln.swiglu_linear
// CHECK: return
func.func @effect_between(%gate: memref<?x128xbf16>, %up: memref<?x128xbf16>, %w: memref<32x128xbf16>,
                          %n: index) -> memref<?x32xbf16> {
  %h = memref.alloc(%n) : memref<?x128xbf16>
  kiln.swiglu ins(%gate, %up : memref<?x128xbf16>, memref<?x128xbf16>) outs(%h : memref<?x128xbf16>)
  kiln.add ins(%up, %up : memref<?x128xbf16>, memref<?x128xbf16>) outs(%gate : memref<?x128xbf16>)
  %o = memref.alloc(%n) : memref<?x32xbf16>
  kiln.linear ins(%h, %w : memref<?x128xbf16>, memref<32x128xbf16>) outs(%o : memref<?x32xbf16>)
  return %o : memref<?x32xbf16>
}

// -----

// The SwiGLU writing a buffer the function was given (not an allocation): left alone.
// CHECK-LABEL: func.func @argument_output
// CHECK-NOT: kiln.swiglu_linear
// CHECK: return
func.func @argument_output(%gate: memref<?x128xbf16>, %up: memref<?x128xbf16>, %w: memref<32x128xbf16>,
                           %h: memref<?x128xbf16>, %n: index) -> memref<?x32xbf16> {
  kiln.swiglu ins(%gate, %up : memref<?x128xbf16>, memref<?x128xbf16>) outs(%h : memref<?x128xbf16>)
  %o = memref.alloc(%n) : memref<?x32xbf16>
  kiln.linear ins(%h, %w : memref<?x128xbf16>, memref<32x128xbf16>) outs(%o : memref<?x32xbf16>)
  return %o : memref<?x32xbf16>
}

// -----

// The output freed after the projection still merges; read through a view, it does not.
// CHECK-LABEL: func.func @dealloc
// CHECK: kiln.swiglu_linear
// CHECK-NEXT: memref.dealloc
// CHECK-LABEL: func.func @through_view
// CHECK-NOT: kiln.swiglu_linear
// CHECK: return
func.func @dealloc(%gate: memref<?x128xbf16>, %up: memref<?x128xbf16>, %w: memref<32x128xbf16>,
                   %n: index) -> memref<?x32xbf16> {
  %h = memref.alloc(%n) : memref<?x128xbf16>
  kiln.swiglu ins(%gate, %up : memref<?x128xbf16>, memref<?x128xbf16>) outs(%h : memref<?x128xbf16>)
  %o = memref.alloc(%n) : memref<?x32xbf16>
  kiln.linear ins(%h, %w : memref<?x128xbf16>, memref<32x128xbf16>) outs(%o : memref<?x32xbf16>)
  memref.dealloc %h : memref<?x128xbf16>
  return %o : memref<?x32xbf16>
}
func.func @through_view(%gate: memref<4x128xbf16>, %up: memref<4x128xbf16>, %w: memref<32x128xbf16>)
    -> (memref<4x32xbf16>, memref<2x128xbf16, strided<[128, 1]>>) {
  %h = memref.alloc() : memref<4x128xbf16>
  kiln.swiglu ins(%gate, %up : memref<4x128xbf16>, memref<4x128xbf16>) outs(%h : memref<4x128xbf16>)
  %o = memref.alloc() : memref<4x32xbf16>
  kiln.linear ins(%h, %w : memref<4x128xbf16>, memref<32x128xbf16>) outs(%o : memref<4x32xbf16>)
  %v = memref.subview %h[0, 0] [2, 128] [1, 1] : memref<4x128xbf16> to memref<2x128xbf16, strided<[128, 1]>>
  return %o, %v : memref<4x32xbf16>, memref<2x128xbf16, strided<[128, 1]>>
}

// -----

// A gate of a static shape and an output of a dynamic one (kiln.swiglu takes compatible
// shapes; kiln.swiglu_linear one type): left alone.
// CHECK-LABEL: func.func @mixed_shapes
// CHECK-NOT: kiln.swiglu_linear
// CHECK: return
func.func @mixed_shapes(%gate: memref<4x128xbf16>, %up: memref<4x128xbf16>, %w: memref<32x128xbf16>,
                        %n: index) -> memref<?x32xbf16> {
  %h = memref.alloc(%n) : memref<?x128xbf16>
  kiln.swiglu ins(%gate, %up : memref<4x128xbf16>, memref<4x128xbf16>) outs(%h : memref<?x128xbf16>)
  %o = memref.alloc(%n) : memref<?x32xbf16>
  kiln.linear ins(%h, %w : memref<?x128xbf16>, memref<32x128xbf16>) outs(%o : memref<?x32xbf16>)
  return %o : memref<?x32xbf16>
}
