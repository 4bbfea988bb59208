// C ABI launchers of the decode family: argument validation (before any CUDA call),
// split-KV planning, launches. Kernels themselves live in the .cu files.
#include "kiln/Kernels/Decode.h"

#include "DecodeArgs.h"
#include "DecodeKernels.h"
#include "ProgrammaticLaunch.h"
#include "StatusInternal.h"
#include "TensorMap.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <utility>

using namespace kiln::kernels;
using namespace kiln::decode;
using kiln::kernels::launchMaybeProgrammatic;

namespace {

bool aligned16(const void *ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }
bool isPow2In(int value, int lo, int hi) {
  return value >= lo && value <= hi && (value & (value - 1)) == 0;
}
int log2i(int value) {
  int shift = 0;
  while ((1 << shift) < value)
    ++shift;
  return shift;
}

struct DeviceProps {
  int sms = 0;
  int smemOptin = 0;
  int ccMajor = 0; // programmatic dependent launch needs 9+
};

kiln_status_t deviceProps(const char *kernel, DeviceProps *props) {
  static std::mutex mutex;
  static std::unordered_map<int, DeviceProps> cache;
  int device = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return fail(KILN_ERROR_NO_DEVICE, "%s: cudaGetDevice: %s", kernel, cudaGetErrorString(error));
  }
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(device);
  if (it != cache.end()) {
    *props = it->second;
    return KILN_OK;
  }
  DeviceProps fresh;
  error = cudaDeviceGetAttribute(&fresh.sms, cudaDevAttrMultiProcessorCount, device);
  if (error == cudaSuccess)
    error = cudaDeviceGetAttribute(&fresh.smemOptin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                   device);
  if (error == cudaSuccess)
    error = cudaDeviceGetAttribute(&fresh.ccMajor, cudaDevAttrComputeCapabilityMajor, device);
  if (error != cudaSuccess)
    return fail(KILN_ERROR_CUDA, "%s: cudaDeviceGetAttribute: %s", kernel,
                cudaGetErrorString(error));
  cache[device] = fresh;
  *props = fresh;
  return KILN_OK;
}

// Sets the kernel's dynamic-smem limit once and returns resident blocks per SM.
kiln_status_t prepareKernel(const char *kernel, const KernelInfo &info, int *blocksPerSm) {
  static std::mutex mutex;
  static std::unordered_map<const void *, int> cache;
  int device = 0;
  cudaGetDevice(&device);
  const void *key = reinterpret_cast<const char *>(info.fn) + device; // per device
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it != cache.end()) {
    *blocksPerSm = it->second;
    return KILN_OK;
  }
  cudaError_t error =
      cudaFuncSetAttribute(info.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, info.smemBytes);
  int blocks = 0;
  if (error == cudaSuccess)
    error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, info.fn, info.threads,
                                                          info.smemBytes);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return fail(KILN_ERROR_CUDA, "%s: preparing the kernel: %s", kernel,
                cudaGetErrorString(error));
  }
  blocks = std::max(blocks, 1);
  cache[key] = blocks;
  *blocksPerSm = blocks;
  return KILN_OK;
}

#define KILN_REQUIRE(cond, status, ...)                                                    \
  do {                                                                                     \
    if (!(cond))                                                                           \
      return fail(status, __VA_ARGS__);                                                    \
  } while (0)

struct SplitPlan {
  int numSplits = 1;
  int splitTiles = 1;
  size_t workspaceBytes = 0;
};

size_t partialBytes(long long outRows, int splits, int dv) {
  return static_cast<size_t>(outRows) * splits * (dv + 1) * sizeof(float);
}

// Workspace of `splits` splits: the partials, then (fused combine) `counterBytes` of
// arrival counters; none without split-KV.
size_t splitWorkspace(long long outRows, int splits, int dv, size_t counterBytes) {
  return splits > 1 ? partialBytes(outRows, splits, dv) + counterBytes : 0;
}

// Splits so that batch x heads x splits blocks fill the GPU: FlashAttention's wave
// efficiency rule (smallest split count within 85% of the best wave efficiency).
int autoSplits(long long baseBlocks, int slots, int maxTiles) {
  int limit = std::min(maxTiles, KILN_DECODE_MAX_SPLITS);
  if (limit <= 1 || baseBlocks >= 0.8 * slots)
    return 1;
  auto efficiency = [&](int splits) {
    double blocks = static_cast<double>(baseBlocks) * splits;
    double waves = std::ceil(blocks / slots);
    return blocks / (waves * slots);
  };
  double best = 0;
  for (int s = 1; s <= limit; ++s)
    best = std::max(best, efficiency(s));
  for (int s = 1; s <= limit; ++s)
    if (efficiency(s) >= 0.85 * best)
      return s;
  return 1;
}

// Fixed key chunks anchored at key 0 (kiln_gqa_decode_params_t::split_keys): the split
// boundaries depend on nothing but split_keys, and a workspace too small for them is an
// error rather than fewer splits.
kiln_status_t planFixedSplits(const char *kernel, int splitKeys, int maxSeqLen, int tileN,
                              long long outRows, int dv, size_t workspaceBytes,
                              const void *workspace, bool forQuery, SplitPlan *plan) {
  KILN_REQUIRE(splitKeys % 64 == 0 && splitKeys % tileN == 0, KILN_ERROR_INVALID_ARGUMENT,
               "%s: split_keys %d is not a positive multiple of 64", kernel, splitKeys);
  const int splits = (maxSeqLen + splitKeys - 1) / splitKeys;
  KILN_REQUIRE(splits <= KILN_DECODE_MAX_SPLITS, KILN_ERROR_INVALID_ARGUMENT,
               "%s: max_seq_len %d in chunks of split_keys %d needs %d splits (at most %d)",
               kernel, maxSeqLen, splitKeys, splits, KILN_DECODE_MAX_SPLITS);
  plan->splitTiles = splitKeys / tileN;
  plan->numSplits = std::max(1, splits);
  plan->workspaceBytes = plan->numSplits > 1 ? partialBytes(outRows, plan->numSplits, dv) : 0;
  const size_t have = workspace ? workspaceBytes : 0;
  KILN_REQUIRE(forQuery || have >= plan->workspaceBytes, KILN_ERROR_INVALID_ARGUMENT,
               "%s: workspace_bytes %zu too small for %d splits of split_keys %d (needs %zu)",
               kernel, have, plan->numSplits, splitKeys, plan->workspaceBytes);
  return KILN_OK;
}

// Automatic splits when the kernel combines its own partials (gqa_decode's fused
// combine): a split costs no second launch, only the last block's L2 reads of one more
// partial, so take the (whole-tile) split count whose blocks fill the most of one wave
// of resident slots. Short single-sequence steps get ~2 blocks an SM instead of the
// 85%-efficiency rule's fewer, longer ones; batches that fill the GPU keep 1.
int autoSplitsFused(long long baseBlocks, int slots, int maxTiles, int (*effective)(int, int),
                    int limit) {
  if (limit <= 1 || baseBlocks >= 0.8 * slots)
    return 1;
  int best = 1;
  for (int s = 2; s <= limit; ++s) {
    const int e = effective(maxTiles, s);
    if (baseBlocks * e > slots)
      break;
    if (e > best)
      best = e;
  }
  return best;
}

// Splits that run for `splits` requested: whole key tiles per split, so the count can
// round down (10 tiles in 6 splits are 5 splits of 2 tiles).
int effectiveSplits(int maxTiles, int splits) {
  const int tilesPerSplit = (maxTiles + splits - 1) / splits;
  return (maxTiles + tilesPerSplit - 1) / tilesPerSplit;
}

// `requested` 0 = automatic; a workspace of `workspaceBytes` (when planning the launch)
// caps the split count; for the workspace query pass SIZE_MAX. `fused`: the kernel
// combines its own partials (the fill-one-wave rule applies); `counterBytes` > 0: its
// counters follow the partials in the workspace (0: they live elsewhere).
kiln_status_t planSplits(const char *kernel, int requested, long long baseBlocks, int slots,
                         int maxSeqLen, int tileN, long long outRows, int dv, size_t workspaceBytes,
                         const void *workspace, bool forQuery, SplitPlan *plan, bool fused = false,
                         size_t counterBytes = 0) {
  const int maxTiles = std::max(1, (maxSeqLen + tileN - 1) / tileN);
  // The splits that run: whole key tiles per split, so `splits` can round down (10
  // tiles in 6 splits are 5 splits of 2 tiles). The query and the launch both size the
  // partials by this count, so the queried workspace is always enough.
  auto effective = [&](int splits) { return effectiveSplits(maxTiles, splits); };
  const int autoLimit = std::min(maxTiles, KILN_DECODE_MAX_SPLITS);
  int splits =
      effective(requested > 0 ? std::min(requested, maxTiles)
                : fused ? autoSplitsFused(baseBlocks, slots, maxTiles, effectiveSplits, autoLimit)
                        : autoSplits(baseBlocks, slots, maxTiles));
  auto need = [&](int n) { return splitWorkspace(outRows, n, dv, counterBytes); };
  if (!forQuery && splits > 1) {
    size_t have = workspace ? workspaceBytes : 0;
    if (have < need(splits)) {
      if (requested > 0)
        return fail(KILN_ERROR_INVALID_ARGUMENT,
                    "%s: workspace_bytes %zu too small for num_splits %d (%d after rounding "
                    "to whole key tiles; needs %zu)",
                    kernel, have, requested, splits, need(splits));
      // The most splits the workspace holds (counters included).
      while (splits > 1 && have < need(splits))
        splits = effective(splits - 1);
    }
  }
  plan->splitTiles = (maxTiles + splits - 1) / splits;
  plan->numSplits = (maxTiles + plan->splitTiles - 1) / plan->splitTiles;
  plan->workspaceBytes = need(plan->numSplits);
  return KILN_OK;
}

kiln_status_t launch(const char *kernel, const void *fn, dim3 grid, dim3 block, void *args,
                     size_t smem, void *stream, bool pdl = false) {
  void *argv[] = {args};
  cudaError_t error = launchMaybeProgrammatic(fn, grid, block, argv, smem, static_cast<cudaStream_t>(stream), pdl);
  if (error == cudaSuccess)
    error = cudaGetLastError();
  if (error != cudaSuccess)
    return fail(KILN_ERROR_CUDA, "%s: kernel launch: %s", kernel, cudaGetErrorString(error));
  return KILN_OK;
}

// Whether an append kernel is launched chained to the kernel before it (each waits before
// its first read, KvAppend.cu): where chaining is on for the stream
// (chainSmallKernels) and its image waits (asked once, and only once chaining is on).
bool appendChained(const void *fn, void *stream) {
  if (!kiln::kernels::chainSmallKernels(static_cast<cudaStream_t>(stream)))
    return false;
  static const std::array<std::pair<const void *, bool>, 5> chained = [] {
    std::array<std::pair<const void *, bool>, 5> table{
        {{kvAppendKernel(), false},
         {kvAppendFp8Kernel(), false},
         {kvAppendF16Kernel(), false},
         {mlaKvAppendKernel(), false},
         {mlaKvAppendFp8Kernel(), false}}};
    for (auto &[kernel, waits] : table)
      waits = kiln::kernels::imageWaits(kernel);
    return table;
  }();
  for (const auto &[kernel, waits] : chained)
    if (kernel == fn)
      return waits;
  return false;
}

kiln_status_t launchCombine(const char *kernel, kiln_dtype_t dtype, float *partO, float *partLse,
                            void *out, long long outRows, int numSplits, int dv, void *stream,
                            const float *sinks = nullptr, int heads = 1, bool pdl = false) {
  const void *fn = dtype == KILN_DTYPE_BF16 ? splitCombineKernelBf16() : splitCombineKernelF16();
  void *argv[] = {&partO, &partLse, &out, &numSplits, &dv, &sinks, &heads};
  dim3 grid(static_cast<unsigned>(outRows));
  dim3 block(std::min(128, dv / 4));
  cudaError_t error = launchMaybeProgrammatic(fn, grid, block, argv, 0, static_cast<cudaStream_t>(stream), pdl);
  if (error == cudaSuccess)
    error = cudaGetLastError();
  if (error != cudaSuccess)
    return fail(KILN_ERROR_CUDA, "%s: combine launch: %s", kernel, cudaGetErrorString(error));
  return KILN_OK;
}

// ---- gqa_decode ------------------------------------------------------------------------

constexpr const char *kGqa = "gqa_decode";

size_t gqaCounterBytes(const kiln_gqa_decode_params_t *p);

kiln_status_t validateGqa(const kiln_gqa_decode_params_t *p) {
  KILN_REQUIRE(p, KILN_ERROR_INVALID_ARGUMENT, "%s: params is null", kGqa);
  KILN_REQUIRE(p->q, KILN_ERROR_INVALID_ARGUMENT, "%s: q is null", kGqa);
  KILN_REQUIRE(p->kv_cache, KILN_ERROR_INVALID_ARGUMENT, "%s: kv_cache is null", kGqa);
  KILN_REQUIRE(p->block_table, KILN_ERROR_INVALID_ARGUMENT, "%s: block_table is null", kGqa);
  KILN_REQUIRE(p->seq_lens, KILN_ERROR_INVALID_ARGUMENT, "%s: seq_lens is null", kGqa);
  KILN_REQUIRE(p->out, KILN_ERROR_INVALID_ARGUMENT, "%s: out is null", kGqa);
  KILN_REQUIRE(p->dtype == KILN_DTYPE_BF16 || p->dtype == KILN_DTYPE_F16, KILN_ERROR_UNSUPPORTED,
               "%s: dtype %d unsupported (BF16 or F16)", kGqa, static_cast<int>(p->dtype));
  if (kiln_status_t s = checkCacheDtype(kGqa, p->dtype, p->kv_dtype, p->k_scale, p->v_scale);
      s != KILN_OK)
    return s;
  KILN_REQUIRE(p->batch >= 1, KILN_ERROR_INVALID_ARGUMENT, "%s: batch %d < 1", kGqa, p->batch);
  KILN_REQUIRE(p->q_len >= 1, KILN_ERROR_INVALID_ARGUMENT, "%s: q_len %d < 1", kGqa, p->q_len);
  KILN_REQUIRE(p->q_len <= 8, KILN_ERROR_UNSUPPORTED, "%s: q_len %d unsupported (1..8)", kGqa,
               p->q_len);
  KILN_REQUIRE(p->kv_heads >= 1, KILN_ERROR_INVALID_ARGUMENT, "%s: kv_heads %d < 1", kGqa,
               p->kv_heads);
  KILN_REQUIRE(p->q_heads >= 1 && p->q_heads % p->kv_heads == 0, KILN_ERROR_INVALID_ARGUMENT,
               "%s: q_heads %d is not a positive multiple of kv_heads %d", kGqa, p->q_heads,
               p->kv_heads);
  KILN_REQUIRE(p->q_heads / p->kv_heads <= 16, KILN_ERROR_UNSUPPORTED,
               "%s: group size q_heads/kv_heads = %d unsupported (1..16)", kGqa,
               p->q_heads / p->kv_heads);
  KILN_REQUIRE(p->head_dim == 64 || p->head_dim == 128 || p->head_dim == 256,
               KILN_ERROR_UNSUPPORTED, "%s: head_dim %d unsupported (64, 128, 256)", kGqa,
               p->head_dim);
  KILN_REQUIRE(isPow2In(p->page_size, 16, 128), KILN_ERROR_UNSUPPORTED,
               "%s: page_size %d unsupported (16, 32, 64, 128)", kGqa, p->page_size);
  KILN_REQUIRE(p->num_pages >= 1, KILN_ERROR_INVALID_ARGUMENT, "%s: num_pages %d < 1", kGqa,
               p->num_pages);
  KILN_REQUIRE(p->max_pages_per_seq >= 1, KILN_ERROR_INVALID_ARGUMENT,
               "%s: max_pages_per_seq %d < 1", kGqa, p->max_pages_per_seq);
  KILN_REQUIRE(p->max_seq_len >= p->q_len &&
                   static_cast<long long>(p->max_seq_len) <=
                       static_cast<long long>(p->max_pages_per_seq) * p->page_size,
               KILN_ERROR_INVALID_ARGUMENT,
               "%s: max_seq_len %d outside [q_len %d, max_pages_per_seq*page_size %lld]", kGqa,
               p->max_seq_len, p->q_len,
               static_cast<long long>(p->max_pages_per_seq) * p->page_size);
  KILN_REQUIRE(std::isfinite(p->softmax_scale) && p->softmax_scale > 0.f,
               KILN_ERROR_INVALID_ARGUMENT, "%s: softmax_scale %g must be finite and > 0", kGqa,
               p->softmax_scale);
  KILN_REQUIRE(p->num_splits >= 0 && p->num_splits <= KILN_DECODE_MAX_SPLITS,
               KILN_ERROR_INVALID_ARGUMENT, "%s: num_splits %d outside [0, %d]", kGqa,
               p->num_splits, KILN_DECODE_MAX_SPLITS);
  KILN_REQUIRE(p->split_keys >= 0, KILN_ERROR_INVALID_ARGUMENT, "%s: split_keys %d < 0", kGqa,
               p->split_keys);
  KILN_REQUIRE(p->window >= 0, KILN_ERROR_INVALID_ARGUMENT, "%s: window %d < 0", kGqa,
               p->window);
  KILN_REQUIRE(p->split_keys == 0 || p->num_splits == 0, KILN_ERROR_INVALID_ARGUMENT,
               "%s: num_splits %d and split_keys %d are exclusive", kGqa, p->num_splits,
               p->split_keys);
  KILN_REQUIRE(aligned16(p->q) && aligned16(p->kv_cache) && aligned16(p->out) &&
                   aligned16(p->workspace),
               KILN_ERROR_INVALID_ARGUMENT,
               "%s: q, kv_cache, out and workspace must be 16-byte aligned", kGqa);
  KILN_REQUIRE((reinterpret_cast<uintptr_t>(p->split_counters) & 3) == 0,
               KILN_ERROR_INVALID_ARGUMENT, "%s: split_counters must be 4-byte aligned", kGqa);
  KILN_REQUIRE(!p->split_counters || p->split_counter_bytes >= gqaCounterBytes(p),
               KILN_ERROR_INVALID_ARGUMENT,
               "%s: split_counter_bytes %zu too small (needs %zu: batch x kv_heads x row blocks "
               "x 4)",
               kGqa, p->split_counter_bytes, gqaCounterBytes(p));
  return KILN_OK;
}

// m16 row tiles per block: 1 or 2 (up to 32 query rows share one read of K/V); more
// rows take more row blocks.
int gqaRows(const kiln_gqa_decode_params_t *p) { return p->q_len * (p->q_heads / p->kv_heads); }
int gqaMTiles(const kiln_gqa_decode_params_t *p) { return gqaRows(p) > 16 ? 2 : 1; }
int gqaRowBlocks(const kiln_gqa_decode_params_t *p) {
  const int rowsPerBlock = 16 * gqaMTiles(p);
  return (gqaRows(p) + rowsPerBlock - 1) / rowsPerBlock;
}

// KILN_GQA_SEPARATE_COMBINE (experiment knob, read per call): the launch as it was before
// the fused combine (85%-wave-efficiency splits, a second combine kernel, no
// programmatic dependent launch), so one benchmark run can show both.
bool gqaLegacy() { return std::getenv("KILN_GQA_SEPARATE_COMBINE") != nullptr; }

// The kernel combines its own partials (args.counters) in num_splits mode, and in
// split_keys mode when the caller gives the counters a place of their own
// (split_counters; the runtime's, in its split-KV region, Layout.h). split_keys mode
// without one keeps the combine kernel: counters after the partials would move with the
// split count (the step's key bound), onto bytes that held partials.
bool gqaFused(const kiln_gqa_decode_params_t *p) {
  return (p->split_keys == 0 || p->split_counters) && !gqaLegacy();
}

// One arrival counter a (sequence, kv head x row block) group: the fused kernel's grid.y x z.
size_t gqaCounterBytes(const kiln_gqa_decode_params_t *p) {
  return static_cast<size_t>(p->batch) * p->kv_heads * gqaRowBlocks(p) * sizeof(unsigned);
}

// Counter bytes the workspace holds after the partials: none where split_counters holds them.
size_t gqaWorkspaceCounterBytes(const kiln_gqa_decode_params_t *p) {
  return gqaFused(p) && !p->split_counters ? gqaCounterBytes(p) : 0;
}

// The tuning variant (GqaDecodeKernel.cuh, kGqaVariants) a launch of these params runs by
// default: 0 everywhere. Variants exist for bf16 q/out over a bf16 pool at head_dim 128
// with one row tile (q_len * group <= 16). A rule may use the shape and the device for
// the variants of variant 0's arithmetic (stages, prefetch, page hoisting, blocks/SM);
// those that change the blocks an SM change the automatic split count, so they keep the
// bits only where the split plan is fixed (split_keys, as the runtime runs). The 32-key
// variants change the bits: not as a default while only one row tile has them (a verify
// step of q_len * group > 16 would run the 64-key kernel, other bits than its decode
// steps: speculation would stop being lossless), and never chosen by batch or q_len.
int gqaDefaultVariant(const kiln_gqa_decode_params_t *p, const DeviceProps &props) {
  (void)p;
  (void)props;
  return 0; // the one line to change once the benchmark picks a variant
}

// KILN_GQA_VARIANT=n (experiment knob, read per call): run variant n where it exists,
// so one benchmark run can print every variant side by side.
int gqaVariant(const kiln_gqa_decode_params_t *p, const DeviceProps &props, int mTiles) {
  // planGqa's bf16 kernel: bf16 q/out, a pool of neither FP8 nor f16.
  if (p->dtype != KILN_DTYPE_BF16 || p->kv_dtype == KILN_DTYPE_FP8_E4M3 ||
      p->kv_dtype == KILN_DTYPE_F16 || p->head_dim != 128 || mTiles != 1)
    return 0;
  if (const char *env = std::getenv("KILN_GQA_VARIANT"))
    return std::atoi(env);
  return gqaDefaultVariant(p, props);
}

// FP8 pools: the integer widening of the bytes (gqaDecodeKernel's FAST) where the split
// plan has more than one split, cvt where it has one. Measured against cvt on an H200
// (2026-12-06, kiln_decode_bench, automatic splits, q_len 1, 32 q / 8 kv heads, d=128):
// 1.06x at B=1 L=8k, 1.01x at B=1 L=32k and 1.06x at B=16 L=1k (all split), but
// 0.95-0.96x at B=64/128 L=8k/32k (one split). Its Q K^T sums the k step in another
// order, so its bits may differ from cvt's: never in split_keys mode, where the split
// count follows the step's key bound (max_seq_len), which must not change a query's bits
// (a verify step and the decode steps it replays would disagree: greedy speculation over
// FP8 pools would stop being lossless). With automatic or explicit splits the bits follow
// the split count already. Built for head_dim 128 with one row tile (where measured).
bool gqaFastFp8(const kiln_gqa_decode_params_t *p, int mTiles, const SplitPlan &plan) {
  return p->kv_dtype == KILN_DTYPE_FP8_E4M3 && p->split_keys == 0 && plan.numSplits > 1 &&
         p->head_dim == 128 && mTiles == 1;
}

kiln_status_t planGqa(const kiln_gqa_decode_params_t *p, bool forQuery, KernelInfo *info,
                      SplitPlan *plan) {
  kiln_status_t status = validateGqa(p);
  if (status != KILN_OK)
    return status;
  int mTiles = gqaMTiles(p);
  // validateGqa: FP8 and f16 pools (when dtype is not F16) come with bf16 q/out.
  *info = p->kv_dtype == KILN_DTYPE_FP8_E4M3 ? gqaKernelInfoBf16Fp8(p->head_dim, mTiles)
          : p->dtype == KILN_DTYPE_F16       ? gqaKernelInfoF16(p->head_dim, mTiles)
          : p->kv_dtype == KILN_DTYPE_F16    ? gqaKernelInfoBf16F16(p->head_dim, mTiles)
                                             : gqaKernelInfoBf16(p->head_dim, mTiles);
  KILN_REQUIRE(info->fn, KILN_ERROR_UNSUPPORTED, "%s: no kernel for head_dim %d, %d row tiles",
               kGqa, p->head_dim, mTiles);
  DeviceProps props;
  if ((status = deviceProps(kGqa, &props)) != KILN_OK)
    return status;
  if (const int variant = gqaVariant(p, props, mTiles); variant != 0) {
    *info = gqaKernelInfoBf16Variant(variant);
    KILN_REQUIRE(info->fn, KILN_ERROR_INVALID_ARGUMENT, "%s: no tuning variant %d (1..%d)", kGqa,
                 variant, gqaNumVariants() - 1);
  }
  KILN_REQUIRE(info->smemBytes <= props.smemOptin, KILN_ERROR_UNSUPPORTED,
               "%s: head_dim %d with q_len*group %d needs %d bytes of shared memory per "
               "block, the device allows %d",
               kGqa, p->head_dim, p->q_len * (p->q_heads / p->kv_heads), info->smemBytes,
               props.smemOptin);
  int blocksPerSm = 1;
  if ((status = prepareKernel(kGqa, *info, &blocksPerSm)) != KILN_OK)
    return status;
  long long outRows = static_cast<long long>(p->batch) * p->q_len * p->q_heads;
  if (p->split_keys > 0)
    return planFixedSplits(kGqa, p->split_keys, p->max_seq_len, info->tileN, outRows,
                           p->head_dim, p->workspace_bytes, p->workspace, forQuery, plan);
  status = planSplits(
      kGqa, p->num_splits, static_cast<long long>(p->batch) * p->kv_heads * gqaRowBlocks(p),
      props.sms * blocksPerSm, p->max_seq_len, info->tileN, outRows, p->head_dim,
      p->workspace_bytes, p->workspace, forQuery, plan, gqaFused(p), gqaWorkspaceCounterBytes(p));
  if (status != KILN_OK || !gqaFastFp8(p, mTiles, *plan))
    return status;
  // The same configuration (threads, smem, tile; smem bounds both at 2 blocks an SM), so
  // the plan stands.
  const KernelInfo fast = gqaKernelInfoBf16Fp8Fast(p->head_dim, mTiles);
  int fastBlocksPerSm = 1;
  if ((status = prepareKernel(kGqa, fast, &fastBlocksPerSm)) != KILN_OK)
    return status;
  *info = fast;
  return KILN_OK;
}

// ---- mla_decode ------------------------------------------------------------------------

kiln_status_t validateMla(const char *kernel, const kiln_mla_decode_params_t *p, int maxQLen) {
  KILN_REQUIRE(p, KILN_ERROR_INVALID_ARGUMENT, "%s: params is null", kernel);
  KILN_REQUIRE(p->q, KILN_ERROR_INVALID_ARGUMENT, "%s: q is null", kernel);
  KILN_REQUIRE(p->latent_cache, KILN_ERROR_INVALID_ARGUMENT, "%s: latent_cache is null", kernel);
  KILN_REQUIRE(p->block_table, KILN_ERROR_INVALID_ARGUMENT, "%s: block_table is null", kernel);
  const bool perToken = p->token_rows || p->token_pos;
  KILN_REQUIRE(!perToken || (p->token_rows && p->token_pos), KILN_ERROR_INVALID_ARGUMENT,
               "%s: per-token mode needs both token_rows and token_pos", kernel);
  KILN_REQUIRE(!perToken || p->q_len == 1, KILN_ERROR_INVALID_ARGUMENT,
               "%s: per-token mode runs q_len 1 (got %d)", kernel, p->q_len);
  KILN_REQUIRE(perToken || p->seq_lens, KILN_ERROR_INVALID_ARGUMENT, "%s: seq_lens is null",
               kernel);
  KILN_REQUIRE(p->out, KILN_ERROR_INVALID_ARGUMENT, "%s: out is null", kernel);
  KILN_REQUIRE(p->dtype == KILN_DTYPE_BF16, KILN_ERROR_UNSUPPORTED,
               "%s: dtype %d unsupported (BF16 only)", kernel, static_cast<int>(p->dtype));
  KILN_REQUIRE(p->kv_dtype == KILN_DTYPE_BF16 || p->kv_dtype == KILN_DTYPE_FP8_E4M3,
               KILN_ERROR_UNSUPPORTED, "%s: kv_dtype %d unsupported (BF16 or FP8_E4M3 pools)",
               kernel, static_cast<int>(p->kv_dtype));
  KILN_REQUIRE(p->batch >= 1, KILN_ERROR_INVALID_ARGUMENT, "%s: batch %d < 1", kernel, p->batch);
  KILN_REQUIRE(p->q_len >= 1, KILN_ERROR_INVALID_ARGUMENT, "%s: q_len %d < 1", kernel, p->q_len);
  KILN_REQUIRE(p->q_len <= maxQLen, KILN_ERROR_UNSUPPORTED, "%s: q_len %d unsupported (1..%d)",
               kernel, p->q_len, maxQLen);
  KILN_REQUIRE(p->num_heads >= 1, KILN_ERROR_INVALID_ARGUMENT, "%s: num_heads %d < 1", kernel,
               p->num_heads);
  KILN_REQUIRE(p->num_heads <= 128, KILN_ERROR_UNSUPPORTED,
               "%s: num_heads %d unsupported (1..128)", kernel, p->num_heads);
  KILN_REQUIRE(p->num_pages >= 1, KILN_ERROR_INVALID_ARGUMENT, "%s: num_pages %d < 1", kernel,
               p->num_pages);
  KILN_REQUIRE(p->max_pages_per_seq >= 1, KILN_ERROR_INVALID_ARGUMENT,
               "%s: max_pages_per_seq %d < 1", kernel, p->max_pages_per_seq);
  KILN_REQUIRE(p->max_seq_len >= p->q_len &&
                   static_cast<long long>(p->max_seq_len) <=
                       static_cast<long long>(p->max_pages_per_seq) * KILN_MLA_PAGE_SIZE,
               KILN_ERROR_INVALID_ARGUMENT,
               "%s: max_seq_len %d outside [q_len %d, max_pages_per_seq*64 %lld]", kernel,
               p->max_seq_len, p->q_len,
               static_cast<long long>(p->max_pages_per_seq) * KILN_MLA_PAGE_SIZE);
  KILN_REQUIRE(std::isfinite(p->softmax_scale) && p->softmax_scale > 0.f,
               KILN_ERROR_INVALID_ARGUMENT, "%s: softmax_scale %g must be finite and > 0",
               kernel, p->softmax_scale);
  KILN_REQUIRE(p->num_splits >= 0 && p->num_splits <= KILN_DECODE_MAX_SPLITS,
               KILN_ERROR_INVALID_ARGUMENT, "%s: num_splits %d outside [0, %d]", kernel,
               p->num_splits, KILN_DECODE_MAX_SPLITS);
  KILN_REQUIRE(aligned16(p->q) && aligned16(p->latent_cache) && aligned16(p->out) &&
                   aligned16(p->workspace),
               KILN_ERROR_INVALID_ARGUMENT,
               "%s: q, latent_cache, out and workspace must be 16-byte aligned", kernel);
  return KILN_OK;
}

constexpr int kMlaBigRows = 64, kMlaSmallRows = KILN_MLA_SMALL_TILE_ROWS;

// The kernel a launch runs: small = 16 rows x 32-key tiles; big = 64 rows x 64 keys
// (pv16: its 16-row PV warp tiling); sm90 = mla_decode_sm90 (wgmma + TMA, 64 x 64).
enum class MlaVariant { small, big, pv16, sm90 };

// mla_decode_sm90 runs every kiln_mla_decode launch (q_len x heads of any size) on an
// sm_90 device of an sm_90a build: measured on the H100 (2026-12-06, B 128, L 4096) at
// 2.92 TB/s for 16 heads at q_len 1 (1.21x the mma.sync kernel, 91% of the read ceiling),
// 2.88 at q_len 2 (1.81x) and 451-461 TFLOP/s at 128 heads (2.4x). Knobs, read per call:
// KILN_MLA_MMA_SYNC keeps the mma.sync kernels (their tests and the benchmark's
// comparison rows); KILN_MLA_SM90 asks for the wgmma kernel and fails where it cannot run.

// Whether this build and device can run mla_decode_sm90 (sm_90a code, an sm_90 GPU).
bool mlaSm90Runs(const DeviceProps &props) {
#ifdef KILN_MLA_SM90A_BUILT
  return props.ccMajor == 9;
#else
  (void)props;
  return false;
#endif
}

kiln_status_t pickMla(const char *kernel, const kiln_mla_decode_params_t *p, bool smallOnly,
                      MlaVariant *variant) {
  const bool big = !smallOnly && p->q_len * p->num_heads > kMlaSmallRows;
  // KILN_MLA_PV16 (experiment knob, read per call): the 16-row PV warp tiling.
  *variant = !big                           ? MlaVariant::small
             : std::getenv("KILN_MLA_PV16") ? MlaVariant::pv16
                                            : MlaVariant::big;
  if (smallOnly)
    return KILN_OK;
  const bool asked = std::getenv("KILN_MLA_SM90") != nullptr;
  if (p->kv_dtype == KILN_DTYPE_FP8_E4M3) {
    // FP8 pools: the mma.sync kernels only (one tiling for the large tiles).
    KILN_REQUIRE(!asked, KILN_ERROR_UNSUPPORTED,
                 "%s: KILN_MLA_SM90: the wgmma kernel reads bf16 pools only (kv_dtype FP8_E4M3)",
                 kernel);
    if (*variant == MlaVariant::pv16)
      *variant = MlaVariant::big;
    return KILN_OK;
  }
  if (!asked && (std::getenv("KILN_MLA_MMA_SYNC") || *variant == MlaVariant::pv16))
    return KILN_OK;
  DeviceProps props;
  kiln_status_t status = deviceProps(kernel, &props);
  if (status != KILN_OK)
    return status;
  if (mlaSm90Runs(props))
    *variant = MlaVariant::sm90;
  else
    KILN_REQUIRE(!asked, KILN_ERROR_UNSUPPORTED,
                 "%s: KILN_MLA_SM90 needs a build with sm_90a in KILN_CUDA_ARCHITECTURES and an "
                 "sm_90 device",
                 kernel);
  return KILN_OK;
}

kiln_status_t planMla(const char *kernel, const kiln_mla_decode_params_t *p, MlaVariant variant,
                      bool forQuery, KernelInfo *info, SplitPlan *plan) {
  *info = p->kv_dtype == KILN_DTYPE_FP8_E4M3
              ? mlaFp8KernelInfo(variant == MlaVariant::small ? 0 : 1)
          : variant == MlaVariant::sm90 ? mlaSm90KernelInfo()
                                        : mlaKernelInfo(variant == MlaVariant::small  ? 0
                                                        : variant == MlaVariant::pv16 ? 2
                                                                                      : 1);
  DeviceProps props;
  kiln_status_t status = deviceProps(kernel, &props);
  if (status != KILN_OK)
    return status;
  KILN_REQUIRE(info->smemBytes <= props.smemOptin, KILN_ERROR_UNSUPPORTED,
               "%s: q_len*num_heads %d needs %d bytes of shared memory per block, the device "
               "allows %d (use mla_decode_small_smem, q_len 1)",
               kernel, p->q_len * p->num_heads, info->smemBytes, props.smemOptin);
  int blocksPerSm = 1;
  if ((status = prepareKernel(kernel, *info, &blocksPerSm)) != KILN_OK)
    return status;
  int rowsPerBlock = variant == MlaVariant::small ? kMlaSmallRows : kMlaBigRows;
  long long rowBlocks = (p->q_len * p->num_heads + rowsPerBlock - 1) / rowsPerBlock;
  long long outRows = static_cast<long long>(p->batch) * p->q_len * p->num_heads;
  return planSplits(kernel, p->num_splits, p->batch * rowBlocks, props.sms * blocksPerSm,
                    p->max_seq_len, info->tileN, outRows, KILN_MLA_KV_LORA_RANK,
                    p->workspace_bytes, p->workspace, forQuery, plan);
}

kiln_status_t runMla(const char *kernel, const kiln_mla_decode_params_t *p, MlaVariant variant) {
  KernelInfo info;
  SplitPlan plan;
  kiln_status_t status = planMla(kernel, p, variant, false, &info, &plan);
  if (status != KILN_OK)
    return status;
  int rowsPerBlock = variant == MlaVariant::small ? kMlaSmallRows : kMlaBigRows;
  int rows = p->q_len * p->num_heads;
  long long outRows = static_cast<long long>(p->batch) * rows;
  MlaSm90Args sm90Args{}; // sm90: the arguments below plus the pool's tensor map
  MlaArgs &args = sm90Args.base;
  args.q = p->q;
  args.cache = p->latent_cache;
  args.blockTable = p->block_table;
  args.seqLens = p->seq_lens;
  args.tokenRows = p->token_rows;
  args.tokenPos = p->token_pos;
  args.out = p->out;
  args.partO = static_cast<float *>(p->workspace);
  args.partLse = args.partO ? args.partO + outRows * plan.numSplits * KILN_MLA_KV_LORA_RANK : nullptr;
  args.qLen = p->q_len;
  args.heads = p->num_heads;
  args.maxPages = p->max_pages_per_seq;
  args.numSplits = plan.numSplits;
  args.splitTiles = plan.splitTiles;
  args.scaleLog2 = p->softmax_scale * 1.4426950408889634f;
  void *launchArgs = &args;
  if (variant == MlaVariant::sm90) {
    // The pool as a [num_pages * 64, 576] matrix: a tile is the 64 rows of one page.
    cudaError_t error = sm90::encodeBf16SwizzledMap(
        &sm90Args.cache, p->latent_cache, static_cast<uint64_t>(p->num_pages) * KILN_MLA_PAGE_SIZE,
        KILN_MLA_HEAD_DIM, 64);
    KILN_REQUIRE(error == cudaSuccess, KILN_ERROR_CUDA, "%s: encoding the pool's tensor map: %s",
                 kernel, cudaGetErrorString(error));
    launchArgs = &sm90Args;
  }
  dim3 grid((rows + rowsPerBlock - 1) / rowsPerBlock, plan.numSplits, p->batch);
  if ((status = launch(kernel, info.fn, grid, dim3(info.threads), launchArgs, info.smemBytes,
                       p->stream)) != KILN_OK)
    return status;
  if (plan.numSplits > 1 &&
      (status = launchCombine(kernel, p->dtype, args.partO, args.partLse, p->out, outRows,
                              plan.numSplits, KILN_MLA_KV_LORA_RANK, p->stream)) != KILN_OK)
    return status;
  return ok();
}

// ---- kv_append -------------------------------------------------------------------------

kiln_status_t validateTokenTables(const char *kernel, const int32_t *blockTable,
                                  const int32_t *tokenBatch, const int32_t *tokenPos,
                                  int numTokens, int batch, int numPages, int maxPages) {
  KILN_REQUIRE(blockTable, KILN_ERROR_INVALID_ARGUMENT, "%s: block_table is null", kernel);
  KILN_REQUIRE(tokenBatch, KILN_ERROR_INVALID_ARGUMENT, "%s: token_batch is null", kernel);
  KILN_REQUIRE(tokenPos, KILN_ERROR_INVALID_ARGUMENT, "%s: token_pos is null", kernel);
  KILN_REQUIRE(numTokens >= 0, KILN_ERROR_INVALID_ARGUMENT, "%s: num_tokens %d < 0", kernel,
               numTokens);
  KILN_REQUIRE(batch >= 1, KILN_ERROR_INVALID_ARGUMENT, "%s: batch %d < 1", kernel, batch);
  KILN_REQUIRE(numPages >= 1, KILN_ERROR_INVALID_ARGUMENT, "%s: num_pages %d < 1", kernel,
               numPages);
  KILN_REQUIRE(maxPages >= 1, KILN_ERROR_INVALID_ARGUMENT, "%s: max_pages_per_seq %d < 1",
               kernel, maxPages);
  return KILN_OK;
}

kiln_status_t checkStride(const char *kernel, const char *name, long long stride,
                          long long minimum) {
  KILN_REQUIRE(stride >= minimum && stride % 8 == 0, KILN_ERROR_INVALID_ARGUMENT,
               "%s: %s %lld must be a multiple of 8 and >= %lld", kernel, name, stride, minimum);
  return KILN_OK;
}

} // namespace

extern "C" kiln_status_t kiln_gqa_decode_workspace_bytes(const kiln_gqa_decode_params_t *params,
                                                         size_t *bytes) {
  KILN_REQUIRE(bytes, KILN_ERROR_INVALID_ARGUMENT, "%s: bytes is null", kGqa);
  KernelInfo info;
  SplitPlan plan;
  kiln_status_t status = planGqa(params, true, &info, &plan);
  if (status != KILN_OK)
    return status;
  *bytes = plan.workspaceBytes;
  return ok();
}

extern "C" kiln_status_t kiln_gqa_decode(const kiln_gqa_decode_params_t *p) {
  KernelInfo info;
  SplitPlan plan;
  kiln_status_t status = planGqa(p, false, &info, &plan);
  if (status != KILN_OK)
    return status;
  long long outRows = static_cast<long long>(p->batch) * p->q_len * p->q_heads;
  GqaArgs args{};
  args.q = p->q;
  args.kv = p->kv_cache;
  args.blockTable = p->block_table;
  args.seqLens = p->seq_lens;
  args.out = p->out;
  args.partO = static_cast<float *>(p->workspace);
  args.partLse = args.partO ? args.partO + outRows * plan.numSplits * p->head_dim : nullptr;
  args.qLen = p->q_len;
  args.qHeads = p->q_heads;
  args.kvHeads = p->kv_heads;
  args.group = p->q_heads / p->kv_heads;
  args.rowBlocks = gqaRowBlocks(p);
  args.pageSize = p->page_size;
  args.pageShift = log2i(p->page_size);
  args.maxPages = p->max_pages_per_seq;
  args.numSplits = plan.numSplits;
  args.splitTiles = plan.splitTiles;
  args.window = p->window;
  args.sinks = p->sinks;
  args.kScale = p->k_scale;
  args.vScale = p->v_scale;
  args.scaleLog2 = p->softmax_scale * 1.4426950408889634f;
  const bool fused = gqaFused(p) && plan.numSplits > 1;
  // The caller's counters, or right after the partials (planSplits sized the workspace
  // for them).
  args.counters = !fused ? nullptr
                  : p->split_counters
                      ? static_cast<unsigned *>(p->split_counters)
                      : reinterpret_cast<unsigned *>(args.partLse + outRows * plan.numSplits);
  DeviceProps props;
  if ((status = deviceProps(kGqa, &props)) != KILN_OK)
    return status;
  const bool pdl = props.ccMajor >= 9 && !gqaLegacy();
  dim3 grid(plan.numSplits, p->kv_heads * args.rowBlocks, p->batch);
  if ((status = launch(kGqa, info.fn, grid, dim3(info.threads), &args, info.smemBytes, p->stream,
                       pdl)) != KILN_OK)
    return status;
  if (plan.numSplits > 1 && !fused &&
      (status = launchCombine(kGqa, p->dtype, args.partO, args.partLse, p->out, outRows,
                              plan.numSplits, p->head_dim, p->stream, p->sinks, p->q_heads, pdl)) !=
          KILN_OK)
    return status;
  return ok();
}

extern "C" kiln_status_t kiln_mla_decode_workspace_bytes(const kiln_mla_decode_params_t *p,
                                                         size_t *bytes) {
  constexpr const char *kernel = "mla_decode";
  KILN_REQUIRE(bytes, KILN_ERROR_INVALID_ARGUMENT, "%s: bytes is null", kernel);
  kiln_status_t status = validateMla(kernel, p, 4);
  if (status != KILN_OK)
    return status;
  // Enough for any variant: the small-smem one may be the one launched.
  MlaVariant picked;
  if ((status = pickMla(kernel, p, false, &picked)) != KILN_OK)
    return status;
  size_t most = 0;
  for (MlaVariant variant : {MlaVariant::small, MlaVariant::big, picked}) {
    KernelInfo info;
    SplitPlan plan;
    if (planMla(kernel, p, variant, true, &info, &plan) == KILN_OK)
      most = std::max(most, plan.workspaceBytes);
  }
  *bytes = most;
  return ok();
}

extern "C" kiln_status_t kiln_mla_decode(const kiln_mla_decode_params_t *p) {
  constexpr const char *kernel = "mla_decode";
  kiln_status_t status = validateMla(kernel, p, 4);
  if (status != KILN_OK)
    return status;
  MlaVariant variant;
  if ((status = pickMla(kernel, p, false, &variant)) != KILN_OK)
    return status;
  return runMla(kernel, p, variant);
}

extern "C" kiln_status_t kiln_mla_decode_small_smem(const kiln_mla_decode_params_t *p) {
  constexpr const char *kernel = "mla_decode_small_smem";
  kiln_status_t status = validateMla(kernel, p, 1);
  if (status != KILN_OK)
    return status;
  return runMla(kernel, p, MlaVariant::small);
}

namespace {
// Where each appended token goes: the fields both append launchers (GQA KV and MLA
// latent) take from their params alike.
template <typename Args, typename Params> void fillTokenTables(Args &args, const Params *p) {
  args.blockTable = p->block_table;
  args.tokenBatch = p->token_batch;
  args.tokenPos = p->token_pos;
  args.numTokens = p->num_tokens;
  args.batch = p->batch;
  args.numPages = p->num_pages;
  args.maxPages = p->max_pages_per_seq;
}

// The checks both append launchers make alike: the token tables and the dtype.
template <typename Params> kiln_status_t checkAppendCommon(const char *kernel, const Params *p) {
  kiln_status_t status = validateTokenTables(kernel, p->block_table, p->token_batch, p->token_pos,
                                             p->num_tokens, p->batch, p->num_pages,
                                             p->max_pages_per_seq);
  if (status != KILN_OK)
    return status;
  KILN_REQUIRE(p->dtype == KILN_DTYPE_BF16 || p->dtype == KILN_DTYPE_F16, KILN_ERROR_UNSUPPORTED,
               "%s: dtype %d unsupported (BF16 or F16)", kernel, static_cast<int>(p->dtype));
  return KILN_OK;
}
} // namespace

extern "C" kiln_status_t kiln_kv_append(const kiln_kv_append_params_t *p) {
  constexpr const char *kernel = "kv_append";
  KILN_REQUIRE(p, KILN_ERROR_INVALID_ARGUMENT, "%s: params is null", kernel);
  KILN_REQUIRE(p->k, KILN_ERROR_INVALID_ARGUMENT, "%s: k is null", kernel);
  KILN_REQUIRE(p->v, KILN_ERROR_INVALID_ARGUMENT, "%s: v is null", kernel);
  KILN_REQUIRE(p->kv_cache, KILN_ERROR_INVALID_ARGUMENT, "%s: kv_cache is null", kernel);
  kiln_status_t status = checkAppendCommon(kernel, p);
  if (status != KILN_OK)
    return status;
  KILN_REQUIRE(p->kv_heads >= 1, KILN_ERROR_INVALID_ARGUMENT, "%s: kv_heads %d < 1", kernel,
               p->kv_heads);
  KILN_REQUIRE(p->head_dim == 64 || p->head_dim == 128 || p->head_dim == 256,
               KILN_ERROR_UNSUPPORTED, "%s: head_dim %d unsupported (64, 128, 256)", kernel,
               p->head_dim);
  KILN_REQUIRE(isPow2In(p->page_size, 16, 128), KILN_ERROR_UNSUPPORTED,
               "%s: page_size %d unsupported (16, 32, 64, 128)", kernel, p->page_size);
  long long row = static_cast<long long>(p->kv_heads) * p->head_dim;
  long long kStride = p->k_token_stride ? p->k_token_stride : row;
  long long vStride = p->v_token_stride ? p->v_token_stride : row;
  if ((status = checkStride(kernel, "k_token_stride", kStride, row)) != KILN_OK ||
      (status = checkStride(kernel, "v_token_stride", vStride, row)) != KILN_OK)
    return status;
  if ((status = checkCacheDtype(kernel, p->dtype, p->kv_dtype, p->k_scale, p->v_scale)) !=
      KILN_OK)
    return status;
  KILN_REQUIRE(aligned16(p->k) && aligned16(p->v) && aligned16(p->kv_cache),
               KILN_ERROR_INVALID_ARGUMENT, "%s: k, v and kv_cache must be 16-byte aligned",
               kernel);
  if (p->num_tokens == 0)
    return ok();
  // checkCacheDtype: a pool of another type than k/v (FP8, or f16) comes with bf16 k/v.
  const void *fn = p->kv_dtype == p->dtype              ? kvAppendKernel()
                   : p->kv_dtype == KILN_DTYPE_FP8_E4M3 ? kvAppendFp8Kernel()
                                                        : kvAppendF16Kernel();
  KvAppendArgs args{};
  args.k = static_cast<const uint16_t *>(p->k);
  args.v = static_cast<const uint16_t *>(p->v);
  args.kStride = kStride;
  args.vStride = vStride;
  args.cache = p->kv_cache;
  fillTokenTables(args, p);
  args.kvHeads = p->kv_heads;
  args.headDim = p->head_dim;
  args.pageSize = p->page_size;
  args.kScale = p->k_scale;
  args.vScale = p->v_scale;
  long long chunks = static_cast<long long>(p->num_tokens) * 2 * row / 8;
  if ((status = launch(kernel, fn, dim3(static_cast<unsigned>((chunks + 255) / 256)), dim3(256),
                       &args, 0, p->stream, appendChained(fn, p->stream))) != KILN_OK)
    return status;
  return ok();
}

extern "C" kiln_status_t kiln_mla_kv_append(const kiln_mla_kv_append_params_t *p) {
  constexpr const char *kernel = "mla_kv_append";
  KILN_REQUIRE(p, KILN_ERROR_INVALID_ARGUMENT, "%s: params is null", kernel);
  KILN_REQUIRE(p->kv_c, KILN_ERROR_INVALID_ARGUMENT, "%s: kv_c is null", kernel);
  KILN_REQUIRE(p->k_pe, KILN_ERROR_INVALID_ARGUMENT, "%s: k_pe is null", kernel);
  KILN_REQUIRE(p->latent_cache, KILN_ERROR_INVALID_ARGUMENT, "%s: latent_cache is null", kernel);
  kiln_status_t status = checkAppendCommon(kernel, p);
  if (status != KILN_OK)
    return status;
  long long kvCStride = p->kv_c_token_stride ? p->kv_c_token_stride : KILN_MLA_KV_LORA_RANK;
  long long kPeStride = p->k_pe_token_stride ? p->k_pe_token_stride : KILN_MLA_ROPE_DIM;
  if ((status = checkStride(kernel, "kv_c_token_stride", kvCStride, KILN_MLA_KV_LORA_RANK)) !=
          KILN_OK ||
      (status = checkStride(kernel, "k_pe_token_stride", kPeStride, KILN_MLA_ROPE_DIM)) != KILN_OK)
    return status;
  KILN_REQUIRE(aligned16(p->kv_c) && aligned16(p->k_pe) && aligned16(p->latent_cache),
               KILN_ERROR_INVALID_ARGUMENT,
               "%s: kv_c, k_pe and latent_cache must be 16-byte aligned", kernel);
  KILN_REQUIRE(p->kv_dtype == KILN_DTYPE_BF16 || p->kv_dtype == KILN_DTYPE_FP8_E4M3,
               KILN_ERROR_UNSUPPORTED, "%s: kv_dtype %d unsupported (BF16 or FP8_E4M3 pools)",
               kernel, static_cast<int>(p->kv_dtype));
  KILN_REQUIRE(p->kv_dtype == KILN_DTYPE_BF16 || p->dtype == KILN_DTYPE_BF16,
               KILN_ERROR_UNSUPPORTED, "%s: an FP8 pool takes BF16 kv_c / k_pe", kernel);
  if (p->num_tokens == 0)
    return ok();
  MlaKvAppendArgs args{};
  args.kvC = static_cast<const uint16_t *>(p->kv_c);
  args.kPe = static_cast<const uint16_t *>(p->k_pe);
  args.kvCStride = kvCStride;
  args.kPeStride = kPeStride;
  args.cache = static_cast<uint16_t *>(p->latent_cache);
  fillTokenTables(args, p);
  const bool fp8 = p->kv_dtype == KILN_DTYPE_FP8_E4M3;
  // bf16: a thread a 16-byte chunk; FP8: a warp a token.
  long long chunks = static_cast<long long>(p->num_tokens) * (fp8 ? 32 : KILN_MLA_HEAD_DIM / 8);
  const void *fn = fp8 ? mlaKvAppendFp8Kernel() : mlaKvAppendKernel();
  if ((status = launch(kernel, fn, dim3(static_cast<unsigned>((chunks + 255) / 256)), dim3(256),
                       &args, 0, p->stream, appendChained(fn, p->stream))) != KILN_OK)
    return status;
  return ok();
}

extern "C" kiln_status_t kiln_mla_expand_keys(const kiln_mla_expand_keys_params_t *p) {
  constexpr const char *kernel = "mla_expand_keys";
  KILN_REQUIRE(p, KILN_ERROR_INVALID_ARGUMENT, "%s: params is null", kernel);
  KILN_REQUIRE(p->kv && p->k_pe && p->k, KILN_ERROR_INVALID_ARGUMENT,
               "%s: kv, k_pe and k must not be null", kernel);
  KILN_REQUIRE(aligned16(p->kv) && aligned16(p->k_pe) && aligned16(p->k),
               KILN_ERROR_INVALID_ARGUMENT, "%s: kv, k_pe and k must be 16-byte aligned",
               kernel);
  KILN_REQUIRE(p->num_tokens >= 0 && p->heads >= 1, KILN_ERROR_INVALID_ARGUMENT,
               "%s: num_tokens %d / heads %d out of range", kernel, p->num_tokens, p->heads);
  KILN_REQUIRE(p->nope > 0 && p->rope > 0 && p->v_dim > 0 && p->nope % 8 == 0 &&
                   p->rope % 8 == 0 && p->v_dim % 8 == 0,
               KILN_ERROR_INVALID_ARGUMENT,
               "%s: nope %d, rope %d and v_dim %d must be positive multiples of 8", kernel,
               p->nope, p->rope, p->v_dim);
  if (p->num_tokens == 0)
    return ok();
  MlaExpandKeysArgs args{static_cast<const uint16_t *>(p->kv),
                         static_cast<const uint16_t *>(p->k_pe), static_cast<uint16_t *>(p->k),
                         p->num_tokens, p->heads, p->nope, p->rope, p->v_dim};
  const long long chunks =
      static_cast<long long>(p->num_tokens) * p->heads * ((p->nope + p->rope) / 8);
  return launch(kernel, mlaExpandKeysKernel(), dim3(static_cast<unsigned>((chunks + 255) / 256)),
                dim3(256), &args, 0, p->stream);
}
