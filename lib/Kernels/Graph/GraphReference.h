// CPU references of the graph glue kernels and the GEMM (plain C++, no CUDA).
// Tensors are bf16 bit patterns (uint16_t) like the device data. The references round
// to bf16 at exactly the points the kernels (and Hugging Face's PyTorch ops) do and
// compute everything in between in fp64, except where the kernels' fp32 arithmetic IS
// the specification (the RoPE frequencies and angles, see RopeFrequencies.h), so a
// kernel may differ from them only by the last bit of a rounding that fp32 rounding
// errors push across a bf16 rounding boundary.
#ifndef KILN_LIB_KERNELS_GRAPH_GRAPHREFERENCE_H
#define KILN_LIB_KERNELS_GRAPH_GRAPHREFERENCE_H

#include "kiln/Kernels/Graph.h"
#include "kiln/Kernels/Moe.h"

#include <cstdint>

namespace kiln::reference {

float bf16ToFloat(uint16_t bits);
uint16_t floatToBf16(float value); // round to nearest even
uint16_t doubleToBf16(double value); // one rounding (via round-to-odd fp32)

void embeddingReference(const int32_t *ids, const uint16_t *table, uint16_t *out,
                        int64_t tokens, int64_t vocab, int64_t hidden);
void gatherRowsReference(const uint16_t *x, const int32_t *rows, uint16_t *out,
                         int64_t numRows, int64_t dim, int64_t numSourceRows);
// kiln_embedding_rows_bf16: the vocabulary rows [first, first + rows) of a table.
void embeddingRowsReference(const int32_t *ids, const uint16_t *table, uint16_t *out,
                            int64_t tokens, int64_t first, int64_t rows, int64_t hidden);
// kiln_blocks_to_columns_bf16: [parts, rows, cols] -> [rows, parts * cols].
void blocksToColumnsReference(const uint16_t *blocks, uint16_t *out, int64_t parts, int64_t rows,
                              int64_t cols);
void rmsNormReference(const uint16_t *x, const uint16_t *weight, uint16_t *out, int64_t rows,
                      int64_t dim, float eps);
// Returns false for an unknown rope type. inv_freq as in RopeFrequencies.h.
bool ropeInvFreqReference(const kiln_rope_params_t &rope, int64_t headDim, float *invFreq);
// c and s of one (position, frequency): bf16(cos(fp32 angle) * attention_factor).
void ropeCosSinReference(int32_t position, float invFreq, float attentionFactor,
                         uint16_t *cos, uint16_t *sin);
// rotaryDim 0 or headDim: whole heads; else the first rotaryDim elements of a head are
// rotated over rotaryDim / 2 frequencies (of rotaryDim) and the rest copied.
bool ropeReference(const uint16_t *x, const int32_t *positions, uint16_t *out, int64_t tokens,
                   int64_t heads, int64_t headDim, int64_t rotaryDim,
                   const kiln_rope_params_t &rope);
void addReference(const uint16_t *a, const uint16_t *b, uint16_t *out, int64_t n);
void swigluReference(const uint16_t *gate, const uint16_t *up, uint16_t *out, int64_t n);
// kiln_sigmoid_gate_bf16: the gate's dot product exact (fp64), rounded once; the sigmoid
// in fp64, rounded; the product rounded.
void sigmoidGateReference(const uint16_t *x, const uint16_t *w, const uint16_t *value,
                          uint16_t *out, int64_t rows, int64_t dim, int64_t cols);
// kiln_gated_rms_norm_bf16 in fp64: y = x * silu(gate), the group's mean square, the
// normalized value rounded to bf16, times the weight, rounded. gate has row stride
// gateStride.
void gatedRmsNormReference(const uint16_t *x, const uint16_t *gate, const uint16_t *weight,
                           uint16_t *out, int64_t rows, int64_t width, int64_t gateStride,
                           int64_t groupSize, double eps);
// Qwen3-Next's norms and gates. Their kernels take two kinds of fp32 values from the GPU's
// own arithmetic: a row's scale rsqrtf(mean(x^2) + eps) (the sum's order, rsqrtf's
// error) and a gate's expf. Everything else is fp32 products and bf16 roundings at fixed
// points, which the *Of functions evaluate exactly as the kernels do (host fp32, no FMA
// in them), given those values; the whole-tensor references feed them fp64 values
// rounded once to fp32 (a row's exact scale, the exact silu / sigmoid).
//
// kiln_rms_norm_offset_bf16 of one element: bf16((x * scale) * (weightOffset + weight)) in
// fp32 (weightOffset 1: Qwen3-Next; -0.0: gpt-oss).
uint16_t rmsNormOffsetOf(uint16_t x, float scale, uint16_t weight, float weightOffset);
// kiln_rms_norm_gate_bf16 of one element: bf16(bf16(weight * bf16(x * scale)) * silu),
// silu the fp32 silu(gate).
uint16_t rmsNormGateOf(uint16_t x, float scale, uint16_t weight, float silu);
// kiln_sigmoid_mul_bf16 of one element: bf16(x * bf16(sigmoid)), sigmoid the fp32
// sigmoid(gate).
uint16_t sigmoidMulOf(uint16_t x, float sigmoid);
// 1 / sqrt(mean of the squares of n values + eps) in fp64, rounded once to
// fp32: the scale a norm kernel's fp32 statistic approximates.
float rmsScaleReference(const uint16_t *x, int64_t n, double eps);
// fp64 silu(g) and sigmoid(g), rounded once to fp32.
float siluReference(uint16_t gate);
float sigmoidReference(uint16_t gate);
// kiln_rms_norm_offset_bf16: rows (t, h) at x + t * tokenStride + h * headStride, out dense.
void rmsNormOffsetReference(const uint16_t *x, int64_t tokenStride, int64_t headStride,
                            const uint16_t *weight, uint16_t *out, int64_t tokens, int64_t heads,
                            int64_t dim, double eps, float weightOffset);
// kiln_rms_norm_gate_bf16; gate has row stride gateStride, weight [groupSize].
void rmsNormGateReference(const uint16_t *x, const uint16_t *gate, const uint16_t *weight,
                          uint16_t *out, int64_t rows, int64_t width, int64_t gateStride,
                          int64_t groupSize, double eps);
// kiln_sigmoid_mul_bf16; gate has row stride gateStride.
void sigmoidMulReference(const uint16_t *x, const uint16_t *gate, uint16_t *out, int64_t rows,
                         int64_t dim, int64_t gateStride);
// kiln_activation_bf16 in fp64, rounded once: kind 0 relu(x)^2, 1 x * sigmoid(x).
void activationReference(const uint16_t *x, uint16_t *out, int64_t n, int kind);
void argmaxReference(const uint16_t *logits, int32_t *out, int64_t rows, int64_t cols);
// out[m, n] = x[m, k] w[n, k]^T + bias[n] (bias may be null), exact fp64 sums.
void gemmReference(const uint16_t *x, const uint16_t *w, const uint16_t *bias, double *out,
                   int64_t m, int64_t n, int64_t k);

// The routing and expert options of kiln_moe's params (Moe.h) the references read.
struct MoeOptions {
  int32_t topK = 1, flags = 0;
  const float *scoreBias = nullptr; // [experts] or null
  int32_t groups = 1, topGroups = 1;
  float scale = 1.0f;
  int32_t activation = 1; // plain experts (gate null): kiln_activation_bf16's kind
  // The expert GEMMs' biases (bf16 [experts, inter], [experts, hidden]) or null.
  const uint16_t *gateBias = nullptr, *upBias = nullptr, *downBias = nullptr;
  float gluAlpha = 1.702f, gluLimit = 7.0f; // KILN_MOE_CLAMPED_SWIGLU
};

// gpt-oss's clamped gated activation of one element (Moe.h's KILN_MOE_CLAMPED_SWIGLU):
// every step a bf16 op in fp32 except the sigmoid, which is fp64 rounded once to bf16.
uint16_t clampedSwigluReference(uint16_t gate, uint16_t up, float alpha, float limit);

// kiln_moe's routing of one token (Moe.h), in fp64 from the logits' values: the chosen
// experts in ascending order and their weights.
void moeRouteReference(const float *logits, int64_t experts, const MoeOptions &options,
                       int32_t *ids, float *weights);
// kiln_moe (Moe.h): every expert GEMM output rounded once from its exact sum, then its
// bias (options) added in fp32 and rounded; gate null: plain experts. logits [tokens,
// experts] as values (bf16 or fp32 ones).
void moeReference(const uint16_t *x, const float *logits, const uint16_t *gate,
                  const uint16_t *up, const uint16_t *down, uint16_t *out, int64_t tokens,
                  int64_t hidden, int64_t inter, int64_t experts, const MoeOptions &options);

} // namespace kiln::reference

#endif
