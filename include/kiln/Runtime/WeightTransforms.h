// What the loader does to a checkpoint tensor's bytes on the host before copying them to
// the device (plain C++17: no CUDA, no LLVM).
#ifndef KILN_RUNTIME_WEIGHTTRANSFORMS_H
#define KILN_RUNTIME_WEIGHTTRANSFORMS_H

#include "kiln/Runtime/Manifest.h"

#include <cstdint>
#include <string>
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

// The layout changes of manifest weight `w` on its `w.bytes` loaded bytes at `data` (in
// the manifest's dtype, widened already): `transpose` of the checkpoint shape (`fromShape`,
// or `shape`), then `rows=`. False, with `error` saying why, when `w` is inconsistent
// (parseManifest never returns such a weight); `data` is then unchanged.
bool applyLayout(unsigned char *data, const kiln::runtime::ManifestWeight &w,
                 std::vector<unsigned char> &scratch, std::string &error);

} // namespace kiln::weights

#endif // KILN_RUNTIME_WEIGHTTRANSFORMS_H
