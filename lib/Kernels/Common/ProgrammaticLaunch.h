// Programmatic dependent launch, the host side: a launch whose kernel may start while the
// previous one in the stream finishes (sm_90+). The kernel must pdlWait() (Pdl.cuh)
// before it reads anything an earlier kernel wrote.
#ifndef KILN_LIB_KERNELS_COMMON_PROGRAMMATICLAUNCH_H
#define KILN_LIB_KERNELS_COMMON_PROGRAMMATICLAUNCH_H

#include <cuda_runtime.h>

#include <optional>

namespace kiln::kernels {

// cudaLaunchKernel when !programmatic or on the legacy default stream; otherwise cudaLaunchKernelExC with programmatic
// stream serialization, falling back to the plain launch where the driver or the stream's
// mode refuses the attribute (the kernel's griddepcontrol instructions are then no-ops).
cudaError_t launchMaybeProgrammatic(const void *fn, dim3 grid, dim3 block, void **argv,
                                    size_t smem, cudaStream_t stream, bool programmatic);

// Whether the image of `kernel` that runs on the current device waits at
// griddepcontrol.wait (sm_90+ binary and PTX; below that the wait compiles to nothing and
// the kernel could read its inputs too early). Callers cache the answer once a kernel:
// a process drives devices of one architecture.
bool imageWaits(const void *kernel);

// Whether the small kernels between the GEMMs (norms, RoPE, KV appends, elementwise ops,
// argmax) launched on `stream` are chained to the kernel before them: where the stream
// was marked (markStreamChained, kiln_graph_chain_launches), unless KILN_PDL=1 or 0 (read
// once) or setChainSmallKernels decides for every stream. Measured on an H100
// (docs/performance.md, 2026-12-07): +1.2% on the 8B step at batch 1, whose GEMMs are the
// skinny GEMM, but +0.7% and -2.7% in two runs at batch 16 over cuBLASLt's GEMMs, so the
// runtime marks the streams of contexts whose GEMMs take the skinny form.
bool chainSmallKernels(cudaStream_t stream);
// What decides for every stream over the marks: KILN_PDL=1 or 0, or the last
// setChainSmallKernels (the chained-launch test turns chaining on, then puts back what
// was); nullopt where the marks decide.
std::optional<bool> chainSmallKernelsEverywhere();
void setChainSmallKernels(std::optional<bool> everywhere);
// Marks `stream` chained or not. False where the mark cannot be kept: the legacy default
// stream (never chained) or kMaxChainedStreams streams marked already.
constexpr int kMaxChainedStreams = 64;
bool markStreamChained(cudaStream_t stream, bool chain);

namespace detail {
// Converts the arguments to the kernel's parameter types, so that argv points at values
// of exactly those types, then launches.
template <class... Params, class... Args>
cudaError_t launchConverted(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                            cudaStream_t stream, bool programmatic, const Args &...args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "one argument per kernel parameter");
  auto launch = [&](Params... values) {
    void *argv[] = {static_cast<void *>(&values)..., nullptr};
    return launchMaybeProgrammatic(reinterpret_cast<const void *>(kernel), grid, block, argv,
                                   smem, stream, programmatic);
  };
  return launch(static_cast<Params>(args)...);
}
} // namespace detail

// Launches a kernel that calls pdlWait() before its first global access, chained to the
// kernel before it where its image waits and chaining is on: its CTAs become resident
// during the previous kernel's tail instead of after it. The arguments convert to the
// kernel's parameter types, as in a <<<>>> launch. The image check runs once a kernel.
template <auto Kernel, class... Args>
cudaError_t launchChained(dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          const Args &...args) {
  static const bool waits = imageWaits(reinterpret_cast<const void *>(Kernel));
  return detail::launchConverted(Kernel, grid, block, smem, stream,
                                 waits && chainSmallKernels(stream), args...);
}

} // namespace kiln::kernels

#endif // KILN_LIB_KERNELS_COMMON_PROGRAMMATICLAUNCH_H
