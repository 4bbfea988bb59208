// Hopper (sm_90) tensor-memory-accelerator loads: a 2-D tile of a global tensor, described
// by a CUtensorMap (TensorMap.h encodes them on the host), copied into shared memory by
// one thread's instruction, its completion counted in bytes on an mbarrier
// (Mbarrier.cuh). The producer announces the bytes a phase expects with
// mbarrierArriveExpectTx; the phase completes when they have all landed.
//
// Under the CTA emulator (test/Kernels/Common/CtaEmulator.h, KILN_CTA_EMULATION) these
// are the emulator's.
#ifndef KILN_LIB_KERNELS_COMMON_TMA_CUH
#define KILN_LIB_KERNELS_COMMON_TMA_CUH

#include <stdint.h>
#ifndef KILN_CTA_EMULATION
#include <cuda.h> // CUtensorMap
#endif

namespace kiln::kernels::sm90 {

#ifndef KILN_CTA_EMULATION

// A tensor map as kernels take it (by value, __grid_constant__); the emulator has its own.
using TensorMap = CUtensorMap;

// This thread's arrival on `bar`, and `bytes` more transaction bytes its phase waits for.
__device__ __forceinline__ void mbarrierArriveExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// The box of `map` at element coordinates (inner, outer) into shared memory at `dst`
// (the map's swizzle applied; 1024-byte aligned for the 128-byte swizzle); its bytes
// complete on `bar`. Coordinates past the tensor's end read zeros, and count.
__device__ __forceinline__ void tmaLoad2d(uint32_t dst, const void *map, int32_t inner,
                                          int32_t outer, uint32_t bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
               "l"(reinterpret_cast<uint64_t>(map)), "r"(inner), "r"(outer), "r"(bar)
               : "memory");
}

// The box of a 3-D `map` at element coordinates (c0 innermost, c1, c2) into shared memory
// at `dst`, as tmaLoad2d (the prefill's [tokens, heads, head_dim] tensors: one head's
// rows, 64 columns a box).
__device__ __forceinline__ void tmaLoad3d(uint32_t dst, const void *map, int32_t c0, int32_t c1,
                                          int32_t c2, uint32_t bar) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
               "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
               : "memory");
}

#endif // KILN_CTA_EMULATION

} // namespace kiln::kernels::sm90

#endif
