// kv_append: scatter the step's new K/V (or MLA latents) into their cache pages.
// One thread copies one 16-byte chunk; tokens may belong to any sequence and position.
// FP8 pools: one thread quantizes 8 values (one 16-byte source chunk) to 8 bytes.
// f16 pools (bf16 K/V): one thread rounds 8 values to fp16 (nearest even), saturating at
// +-65504 (infinities too) with NaN kept: 16 bytes in, 16 bytes out.
#include "DecodeKernels.h"
#include "DecodeArgs.h"

#include "Fp8Device.cuh"
#include "Pdl.cuh"

#include "kiln/Kernels/Decode.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <stdint.h>

namespace kiln::decode {

// What a thread does to its chunk on the way into the pool.
enum class AppendKind { copy, fp8, f16 };

template <AppendKind KIND> __global__ void kvAppendDevice(const KvAppendArgs args) {
  // Launched chained to the kernel before it (DecodeApi.cpp): nothing is read before it
  // finished. The decode kernel after it may start (it waits too).
  kiln::kernels::pdlLaunchDependents();
  kiln::kernels::pdlWait();
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
  kiln::kernels::pdlLaunchDependents();
  kiln::kernels::pdlWait(); // chained, as kvAppendDevice
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

// The power-of-two scale of an FP8 latent group whose largest magnitude is amax: the
// smallest 2^e with amax / 2^e <= 448 (e4m3's largest finite value), 1 for amax 0 (and for
// non-finite amax, whose values then saturate). A power of two keeps e4m3 * scale exact
// in bf16 (the decode kernels widen to bf16) and the division exact.
__device__ __forceinline__ float mlaFp8Scale(float amax) {
  if (!(amax > 0.f) || !(amax < INFINITY))
    return 1.f;
  int e;
  const float m = frexpf(amax / 448.f, &e);             // amax / 448 = m * 2^e, m in [0.5, 1)
  return ldexpf(1.f, max(m == 0.5f ? e - 1 : e, -126)); // inv stays finite
}

// FP8 latent pool (656-byte tokens, Decode.h): one warp a token. Lane l quantizes latent
// chunks l and l + 32 (8 values each; 16 lanes cover a 128-value group, so the group's
// amax is a 16-lane shuffle reduction); lanes 0..7 copy the rope chunks; lanes 0..3 of a
// group's first half store its scale.
__global__ void mlaKvAppendFp8Device(const MlaKvAppendArgs args) {
  kiln::kernels::pdlLaunchDependents();
  kiln::kernels::pdlWait(); // chained, as kvAppendDevice
  constexpr int kPage = KILN_MLA_PAGE_SIZE;
  const long long warpId = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warpId >= args.numTokens)
    return;
  const int token = static_cast<int>(warpId);
  const int b = args.tokenBatch[token], pos = args.tokenPos[token];
  if (b < 0 || b >= args.batch || pos < 0 || pos >= args.maxPages * kPage)
    return; // uniform over the warp: the shuffles below see all 32 lanes or none
  const int page = args.blockTable[static_cast<size_t>(b) * args.maxPages + pos / kPage];
  if (page < 0 || page >= args.numPages)
    return;
  unsigned char *dst = reinterpret_cast<unsigned char *>(args.cache) +
                       (static_cast<size_t>(page) * kPage + pos % kPage) * KILN_MLA_FP8_TOKEN_BYTES;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int ch = lane + 32 * half; // group ch / 16: lanes 0-15 -> 0 / 2, 16-31 -> 1 / 3
    const uint4 raw = *reinterpret_cast<const uint4 *>(args.kvC + token * args.kvCStride + ch * 8);
    const __nv_bfloat162 *pairs = reinterpret_cast<const __nv_bfloat162 *>(&raw);
    float2 f[4];
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[i] = __bfloat1622float2(pairs[i]);
      amax = fmaxf(amax, fmaxf(fabsf(f[i].x), fabsf(f[i].y)));
    }
#pragma unroll
    for (int offset = 8; offset >= 1; offset /= 2)
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    const float scale = mlaFp8Scale(amax), inv = 1.f / scale;
    uint2 packed;
    uint16_t *bytePairs = reinterpret_cast<uint16_t *>(&packed);
#pragma unroll
    for (int i = 0; i < 4; ++i)
      bytePairs[i] = __nv_cvt_float2_to_fp8x2(make_float2(f[i].x * inv, f[i].y * inv),
                                              __NV_SATFINITE, __NV_E4M3);
    *reinterpret_cast<uint2 *>(dst + ch * 8) = packed;
    if (lane % 16 == 0)
      reinterpret_cast<float *>(dst + KILN_MLA_FP8_SCALE_OFFSET)[ch / 16] = scale;
  }
  if (lane < KILN_MLA_ROPE_DIM / 8)
    *reinterpret_cast<uint4 *>(dst + KILN_MLA_FP8_ROPE_OFFSET + lane * 16) =
        *reinterpret_cast<const uint4 *>(args.kPe + token * args.kPeStride + lane * 8);
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
const void *mlaKvAppendFp8Kernel() { return reinterpret_cast<const void *>(&mlaKvAppendFp8Device); }
const void *mlaExpandKeysKernel() {
  return reinterpret_cast<const void *>(&mlaExpandKeysDevice);
}

} // namespace kiln::decode
