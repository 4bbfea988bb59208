#include "GqaDecodeKernel.cuh"
#include "GqaDecodeInstances.inc"
KILN_GQA_INSTANCES(__nv_bfloat16, Bf16)
