// gqa_decode with bf16 q/out over an f16 pool (fp16 mma; its own translation unit, so a
// -j2 build compiles it next to the others).
#include "GqaDecodeInstances.inc"
#include "GqaDecodeKernel.cuh"
KILN_GQA_KERNELS(__nv_bfloat16, __half, Bf16F16)
