// What the loader does to a checkpoint tensor's bytes on the host before copying them to
// the device (plain C++17: no CUDA, no LLVM).
#ifndef KILN_RUNTIME_WEIGHTTRANSFORMS_H
#define KILN_RUNTIME_WEIGHTTRANSFORMS_H

#include <cstdint>
#include <vector>

namespace kiln::weights {

// A manifest weight's `rows=G:P0,P1,...`: `data` holds G groups of P0 + P1 + ... rows of
// `rowBytes` each, and leaves with part 0 of every group, then part 1 of every group, and
// so on. `groups` is {G, P0, P1, ...}; `scratch` is resized to the tensor's bytes.
void regroupRows(unsigned char *data, const std::vector<int64_t> &groups, uint64_t rowBytes,
                 std::vector<unsigned char> &scratch);

} // namespace kiln::weights

#endif // KILN_RUNTIME_WEIGHTTRANSFORMS_H
