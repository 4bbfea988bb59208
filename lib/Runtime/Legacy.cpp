// The legacy bind-based families' shared helpers, kiln_rt_bind, kiln_rt_resource and
// kiln_rt_commit_accepted (see Legacy.h).
#include "Legacy.h"

#include "RuntimeKernels.h"

#include <cmath>
#include <cstdio>

using namespace kiln::rt;

namespace kiln::rt::legacy {

size_t dtypeBytes(int32_t dtype) {
  switch (dtype) {
  case KILN_DTYPE_BF16:
  case KILN_DTYPE_F16: return 2;
  case KILN_DTYPE_F32: return 4;
  }
  return 0;
}


void *lookup(const kiln_rt_context *ctx, int32_t layer, const std::string &name) {
  auto it = ctx->bindings.find({layer, name});
  return it == ctx->bindings.end() ? nullptr : it->second;
}

// Required tensor: error "layer 3: tensor 'dt' is not bound".
kiln_status_t require(const Call &c, const kiln_rt_context *ctx, const char *name, void **out) {
  *out = lookup(ctx, c.layer, name);
  if (!*out)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "tensor '%s' is not bound", name);
  return KILN_OK;
}

// Conv tensors: "conv.<name>" first, then "<name>".
void *lookupConv(const kiln_rt_context *ctx, int32_t layer, const char *name) {
  void *p = lookup(ctx, layer, std::string("conv.") + name);
  return p ? p : lookup(ctx, layer, name);
}

kiln_status_t requireConv(const Call &c, const kiln_rt_context *ctx, const char *name,
                          void **out) {
  *out = lookupConv(ctx, c.layer, name);
  if (!*out)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "tensor 'conv.%s' (or '%s') is not bound", name,
                   name);
  return KILN_OK;
}


kiln_status_t requireAll(const Call &c, const kiln_rt_context *ctx, Named tensors) {
  for (const auto &[name, ptr] : tensors)
    if (kiln_status_t s = require(c, ctx, name, ptr); s != KILN_OK)
      return s;
  return KILN_OK;
}

kiln_status_t requireAllConv(const Call &c, const kiln_rt_context *ctx, Named tensors) {
  for (const auto &[name, ptr] : tensors)
    if (kiln_status_t s = requireConv(c, ctx, name, ptr); s != KILN_OK)
      return s;
  return KILN_OK;
}

// Common checks of every legacy entry point: the call's phase must be the step's.
kiln_status_t checkCall(const Call &c, const kiln_rt_context *ctx, int32_t phase) {
  if (!ctx)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s (%s): layer %d: context is null", c.fn, c.kernel,
                c.layer);
  if (phase != KILN_RT_PHASE_DECODE && phase != KILN_RT_PHASE_PREFILL)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "phase %d is neither decode (0) nor prefill (1)",
                   phase);
  if (c.layer < 0)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "negative layer index");
  if (!ctx->hasBatch)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "no batch set (call kiln_rt_set_batch first)");
  if (phase != ctx->phase)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "called for %s, but the step is a %s step",
                   kiln_rt_phase_name(phase), kiln_rt_phase_name(ctx->phase));
  return KILN_OK;
}


kiln_status_t ensureIndex(const Call &c, kiln_rt_context *ctx, int32_t phase, bool expanded) {
  if (ctx->dry)
    return KILN_OK;
  if (ctx->indexGeneration == ctx->generation && ctx->indexPhase == phase &&
      (!expanded || ctx->indexExpanded))
    return KILN_OK;
  const LegacyBatch &b = ctx->legacy;
  size_t tokens = phase == KILN_RT_PHASE_DECODE ? static_cast<size_t>(b.batch) * b.q_len
                                          : static_cast<size_t>(b.total_tokens);
  auto align = [](size_t n) { return (n * sizeof(int32_t) + 255) / 256 * 256; };
  size_t bytes = 3 * align(tokens) + align(static_cast<size_t>(b.batch) + 1) +
                 (expanded ? align(tokens * static_cast<size_t>(b.max_pages)) : 0);
  if (kiln_status_t s = ensureBuffer(c, ctx, ctx->index, bytes); s != KILN_OK)
    return s;
  char *base = static_cast<char *>(ctx->index.ptr);
  ctx->tokenBatch = reinterpret_cast<int32_t *>(base);
  ctx->tokenPos = reinterpret_cast<int32_t *>(base + align(tokens));
  ctx->tokenLen = reinterpret_cast<int32_t *>(base + 2 * align(tokens));
  ctx->cuExtend = reinterpret_cast<int32_t *>(base + 3 * align(tokens));
  ctx->expandedTable =
      expanded ? reinterpret_cast<int32_t *>(base + 3 * align(tokens) + align(b.batch + 1))
               : nullptr;
  kiln::runtime::TokenIndexArgs a;
  a.num_tokens = static_cast<int32_t>(tokens);
  a.batch = b.batch;
  a.q_len = b.q_len;
  a.seq_lens = b.seq_lens;
  a.cu_seqlens_q = b.cu_seqlens_q;
  a.block_table = b.block_table;
  a.max_pages = b.max_pages;
  a.token_batch = ctx->tokenBatch;
  a.token_pos = ctx->tokenPos;
  a.token_len = ctx->tokenLen;
  a.expanded_table = ctx->expandedTable;
  a.cu_extend = phase == KILN_RT_PHASE_DECODE ? ctx->cuExtend : nullptr;
  cudaError_t e = kiln::runtime::launchTokenIndex(a, phase == KILN_RT_PHASE_PREFILL, ctx->stream);
  ++ctx->launches;
  if (e != cudaSuccess)
    return c.cuda(e, "token index kernel launch");
  ctx->indexGeneration = ctx->generation;
  ctx->indexPhase = phase;
  ctx->indexExpanded = expanded;
  return KILN_OK;
}

float softmaxScale(const kiln_rt_context *ctx, int headDim) {
  float s = ctx->legacy.softmax_scale;
  return s > 0 ? s : static_cast<float>(1.0 / std::sqrt(static_cast<double>(headDim)));
}

// Batch fields every cache access needs (page tables), per family.
kiln_status_t checkPaged(const Call &c, const kiln_rt_context *ctx, int32_t pageSize) {
  const LegacyBatch &b = ctx->legacy;
  if (!b.block_table)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "batch.block_table is null");
  if (b.max_pages < 1 || b.num_pages < 1)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "batch.max_pages %d / num_pages %d must be >= 1",
                   b.max_pages, b.num_pages);
  (void)pageSize;
  return KILN_OK;
}

// Prefill: every prompt must fit in its block-table row.
kiln_status_t checkPrefillFits(const Call &c, const kiln_rt_context *ctx, int32_t pageSize) {
  const LegacyBatch &b = ctx->legacy;
  long long capacity = static_cast<long long>(b.max_pages) * pageSize;
  for (int i = 0; i < b.batch; ++i) {
    int len = ctx->cuHost[i + 1] - ctx->cuHost[i];
    if (len > capacity)
      return c.error(KILN_ERROR_INVALID_ARGUMENT,
                     "prompt %d has %d tokens, more than max_pages * page_size = %lld", i, len,
                     capacity);
    if (len > b.max_q_len)
      return c.error(KILN_ERROR_INVALID_ARGUMENT, "prompt %d has %d tokens > max_q_len %d", i,
                     len, b.max_q_len);
  }
  return KILN_OK;
}

kiln_status_t checkSlots(const Call &c, const kiln_rt_context *ctx) {
  const LegacyBatch &b = ctx->legacy;
  if (b.num_slots < 1)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "batch.num_slots %d must be >= 1", b.num_slots);
  if (!b.slot_indices && b.batch > b.num_slots)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "batch %d > num_slots %d with slot_indices NULL (slot = b)", b.batch,
                   b.num_slots);
  return KILN_OK;
}

// The state slot pointer and index array for sequence b of a one-sequence launch.
void slotFor(const kiln_rt_context *ctx, char *base, uint64_t slotBytes, int b, void **state,
             const int32_t **indices, int32_t *numSlots) {
  if (ctx->legacy.slot_indices) {
    *state = base;
    *indices = ctx->legacy.slot_indices + b;
    *numSlots = ctx->legacy.num_slots;
  } else {
    *state = base + slotBytes * static_cast<uint64_t>(b);
    *indices = nullptr;
    *numSlots = 1;
  }
}

kiln_status_t zeroSlots(const Call &c, kiln_rt_context *ctx, uint64_t offset,
                        uint64_t slotBytes) {
  const LegacyBatch &b = ctx->legacy;
  cudaError_t e = kiln::runtime::launchZeroSlots(at(ctx->base[kCaches], offset), slotBytes, slotBytes,
                                                 b.slot_indices, b.batch, b.num_slots,
                                                 ctx->stream);
  ++ctx->launches;
  if (e != cudaSuccess)
    return c.cuda(e, "state zeroing kernel launch");
  return KILN_OK;
}


// Sequential prefill of a per-slot state (SSM, conv): the step's slots start from zeros
// (new prompts), then one single-sequence, single-token launch per prompt token, in
// order. Exact (the decode kernel's math) but total_tokens launches per layer.

} // namespace kiln::rt::legacy

using namespace kiln::rt::legacy;

extern "C" kiln_status_t kiln_rt_bind(kiln_rt_context_t *ctx, int32_t layer, const char *name,
                                      void *device_ptr) {
  if (!ctx)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_bind: context is null");
  if (!name || !*name)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_bind: layer %d: name is null or empty",
                layer);
  if (layer < 0)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_bind: negative layer %d ('%s')", layer,
                name);
  if (device_ptr)
    ctx->bindings[{layer, name}] = device_ptr;
  else
    ctx->bindings.erase({layer, name});
  return kiln::kernels::ok();
}

extern "C" kiln_status_t kiln_rt_resource(const kiln_rt_context_t *ctx, int32_t layer,
                                          const char *kind, uint64_t *offset, uint64_t *bytes) {
  if (!ctx || !kind)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_resource: context or kind is null");
  auto it = ctx->resources.find({layer, kind});
  if (it == ctx->resources.end())
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_resource: layer %d used no '%s' resource",
                layer, kind);
  if (offset)
    *offset = it->second.offset;
  if (bytes)
    *bytes = it->second.bytes;
  return kiln::kernels::ok();
}

// ---- speculative commit ------------------------------------------------------------------

extern "C" kiln_status_t kiln_rt_commit_accepted(kiln_rt_context_t *ctx,
                                                 const int32_t *accepted) {
  if (!ctx)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_commit_accepted: context is null");
  if (!accepted)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_commit_accepted: accepted is null");
  if (!ctx->hasBatch)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_commit_accepted: no batch set");
  const LegacyBatch &b = ctx->legacy;
  for (int i = 0; i < b.batch; ++i)
    if (accepted[i] < 0 || accepted[i] > b.q_len)
      return fail(KILN_ERROR_INVALID_ARGUMENT,
                  "kiln_rt_commit_accepted: accepted[%d] = %d outside 0..q_len (%d)", i,
                  accepted[i], b.q_len);
  if (ctx->commits.empty() && ctx->recurrentLayers)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "kiln_rt_commit_accepted: the compiled recurrent layers commit at the "
                "sequence's next step, from kiln_rt_batch_t.pending (docs/replay.md); this "
                "call serves the legacy kiln_rt_ssm / kiln_rt_conv only");
  if (ctx->dry || ctx->commits.empty())
    return kiln::kernels::ok();
  Call c{"kiln_rt_commit_accepted", "commit", -1};
  cudaError_t e = cudaSetDevice(ctx->device);
  if (e != cudaSuccess)
    return c.cuda(e, "cudaSetDevice");
  if (kiln_status_t s = ensureBuffer(c, ctx, ctx->accepted, b.batch * sizeof(int32_t));
      s != KILN_OK)
    return s;
  e = cudaMemcpyAsync(ctx->accepted.ptr, accepted, b.batch * sizeof(int32_t),
                      cudaMemcpyHostToDevice, ctx->stream);
  if (e != cudaSuccess)
    return c.cuda(e, "cudaMemcpyAsync of accepted");
  for (const auto &[key, entry] : ctx->commits) {
    if (entry.tokens != b.q_len)
      continue; // written by a step with another batch shape
    e = kiln::runtime::launchCommitSlots(
        at(ctx->base[kCaches], entry.stateOffset), entry.slotBytes, at(ctx->base[kCaches], entry.interOffset),
        entry.slotBytes * entry.tokens,
        entry.slotBytes, entry.slotBytes, b.slot_indices,
        static_cast<const int32_t *>(ctx->accepted.ptr), 1, entry.tokens, b.batch, b.num_slots,
        ctx->stream);
    ++ctx->launches;
    if (e != cudaSuccess)
      return fail(KILN_ERROR_CUDA, "kiln_rt_commit_accepted: layer %d %s: commit launch: %s",
                  key.first, key.second.c_str(), cudaGetErrorString(e));
  }
  return kiln::kernels::ok();
}
