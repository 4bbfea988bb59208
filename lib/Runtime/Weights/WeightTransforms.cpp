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

// The product of `dims`; false when it overflows 64 bits.
bool product(const std::vector<int64_t> &dims, size_t count, uint64_t &out) {
  out = 1;
  for (size_t i = 0; i < count; ++i) {
    if (dims[i] < 0 || __builtin_mul_overflow(out, static_cast<uint64_t>(dims[i]), &out))
      return false;
  }
  return true;
}

std::string dimsText(const std::vector<int64_t> &dims) {
  std::string text;
  for (int64_t d : dims)
    text += (text.empty() ? "" : "x") + std::to_string(d);
  return text;
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

bool applyLayout(unsigned char *data, const kiln::runtime::ManifestWeight &w,
                 std::vector<unsigned char> &scratch, std::string &error) {
  auto fail = [&](const std::string &what) {
    error = "weight '" + w.name + "': " + what;
    return false;
  };
  uint64_t elements = 0;
  if (!product(w.shape, w.shape.size(), elements))
    return fail("shape " + dimsText(w.shape) + " overflows 64 bits");
  if (w.bytes == 0 || (!w.transpose && w.rowGroups.empty()))
    return true; // nothing to move
  if (elements == 0 || w.bytes % elements)
    return fail(std::to_string(w.bytes) + " bytes are not whole elements of shape " +
                dimsText(w.shape));
  const uint64_t elementBytes = w.bytes / elements;

  const std::vector<int64_t> &from = w.fromShape.empty() ? w.shape : w.fromShape;
  uint64_t batch = 0, fromElements = 0;
  if (w.transpose && (from.size() < 2 || !product(from, from.size() - 2, batch) ||
                      !product(from, from.size(), fromElements) || fromElements != elements))
    return fail("cannot transpose checkpoint shape " + dimsText(from) + " into " +
                std::to_string(elements) + " elements (rank >= 2, the same element count)");

  // G x (P0 + P1 + ...) units; 0 when the groups are malformed.
  uint64_t units = 0;
  if (!w.rowGroups.empty()) {
    uint64_t perGroup = 0;
    bool valid = w.rowGroups.size() >= 3;
    for (int64_t count : w.rowGroups)
      valid &= count > 0;
    for (size_t part = 1; valid && part < w.rowGroups.size(); ++part)
      valid &=
          !__builtin_add_overflow(perGroup, static_cast<uint64_t>(w.rowGroups[part]), &perGroup);
    if (valid && __builtin_mul_overflow(static_cast<uint64_t>(w.rowGroups[0]), perGroup, &units))
      valid = false;
    if (!valid || elements % units)
      return fail("rows= groups do not divide the " + std::to_string(elements) +
                  " elements of shape " + dimsText(w.shape));
  }

  if (w.transpose)
    transposeMatrices(data, batch, static_cast<uint64_t>(from[from.size() - 2]),
                      static_cast<uint64_t>(from.back()), elementBytes, scratch);
  if (units)
    regroupUnits(data, w.rowGroups, w.bytes / units, scratch);
  return true;
}

} // namespace kiln::weights
