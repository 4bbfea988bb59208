// The loader's host-side transforms of checkpoint tensors (WeightTransforms.h); no
// dependency beyond the C++ library, so the fuzzers link KilnWeights alone.
#include "kiln/Runtime/WeightTransforms.h"

#include <algorithm>
#include <cstring>

namespace kiln::weights {
namespace {

// `src` [rows, cols] into `dst` [cols, rows], in square tiles so that both sides stay in
// cache (gpt-oss's experts are matrices of millions of elements).
template <uint64_t Bytes>
void transposeTiled(const unsigned char *src, unsigned char *dst, uint64_t rows, uint64_t cols,
                    uint64_t elementBytes) {
  constexpr uint64_t kTile = 32;
  const uint64_t size = Bytes ? Bytes : elementBytes;
  for (uint64_t r0 = 0; r0 < rows; r0 += kTile) {
    const uint64_t r1 = std::min(rows, r0 + kTile);
    for (uint64_t c0 = 0; c0 < cols; c0 += kTile) {
      const uint64_t c1 = std::min(cols, c0 + kTile);
      for (uint64_t r = r0; r < r1; ++r)
        for (uint64_t c = c0; c < c1; ++c)
          std::memcpy(dst + (c * rows + r) * size, src + (r * cols + c) * size, size);
    }
  }
}

} // namespace

void transposeMatrices(unsigned char *data, uint64_t batch, uint64_t rows, uint64_t cols,
                       uint64_t elementBytes, std::vector<unsigned char> &scratch) {
  if (rows <= 1 || cols <= 1 || elementBytes == 0)
    return; // [1, n] and [n, 1] hold their elements in the same order
  const uint64_t matrixBytes = rows * cols * elementBytes;
  scratch.resize(matrixBytes);
  for (uint64_t b = 0; b < batch; ++b) {
    unsigned char *matrix = data + b * matrixBytes;
    std::memcpy(scratch.data(), matrix, matrixBytes);
    switch (elementBytes) {
    case 1:
      transposeTiled<1>(scratch.data(), matrix, rows, cols, elementBytes);
      break;
    case 2:
      transposeTiled<2>(scratch.data(), matrix, rows, cols, elementBytes);
      break;
    case 4:
      transposeTiled<4>(scratch.data(), matrix, rows, cols, elementBytes);
      break;
    case 8:
      transposeTiled<8>(scratch.data(), matrix, rows, cols, elementBytes);
      break;
    default:
      transposeTiled<0>(scratch.data(), matrix, rows, cols, elementBytes);
    }
  }
}

void regroupUnits(unsigned char *data, const std::vector<int64_t> &groups, uint64_t unitBytes,
                  std::vector<unsigned char> &scratch) {
  const uint64_t count = static_cast<uint64_t>(groups[0]);
  uint64_t perGroup = 0;
  for (size_t part = 1; part < groups.size(); ++part)
    perGroup += static_cast<uint64_t>(groups[part]);
  scratch.resize(count * perGroup * unitBytes);
  uint64_t written = 0, partStart = 0;
  for (size_t part = 1; part < groups.size(); ++part) {
    const uint64_t partBytes = static_cast<uint64_t>(groups[part]) * unitBytes;
    for (uint64_t group = 0; group < count; ++group) {
      std::memcpy(scratch.data() + written, data + (group * perGroup + partStart) * unitBytes,
                  partBytes);
      written += partBytes;
    }
    partStart += static_cast<uint64_t>(groups[part]);
  }
  if (written)
    std::memcpy(data, scratch.data(), written);
}

} // namespace kiln::weights
