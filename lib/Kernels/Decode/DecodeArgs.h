// Argument structs of the decode kernels (built by DecodeApi.cpp, read by the .cu files).
#ifndef KILN_LIB_KERNELS_DECODE_DECODEARGS_H
#define KILN_LIB_KERNELS_DECODE_DECODEARGS_H

#include <cuda.h> // CUtensorMap
#include <stdint.h>

namespace kiln::decode {

struct GqaArgs {
  const void *q;
  const void *kv;
  const int32_t *blockTable;
  const int32_t *seqLens;
  void *out;
  float *partO;
  float *partLse;
  // Fused combine (num_splits > 1): one arrival counter a (sequence, kv head x row
  // block) group, zero between launches; the group's last split block combines the
  // partials and sets it back to 0. Null: a separate splitCombineKernel combines.
  unsigned *counters;
  int qLen, qHeads, kvHeads, group;
  int rowBlocks; // blocks of MT*16 query rows per kv head (grid.y = kvHeads * rowBlocks)
  int pageSize, pageShift, maxPages;
  int numSplits, splitTiles; // keys per split = splitTiles * tileN
  int window;                // > 0: sliding window (keys per query), 0: every key
  const float *sinks;        // [qHeads] attention-sink logits (scaled-score units) or null
  const float *kScale, *vScale; // FP8 pools: [kvHeads] dequantization scales, or null (1)
  float scaleLog2;
};

struct MlaArgs {
  const void *q;
  const void *cache;
  const int32_t *blockTable;
  const int32_t *seqLens;
  // Per-token mode (both set): entry b is one token of sequence tokenRows[b] at position
  // tokenPos[b], attending keys 0..tokenPos[b]; seqLens is unused.
  const int32_t *tokenRows, *tokenPos;
  void *out;
  float *partO;
  float *partLse;
  int qLen, heads, maxPages;
  int numSplits, splitTiles;
  float scaleLog2;
};

// mla_decode_sm90: the same arguments plus the TMA map of the latent pool as a matrix of
// num_pages * 64 token rows x 576 values (64 x 64 boxes, 128-byte swizzle). Passed as
// a __grid_constant__ parameter: TMA reads the map from parameter space.
struct MlaSm90Args {
  MlaArgs base;
  CUtensorMap cache;
};

struct KvAppendArgs {
  const uint16_t *k;
  const uint16_t *v;
  long long kStride, vStride; // elements per token
  void *cache;                // 16-bit elements (k/v's, or f16 from bf16), or FP8 e4m3 bytes
  const int32_t *blockTable, *tokenBatch, *tokenPos;
  int numTokens, batch, kvHeads, headDim, pageSize, numPages, maxPages;
  const float *kScale, *vScale; // FP8: [kvHeads] scales, or null (1)
};

struct MlaKvAppendArgs {
  const uint16_t *kvC;
  const uint16_t *kPe;
  long long kvCStride, kPeStride;
  uint16_t *cache;
  const int32_t *blockTable, *tokenBatch, *tokenPos;
  int numTokens, batch, numPages, maxPages;
};

struct MlaExpandKeysArgs {
  const uint16_t *kv, *kPe;
  uint16_t *k;
  int numTokens, heads, nope, rope, vDim;
};

} // namespace kiln::decode

#endif
