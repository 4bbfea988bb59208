// Decode benchmark: measures the read-bandwidth ceiling with a streaming kernel over
// 4 GiB, then gqa_decode (q_len 1 and 4) and mla_decode on the issue's grid. Prints one
// JSON object per line (stdout); bench/Decode/peers.py adds PyTorch peers and merges.
// Timing: CUDA graphs of K launches (K chosen for >= ~2 ms per graph), 3 warm-up graph
// runs, median of 15; page tables rotate over >= 2 GiB of pages so no case runs from L2.
// --variants: the ceiling, then gqa_decode's tuning variants (KILN_GQA_VARIANT,
// kGqaVariants in GqaDecodeKernel.cuh) side by side with the default on the issue's
// small-batch shapes ("gqa_variant" lines; peers.py tabulates them against cuDNN/flash).
#include "BenchCheck.h"
#include "EventTimer.h"
#include "GqaDecodeKernel.cuh" // kGqaVariants (the table only; nothing instantiated)
#include "kiln/Kernels/Decode.h"
#include "kiln/Runtime/Layout.h" // kiln_rt_decode_split_keys: the runtime's chunks

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>


namespace {

std::set<int> gOnlyVariants; // --only: the variants the grid runs (empty: all)
bool variantWanted(int variant) {
  return gOnlyVariants.empty() || gOnlyVariants.count(variant) > 0;
}

__global__ void streamRead(const uint4 *__restrict__ data, size_t n, unsigned *sink) {
  unsigned acc = 0;
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 a = __ldcs(data + i), b = __ldcs(data + i + stride);
    uint4 c = __ldcs(data + i + 2 * stride), d = __ldcs(data + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^
           d.z ^ d.w;
  }
  for (; i < n; i += stride) {
    uint4 a = __ldcs(data + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x9e3779b9u)
    *sink = acc;
}

// Random bf16 in about [-2, 2) from a hash (no NaN/Inf).
__global__ void fillRandom(uint16_t *data, size_t n, unsigned seed) {
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    unsigned short mant = h & 0x7f, sign = (h >> 7) & 1;
    unsigned short exp = 120 + ((h >> 8) % 8); // 2^-7 .. 2^0
    data[i] = static_cast<uint16_t>((sign << 15) | (exp << 7) | mant);
  }
}

int numSms() {
  int dev = 0, sms = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

// One warm-up call, then the mean of `iters` (bench/EventTimer.h).
template <typename Fn> float timeEager(Fn fn, int iters) {
  return kiln::bench::eventMs(fn, 1, iters);
}

// Median seconds per call of fn(i) (i selects the rotated buffer), via CUDA graphs.
template <typename Fn> double timeGraph(Fn fn, cudaStream_t stream) {
  double est = timeEager(fn, 3) * 1e-3;
  int k = static_cast<int>(std::min(200.0, std::max(1.0, 2e-3 / std::max(est, 1e-7))));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < k; ++i)
    fn(i);
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i)
    CHECK(cudaGraphLaunch(exec, stream));
  std::vector<float> times;
  for (int i = 0; i < 15; ++i) {
    CHECK(cudaEventRecord(a, stream));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaEventRecord(b, stream));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return times[times.size() / 2] * 1e-3 / k;
}

// Pool of pages >= max(needed, 2 GiB) and `rot` block tables over disjoint pages.
struct Paged {
  uint16_t *pool = nullptr;
  std::vector<int32_t *> tables;
  int32_t *seqLens = nullptr;
  int numPages = 0;
};

Paged makePaged(int batch, int len, int pageSize, size_t pageBytes) {
  Paged p;
  int pagesPerSeq = (len + pageSize - 1) / pageSize;
  size_t needed = static_cast<size_t>(batch) * pagesPerSeq;
  size_t minPages = (2ull << 30) / pageBytes;
  int rot = static_cast<int>(std::min<size_t>(256, std::max<size_t>(1, (minPages + needed - 1) / needed)));
  p.numPages = static_cast<int>(needed * rot);
  CHECK(cudaMalloc(&p.pool, p.numPages * pageBytes));
  fillRandom<<<1024, 256>>>(p.pool, p.numPages * pageBytes / 2, 1234u);
  std::vector<int32_t> perm(p.numPages);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937 gen(7);
  std::shuffle(perm.begin(), perm.end(), gen);
  for (int r = 0; r < rot; ++r) {
    int32_t *t;
    CHECK(cudaMalloc(&t, needed * sizeof(int32_t)));
    CHECK(cudaMemcpy(t, perm.data() + r * needed, needed * sizeof(int32_t), cudaMemcpyHostToDevice));
    p.tables.push_back(t);
  }
  std::vector<int32_t> lens(batch, len);
  CHECK(cudaMalloc(&p.seqLens, batch * sizeof(int32_t)));
  CHECK(cudaMemcpy(p.seqLens, lens.data(), batch * sizeof(int32_t), cudaMemcpyHostToDevice));
  return p;
}

void freePaged(Paged &p) {
  cudaFree(p.pool);
  for (auto t : p.tables)
    cudaFree(t);
  cudaFree(p.seqLens);
}

// gqa_decode's parameters over `p`'s pages: B sequences of L keys, q_len rows each,
// Hq/Hkv heads of D, bf16 q and out, a `pool` KV cache, the first block table.
kiln_gqa_decode_params_t gqaParams(const Paged &p, const void *q, void *out, int B, int L,
                                   int qLen, int Hq, int Hkv, int D, int page, kiln_dtype_t pool,
                                   cudaStream_t stream) {
  kiln_gqa_decode_params_t prm{};
  prm.q = q;
  prm.kv_cache = p.pool;
  prm.seq_lens = p.seqLens;
  prm.out = out;
  prm.batch = B;
  prm.q_len = qLen;
  prm.q_heads = Hq;
  prm.kv_heads = Hkv;
  prm.head_dim = D;
  prm.page_size = page;
  prm.num_pages = p.numPages;
  prm.max_pages_per_seq = L / page;
  prm.max_seq_len = L;
  prm.softmax_scale = 0.0883883f;
  prm.dtype = KILN_DTYPE_BF16;
  prm.kv_dtype = pool;
  prm.stream = stream;
  prm.block_table = p.tables[0];
  return prm;
}

// gqa_decode q_len 1 (32 q / 8 kv heads, d 128, page 64, bf16) on the shapes of issue 15
// item 3, every tuning variant with its automatic split count; at batch 1 also with twice
// the automatic splits (two waves of blocks), for the default and each variant.
// Then a layout probe ("gqa_layout_probe"): the bytes and block work of B=128 L=8k, but
// 1 kv head (4 q heads) and 8x the sequences, so a block's keys are contiguous 256-byte
// rows (16 KiB a page) instead of 256 bytes every 2 KiB: if it streams near the ceiling
// where the 8-head pool does not, the pool's stride (not the pipeline) is what separates
// the kernel from cuDNN's contiguous [B, H, L, D] peer.
void variantGrid(cudaStream_t stream, bool quick) {
  const int D = 128, page = 64;
  struct Shape {
    int B, L, Hq = 32, Hkv = 8;
    bool probe = false;
  };
  std::vector<Shape> shapes = {{128, 8192}, {64, 8192}, {1, 1024}, {1, 4096},
                               {1, 8192},   {1, 32768}, {16, 1024}};
  if (quick)
    shapes = {{128, 8192}, {1, 8192}};
  shapes.push_back({1024, 8192, 4, 1, true});
  for (const Shape &shape : shapes) {
    const int B = shape.B, L = shape.L, qLen = 1, Hq = shape.Hq, Hkv = shape.Hkv;
    const double kvBytes = 2.0 * B * L * Hkv * D * 2;
    Paged p = makePaged(B, L, page, 2ull * page * Hkv * D * 2);
    uint16_t *q, *out;
    CHECK(cudaMalloc(&q, static_cast<size_t>(B) * qLen * Hq * D * 2));
    CHECK(cudaMalloc(&out, static_cast<size_t>(B) * qLen * Hq * D * 2));
    fillRandom<<<256, 256>>>(q, static_cast<size_t>(B) * qLen * Hq * D, 99u);
    kiln_gqa_decode_params_t prm =
        gqaParams(p, q, out, B, L, qLen, Hq, Hkv, D, page, KILN_DTYPE_BF16, stream);
    const size_t splitBytes = static_cast<size_t>(B) * qLen * Hq * (D + 1) * 4;
    for (int variant = 0; variant < kiln::decode::kGqaNumVariants; ++variant)
      for (int waves = 1; waves <= (B == 1 ? 2 : 1); ++waves) {
        if (shape.probe && variant != 0 && variant != 7 && variant != 9 && variant != 13)
          continue; // the default, L2 prefetch 256, + page hoisting, no prefetch
        if (!variantWanted(variant))
          continue;
        setenv("KILN_GQA_VARIANT", std::to_string(variant).c_str(), 1);
        prm.num_splits = 0;
        prm.block_table = p.tables[0];
        size_t ws = 0;
        KCHECK(kiln_gqa_decode_workspace_bytes(&prm, &ws));
        int autoSplits = ws ? static_cast<int>(ws / splitBytes) : 1;
        if (waves == 2) {
          prm.num_splits = std::min(KILN_DECODE_MAX_SPLITS, 2 * autoSplits);
          KCHECK(kiln_gqa_decode_workspace_bytes(&prm, &ws));
        }
        void *wsPtr = nullptr;
        if (ws) {
          CHECK(cudaMalloc(&wsPtr, ws));
          CHECK(cudaMemset(wsPtr, 0, ws)); // the fused combine's counters start at 0
        }
        prm.workspace = wsPtr;
        prm.workspace_bytes = ws;
        const double t = timeGraph(
            [&](int i) {
              prm.block_table = p.tables[i % p.tables.size()];
              KCHECK(kiln_gqa_decode(&prm));
            },
            stream);
        const int splits = ws ? static_cast<int>(ws / splitBytes) : 1;
        const kiln::decode::GqaTuning &v = kiln::decode::kGqaVariants[variant];
        std::printf("{\"kind\":\"%s\",\"B\":%d,\"L\":%d,\"q_len\":%d,\"q_heads\":%d,"
                    "\"kv_heads\":%d,\"variant\":%d,"
                    "\"tile\":%d,\"stages\":%d,\"l2_prefetch\":%d,\"hoist_page\":%d,"
                    "\"min_blocks\":%d,\"waves\":%d,\"us\":%.3f,\"TBps\":%.4f,\"splits\":%d}\n",
                    shape.probe ? "gqa_layout_probe" : "gqa_variant", B, L, qLen, Hq, Hkv, variant,
                    v.tileN ? v.tileN : 64, v.stages ? v.stages : 3, kiln::decode::gqaL2Prefetch(v),
                    v.hoistPage ? 1 : 0, v.minBlocks, waves, t * 1e6, kvBytes / t / 1e12, splits);
        std::fflush(stdout);
        unsetenv("KILN_GQA_VARIANT");
        cudaFree(wsPtr);
      }
    // The runtime's mode (split_keys chunks of kiln_rt_decode_split_keys for a model of
    // max_seq_len L: 16 chunks), combined by the kernel (split_counters, as the runtime
    // now runs it) and by the separate combine kernel (before), same pages.
    if (!shape.probe && (B == 1 || B == 16 || B == 128)) {
      prm.num_splits = 0;
      prm.split_keys = static_cast<int>(kiln_rt_decode_split_keys(L));
      prm.block_table = p.tables[0];
      size_t ws = 0;
      KCHECK(kiln_gqa_decode_workspace_bytes(&prm, &ws));
      const size_t counterBytes = static_cast<size_t>(B) * Hkv * 4; // one row block a head
      void *wsPtr = nullptr, *counters = nullptr;
      CHECK(cudaMalloc(&wsPtr, std::max<size_t>(ws, 16)));
      CHECK(cudaMalloc(&counters, counterBytes));
      CHECK(cudaMemset(counters, 0, counterBytes));
      prm.workspace = wsPtr;
      prm.workspace_bytes = ws;
      for (int fused = 1; fused >= 0; --fused) {
        prm.split_counters = fused ? counters : nullptr;
        prm.split_counter_bytes = fused ? counterBytes : 0;
        const double t = timeGraph(
            [&](int i) {
              prm.block_table = p.tables[i % p.tables.size()];
              KCHECK(kiln_gqa_decode(&prm));
            },
            stream);
        std::printf("{\"kind\":\"gqa_split_keys\",\"B\":%d,\"L\":%d,\"q_len\":%d,"
                    "\"split_keys\":%d,\"fused\":%d,\"us\":%.3f,\"TBps\":%.4f,\"splits\":%d}\n",
                    B, L, qLen, prm.split_keys, fused, t * 1e6, kvBytes / t / 1e12,
                    ws ? static_cast<int>(ws / splitBytes) : 1);
        std::fflush(stdout);
      }
      prm.split_keys = 0;
      prm.split_counters = nullptr;
      prm.split_counter_bytes = 0;
      cudaFree(wsPtr);
      cudaFree(counters);
    }
    cudaFree(q);
    cudaFree(out);
    freePaged(p);
  }
}

} // namespace

int main(int argc, char **argv) {
  // --quick: fewer shapes; --mla: the ceiling and the mla rows only (kernel work);
  // --variants: the ceiling and the gqa_decode tuning variants side by side.
  bool quick = false, mlaOnly = false, variants = false;
  for (int i = 1; i < argc; ++i) {
    quick |= std::string(argv[i]) == "--quick";
    mlaOnly |= std::string(argv[i]) == "--mla";
    variants |= std::string(argv[i]) == "--variants";
    // --only=0,1,12: the variant grid runs these variants only (a device budget).
    if (std::string(argv[i]).rfind("--only=", 0) == 0) {
      std::string list = argv[i] + 7;
      for (size_t at = 0; at < list.size();) {
        const size_t comma = list.find(',', at);
        gOnlyVariants.insert(std::atoi(list.substr(at, comma - at).c_str()));
        at = comma == std::string::npos ? list.size() : comma + 1;
      }
    }
  }
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("{\"kind\":\"device\",\"name\":\"%s\",\"sms\":%d}\n", prop.name, prop.multiProcessorCount);

  // Read ceiling: 4 GiB streamed once per call.
  {
    size_t bytes = 4ull << 30;
    uint4 *data;
    unsigned *sink;
    CHECK(cudaMalloc(&data, bytes));
    CHECK(cudaMalloc(&sink, 4));
    CHECK(cudaMemset(data, 1, bytes));
    int blocks = numSms() * 4;
    double best = 0;
    for (int threads : {512, 1024}) {
      double t = timeGraph([&](int) { streamRead<<<blocks, threads, 0, stream>>>(data, bytes / 16, sink); }, stream);
      best = std::max(best, bytes / t / 1e12);
    }
    std::printf("{\"kind\":\"ceiling\",\"TBps\":%.4f}\n", best);
    std::fflush(stdout);
    cudaFree(data);
    cudaFree(sink);
  }
  if (variants) {
    variantGrid(stream, quick);
    CHECK(cudaGetLastError());
    return 0;
  }

  // gqa_decode: 32 q / 8 kv heads, d=128, page 64, bf16 q/out over a bf16 pool, then an
  // f16 pool ("gqa_f16": the random bits read as fp16) and an FP8 e4m3 pool ("gqa_fp8":
  // bytes counted as stored, one a value; the pool's random bf16 bits read as bytes, NaN
  // bytes included, which costs the kernel nothing).
  const int Hq = 32, Hkv = 8, D = 128, page = 64;
  std::vector<int> Bs = {1, 16, 64, 128}, Ls = {1024, 4096, 8192, 32768};
  if (quick) {
    Bs = {1, 128};
    Ls = {8192};
  }
  if (mlaOnly)
    Bs.clear();
  for (kiln_dtype_t pool : {KILN_DTYPE_BF16, KILN_DTYPE_F16, KILN_DTYPE_FP8_E4M3})
    for (int qLen : {1, 4})
      for (int B : Bs)
        for (int L : Ls) {
          const bool fp8 = pool == KILN_DTYPE_FP8_E4M3;
          const int kvElemBytes = fp8 ? 1 : 2;
          double kvBytes = 2.0 * B * L * Hkv * D * kvElemBytes;
          if (kvBytes > 60e9)
            continue;
          Paged p = makePaged(B, L, page, 2ull * page * Hkv * D * kvElemBytes);
          uint16_t *q, *out;
          CHECK(cudaMalloc(&q, static_cast<size_t>(B) * qLen * Hq * D * 2));
          CHECK(cudaMalloc(&out, static_cast<size_t>(B) * qLen * Hq * D * 2));
          fillRandom<<<256, 256>>>(q, static_cast<size_t>(B) * qLen * Hq * D, 99u);
          kiln_gqa_decode_params_t prm =
              gqaParams(p, q, out, B, L, qLen, Hq, Hkv, D, page, pool, stream);
          // The default launch (fused combine, fill-one-wave splits, programmatic
          // dependent launch), then for bf16 pools the launch before it
          // (KILN_GQA_SEPARATE_COMBINE: a second combine kernel) as "gqa_separate", on
          // the same pages in the same run.
          const bool both = pool == KILN_DTYPE_BF16;
          for (int separate = 0; separate < (both ? 2 : 1); ++separate) {
            if (separate)
              setenv("KILN_GQA_SEPARATE_COMBINE", "1", 1);
            prm.block_table = p.tables[0];
            size_t ws = 0;
            KCHECK(kiln_gqa_decode_workspace_bytes(&prm, &ws));
            void *wsPtr = nullptr;
            if (ws) {
              CHECK(cudaMalloc(&wsPtr, ws));
              // The workspace contract: zero once (the fused combine's counters).
              CHECK(cudaMemset(wsPtr, 0, ws));
            }
            prm.workspace = wsPtr;
            prm.workspace_bytes = ws;
            double t = timeGraph(
                [&](int i) {
                  prm.block_table = p.tables[i % p.tables.size()];
                  KCHECK(kiln_gqa_decode(&prm));
                },
                stream);
            // Partials of one split (the counters, a few bytes, round away).
            int splits =
                ws ? static_cast<int>(ws / (static_cast<size_t>(B) * qLen * Hq * (D + 1) * 4)) : 1;
            std::printf("{\"kind\":\"%s\",\"B\":%d,\"L\":%d,\"q_len\":%d,\"us\":%.3f,"
                        "\"TBps\":%.4f,\"splits\":%d}\n",
                        separate                 ? "gqa_separate"
                        : fp8                    ? "gqa_fp8"
                        : pool == KILN_DTYPE_F16 ? "gqa_f16"
                                                 : "gqa",
                        B, L, qLen, t * 1e6, kvBytes / t / 1e12, splits);
            std::fflush(stdout);
            unsetenv("KILN_GQA_SEPARATE_COMBINE");
            cudaFree(wsPtr);
          }
          cudaFree(q);
          cudaFree(out);
          freePaged(p);
        }

  // mla_decode: page 64, 576 = 512 + 64, bf16 (and the FP8 latent pool, "mla_fp8").
  std::vector<int> mBs = {64, 128}, mLs = {4096, 16384};
  if (quick) {
    mBs = {128};
    mLs = {4096};
  }
  for (int heads : {16, 128})
    for (int qLen : {1, 2})
      for (int B : mBs)
        for (int L : mLs) {
          double bytes = static_cast<double>(B) * L * 576 * 2;
          double flops = 2.0 * B * qLen * heads * static_cast<double>(L) * (576 + 512);
          Paged p = makePaged(B, L, 64, 64 * 576 * 2);
          uint16_t *q, *out;
          CHECK(cudaMalloc(&q, static_cast<size_t>(B) * qLen * heads * 576 * 2));
          CHECK(cudaMalloc(&out, static_cast<size_t>(B) * qLen * heads * 512 * 2));
          fillRandom<<<256, 256>>>(q, static_cast<size_t>(B) * qLen * heads * 576, 77u);
          kiln_mla_decode_params_t prm{};
          prm.q = q;
          prm.latent_cache = p.pool;
          prm.seq_lens = p.seqLens;
          prm.out = out;
          prm.batch = B;
          prm.q_len = qLen;
          prm.num_heads = heads;
          prm.num_pages = p.numPages;
          prm.max_pages_per_seq = L / 64;
          prm.max_seq_len = L;
          prm.softmax_scale = 0.0721688f;
          prm.dtype = KILN_DTYPE_BF16;
          prm.stream = stream;
          prm.block_table = p.tables[0];
          size_t ws = 0;
          KCHECK(kiln_mla_decode_workspace_bytes(&prm, &ws));
          void *wsPtr = nullptr;
          if (ws)
            CHECK(cudaMalloc(&wsPtr, ws));
          prm.workspace = wsPtr;
          prm.workspace_bytes = ws;
          // variant 0: mla_decode's mma.sync kernel (KILN_MLA_MMA_SYNC), 1:
          // mla_decode_small_smem (q_len 1), 2: the mma.sync kernel with the 16-row PV tiling
          // (KILN_MLA_PV16, only where the big config runs), 3: mla_decode_sm90 (wgmma + TMA;
          // sm_90 only; the default there).
          int major = 0, device = 0;
          CHECK(cudaGetDevice(&device));
          CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
          for (int variant = 0; variant < 4; ++variant) {
            bool small = variant == 1;
            if ((small && qLen != 1) || (variant == 2 && qLen * heads <= 16) ||
                (variant == 3 && major != 9))
              continue;
            // mla_decode_sm90 is kiln_mla_decode's default on sm_90: the mma.sync rows ask
            // for the mma.sync kernel.
            if (variant == 0 || variant == 2)
              setenv("KILN_MLA_MMA_SYNC", "1", 1);
            if (variant == 2)
              setenv("KILN_MLA_PV16", "1", 1);
            if (variant == 3) {
              setenv("KILN_MLA_SM90", "1", 1);
              // Its split plan may differ: the workspace of the variant that runs.
              size_t need = 0;
              KCHECK(kiln_mla_decode_workspace_bytes(&prm, &need));
              if (need > ws) {
                cudaFree(wsPtr);
                CHECK(cudaMalloc(&wsPtr, need));
                ws = need;
                prm.workspace = wsPtr;
                prm.workspace_bytes = ws;
              }
            }
            double t = timeGraph(
                [&](int i) {
                  prm.block_table = p.tables[i % p.tables.size()];
                  KCHECK(small ? kiln_mla_decode_small_smem(&prm) : kiln_mla_decode(&prm));
                },
                stream);
            std::printf("{\"kind\":\"%s\",\"B\":%d,\"L\":%d,\"heads\":%d,\"q_len\":%d,\"us\":%.3f,"
                        "\"TBps\":%.4f,\"TFLOPs\":%.2f}\n",
                        variant == 0   ? "mla"
                        : variant == 1 ? "mla_small"
                        : variant == 2 ? "mla_pv16"
                                       : "mla_sm90",
                        B, L, heads, qLen, t * 1e6, bytes / t / 1e12, flops / t / 1e12);
            std::fflush(stdout);
            unsetenv("KILN_MLA_PV16");
            unsetenv("KILN_MLA_SM90");
            unsetenv("KILN_MLA_MMA_SYNC");
          }
          {
            // mla_fp8: the same shape over an FP8 latent pool (Decode.h's 656-byte tokens,
            // random bytes: timing only), read by mla_decode's mma.sync kernels; TB/s counts
            // the FP8 bytes.
            Paged f = makePaged(B, L, 64, 64 * KILN_MLA_FP8_TOKEN_BYTES);
            kiln_mla_decode_params_t fp = prm;
            fp.latent_cache = f.pool;
            fp.seq_lens = f.seqLens;
            fp.num_pages = f.numPages;
            fp.block_table = f.tables[0];
            fp.kv_dtype = KILN_DTYPE_FP8_E4M3;
            size_t need = 0;
            KCHECK(kiln_mla_decode_workspace_bytes(&fp, &need));
            void *fpWs = nullptr;
            if (need)
              CHECK(cudaMalloc(&fpWs, need));
            fp.workspace = fpWs;
            fp.workspace_bytes = need;
            double t = timeGraph(
                [&](int i) {
                  fp.block_table = f.tables[i % f.tables.size()];
                  KCHECK(kiln_mla_decode(&fp));
                },
                stream);
            double fpBytes = static_cast<double>(B) * L * KILN_MLA_FP8_TOKEN_BYTES;
            std::printf("{\"kind\":\"mla_fp8\",\"B\":%d,\"L\":%d,\"heads\":%d,\"q_len\":%d,"
                        "\"us\":%.3f,\"TBps\":%.4f,\"TFLOPs\":%.2f}\n",
                        B, L, heads, qLen, t * 1e6, fpBytes / t / 1e12, flops / t / 1e12);
            std::fflush(stdout);
            cudaFree(fpWs);
            freePaged(f);
          }
          cudaFree(q);
          cudaFree(out);
          cudaFree(wsPtr);
          freePaged(p);
        }
  CHECK(cudaGetLastError());
  return 0;
}
