// What the loader does to a checkpoint tensor's bytes on the host before copying them to
// the device (plain C++17: no CUDA, no LLVM).
#ifndef KILN_RUNTIME_WEIGHTTRANSFORMS_H
#define KILN_RUNTIME_WEIGHTTRANSFORMS_H

#include <cstdint>
#include <vector>

namespace kiln::weights {

// A manifest weight's `transpose`: each of the `batch` row-major [rows, cols] matrices of
// `elementBytes`-byte elements at `data` becomes [cols, rows], in place. `scratch` is
// resized to one matrix's bytes.
void transposeMatrices(unsigned char *data, uint64_t batch, uint64_t rows, uint64_t cols,
                       uint64_t elementBytes, std::vector<unsigned char> &scratch);

// A manifest weight's `rows=G:P0,P1,...`: `data` holds G groups of P0 + P1 + ... units of
// `unitBytes` each, and leaves with part 0 of every group, then part 1 of every group, and
// so on. `groups` is {G, P0, P1, ...}; `scratch` is resized to the tensor's bytes.
void regroupUnits(unsigned char *data, const std::vector<int64_t> &groups, uint64_t unitBytes,
                  std::vector<unsigned char> &scratch);

} // namespace kiln::weights

#endif // KILN_RUNTIME_WEIGHTTRANSFORMS_H
