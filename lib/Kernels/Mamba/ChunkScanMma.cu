// ssm_chunk_scan on tensor cores: the launches of ChunkScanMma.cuh's kernel, one
// instantiation a head_dim x state_size of kMmaShapes, and the checks that route a call
// here (chunkScanMmaBytes) instead of to the fp32 kernel in PrefillScan.cu.
#include "ChunkScanMma.cuh"

#include "StatusInternal.h"

#include <cuda_runtime.h>

namespace kiln::kernels::mamba {
namespace {

template <int P, int N, typename StateT>
cudaError_t launchTyped(const ChunkScanArgs &a, int slices, cudaStream_t stream) {
  constexpr int bytes = MmaScanSmem<P, N>::bytes;
  cudaError_t e = cudaFuncSetAttribute(ssmChunkScanMmaKernel<P, N, StateT>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  // Two 32-row slices share an SM only with the largest shared-memory carveout.
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(ssmChunkScanMmaKernel<P, N, StateT>,
                             cudaFuncAttributePreferredSharedMemoryCarveout,
                             cudaSharedmemCarveoutMaxShared);
  if (e != cudaSuccess)
    return e;
  const dim3 grid(static_cast<unsigned>(a.heads), static_cast<unsigned>(a.batch),
                  static_cast<unsigned>(slices));
  ssmChunkScanMmaKernel<P, N, StateT><<<grid, kMmaThreads, bytes, stream>>>(a, a.cuSeqlens);
  return cudaGetLastError();
}

template <int HeadDim, int N, int Slice>
cudaError_t launchShape(const ChunkScanArgs &a, kiln_dtype_t stateDtype, cudaStream_t stream) {
  static_assert(HeadDim % Slice == 0 && Slice % 16 == 0, "whole 16-row tiles per slice");
  constexpr int slices = HeadDim / Slice;
  return stateDtype == KILN_DTYPE_F32 ? launchTyped<Slice, N, float>(a, slices, stream)
                                      : launchTyped<Slice, N, __nv_bfloat16>(a, slices, stream);
}

// The instantiated shapes: Mamba2's default head_dim 64 x state 128 (Nemotron-H) in two
// CTAs of 32 head rows (each a full SM's worth of warps would otherwise wait on its own
// tensor-core latencies: two CTAs share an SM), Nemotron-Nano-9B-v2's 80 x 128 in one,
// and a small 32 x 64. The slice is the head rows of one CTA (every slice of a head
// computes the same C.B^T products).
struct MmaShape {
  int P, N, bytes;
  cudaError_t (*launch)(const ChunkScanArgs &, kiln_dtype_t, cudaStream_t);
};
template <int HeadDim, int N, int Slice> constexpr MmaShape shape() {
  return {HeadDim, N, MmaScanSmem<Slice, N>::bytes, launchShape<HeadDim, N, Slice>};
}
constexpr MmaShape kMmaShapes[] = {shape<64, 128, 32>(), shape<80, 128, 80>(), shape<32, 64, 32>()};

bool aligned16(const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// The instantiation for these arguments' (head_dim, state_size), or null.
const MmaShape *shapeFor(const ChunkScanArgs &a) {
  for (const MmaShape &s : kMmaShapes)
    if (s.P == a.headDim && s.N == a.stateSize)
      return &s;
  return nullptr;
}

} // namespace

int chunkScanMmaBytes(const ChunkScanArgs &a) {
  if (a.half)
    return 0; // the split operands are bf16; fp16 activations take the fp32 kernel
  // cp.async moves 16-byte pieces of token rows.
  if (!aligned16(a.x) || !aligned16(a.B) || !aligned16(a.C) || a.xToken % 8 != 0 ||
      a.bToken % 8 != 0 || a.cToken % 8 != 0 || a.yToken % 2 != 0 ||
      (reinterpret_cast<uintptr_t>(a.out) & 3) != 0)
    return 0;
  const MmaShape *shape = shapeFor(a);
  return shape ? shape->bytes : 0;
}

kiln_status_t launchSsmChunkScanMma(const ChunkScanArgs &a, kiln_dtype_t stateDtype, void *stream) {
  const MmaShape *shape = shapeFor(a);
  if (!shape)
    return fail(KILN_ERROR_UNSUPPORTED,
                "ssm_chunk_scan: no tensor-core variant for head_dim %d x state_size %d", a.headDim,
                a.stateSize);
  const cudaError_t e = shape->launch(a, stateDtype, static_cast<cudaStream_t>(stream));
  if (e != cudaSuccess)
    return fail(KILN_ERROR_CUDA, "ssm_chunk_scan: launch failed: %s", cudaGetErrorString(e));
  return KILN_OK;
}

} // namespace kiln::kernels::mamba
