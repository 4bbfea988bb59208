// Host side of Tma.cuh: encodes the CUtensorMap of a row-major bf16 matrix for 2-D tile
// loads with the 128-byte swizzle that wgmma's K-major operands use (Wgmma.cuh).
// cuTensorMapEncodeTiled is a driver function; the runtime hands out its entry point,
// so nothing links libcuda.
#ifndef KILN_LIB_KERNELS_COMMON_TENSORMAP_H
#define KILN_LIB_KERNELS_COMMON_TENSORMAP_H

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace kiln::kernels::sm90 {

// The driver's cuTensorMapEncodeTiled, through the runtime (null where the driver lacks it).
inline PFN_cuTensorMapEncodeTiled_v12000 tensorMapEncoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void *fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    return cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                            &found) == cudaSuccess &&
                   found == cudaDriverEntryPointSuccess
               ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn)
               : nullptr;
  }();
  return encode;
}

// The map of a [tokens, heads, cols] tensor of 16-bit elements (bf16 or fp16) at `base`,
// with `headStride` and `tokenStride` in elements (multiples of 8), loading boxes of
// `boxRows` tokens x one head x 64 columns (128 bytes, one swizzle row) with the 128-byte
// swizzle. Rows past `tokens` read zeros. cudaErrorInvalidValue for shapes the hardware
// refuses, cudaErrorNotSupported without the driver entry point.
inline cudaError_t encodeSwizzledMap3d(CUtensorMap *map, bool bf16, const void *base,
                                       uint64_t tokens, uint64_t heads, uint64_t cols,
                                       uint64_t headStride, uint64_t tokenStride,
                                       uint32_t boxRows) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensorMapEncoder();
  if (!encode)
    return cudaErrorNotSupported;
  const cuuint64_t dims[3] = {cols, heads, tokens};
  const cuuint64_t strides[2] = {headStride * 2, tokenStride * 2};
  const cuuint32_t box[3] = {64, 1, boxRows}, elementStrides[3] = {1, 1, 1};
  return encode(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3,
                const_cast<void *>(base), dims, strides, box, elementStrides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS
             ? cudaSuccess
             : cudaErrorInvalidValue;
}

// The map of `rows` x `cols` bf16 at `base` (row stride `cols`; cols x 2 bytes a multiple
// of 16, base 16-byte aligned) loading boxes of `boxRows` rows x 64 columns (128 bytes, one
// swizzle row). cudaErrorInvalidValue for shapes the hardware refuses.
inline cudaError_t encodeBf16SwizzledMap(CUtensorMap *map, const void *base, uint64_t rows,
                                         uint64_t cols, uint32_t boxRows) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensorMapEncoder();
  if (!encode)
    return cudaErrorNotSupported;
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {cols * 2};
  const cuuint32_t box[2] = {64, boxRows}, elementStrides[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void *>(base), dims, strides,
                box, elementStrides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS
             ? cudaSuccess
             : cudaErrorInvalidValue;
}

} // namespace kiln::kernels::sm90

#endif
