// Internal launch functions of the graph glue kernels (GraphKernels.cu). The public
// launchers (GraphLaunchers.cpp) validate every argument first; these only pick a
// variant, launch on `stream` and return cudaGetLastError().
#ifndef KILN_LIB_KERNELS_GRAPH_GRAPHINTERNAL_H
#define KILN_LIB_KERNELS_GRAPH_GRAPHINTERNAL_H

#include "kiln/Kernels/Graph.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace kiln::graph {

// The inverse frequencies of one rope call; travels to the kernel as an argument (1 KiB),
// so the launch needs no device buffer and a CUDA graph captures it with the values.
struct RopeTable {
  float invFreq[KILN_ROPE_MAX_HEAD_DIM / 2];
};

// out[r, :] = src[index[r], :], or zeros where index[r] is outside [0, numSource).
cudaError_t launchGatherRows(const void *src, const int32_t *index, void *out, int64_t rows,
                             int64_t dim, int64_t numSource, cudaStream_t stream);
cudaError_t launchRmsNorm(const void *x, const void *weight, void *out, int64_t rows,
                          int64_t dim, float eps, cudaStream_t stream);
// sum = bf16(a + b), then out = rms_norm(sum): the bits of launchAdd then launchRmsNorm.
cudaError_t launchAddRmsNorm(const void *a, const void *b, const void *weight, void *sum,
                             void *out, int64_t rows, int64_t dim, float eps,
                             cudaStream_t stream);
cudaError_t launchRope(const void *x, const int32_t *positions, void *out, int64_t tokens,
                       int64_t heads, int64_t headDim, const RopeTable &table,
                       float attentionFactor, cudaStream_t stream);
cudaError_t launchAdd(const void *a, const void *b, void *out, int64_t n, cudaStream_t stream);
cudaError_t launchSwiglu(const void *gate, const void *up, void *out, int64_t n,
                         cudaStream_t stream);
cudaError_t launchArgmax(const void *logits, int32_t *out, int64_t rows, int64_t cols,
                         cudaStream_t stream);

} // namespace kiln::graph

#endif
