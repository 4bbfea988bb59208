// kiln-fuse-pair-swiglu: a kiln.swiglu whose gate and up are allocations, each written
// only by a kiln.linear (no bias, bf16) of one input and one weight type and read only by
// the SwiGLU, with only allocations and memory-effect-free ops from the first projection
// to the SwiGLU, becomes one kiln.linear_pair_swiglu where the SwiGLU was, the two
// allocations kept as its gate and up. Left alone: a gate or up something else reads, a
// projection with a bias, projections of different inputs or weight shapes, an op with
// memory effects between, gate or up not an allocation, buffers of different types, a
// projection after the SwiGLU.
// RUN: kiln-opt %s -split-input-file --kiln-fuse-pair-swiglu | FileCheck %s

// A gated MLP's gate and up projections and its activation; the up projection first.
// CHECK-LABEL: func.func @mlp
// CHECK-SAME: (%[[X:[^:]*]]: memref<?x64xbf16>, %[[WG:[^:]*]]: memref<128x64xbf16>, %[[WU:[^:]*]]: memref<128x64xbf16>
// CHECK: %[[U:.*]] = memref.alloc
// CHECK-NEXT: %[[G:.*]] = memref.alloc
// CHECK-NEXT: %[[H:.*]] = memref.alloc
// CHECK-NEXT: kiln.linear_pair_swiglu ins(%[[X]], %[[WG]], %[[WU]] : memref<?x64xbf16>, memref<128x64xbf16>, memref<128x64xbf16>) outs(%[[G]], %[[U]], %[[H]] : memref<?x128xbf16>, memref<?x128xbf16>, memref<?x128xbf16>)
// CHECK-NEXT: return %[[H]]
func.func @mlp(%x: memref<?x64xbf16>, %wg: memref<128x64xbf16>, %wu: memref<128x64xbf16>,
               %n: index) -> memref<?x128xbf16> {
  %u = memref.alloc(%n) : memref<?x128xbf16>
  kiln.linear ins(%x, %wu : memref<?x64xbf16>, memref<128x64xbf16>) outs(%u : memref<?x128xbf16>)
  %g = memref.alloc(%n) : memref<?x128xbf16>
  kiln.linear ins(%x, %wg : memref<?x64xbf16>, memref<128x64xbf16>) outs(%g : memref<?x128xbf16>)
  %h = memref.alloc(%n) : memref<?x128xbf16>
  kiln.swiglu ins(%g, %u : memref<?x128xbf16>, memref<?x128xbf16>) outs(%h : memref<?x128xbf16>)
  return %h : memref<?x128xbf16>
}

// -----

// The up projection read again after the SwiGLU: the merged op may leave it unwritten,
// so nothing is merged.
// CHECK-LABEL: func.func @read_again
// CHECK-COUNT-2: kiln.linear ins
// CHECK: kiln.swiglu ins
// CHECK-NOT: kiln.linear_pair_swiglu
func.func @read_again(%x: memref<?x64xbf16>, %wg: memref<128x64xbf16>, %wu: memref<128x64xbf16>,
                      %n: index) -> (memref<?x128xbf16>, memref<?x128xbf16>) {
  %g = memref.alloc(%n) : memref<?x128xbf16>
  kiln.linear ins(%x, %wg : memref<?x64xbf16>, memref<128x64xbf16>) outs(%g : memref<?x128xbf16>)
  %u = memref.alloc(%n) : memref<?x128xbf16>
  kiln.linear ins(%x, %wu : memref<?x64xbf16>, memref<128x64xbf16>) outs(%u : memref<?x128xbf16>)
  %h = memref.alloc(%n) : memref<?x128xbf16>
  kiln.swiglu ins(%g, %u : memref<?x128xbf16>, memref<?x128xbf16>) outs(%h : memref<?x128xbf16>)
  return %h, %u : memref<?x128xbf16>, memref<?x128xbf16>
}

// -----

// A projection with a bias, and projections of two inputs: left alone.
// CHECK-LABEL: func.func @bias
// CHECK-NOT: kiln.linear_pair_swiglu
// CHECK-LABEL: func.func @two_inputs
// CHECK-NOT: kiln.linear_pair_swiglu
// CHECK: return
func.func @bias(%x: memref<?x64xbf16>, %wg: memref<128x64xbf16>, %wu: memref<128x64xbf16>,
                %b: memref<128xbf16>, %n: index) -> memref<?x128xbf16> {
  %g = memref.alloc(%n) : memref<?x128xbf16>
  kiln.linear ins(%x, %wg : memref<?x64xbf16>, memref<128x64xbf16>) bias(%b : memref<128xbf16>) outs(%g : memref<?x128xbf16>)
  %u = memref.alloc(%n) : memref<?x128xbf16>
  kiln.linear ins(%x, %wu : memref<?x64xbf16>, memref<128x64xbf16>) outs(%u : memref<?x128xbf16>)
  %h = memref.alloc(%n) : memref<?x128xbf16>
  kiln.swiglu ins(%g, %u : memref<?x128xbf16>, memref<?x128xbf16>) outs(%h : memref<?x128xbf16>)
  return %h : memref<?x128xbf16>
}
func.func @two_inputs(%x: memref<?x64xbf16>, %y: memref<?x64xbf16>, %wg: memref<128x64xbf16>,
                      %wu: memref<128x64xbf16>, %n: index) -> memref<?x128xbf16> {
  %g = memref.alloc(%n) : memref<?x128xbf16>
  kiln.linear ins(%x, %wg : memref<?x64xbf16>, memref<128x64xbf16>) outs(%g : memref<?x128xbf16>)
  %u = memref.alloc(%n) : memref<?x128xbf16>
  kiln.linear ins(%y, %wu : memref<?x64xbf16>, memref<128x64xbf16>) outs(%u : memref<?x128xbf16>)
  %h = memref.alloc(%n) : memref<?x128xbf16>
  kiln.swiglu ins(%g, %u : memref<?x128xbf16>, memref<?x128xbf16>) outs(%h : memref<?x128xbf16>)
  return %h : memref<?x128xbf16>
}

// -----

// An op with memory effects between the projections and the SwiGLU (it could write the
// input): left alone.
// CHECK-LABEL: func.func @effect_between
// CHECK-NOT: kiln.linear_pair_swiglu
// CHECK: return
func.func @effect_between(%x: memref<?x64xbf16>, %wg: memref<128x64xbf16>, %wu: memref<128x64xbf16>,
                          %n: index) -> memref<?x128xbf16> {
  %g = memref.alloc(%n) : memref<?x128xbf16>
  kiln.linear ins(%x, %wg : memref<?x64xbf16>, memref<128x64xbf16>) outs(%g : memref<?x128xbf16>)
  kiln.add ins(%x, %x : memref<?x64xbf16>, memref<?x64xbf16>) outs(%x : memref<?x64xbf16>)
  %u = memref.alloc(%n) : memref<?x128xbf16>
  kiln.linear ins(%x, %wu : memref<?x64xbf16>, memref<128x64xbf16>) outs(%u : memref<?x128xbf16>)
  %h = memref.alloc(%n) : memref<?x128xbf16>
  kiln.swiglu ins(%g, %u : memref<?x128xbf16>, memref<?x128xbf16>) outs(%h : memref<?x128xbf16>)
  return %h : memref<?x128xbf16>
}

// -----

// A gate the function was given (not an allocation): left alone.
// CHECK-LABEL: func.func @argument_gate
// CHECK-NOT: kiln.linear_pair_swiglu
// CHECK: return
func.func @argument_gate(%x: memref<?x64xbf16>, %wg: memref<128x64xbf16>, %wu: memref<128x64xbf16>,
                         %g: memref<?x128xbf16>, %n: index) -> memref<?x128xbf16> {
  kiln.linear ins(%x, %wg : memref<?x64xbf16>, memref<128x64xbf16>) outs(%g : memref<?x128xbf16>)
  %u = memref.alloc(%n) : memref<?x128xbf16>
  kiln.linear ins(%x, %wu : memref<?x64xbf16>, memref<128x64xbf16>) outs(%u : memref<?x128xbf16>)
  %h = memref.alloc(%n) : memref<?x128xbf16>
  kiln.swiglu ins(%g, %u : memref<?x128xbf16>, memref<?x128xbf16>) outs(%h : memref<?x128xbf16>)
  return %h : memref<?x128xbf16>
}

// -----

// Gate and up freed after the SwiGLU still merge; up read through a view does not.
// CHECK-LABEL: func.func @dealloc
// CHECK: kiln.linear_pair_swiglu
// CHECK-NEXT: memref.dealloc
// CHECK-NEXT: memref.dealloc
// CHECK-LABEL: func.func @through_view
// CHECK-NOT: kiln.linear_pair_swiglu
// CHECK: return
func.func @dealloc(%x: memref<?x64xbf16>, %wg: memref<128x64xbf16>, %wu: memref<128x64xbf16>,
                   %n: index) -> memref<?x128xbf16> {
  %g = memref.alloc(%n) : memref<?x128xbf16>
  kiln.linear ins(%x, %wg : memref<?x64xbf16>, memref<128x64xbf16>) outs(%g : memref<?x128xbf16>)
  %u = memref.alloc(%n) : memref<?x128xbf16>
  kiln.linear ins(%x, %wu : memref<?x64xbf16>, memref<128x64xbf16>) outs(%u : memref<?x128xbf16>)
  %h = memref.alloc(%n) : memref<?x128xbf16>
  kiln.swiglu ins(%g, %u : memref<?x128xbf16>, memref<?x128xbf16>) outs(%h : memref<?x128xbf16>)
  memref.dealloc %g : memref<?x128xbf16>
  memref.dealloc %u : memref<?x128xbf16>
  return %h : memref<?x128xbf16>
}
func.func @through_view(%x: memref<4x64xbf16>, %wg: memref<128x64xbf16>, %wu: memref<128x64xbf16>)
    -> (memref<4x128xbf16>, memref<2x128xbf16, strided<[128, 1]>>) {
  %g = memref.alloc() : memref<4x128xbf16>
  kiln.linear ins(%x, %wg : memref<4x64xbf16>, memref<128x64xbf16>) outs(%g : memref<4x128xbf16>)
  %u = memref.alloc() : memref<4x128xbf16>
  kiln.linear ins(%x, %wu : memref<4x64xbf16>, memref<128x64xbf16>) outs(%u : memref<4x128xbf16>)
  %h = memref.alloc() : memref<4x128xbf16>
  kiln.swiglu ins(%g, %u : memref<4x128xbf16>, memref<4x128xbf16>) outs(%h : memref<4x128xbf16>)
  %v = memref.subview %u[0, 0] [2, 128] [1, 1] : memref<4x128xbf16> to memref<2x128xbf16, strided<[128, 1]>>
  return %h, %v : memref<4x128xbf16>, memref<2x128xbf16, strided<[128, 1]>>
}

// -----

// An output of a dynamic shape over a static gate and up (kiln.swiglu takes compatible
// shapes; kiln.linear_pair_swiglu one type), and weights of two shapes: left alone.
// CHECK-LABEL: func.func @mixed_shapes
// CHECK-NOT: kiln.linear_pair_swiglu
// CHECK-LABEL: func.func @two_weight_shapes
// CHECK-NOT: kiln.linear_pair_swiglu
// CHECK: return
func.func @mixed_shapes(%x: memref<4x64xbf16>, %wg: memref<128x64xbf16>, %wu: memref<128x64xbf16>,
                        %n: index) -> memref<?x128xbf16> {
  %g = memref.alloc() : memref<4x128xbf16>
  kiln.linear ins(%x, %wg : memref<4x64xbf16>, memref<128x64xbf16>) outs(%g : memref<4x128xbf16>)
  %u = memref.alloc() : memref<4x128xbf16>
  kiln.linear ins(%x, %wu : memref<4x64xbf16>, memref<128x64xbf16>) outs(%u : memref<4x128xbf16>)
  %h = memref.alloc(%n) : memref<?x128xbf16>
  kiln.swiglu ins(%g, %u : memref<4x128xbf16>, memref<4x128xbf16>) outs(%h : memref<?x128xbf16>)
  return %h : memref<?x128xbf16>
}
func.func @two_weight_shapes(%x: memref<4x64xbf16>, %wg: memref<128x64xbf16>, %wu: memref<?x64xbf16>)
    -> memref<4x128xbf16> {
  %g = memref.alloc() : memref<4x128xbf16>
  kiln.linear ins(%x, %wg : memref<4x64xbf16>, memref<128x64xbf16>) outs(%g : memref<4x128xbf16>)
  %u = memref.alloc() : memref<4x128xbf16>
  kiln.linear ins(%x, %wu : memref<4x64xbf16>, memref<?x64xbf16>) outs(%u : memref<4x128xbf16>)
  %h = memref.alloc() : memref<4x128xbf16>
  kiln.swiglu ins(%g, %u : memref<4x128xbf16>, memref<4x128xbf16>) outs(%h : memref<4x128xbf16>)
  return %h : memref<4x128xbf16>
}

// -----

// The up projection after the SwiGLU (which then read up unwritten): left alone.
// CHECK-LABEL: func.func @projection_after
// CHECK: kiln.swiglu ins
// CHECK-NEXT: kiln.linear ins
// CHECK-NOT: kiln.linear_pair_swiglu
func.func @projection_after(%x: memref<4x64xbf16>, %wg: memref<128x64xbf16>, %wu: memref<128x64xbf16>)
    -> memref<4x128xbf16> {
  %g = memref.alloc() : memref<4x128xbf16>
  kiln.linear ins(%x, %wg : memref<4x64xbf16>, memref<128x64xbf16>) outs(%g : memref<4x128xbf16>)
  %u = memref.alloc() : memref<4x128xbf16>
  %h = memref.alloc() : memref<4x128xbf16>
  kiln.swiglu ins(%g, %u : memref<4x128xbf16>, memref<4x128xbf16>) outs(%h : memref<4x128xbf16>)
  kiln.linear ins(%x, %wu : memref<4x64xbf16>, memref<128x64xbf16>) outs(%u : memref<4x128xbf16>)
  return %h : memref<4x128xbf16>
}
