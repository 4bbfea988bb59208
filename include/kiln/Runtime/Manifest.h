// The compiled-model manifest (the text kiln_model_manifest() returns; format in
// docs/abi.md), parsed and validated. Plain C++17: no CUDA, no LLVM.
#ifndef KILN_RUNTIME_MANIFEST_H
#define KILN_RUNTIME_MANIFEST_H

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::runtime {

struct ManifestWeight {
  std::string name;              // Hugging Face name
  std::string dtype;             // Kiln's name: bf16, f16, f32, i32
  std::vector<int64_t> shape;    // at least one dimension, each >= 0
  uint64_t offset = 0;           // in the weight allocation, 256-byte aligned
  uint64_t bytes = 0;            // product(shape) * dtype bytes
  // The checkpoint tensor's shape when it differs from `shape` (`from=`; the same element
  // count, every dimension positive). Empty: the checkpoint tensor has `shape`.
  std::vector<int64_t> fromShape;
  // `transpose`: the checkpoint tensor ([..., a, b]: `fromShape`, or `shape` without it;
  // rank >= 2) loads with every matrix of its last two dimensions transposed ([..., b, a]).
  bool transpose = false;
  // Empty, or {G, P0, P1, ...} (`rows=`): the tensor (after transposition) is G groups of
  // P0 + P1 + ... equal units (G x the sum divides the element count; a unit is its bytes
  // / (G x the sum)), loaded part-major (part 0 of every group, then part 1, ...).
  std::vector<int64_t> rowGroups;
  // `mxfp4`: the checkpoint holds the tensor in OCP MXFP4 as `<name>_blocks` (U8 [dims but
  // the last, last / 32, 16]: 32 FP4 E2M1 values per block, two a byte, the low nibble
  // first) and `<name>_scales` (U8 [dims but the last, last / 32]: one E8M0 scale per
  // block), dequantized to bf16 in the checkpoint shape (`fromShape`, or `shape`) before
  // `transpose` and `rows=`. Only on a bf16 weight whose checkpoint shape's last dimension
  // is a multiple of 32; never on a stacked weight.
  bool mxfp4 = false;
  // `shard=D/P` (one tensor-parallel rank's weight): the checkpoint tensor is `shardParts`
  // blocks of `shape` along dimension `shardDim` (its shape is `shape` with that dimension
  // times P); rank r of the manifest's tp_ranks N loads block r * P / N. -1 / 0: whole.
  // Never with another field. `shard=D/P:S0,S1,...`: along D the checkpoint tensor is
  // segments of P x S0, P x S1, ... (a fused projection), and the rank's weight is its
  // block of each, in order (the S are one rank's sizes; they sum to shape[D]). On a
  // stacked weight (`*`), D >= 1 and each stacked tensor is sharded.
  int32_t shardDim = -1;
  int32_t shardParts = 0;
  std::vector<int64_t> shardSegments;
};

struct Manifest {
  std::string name;
  int64_t vocabSize = 0, hiddenSize = 0, numLayers = 0, maxBatch = 0, maxSeqLen = 0, pageSize = 0, kvPages = 0,
          maxStepTokens = 0, maxLogitRows = 0, maxDraftLen = 0;
  uint64_t weightBytes = 0, cacheBytes = 0, speculativeBytes = 0, activationBytes = 0, workspaceBytes = 0, ioBytes = 0;
  // CUDA graphs of decode steps: at most cudaGraphs shapes, in cudaGraphBytes of driver
  // memory (outside the allocation), of the batches listed (empty: every batch).
  int64_t cudaGraphs = 0;
  // The sliding window whose KV pools are rings of pages per slot (optional key; 0: none).
  int64_t kvRingWindow = 0;
  // The tensor-parallel ranks the graph is one of (optional key `tp_ranks`; 1: the whole
  // model). A model of tp_ranks > 1 loads with kiln_model_load_rank.
  int64_t tpRanks = 1;
  // Device bytes the plan reserves for the rank's NCCL communicator (optional key
  // `collective_bytes`; 0: none). Loading refuses a communicator that took more.
  uint64_t collectiveBytes = 0;
  uint64_t cudaGraphBytes = 0;
  std::vector<int32_t> cudaGraphBatches;
  std::vector<ManifestWeight> weights;   // in manifest order
  // weight + cache + activation + workspace + io bytes (speculative bytes are part of
  // the cache bytes). parseManifest rejects a manifest whose sum overflows; on a
  // hand-built Manifest that overflows this returns UINT64_MAX.
  uint64_t totalBytes() const;
};

// Parses the text of kiln_model_manifest(). Every key is required exactly once; unknown
// keys, duplicates, negative or overflowing numbers, bad dtypes or shapes, shape/bytes
// mismatches, unaligned, overlapping or out-of-range weights, bad or repeated weight
// fields (from=, transpose, rows=, mxfp4; none on a stacked weight; mxfp4 on bf16 with a
// checkpoint shape whose last dimension is a multiple of 32), speculative_bytes >
// cache_bytes and anything after `end` are errors naming the line ("line N: ...").
// On failure `out` is left unchanged.
bool parseManifest(std::string_view text, Manifest &out, std::string &error);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_MANIFEST_H
