// A warp's prefix sums of 64 values held two a lane, as the chunked scans (Mamba SSD,
// Gated DeltaNet) sum a chunk's log decays. Plain warp shuffles: the CTA emulator runs it
// on the host as it is.
#ifndef KILN_LIB_KERNELS_COMMON_WARPSCAN_CUH
#define KILN_LIB_KERNELS_COMMON_WARPSCAN_CUH

namespace kiln::kernels {

// Lane l holds values 2l (a0) and 2l + 1 (a1) of the warp's 64. Returns in c0 the sum of
// values 0 .. 2l and in c1 that plus a1 (inclusive prefix sums). Every lane calls it.
__device__ __forceinline__ void warpPairPrefix(float a0, float a1, int lane, float &c0,
                                               float &c1) {
  float run = a0 + a1;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float v = __shfl_up_sync(0xffffffffu, run, o);
    if (lane >= o)
      run += v;
  }
  float before = __shfl_up_sync(0xffffffffu, run, 1);
  if (lane == 0)
    before = 0.0f;
  c0 = before + a0;
  c1 = c0 + a1;
}

} // namespace kiln::kernels

#endif
