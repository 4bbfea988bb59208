// kiln_bench_grouped_gemm: the MoE grouped expert GEMM (lib/Kernels/Graph/
// GroupedGemmSm90.cuh) alone, in every variant of GroupedGemmBench.h, on the expert
// GEMMs of DeepSeek-V3 (256 experts, top 8, 4096 tokens: gate/up 2048 x 7168 and down
// 7168 x 2048) and Qwen3-30B-A3B (128 experts, top 8, 2048 tokens), with random routing.
// Printed per variant and GEMM: ms, TFLOP/s (2 x pairs x n x k), the experts' weight
// bytes over the time in TB/s and in % of a read ceiling measured in this run, and the
// ratio to one dense cuBLASLt GEMM of the same FLOPs (m = pairs) timed in this run (the
// issue's ceiling). Every variant's output is compared bitwise with the first's.
// Usage: kiln_bench_grouped_gemm [OUT.json]; KILN_BENCH_VARIANT=NAME and
// KILN_BENCH_MODEL=NAME run one variant / model only (for a profiler).
#include "EventTimer.h"
#include "GroupedGemmBench.h"

#include "kiln/Kernels/Gemm.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

#define CHECK(call)                                                                                \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));             \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

using kiln::graph::GroupedGemmArgs;
using kiln::graph::GroupedGemmTile;

__global__ void readKernel(const uint4 *p, size_t n, unsigned *sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u)
    *sink = acc;
}

__global__ void fillKernel(uint16_t *p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    // bf16 in about [-1/16, 1/16]: exponent 0x3D.., random mantissa and sign.
    p[i] = static_cast<uint16_t>(0x3D00u | (h & 0x7Fu) | ((h >> 8) & 0x8000u));
  }
}

// Two warm-up calls, then the mean of `reps` (bench/EventTimer.h).
template <typename F> float timeMs(F &&f, int reps) {
  return kiln::bench::eventMs([&](int) { f(); }, 2, reps);
}

double readCeilingTBps() {
  const size_t bytes = size_t(4) << 30;
  uint4 *buf = nullptr;
  unsigned *sink = nullptr;
  CHECK(cudaMalloc(&buf, bytes));
  CHECK(cudaMalloc(&sink, 4));
  CHECK(cudaMemset(buf, 1, bytes));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const float ms = timeMs([&] { readKernel<<<sms * 8, 512>>>(buf, bytes / 16, sink); }, 10);
  cudaFree(buf);
  cudaFree(sink);
  return bytes / (ms * 1e-3) / 1e12;
}

// Each expert's rows in the fewest equal tiles of at most maxTokens (the plan kernel's
// rule), experts in order; rows contiguous by expert.
std::vector<GroupedGemmTile> tilesFor(const std::vector<int> &counts, int maxTokens) {
  std::vector<GroupedGemmTile> tiles;
  int first = 0;
  for (int e = 0; e < static_cast<int>(counts.size()); ++e) {
    const int rows = counts[e];
    if (rows > 0) {
      const int parts = (rows + maxTokens - 1) / maxTokens, each = (rows + parts - 1) / parts;
      for (int r = 0; r < rows; r += each)
        tiles.push_back({e, first + r, std::min(each, rows - r)});
    }
    first += rows;
  }
  return tiles;
}

// The gate/up GEMM in the MoE layer's fused forms, on the default variant: gated (gate
// and up products and SwiGLU in one pass: twice the weights), gathered (x's rows read
// through each row's token instead of a sorted copy), and both (what the layer runs).
// Their weight TB/s against the plain GEMM's tells what each fusion costs.
void benchFusedForms(const kiln::bench::GroupedGemmVariant &variant, GroupedGemmArgs plain,
                     int plainCtas, double weightBytes, double ceiling, int tokens,
                     const uint16_t *up, const int32_t *rowTokens) {
  const struct {
    const char *name;
    bool gated, gathered;
  } forms[] = {{"gated", true, false}, {"gathered", false, true}, {"gated+gathered", true, true}};
  for (const auto &f : forms) {
    GroupedGemmArgs args = plain;
    if (f.gated)
      args.up = up;
    if (f.gathered) {
      args.rowTokens = rowTokens;
      args.rows = tokens; // in is then x: [tokens, k]
    }
    const int ctas = f.gated ? 2 * plainCtas : plainCtas; // half the features a CTA
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int launched = std::min(ctas, sms);
    if (const cudaError_t e = variant.launch(args, launched, nullptr); e != cudaSuccess) {
      std::printf("      form %-15s launch failed: %s\n", f.name, cudaGetErrorString(e));
      cudaGetLastError();
      continue;
    }
    const float ms = timeMs([&] { CHECK(variant.launch(args, launched, nullptr)); }, 10);
    const double bytes = f.gated ? 2 * weightBytes : weightBytes;
    const double tbps = bytes / (ms * 1e-3) / 1e12;
    std::printf("      form %-15s %8.3f ms  weights %.2f TB/s (%3.0f%% of ceiling)\n", f.name, ms,
                tbps, 100 * tbps / ceiling);
  }
}

struct Model {
  const char *name;
  int experts, topK, tokens;
  int64_t hidden, inter;
};

} // namespace

int main(int argc, char **argv) {
  int device = 0;
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, device));
  if (prop.major != 9 || prop.minor != 0) {
    std::printf("kiln_bench_grouped_gemm: %s is sm_%d%d; the grouped GEMM is sm_90a only\n",
                prop.name, prop.major, prop.minor);
    return 0;
  }
  const double ceiling = readCeilingTBps();
  std::printf("%s: read ceiling %.3f TB/s (4 GiB, this run)\n", prop.name, ceiling);
  const std::vector<kiln::bench::GroupedGemmVariant> variants = {
#define KILN_LIST_VARIANT(name) groupedGemm##name(),
      KILN_GROUPED_GEMM_VARIANTS(KILN_LIST_VARIANT)
#undef KILN_LIST_VARIANT
  };
  const char *variantNames[] = {
#define KILN_NAME_VARIANT(name) #name,
      KILN_GROUPED_GEMM_VARIANTS(KILN_NAME_VARIANT)
#undef KILN_NAME_VARIANT
  };
  kiln_gemm_t *gemm = nullptr;
  if (kiln_gemm_create(&gemm) != KILN_OK) {
    std::fprintf(stderr, "kiln_gemm_create failed\n");
    return 1;
  }
  void *workspace = nullptr;
  CHECK(cudaMalloc(&workspace, KILN_GEMM_WORKSPACE_BYTES));
  FILE *json = argc > 1 ? std::fopen(argv[1], "w") : nullptr;
  if (json)
    std::fprintf(json, "{\"device\": \"%s\", \"ceiling_TBps\": %.4f, \"rows\": [\n", prop.name,
                 ceiling);
  bool firstRow = true;
  const Model models[] = {{"deepseek-v3", 256, 8, 4096, 7168, 2048},
                          {"qwen3-30b-a3b", 128, 8, 2048, 2048, 768}};
  const char *onlyModel = std::getenv("KILN_BENCH_MODEL");
  const char *onlyVariant = std::getenv("KILN_BENCH_VARIANT");
  for (const Model &m : models) {
    if (onlyModel && std::strcmp(onlyModel, m.name) != 0)
      continue;
    std::mt19937 rng(7);
    std::vector<int> counts(m.experts, 0), order(m.experts);
    for (int t = 0; t < m.tokens; ++t) {
      std::iota(order.begin(), order.end(), 0);
      for (int j = 0; j < m.topK; ++j) {
        std::uniform_int_distribution<int> pick(j, m.experts - 1);
        std::swap(order[j], order[pick(rng)]);
        ++counts[order[j]];
      }
    }
    const int64_t pairs = int64_t(m.tokens) * m.topK;
    const int hit =
        static_cast<int>(std::count_if(counts.begin(), counts.end(), [](int c) { return c > 0; }));
    const size_t weightElems = size_t(m.experts) * m.hidden * m.inter;
    const size_t rowElems = size_t(pairs) * std::max(m.hidden, m.inter);
    uint16_t *weights = nullptr, *in = nullptr, *out = nullptr, *dense = nullptr;
    CHECK(cudaMalloc(&weights, weightElems * 2));
    CHECK(cudaMalloc(&in, rowElems * 2));
    CHECK(cudaMalloc(&out, rowElems * 2));
    CHECK(cudaMalloc(&dense, rowElems * 2));
    // The MoE layer's fused forms of the gate/up GEMM: the up weights, and each sorted
    // row's token (random: the rows of a token spread over experts as routing spreads them).
    uint16_t *upWeights = nullptr;
    int32_t *rowTokens = nullptr;
    CHECK(cudaMalloc(&upWeights, size_t(m.experts) * m.inter * m.hidden * 2));
    CHECK(cudaMalloc(&rowTokens, size_t(pairs) * 4));
    {
      std::vector<int32_t> tokenOf(static_cast<size_t>(pairs));
      std::uniform_int_distribution<int32_t> token(0, m.tokens - 1);
      for (int32_t &t : tokenOf)
        t = token(rng);
      CHECK(cudaMemcpy(rowTokens, tokenOf.data(), tokenOf.size() * 4, cudaMemcpyHostToDevice));
    }
    fillKernel<<<prop.multiProcessorCount * 8, 256>>>(upWeights,
                                                      size_t(m.experts) * m.inter * m.hidden, 3);
    fillKernel<<<prop.multiProcessorCount * 8, 256>>>(weights, weightElems, 1);
    fillKernel<<<prop.multiProcessorCount * 8, 256>>>(in, rowElems, 2);
    CHECK(cudaDeviceSynchronize());
    std::printf("%s: %d tokens x top %d = %lld pairs over %d experts (%d hit, rows %d..%d)\n",
                m.name, m.tokens, m.topK, static_cast<long long>(pairs), m.experts, hit,
                *std::min_element(counts.begin(), counts.end()),
                *std::max_element(counts.begin(), counts.end()));
    const struct {
      const char *name;
      int64_t n, k;
    } gemms[] = {{"gate/up", m.inter, m.hidden}, {"down", m.hidden, m.inter}};
    for (const auto &g : gemms) {
      const double flops = 2.0 * pairs * g.n * g.k;
      const double weightBytes = double(hit) * g.n * g.k * 2;
      const float denseMs = timeMs(
          [&] {
            if (kiln_gemm_bf16(gemm, in, weights, nullptr, dense, pairs, g.n, g.k, workspace,
                               KILN_GEMM_WORKSPACE_BYTES, nullptr) != KILN_OK)
              std::exit(1);
          },
          10);
      std::printf("  %-8s n %5lld k %5lld: dense cuBLASLt (m %lld) %.3f ms = %.1f TFLOP/s\n",
                  g.name, static_cast<long long>(g.n), static_cast<long long>(g.k),
                  static_cast<long long>(pairs), denseMs, flops / (denseMs * 1e-3) / 1e12);
      std::vector<uint16_t> reference;
      for (size_t v = 0; v < variants.size(); ++v) {
        if (onlyVariant && std::strcmp(onlyVariant, variantNames[v]) != 0)
          continue;
        const auto &variant = variants[v];
        const std::vector<GroupedGemmTile> tiles = tilesFor(counts, variant.maxTileTokens);
        GroupedGemmTile *dTiles = nullptr;
        int32_t *dCount = nullptr;
        const int32_t count = static_cast<int32_t>(tiles.size());
        CHECK(cudaMalloc(&dTiles, tiles.size() * sizeof(GroupedGemmTile)));
        CHECK(cudaMalloc(&dCount, 4));
        CHECK(cudaMemcpy(dTiles, tiles.data(), tiles.size() * sizeof(GroupedGemmTile),
                         cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(dCount, &count, 4, cudaMemcpyHostToDevice));
        const GroupedGemmArgs args{in, weights, out, dTiles, dCount, g.n, g.k, pairs, m.experts};
        const int ctas = static_cast<int>(std::min<int64_t>(
            prop.multiProcessorCount, int64_t(count) * (g.n / variant.featureTile)));
        if (const cudaError_t e = variant.launch(args, ctas, nullptr); e != cudaSuccess) {
          std::printf("    %-10s launch failed: %s\n", variantNames[v], cudaGetErrorString(e));
          cudaGetLastError();
          continue;
        }
        const float ms = timeMs([&] { CHECK(variant.launch(args, ctas, nullptr)); }, 10);
        std::vector<uint16_t> got(size_t(pairs) * g.n);
        CHECK(cudaMemcpy(got.data(), out, got.size() * 2, cudaMemcpyDeviceToHost));
        const bool same = reference.empty() || got == reference;
        if (reference.empty())
          reference = got;
        const double tbps = weightBytes / (ms * 1e-3) / 1e12;
        std::printf(
            "    %-8s (stages %d, %d features x <= %3d tokens: %4d tiles, smem %6d B): %8.3f ms "
            "%6.1f TFLOP/s  weights %.2f TB/s (%3.0f%% of ceiling)  %.2f of dense%s\n",
            variantNames[v], variant.stages, variant.featureTile, variant.maxTileTokens, count,
            variant.sharedBytes, ms, flops / (ms * 1e-3) / 1e12, tbps, 100 * tbps / ceiling,
            denseMs / ms, same ? "" : "  OUTPUT DIFFERS");
        if (json) {
          std::fprintf(json,
                       "%s  {\"model\": \"%s\", \"gemm\": \"%s\", \"n\": %lld, \"k\": %lld, "
                       "\"pairs\": %lld, \"variant\": \"%s\", \"ms\": %.4f, \"TFLOPs\": %.2f, "
                       "\"weight_TBps\": %.3f, \"dense_ms\": %.4f, \"vs_dense\": %.3f, "
                       "\"same_bits\": %s}",
                       firstRow ? "" : ",\n", m.name, g.name, static_cast<long long>(g.n),
                       static_cast<long long>(g.k), static_cast<long long>(pairs), variantNames[v],
                       ms, flops / (ms * 1e-3) / 1e12, tbps, denseMs, denseMs / ms,
                       same ? "true" : "false");
          firstRow = false;
        }
        if (v == 0 && g.n == m.inter)
          benchFusedForms(variant, args, ctas, weightBytes, ceiling, m.tokens, upWeights,
                          rowTokens);
        cudaFree(dTiles);
        cudaFree(dCount);
      }
    }
    cudaFree(upWeights);
    cudaFree(rowTokens);
    cudaFree(weights);
    cudaFree(in);
    cudaFree(out);
    cudaFree(dense);
  }
  if (json) {
    std::fprintf(json, "\n]}\n");
    std::fclose(json);
  }
  kiln_gemm_destroy(gemm);
  cudaFree(workspace);
  return 0;
}
