// Device helpers of the Kiln runtime; see RuntimeKernels.h.
#include "RuntimeKernels.h"

#include <algorithm>

namespace kiln::runtime {
namespace {

__global__ void tokenIndexKernel(TokenIndexArgs a, bool prefill) {
  int t = blockIdx.x;
  if (!prefill && a.cu_extend && threadIdx.x == 0 && t <= a.batch)
    a.cu_extend[t] = t * a.q_len;
  if (t >= a.num_tokens)
    return;
  int b, pos;
  if (prefill) {
    // Last b with cu_seqlens_q[b] <= t (binary search over batch + 1 offsets).
    int lo = 0, hi = a.batch;
    while (hi - lo > 1) {
      int mid = (lo + hi) / 2;
      if (a.cu_seqlens_q[mid] <= t)
        lo = mid;
      else
        hi = mid;
    }
    b = lo;
    pos = t - a.cu_seqlens_q[b];
  } else {
    b = t / a.q_len;
    pos = a.seq_lens[b] - a.q_len + t % a.q_len;
  }
  if (threadIdx.x == 0) {
    a.token_batch[t] = b;
    a.token_pos[t] = pos;
    if (a.token_len)
      a.token_len[t] = pos + 1;
  }
  if (a.expanded_table)
    for (int p = threadIdx.x; p < a.max_pages; p += blockDim.x)
      a.expanded_table[static_cast<long long>(t) * a.max_pages + p] =
          a.block_table[static_cast<long long>(b) * a.max_pages + p];
}

__global__ void copyFromHostKernel(const uint32_t *__restrict__ src, uint32_t *__restrict__ dst,
                                   size_t words) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < words;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

__global__ void zeroSlotsKernel(unsigned char *base, size_t slotStride, size_t slotBytes,
                                const int32_t *slots, int32_t numSlots) {
  int b = blockIdx.y;
  int slot = slots ? slots[b] : b;
  if (slot < 0 || slot >= numSlots)
    return;
  unsigned char *dst = base + static_cast<size_t>(slot) * slotStride;
  for (size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
       i < slotBytes; i += static_cast<size_t>(gridDim.x) * blockDim.x * 4) {
    if (i + 4 <= slotBytes)
      *reinterpret_cast<uint32_t *>(dst + i) = 0u;
    else
      for (size_t j = i; j < slotBytes; ++j)
        dst[j] = 0;
  }
}

__global__ void commitSlotsKernel(unsigned char *state, size_t stateStride,
                                  const unsigned char *inter, size_t interSlotStride,
                                  size_t interTokenStride, size_t slotBytes,
                                  const int32_t *slots, const int32_t *accepted,
                                  int32_t acceptedStride, int32_t tokens, int32_t numSlots) {
  int b = blockIdx.y;
  int slot = slots ? slots[b] : b;
  int k = accepted[b * acceptedStride];
  if (slot < 0 || slot >= numSlots || k < 1 || k > tokens)
    return;
  unsigned char *dst = state + static_cast<size_t>(slot) * stateStride;
  const unsigned char *src =
      inter + static_cast<size_t>(slot) * interSlotStride + static_cast<size_t>(k - 1) * interTokenStride;
  for (size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
       i < slotBytes; i += static_cast<size_t>(gridDim.x) * blockDim.x * 4) {
    if (i + 4 <= slotBytes)
      *reinterpret_cast<uint32_t *>(dst + i) = *reinterpret_cast<const uint32_t *>(src + i);
    else
      for (size_t j = i; j < slotBytes; ++j)
        dst[j] = src[j];
  }
}

unsigned blocksFor(size_t bytes) {
  size_t blocks = (bytes / 4 + 255) / 256;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 1024 ? 1024 : blocks));
}

} // namespace

cudaError_t launchTokenIndex(const TokenIndexArgs &args, bool prefill, cudaStream_t stream) {
  if (args.num_tokens <= 0)
    return cudaSuccess;
  int blocks = args.num_tokens;
  if (!prefill && args.cu_extend && args.batch + 1 > blocks)
    blocks = args.batch + 1;
  tokenIndexKernel<<<blocks, 64, 0, stream>>>(args, prefill);
  return cudaGetLastError();
}

cudaError_t launchCopyFromHost(const uint32_t *src, uint32_t *dst, size_t words,
                               cudaStream_t stream) {
  if (words == 0)
    return cudaSuccess;
  // Each thread's reads cross the host link: many in flight hide its latency.
  const unsigned blocks = static_cast<unsigned>(std::min<size_t>((words + 255) / 256, 132));
  copyFromHostKernel<<<blocks, 256, 0, stream>>>(src, dst, words);
  return cudaGetLastError();
}

cudaError_t launchZeroSlots(void *base, size_t slotStride, size_t slotBytes,
                            const int32_t *slots, int32_t batch, int32_t numSlots,
                            cudaStream_t stream) {
  if (batch <= 0 || slotBytes == 0)
    return cudaSuccess;
  dim3 grid(blocksFor(slotBytes), static_cast<unsigned>(batch));
  zeroSlotsKernel<<<grid, 256, 0, stream>>>(static_cast<unsigned char *>(base), slotStride,
                                            slotBytes, slots, numSlots);
  return cudaGetLastError();
}

cudaError_t launchCommitSlots(void *state, size_t stateStride, const void *inter,
                              size_t interSlotStride, size_t interTokenStride, size_t slotBytes,
                              const int32_t *slots, const int32_t *accepted,
                              int32_t acceptedStride, int32_t tokens, int32_t batch,
                              int32_t numSlots, cudaStream_t stream) {
  if (batch <= 0 || slotBytes == 0)
    return cudaSuccess;
  dim3 grid(blocksFor(slotBytes), static_cast<unsigned>(batch));
  commitSlotsKernel<<<grid, 256, 0, stream>>>(
      static_cast<unsigned char *>(state), stateStride,
      static_cast<const unsigned char *>(inter), interSlotStride, interTokenStride, slotBytes,
      slots, accepted, acceptedStride, tokens, numSlots);
  return cudaGetLastError();
}

} // namespace kiln::runtime
