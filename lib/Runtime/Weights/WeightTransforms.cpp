// The loader's host-side transforms of checkpoint tensors (WeightTransforms.h); no
// dependency beyond the C++ library, so the fuzzers link KilnWeights alone.
#include "kiln/Runtime/WeightTransforms.h"

#include <cstring>

namespace kiln::weights {

void regroupRows(unsigned char *data, const std::vector<int64_t> &groups, uint64_t rowBytes,
                 std::vector<unsigned char> &scratch) {
  const uint64_t count = static_cast<uint64_t>(groups[0]);
  uint64_t perGroup = 0;
  for (size_t part = 1; part < groups.size(); ++part)
    perGroup += static_cast<uint64_t>(groups[part]);
  scratch.resize(count * perGroup * rowBytes);
  uint64_t written = 0, partStart = 0;
  for (size_t part = 1; part < groups.size(); ++part) {
    const uint64_t partBytes = static_cast<uint64_t>(groups[part]) * rowBytes;
    for (uint64_t group = 0; group < count; ++group) {
      std::memcpy(scratch.data() + written, data + (group * perGroup + partStart) * rowBytes,
                  partBytes);
      written += partBytes;
    }
    partStart += static_cast<uint64_t>(groups[part]);
  }
  std::memcpy(data, scratch.data(), written);
}

} // namespace kiln::weights
