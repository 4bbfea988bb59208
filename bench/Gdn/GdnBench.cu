// Benchmark of gdn_chunk_prefill: an 8k-token prompt through one Qwen3-Next Gated
// DeltaNet layer (k_dim = v_dim = 128; per-rank heads at TP 4: 4 key / 8 value heads, and
// at TP 1: 16 / 32), in one launch, against gdn_update run once per token (the prefill
// without the chunked kernel), with ceilings measured in the same run: the copy bandwidth
// (read + write) and the bf16 mma.sync m16n8k16 throughput (the instruction the kernel
// uses). Prints one line per case and writes JSON (argv[1]) that peer_torch.py merges with
// its PyTorch peers (ratios).
//
// FLOPs are the chunked form's nominal work a token and value head, L = 64:
//   2 L K (K K^T and Q K^T, causal halves) + 2 L V (the triangular solve and Aqk U,
//   causal halves) + 6 K V (K S, Q S and the state update K^T U)
// = 131072 at K = V = 128 (the kernel issues more: its fp32 operands are split into two
// bf16 parts, and each 32-column CTA recomputes K K^T and Q K^T). Bytes: q, k, v read,
// out written, g and beta read, the state read and written once.
#include "BenchCheck.h"
#include "BenchDevice.cuh"
#include "GdnInternal.h"
#include "kiln/Kernels/GatedDeltaNet.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

constexpr int kDim = 128, vDim = 128, kChunk = 64;

using kiln::bench::copyKernel;
using kiln::bench::hashUnit;
using kiln::kernels::gdn::gdnUpdateReplayWithVariant;
using kiln::kernels::gdn::GdnUpdateVariant;
using kiln::kernels::gdn::gdnUpdateVariantName;
using kiln::kernels::gdn::gdnUpdateWithVariant;
using kiln::kernels::gdn::kGdnUpdateDefault;
using kiln::kernels::gdn::kGdnUpdateReplayDefault;

__global__ void fillBf16(__nv_bfloat16 *p, size_t n, float lo, float hi, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] = __float2bfloat16(lo + (hi - lo) * hashUnit(i, seed));
}
__global__ void fillF32(float *p, size_t n, float lo, float hi, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] = lo + (hi - lo) * hashUnit(i, seed);
}
// The bf16 mma.sync ceiling: every warp chains 8 independent m16n8k16 accumulators.
__global__ void mmaKernel(float *out, int iters) {
  const uint32_t a0 = 0x3c003c00u ^ threadIdx.x, b0 = 0x3c003c00u;
  float c[8][4] = {};
  for (int i = 0; i < iters; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j)
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                   "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                   : "+f"(c[j][0]), "+f"(c[j][1]), "+f"(c[j][2]), "+f"(c[j][3])
                   : "r"(a0), "r"(a0), "r"(a0), "r"(a0), "r"(b0), "r"(b0));
  float sum = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j)
    sum += c[j][0] + c[j][1] + c[j][2] + c[j][3];
  if (sum == 12345.0f)
    out[0] = sum;
}

template <typename T> T *alloc(size_t count) {
  T *p;
  CHECK(cudaMalloc(&p, count * sizeof(T)));
  return p;
}

// Median seconds of `fn(stream)` over `reps` timed runs after `warm` untimed ones.
template <typename F> double timeIt(F &&fn, int reps, int warm = 2) {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int i = 0; i < warm; ++i)
    fn(s);
  CHECK(cudaStreamSynchronize(s));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    CHECK(cudaEventRecord(a, s));
    fn(s);
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventSynchronize(b));
    float t;
    CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  CHECK(cudaStreamDestroy(s));
  return ms[ms.size() / 2] * 1e-3;
}

// The update's parameters for `batch` sequences of `tokens` tokens at Qwen3-Next's head
// dims, l2norm on, bf16: the benchmark's token-by-token prompt and its decode steps.
struct UpdateInputs {
  const __nv_bfloat16 *q, *k, *v;
  const float *g, *beta;
  __nv_bfloat16 *out;
};
kiln_gdn_update_params_t updateParams(float *state, int slots, const int32_t *stateIndices,
                                      float *intermediate, int batch, int tokens, int kHeads,
                                      int vHeads, const UpdateInputs &in, cudaStream_t s) {
  kiln_gdn_update_params_t p{};
  p.state = state;
  p.num_slots = slots;
  p.state_indices = stateIndices;
  p.intermediate = intermediate;
  p.batch = batch;
  p.num_tokens = tokens;
  p.k_heads = kHeads;
  p.v_heads = vHeads;
  p.k_dim = kDim;
  p.v_dim = vDim;
  p.dtype = KILN_DTYPE_BF16;
  p.q = in.q;
  p.k = in.k;
  p.v = in.v;
  p.g = in.g;
  p.beta = in.beta;
  p.out = in.out;
  p.l2norm_qk = 1;
  p.stream = s;
  return p;
}

struct Result {
  std::string name;
  int tokens, kHeads, vHeads;
  double chunkSec, tokenSec, flops, bytes;
};

Result benchPrefill(const char *name, int tokens, int kHeads, int vHeads, double copyTBps,
                    double mmaTflops) {
  const size_t qk = size_t(tokens) * kHeads * kDim, vo = size_t(tokens) * vHeads * vDim;
  const size_t gb = size_t(tokens) * vHeads, st = size_t(vHeads) * kDim * vDim;
  auto *q = alloc<__nv_bfloat16>(qk), *k = alloc<__nv_bfloat16>(qk);
  auto *v = alloc<__nv_bfloat16>(vo), *out = alloc<__nv_bfloat16>(vo);
  float *g = alloc<float>(gb), *beta = alloc<float>(gb), *state = alloc<float>(st);
  fillBf16<<<1024, 256>>>(q, qk, -1.0f, 1.0f, 1);
  fillBf16<<<1024, 256>>>(k, qk, -1.0f, 1.0f, 2);
  fillBf16<<<1024, 256>>>(v, vo, -1.0f, 1.0f, 3);
  fillF32<<<1024, 256>>>(g, gb, -0.5f, 0.0f, 4);   // decays in (e^-0.5, 1]
  fillF32<<<1024, 256>>>(beta, gb, 0.0f, 1.0f, 5); // write strengths
  fillF32<<<1024, 256>>>(state, st, -0.1f, 0.1f, 6);
  CHECK(cudaGetLastError());
  int32_t cuHost[2] = {0, tokens}, *cu = alloc<int32_t>(2);
  CHECK(cudaMemcpy(cu, cuHost, sizeof cuHost, cudaMemcpyHostToDevice));

  const double chunkSec = timeIt(
      [&](cudaStream_t s) {
        kiln_gdn_chunk_prefill_params_t p{};
        p.state = state;
        p.num_slots = 1;
        p.cu_seqlens = cu;
        p.batch = 1;
        p.k_heads = kHeads;
        p.v_heads = vHeads;
        p.k_dim = kDim;
        p.v_dim = vDim;
        p.dtype = KILN_DTYPE_BF16;
        p.q = q;
        p.k = k;
        p.v = v;
        p.g = g;
        p.beta = beta;
        p.out = out;
        p.l2norm_qk = 1;
        p.stream = s;
        KCHECK(kiln_gdn_chunk_prefill(&p));
      },
      10);
  // The update once per token, launched eagerly (no graph), as a runtime without the
  // chunked kernel would run the prompt.
  const double tokenSec = timeIt(
      [&](cudaStream_t s) {
        for (int t = 0; t < tokens; ++t) {
          const UpdateInputs in{q + size_t(t) * kHeads * kDim, k + size_t(t) * kHeads * kDim,
                                v + size_t(t) * vHeads * vDim, g + size_t(t) * vHeads,
                                beta + size_t(t) * vHeads,     out + size_t(t) * vHeads * vDim};
          const kiln_gdn_update_params_t p =
              updateParams(state, 1, nullptr, nullptr, 1, 1, kHeads, vHeads, in, s);
          KCHECK(kiln_gdn_update(&p));
        }
      },
      3, 1);
  const double perToken = 2.0 * kChunk * kDim + 2.0 * kChunk * vDim + 6.0 * kDim * vDim;
  const double flops = perToken * tokens * vHeads;
  const double bytes = 2.0 * qk * 2 + 2.0 * vo * 2 + 2.0 * gb * 4 + 2.0 * st * 4;
  const double tflops = flops / chunkSec / 1e12, tbps = bytes / chunkSec / 1e12;
  std::printf("%s: %d tokens, heads %d/%d, %dx%d: gdn_chunk_prefill %.3f ms = %.2f TFLOP/s "
              "(%.1f%% of the %.1f TFLOP/s mma.sync ceiling), %.3f TB/s (%.1f%% of the %.2f "
              "TB/s copy ceiling); gdn_update token by token %.3f ms (%.1fx)\n",
              name, tokens, kHeads, vHeads, kDim, vDim, chunkSec * 1e3, tflops,
              100.0 * tflops / mmaTflops, mmaTflops, tbps, 100.0 * tbps / copyTBps, copyTBps,
              tokenSec * 1e3, tokenSec / chunkSec);
  std::fflush(stdout);
  for (void *p : {(void *)q, (void *)k, (void *)v, (void *)out, (void *)g, (void *)beta,
                  (void *)state, (void *)cu})
    CHECK(cudaFree(p));
  return {name, tokens, kHeads, vHeads, chunkSec, tokenSec, flops, bytes};
}

// The decode update of `batch` sequences (num_tokens 1; or `tokens` > 1: a verify step
// writing every token's state to the intermediates, rewind-mode speculation; or, with
// `replay`, gdn_update_replay's verify step of `tokens` tokens that first folds the 2
// accepted tokens of the step before) over distinct slots in shuffled order, as a serving
// batch holds them, with every kernel variant of GdnInternal.h. Bytes: each state read
// and written once (plus the intermediates written), q, k, v, out, g, beta (plus the kept
// inputs read and written): issue 17's target is 85% of the copy ceiling at batch >= 64.
// Ten launches a timing, each on the next of `copies` sets of states and intermediates
// that together exceed the L2 twice over: in a model 47 other layers run between two steps
// of a layer, so its states come from DRAM (a 32 MiB set alone would stay in the H100's
// 50 MiB L2 from one launch to the next).
struct DecodeResult {
  std::string shape;
  std::vector<double> percent; // of the copy ceiling, by variant; NaN: no such kernel
};

DecodeResult benchDecode(const char *name, int batch, int tokens, int kHeads, int vHeads,
                         double copyTBps, size_t l2Bytes, bool replay = false) {
  const size_t state = size_t(vHeads) * kDim * vDim; // floats a slot
  const size_t qk = size_t(batch) * tokens * kHeads * kDim;
  const size_t vo = size_t(batch) * tokens * vHeads * vDim, gb = size_t(batch) * tokens * vHeads;
  const bool spec = tokens > 1 && !replay;
  const size_t setFloats = size_t(batch) * state * (spec ? 1 + tokens : 1);
  const int copies = static_cast<int>(std::min<size_t>(8, 2 * l2Bytes / (setFloats * 4) + 1));
  auto *q = alloc<__nv_bfloat16>(qk), *k = alloc<__nv_bfloat16>(qk);
  auto *v = alloc<__nv_bfloat16>(vo), *out = alloc<__nv_bfloat16>(vo);
  float *g = alloc<float>(gb), *beta = alloc<float>(gb);
  float *states = alloc<float>(copies * batch * state);
  float *inter = spec ? alloc<float>(copies * size_t(batch) * tokens * state) : nullptr;
  fillBf16<<<1024, 256>>>(q, qk, -1.0f, 1.0f, 11);
  fillBf16<<<1024, 256>>>(k, qk, -1.0f, 1.0f, 12);
  fillBf16<<<1024, 256>>>(v, vo, -1.0f, 1.0f, 13);
  fillF32<<<1024, 256>>>(g, gb, -0.5f, 0.0f, 14);
  fillF32<<<1024, 256>>>(beta, gb, 0.0f, 1.0f, 15);
  fillF32<<<1024, 256>>>(states, copies * batch * state, -0.1f, 0.1f, 16);
  // Replay: every sequence folds the first kPending tokens of buffer 0 and keeps the step's
  // in buffer 1; max_tokens = tokens.
  constexpr int kPending = 2;
  const size_t keptKeys = size_t(batch) * 2 * tokens * kHeads * kDim;
  const size_t keptValues = size_t(batch) * 2 * tokens * vHeads * vDim;
  const size_t keptGb = size_t(batch) * 2 * vHeads * tokens * 2;
  __nv_bfloat16 *replayK = nullptr, *replayV = nullptr;
  float *replayGb = nullptr;
  int32_t *pairs = nullptr;
  if (replay) {
    replayK = alloc<__nv_bfloat16>(keptKeys);
    replayV = alloc<__nv_bfloat16>(keptValues);
    replayGb = alloc<float>(keptGb);
    fillBf16<<<1024, 256>>>(replayK, keptKeys, -1.0f, 1.0f, 17);
    fillBf16<<<1024, 256>>>(replayV, keptValues, -1.0f, 1.0f, 18);
    fillF32<<<1024, 256>>>(replayGb, keptGb, -0.5f, 0.0f, 19); // g and beta alike
    std::vector<int32_t> pairsHost(2 * batch);
    for (int b = 0; b < batch; ++b)
      pairsHost[2 * b] = kPending, pairsHost[2 * b + 1] = 0;
    pairs = alloc<int32_t>(2 * batch);
    CHECK(cudaMemcpy(pairs, pairsHost.data(), pairsHost.size() * sizeof(int32_t),
                     cudaMemcpyHostToDevice));
  }
  CHECK(cudaGetLastError());
  std::vector<int32_t> slotsHost(batch);
  for (int b = 0; b < batch; ++b)
    slotsHost[b] = static_cast<int32_t>((size_t(b) * 37 + 11) % batch); // a permutation
  int32_t *slots = alloc<int32_t>(batch);
  CHECK(cudaMemcpy(slots, slotsHost.data(), batch * sizeof(int32_t), cudaMemcpyHostToDevice));
  // The in-place update reads and writes each state; the speculative one reads it and
  // writes one state a token; the replay step reads and writes it, reads the kPending
  // tokens' kept inputs and writes its tokens'.
  const double stateBytes = double(batch) * state * 4 * (spec ? 1 + tokens : 2);
  const double keptBytes = replay ? double(kPending + tokens) / (2.0 * tokens) *
                                        (keptKeys * 2.0 + keptValues * 2.0 + keptGb * 4.0)
                                  : 0.0;
  const double bytes = stateBytes + keptBytes + 2.0 * qk * 2 + 2.0 * vo * 2 + 2.0 * gb * 4;
  const GdnUpdateVariant defaultVariant = replay ? kGdnUpdateReplayDefault : kGdnUpdateDefault;
  char shape[128];
  std::snprintf(shape, sizeof shape, "%s b%d%s", name, batch,
                replay ? " replay"
                : spec ? " spec"
                       : "");
  DecodeResult result{shape, {}};
  for (int i = 0; i < static_cast<int>(GdnUpdateVariant::Count); ++i) {
    const auto variant = static_cast<GdnUpdateVariant>(i);
    if (replay && variant == GdnUpdateVariant::Baseline) {
      result.percent.push_back(NAN); // no replay form
      continue;
    }
    constexpr int kLaunches = 10;
    auto launches = [&](cudaStream_t s) {
      for (int l = 0; l < kLaunches; ++l) {
        const int c = l % copies;
        float *interSet = inter ? inter + c * size_t(batch) * tokens * state : nullptr;
        const kiln_gdn_update_params_t p =
            updateParams(states + c * batch * state, batch, slots, interSet, batch, tokens, kHeads,
                         vHeads, {q, k, v, g, beta, out}, s);
        if (!replay) {
          KCHECK(gdnUpdateWithVariant(&p, variant));
          continue;
        }
        kiln_gdn_update_replay_params_t r{};
        r.state = p.state;
        r.num_slots = p.num_slots;
        r.state_indices = p.state_indices;
        r.replay = pairs;
        r.replay_k = replayK;
        r.replay_v = replayV;
        r.replay_gb = replayGb;
        r.max_tokens = tokens;
        r.batch = batch;
        r.num_tokens = tokens;
        r.k_heads = kHeads;
        r.v_heads = vHeads;
        r.k_dim = kDim;
        r.v_dim = vDim;
        r.dtype = p.dtype;
        r.q = p.q;
        r.k = p.k;
        r.v = p.v;
        r.g = p.g;
        r.beta = p.beta;
        r.out = p.out;
        r.l2norm_qk = p.l2norm_qk;
        r.stream = s;
        KCHECK(gdnUpdateReplayWithVariant(&r, variant));
      }
    };
    const double sec = timeIt(launches, 5) / kLaunches;
    const double tbps = bytes / sec / 1e12;
    result.percent.push_back(100.0 * tbps / copyTBps);
    std::printf("%s decode: batch %d, %d token(s)%s, heads %d/%d, %d state set(s), %s%s: "
                "%s %.1f us = %.3f TB/s (%.1f%% of the %.2f TB/s copy ceiling)\n",
                name, batch, tokens,
                replay ? " (replay, 2 folded)"
                : spec ? " (intermediates)"
                       : "",
                kHeads, vHeads, copies, gdnUpdateVariantName(variant),
                variant == defaultVariant ? " (default)" : "",
                replay ? "gdn_update_replay" : "gdn_update", sec * 1e6, tbps, result.percent.back(),
                copyTBps);
    std::fflush(stdout);
  }
  for (void *p : {(void *)q, (void *)k, (void *)v, (void *)out, (void *)g, (void *)beta,
                  (void *)states, (void *)inter, (void *)slots, (void *)replayK, (void *)replayV,
                  (void *)replayGb, (void *)pairs})
    if (p)
      CHECK(cudaFree(p));
  return result;
}

// The decode results as one table: a row a variant, a column a shape, % of the copy
// ceiling.
void printDecodeTable(const std::vector<DecodeResult> &results) {
  std::printf("\n%% of the copy ceiling | variant");
  for (const DecodeResult &r : results)
    std::printf(" | %s", r.shape.c_str());
  std::printf("\n");
  for (int i = 0; i < static_cast<int>(GdnUpdateVariant::Count); ++i) {
    const auto variant = static_cast<GdnUpdateVariant>(i);
    std::printf("| %s%s%s", gdnUpdateVariantName(variant), variant == kGdnUpdateDefault ? "*" : "",
                variant == kGdnUpdateReplayDefault ? "+" : "");
    for (const DecodeResult &r : results)
      if (std::isnan(r.percent[i]))
        std::printf(" | -");
      else
        std::printf(" | %.1f", r.percent[i]);
    std::printf("\n");
  }
  std::printf("(* kiln_gdn_update's variant, + kiln_gdn_update_replay's; -: no such kernel)\n\n");
  std::fflush(stdout);
}

} // namespace

int main(int argc, char **argv) {
  const char *jsonPath = argc > 1 ? argv[1] : "gdn_kiln.json";
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  double copyTBps = 0.0;
  { // copy ceiling: 1 GiB read + 1 GiB written
    const size_t bytes = size_t(1) << 30, n = bytes / 16;
    auto *src = alloc<uint4>(n), *dst = alloc<uint4>(n);
    CHECK(cudaMemset(src, 1, bytes));
    for (int blocks : {prop.multiProcessorCount * 4, prop.multiProcessorCount * 8}) {
      const double sec =
          timeIt([&](cudaStream_t s) { copyKernel<<<blocks, 512, 0, s>>>(src, dst, n); }, 10);
      copyTBps = std::max(copyTBps, 2.0 * bytes / sec / 1e12);
    }
    CHECK(cudaFree(src));
    CHECK(cudaFree(dst));
  }
  double mmaTflops = 0.0;
  {
    float *sink = alloc<float>(1);
    const int blocks = prop.multiProcessorCount * 8, threads = 128, iters = 4096;
    const double sec =
        timeIt([&](cudaStream_t s) { mmaKernel<<<blocks, threads, 0, s>>>(sink, iters); }, 5);
    mmaTflops = 4096.0 * 8 * iters * blocks * (threads / 32) / sec / 1e12;
    CHECK(cudaFree(sink));
  }
  std::printf("ceilings: copy (read+write) %.2f TB/s, bf16 mma.sync m16n8k16 %.1f TFLOP/s\n",
              copyTBps, mmaTflops);
  std::vector<DecodeResult> decode;
  const size_t l2 = static_cast<size_t>(prop.l2CacheSize);
  for (int batch : {64, 128, 256}) {
    decode.push_back(benchDecode("tp4", batch, 1, 4, 8, copyTBps, l2));
    decode.push_back(benchDecode("tp1", batch, 1, 16, 32, copyTBps, l2));
  }
  decode.push_back(benchDecode("tp1", 64, 4, 16, 32, copyTBps, l2));
  decode.push_back(benchDecode("tp4", 64, 4, 4, 8, copyTBps, l2));
  decode.push_back(benchDecode("tp4", 64, 4, 4, 8, copyTBps, l2, true));
  decode.push_back(benchDecode("tp1", 64, 4, 16, 32, copyTBps, l2, true));
  printDecodeTable(decode);
  if (std::getenv("KILN_BENCH_DECODE_ONLY"))
    return 0;
  std::vector<Result> results;
  results.push_back(benchPrefill("qwen3-next tp4", 8192, 4, 8, copyTBps, mmaTflops));
  results.push_back(benchPrefill("qwen3-next tp1", 8192, 16, 32, copyTBps, mmaTflops));
  if (FILE *f = std::fopen(jsonPath, "w")) {
    std::fprintf(f,
                 "{\"device\": \"%s\", \"copy_TBps\": %.4f, \"mma_TFLOPs\": %.2f, \"cases\": [\n",
                 prop.name, copyTBps, mmaTflops);
    for (size_t i = 0; i < results.size(); ++i) {
      const Result &r = results[i];
      std::fprintf(f,
                   "  {\"name\": \"%s\", \"tokens\": %d, \"k_heads\": %d, \"v_heads\": %d, "
                   "\"k_dim\": %d, \"v_dim\": %d, \"chunk_ms\": %.5f, \"token_by_token_ms\": "
                   "%.4f, \"flops\": %.0f, \"bytes\": %.0f}%s\n",
                   r.name.c_str(), r.tokens, r.kHeads, r.vHeads, kDim, vDim, r.chunkSec * 1e3,
                   r.tokenSec * 1e3, r.flops, r.bytes, i + 1 < results.size() ? "," : "");
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}
