// Programmatic dependent launch, the device side (sm_90+; no-ops below, and when the
// launch did not ask for it). pdlWait: block until the grids this one may overlap have
// finished and their writes are visible; nothing written by an earlier kernel may be read
// before it. pdlLaunchDependents: let the next kernel's blocks start launching (they still
// wait). The host side is ProgrammaticLaunch.h.
#ifndef KILN_LIB_KERNELS_COMMON_PDL_CUH
#define KILN_LIB_KERNELS_COMMON_PDL_CUH

namespace kiln::kernels {

__device__ __forceinline__ void pdlWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdlLaunchDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

} // namespace kiln::kernels

#endif // KILN_LIB_KERNELS_COMMON_PDL_CUH
