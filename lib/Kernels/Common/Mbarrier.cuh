// sm_90 shared-memory mbarriers for producer/consumer hand-offs inside a CTA: init,
// arrive, arrive on the completion of this thread's cp.async copies, and the parity wait;
// plus the warpgroup register reallocation that lets a producer warpgroup give its
// registers to the consumers. Barriers are named by their shared address (smemAddress).
//
// Under the CTA emulator (test/Kernels/Common/CtaEmulator.h, KILN_CTA_EMULATION) these
// are the emulator's.
#ifndef KILN_LIB_KERNELS_COMMON_MBARRIER_CUH
#define KILN_LIB_KERNELS_COMMON_MBARRIER_CUH

#include <stdint.h>

namespace kiln::kernels::sm90 {

#ifndef KILN_CTA_EMULATION

// Expects `count` arrivals a phase.
__device__ __forceinline__ void mbarrierInit(uint32_t bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbarrierArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// One arrival once every cp.async this thread issued before has landed (the barrier's
// count includes it: noinc).
__device__ __forceinline__ void mbarrierArriveOnCopies(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// Waits until the phase with parity `parity` has completed.
__device__ __forceinline__ void mbarrierWait(uint32_t bar, uint32_t parity) {
  asm volatile("{\n.reg .pred done;\nWAIT:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               "@!done bra WAIT;\n}\n" ::"r"(bar),
               "r"(parity)
               : "memory");
}
// Waits for every cp.async this thread issued.
__device__ __forceinline__ void cpAsyncWaitAll() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}
// The warpgroup's registers per thread from here on (setmaxnreg; all its threads).
template <int Registers> __device__ __forceinline__ void shrinkRegisters() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Registers));
}
template <int Registers> __device__ __forceinline__ void growRegisters() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Registers));
}

#endif // KILN_CTA_EMULATION

} // namespace kiln::kernels::sm90

#endif
