#include "GqaDecodeKernel.cuh"
#include "GqaDecodeInstances.inc"
KILN_GQA_INSTANCES(__half, F16)
