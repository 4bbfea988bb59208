// Programmatic dependent launch, the host side: a launch whose kernel may start while the
// previous one in the stream finishes (sm_90+). The kernel must pdlWait() (Pdl.cuh)
// before it reads anything an earlier kernel wrote.
#ifndef KILN_LIB_KERNELS_COMMON_PROGRAMMATICLAUNCH_H
#define KILN_LIB_KERNELS_COMMON_PROGRAMMATICLAUNCH_H

#include <cuda_runtime.h>

namespace kiln::kernels {

// cudaLaunchKernel when !programmatic or on the legacy default stream; otherwise cudaLaunchKernelExC with programmatic
// stream serialization, falling back to the plain launch where the driver or the stream's
// mode refuses the attribute (the kernel's griddepcontrol instructions are then no-ops).
cudaError_t launchMaybeProgrammatic(const void *fn, dim3 grid, dim3 block, void **argv,
                                    size_t smem, cudaStream_t stream, bool programmatic);

} // namespace kiln::kernels

#endif // KILN_LIB_KERNELS_COMMON_PROGRAMMATICLAUNCH_H
