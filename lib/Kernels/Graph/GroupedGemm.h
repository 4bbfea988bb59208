// The MoE layer's own grouped expert GEMM (sm_90a, GroupedGemmSm90.cuh): the token-tile
// table the routing plan writes for it, its arguments, and when it runs instead of the
// cuBLASLt pointer-array GEMM (docs/kernels-graph.md, "MoE").
#ifndef KILN_LIB_KERNELS_GRAPH_GROUPEDGEMM_H
#define KILN_LIB_KERNELS_GRAPH_GROUPEDGEMM_H

#include <cuda_runtime.h>

#include <cstdint>

namespace kiln::graph {

// One token tile: `rows` rows (1..kGroupedGemmMaxTileTokens) of expert `expert`, from
// row `first` of the expert-sorted input and output rows.
struct GroupedGemmTile {
  int32_t expert, first, rows;
};

// out[first + r, :] = in[first + r, :] . weights[expert]^T for every tile's rows; with
// `up` (the gated form, an MoE layer's gate and up GEMMs fused), out[first + r, :] =
// SwiGLU(in . weights[expert]^T, in . up[expert]^T) instead, each product rounded to bf16
// first (Swiglu.cuh: as the separate GEMMs and the elementwise SwiGLU round).
struct GroupedGemmArgs {
  const uint16_t *in;      // [rows, k] bf16
  const uint16_t *weights; // [experts, n, k] bf16 (the gate's, when gated)
  uint16_t *out;           // [rows, n] bf16
  const GroupedGemmTile *tiles;
  const int32_t *tileCount; // on the device: the tiles in use
  int64_t n, k;
  // The extents of in and weights (tensor-map loads need them; tiles never exceed them).
  int64_t rows = 0, experts = 0;
  const uint16_t *up = nullptr; // [experts, n, k] bf16: the gated form
  // Gathered input: row r of the expert-sorted order is in[rowTokens[r]] (in is then the
  // layer's [tokens, k] input and `rows` its tokens), so nobody writes the sorted copy.
  const int32_t *rowTokens = nullptr;
  // A dense GEMM (one "expert", no routing): > 0 splits `rows` into this many equal token
  // tiles (the last may be shorter), and tiles / tileCount are not read.
  int32_t denseTiles = 0;
};

// Token rows of a tile (an expert with more is split into equal tiles), and weight rows
// of a CTA: its output features, or half of them in the gated form (the gate's and the
// up's rows of the same features; n a multiple either way), and K's granularity.
constexpr int kGroupedGemmMaxTileTokens = 160;
constexpr int kGroupedGemmFeatureTile = 256;
constexpr int kGroupedGemmKBlock = 64;

// A CTA's output features.
constexpr int groupedGemmCtaFeatures(bool gated) {
  return gated ? kGroupedGemmFeatureTile / 2 : kGroupedGemmFeatureTile;
}

// The tiles `pairs` (token, expert) pairs over `experts` experts can need: each expert's
// rows split into tiles of at most kGroupedGemmMaxTileTokens, and never more tiles than
// rows (a decode step's few pairs over many experts).
inline int64_t groupedGemmTileBound(int64_t pairs, int64_t experts) {
  const int64_t byExpert =
      (pairs + kGroupedGemmMaxTileTokens - 1) / kGroupedGemmMaxTileTokens + experts;
  return pairs < byExpert ? pairs : byExpert;
}

// Whether a grouped MoE layer's shapes take the kernel: every GEMM's output features a
// multiple of the CTA's (K then a multiple of the K block), and the experts' rows one
// tile on average at most (past that the GEMMs are compute-bound, the kernel reads an
// expert once per tile, and cuBLASLt's padding is small: Mixtral at 2048 tokens, 512
// rows an expert, ran 5.6 ms against cuBLASLt's 3.6 on an H100).
inline bool groupedGemmFeaturesFit(int64_t hidden, int64_t inter) {
  return hidden % kGroupedGemmFeatureTile == 0 && inter % kGroupedGemmFeatureTile == 0;
}
inline bool groupedGemmShapesFit(int64_t hidden, int64_t inter, int64_t experts, int64_t pairs) {
  return groupedGemmFeaturesFit(hidden, inter) && pairs <= experts * kGroupedGemmMaxTileTokens;
}

// Whether `stream` is being captured into a CUDA graph (or its state cannot be read):
// the device probe below must not run then.
inline bool streamCapturing(cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &capture) != cudaSuccess ||
         capture != cudaStreamCaptureStatusNone;
}

// Whether the current device runs the kernel: compute capability 9.0 with the sm_90a
// image in this library. Found out once per device, by a synchronous read of the loaded
// image, which `mayProbe` false (a stream being captured) forbids: Unknown until then.
enum class GroupedGemmDevice { Unknown, Ready, Unavailable };
GroupedGemmDevice groupedGemmDeviceState(bool mayProbe);
inline bool groupedGemmDeviceReady(bool mayProbe) {
  return groupedGemmDeviceState(mayProbe) == GroupedGemmDevice::Ready;
}

// Launches one persistent CTA per SM (at most `tileBound` x the feature tiles). n a
// multiple of groupedGemmCtaFeatures, k of kGroupedGemmKBlock; pointers 16-byte aligned;
// args.rows and args.experts the extents of in and weights.
cudaError_t launchGroupedGemm(const GroupedGemmArgs &args, int64_t tileBound, cudaStream_t stream);

// Whether a dense [n, k] GEMM of few rows (a decode or verify step's) takes the kernel's
// dense form: n a multiple of the CTA's features and k of the K block, and enough feature
// tiles to keep `sms` SMs at least 90% busy in whole waves (an lm_head's vocabulary).
// A function of the shape and the device only, never of m, so that a row's bits do not
// depend on the step's rows. Fewer features would need K split over CTAs; a split with
// a separate reduce measured slower than cuBLASLt on an H100 (docs/kernels-graph.md).
inline bool denseGemmFillsTheSms(int64_t n, int64_t k, int sms) {
  if (n % kGroupedGemmFeatureTile != 0 || k % kGroupedGemmKBlock != 0 || sms <= 0)
    return false;
  const int64_t featureTiles = n / kGroupedGemmFeatureTile;
  const int64_t waves = (featureTiles + sms - 1) / sms;
  return 10 * featureTiles >= 9 * waves * sms;
}
// out[m, n] = x[m, k] . w[n, k]^T through the dense form (equal token tiles of at most
// kGroupedGemmMaxTileTokens rows).
cudaError_t launchDenseGemm(const uint16_t *x, const uint16_t *w, uint16_t *out, int64_t m,
                            int64_t n, int64_t k, cudaStream_t stream);
} // namespace kiln::graph

#endif
