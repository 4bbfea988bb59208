// Hopper (sm_90a) warpgroup MMA primitives: shared-memory matrix descriptors for the
// 128-byte-swizzled K-major layout, wgmma.mma_async (bf16 in, fp32 accumulate), its
// fences and groups, and the generic-to-async proxy fence that makes cp.async writes
// visible to it.
//
// The layout (what swizzledOffset writes and the descriptors describe): a tile of R rows
// of 64 bf16 (128 bytes, one K block) is R consecutive 128-byte rows; 16-byte chunk c of
// row r lies at chunk c ^ (r % 8). Eight rows make a 1024-byte swizzle atom, and a tile
// must start on a 1024-byte boundary, because the hardware applies the XOR to address
// bits, not to offsets within the tile. A K16 slice of such a tile (the operand of one
// instruction) starts 32 bytes further per slice; its 8-row groups are 1024 bytes apart
// (the stride byte offset); the leading byte offset is unused for this layout.
//
// Under the CTA emulator (test/Kernels/Common/CtaEmulator.h, KILN_CTA_EMULATION) the
// instructions are the emulator's; the descriptor and offset arithmetic here is shared.
#ifndef KILN_LIB_KERNELS_COMMON_WGMMA_CUH
#define KILN_LIB_KERNELS_COMMON_WGMMA_CUH

#include <stdint.h>

namespace kiln::kernels::sm90 {

constexpr int kSwizzleRowBytes = 128;   // one row of a K block: 64 bf16
constexpr int kSwizzleAtomBytes = 1024; // eight rows: the XOR pattern's period
constexpr int kKBlock = 64;             // bf16 elements of K a tile row holds
constexpr int kWgmmaK = 16;             // K of one instruction
constexpr int kWarpgroupThreads = 128;

// Byte offset of 16-byte chunk `chunk` (0..7) of row `row` in a swizzled tile.
__device__ __forceinline__ uint32_t swizzledOffset(int row, int chunk) {
  return static_cast<uint32_t>(row * kSwizzleRowBytes + ((chunk ^ (row & 7)) << 4));
}

// A 128-byte-swizzle matrix descriptor: the operand at shared address `start` (a
// shared-window address as smemAddress gives; the 14-bit field holds bits 4..17 of it),
// `leading` bytes between core matrices along the leading dimension (used by MN-major
// operands), `stride` bytes between 8-row groups.
__device__ __forceinline__ uint64_t swizzle128Descriptor(uint32_t start, uint32_t leading,
                                                         uint32_t stride) {
  const uint64_t swizzle128 = 1; // layout type, bits 62-63
  return static_cast<uint64_t>((start & 0x3FFFFu) >> 4) |
         (static_cast<uint64_t>((leading >> 4) & 0x3FFFu) << 16) |
         (static_cast<uint64_t>((stride >> 4) & 0x3FFFu) << 32) | (swizzle128 << 62);
}

// The descriptor of the K16 slice `slice` (0..3) of a swizzled K-major tile whose rows
// start at shared address `tile` (1024-byte aligned): slices 32 bytes apart, the leading
// offset unused (16), 8-row groups one swizzle atom apart.
__device__ __forceinline__ uint64_t swizzledDescriptor(uint32_t tile, int slice) {
  return swizzle128Descriptor(tile + slice * kWgmmaK * 2, 16, kSwizzleAtomBytes);
}

#ifndef KILN_CTA_EMULATION

__device__ __forceinline__ uint32_t smemAddress(const void *ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// m64nNk16: d (64 x N, fp32, the warpgroup's N/2 registers a thread) = A (64 x 16, from
// the descriptor a) . B^T (N x 16, descriptor b) + (accumulate ? d : 0).
template <int N> struct WgmmaBf16;
#include "WgmmaBf16.inc"

template <int N>
__device__ __forceinline__ void wgmmaBf16(float (&d)[N / 2], uint64_t a, uint64_t b,
                                          bool accumulate) {
  WgmmaBf16<N>::run(d, a, b, accumulate ? 1 : 0);
}

// Orders this thread's accumulator registers before the wgmmas that follow.
__device__ __forceinline__ void wgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most `Pending` committed groups of this warpgroup are in flight.
template <int Pending> __device__ __forceinline__ void wgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
}
// Keeps the compiler from moving accumulator reads or writes across the asynchronous
// instructions that own the registers.
template <int Regs> __device__ __forceinline__ void pinAccumulators(float (&d)[Regs]) {
#pragma unroll
  for (int i = 0; i < Regs; ++i)
    asm volatile("" : "+f"(d[i])::"memory");
}
// Makes this thread's generic-proxy shared writes (cp.async, st.shared) visible to the
// async proxy wgmma reads through.
__device__ __forceinline__ void fenceProxyAsyncShared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

#endif // KILN_CTA_EMULATION

} // namespace kiln::kernels::sm90

#endif
