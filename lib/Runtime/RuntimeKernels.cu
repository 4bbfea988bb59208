// Device helpers of the Kiln runtime; see RuntimeKernels.h.
#include "RuntimeKernels.h"

#include <algorithm>
#include <vector>

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

// cudaMemsetAsync's semantics: `height` rows `pitch` bytes apart, each `width` elements of
// `elementSize` bytes (1, 2 or 4) set to the low bytes of `value`.
__global__ void fillKernel(unsigned char *dst, size_t pitch, unsigned value, unsigned elementSize,
                           size_t width, size_t height) {
  const size_t total = width * height;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    // One row (cuBLASLt's memsets): no division.
    unsigned char *element =
        height == 1 ? dst + i * elementSize : dst + (i / width) * pitch + (i % width) * elementSize;
    if (elementSize == 4)
      *reinterpret_cast<uint32_t *>(element) = value;
    else if (elementSize == 2)
      *reinterpret_cast<uint16_t *>(element) = static_cast<uint16_t>(value);
    else
      *element = static_cast<unsigned char>(value);
  }
}

// A node's edges on one side: the nodes at their other end and the edges' data.
struct Edges {
  std::vector<cudaGraphNode_t> nodes;
  std::vector<cudaGraphEdgeData> data;
};

cudaError_t edgesOf(cudaGraphNode_t node, bool incoming, Edges &edges) {
  auto query = incoming ? cudaGraphNodeGetDependencies : cudaGraphNodeGetDependentNodes;
  size_t count = 0;
  if (cudaError_t e = query(node, nullptr, nullptr, &count); e != cudaSuccess)
    return e;
  edges.nodes.resize(count);
  edges.data.resize(count);
  return count ? query(node, edges.nodes.data(), edges.data.data(), &count) : cudaSuccess;
}

// A kernel node doing what the memset node `node` does, wired to the same nodes.
cudaError_t replaceMemsetNode(cudaGraph_t graph, cudaGraphNode_t node) {
  cudaMemsetParams memset{};
  Edges in, out;
  cudaError_t e = cudaGraphMemsetNodeGetParams(node, &memset);
  if (e == cudaSuccess)
    e = edgesOf(node, /*incoming=*/true, in);
  if (e == cudaSuccess)
    e = edgesOf(node, /*incoming=*/false, out);
  if (e != cudaSuccess)
    return e;
  if (memset.elementSize != 1 && memset.elementSize != 2 && memset.elementSize != 4)
    return cudaErrorInvalidValue;
  unsigned char *dst = static_cast<unsigned char *>(memset.dst);
  size_t pitch = memset.height > 1 ? memset.pitch : 0;
  unsigned value = memset.value, elementSize = memset.elementSize;
  size_t width = memset.width, height = memset.height;
  void *args[] = {&dst, &pitch, &value, &elementSize, &width, &height};
  const size_t blocks = std::min<size_t>((width * height + 255) / 256, 1024);
  cudaKernelNodeParams kernel{};
  kernel.func = reinterpret_cast<void *>(fillKernel);
  kernel.gridDim = dim3(static_cast<unsigned>(std::max<size_t>(blocks, 1)));
  kernel.blockDim = dim3(256);
  kernel.kernelParams = args;
  cudaGraphNode_t fill = nullptr;
  if ((e = cudaGraphAddKernelNode(&fill, graph, nullptr, 0, &kernel)) != cudaSuccess)
    return e;
  if (!in.nodes.empty()) {
    std::vector<cudaGraphNode_t> to(in.nodes.size(), fill);
    if ((e = cudaGraphAddDependencies(graph, in.nodes.data(), to.data(), in.data.data(),
                                      in.nodes.size())) != cudaSuccess)
      return e;
  }
  if (!out.nodes.empty()) {
    std::vector<cudaGraphNode_t> from(out.nodes.size(), fill);
    if ((e = cudaGraphAddDependencies(graph, from.data(), out.nodes.data(), out.data.data(),
                                      out.nodes.size())) != cudaSuccess)
      return e;
  }
  return cudaGraphDestroyNode(node);
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

cudaError_t replaceMemsetNodes(cudaGraph_t graph, size_t *replaced) {
  *replaced = 0;
  size_t count = 0;
  if (cudaError_t e = cudaGraphGetNodes(graph, nullptr, &count); e != cudaSuccess)
    return e;
  std::vector<cudaGraphNode_t> nodes(count);
  if (count)
    if (cudaError_t e = cudaGraphGetNodes(graph, nodes.data(), &count); e != cudaSuccess)
      return e;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    if (cudaError_t e = cudaGraphNodeGetType(node, &type); e != cudaSuccess)
      return e;
    if (type != cudaGraphNodeTypeMemset)
      continue;
    if (cudaError_t e = replaceMemsetNode(graph, node); e != cudaSuccess)
      return e;
    ++*replaced;
  }
  return cudaSuccess;
}

} // namespace kiln::runtime
