// The runtime context: creation (the one allocation of the plan), regions, name tables,
// the sticky status, the step (kiln_rt_set_batch), the step inputs compiled code reads,
// kiln_rt_output and reading the results back. See include/kiln/Runtime/Runtime.h.
#include "Context.h"
#include "ProgrammaticLaunch.h"
#include "RuntimeKernels.h"
#include "StepStaging.h"

#include "kiln/Kernels/Gemm.h"
#include "kiln/Kernels/Graph.h"
#include "kiln/Kernels/Moe.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

static_assert(KILN_GEMM_WORKSPACE_BYTES == (32ull << 20),
              "Layout.h and Gemm.h disagree on the GEMM workspace");

using namespace kiln::rt;

// ---- name tables (from ABI.def) ----------------------------------------------------------

extern "C" const char *kiln_rt_kernel_name(int32_t kernel) {
  switch (kernel) {
#define KILN_RT_KERNEL(name, value, str)                                                       \
  case value:                                                                                  \
    return str;
#include "kiln/Runtime/ABI.def"
  }
  return "unknown kernel";
}

extern "C" const char *kiln_rt_phase_name(int32_t phase) {
  switch (phase) {
#define KILN_RT_PHASE(name, value, str)                                                        \
  case value:                                                                                  \
    return str;
#include "kiln/Runtime/ABI.def"
  }
  return "unknown phase";
}

extern "C" const char *kiln_rt_input_name(int32_t input) {
  switch (input) {
#define KILN_RT_INPUT(name, value, str)                                                        \
  case value:                                                                                  \
    return str;
#include "kiln/Runtime/ABI.def"
  }
  return "unknown input";
}

extern "C" const char *kiln_rt_output_name(int32_t output) {
  switch (output) {
#define KILN_RT_OUTPUT(name, value, str)                                                       \
  case value:                                                                                  \
    return str;
#include "kiln/Runtime/ABI.def"
  }
  return "unknown output";
}

extern "C" const char *kiln_rt_rope_name(int32_t rope) {
  switch (rope) {
#define KILN_RT_ROPE(name, value, str)                                                         \
  case value:                                                                                  \
    return str;
#include "kiln/Runtime/ABI.def"
  }
  return "unknown rope type";
}

extern "C" const char *kiln_rt_dtype_name(int32_t dtype) {
  switch (dtype) {
#define KILN_RT_DTYPE(name, value, str, bytes)                                                 \
  case value:                                                                                  \
    return str;
#include "kiln/Runtime/ABI.def"
  }
  return "unknown dtype";
}

namespace kiln::rt {

const char *regionName(int region) {
  switch (region) {
  case kWeights: return "weights";
  case kCaches: return "caches";
  case kActivations: return "activations";
  case kWorkspace: return "workspace";
  case kIo: return "io";
  }
  return "?";
}

// ---- errors ------------------------------------------------------------------------------

kiln_status_t Call::error(kiln_status_t status, const char *format, ...) const {
  char what[768];
  va_list args;
  va_start(args, format);
  std::vsnprintf(what, sizeof(what), format, args);
  va_end(args);
  if (kernel)
    return fail(status, "%s (%s): layer %d: %s", fn, kernel, layer, what);
  if (ctx) {
    char where[96];
    if (ctx->lastAttention >= 0)
      std::snprintf(where, sizeof(where), "after layer %d's attention", ctx->lastAttention);
    else
      std::snprintf(where, sizeof(where), "before the first attention");
    return fail(status, "%s: op %lld of the %s step (%s): %s", fn,
                static_cast<long long>(ctx->opIndex), kiln_rt_phase_name(ctx->phase), where,
                what);
  }
  return fail(status, "%s: %s", fn, what);
}

kiln_status_t Call::launcher(kiln_status_t status, const char *name) const {
  std::string message = kiln_last_error();
  return error(status, "%s failed: %s", name, message.c_str());
}

kiln_status_t Call::cuda(cudaError_t e, const char *what) const {
  cudaGetLastError();
  return error(e == cudaErrorMemoryAllocation ? KILN_ERROR_OUT_OF_MEMORY : KILN_ERROR_CUDA,
               "%s: %s", what, cudaGetErrorString(e));
}

kiln_status_t replay(kiln_rt_context *ctx) {
  return fail(ctx->status, "%s", ctx->message.c_str());
}

int32_t record(kiln_rt_context *ctx, kiln_status_t status) {
  if (status != KILN_OK && ctx->status == KILN_OK) {
    ctx->status = status;
    ctx->message = kiln_last_error();
  }
  return static_cast<int32_t>(status);
}

bool product(uint64_t *out, std::initializer_list<int64_t> factors) {
  uint64_t p = 1;
  for (int64_t f : factors) {
    if (f < 0)
      return false;
    if (f != 0 && p > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(f))
      return false;
    p *= static_cast<uint64_t>(f);
  }
  *out = p;
  return true;
}

kiln_status_t checkRange(const Call &c, const kiln_rt_context *ctx, const char *what,
                         const void *p, uint64_t bytes, uint64_t align, bool output) {
  if (!p)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "%s is null", what);
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (align > 1 && a % align != 0)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "%s (%p) is not %llu-byte aligned", what, p,
                   static_cast<unsigned long long>(align));
  for (int r = 0; r < kNumRegions; ++r) {
    if (r == kWorkspace || !ctx->base[r])
      continue;
    uintptr_t lo = reinterpret_cast<uintptr_t>(ctx->base[r]);
    if (a < lo || a - lo >= ctx->size[r])
      continue;
    uint64_t offset = a - lo;
    if (bytes > ctx->size[r] - offset)
      return c.error(KILN_ERROR_INVALID_ARGUMENT,
                     "%s [%llu, %llu) of the %s region runs past its end (%llu bytes)", what,
                     static_cast<unsigned long long>(offset),
                     static_cast<unsigned long long>(offset + bytes), regionName(r),
                     static_cast<unsigned long long>(ctx->size[r]));
    if (output && r != kActivations && r != kCaches)
      return c.error(KILN_ERROR_INVALID_ARGUMENT,
                     "%s (offset %llu of the %s region) is an output; outputs go to the "
                     "activations", what, static_cast<unsigned long long>(offset),
                     regionName(r));
    return KILN_OK;
  }
  return c.error(KILN_ERROR_INVALID_ARGUMENT,
                 "%s (%p, %llu bytes) lies in no region of the context (weights, caches, "
                 "activations, io)", what, p, static_cast<unsigned long long>(bytes));
}

kiln_status_t selectDevice(const Call &c, const kiln_rt_context *ctx) {
  if (ctx->dry)
    return KILN_OK;
  cudaError_t e = cudaSetDevice(ctx->device);
  if (e != cudaSuccess)
    return c.cuda(e, "cudaSetDevice");
  return KILN_OK;
}

kiln_status_t useResource(const Call &c, kiln_rt_context *ctx, const char *kind, uint64_t offset,
                          uint64_t bytes) {
  const uint64_t cacheBytes = ctx->size[kCaches];
  if (offset % 16 != 0)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "%s offset %llu is not 16-byte aligned", kind,
                   static_cast<unsigned long long>(offset));
  if (offset > cacheBytes || bytes > cacheBytes - offset)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "%s [%llu, %llu) does not fit in the caches (%llu bytes)", kind,
                   static_cast<unsigned long long>(offset),
                   static_cast<unsigned long long>(offset + bytes),
                   static_cast<unsigned long long>(cacheBytes));
  std::pair<int32_t, std::string> key{c.layer, kind};
  auto same = ctx->resources.find(key);
  if (same != ctx->resources.end() && same->second.offset == offset &&
      same->second.bytes == bytes)
    return KILN_OK; // the common case: the same call as in the previous step
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

kiln_status_t ensureBuffer(const Call &c, kiln_rt_context *ctx, Buffer &buffer, size_t bytes) {
  if (ctx->dry || bytes <= buffer.bytes)
    return KILN_OK;
  size_t want = std::max(bytes, buffer.bytes * 2);
  want = (want + 255) / 256 * 256;
  if (buffer.ptr) {
    cudaError_t e = cudaStreamSynchronize(ctx->stream);
    if (e != cudaSuccess)
      return c.cuda(e, "cudaStreamSynchronize before growing the legacy scratch");
    cudaFree(buffer.ptr);
    buffer.ptr = nullptr;
    buffer.bytes = 0;
    if (&buffer == &ctx->index)
      ctx->indexGeneration = ~0ull;
  }
  void *p = nullptr;
  cudaError_t e = cudaMalloc(&p, want);
  if (e != cudaSuccess)
    return c.cuda(e, "cudaMalloc of the legacy scratch");
  buffer.ptr = p;
  buffer.bytes = want;
  return KILN_OK;
}

} // namespace kiln::rt

// ---- context -----------------------------------------------------------------------------

namespace {

// Fake base addresses of a dry context's regions: disjoint, non-null, 256-byte aligned,
// never dereferenced.
constexpr uintptr_t kDryBase = uintptr_t(1) << 44;

kiln_status_t checkConfig(const char *fn, const kiln_rt_config_t *config) {
  if (!config)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: config is null", fn);
  const kiln_rt_config_t &c = *config;
  struct {
    const char *name;
    int64_t value;
  } positive[] = {{"max_batch", c.max_batch},
                  {"max_seq_len", c.max_seq_len},
                  {"page_size", c.page_size},
                  {"max_step_tokens", c.max_step_tokens},
                  {"max_logit_rows", c.max_logit_rows}};
  for (const auto &p : positive)
    if (p.value < 1 || p.value > INT32_MAX)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s %lld outside [1, 2^31)", fn, p.name,
                  static_cast<long long>(p.value));
  // 0 pages: a model without attention layers (a Gated DeltaNet or Mamba2 stack) has no
  // paged KV, and its sequences hold no pages.
  if (c.kv_pages < 0 || c.kv_pages > INT32_MAX)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: kv_pages %lld outside [0, 2^31)", fn,
                static_cast<long long>(c.kv_pages));
  if (c.max_draft_len < 0 || c.max_draft_len > 64)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: max_draft_len %lld outside [0, 64]", fn,
                static_cast<long long>(c.max_draft_len));
  if (c.vocab_size < 0 || c.vocab_size > INT32_MAX)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: vocab_size %lld outside [0, 2^31)", fn,
                static_cast<long long>(c.vocab_size));
  if (c.kv_ring_window < 0 || c.kv_ring_window > INT32_MAX)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: kv_ring_window %lld outside [0, 2^31)", fn,
                static_cast<long long>(c.kv_ring_window));
  int64_t pages = kiln_rt_max_pages_per_seq(c.max_seq_len, c.page_size);
  uint64_t io = kiln_rt_io_bytes(c.max_batch, c.max_step_tokens, c.max_logit_rows, pages,
                                 c.kv_ring_window > 0 ? 1 : 0);
  if (c.io_bytes != io)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: io_bytes %llu != %llu, kiln_rt_io_bytes(max_batch %lld, max_step_tokens "
                "%lld, max_logit_rows %lld, max_pages_per_seq %lld, ring tables %d) of this "
                "runtime's Layout.h (model compiled against another runtime version?)",
                fn, static_cast<unsigned long long>(c.io_bytes),
                static_cast<unsigned long long>(io), static_cast<long long>(c.max_batch),
                static_cast<long long>(c.max_step_tokens), static_cast<long long>(c.max_logit_rows),
                static_cast<long long>(pages), c.kv_ring_window > 0 ? 1 : 0);
  if (c.workspace_bytes < KILN_GEMM_WORKSPACE_BYTES)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: workspace_bytes %llu < KILN_GEMM_WORKSPACE_BYTES %llu (see "
                "kiln_rt_workspace_bytes in Layout.h)",
                fn, static_cast<unsigned long long>(c.workspace_bytes),
                static_cast<unsigned long long>(KILN_GEMM_WORKSPACE_BYTES));
  for (uint64_t b : {c.weight_bytes, c.cache_bytes, c.activation_bytes, c.workspace_bytes,
                     c.io_bytes})
    if (b > (uint64_t(1) << 44))
      return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: a memory category of %llu bytes (> 16 TiB)",
                  fn, static_cast<unsigned long long>(b));
  return KILN_OK;
}

void initCommon(kiln_rt_context *ctx, const kiln_rt_config_t &config) {
  ctx->config = config;
  // Batch-1 steps stream every weight for one row: the skinny GEMM (Gemm.h), which
  // overlaps the kernel before it, in place of cuBLASLt. Its tensor-core form, the same
  // for speculative models (whose verify steps have several rows) and plain ones, so
  // that speculation stays lossless between them (docs/performance.md, 2026-12-07).
  ctx->skinnyGemm =
      config.max_batch == 1 ? KILN_GEMM_SKINNY_TENSOR_CORES : KILN_GEMM_SKINNY_OFF;
  ctx->maxPagesPerSeq =
      static_cast<int32_t>(kiln_rt_max_pages_per_seq(config.max_seq_len, config.page_size));
  ctx->io = kiln_rt_io_layout(config.max_batch, config.max_step_tokens, config.max_logit_rows,
                              ctx->maxPagesPerSeq, config.kv_ring_window > 0 ? 1 : 0);
  ctx->ringPages = static_cast<int32_t>(kiln_rt_ring_pages(
      config.kv_ring_window, config.page_size, config.max_step_tokens, config.max_seq_len));
  ctx->size[kWeights] = config.weight_bytes;
  ctx->size[kCaches] = config.cache_bytes;
  ctx->size[kActivations] = config.activation_bytes;
  ctx->size[kWorkspace] = config.workspace_bytes;
  ctx->size[kIo] = config.io_bytes;
  // The split-KV region: partials, then the fused combine's counters at its end, where
  // no partial of any step (whatever its batch, q_len or key bound) is ever written.
  const uint64_t region = config.workspace_bytes - KILN_GEMM_WORKSPACE_BYTES;
  ctx->counterBytes = kiln_rt_split_counter_bytes(region);
  ctx->splitOffset = KILN_GEMM_WORKSPACE_BYTES;
  ctx->splitBytes = (region - ctx->counterBytes) / 16 * 16; // the counters 16-byte aligned
  ctx->counterOffset = ctx->splitOffset + ctx->splitBytes;
  ctx->allocationBytes = 0;
  for (int r = 0; r < kNumRegions; ++r)
    ctx->allocationBytes += kiln_rt_align(ctx->size[r]);
}

void releaseDevice(kiln_rt_context *ctx) {
  if (ctx->dry)
    return;
  cudaSetDevice(ctx->device);
  if (ctx->stream)
    cudaStreamSynchronize(ctx->stream);
  probeGraphLaunches(ctx);
  destroyGraphs(ctx);
  releaseCommunicator(ctx);
  for (Buffer *b : {&ctx->split, &ctx->index, &ctx->accepted})
    if (b->ptr)
      cudaFree(b->ptr);
  if (ctx->allocation)
    cudaFree(ctx->allocation);
  if (ctx->gemm)
    kiln_gemm_destroy(ctx->gemm);
  if (ctx->uploaded)
    cudaEventDestroy(ctx->uploaded);
  if (ctx->stream) {
    kiln::kernels::markStreamChained(ctx->stream, false); // a later stream may get its address
    cudaStreamDestroy(ctx->stream);
  }
  for (void *h : {static_cast<void *>(ctx->ioHost), static_cast<void *>(ctx->argmaxHost),
                  static_cast<void *>(ctx->logitsHost)})
    if (h)
      cudaFreeHost(h);
  cudaGetLastError();
}

} // namespace

extern "C" kiln_status_t kiln_rt_create(int32_t device, const kiln_rt_config_t *config,
                                        kiln_rt_context_t **out) {
  if (!out)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_create: out is null");
  *out = nullptr;
  if (kiln_status_t s = checkConfig("kiln_rt_create", config); s != KILN_OK)
    return s;
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
  initCommon(ctx, *config);
  auto cleanup = [&](kiln_status_t status, const char *what, cudaError_t err) {
    cudaGetLastError();
    kiln_status_t s =
        err == cudaSuccess
            ? fail(status, "kiln_rt_create: %s", what)
            : fail(status, "kiln_rt_create: %s: %s", what, cudaGetErrorString(err));
    std::string message = kiln_last_error();
    releaseDevice(ctx);
    delete ctx;
    return fail(s, "%s", message.c_str());
  };
  auto oom = [](cudaError_t err) {
    return err == cudaErrorMemoryAllocation ? KILN_ERROR_OUT_OF_MEMORY : KILN_ERROR_CUDA;
  };
  if ((e = cudaSetDevice(device)) != cudaSuccess)
    return cleanup(KILN_ERROR_CUDA, "cudaSetDevice", e);
  if ((e = cudaFree(nullptr)) != cudaSuccess) // creates the primary context (and, with
    return cleanup(KILN_ERROR_CUDA, "cudaFree(0) (context creation)", e); // EAGER, modules)
  if ((e = cudaDeviceGetAttribute(&ctx->smemOptin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                  device)) != cudaSuccess)
    return cleanup(KILN_ERROR_CUDA, "cudaDeviceGetAttribute", e);
  if ((e = cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking)) != cudaSuccess)
    return cleanup(KILN_ERROR_CUDA, "cudaStreamCreateWithFlags", e);
  if ((e = cudaEventCreateWithFlags(&ctx->uploaded, cudaEventDisableTiming)) != cudaSuccess)
    return cleanup(KILN_ERROR_CUDA, "cudaEventCreate", e);
  if (kiln_status_t s = kiln_gemm_create(&ctx->gemm); s != KILN_OK) {
    std::string message = kiln_last_error();
    return cleanup(s, ("kiln_gemm_create: " + message).c_str(), cudaSuccess);
  }
  // A decode step and a verify step must compute a token's rows alike (lossless greedy
  // speculation): GEMM rows invariant up to the largest of them.
  const int64_t decodeRows = std::min<int64_t>(
      std::max<int64_t>(KILN_GEMM_INVARIANT_ROWS, ctx->config.max_batch * (1 + ctx->config.max_draft_len)),
      KILN_GEMM_MAX_INVARIANT_ROWS);
  if (kiln_status_t s = kiln_gemm_set_invariant_rows(ctx->gemm, decodeRows); s != KILN_OK) {
    std::string message = kiln_last_error();
    return cleanup(s, ("kiln_gemm_set_invariant_rows: " + message).c_str(), cudaSuccess);
  }
  // Above 64 sequences, the algorithms are picked for the largest decode batch: picked
  // for 64 rows, the 8B step at batch 256 ran at 43% of its bound, picked for 256 at 59%
  // (docs/performance.md). KILN_GEMM_PIN_ROWS, a tuning experiment, overrides it.
  if (ctx->config.max_batch > KILN_GEMM_INVARIANT_ROWS && !std::getenv("KILN_GEMM_PIN_ROWS"))
    if (kiln_status_t s = kiln_gemm_set_pin_rows(ctx->gemm, ctx->config.max_batch);
        s != KILN_OK) {
      std::string message = kiln_last_error();
      return cleanup(s, ("kiln_gemm_set_pin_rows: " + message).c_str(), cudaSuccess);
    }
  if (kiln_status_t s = kiln_gemm_set_skinny(ctx->gemm, ctx->skinnyGemm); s != KILN_OK) {
    std::string message = kiln_last_error();
    return cleanup(s, ("kiln_gemm_set_skinny: " + message).c_str(), cudaSuccess);
  }
  chainByGemmForm(ctx);
  // cuBLASLt takes ~38 MiB of device memory at its first matmul (a one-time library
  // initialization; later shapes add nothing, measured on the H200): one warm-up matmul
  // on a temporary buffer, freed again, so that this happens before the baseline below
  // and the measured memory of the model is its plan.
  {
    void *tmp = nullptr;
    if ((e = cudaMalloc(&tmp, 1 << 20)) != cudaSuccess)
      return cleanup(oom(e), "cudaMalloc of the GEMM warm-up buffer", e);
    char *t = static_cast<char *>(tmp);
    kiln_status_t s = KILN_OK;
    if ((e = cudaMemsetAsync(tmp, 0, 1 << 20, ctx->stream)) == cudaSuccess)
      s = kiln_gemm_bf16(ctx->gemm, t, t + (256 << 10), t + (512 << 10), t + (768 << 10), 8, 64,
                         64, nullptr, 0, ctx->stream);
    if (e == cudaSuccess)
      e = cudaStreamSynchronize(ctx->stream);
    cudaFree(tmp);
    if (e != cudaSuccess)
      return cleanup(KILN_ERROR_CUDA, "GEMM warm-up", e);
    if (s != KILN_OK) {
      std::string message = kiln_last_error();
      return cleanup(s, ("GEMM warm-up: " + message).c_str(), cudaSuccess);
    }
  }
  // Which expert GEMM the MoE layers' decode steps run is found out now: a step graph
  // may be captured before any eager step.
  if (kiln_status_t s = kiln_moe_prepare(); s != KILN_OK) {
    std::string message = kiln_last_error();
    return cleanup(s, ("kiln_moe_prepare: " + message).c_str(), cudaSuccess);
  }
  // Pinned host staging (host memory: not part of the device plan).
  const auto &c = ctx->config;
  ctx->logitsHostElems = static_cast<size_t>(c.max_logit_rows) *
                         static_cast<size_t>(std::max<int64_t>(c.vocab_size, 1));
  if ((e = cudaHostAlloc(reinterpret_cast<void **>(&ctx->ioHost), c.io_bytes,
                         cudaHostAllocMapped)) != cudaSuccess ||
      (e = cudaHostAlloc(reinterpret_cast<void **>(&ctx->argmaxHost),
                         c.max_logit_rows * sizeof(int32_t), cudaHostAllocMapped)) !=
          cudaSuccess ||
      (e = cudaHostAlloc(reinterpret_cast<void **>(&ctx->logitsHost),
                         ctx->logitsHostElems * sizeof(uint16_t), cudaHostAllocDefault)) !=
          cudaSuccess)
    return cleanup(oom(e), "cudaHostAlloc of the pinned staging", e);
  void *ioDevice = nullptr, *argmaxDevice = nullptr;
  if ((e = cudaHostGetDevicePointer(&ioDevice, ctx->ioHost, 0)) != cudaSuccess ||
      (e = cudaHostGetDevicePointer(&argmaxDevice, ctx->argmaxHost, 0)) != cudaSuccess)
    return cleanup(KILN_ERROR_CUDA, "cudaHostGetDevicePointer of the pinned staging", e);
  ctx->ioHostDevice = static_cast<const uint32_t *>(ioDevice);
  ctx->argmaxHostDevice = static_cast<int32_t *>(argmaxDevice);
  std::memset(ctx->ioHost, 0, c.io_bytes);
  if ((e = cudaDeviceSynchronize()) != cudaSuccess)
    return cleanup(KILN_ERROR_CUDA, "cudaDeviceSynchronize", e);
  size_t total = 0;
  if ((e = cudaMemGetInfo(&ctx->freeBefore, &total)) != cudaSuccess)
    return cleanup(KILN_ERROR_CUDA, "cudaMemGetInfo", e);
  // The one allocation of the plan.
  if ((e = cudaMalloc(&ctx->allocation, ctx->allocationBytes)) != cudaSuccess) {
    char what[160];
    std::snprintf(what, sizeof(what),
                  "cudaMalloc of the model's %llu planned bytes (%zu free of %zu)",
                  static_cast<unsigned long long>(ctx->allocationBytes), ctx->freeBefore, total);
    ctx->allocation = nullptr;
    return cleanup(oom(e), what, e);
  }
  char *at = static_cast<char *>(ctx->allocation);
  for (int r = 0; r < kNumRegions; ++r) {
    ctx->base[r] = at;
    at += kiln_rt_align(ctx->size[r]);
  }
  // Zero-filled: among others the fused combine's counters start at 0 here, once (a dry
  // context has none to zero); every launch leaves them at 0.
  if ((e = cudaMemsetAsync(ctx->allocation, 0, ctx->allocationBytes, ctx->stream)) !=
      cudaSuccess)
    return cleanup(KILN_ERROR_CUDA, "cudaMemsetAsync of the allocation", e);
  if ((e = cudaStreamSynchronize(ctx->stream)) != cudaSuccess)
    return cleanup(KILN_ERROR_CUDA, "cudaStreamSynchronize", e);
  *out = ctx;
  return kiln::kernels::ok();
}

extern "C" kiln_status_t kiln_rt_create_dry(const kiln_rt_config_t *config,
                                            kiln_rt_context_t **out) {
  if (!out)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_create_dry: out is null");
  *out = nullptr;
  if (kiln_status_t s = checkConfig("kiln_rt_create_dry", config); s != KILN_OK)
    return s;
  auto *ctx = new kiln_rt_context();
  ctx->dry = true;
  initCommon(ctx, *config);
  for (int r = 0; r < kNumRegions; ++r)
    ctx->base[r] = reinterpret_cast<char *>(kDryBase * static_cast<uintptr_t>(r + 1));
  *out = ctx;
  return kiln::kernels::ok();
}

extern "C" void kiln_rt_destroy(kiln_rt_context_t *ctx) {
  if (!ctx)
    return;
  releaseDevice(ctx);
  delete ctx;
}

extern "C" int32_t kiln_rt_is_dry(const kiln_rt_context_t *ctx) { return ctx && ctx->dry; }

extern "C" const kiln_rt_config_t *kiln_rt_config(const kiln_rt_context_t *ctx) {
  return ctx ? &ctx->config : nullptr;
}

extern "C" void *kiln_rt_caches(kiln_rt_context_t *ctx) {
  return ctx ? ctx->base[kCaches] : nullptr;
}
extern "C" void *kiln_rt_workspace(kiln_rt_context_t *ctx) {
  return ctx ? ctx->base[kWorkspace] : nullptr;
}
extern "C" void *kiln_rt_io(kiln_rt_context_t *ctx) { return ctx ? ctx->base[kIo] : nullptr; }

extern "C" uint64_t kiln_rt_planned_bytes(const kiln_rt_context_t *ctx) {
  return ctx ? ctx->allocationBytes : 0;
}

extern "C" uint64_t kiln_rt_device_bytes_used(const kiln_rt_context_t *ctx) {
  if (!ctx || ctx->dry)
    return 0;
  if (cudaSetDevice(ctx->device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  size_t freeNow = 0, total = 0;
  if (cudaMemGetInfo(&freeNow, &total) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  // The communicator's buffers are NCCL's, not the plan's (kiln_rt_collective_bytes).
  uint64_t used = ctx->freeBefore > freeNow ? ctx->freeBefore - freeNow : 0;
  return used > ctx->collectiveBytes ? used - ctx->collectiveBytes : 0;
}

extern "C" void *kiln_rt_stream(kiln_rt_context_t *ctx) { return ctx ? ctx->stream : nullptr; }

extern "C" uint64_t kiln_rt_launch_count(const kiln_rt_context_t *ctx) {
  return ctx ? ctx->launches : 0;
}

extern "C" uint64_t kiln_rt_scratch_bytes(const kiln_rt_context_t *ctx) {
  return ctx ? ctx->split.bytes + ctx->index.bytes + ctx->accepted.bytes : 0;
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
    return noteCudaError(ctx, e,
                         fail(KILN_ERROR_CUDA, "kiln_rt_synchronize: cudaStreamSynchronize: %s",
                              cudaGetErrorString(e)));
  }
  noteStreamIdle(ctx);
  return kiln::kernels::ok();
}

// ---- status ------------------------------------------------------------------------------

extern "C" kiln_status_t kiln_rt_status(kiln_rt_context_t *ctx) {
  if (!ctx)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_status: context is null");
  if (ctx->status != KILN_OK)
    return replay(ctx);
  return KILN_OK;
}

extern "C" void kiln_rt_clear_status(kiln_rt_context_t *ctx) {
  if (!ctx)
    return;
  ctx->status = KILN_OK;
  ctx->message.clear();
}

// ---- the step ----------------------------------------------------------------------------

// Measured on an H100 (docs/performance.md, 2026-12-07): chaining gained 1.2% on the 8B
// step at batch 1 (skinny GEMMs) and was mixed at batch 16 (cuBLASLt's). It sets the
// marks directly, not through kiln_graph_chain_launches: a stream that cannot be marked
// is no error of the caller's, and the thread's last error stays.
void kiln::rt::chainByGemmForm(kiln_rt_context *ctx) {
  const bool skinny = ctx->gemm && kiln_gemm_skinny_form(ctx->gemm) != KILN_GEMM_SKINNY_OFF;
  kiln::kernels::markStreamChained(ctx->stream, skinny);
}

void kiln::rt::restartForward(kiln_rt_context *ctx) {
  ctx->status = KILN_OK;
  ctx->message.clear();
  ctx->opIndex = 0;
  ctx->lastAttention = -1;
  ctx->logits = nullptr;
  ctx->argmaxGeneration = ~0ull;
}

namespace {

// A sequence's pending pair: accepted tokens within one speculative step (none before a
// prompt), a replay buffer of the two.
kiln_status_t checkReplay(const char *fn, const kiln_rt_batch_t &b, int i,
                          int64_t maxDraftLen) {
  if (!b.pending)
    return KILN_OK;
  const int32_t pending = b.pending[2 * i], buffer = b.pending[2 * i + 1];
  const int64_t most = b.phase == KILN_RT_PHASE_PREFILL ? 0 : 1 + maxDraftLen;
  if (pending < 0 || pending > most || (buffer != 0 && buffer != 1))
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s (%s): pending[%d] = {%d, %d}: accepted tokens must be in [0, %lld] (%s) "
                "and the buffer 0 or 1", fn, kiln_rt_phase_name(b.phase), i, pending, buffer,
                static_cast<long long>(most),
                b.phase == KILN_RT_PHASE_PREFILL ? "a prefill starts a sequence"
                                                 : "one speculative step's tokens");
  return KILN_OK;
}

// int32 values as unsigned against this bound are in [0, bound) exactly where they are
// below it: past 2^31 every non-negative value is, and a negative one is at least 2^31.
uint32_t unsignedBound(int64_t bound) {
  return static_cast<uint32_t>(std::clamp<int64_t>(bound, 0, int64_t{1} << 31));
}

// Whether every one of the n values is in [0, bound). One unsigned comparison a value,
// OR-reduced without an early exit, which the compiler vectorizes: it runs over every
// page of every sequence on each step's host path (firstOutside finds the culprit once
// this says there is one).
bool allWithin(const int32_t *values, int64_t n, int64_t bound) {
  const uint32_t limit = unsignedBound(bound);
  uint32_t outside = 0;
  for (int64_t i = 0; i < n; ++i)
    outside |= static_cast<uint32_t>(static_cast<uint32_t>(values[i]) >= limit);
  return outside == 0;
}

// The index of the first value outside [0, bound), or n when there is none.
int64_t firstOutside(const int32_t *values, int64_t n, int64_t bound) {
  for (int64_t i = 0; i < n; ++i)
    if (values[i] < 0 || values[i] >= bound)
      return i;
  return n;
}

// Whether every sequence's pages in use (of valid lengths) are ids in [0, kvPages). Short
// rows (kShortBlockTableRow pages at most) are scanned whole with the unused entries
// masked, a fixed-length loop the compiler vectorizes; long rows, mostly unused at decode,
// their pages in use only.
bool pagesInUseWithin(const kiln_rt_batch_t &b, int64_t P, int64_t page, int64_t kvPages) {
  if (P > kiln::rt::kShortBlockTableRow) {
    bool within = true;
    for (int i = 0; i < b.batch; ++i)
      within &= allWithin(b.block_table + i * P, (b.seq_lens[i] + page - 1) / page, kvPages);
    return within;
  }
  const uint32_t bound = unsignedBound(kvPages);
  // Page p is in use where its first position p * page is below the sequence's length: no
  // division a sequence. (P - 1) * page < max_seq_len < 2^31, so the starts fit int32.
  int32_t firstPosition[kiln::rt::kShortBlockTableRow];
  const int32_t rowLength = static_cast<int32_t>(P);
  for (int32_t p = 0; p < rowLength; ++p)
    firstPosition[p] = static_cast<int32_t>(p * page);
  uint32_t outside = 0;
  for (int i = 0; i < b.batch; ++i) {
    const int32_t *row = b.block_table + i * P;
    const int32_t length = b.seq_lens[i];
    for (int32_t p = 0; p < rowLength; ++p)
      outside |= static_cast<uint32_t>(firstPosition[p] < length) &
                 (static_cast<uint32_t>(row[p]) >= bound);
  }
  return outside == 0;
}

// The per-sequence checks of a step (those of prepareStep's loop but the distinct slots)
// as branch-free reductions over the batch, since they run on every step's host path:
// true when every sequence passes them, with the step's token count and longest q_len and
// sequence. False when one may fail: the loop then checks sequence by sequence and names
// the culprit.
bool sequencesPass(const kiln_rt_batch_t &b, const kiln_rt_config_t &cfg, int64_t P,
                   int64_t &tokens, int32_t &maxQ, int32_t &maxSeq) {
  const int n = b.batch;
  const int32_t q0 = b.q_lens[0];
  const int32_t longest = static_cast<int32_t>(cfg.max_seq_len); // < 2^31 (checkConfig)
  // 32-bit flags and maxima in one loop, the 64-bit token count in its own: mixed in one
  // loop, the widths kept the compiler from vectorizing it.
  uint32_t outside = 0, promptNotFromZero = 0, notUniform = 0;
  maxQ = maxSeq = 0;
  for (int i = 0; i < n; ++i) {
    const int32_t q = b.q_lens[i], len = b.seq_lens[i];
    outside |= static_cast<uint32_t>(q < 1) | static_cast<uint32_t>(len < q) |
               static_cast<uint32_t>(len > longest);
    promptNotFromZero |= static_cast<uint32_t>(len != q);
    notUniform |= static_cast<uint32_t>(q != q0);
    maxQ = std::max(maxQ, q);
    maxSeq = std::max(maxSeq, len);
  }
  tokens = 0;
  for (int i = 0; i < n; ++i)
    tokens += b.q_lens[i];
  bool pass = !outside &&
              !(b.phase == KILN_RT_PHASE_PREFILL && promptNotFromZero) &&
              !(b.phase == KILN_RT_PHASE_DECODE && notUniform);
  if (b.slots)
    pass &= allWithin(b.slots, n, cfg.max_batch);
  if (b.pending) {
    const uint32_t most =
        b.phase == KILN_RT_PHASE_PREFILL ? 0u : static_cast<uint32_t>(1 + cfg.max_draft_len);
    bool bad = false;
    for (int i = 0; i < n; ++i)
      bad |= static_cast<uint32_t>(b.pending[2 * i]) > most ||
             static_cast<uint32_t>(b.pending[2 * i + 1]) > 1u;
    pass &= !bad;
  }
  if (pass && cfg.kv_pages > 0)
    pass &= pagesInUseWithin(b, P, cfg.page_size, cfg.kv_pages);
  return pass;
}

// Validates the step and fills the pinned staging; the upload is the caller's.
kiln_status_t prepareStep(kiln_rt_context_t *ctx, const kiln_rt_batch_t *batch) {
  const char *fn = "kiln_rt_set_batch";
  ctx->hasBatch = false;
  ctx->uploadPending = false;
  ++ctx->generation;
  restartForward(ctx);
  ctx->tokens = 0;
  if (kiln_status_t s = refuseIfFaulted(ctx, fn); s != KILN_OK)
    return s;
  if (!batch)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: batch is null", fn);
  const kiln_rt_batch_t &b = *batch;
  const kiln_rt_config_t &cfg = ctx->config;
  const char *phase = kiln_rt_phase_name(b.phase);
  if (b.phase != KILN_RT_PHASE_DECODE && b.phase != KILN_RT_PHASE_PREFILL &&
      b.phase != KILN_RT_PHASE_EXTEND)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: phase %d unknown (decode 0, prefill 1, extend 2)",
                fn, b.phase);
  if (b.batch < 1 || b.batch > cfg.max_batch)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s (%s): batch %d outside [1, max_batch %lld]", fn,
                phase, b.batch, static_cast<long long>(cfg.max_batch));
  if (!b.q_lens || !b.seq_lens || !b.block_table || !b.token_ids || !b.logit_rows)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s (%s): q_lens, seq_lens, block_table, token_ids and logit_rows must all be "
                "given (host arrays)", fn, phase);
  if (b.num_logit_rows < 1 || b.num_logit_rows > cfg.max_logit_rows)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s (%s): num_logit_rows %d outside [1, max_logit_rows %lld]", fn, phase,
                b.num_logit_rows, static_cast<long long>(cfg.max_logit_rows));
  const int64_t page = cfg.page_size, P = ctx->maxPagesPerSeq;
  int64_t tokens = 0;
  int32_t maxQ = 0, maxSeq = 0;
  // The sequence-by-sequence checks run only where the reductions say one fails, to name
  // it (sequencesPass).
  if (!sequencesPass(b, cfg, P, tokens, maxQ, maxSeq)) {
    tokens = maxQ = maxSeq = 0;
    for (int i = 0; i < b.batch; ++i) {
      int32_t q = b.q_lens[i], s = b.seq_lens[i];
      if (q < 1)
        return fail(KILN_ERROR_INVALID_ARGUMENT, "%s (%s): q_lens[%d] = %d < 1", fn, phase, i, q);
      if (s < q || s > cfg.max_seq_len)
        return fail(KILN_ERROR_INVALID_ARGUMENT,
                    "%s (%s): seq_lens[%d] = %d outside [q_lens %d, max_seq_len %lld]", fn, phase,
                    i, s, q, static_cast<long long>(cfg.max_seq_len));
      if (b.phase == KILN_RT_PHASE_PREFILL && s != q)
        return fail(KILN_ERROR_INVALID_ARGUMENT,
                    "%s (prefill): sequence %d: seq_lens %d != q_lens %d (a prefill starts at "
                    "position 0; continue a sequence with the extend phase)", fn, i, s, q);
      if (b.phase == KILN_RT_PHASE_DECODE && q != b.q_lens[0])
        return fail(KILN_ERROR_INVALID_ARGUMENT,
                    "%s (decode): q_lens[%d] = %d != q_lens[0] = %d (decode steps are uniform)",
                    fn, i, q, b.q_lens[0]);
      if (b.slots && (b.slots[i] < 0 || b.slots[i] >= cfg.max_batch))
        return fail(KILN_ERROR_INVALID_ARGUMENT, "%s (%s): slots[%d] = %d outside [0, %lld)", fn,
                    phase, i, b.slots[i], static_cast<long long>(cfg.max_batch));
      if (kiln_status_t st = checkReplay(fn, b, i, cfg.max_draft_len); st != KILN_OK)
        return st;
      const int64_t used = cfg.kv_pages > 0 ? (s + page - 1) / page : 0;
      if (!allWithin(b.block_table + i * P, used, cfg.kv_pages)) {
        const int64_t p = firstOutside(b.block_table + i * P, used, cfg.kv_pages);
        return fail(KILN_ERROR_INVALID_ARGUMENT,
                    "%s (%s): block_table[%d][%lld] = %d outside [0, kv_pages %lld)", fn, phase,
                    i, static_cast<long long>(p), b.block_table[i * P + p],
                    static_cast<long long>(cfg.kv_pages));
      }
      tokens += q;
      maxQ = std::max(maxQ, q);
      maxSeq = std::max(maxSeq, s);
    }
  }
  if (b.slots) {
    // Linear in the batch: this runs on every step's host path.
    std::vector<uint8_t> &seen = ctx->slotSeen;
    seen.assign(static_cast<size_t>(cfg.max_batch), 0);
    for (int i = 0; i < b.batch; ++i) {
      if (seen[b.slots[i]])
        return fail(KILN_ERROR_INVALID_ARGUMENT, "%s (%s): two sequences share slot %d "
                    "(the second is sequence %d)", fn, phase, b.slots[i], i);
      seen[b.slots[i]] = 1;
    }
  }
  if (tokens > cfg.max_step_tokens)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s (%s): %lld tokens > max_step_tokens %lld", fn, phase,
                static_cast<long long>(tokens), static_cast<long long>(cfg.max_step_tokens));
  if (b.phase == KILN_RT_PHASE_DECODE && b.q_lens[0] > 1 + cfg.max_draft_len)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s (decode): q_len %d > 1 + max_draft_len %lld (the model was compiled for "
                "drafts of at most %lld tokens)", fn, b.q_lens[0],
                static_cast<long long>(cfg.max_draft_len),
                static_cast<long long>(cfg.max_draft_len));
  if (!allWithin(b.logit_rows, b.num_logit_rows, tokens)) {
    const int64_t r = firstOutside(b.logit_rows, b.num_logit_rows, tokens);
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s (%s): logit_rows[%lld] = %d outside the step's %lld tokens", fn, phase,
                static_cast<long long>(r), b.logit_rows[r], static_cast<long long>(tokens));
  }
  if (cfg.vocab_size > 0 && !allWithin(b.token_ids, tokens, cfg.vocab_size)) {
    const int64_t t = firstOutside(b.token_ids, tokens, cfg.vocab_size);
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s (%s): token_ids[%lld] = %d outside the vocabulary [0, %lld)", fn, phase,
                static_cast<long long>(t), b.token_ids[t], static_cast<long long>(cfg.vocab_size));
  }

  ctx->cuHost.assign(static_cast<size_t>(b.batch) + 1, 0);
  for (int i = 0; i < b.batch; ++i)
    ctx->cuHost[i + 1] = ctx->cuHost[i] + b.q_lens[i];

  // Legacy view of the step (device pointers into the io region).
  kiln::rt::LegacyBatch &l = ctx->legacy;
  l.batch = b.batch;
  l.q_len = b.phase == KILN_RT_PHASE_DECODE ? b.q_lens[0] : 1;
  l.seq_lens = ioPtr<int32_t>(ctx, ctx->io.seq_lens);
  l.block_table = ioPtr<int32_t>(ctx, ctx->io.block_table);
  l.max_pages = static_cast<int32_t>(P);
  l.num_pages = static_cast<int32_t>(cfg.kv_pages);
  l.slot_indices = ioPtr<int32_t>(ctx, ctx->io.slots);
  l.num_slots = static_cast<int32_t>(cfg.max_batch);
  l.cu_seqlens_q = ioPtr<int32_t>(ctx, ctx->io.cu_seqlens);
  l.total_tokens = static_cast<int32_t>(tokens);
  l.max_q_len = maxQ;
  l.softmax_scale = 0;

  if (!ctx->dry) {
    Call c{fn};
    // The previous step's upload must have left the staging before it is rewritten.
    cudaError_t e = cudaSetDevice(ctx->device);
    if (e == cudaSuccess && ctx->uploadInFlight)
      e = ctx->uploadEvented ? cudaEventSynchronize(ctx->uploaded)
                             : cudaStreamSynchronize(ctx->stream);
    if (e != cudaSuccess)
      return noteCudaError(ctx, e, c.cuda(e, "waiting for the previous step's upload"));
    ctx->uploadInFlight = false;
    ctx->uploadBytes =
        fillStepStaging(ctx->ioHost, ctx->io, {P, page, ctx->ringPages}, b, ctx->cuHost.data(),
                        tokens);
    ctx->uploadPending = true;
  }
  ctx->phase = b.phase;
  ctx->batch = b.batch;
  ctx->qLen = b.phase == KILN_RT_PHASE_DECODE ? b.q_lens[0] : 0;
  ctx->tokens = static_cast<int32_t>(tokens);
  ctx->maxQLen = maxQ;
  ctx->maxSeqLen = maxSeq;
  // The decode kernels' split-KV grid covers the keys up to the next chunk boundary:
  // steps whose longest sequence ends in the same chunk share a CUDA graph.
  const int64_t chunk = kiln_rt_decode_split_keys(cfg.max_seq_len);
  ctx->keyBound = static_cast<int32_t>(
      std::min<int64_t>(cfg.max_seq_len, (maxSeq + chunk - 1) / chunk * chunk));
  ctx->numLogitRows = b.num_logit_rows;
  ctx->hasBatch = true;
  return kiln::kernels::ok();
}

} // namespace

kiln_status_t kiln::rt::uploadStep(kiln_rt_context *ctx) {
  // A capture copies even when set_batch already did: the graph is replayed for steps
  // whose upload is left to it.
  if (ctx->dry || (!ctx->uploadPending && !ctx->capturing))
    return ok();
  Call c{ctx->capturing ? "kiln_rt_forward" : "kiln_rt_set_batch"};
  cudaError_t e = kiln::runtime::launchCopyFromHost(
      ctx->ioHostDevice, reinterpret_cast<uint32_t *>(ctx->base[kIo]),
      ctx->uploadBytes / sizeof(uint32_t), ctx->stream);
  if (e != cudaSuccess)
    return c.cuda(e, "the copy of the step inputs from the pinned staging");
  ++ctx->launches;
  if (ctx->capturing)
    return ok();
  if ((e = cudaEventRecord(ctx->uploaded, ctx->stream)) != cudaSuccess)
    return c.cuda(e, "cudaEventRecord after the step inputs' copy");
  noteUploadIssued(ctx, /*evented=*/true);
  return ok();
}

kiln_status_t kiln::rt::setBatch(kiln_rt_context *ctx, const kiln_rt_batch_t *batch,
                                 Upload upload) {
  const auto start = std::chrono::steady_clock::now();
  kiln_status_t s = prepareStep(ctx, batch);
  if (s == KILN_OK && upload == Upload::Now && (s = uploadStep(ctx)) != KILN_OK)
    ctx->hasBatch = false;
  record(ctx, s);
  ctx->lastSetBatchSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (s == KILN_OK && ctx->phase == KILN_RT_PHASE_DECODE) {
    ctx->decodeSetBatchSeconds += ctx->lastSetBatchSeconds;
    ++ctx->decodeBatches;
  }
  return s;
}

// A failed kiln_rt_set_batch makes the step fail: its message is what every compiled-code
// call of the step (and kiln_rt_status) returns.
extern "C" kiln_status_t kiln_rt_set_batch(kiln_rt_context_t *ctx, const kiln_rt_batch_t *batch) {
  if (!ctx)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_set_batch: context is null");
  return setBatch(ctx, batch, Upload::Now);
}

extern "C" int64_t kiln_rt_step_tokens(const kiln_rt_context_t *ctx) {
  return ctx && ctx->hasBatch ? ctx->tokens : 0;
}

// ---- inputs and outputs of compiled code ---------------------------------------------------

namespace {
// kiln_rt_output(DRAFT_TOKENS): an MTP module's draft at each logit row, [rows, 1] i32.
kiln_status_t handDraftTokens(const Call &c, kiln_rt_context *ctx, const void *data,
                              int64_t rows, int64_t cols) {
  if (rows != ctx->numLogitRows || cols != 1)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "draft_tokens: [%lld, %lld], but the step asks for [%d, 1]",
                   static_cast<long long>(rows), static_cast<long long>(cols),
                   ctx->numLogitRows);
  uint64_t bytes;
  if (!product(&bytes, {rows, 4}))
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "draft_tokens size overflows");
  if (kiln_status_t s = checkRange(c, ctx, "draft_tokens", data, bytes, 4, false); s != KILN_OK)
    return s;
  ctx->draftTokens = data;
  ctx->draftTokensGeneration = ctx->generation;
  return KILN_OK;
}
} // namespace

extern "C" void *kiln_rt_input(kiln_rt_context_t *ctx, int32_t which) {
  if (!ctx) {
    fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_input: context is null");
    return nullptr;
  }
  Call c{"kiln_rt_input", nullptr, -1, ctx};
  uint64_t offset;
  switch (which) {
  case KILN_RT_INPUT_TOKEN_IDS: offset = ctx->io.token_ids; break;
  case KILN_RT_INPUT_POSITIONS: offset = ctx->io.positions; break;
  case KILN_RT_INPUT_LOGIT_ROWS: offset = ctx->io.logit_rows; break;
  default:
    if (ctx->status == KILN_OK)
      record(ctx, c.error(KILN_ERROR_INVALID_ARGUMENT, "input %d unknown", which));
    return nullptr;
  }
  return ctx->base[kIo] + offset;
}

extern "C" int64_t kiln_rt_input_size(kiln_rt_context_t *ctx, int32_t which) {
  if (!ctx) {
    fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_input_size: context is null");
    return 0;
  }
  Call c{"kiln_rt_input_size", nullptr, -1, ctx};
  if (!ctx->hasBatch) {
    if (ctx->status == KILN_OK)
      record(ctx, c.error(KILN_ERROR_INVALID_ARGUMENT,
                          "no step set (call kiln_rt_set_batch first)"));
    return 0;
  }
  switch (which) {
  case KILN_RT_INPUT_TOKEN_IDS:
  case KILN_RT_INPUT_POSITIONS: return ctx->tokens;
  case KILN_RT_INPUT_LOGIT_ROWS: return ctx->numLogitRows;
  }
  if (ctx->status == KILN_OK)
    record(ctx, c.error(KILN_ERROR_INVALID_ARGUMENT, "input %d unknown", which));
  return 0;
}

extern "C" void *kiln_rt_weights(kiln_rt_context_t *ctx) {
  return ctx ? ctx->base[kWeights] : nullptr;
}

extern "C" void *kiln_rt_activations(kiln_rt_context_t *ctx) {
  return ctx ? ctx->base[kActivations] : nullptr;
}

extern "C" int32_t kiln_rt_output(kiln_rt_context_t *ctx, int32_t which, const void *data,
                                  int64_t rows, int64_t cols) {
  if (!ctx)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_output: context is null");
  if (ctx->status != KILN_OK)
    return replay(ctx);
  ++ctx->opIndex;
  Call c{"kiln_rt_output", nullptr, -1, ctx};
  auto run = [&]() -> kiln_status_t {
    if (!ctx->hasBatch)
      return c.error(KILN_ERROR_INVALID_ARGUMENT, "no step set (call kiln_rt_set_batch first)");
    if (which == KILN_RT_OUTPUT_DRAFT_TOKENS)
      return handDraftTokens(c, ctx, data, rows, cols);
    if (which != KILN_RT_OUTPUT_LOGITS)
      return c.error(KILN_ERROR_INVALID_ARGUMENT,
                     "output %d unknown (logits is %d, draft_tokens %d)", which,
                     KILN_RT_OUTPUT_LOGITS, KILN_RT_OUTPUT_DRAFT_TOKENS);
    if (rows != ctx->numLogitRows)
      return c.error(KILN_ERROR_INVALID_ARGUMENT,
                     "logits: %lld rows, but the step asks for %d logit rows",
                     static_cast<long long>(rows), ctx->numLogitRows);
    if (cols < 1 || (ctx->config.vocab_size > 0 && cols != ctx->config.vocab_size))
      return c.error(KILN_ERROR_INVALID_ARGUMENT, "logits: %lld columns, vocab_size is %lld",
                     static_cast<long long>(cols),
                     static_cast<long long>(ctx->config.vocab_size));
    uint64_t bytes;
    if (!product(&bytes, {rows, cols, 2}))
      return c.error(KILN_ERROR_INVALID_ARGUMENT, "logits size overflows");
    if (kiln_status_t s = checkRange(c, ctx, "logits", data, bytes, 2, false); s != KILN_OK)
      return s;
    ctx->logits = data;
    ctx->logitRows = rows;
    ctx->logitCols = cols;
    ctx->logitsGeneration = ctx->generation;
    return KILN_OK;
  };
  return record(ctx, run());
}

// ---- results -------------------------------------------------------------------------------

namespace {

kiln_status_t checkResults(const char *fn, kiln_rt_context_t *ctx, int64_t rows) {
  if (!ctx)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: context is null", fn);
  if (kiln_status_t s = refuseIfFaulted(ctx, fn); s != KILN_OK)
    return s;
  if (ctx->status != KILN_OK) {
    std::string message = ctx->message;
    return fail(ctx->status, "%s: the step failed: %s", fn, message.c_str());
  }
  if (!ctx->hasBatch || ctx->logitsGeneration != ctx->generation || !ctx->logits)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: the step handed back no logits (kiln_rt_output(LOGITS) not called)", fn);
  if (rows != ctx->logitRows)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %lld rows asked, the step has %lld", fn,
                static_cast<long long>(rows), static_cast<long long>(ctx->logitRows));
  return KILN_OK;
}

float bf16ToFloat(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

} // namespace

kiln_status_t kiln::rt::issueArgmax(kiln_rt_context *ctx) {
  Call c{ctx->capturing ? "kiln_rt_forward" : "kiln_rt_read_argmax"};
  const int64_t rows = ctx->logitRows;
  // Written straight to the pinned host array (mapped): no copy node in the graph.
  kiln_status_t s = kiln_argmax_bf16(ctx->logits, ctx->argmaxHostDevice, rows, ctx->logitCols,
                                     ctx->stream);
  ++ctx->launches;
  if (s != KILN_OK)
    return c.launcher(s, "kiln_argmax_bf16");
  ctx->argmaxGeneration = ctx->generation;
  return ok();
}

extern "C" kiln_status_t kiln_rt_read_argmax(kiln_rt_context_t *ctx, int32_t *out,
                                             int64_t rows) {
  const char *fn = "kiln_rt_read_argmax";
  if (kiln_status_t s = checkResults(fn, ctx, rows); s != KILN_OK)
    return s;
  if (!out)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: out is null", fn);
  if (ctx->dry) {
    std::fill(out, out + rows, 0);
    return kiln::kernels::ok();
  }
  Call c{fn};
  cudaError_t e = cudaSetDevice(ctx->device);
  if (e != cudaSuccess)
    return c.cuda(e, "cudaSetDevice");
  if (ctx->argmaxGeneration != ctx->generation)
    if (kiln_status_t s = issueArgmax(ctx); s != KILN_OK)
      return s;
  if ((e = cudaStreamSynchronize(ctx->stream)) != cudaSuccess)
    return noteCudaError(
        ctx, e, c.cuda(e, "cudaStreamSynchronize (the step's kernels or the argmax failed)"));
  noteStreamIdle(ctx);
  std::memcpy(out, ctx->argmaxHost, rows * sizeof(int32_t));
  return kiln::kernels::ok();
}

extern "C" kiln_status_t kiln_rt_read_draft_tokens(kiln_rt_context_t *ctx, int32_t *out,
                                                   int64_t rows) {
  const char *fn = "kiln_rt_read_draft_tokens";
  if (kiln_status_t s = checkResults(fn, ctx, rows); s != KILN_OK)
    return s;
  if (!out)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: out is null", fn);
  if (ctx->draftTokensGeneration != ctx->generation || !ctx->draftTokens)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: the step handed back no draft tokens (a model compiled without "
                "--spec mtp:1)", fn);
  if (ctx->dry) {
    std::fill(out, out + rows, 0);
    return kiln::kernels::ok();
  }
  Call c{fn};
  cudaError_t e = cudaSetDevice(ctx->device);
  if (e == cudaSuccess)
    e = cudaMemcpyAsync(out, ctx->draftTokens, static_cast<size_t>(rows) * sizeof(int32_t),
                        cudaMemcpyDeviceToHost, ctx->stream);
  if (e == cudaSuccess)
    e = cudaStreamSynchronize(ctx->stream);
  if (e != cudaSuccess)
    return noteCudaError(ctx, e, c.cuda(e, "copying the draft tokens to the host"));
  noteStreamIdle(ctx);
  return kiln::kernels::ok();
}

extern "C" int32_t kiln_rt_has_draft_tokens(const kiln_rt_context_t *ctx) {
  return ctx && ctx->draftTokensGeneration == ctx->generation && ctx->draftTokens ? 1 : 0;
}

extern "C" kiln_status_t kiln_rt_read_logits(kiln_rt_context_t *ctx, float *out, int64_t rows,
                                             int64_t cols) {
  const char *fn = "kiln_rt_read_logits";
  if (kiln_status_t s = checkResults(fn, ctx, rows); s != KILN_OK)
    return s;
  if (!out)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: out is null", fn);
  if (cols != ctx->logitCols)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %lld columns asked, the logits have %lld", fn,
                static_cast<long long>(cols), static_cast<long long>(ctx->logitCols));
  size_t n = static_cast<size_t>(rows) * static_cast<size_t>(cols);
  if (ctx->dry) {
    std::fill(out, out + n, 0.0f);
    return kiln::kernels::ok();
  }
  Call c{fn};
  if (n > ctx->logitsHostElems)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "%zu logits exceed the staging of %zu", n,
                   ctx->logitsHostElems);
  cudaError_t e = cudaSetDevice(ctx->device);
  if (e == cudaSuccess)
    e = cudaMemcpyAsync(ctx->logitsHost, ctx->logits, n * sizeof(uint16_t),
                        cudaMemcpyDeviceToHost, ctx->stream);
  if (e != cudaSuccess)
    return c.cuda(e, "cudaMemcpyAsync of the logits");
  if ((e = cudaStreamSynchronize(ctx->stream)) != cudaSuccess)
    return noteCudaError(ctx, e,
                         c.cuda(e, "cudaStreamSynchronize (the step's kernels failed)"));
  noteStreamIdle(ctx);
  for (size_t i = 0; i < n; ++i)
    out[i] = bf16ToFloat(ctx->logitsHost[i]);
  return kiln::kernels::ok();
}
