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

// out[first + r, :] = in[first + r, :] . weights[expert]^T for every tile's rows.
struct GroupedGemmArgs {
  const uint16_t *in;      // [rows, k] bf16
  const uint16_t *weights; // [experts, n, k] bf16
  uint16_t *out;           // [rows, n] bf16
  const GroupedGemmTile *tiles;
  const int32_t *tileCount; // on the device: the tiles in use
  int64_t n, k;
};

// Token rows of a tile (an expert with more is split into equal tiles), and output
// features of a CTA (n must be a multiple), and K's granularity.
constexpr int kGroupedGemmMaxTileTokens = 160;
constexpr int kGroupedGemmFeatureTile = 256;
constexpr int kGroupedGemmKBlock = 64;

// The tiles `pairs` (token, expert) pairs over `experts` experts can need.
inline int64_t groupedGemmTileBound(int64_t pairs, int64_t experts) {
  return (pairs + kGroupedGemmMaxTileTokens - 1) / kGroupedGemmMaxTileTokens + experts;
}

// Whether the current device runs the kernel: compute capability 9.0 with the sm_90a
// image in this library. Found out once per device, by a synchronous read of the loaded
// image, which `mayProbe` false (a stream being captured) forbids: not ready until then.
bool groupedGemmDeviceReady(bool mayProbe);

// Launches one persistent CTA per SM (at most `tileBound` x the feature tiles). n a
// multiple of kGroupedGemmFeatureTile, k of kGroupedGemmKBlock; pointers 16-byte aligned.
cudaError_t launchGroupedGemm(const GroupedGemmArgs &args, int64_t tileBound, cudaStream_t stream);

} // namespace kiln::graph

#endif
