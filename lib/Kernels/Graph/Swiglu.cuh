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

// gpt-oss's clamped gated activation (transformers' GptOssExperts), each step one bf16
// PyTorch op (fp32 math, rounded to bf16): gate.clamp(max=limit), up.clamp(-limit,
// limit), glu = gate * sigmoid(gate * alpha), (up + 1) * glu. gate and up are bf16 values;
// the caller rounds the result. A NaN passes the clamps, as in torch.clamp.
__device__ __forceinline__ float clampedSwigluOfBf16(float gate, float up, float alpha,
                                                     float limit) {
  const auto round = [](float v) { return __bfloat162float(__float2bfloat16_rn(v)); };
  const float g = round(gate > limit ? limit : gate);
  const float u = round(up > limit ? limit : (up < -limit ? -limit : up));
  const float z = round(g * alpha);
  const float sigmoid = round(1.0f / (1.0f + expf(-z)));
  const float glu = round(g * sigmoid);
  return round(u + 1.0f) * glu;
}

} // namespace kiln::graph

#endif
