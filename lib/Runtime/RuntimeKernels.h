// Small device helpers of the Kiln runtime (not kernels of the model): the per-step
// token index (which sequence and cache position each token of a step has), state
// zeroing before a prefill, and the commit of accepted speculative states.
// Each function launches asynchronously on `stream` and returns the launch's error.
#ifndef KILN_LIB_RUNTIME_RUNTIMEKERNELS_H
#define KILN_LIB_RUNTIME_RUNTIMEKERNELS_H

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace kiln::runtime {

// Token t of a step (decode: t = b * q_len + i; prefill: packed by cu_seqlens_q) gets
//   token_batch[t] = b, token_pos[t] = its cache position, token_len[t] = position + 1,
//   and, when expanded_table != nullptr, expanded_table[t, :] = block_table[b, :].
// Decode positions are seq_lens[b] - q_len + i; prefill positions t - cu_seqlens_q[b].
// Decode also writes cu_extend[b] = b * q_len for b in 0..batch (when not null).
struct TokenIndexArgs {
  int32_t num_tokens = 0;
  int32_t batch = 0;
  int32_t q_len = 1;          // decode only
  const int32_t *seq_lens = nullptr;      // decode
  const int32_t *cu_seqlens_q = nullptr;  // prefill (device)
  const int32_t *block_table = nullptr;
  int32_t max_pages = 0;
  int32_t *token_batch = nullptr;
  int32_t *token_pos = nullptr;
  int32_t *token_len = nullptr;
  int32_t *expanded_table = nullptr;      // optional [num_tokens, max_pages]
  int32_t *cu_extend = nullptr;           // optional [batch + 1], decode only
};
cudaError_t launchTokenIndex(const TokenIndexArgs &args, bool prefill, cudaStream_t stream);

// Copies `words` 32-bit words from `src`, host memory mapped into the device (pinned,
// cudaHostAllocMapped), to device memory `dst`. A kernel rather than a copy so that a
// CUDA graph holding it stays all-kernel: copy nodes make a graph launch several times
// slower on the host (docs/performance.md, "Host time of a decode step").
cudaError_t launchCopyFromHost(const uint32_t *src, uint32_t *dst, size_t words,
                               cudaStream_t stream);

// Zeroes slot_bytes bytes at base + slot * slot_stride for the slot of every sequence
// b < batch (slot_indices[b], or b when null; out-of-range slots are skipped).
cudaError_t launchZeroSlots(void *base, size_t slot_stride, size_t slot_bytes,
                            const int32_t *slot_indices, int32_t batch, int32_t num_slots,
                            cudaStream_t stream);

// For every sequence b with 1 <= k = accepted[b * accepted_stride] <= tokens: copies
// slot_bytes bytes from inter + slot * inter_slot_stride + (k - 1) * inter_token_stride
// to state + slot * state_slot_stride.
cudaError_t launchCommitSlots(void *state, size_t state_slot_stride, const void *inter,
                              size_t inter_slot_stride, size_t inter_token_stride,
                              size_t slot_bytes, const int32_t *slot_indices,
                              const int32_t *accepted, int32_t accepted_stride,
                              int32_t tokens, int32_t batch, int32_t num_slots,
                              cudaStream_t stream);

// Replaces every memset node of `graph` with a kernel node that writes the same values
// (the same destination, pitch, element size, width and height) and keeps its edges.
// cuBLASLt issues a memset before some of its algorithms (split-K counters, workspace),
// and one node other than a kernel takes a whole graph off the driver's fast launch
// path: the 8B step's graph at 5 x 64 rows launched in 165-307 us with 128 memset nodes,
// against 3-7 us for the same step of kernels only (docs/performance.md). `replaced`
// gets the count. An error leaves the graph partly rewritten: the caller rewrites a copy.
cudaError_t replaceMemsetNodes(cudaGraph_t graph, size_t *replaced);

} // namespace kiln::runtime

#endif
