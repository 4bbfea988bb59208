// Internal launch functions of the graph glue kernels (GraphKernels.cu). The public
// launchers (GraphLaunchers.cpp) validate every argument first; these only pick a
// variant, launch on `stream` and return cudaGetLastError().
#ifndef KILN_LIB_KERNELS_GRAPH_GRAPHINTERNAL_H
#define KILN_LIB_KERNELS_GRAPH_GRAPHINTERNAL_H

#include "GroupedGemm.h"
#include "kiln/Kernels/Graph.h"
#include "kiln/Kernels/Moe.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace kiln::graph {

// The inverse frequencies of one rope call; travels to the kernel as an argument (1 KiB),
// so the launch needs no device buffer and a CUDA graph captures it with the values.
struct RopeTable {
  float invFreq[KILN_ROPE_MAX_HEAD_DIM / 2];
};

// out[r, :] = src[index[r] - first, :], or zeros where index[r] is outside
// [first, first + numSource).
cudaError_t launchGatherRows(const void *src, const int32_t *index, void *out, int64_t rows,
                             int64_t dim, int64_t numSource, cudaStream_t stream,
                             int64_t first = 0);
// rms_norm of rows `stride` elements apart; only where rmsNormStridedFits (the 16-byte
// paths).
bool rmsNormStridedFits(const void *x, int64_t stride, const void *weight, const void *out,
                        int64_t dim);
cudaError_t launchRmsNormStrided(const void *x, int64_t stride, const void *weight, void *out,
                                 int64_t rows, int64_t dim, float eps, cudaStream_t stream);
cudaError_t launchRmsNorm(const void *x, const void *weight, void *out, int64_t rows,
                          int64_t dim, float eps, cudaStream_t stream);
// kiln_rms_norm_offset_bf16: (x * scale) * (weightOffset + weight) in fp32 (Qwen3-Next's
// zero-centered norm at 1, gpt-oss's at -0.0) of a [tokens, heads] grid of rows at element
// strides (heads == 1: headStride unused), out dense.
cudaError_t launchRmsNormOffset(const void *x, int64_t tokenStride, int64_t headStride,
                                const void *weight, void *out, int64_t tokens, int64_t heads,
                                int64_t dim, float eps, float weightOffset, cudaStream_t stream);
// How an RMSNorm applies its weight: kRoundThenScale weight * bf16(x * scale) (Llama,
// launchRmsNorm), kOffset (x * scale) * (weightOffset + weight) in fp32
// (launchRmsNormOffset).
enum class RmsNormWeight { kRoundThenScale, kOffset };
// sum = bf16(a + b), then out = the norm of sum: the bits of launchAdd then launchRmsNorm
// (kRoundThenScale) or launchRmsNormOffset (kOffset; weightOffset unused otherwise).
cudaError_t launchAddRmsNorm(const void *a, const void *b, const void *weight, void *sum, void *out,
                             int64_t rows, int64_t dim, float eps, RmsNormWeight kind,
                             float weightOffset, cudaStream_t stream);
// kiln_rope_rows_bf16 on validated arguments.
cudaError_t launchRopeRows(const kiln_rope_rows_t &p, const RopeTable &table,
                           cudaStream_t stream);
// One tensor of a rope launch: x [tokens, heads, headDim] into out (may be x).
struct RopeTensor {
  const void *x = nullptr;
  void *out = nullptr;
  int64_t heads = 0; // 0: none (the second of a single tensor's launch)
};
// kiln_rope_bf16 (b.heads == 0) and kiln_rope_pair_bf16; table holds rotaryDim / 2
// frequencies (rotaryDim <= headDim, even).
cudaError_t launchRope(const RopeTensor &a, const RopeTensor &b, const int32_t *positions,
                       int64_t tokens, int64_t headDim, int64_t rotaryDim, const RopeTable &table,
                       float attentionFactor, cudaStream_t stream);
cudaError_t launchAdd(const void *a, const void *b, void *out, int64_t n, cudaStream_t stream);
cudaError_t launchSwiglu(const void *gate, const void *up, void *out, int64_t n,
                         cudaStream_t stream);
cudaError_t launchGatedRmsNorm(const void *x, const void *gate, const void *weight, void *out,
                               int64_t rows, int64_t width, int64_t gateStride,
                               int64_t groupSize, float eps, cudaStream_t stream);
// kiln_rms_norm_gate_bf16: Qwen3-Next's norm-then-gate order of launchGatedRmsNorm,
// weight [groupSize].
cudaError_t launchRmsNormGate(const void *x, const void *gate, const void *weight, void *out,
                              int64_t rows, int64_t width, int64_t gateStride, int64_t groupSize,
                              float eps, cudaStream_t stream);
cudaError_t launchSigmoidMul(const void *x, const void *gate, void *out, int64_t rows, int64_t dim,
                             int64_t gateStride, cudaStream_t stream);
cudaError_t launchActivation(const void *x, void *out, int64_t n, int kind,
                             cudaStream_t stream);
cudaError_t launchSigmoidGate(const void *x, const void *w, const void *value, void *out,
                              int64_t rows, int64_t dim, int64_t cols, cudaStream_t stream);
cudaError_t launchConcat(const void *a, const void *b, void *out, int64_t rows, int64_t colsA,
                         int64_t colsB, cudaStream_t stream);
cudaError_t launchNextTokens(const int32_t *ids, const int32_t *picks, const int32_t *rows,
                             int32_t *out, int64_t tokens, int64_t numRows,
                             cudaStream_t stream);
cudaError_t launchArgmax(const void *logits, int32_t *out, int64_t rows, int64_t cols,
                         cudaStream_t stream);

// Where one kiln_moe call keeps its per-pair data (pair = token * top_k + j), carved
// from its scratch by the launcher; the pointer arrays hold the gate, up and down GEMMs'
// entries one after the other (`entries` each: the pairs, or the grouped mode's tiles).
struct MoeLayout {
  const uint16_t *x, *gate, *up, *down;
  int64_t hidden, inter;
  int32_t *ids, *slots, *table;
  float *weights;
  const void **wPtrs, **xPtrs;
  void **outPtrs;
  int64_t entries;
  uint16_t *xRows, *gateRows, *upRows, *yRows;
  // The own grouped GEMM's token tiles and their count (GroupedGemm.h), or null: the
  // cuBLASLt entries instead.
  GroupedGemmTile *gemmTiles;
  int32_t *gemmTileCount;
  // With the own grouped GEMM: each sorted row's token (the GEMM gathers x's rows; xRows
  // is not written), or null.
  int32_t *rowTokens;
};
constexpr int kMoeNormalizeTopK = KILN_MOE_NORMALIZE_TOP_K;
constexpr int kMoeRoundWeights = KILN_MOE_ROUND_WEIGHTS;
constexpr int kMoeSigmoid = KILN_MOE_SIGMOID;
constexpr int kMoeF32Combine = KILN_MOE_F32_COMBINE;

// How a token picks its experts (Moe.h's routing steps).
struct MoeRouting {
  int experts, topK, flags;
  const float *scoreBias; // [experts] or null
  int groups, topGroups;
  float scale;
};

// Routing; with `pairEntries` also the pairs mode's GEMM entries and slots (slot = pair).
// Logits are fp32 when routing.flags has KILN_MOE_F32_LOGITS, else bf16.
cudaError_t launchMoeRoute(const void *logits, const MoeLayout &layout, int64_t tokens,
                           const MoeRouting &routing, bool pairEntries, cudaStream_t stream);
// Grouped mode: the expert table and tile entries (tileRows M), each pair's sorted row,
// and the gathered inputs (xRows), or with layout.rowTokens each sorted row's token.
cudaError_t launchMoeGroup(const MoeLayout &layout, int64_t pairs, int topK, int experts,
                           int tileRows, cudaStream_t stream);
// The experts' activation form of launchMoeActivation: SwiGLU (Swiglu.cuh), gpt-oss's
// clamped form (KILN_MOE_CLAMPED_SWIGLU), or plain experts' kiln_activation_bf16 kind.
enum class MoeGlu { kSwiglu, kClamped, kPlain };
struct MoeActivation {
  MoeGlu form;
  const uint16_t *gateBias, *upBias; // bf16 [experts, inter] or null (16-byte aligned)
  int kind;                          // kPlain: kiln_activation_bf16's kind
  float alpha, limit;                // kClamped
};
// The activation of each pair's row (row slots[p], expert ids[p]) with its expert's gate
// and up biases, written over the gate row; rows of no pair (padding) stay as they are.
cudaError_t launchMoeActivation(const MoeLayout &layout, int64_t pairs, const MoeActivation &a,
                                cudaStream_t stream);
// downBias: bf16 [experts, hidden] (16-byte aligned) added to each pair's down row, or
// null.
cudaError_t launchMoeCombine(const MoeLayout &layout, const void *downBias, void *out,
                             int64_t tokens, int topK, bool f32Sum, cudaStream_t stream);

} // namespace kiln::graph

#endif
