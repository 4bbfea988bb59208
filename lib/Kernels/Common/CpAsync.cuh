// cp.async (sm_80+): 16-byte copies global -> shared that fill a shared ring while the
// warp computes on an older stage, committed and waited on in groups. Each carries a
// "memory" clobber, so plain C++ loads of the ring stay between the wait and the refill
// (the skinny GEMM reads its slots that way). The decode and prefill kernels keep their
// own clobber-free copies (DecodeDevice.cuh, PrefillFmhaKernel.cuh): they read shared
// memory through ldmatrix asm only, and moving them here would change their measured
// code generation without a device run to time it.
#ifndef KILN_LIB_KERNELS_COMMON_CPASYNC_CUH
#define KILN_LIB_KERNELS_COMMON_CPASYNC_CUH

#include <stdint.h>

namespace kiln::kernels {

__device__ __forceinline__ uint32_t sharedAddress(const void *ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// 16 bytes from gmem to the shared address dst, bypassing the L1; the bytes beyond
// srcBytes (0 or 16) are zero-filled, so an operand past the edge reads as 0.
__device__ __forceinline__ void cpAsync16(uint32_t dst, const void *gmem, int srcBytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem),
               "r"(srcBytes)
               : "memory");
}
__device__ __forceinline__ void cpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N> __device__ __forceinline__ void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

} // namespace kiln::kernels

#endif // KILN_LIB_KERNELS_COMMON_CPASYNC_CUH
