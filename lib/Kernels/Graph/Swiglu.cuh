// SwiGLU as Hugging Face computes it in bf16: act_fn(gate) is a bf16 tensor (silu in fp32,
// rounded), then multiplied by up. One definition for the elementwise kernel
// (GraphKernels.cu) and the grouped GEMM's fused gate/up epilogue (GroupedGemmSm90.cuh),
// so that both paths round alike. Host-compatible (the CTA emulator runs it).
#ifndef KILN_LIB_KERNELS_GRAPH_SWIGLU_CUH
#define KILN_LIB_KERNELS_GRAPH_SWIGLU_CUH

#include <cuda_bf16.h>

#include <math.h>

namespace kiln::graph {

// gate and up are bf16 values; the caller rounds the result to bf16.
__device__ __forceinline__ float swigluOfBf16(float gate, float up) {
  const float silu = gate / (1.0f + expf(-gate));
  return __bfloat162float(__float2bfloat16_rn(silu)) * up;
}

} // namespace kiln::graph

#endif
