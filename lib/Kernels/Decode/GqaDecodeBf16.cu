// gqa_decode with bf16 q/out: over a bf16 pool, and over an FP8 e4m3 pool.
#include "GqaDecodeKernel.cuh"
#include "GqaDecodeInstances.inc"
KILN_GQA_INSTANCES(__nv_bfloat16, Bf16)
KILN_GQA_KERNELS(__nv_bfloat16, uint8_t, Bf16Fp8)
