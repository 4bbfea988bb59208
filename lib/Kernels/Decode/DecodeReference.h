// fp64 CPU references of the decode family's math (same layouts as the kernels, inputs
// given as float values already rounded to the storage type). Used by the GPU tests and
// unit-tested against hand-computed cases in CI.
#ifndef KILN_LIB_KERNELS_DECODE_DECODEREFERENCE_H
#define KILN_LIB_KERNELS_DECODE_DECODEREFERENCE_H

#include <cstdint>
#include <vector>

namespace kiln::reference {

struct PagedShape {
  int batch = 1, qLen = 1, qHeads = 1, kvHeads = 1, headDim = 1;
  int pageSize = 1, maxPages = 1;
};

// q [batch, qLen, qHeads, headDim], kv pool [pages, 2, pageSize, kvHeads, headDim],
// blockTable [batch, maxPages], seqLens[batch] -> out [batch, qLen, qHeads, headDim].
// Token i of sequence b attends to positions < seqLens[b] - qLen + 1 + i, and with a
// window > 0 to the last `window` of those only; sinks (empty, or [qHeads] logits in
// scaled-score units) join each head's softmax without a value.
std::vector<double> gqaDecode(const PagedShape &shape, const std::vector<float> &q,
                              const std::vector<float> &kv, const std::vector<int32_t> &blockTable,
                              const std::vector<int32_t> &seqLens, double scale,
                              int window = 0, const std::vector<float> &sinks = {});

// q [batch, qLen, heads, 576], pool [pages, 64, 576] -> out [batch, qLen, heads, 512]
// (K = all 576 values, V = the first 512).
std::vector<double> mlaDecode(int batch, int qLen, int heads, int maxPages,
                              const std::vector<float> &q, const std::vector<float> &pool,
                              const std::vector<int32_t> &blockTable,
                              const std::vector<int32_t> &seqLens, double scale);

} // namespace kiln::reference

#endif
