// kv_append: scatter the step's new K/V (or MLA latents) into their cache pages.
// One thread copies one 16-byte chunk; tokens may belong to any sequence and position.
// FP8 pools: one thread quantizes 8 values (one 16-byte source chunk) to 8 bytes.
// f16 pools (bf16 K/V): one thread rounds 8 values to fp16 (nearest even), saturating at
// +-65504 (infinities too) with NaN kept: 16 bytes in, 16 bytes out.
#include "DecodeKernels.h"
#include "DecodeArgs.h"

#include "Fp8Device.cuh"

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <stdint.h>

namespace kiln::decode {

// What a thread does to its chunk on the way into the pool.
enum class AppendKind { copy, fp8, f16 };

template <AppendKind KIND> __global__ void kvAppendDevice(const KvAppendArgs args) {
  constexpr bool FP8 = KIND == AppendKind::fp8;
  const int chunksPerRow = args.headDim / 8;
  const long long perToken = 2LL * args.kvHeads * chunksPerRow;
  const long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= perToken * args.numTokens)
    return;
  const int token = static_cast<int>(idx / perToken);
  const int rem = static_cast<int>(idx % perToken);
  const int half = rem / (args.kvHeads * chunksPerRow); // 0 = K, 1 = V
  const int within = rem % (args.kvHeads * chunksPerRow); // head * chunksPerRow + chunk
  const int b = args.tokenBatch[token], pos = args.tokenPos[token];
  if (b < 0 || b >= args.batch || pos < 0 || pos >= args.maxPages * args.pageSize)
    return;
  const int page = args.blockTable[static_cast<size_t>(b) * args.maxPages + pos / args.pageSize];
  if (page < 0 || page >= args.numPages)
    return;
  const uint16_t *src = (half ? args.v : args.k) +
                        token * (half ? args.vStride : args.kStride) + within * 8;
  const size_t element =
      ((static_cast<size_t>(page) * 2 + half) * args.pageSize + pos % args.pageSize) *
          args.kvHeads * args.headDim +
      within * 8;
  if constexpr (FP8) {
    const float *scales = half ? args.vScale : args.kScale;
    const float inv = scales ? 1.f / scales[within / chunksPerRow] : 1.f;
    const uint4 raw = *reinterpret_cast<const uint4 *>(src);
    const __nv_bfloat162 *pairs = reinterpret_cast<const __nv_bfloat162 *>(&raw);
    uint2 packed;
    uint16_t *bytePairs = reinterpret_cast<uint16_t *>(&packed);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float2 f = __bfloat1622float2(pairs[i]);
      f.x *= inv;
      f.y *= inv;
      bytePairs[i] = __nv_cvt_float2_to_fp8x2(f, __NV_SATFINITE, __NV_E4M3);
    }
    *reinterpret_cast<uint2 *>(static_cast<uint8_t *>(args.cache) + element) = packed;
  } else if constexpr (KIND == AppendKind::f16) {
    *reinterpret_cast<uint4 *>(static_cast<uint16_t *>(args.cache) + element) =
        kiln::kernels::bf16x8ToFp16Sat(*reinterpret_cast<const uint4 *>(src));
  } else {
    *reinterpret_cast<uint4 *>(static_cast<uint16_t *>(args.cache) + element) =
        *reinterpret_cast<const uint4 *>(src);
  }
}

__global__ void mlaKvAppendDevice(const MlaKvAppendArgs args) {
  constexpr int kChunks = 576 / 8, kLatentChunks = 512 / 8, kPage = 64;
  const long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<long long>(kChunks) * args.numTokens)
    return;
  const int token = static_cast<int>(idx / kChunks), ch = static_cast<int>(idx % kChunks);
  const int b = args.tokenBatch[token], pos = args.tokenPos[token];
  if (b < 0 || b >= args.batch || pos < 0 || pos >= args.maxPages * kPage)
    return;
  const int page = args.blockTable[static_cast<size_t>(b) * args.maxPages + pos / kPage];
  if (page < 0 || page >= args.numPages)
    return;
  const uint16_t *src = ch < kLatentChunks
                            ? args.kvC + token * args.kvCStride + ch * 8
                            : args.kPe + token * args.kPeStride + (ch - kLatentChunks) * 8;
  uint16_t *dst = args.cache + (static_cast<size_t>(page) * kPage + pos % kPage) * 576 + ch * 8;
  *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(src);
}

// One thread per 16-byte chunk of an expanded key row.
__global__ void mlaExpandKeysDevice(const MlaExpandKeysArgs args) {
  const int rowChunks = (args.nope + args.rope) / 8, nopeChunks = args.nope / 8;
  const long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<long long>(args.numTokens) * args.heads * rowChunks)
    return;
  const long long row = idx / rowChunks; // token * heads + head
  const int ch = static_cast<int>(idx % rowChunks);
  const long long token = row / args.heads;
  const int head = static_cast<int>(row % args.heads);
  const uint16_t *src =
      ch < nopeChunks
          ? args.kv + token * args.heads * (args.nope + args.vDim) +
                static_cast<long long>(head) * (args.nope + args.vDim) + ch * 8
          : args.kPe + token * args.rope + (ch - nopeChunks) * 8;
  *reinterpret_cast<uint4 *>(args.k + row * (args.nope + args.rope) + ch * 8) =
      *reinterpret_cast<const uint4 *>(src);
}

const void *kvAppendKernel() {
  return reinterpret_cast<const void *>(&kvAppendDevice<AppendKind::copy>);
}
const void *kvAppendFp8Kernel() {
  return reinterpret_cast<const void *>(&kvAppendDevice<AppendKind::fp8>);
}
const void *kvAppendF16Kernel() {
  return reinterpret_cast<const void *>(&kvAppendDevice<AppendKind::f16>);
}
const void *mlaKvAppendKernel() { return reinterpret_cast<const void *>(&mlaKvAppendDevice); }
const void *mlaExpandKeysKernel() {
  return reinterpret_cast<const void *>(&mlaExpandKeysDevice);
}

} // namespace kiln::decode
