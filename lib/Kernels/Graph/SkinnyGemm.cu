// The skinny GEMM (SkinnyGemm.h). CUDA-core form: a CTA of 256 threads computes FEATURES
// output features of up to MAX_ROWS rows (one row group, blockIdx.z); thread t owns K
// chunks t, t + 256, t + 512, ... (16 bytes each) of them. Tensor-core form below.
#include "SkinnyGemm.h"

#include "CpAsync.cuh"
#include "ProgrammaticLaunch.h"
#include "SkinnyGemmDevice.cuh"

#include <cuda_bf16.h>

#include <atomic>
#include <cstdlib>
#include <limits>
#include <string>

namespace kiln::graph {
namespace {

using kiln::kernels::pdlWait;
using namespace skinny;

// K chunks a thread loads before it multiplies: weight loads in flight per thread.
constexpr int kChunksInFlight = 2;

__device__ __forceinline__ float lowBf16(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float highBf16(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }

// acc += the 8 products of one chunk, in element order.
__device__ __forceinline__ float dotChunk(float acc, uint4 w, uint4 x) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
  const uint32_t xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc = __fmaf_rn(lowBf16(ws[i]), lowBf16(xs[i]), acc);
    acc = __fmaf_rn(highBf16(ws[i]), highBf16(xs[i]), acc);
  }
  return acc;
}

// CTAs an SM: four where the accumulators and the weights in flight fit 64 registers
// without spilling, three for the larger row groups.
template <int MAX_ROWS> constexpr int minCtasPerSm() { return MAX_ROWS <= 4 ? 4 : 3; }

template <int MAX_ROWS, int FEATURES>
__global__ void __launch_bounds__(kThreads, minCtasPerSm<MAX_ROWS>())
    skinnyGemmKernel(SkinnyGemmArgs a, bool prefetch) {
  const int64_t entry = blockIdx.y;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * FEATURES;
  const int features = static_cast<int>(a.n - first < FEATURES ? a.n - first : FEATURES);
  const uint16_t *w = a.w + entry * a.wBatchStride + first * a.ldw;
  const int64_t firstRow = static_cast<int64_t>(blockIdx.z) * MAX_ROWS;
  const uint16_t *x = a.x + entry * a.xBatchStride + firstRow * a.ldx;
  const int m = static_cast<int>(a.m - firstRow < MAX_ROWS ? a.m - firstRow : MAX_ROWS);

  // Weights are never written by a step: fetching them before the wait is safe.
  if (prefetch)
    prefetchRowsToL2(w, a.ldw, a.k, features);
  pdlWait();

  float acc[MAX_ROWS][FEATURES];
#pragma unroll
  for (int r = 0; r < MAX_ROWS; ++r)
#pragma unroll
    for (int f = 0; f < FEATURES; ++f)
      acc[r][f] = 0.0f;

  const int chunks = static_cast<int>(a.k / kChunkElems);
  for (int base = threadIdx.x; base < chunks; base += kChunksInFlight * kThreads) {
    uint4 wv[kChunksInFlight][FEATURES];
#pragma unroll
    for (int u = 0; u < kChunksInFlight; ++u) {
      const int chunk = base + u * kThreads;
#pragma unroll
      for (int f = 0; f < FEATURES; ++f)
        wv[u][f] = chunk < chunks && f < features
                       ? loadStreaming(w + f * a.ldw + chunk * kChunkElems)
                       : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kChunksInFlight; ++u) {
      const int chunk = base + u * kThreads;
      if (chunk >= chunks)
        break;
#pragma unroll
      for (int r = 0; r < MAX_ROWS; ++r) {
        if (r >= m)
          break;
        const uint4 xv = loadInput(x + r * a.ldx + chunk * kChunkElems);
#pragma unroll
        for (int f = 0; f < FEATURES; ++f)
          acc[r][f] = dotChunk(acc[r][f], wv[u][f], xv);
      }
    }
  }

  letDependentsLaunch();
  __shared__ float partial[kWarps][MAX_ROWS][FEATURES];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int r = 0; r < MAX_ROWS; ++r)
#pragma unroll
    for (int f = 0; f < FEATURES; ++f) {
      float v = acc[r][f];
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, offset);
      if (lane == 0)
        partial[warp][r][f] = v;
    }
  __syncthreads();
  if (threadIdx.x >= MAX_ROWS * FEATURES)
    return;
  const int r = threadIdx.x / FEATURES, f = threadIdx.x % FEATURES;
  if (r < m && f < features)
    storeSum(a, &partial[0][r][f], MAX_ROWS * FEATURES, entry, firstRow + r, first + f);
}

// How a launch overlaps the kernel before it (KILN_SKINNY_GEMM_OVERLAP, read once; for
// measuring what each part is worth): by default the programmatic launch alone; "0"
// neither; "prefetch" the programmatic launch and the L2 prefetch of the CTA's weight
// rows before the wait. Measured (docs/performance.md, 2026-12-07): the prefetch cost
// the 8B batch-1 step 4% on an H100 (164 against 171 tok/s without any overlap), and the
// programmatic launch alone gained 2.5% on an H200 (205 against 200).
struct Overlap {
  bool programmatic, prefetch;
};
Overlap overlapWithPrevious() {
  static const Overlap overlap = [] {
    const char *v = std::getenv("KILN_SKINNY_GEMM_OVERLAP");
    const std::string mode = v ? v : "";
    return mode == "0"          ? Overlap{false, false}
           : mode == "prefetch" ? Overlap{true, true}
                                : Overlap{true, false};
  }();
  return overlap;
}

// Launches one of the kernels (Kernel(args, prefetch)) on `grid` with `smem` bytes of
// dynamic shared memory, programmatically where its image waits (asked once a kernel,
// off the launch path).
template <void (*Kernel)(SkinnyGemmArgs, bool)>
cudaError_t launchKernel(dim3 grid, const SkinnyGemmArgs &args, cudaStream_t stream,
                         size_t smem = 0) {
  static const bool waits = kiln::kernels::imageWaits(reinterpret_cast<const void *>(Kernel));
  SkinnyGemmArgs copy = args;
  const Overlap overlap = overlapWithPrevious();
  const bool programmatic = waits && overlap.programmatic;
  bool prefetch = programmatic && overlap.prefetch;
  void *argv[] = {&copy, &prefetch};
  return kiln::kernels::launchMaybeProgrammatic(reinterpret_cast<const void *>(Kernel), grid,
                                                dim3(kThreads), argv, smem, stream, programmatic);
}

template <int MAX_ROWS, int FEATURES>
cudaError_t launchWith(const SkinnyGemmArgs &args, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((args.n + FEATURES - 1) / FEATURES),
                  static_cast<unsigned>(args.batch),
                  static_cast<unsigned>((args.m + MAX_ROWS - 1) / MAX_ROWS));
  return launchKernel<&skinnyGemmKernel<MAX_ROWS, FEATURES>>(grid, args, stream);
}

// The register kernel: one CTA a block of 16 A rows and a row group (skinnyMmaCta).
template <int TILES, int DEPTH, bool GLU>
__global__ void __launch_bounds__(kThreads, 2) skinnyMmaKernel(SkinnyGemmArgs a, bool prefetch) {
  __shared__ float partial[kWarps][kMmaFeatures][8 * TILES];
  skinnyMmaCta<TILES, DEPTH, GLU>(a, prefetch, partial);
}

// Ring slots a warp of the staged kernels (below): 96 KiB a CTA either way, two CTAs an
// SM on sm_90 (227 KiB).
constexpr int kStagesOneTile = 8;
constexpr int kStagesTwoTiles = 6;

// The staged variant: the same lanes, steps, mma sequence and so the same bits, but each
// warp streams its steps through a ring of STAGES slots in shared memory with cp.async
// (its weights and x for one step a slot, each lane reading back only the 16-byte pieces
// it copied). Up to STAGES steps of a warp are in flight all the time instead of
// kMmaStepsInFlight steps a batch through registers, and the first STAGES steps' weights
// are requested before the wait for the kernel before (weights are never written by a
// step). Ring slot: [w rows g | w rows g + 8 | x tile 0 | ... | x tile TILES - 1], each 32
// lanes x 16 bytes.
template <int TILES, int STAGES> constexpr size_t stagedRingBytes() {
  return static_cast<size_t>(kWarps) * STAGES * (2 + TILES) * 32 * sizeof(uint4);
}

template <int TILES, int STAGES>
__global__ void __launch_bounds__(kThreads)
    skinnyMmaStagedKernel(SkinnyGemmArgs a, bool /*prefetch*/) {
  static_assert(stagedRingBytes<TILES, STAGES>() >=
                    sizeof(float) * kWarps * kMmaFeatures * 8 * TILES,
                "the partial sums reuse the ring");
  using kiln::kernels::cpAsync16;
  using kiln::kernels::sharedAddress;
  extern __shared__ uint4 ring[];
  const MmaBlock<TILES> blk(a);
  const int features = blk.features, rows = blk.rows;
  const uint16_t *w = blk.w, *x = blk.x;

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const bool lowFeature = g < features, highFeature = g + 8 < features;
  const uint16_t *wLow = w + g * a.ldw + 8 * t, *wHigh = w + (g + 8) * a.ldw + 8 * t;
  const int steps = static_cast<int>((a.k + kMmaStepK - 1) / kMmaStepK);
  // This warp's steps are warp, warp + kWarps, ...: the i-th goes through slot i % STAGES.
  const int mySteps = steps > warp ? (steps - warp + kWarps - 1) / kWarps : 0;
  uint4 *myRing = ring + static_cast<size_t>(warp) * STAGES * (2 + TILES) * 32;
  const auto piece = [&](int i, int part) {
    return sharedAddress(myRing + ((i % STAGES) * (2 + TILES) + part) * 32 + lane);
  };
  // A missing operand (past n, k or the rows) is zero-filled from a valid address.
  const auto copy = [&](uint32_t dst, const uint16_t *src, bool valid) {
    cpAsync16(dst, valid ? src : a.w, valid ? 16 : 0);
  };
  const auto kOf = [&](int i) {
    return static_cast<int64_t>(warp + i * kWarps) * kMmaStepK + 8 * t;
  };
  const auto issueWeights = [&](int i) {
    if (i >= mySteps)
      return;
    const int64_t k = kOf(i);
    copy(piece(i, 0), wLow + (k - 8 * t), k < a.k && lowFeature);
    copy(piece(i, 1), wHigh + (k - 8 * t), k < a.k && highFeature);
  };
  const auto issueX = [&](int i) {
    if (i >= mySteps)
      return;
    const int64_t k = kOf(i);
#pragma unroll
    for (int tile = 0; tile < TILES; ++tile) {
      const int r = tile * 8 + g;
      copy(piece(i, 2 + tile), x + r * a.ldx + k, k < a.k && r < rows);
    }
  };

#pragma unroll
  for (int i = 0; i < STAGES; ++i)
    issueWeights(i);
  pdlWait();
#pragma unroll
  for (int i = 0; i < STAGES; ++i) {
    issueX(i);
    kiln::kernels::cpAsyncCommit();
  }

  float acc[TILES][4] = {};
  for (int i = 0; i < mySteps; ++i) {
    kiln::kernels::cpAsyncWait<STAGES - 1>();
    const uint4 *slot = myRing + (i % STAGES) * (2 + TILES) * 32 + lane;
    const uint4 lo = slot[0], hi = slot[32];
    const uint32_t kLow[4] = {lo.x, hi.x, lo.y, hi.y};
    const uint32_t kHigh[4] = {lo.z, hi.z, lo.w, hi.w};
#pragma unroll
    for (int tile = 0; tile < TILES; ++tile) {
      const uint4 xs = slot[(2 + tile) * 32];
      mmaBf16(acc[tile], kLow, xs.x, xs.y);
      mmaBf16(acc[tile], kHigh, xs.z, xs.w);
    }
    // The slot's values are in registers the mmas consumed: it is free to refill.
    issueWeights(i + STAGES);
    issueX(i + STAGES);
    kiln::kernels::cpAsyncCommit();
  }
  kiln::kernels::cpAsyncWait<0>();
  letDependentsLaunch();
  __syncthreads();

  storeMmaSums(a, blk, reinterpret_cast<float(*)[kMmaFeatures][8 * TILES]>(ring), acc);
}

// Which path SkinnyMmaPath::Fastest takes (read once; all compute the same bits): the
// register kernel of 4 steps in flight unless KILN_SKINNY_MMA_STAGED=1 (the ring) or
// KILN_SKINNY_MMA_DEPTH=8 (8 steps in flight). The ring is off by default: measured on
// the 8B batch-1 step (H100, 2026-12-07, docs/performance.md) it lost 1% (168 against
// 170 tok/s) and 3% at 5-row verify steps, though alone (bench_gemm.py, weights rotated
// out of the L2) it ran the five projections 1.06-1.50x faster at one row. The deep
// variant waits for an H200 A/B.
SkinnyMmaPath fastestPath() {
  static const SkinnyMmaPath path = [] {
    const char *staged = std::getenv("KILN_SKINNY_MMA_STAGED");
    const char *depth = std::getenv("KILN_SKINNY_MMA_DEPTH");
    if (staged && std::string(staged) == "1")
      return SkinnyMmaPath::Staged;
    if (depth && std::string(depth) == "8")
      return SkinnyMmaPath::RegistersDeep;
    return SkinnyMmaPath::Registers;
  }();
  return path;
}

// Opts the staged kernel into its ring, once a device; false where the device's shared
// memory a CTA cannot hold it (the register kernel, same bits, runs there). Two threads
// may both probe a device at first: the probe is idempotent.
template <void (*Kernel)(SkinnyGemmArgs, bool)> bool stagedFits(size_t bytes) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int8_t> known[kMaxDevices] = {}; // 0 unknown, 1 fits, -1 not
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) {
    cudaGetLastError();
    return false;
  }
  if (const int8_t state = known[device].load(std::memory_order_relaxed))
    return state > 0;
  int optin = 0;
  const bool fits =
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) ==
          cudaSuccess &&
      static_cast<size_t>(optin) >= bytes &&
      cudaFuncSetAttribute(reinterpret_cast<const void *>(Kernel),
                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(bytes)) == cudaSuccess;
  if (!fits)
    cudaGetLastError();
  known[device].store(fits ? 1 : -1, std::memory_order_relaxed);
  return fits;
}

template <int TILES, int STAGES>
cudaError_t launchMma(const SkinnyGemmArgs &args, cudaStream_t stream, SkinnyMmaPath path) {
  const bool glu = args.glu != nullptr;
  // The epilogue's CTA takes 8 features of both entries (MmaBlock).
  const int64_t features = glu ? kMmaFeatures / 2 : kMmaFeatures;
  const dim3 grid(static_cast<unsigned>((args.n + features - 1) / features),
                  static_cast<unsigned>(glu ? 1 : args.batch),
                  static_cast<unsigned>((args.m + 8 * TILES - 1) / (8 * TILES)));
  const bool explicitPath = path != SkinnyMmaPath::Fastest;
  if (!explicitPath)
    path = fastestPath();
  constexpr auto staged = &skinnyMmaStagedKernel<TILES, STAGES>;
  constexpr size_t bytes = stagedRingBytes<TILES, STAGES>();
  // Asked for by name (tests), the ring runs or the launch says it cannot; picked as the
  // fastest, it falls back to the registers. The epilogue runs on the register kernels
  // only.
  if (path == SkinnyMmaPath::Staged) {
    if (!glu && stagedFits<staged>(bytes))
      return launchKernel<staged>(grid, args, stream, bytes);
    if (explicitPath)
      return cudaErrorNotSupported;
  }
  const bool deep = path == SkinnyMmaPath::RegistersDeep;
  if (glu)
    return deep ? launchKernel<&skinnyMmaKernel<TILES, kMmaStepsInFlightDeep, true>>(grid, args,
                                                                                     stream)
                : launchKernel<&skinnyMmaKernel<TILES, kMmaStepsInFlight, true>>(grid, args,
                                                                                 stream);
  return deep ? launchKernel<&skinnyMmaKernel<TILES, kMmaStepsInFlightDeep, false>>(grid, args,
                                                                                    stream)
              : launchKernel<&skinnyMmaKernel<TILES, kMmaStepsInFlight, false>>(grid, args,
                                                                                stream);
}

bool multipleOf8(int64_t v) { return v % 8 == 0; }
bool aligned16(const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

} // namespace

bool skinnyGemmFits(const SkinnyGemmArgs &a) {
  const int64_t int32Max = std::numeric_limits<int32_t>::max();
  if (!a.x || !a.w || !a.out || !aligned16(a.x) || !aligned16(a.w) || !aligned16(a.out))
    return false;
  // The epilogue: a pair of one x, no bias, its rows within glu's.
  if (a.glu && (a.batch != 2 || a.xBatchStride != 0 || a.bias || a.ldGlu < a.n ||
                reinterpret_cast<uintptr_t>(a.glu) % 2 != 0))
    return false;
  constexpr int64_t gridYZ = 65535;
  if (a.m < 1 || a.m > kSkinnyGemmRowGroup * gridYZ || a.batch < 1 || a.batch > gridYZ ||
      a.n < 1 || a.k < kChunkElems || a.n > int32Max || a.k > int32Max / 2)
    return false;
  for (int64_t v : {a.k, a.ldx, a.ldw, a.xBatchStride, a.wBatchStride})
    if (v < 0 || !multipleOf8(v))
      return false;
  return a.ldx >= a.k && a.ldw >= a.k && a.ldo >= a.n;
}

// The CTA's feature count and row group only change which sums share a CTA (and so how
// often x is re-read from the L1 and w from the L2), never a sum: picked for occupancy.
// Fewer features at more rows keep the accumulators within the registers
// (minCtasPerSm).
cudaError_t launchSkinnyGemm(const SkinnyGemmArgs &args, bool tensorCores,
                             cudaStream_t stream, SkinnyMmaPath path) {
  if (args.glu && !tensorCores)
    return cudaErrorNotSupported; // the epilogue runs on tensor cores only
  if (tensorCores)
    return args.m <= 8 ? launchMma<1, kStagesOneTile>(args, stream, path)
                        : launchMma<2, kStagesTwoTiles>(args, stream, path);
  switch (args.m) {
  case 1:
    return launchWith<1, 4>(args, stream);
  case 2:
    return launchWith<2, 2>(args, stream);
  case 3:
  case 4:
    return launchWith<4, 2>(args, stream);
  case 5:
  case 6:
  case 7:
  case 8:
    return launchWith<8, 2>(args, stream);
  default:
    static_assert(kSkinnyGemmRowGroup == 16);
    return launchWith<16, 1>(args, stream);
  }
}

} // namespace kiln::graph
