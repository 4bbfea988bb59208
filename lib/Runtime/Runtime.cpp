// The Kiln runtime: context, cache arena, bindings, batch, and the per-family launch
// entry points that compiled models call (include/kiln/Runtime/Runtime.h,
// docs/runtime.md). Every entry point validates everything it can on the host before
// the first launch and turns every failure into a status plus a message
// "<function> (<kernel>): layer <n>: <what failed>"; nothing aborts.
#include "kiln/Runtime/Runtime.h"

#include "kiln/Kernels/Decode.h"
#include "kiln/Kernels/Device.h"
#include "kiln/Kernels/Mamba.h"
#include "kiln/Kernels/Prefill.h"

#include "RuntimeKernels.h"
#include "StatusInternal.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

using kiln::kernels::fail;

namespace {

struct Buffer {
  void *ptr = nullptr;
  size_t bytes = 0;
};

struct Resource {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// A layer whose last decode step wrote intermediate states (rewind-mode speculation).
struct CommitEntry {
  uint64_t stateOffset = 0;
  uint64_t interOffset = 0;
  uint64_t slotBytes = 0;
  int32_t tokens = 0;
};

constexpr size_t kBf16 = 2;

} // namespace

struct kiln_rt_context {
  bool dry = false;
  int device = 0;
  int smemOptin = 0;
  cudaStream_t stream = nullptr;
  void *arena = nullptr;
  uint64_t arenaBytes = 0;

  Buffer split;    // split-KV partials
  Buffer index;    // per-step token index
  Buffer accepted; // commit counts

  std::map<std::pair<int32_t, std::string>, void *> bindings;

  bool hasBatch = false;
  kiln_rt_batch_t batch{};
  std::vector<int32_t> cuHost;
  uint64_t generation = 0;

  // Token index of the current batch (device, inside `index`).
  uint64_t indexGeneration = ~0ull;
  int indexPhase = -1;
  bool indexExpanded = false;
  int32_t *tokenBatch = nullptr, *tokenPos = nullptr, *tokenLen = nullptr;
  int32_t *expandedTable = nullptr, *cuExtend = nullptr;

  std::map<std::pair<int32_t, std::string>, Resource> resources;
  std::map<std::pair<int32_t, std::string>, CommitEntry> commits;
  uint64_t launches = 0;
};

namespace {

// Formats errors of one entry-point call: "<fn> (<kernel>): layer <n>: ...".
struct Call {
  const char *fn;
  const char *kernel;
  int32_t layer;

  kiln_status_t error(kiln_status_t status, const char *format, ...) const
      __attribute__((format(printf, 3, 4))) {
    char what[768];
    va_list args;
    va_start(args, format);
    std::vsnprintf(what, sizeof(what), format, args);
    va_end(args);
    return fail(status, "%s (%s): layer %d: %s", fn, kernel, layer, what);
  }
  // A kernel launcher returned `status`; its own message is kept.
  kiln_status_t launcher(kiln_status_t status, const char *name) const {
    std::string message = kiln_last_error();
    return error(status, "%s failed: %s", name, message.c_str());
  }
  kiln_status_t cuda(cudaError_t e, const char *what) const {
    return error(e == cudaErrorMemoryAllocation ? KILN_ERROR_OUT_OF_MEMORY : KILN_ERROR_CUDA,
                 "%s: %s", what, cudaGetErrorString(e));
  }
};

const char *phaseName(int32_t phase) { return phase == KILN_RT_PREFILL ? "prefill" : "decode"; }

const char *kernelName(int32_t kernel) {
  switch (kernel) {
  case KILN_RT_KERNEL_NONE: return "none";
  case KILN_RT_KERNEL_GQA_DECODE: return "gqa_decode";
  case KILN_RT_KERNEL_PREFILL_FMHA: return "prefill_fmha";
  case KILN_RT_KERNEL_MLA_DECODE: return "mla_decode";
  case KILN_RT_KERNEL_MLA_DECODE_SMALL_SMEM: return "mla_decode_small_smem";
  case KILN_RT_KERNEL_SSM_UPDATE: return "ssm_update";
  case KILN_RT_KERNEL_SSM_UPDATE_SPEC: return "ssm_update_spec";
  case KILN_RT_KERNEL_CONV_UPDATE: return "conv_update";
  case KILN_RT_KERNEL_CONV_UPDATE_SPEC: return "conv_update_spec";
  case KILN_RT_KERNEL_SSM_PREFILL_SEQUENTIAL: return "ssm_prefill_sequential";
  case KILN_RT_KERNEL_CONV_PREFILL_SEQUENTIAL: return "conv_prefill_sequential";
  case KILN_RT_KERNEL_MLA_PREFILL_DECODE: return "mla_prefill_decode";
  }
  return "unknown kernel";
}

size_t dtypeBytes(int32_t dtype) {
  switch (dtype) {
  case KILN_DTYPE_BF16:
  case KILN_DTYPE_F16: return 2;
  case KILN_DTYPE_F32: return 4;
  }
  return 0;
}

char *at(void *base, uint64_t offset) { return static_cast<char *>(base) + offset; }

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

using Named = std::initializer_list<std::pair<const char *, void **>>;

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

// Common checks of every launch entry point.
kiln_status_t checkCall(const Call &c, const kiln_rt_context *ctx, int32_t phase) {
  if (!ctx)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s (%s): layer %d: context is null", c.fn, c.kernel,
                c.layer);
  if (phase != KILN_RT_DECODE && phase != KILN_RT_PREFILL)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "phase %d is neither decode (0) nor prefill (1)",
                   phase);
  if (c.layer < 0)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "negative layer index");
  if (!ctx->hasBatch)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "no batch set (call kiln_rt_set_batch first)");
  const kiln_rt_batch_t &b = ctx->batch;
  if (phase == KILN_RT_PREFILL) {
    if (!b.cu_seqlens_q || ctx->cuHost.empty())
      return c.error(KILN_ERROR_INVALID_ARGUMENT,
                     "prefill needs cu_seqlens_q and cu_seqlens_q_host in the batch");
    if (b.total_tokens < 1 || b.max_q_len < 1)
      return c.error(KILN_ERROR_INVALID_ARGUMENT,
                     "prefill needs total_tokens >= 1 and max_q_len >= 1 (got %d, %d)",
                     b.total_tokens, b.max_q_len);
  }
  return KILN_OK;
}

// Checks a resource against the arena and the other resources, then records it.
kiln_status_t useResource(const Call &c, kiln_rt_context *ctx, const char *kind, uint64_t offset,
                          uint64_t bytes) {
  if (offset % 16 != 0)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "%s offset %llu is not 16-byte aligned", kind,
                   static_cast<unsigned long long>(offset));
  if (offset > ctx->arenaBytes || bytes > ctx->arenaBytes - offset)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "%s [%llu, %llu) does not fit in the arena of %llu bytes", kind,
                   static_cast<unsigned long long>(offset),
                   static_cast<unsigned long long>(offset + bytes),
                   static_cast<unsigned long long>(ctx->arenaBytes));
  std::pair<int32_t, std::string> key{c.layer, kind};
  for (const auto &[other, r] : ctx->resources) {
    if (other == key || bytes == 0 || r.bytes == 0)
      continue;
    if (offset < r.offset + r.bytes && r.offset < offset + bytes)
      return c.error(KILN_ERROR_INVALID_ARGUMENT,
                     "%s [%llu, %llu) overlaps layer %d's %s [%llu, %llu)", kind,
                     static_cast<unsigned long long>(offset),
                     static_cast<unsigned long long>(offset + bytes), other.first,
                     other.second.c_str(), static_cast<unsigned long long>(r.offset),
                     static_cast<unsigned long long>(r.offset + r.bytes));
  }
  ctx->resources[key] = Resource{offset, bytes};
  return KILN_OK;
}

kiln_status_t selectDevice(const Call &c, const kiln_rt_context *ctx) {
  if (ctx->dry)
    return KILN_OK;
  cudaError_t e = cudaSetDevice(ctx->device);
  if (e != cudaSuccess)
    return c.cuda(e, "cudaSetDevice");
  return KILN_OK;
}

// Grows a workspace buffer (synchronizing the stream before freeing the old one).
kiln_status_t ensureBuffer(const Call &c, kiln_rt_context *ctx, Buffer &buffer, size_t bytes) {
  if (ctx->dry || bytes <= buffer.bytes)
    return KILN_OK;
  size_t want = std::max(bytes, buffer.bytes * 2);
  want = (want + 255) / 256 * 256;
  if (buffer.ptr) {
    cudaError_t e = cudaStreamSynchronize(ctx->stream);
    if (e != cudaSuccess)
      return c.cuda(e, "cudaStreamSynchronize before growing a workspace");
    cudaFree(buffer.ptr);
    buffer.ptr = nullptr;
    buffer.bytes = 0;
    if (&buffer == &ctx->index)
      ctx->indexGeneration = ~0ull;
  }
  void *p = nullptr;
  cudaError_t e = cudaMalloc(&p, want);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return c.cuda(e, "cudaMalloc of a workspace");
  }
  buffer.ptr = p;
  buffer.bytes = want;
  return KILN_OK;
}

// Builds the token index of the current batch for `phase` (once per batch and phase).
// expanded: also one block-table row per token; cuExtend: cu_seqlens for q_len tokens
// per sequence (decode).
kiln_status_t ensureIndex(const Call &c, kiln_rt_context *ctx, int32_t phase, bool expanded) {
  if (ctx->dry)
    return KILN_OK;
  if (ctx->indexGeneration == ctx->generation && ctx->indexPhase == phase &&
      (!expanded || ctx->indexExpanded))
    return KILN_OK;
  const kiln_rt_batch_t &b = ctx->batch;
  size_t tokens = phase == KILN_RT_DECODE ? static_cast<size_t>(b.batch) * b.q_len
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
  a.cu_extend = phase == KILN_RT_DECODE ? ctx->cuExtend : nullptr;
  cudaError_t e = kiln::runtime::launchTokenIndex(a, phase == KILN_RT_PREFILL, ctx->stream);
  ++ctx->launches;
  if (e != cudaSuccess)
    return c.cuda(e, "token index kernel launch");
  ctx->indexGeneration = ctx->generation;
  ctx->indexPhase = phase;
  ctx->indexExpanded = expanded;
  return KILN_OK;
}

float softmaxScale(const kiln_rt_context *ctx, int headDim) {
  float s = ctx->batch.softmax_scale;
  return s > 0 ? s : static_cast<float>(1.0 / std::sqrt(static_cast<double>(headDim)));
}

// Batch fields every cache access needs (page tables), per family.
kiln_status_t checkPaged(const Call &c, const kiln_rt_context *ctx, int32_t pageSize) {
  const kiln_rt_batch_t &b = ctx->batch;
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
  const kiln_rt_batch_t &b = ctx->batch;
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
  const kiln_rt_batch_t &b = ctx->batch;
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
  if (ctx->batch.slot_indices) {
    *state = base;
    *indices = ctx->batch.slot_indices + b;
    *numSlots = ctx->batch.num_slots;
  } else {
    *state = base + slotBytes * static_cast<uint64_t>(b);
    *indices = nullptr;
    *numSlots = 1;
  }
}

kiln_status_t zeroSlots(const Call &c, kiln_rt_context *ctx, uint64_t offset,
                        uint64_t slotBytes) {
  const kiln_rt_batch_t &b = ctx->batch;
  cudaError_t e = kiln::runtime::launchZeroSlots(at(ctx->arena, offset), slotBytes, slotBytes,
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
// `pointAtRow(p, row)` points the params' activations at token `row` of the packed batch.
template <typename Params, typename PointAtRow>
kiln_status_t runSequentialPrefill(const Call &c, kiln_rt_context *ctx, uint64_t stateOffset,
                                   uint64_t slotBytes, Params &p,
                                   kiln_status_t (*launch)(const Params *),
                                   const char *launchName, PointAtRow pointAtRow) {
  if (kiln_status_t s = zeroSlots(c, ctx, stateOffset, slotBytes); s != KILN_OK)
    return s;
  char *stateBase = at(ctx->arena, stateOffset);
  for (int seq = 0; seq < ctx->batch.batch; ++seq) {
    void *state;
    const int32_t *indices;
    int32_t numSlots;
    slotFor(ctx, stateBase, slotBytes, seq, &state, &indices, &numSlots);
    p.state = state;
    p.state_indices = indices;
    p.num_slots = numSlots;
    p.batch = 1;
    for (int row = ctx->cuHost[seq]; row < ctx->cuHost[seq + 1]; ++row) {
      pointAtRow(p, row);
      kiln_status_t s = launch(&p);
      ++ctx->launches;
      if (s != KILN_OK)
        return c.launcher(s, launchName);
    }
  }
  return kiln::kernels::ok();
}
} // namespace

// ---- context -----------------------------------------------------------------------------

extern "C" kiln_status_t kiln_rt_create(int32_t device, uint64_t arena_bytes,
                                        kiln_rt_context_t **out) {
  if (!out)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_create: out is null");
  *out = nullptr;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();
    return fail(KILN_ERROR_NO_DEVICE, "kiln_rt_create: no CUDA device visible (%s)",
                e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount returned 0");
  }
  if (device < 0 || device >= count)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_create: device %d out of range (0..%d)",
                device, count - 1);
  auto *ctx = new kiln_rt_context();
  ctx->device = device;
  ctx->arenaBytes = arena_bytes;
  auto cleanup = [&](kiln_status_t status, const char *what, cudaError_t err) {
    cudaGetLastError();
    kiln_status_t s = fail(status, "kiln_rt_create: %s: %s", what, cudaGetErrorString(err));
    if (ctx->arena)
      cudaFree(ctx->arena);
    if (ctx->stream)
      cudaStreamDestroy(ctx->stream);
    delete ctx;
    return s;
  };
  if ((e = cudaSetDevice(device)) != cudaSuccess)
    return cleanup(KILN_ERROR_CUDA, "cudaSetDevice", e);
  if ((e = cudaDeviceGetAttribute(&ctx->smemOptin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                  device)) != cudaSuccess)
    return cleanup(KILN_ERROR_CUDA, "cudaDeviceGetAttribute", e);
  if ((e = cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking)) != cudaSuccess)
    return cleanup(KILN_ERROR_CUDA, "cudaStreamCreateWithFlags", e);
  if (arena_bytes > 0) {
    if ((e = cudaMalloc(&ctx->arena, arena_bytes)) != cudaSuccess) {
      char what[96];
      std::snprintf(what, sizeof(what), "cudaMalloc of the %llu-byte cache arena",
                    static_cast<unsigned long long>(arena_bytes));
      return cleanup(e == cudaErrorMemoryAllocation ? KILN_ERROR_OUT_OF_MEMORY : KILN_ERROR_CUDA,
                     what, e);
    }
    if ((e = cudaMemsetAsync(ctx->arena, 0, arena_bytes, ctx->stream)) != cudaSuccess)
      return cleanup(KILN_ERROR_CUDA, "cudaMemsetAsync of the arena", e);
    if ((e = cudaStreamSynchronize(ctx->stream)) != cudaSuccess)
      return cleanup(KILN_ERROR_CUDA, "cudaStreamSynchronize", e);
  }
  *out = ctx;
  return kiln::kernels::ok();
}

extern "C" kiln_status_t kiln_rt_create_dry(uint64_t arena_bytes, kiln_rt_context_t **out) {
  if (!out)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_create_dry: out is null");
  auto *ctx = new kiln_rt_context();
  ctx->dry = true;
  ctx->arenaBytes = arena_bytes;
  *out = ctx;
  return kiln::kernels::ok();
}

extern "C" void kiln_rt_destroy(kiln_rt_context_t *ctx) {
  if (!ctx)
    return;
  if (!ctx->dry) {
    cudaSetDevice(ctx->device);
    if (ctx->stream)
      cudaStreamSynchronize(ctx->stream);
    for (Buffer *b : {&ctx->split, &ctx->index, &ctx->accepted})
      if (b->ptr)
        cudaFree(b->ptr);
    if (ctx->arena)
      cudaFree(ctx->arena);
    if (ctx->stream)
      cudaStreamDestroy(ctx->stream);
    cudaGetLastError();
  }
  delete ctx;
}

extern "C" void *kiln_rt_arena(kiln_rt_context_t *ctx) { return ctx ? ctx->arena : nullptr; }

extern "C" uint64_t kiln_rt_arena_bytes(const kiln_rt_context_t *ctx) {
  return ctx ? ctx->arenaBytes : 0;
}

extern "C" uint64_t kiln_rt_workspace_bytes(const kiln_rt_context_t *ctx) {
  return ctx ? ctx->split.bytes + ctx->index.bytes + ctx->accepted.bytes : 0;
}

extern "C" void *kiln_rt_stream(kiln_rt_context_t *ctx) { return ctx ? ctx->stream : nullptr; }

extern "C" uint64_t kiln_rt_launch_count(const kiln_rt_context_t *ctx) {
  return ctx ? ctx->launches : 0;
}

extern "C" kiln_status_t kiln_rt_synchronize(kiln_rt_context_t *ctx) {
  if (!ctx)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_synchronize: context is null");
  if (ctx->dry)
    return kiln::kernels::ok();
  cudaError_t e = cudaSetDevice(ctx->device);
  if (e == cudaSuccess)
    e = cudaStreamSynchronize(ctx->stream);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return fail(KILN_ERROR_CUDA, "kiln_rt_synchronize: cudaStreamSynchronize: %s",
                cudaGetErrorString(e));
  }
  return kiln::kernels::ok();
}

// ---- step inputs -------------------------------------------------------------------------

extern "C" kiln_status_t kiln_rt_set_batch(kiln_rt_context_t *ctx, const kiln_rt_batch_t *batch) {
  if (!ctx)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_set_batch: context is null");
  if (!batch)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_set_batch: batch is null");
  ctx->hasBatch = false;
  ++ctx->generation;
  const kiln_rt_batch_t &b = *batch;
  if (b.batch < 1)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_set_batch: batch %d < 1", b.batch);
  if (b.q_len < 1)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_set_batch: q_len %d < 1", b.q_len);
  if (b.max_pages < 0 || b.num_pages < 0 || b.num_slots < 0 || b.total_tokens < 0 ||
      b.max_q_len < 0)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "kiln_rt_set_batch: negative max_pages/num_pages/num_slots/total_tokens/max_q_len");
  if (!(b.softmax_scale >= 0) || std::isinf(b.softmax_scale))
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "kiln_rt_set_batch: softmax_scale must be finite and >= 0 (0 = 1/sqrt(d))");
  ctx->cuHost.clear();
  if (b.cu_seqlens_q_host) {
    if (b.cu_seqlens_q_host[0] != 0)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_set_batch: cu_seqlens_q_host[0] = %d, not 0",
                  b.cu_seqlens_q_host[0]);
    for (int i = 0; i < b.batch; ++i)
      if (b.cu_seqlens_q_host[i + 1] < b.cu_seqlens_q_host[i])
        return fail(KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_rt_set_batch: cu_seqlens_q_host decreases at %d", i + 1);
    if (b.cu_seqlens_q_host[b.batch] != b.total_tokens)
      return fail(KILN_ERROR_INVALID_ARGUMENT,
                  "kiln_rt_set_batch: cu_seqlens_q_host[batch] = %d != total_tokens %d",
                  b.cu_seqlens_q_host[b.batch], b.total_tokens);
    ctx->cuHost.assign(b.cu_seqlens_q_host, b.cu_seqlens_q_host + b.batch + 1);
  }
  ctx->batch = b;
  ctx->batch.cu_seqlens_q_host = nullptr; // the runtime keeps its own copy
  ctx->hasBatch = true;
  return kiln::kernels::ok();
}

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

// ---- attention ---------------------------------------------------------------------------

extern "C" kiln_status_t kiln_rt_attention(kiln_rt_context_t *ctx, int32_t phase, int32_t layer,
                                           uint64_t kv_offset, int32_t num_heads,
                                           int32_t num_kv_heads, int32_t head_dim,
                                           int32_t page_size, int32_t window, int32_t kernel,
                                           int32_t spec_dec_mode) {
  Call c{"kiln_rt_attention", kernelName(kernel), layer};
  if (kiln_status_t s = checkCall(c, ctx, phase); s != KILN_OK)
    return s;
  const kiln_rt_batch_t &b = ctx->batch;
  if (window > 0)
    return c.error(KILN_ERROR_UNSUPPORTED,
                   "sliding-window attention (window %d) is not supported yet", window);
  if (window < 0)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "window %d < 0", window);
  int32_t expected = phase == KILN_RT_DECODE ? KILN_RT_KERNEL_GQA_DECODE : KILN_RT_KERNEL_PREFILL_FMHA;
  if (kernel != expected)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "kernel %d (%s) cannot run attention in %s",
                   kernel, kernelName(kernel), phaseName(phase));
  if (spec_dec_mode < KILN_RT_SINGLE_TOKEN || spec_dec_mode > KILN_RT_EXTEND_CONTEXT)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "spec_dec_mode %d unknown", spec_dec_mode);
  if (num_heads < 1 || num_kv_heads < 1 || num_heads % num_kv_heads != 0)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "num_heads %d must be a positive multiple of num_kv_heads %d", num_heads,
                   num_kv_heads);
  if (head_dim != 64 && head_dim != 128 && head_dim != 256)
    return c.error(KILN_ERROR_UNSUPPORTED, "head_dim %d unsupported (64, 128, 256)", head_dim);
  if (page_size != 16 && page_size != 32 && page_size != 64 && page_size != 128)
    return c.error(KILN_ERROR_UNSUPPORTED, "page_size %d unsupported (16, 32, 64, 128)",
                   page_size);
  if (kiln_status_t s = checkPaged(c, ctx, page_size); s != KILN_OK)
    return s;
  uint64_t poolBytes = static_cast<uint64_t>(b.num_pages) * 2 * page_size * num_kv_heads *
                       head_dim * kBf16;
  if (kiln_status_t s = useResource(c, ctx, "kv", kv_offset, poolBytes); s != KILN_OK)
    return s;
  void *q, *k, *v, *out;
  if (kiln_status_t s = requireAll(c, ctx, {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}}); s != KILN_OK)
    return s;
  if (kiln_status_t s = selectDevice(c, ctx); s != KILN_OK)
    return s;
  void *pool = ctx->dry ? nullptr : at(ctx->arena, kv_offset);
  float scale = softmaxScale(ctx, head_dim);

  kiln_kv_append_params_t ap{};
  ap.k = k;
  ap.v = v;
  ap.kv_cache = pool;
  ap.block_table = b.block_table;
  ap.batch = b.batch;
  ap.kv_heads = num_kv_heads;
  ap.head_dim = head_dim;
  ap.page_size = page_size;
  ap.num_pages = b.num_pages;
  ap.max_pages_per_seq = b.max_pages;
  ap.dtype = KILN_DTYPE_BF16;
  ap.stream = ctx->stream;

  if (phase == KILN_RT_DECODE) {
    if (!b.seq_lens)
      return c.error(KILN_ERROR_INVALID_ARGUMENT, "batch.seq_lens is null");
    if (spec_dec_mode == KILN_RT_SINGLE_TOKEN && b.q_len != 1)
      return c.error(KILN_ERROR_INVALID_ARGUMENT,
                     "batch.q_len %d > 1 but spec_dec_mode is SINGLE_TOKEN (speculation off)",
                     b.q_len);
    bool extend = spec_dec_mode == KILN_RT_EXTEND_CONTEXT && b.q_len > 1;
    if (b.q_len > 8 && !extend)
      return c.error(KILN_ERROR_UNSUPPORTED, "q_len %d > 8 unsupported by gqa_decode", b.q_len);
    if (extend && head_dim == 256)
      return c.error(KILN_ERROR_UNSUPPORTED,
                     "EXTEND_CONTEXT with q_len %d needs kiln_prefill_fmha_paged, which supports "
                     "head_dim 64/128 (got 256)", b.q_len);
    int32_t tokens = b.batch * b.q_len;
    kiln_gqa_decode_params_t gp{};
    kiln_prefill_fmha_paged_params_t pp{};
    size_t wsBytes = 0;
    if (!extend) {
      gp.q = q;
      gp.kv_cache = pool;
      gp.block_table = b.block_table;
      gp.seq_lens = b.seq_lens;
      gp.out = out;
      gp.batch = b.batch;
      gp.q_len = b.q_len;
      gp.q_heads = num_heads;
      gp.kv_heads = num_kv_heads;
      gp.head_dim = head_dim;
      gp.page_size = page_size;
      gp.num_pages = b.num_pages;
      gp.max_pages_per_seq = b.max_pages;
      gp.max_seq_len = b.max_pages * page_size;
      gp.softmax_scale = scale;
      gp.dtype = KILN_DTYPE_BF16;
      gp.stream = ctx->stream;
      if (ctx->dry)
        return kiln::kernels::ok();
      // Validates the decode launch before anything is written to the cache.
      if (kiln_status_t s = kiln_gqa_decode_workspace_bytes(&gp, &wsBytes); s != KILN_OK)
        return c.launcher(s, "kiln_gqa_decode_workspace_bytes");
      if (kiln_status_t s = ensureBuffer(c, ctx, ctx->split, wsBytes); s != KILN_OK)
        return s;
      gp.workspace = wsBytes ? ctx->split.ptr : nullptr;
      gp.workspace_bytes = wsBytes ? ctx->split.bytes : 0;
    } else if (ctx->dry) {
      return kiln::kernels::ok();
    }
    if (kiln_status_t s = ensureIndex(c, ctx, phase, false); s != KILN_OK)
      return s;
    ap.token_batch = ctx->tokenBatch;
    ap.token_pos = ctx->tokenPos;
    ap.num_tokens = tokens;
    kiln_status_t s = kiln_kv_append(&ap);
    ++ctx->launches;
    if (s != KILN_OK)
      return c.launcher(s, "kiln_kv_append");
    if (!extend) {
      s = kiln_gqa_decode(&gp);
      ++ctx->launches;
      if (s != KILN_OK)
        return c.launcher(s, "kiln_gqa_decode");
      return kiln::kernels::ok();
    }
    pp.q = q;
    pp.kv_cache = pool;
    pp.out = out;
    pp.cu_seqlens_q = ctx->cuExtend;
    pp.seq_lens = b.seq_lens;
    pp.block_table = b.block_table;
    pp.batch = b.batch;
    pp.total_q = tokens;
    pp.max_seqlen_q = b.q_len;
    pp.num_pages = b.num_pages;
    pp.page_size = page_size;
    pp.max_pages_per_seq = b.max_pages;
    pp.q_heads = num_heads;
    pp.kv_heads = num_kv_heads;
    pp.head_dim = head_dim;
    pp.dtype = KILN_DTYPE_BF16;
    pp.softmax_scale = scale;
    pp.causal = 1;
    pp.stream = ctx->stream;
    s = kiln_prefill_fmha_paged(&pp);
    ++ctx->launches;
    if (s != KILN_OK)
      return c.launcher(s, "kiln_prefill_fmha_paged");
    return kiln::kernels::ok();
  }

  // Prefill: prompts start at cache position 0.
  if (head_dim == 256)
    return c.error(KILN_ERROR_UNSUPPORTED, "prefill_fmha supports head_dim 64/128 (got 256)");
  if (kiln_status_t s = checkPrefillFits(c, ctx, page_size); s != KILN_OK)
    return s;
  if (ctx->dry)
    return kiln::kernels::ok();
  if (kiln_status_t s = ensureIndex(c, ctx, phase, false); s != KILN_OK)
    return s;
  ap.token_batch = ctx->tokenBatch;
  ap.token_pos = ctx->tokenPos;
  ap.num_tokens = b.total_tokens;
  kiln_status_t s = kiln_kv_append(&ap);
  ++ctx->launches;
  if (s != KILN_OK)
    return c.launcher(s, "kiln_kv_append");
  kiln_prefill_fmha_params_t fp{};
  fp.q = q;
  fp.k = k;
  fp.v = v;
  fp.out = out;
  fp.cu_seqlens_q = b.cu_seqlens_q;
  fp.cu_seqlens_k = b.cu_seqlens_k ? b.cu_seqlens_k : b.cu_seqlens_q;
  fp.batch = b.batch;
  fp.total_q = b.total_tokens;
  fp.total_k = b.total_tokens;
  fp.max_seqlen_q = b.max_q_len;
  fp.q_heads = num_heads;
  fp.kv_heads = num_kv_heads;
  fp.head_dim = head_dim;
  fp.dtype = KILN_DTYPE_BF16;
  fp.softmax_scale = scale;
  fp.causal = 1;
  fp.stream = ctx->stream;
  s = kiln_prefill_fmha(&fp);
  ++ctx->launches;
  if (s != KILN_OK)
    return c.launcher(s, "kiln_prefill_fmha");
  return kiln::kernels::ok();
}

// ---- MLA ---------------------------------------------------------------------------------

extern "C" kiln_status_t kiln_rt_mla(kiln_rt_context_t *ctx, int32_t phase, int32_t layer,
                                     uint64_t cache_offset, int32_t num_heads,
                                     int32_t kv_lora_rank, int32_t rope_dim, int32_t page_size,
                                     int32_t kernel, int32_t spec_dec_mode) {
  Call c{"kiln_rt_mla", kernelName(kernel), layer};
  if (kiln_status_t s = checkCall(c, ctx, phase); s != KILN_OK)
    return s;
  const kiln_rt_batch_t &b = ctx->batch;
  bool decodeKernel =
      kernel == KILN_RT_KERNEL_MLA_DECODE || kernel == KILN_RT_KERNEL_MLA_DECODE_SMALL_SMEM;
  if (phase == KILN_RT_DECODE && !decodeKernel)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "kernel %d (%s) cannot run MLA decode (mla_decode or mla_decode_small_smem)",
                   kernel, kernelName(kernel));
  if (phase == KILN_RT_PREFILL && kernel != KILN_RT_KERNEL_MLA_PREFILL_DECODE)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "kernel %d (%s) cannot run MLA prefill (mla_prefill_decode)", kernel,
                   kernelName(kernel));
  if (spec_dec_mode < KILN_RT_SINGLE_TOKEN || spec_dec_mode > KILN_RT_EXTEND_CONTEXT)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "spec_dec_mode %d unknown", spec_dec_mode);
  if (kv_lora_rank != KILN_MLA_KV_LORA_RANK || rope_dim != KILN_MLA_ROPE_DIM)
    return c.error(KILN_ERROR_UNSUPPORTED,
                   "kv_lora_rank %d / rope_dim %d unsupported (512 / 64 only)", kv_lora_rank,
                   rope_dim);
  if (page_size != KILN_MLA_PAGE_SIZE)
    return c.error(KILN_ERROR_UNSUPPORTED, "page_size %d unsupported (64 only)", page_size);
  if (num_heads < 1 || num_heads > 128)
    return c.error(KILN_ERROR_UNSUPPORTED, "num_heads %d unsupported (1..128)", num_heads);
  if (kiln_status_t s = checkPaged(c, ctx, page_size); s != KILN_OK)
    return s;
  uint64_t poolBytes =
      static_cast<uint64_t>(b.num_pages) * KILN_MLA_PAGE_SIZE * KILN_MLA_HEAD_DIM * kBf16;
  if (kiln_status_t s = useResource(c, ctx, "mla_latent", cache_offset, poolBytes); s != KILN_OK)
    return s;
  void *q, *latent, *out;
  if (kiln_status_t s = requireAll(c, ctx, {{"q", &q}, {"latent", &latent}, {"out", &out}}); s != KILN_OK)
    return s;
  if (phase == KILN_RT_DECODE) {
    if (!b.seq_lens)
      return c.error(KILN_ERROR_INVALID_ARGUMENT, "batch.seq_lens is null");
    if (spec_dec_mode == KILN_RT_SINGLE_TOKEN && b.q_len != 1)
      return c.error(KILN_ERROR_INVALID_ARGUMENT,
                     "batch.q_len %d > 1 but spec_dec_mode is SINGLE_TOKEN (speculation off)",
                     b.q_len);
    if (spec_dec_mode == KILN_RT_MULTI_TOKEN && kernel == KILN_RT_KERNEL_MLA_DECODE_SMALL_SMEM &&
        b.q_len > 1)
      return c.error(KILN_ERROR_UNSUPPORTED,
                     "mla_decode_small_smem decodes q_len 1 only (batch.q_len %d); draft tokens "
                     "need spec_dec_mode EXTEND_CONTEXT", b.q_len);
    if (spec_dec_mode == KILN_RT_MULTI_TOKEN && b.q_len > 4)
      return c.error(KILN_ERROR_UNSUPPORTED, "mla_decode supports q_len 1..4 (batch.q_len %d)",
                     b.q_len);
  } else if (kiln_status_t s = checkPrefillFits(c, ctx, page_size); s != KILN_OK) {
    return s;
  }
  if (kiln_status_t s = selectDevice(c, ctx); s != KILN_OK)
    return s;
  // Token-expanded launch: every token becomes its own q_len-1 "sequence" whose keys are
  // the cache positions up to and including its own (causal extend through the decode
  // kernel). Used for prefill and for EXTEND_CONTEXT draft tokens.
  bool expand = phase == KILN_RT_PREFILL ||
                (spec_dec_mode == KILN_RT_EXTEND_CONTEXT && b.q_len > 1);
  int32_t tokens = phase == KILN_RT_DECODE ? b.batch * b.q_len : b.total_tokens;
  bool small = kernel == KILN_RT_KERNEL_MLA_DECODE_SMALL_SMEM;
  if (phase == KILN_RT_PREFILL)
    small = ctx->smemOptin < 231936; // mla_decode needs 226.5 KiB (231,936 B) for > 16 rows
  const char *decodeName = small ? "kiln_mla_decode_small_smem" : "kiln_mla_decode";

  if (ctx->dry)
    return kiln::kernels::ok();
  if (kiln_status_t s = ensureIndex(c, ctx, phase, expand); s != KILN_OK)
    return s;
  void *pool = at(ctx->arena, cache_offset);
  kiln_mla_decode_params_t dp{};
  dp.q = q;
  dp.latent_cache = pool;
  dp.out = out;
  dp.num_heads = num_heads;
  dp.num_pages = b.num_pages;
  dp.max_pages_per_seq = b.max_pages;
  dp.max_seq_len = b.max_pages * KILN_MLA_PAGE_SIZE;
  dp.softmax_scale = softmaxScale(ctx, KILN_MLA_HEAD_DIM);
  dp.dtype = KILN_DTYPE_BF16;
  dp.stream = ctx->stream;
  if (expand) {
    dp.block_table = ctx->expandedTable;
    dp.seq_lens = ctx->tokenLen;
    dp.batch = tokens;
    dp.q_len = 1;
  } else {
    dp.block_table = b.block_table;
    dp.seq_lens = b.seq_lens;
    dp.batch = b.batch;
    dp.q_len = b.q_len;
  }
  size_t wsBytes = 0;
  if (kiln_status_t s = kiln_mla_decode_workspace_bytes(&dp, &wsBytes); s != KILN_OK)
    return c.launcher(s, "kiln_mla_decode_workspace_bytes");
  if (kiln_status_t s = ensureBuffer(c, ctx, ctx->split, wsBytes); s != KILN_OK)
    return s;
  dp.workspace = wsBytes ? ctx->split.ptr : nullptr;
  dp.workspace_bytes = wsBytes ? ctx->split.bytes : 0;

  kiln_mla_kv_append_params_t ap{};
  ap.kv_c = latent;
  ap.k_pe = static_cast<const char *>(latent) + KILN_MLA_KV_LORA_RANK * kBf16;
  ap.kv_c_token_stride = KILN_MLA_HEAD_DIM;
  ap.k_pe_token_stride = KILN_MLA_HEAD_DIM;
  ap.latent_cache = pool;
  ap.block_table = b.block_table;
  ap.token_batch = ctx->tokenBatch;
  ap.token_pos = ctx->tokenPos;
  ap.num_tokens = tokens;
  ap.batch = b.batch;
  ap.num_pages = b.num_pages;
  ap.max_pages_per_seq = b.max_pages;
  ap.dtype = KILN_DTYPE_BF16;
  ap.stream = ctx->stream;
  kiln_status_t s = kiln_mla_kv_append(&ap);
  ++ctx->launches;
  if (s != KILN_OK)
    return c.launcher(s, "kiln_mla_kv_append");
  s = small ? kiln_mla_decode_small_smem(&dp) : kiln_mla_decode(&dp);
  ++ctx->launches;
  if (s != KILN_OK)
    return c.launcher(s, decodeName);
  return kiln::kernels::ok();
}

// ---- Mamba2 SSM --------------------------------------------------------------------------

extern "C" kiln_status_t kiln_rt_ssm(kiln_rt_context_t *ctx, int32_t phase, int32_t layer,
                                     uint64_t state_offset, int64_t intermediate_offset,
                                     int32_t num_heads, int32_t head_dim, int32_t state_size,
                                     int32_t n_groups, int32_t state_dtype, int32_t kernel) {
  Call c{"kiln_rt_ssm", kernelName(kernel), layer};
  if (kiln_status_t s = checkCall(c, ctx, phase); s != KILN_OK)
    return s;
  const kiln_rt_batch_t &b = ctx->batch;
  bool spec = kernel == KILN_RT_KERNEL_SSM_UPDATE_SPEC;
  if (phase == KILN_RT_DECODE && kernel != KILN_RT_KERNEL_SSM_UPDATE && !spec)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "kernel %d (%s) cannot run an SSM decode (ssm_update or ssm_update_spec)",
                   kernel, kernelName(kernel));
  if (phase == KILN_RT_PREFILL && kernel != KILN_RT_KERNEL_SSM_PREFILL_SEQUENTIAL)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "kernel %d (%s) cannot run an SSM prefill (ssm_prefill_sequential)", kernel,
                   kernelName(kernel));
  if (num_heads < 1 || head_dim < 1 || n_groups < 1 || num_heads % n_groups != 0)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "num_heads %d, head_dim %d, n_groups %d: need positive sizes and n_groups "
                   "dividing num_heads", num_heads, head_dim, n_groups);
  if (state_size != 64 && state_size != 128 && state_size != 256)
    return c.error(KILN_ERROR_UNSUPPORTED, "state_size %d unsupported (64, 128, 256)", state_size);
  if (state_dtype != KILN_DTYPE_F32 && state_dtype != KILN_DTYPE_BF16)
    return c.error(KILN_ERROR_UNSUPPORTED, "state_dtype %d unsupported (F32 or BF16)",
                   state_dtype);
  if (kiln_status_t s = checkSlots(c, ctx); s != KILN_OK)
    return s;
  uint64_t slotBytes = static_cast<uint64_t>(num_heads) * head_dim * state_size *
                       dtypeBytes(state_dtype);
  if (kiln_status_t s = useResource(c, ctx, "ssm_state", state_offset, slotBytes * b.num_slots);
      s != KILN_OK)
    return s;
  int32_t T = b.q_len;
  if (phase == KILN_RT_DECODE && !spec && T != 1)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "batch.q_len %d > 1 needs ssm_update_spec (speculation on)", T);
  if (phase == KILN_RT_DECODE && spec) {
    if (intermediate_offset < 0)
      return c.error(KILN_ERROR_INVALID_ARGUMENT,
                     "ssm_update_spec needs intermediate states (intermediate_offset < 0)");
    if (kiln_status_t s = useResource(c, ctx, "intermediate_ssm_state",
                                      static_cast<uint64_t>(intermediate_offset),
                                      slotBytes * T * b.num_slots);
        s != KILN_OK)
      return s;
  }
  void *x, *dt, *B, *C, *out, *A;
  if (kiln_status_t s = requireAll(c, ctx, {{"x", &x}, {"dt", &dt}, {"b", &B}, {"c", &C}, {"out", &out}, {"A", &A}}); s != KILN_OK)
    return s;
  void *z = lookup(ctx, layer, "z");
  void *D = lookup(ctx, layer, "D");
  void *dtBias = lookup(ctx, layer, "dt_bias");
  if (kiln_status_t s = selectDevice(c, ctx); s != KILN_OK)
    return s;

  const int64_t HP = static_cast<int64_t>(num_heads) * head_dim;
  const int64_t GN = static_cast<int64_t>(n_groups) * state_size;
  const int64_t PN = static_cast<int64_t>(head_dim) * state_size;
  const int64_t HPN = num_heads * PN;

  if (phase == KILN_RT_DECODE && spec) {
    kiln_ssm_update_spec_params_t p{};
    p.state = ctx->dry ? nullptr : at(ctx->arena, state_offset);
    p.state_dtype = static_cast<kiln_dtype_t>(state_dtype);
    p.state_stride_slot = HPN;
    p.state_stride_head = PN;
    p.state_stride_dim = state_size;
    p.num_slots = b.num_slots;
    p.state_indices = b.slot_indices;
    p.intermediate = ctx->dry ? nullptr : at(ctx->arena, static_cast<uint64_t>(intermediate_offset));
    p.inter_stride_slot = HPN * T;
    p.inter_stride_token = HPN;
    p.inter_stride_head = PN;
    p.inter_stride_dim = state_size;
    p.batch = b.batch;
    p.num_tokens = T;
    p.heads = num_heads;
    p.head_dim = head_dim;
    p.state_size = state_size;
    p.n_groups = n_groups;
    p.dtype = KILN_DTYPE_BF16;
    p.x = x;
    p.x_stride_batch = HP * T;
    p.x_stride_token = HP;
    p.x_stride_head = head_dim;
    p.dt = dt;
    p.dt_stride_batch = static_cast<int64_t>(num_heads) * T;
    p.dt_stride_token = num_heads;
    p.dt_bias = static_cast<const float *>(dtBias);
    p.A = static_cast<const float *>(A);
    p.B = B;
    p.B_stride_batch = GN * T;
    p.B_stride_token = GN;
    p.B_stride_group = state_size;
    p.C = C;
    p.C_stride_batch = GN * T;
    p.C_stride_token = GN;
    p.C_stride_group = state_size;
    p.D = static_cast<const float *>(D);
    p.z = z;
    p.z_stride_batch = HP * T;
    p.z_stride_token = HP;
    p.z_stride_head = head_dim;
    p.out = out;
    p.out_stride_batch = HP * T;
    p.out_stride_token = HP;
    p.out_stride_head = head_dim;
    p.dt_softplus = 1;
    p.stream = ctx->stream;
    ctx->commits[{layer, "ssm"}] =
        CommitEntry{state_offset, static_cast<uint64_t>(intermediate_offset), slotBytes, T};
    if (ctx->dry)
      return kiln::kernels::ok();
    kiln_status_t s = kiln_ssm_update_spec(&p);
    ++ctx->launches;
    if (s != KILN_OK)
      return c.launcher(s, "kiln_ssm_update_spec");
    return kiln::kernels::ok();
  }

  kiln_ssm_update_params_t p{};
  p.state = ctx->dry ? nullptr : at(ctx->arena, state_offset);
  p.state_dtype = static_cast<kiln_dtype_t>(state_dtype);
  p.state_stride_slot = HPN;
  p.state_stride_head = PN;
  p.state_stride_dim = state_size;
  p.num_slots = b.num_slots;
  p.state_indices = b.slot_indices;
  p.batch = b.batch;
  p.heads = num_heads;
  p.head_dim = head_dim;
  p.state_size = state_size;
  p.n_groups = n_groups;
  p.dtype = KILN_DTYPE_BF16;
  p.x = x;
  p.x_stride_batch = HP;
  p.x_stride_head = head_dim;
  p.dt = dt;
  p.dt_stride_batch = num_heads;
  p.dt_bias = static_cast<const float *>(dtBias);
  p.A = static_cast<const float *>(A);
  p.B = B;
  p.B_stride_batch = GN;
  p.B_stride_group = state_size;
  p.C = C;
  p.C_stride_batch = GN;
  p.C_stride_group = state_size;
  p.D = static_cast<const float *>(D);
  p.z = z;
  p.z_stride_batch = HP;
  p.z_stride_head = head_dim;
  p.out = out;
  p.out_stride_batch = HP;
  p.out_stride_head = head_dim;
  p.dt_softplus = 1;
  p.stream = ctx->stream;
  if (phase == KILN_RT_DECODE) {
    ctx->commits.erase({layer, "ssm"});
    if (ctx->dry)
      return kiln::kernels::ok();
    kiln_status_t s = kiln_ssm_update(&p);
    ++ctx->launches;
    if (s != KILN_OK)
      return c.launcher(s, "kiln_ssm_update");
    return kiln::kernels::ok();
  }

  if (ctx->dry)
    return kiln::kernels::ok();
  return runSequentialPrefill(
      c, ctx, state_offset, slotBytes, p, kiln_ssm_update,
      "kiln_ssm_update (sequential prefill)", [&](kiln_ssm_update_params_t &q, int row) {
        q.x = static_cast<const char *>(x) + row * HP * kBf16;
        q.dt = static_cast<const char *>(dt) + static_cast<int64_t>(row) * num_heads * kBf16;
        q.B = static_cast<const char *>(B) + row * GN * kBf16;
        q.C = static_cast<const char *>(C) + row * GN * kBf16;
        q.z = z ? static_cast<const char *>(z) + row * HP * kBf16 : nullptr;
        q.out = static_cast<char *>(out) + row * HP * kBf16;
      });
}

// ---- causal conv1d -----------------------------------------------------------------------

extern "C" kiln_status_t kiln_rt_conv(kiln_rt_context_t *ctx, int32_t phase, int32_t layer,
                                      uint64_t state_offset, int64_t intermediate_offset,
                                      int32_t conv_dim, int32_t kernel_size, int32_t silu,
                                      int32_t kernel) {
  Call c{"kiln_rt_conv", kernelName(kernel), layer};
  if (kiln_status_t s = checkCall(c, ctx, phase); s != KILN_OK)
    return s;
  const kiln_rt_batch_t &b = ctx->batch;
  bool spec = kernel == KILN_RT_KERNEL_CONV_UPDATE_SPEC;
  if (phase == KILN_RT_DECODE && kernel != KILN_RT_KERNEL_CONV_UPDATE && !spec)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "kernel %d (%s) cannot run a conv decode (conv_update or conv_update_spec)",
                   kernel, kernelName(kernel));
  if (phase == KILN_RT_PREFILL && kernel != KILN_RT_KERNEL_CONV_PREFILL_SEQUENTIAL)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "kernel %d (%s) cannot run a conv prefill (conv_prefill_sequential)", kernel,
                   kernelName(kernel));
  if (conv_dim < 8 || conv_dim % 8 != 0)
    return c.error(KILN_ERROR_UNSUPPORTED, "conv_dim %d unsupported (a positive multiple of 8)",
                   conv_dim);
  if (kernel_size < 2 || kernel_size > 4)
    return c.error(KILN_ERROR_UNSUPPORTED, "kernel_size %d unsupported (2..4)", kernel_size);
  if (kiln_status_t s = checkSlots(c, ctx); s != KILN_OK)
    return s;
  const int W = kernel_size;
  uint64_t slotBytes = static_cast<uint64_t>(conv_dim) * (W - 1) * kBf16;
  if (kiln_status_t s = useResource(c, ctx, "conv_state", state_offset, slotBytes * b.num_slots);
      s != KILN_OK)
    return s;
  int32_t T = b.q_len;
  if (phase == KILN_RT_DECODE && !spec && T != 1)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "batch.q_len %d > 1 needs conv_update_spec (speculation on)", T);
  if (phase == KILN_RT_DECODE && spec) {
    if (intermediate_offset < 0)
      return c.error(KILN_ERROR_INVALID_ARGUMENT,
                     "conv_update_spec needs intermediate states (intermediate_offset < 0)");
    if (kiln_status_t s = useResource(c, ctx, "intermediate_conv_state",
                                      static_cast<uint64_t>(intermediate_offset),
                                      slotBytes * T * b.num_slots);
        s != KILN_OK)
      return s;
  }
  void *x, *out, *weight;
  if (kiln_status_t s = requireAllConv(c, ctx, {{"x", &x}, {"out", &out}, {"weight", &weight}}); s != KILN_OK)
    return s;
  void *bias = lookupConv(ctx, layer, "bias");
  if (kiln_status_t s = selectDevice(c, ctx); s != KILN_OK)
    return s;
  const int64_t slotElems = static_cast<int64_t>(conv_dim) * (W - 1);

  if (phase == KILN_RT_DECODE && spec) {
    kiln_conv_update_spec_params_t p{};
    p.state = ctx->dry ? nullptr : at(ctx->arena, state_offset);
    p.state_dtype = KILN_DTYPE_BF16;
    p.state_stride_slot = slotElems;
    p.num_slots = b.num_slots;
    p.state_indices = b.slot_indices;
    p.intermediate = ctx->dry ? nullptr : at(ctx->arena, static_cast<uint64_t>(intermediate_offset));
    p.inter_stride_slot = slotElems * T;
    p.inter_stride_token = slotElems;
    p.batch = b.batch;
    p.num_tokens = T;
    p.conv_dim = conv_dim;
    p.width = W;
    p.dtype = KILN_DTYPE_BF16;
    p.x = x;
    p.x_stride_batch = static_cast<int64_t>(conv_dim) * T;
    p.x_stride_token = conv_dim;
    p.weight = weight;
    p.bias = bias;
    p.out = out;
    p.out_stride_batch = static_cast<int64_t>(conv_dim) * T;
    p.out_stride_token = conv_dim;
    p.silu = silu ? 1 : 0;
    p.stream = ctx->stream;
    ctx->commits[{layer, "conv"}] =
        CommitEntry{state_offset, static_cast<uint64_t>(intermediate_offset), slotBytes, T};
    if (ctx->dry)
      return kiln::kernels::ok();
    kiln_status_t s = kiln_conv_update_spec(&p);
    ++ctx->launches;
    if (s != KILN_OK)
      return c.launcher(s, "kiln_conv_update_spec");
    return kiln::kernels::ok();
  }

  kiln_conv_update_params_t p{};
  p.state = ctx->dry ? nullptr : at(ctx->arena, state_offset);
  p.state_dtype = KILN_DTYPE_BF16;
  p.state_stride_slot = slotElems;
  p.num_slots = b.num_slots;
  p.state_indices = b.slot_indices;
  p.batch = b.batch;
  p.conv_dim = conv_dim;
  p.width = W;
  p.dtype = KILN_DTYPE_BF16;
  p.x = x;
  p.x_stride_batch = conv_dim;
  p.weight = weight;
  p.bias = bias;
  p.out = out;
  p.out_stride_batch = conv_dim;
  p.silu = silu ? 1 : 0;
  p.stream = ctx->stream;
  if (phase == KILN_RT_DECODE) {
    ctx->commits.erase({layer, "conv"});
    if (ctx->dry)
      return kiln::kernels::ok();
    kiln_status_t s = kiln_conv_update(&p);
    ++ctx->launches;
    if (s != KILN_OK)
      return c.launcher(s, "kiln_conv_update");
    return kiln::kernels::ok();
  }

  if (ctx->dry)
    return kiln::kernels::ok();
  return runSequentialPrefill(
      c, ctx, state_offset, slotBytes, p, kiln_conv_update,
      "kiln_conv_update (sequential prefill)", [&](kiln_conv_update_params_t &q, int row) {
        q.x = static_cast<const char *>(x) + static_cast<int64_t>(row) * conv_dim * kBf16;
        q.out = static_cast<char *>(out) + static_cast<int64_t>(row) * conv_dim * kBf16;
      });
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
  const kiln_rt_batch_t &b = ctx->batch;
  for (int i = 0; i < b.batch; ++i)
    if (accepted[i] < 0 || accepted[i] > b.q_len)
      return fail(KILN_ERROR_INVALID_ARGUMENT,
                  "kiln_rt_commit_accepted: accepted[%d] = %d outside 0..q_len (%d)", i,
                  accepted[i], b.q_len);
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
        at(ctx->arena, entry.stateOffset), entry.slotBytes, at(ctx->arena, entry.interOffset),
        entry.slotBytes * entry.tokens, entry.slotBytes, entry.slotBytes, b.slot_indices,
        static_cast<const int32_t *>(ctx->accepted.ptr), entry.tokens, b.batch, b.num_slots,
        ctx->stream);
    ++ctx->launches;
    if (e != cudaSuccess)
      return fail(KILN_ERROR_CUDA, "kiln_rt_commit_accepted: layer %d %s: commit launch: %s",
                  key.first, key.second.c_str(), cudaGetErrorString(e));
  }
  return kiln::kernels::ok();
}
