// The loader's host-side transforms of checkpoint tensors (WeightTransforms.h); no
// dependency beyond the C++ library, so the fuzzers link KilnWeights alone.
#include "kiln/Runtime/WeightTransforms.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

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

// FP4 E2M1 magnitudes (codes 0..7) in halves: 0, 0.5, 1, 1.5, 2, 3, 4, 6.
constexpr unsigned kFp4Halves[8] = {0, 1, 2, 3, 4, 6, 8, 12};
constexpr const char *kFp4Text[16] = {"0",  "0.5",  "1",  "1.5",  "2",  "3",  "4",  "6",
                                      "-0", "-0.5", "-1", "-1.5", "-2", "-3", "-4", "-6"};

// Every scale's 16 products as bf16 bits, and which codes overflow under it (bit c set:
// code c), built once: a block then costs two table lookups a byte.
struct Mxfp4Table {
  uint16_t bits[255][16];
  uint16_t overflow[255];
};

const Mxfp4Table &mxfp4Table() {
  static const Mxfp4Table table = [] {
    Mxfp4Table t{};
    for (unsigned scale = 0; scale < 255; ++scale)
      for (unsigned code = 0; code < 16; ++code)
        if (!mxfp4Bf16(code, scale, t.bits[scale][code]))
          t.overflow[scale] |= static_cast<uint16_t>(1u << code);
    return t;
  }();
  return table;
}

// The index `flat` of a row-major tensor of shape `dims` as "[i, j, k]".
std::string indexText(uint64_t flat, const std::vector<int64_t> &dims) {
  std::vector<uint64_t> index(dims.size());
  for (size_t d = dims.size(); d-- > 0;) {
    const uint64_t extent = static_cast<uint64_t>(dims[d]);
    index[d] = extent ? flat % extent : 0;
    flat = extent ? flat / extent : 0;
  }
  std::string text = "[";
  for (size_t d = 0; d < index.size(); ++d)
    text += (d ? ", " : "") + std::to_string(index[d]);
  return text + "]";
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

bool mxfp4Bf16(unsigned code, unsigned scale, uint16_t &bits) {
  if (code > 15 || scale >= 255)
    return false;
  const uint16_t sign = code & 8 ? 0x8000 : 0;
  const unsigned halves = kFp4Halves[code & 7];
  if (halves == 0) {
    bits = sign;
    return true;
  }
  // The value is halves x 2^(scale - 128) = 1.f x 2^(scale - 128 + top), `top` being the
  // position of the leading bit of `halves` (at most 3; one more significant bit at most).
  unsigned top = 0;
  while (halves >> (top + 1))
    ++top;
  const int biased = static_cast<int>(scale) - 128 + static_cast<int>(top) + 127;
  if (biased >= 255)
    return false; // 2^128 or more: only infinity in bf16
  if (biased >= 1) {
    const unsigned fraction = ((halves << 7) >> top) & 0x7f;
    bits = static_cast<uint16_t>(sign | static_cast<unsigned>(biased) << 7 | fraction);
    return true;
  }
  // Subnormal: halves x 2^(scale - 128) in units of 2^-133 is halves << (scale + 5), exact
  // and below 2^7 here (the biased exponent is at most 0).
  bits = static_cast<uint16_t>(sign | halves << (scale + 5));
  return true;
}

bool dequantizeMxfp4(const unsigned char *blocks, const unsigned char *scales, uint64_t groups,
                     unsigned char *outBf16, uint64_t &badGroup, std::string &why) {
  const Mxfp4Table &table = mxfp4Table();
  for (uint64_t g = 0; g < groups; ++g) {
    const unsigned scale = scales[g];
    const unsigned char *block = blocks + 16 * g;
    if (scale == 255) {
      badGroup = g;
      why = "scale byte 0xff is NaN in E8M0";
      return false;
    }
    if (const uint16_t overflow = table.overflow[scale]) {
      for (unsigned j = 0; j < 32; ++j) {
        const unsigned code = j % 2 ? block[j / 2] >> 4 : block[j / 2] & 15;
        if (overflow >> code & 1) {
          badGroup = g;
          why = "scale 2^" + std::to_string(static_cast<int>(scale) - 127) + " (byte " +
                std::to_string(scale) + ") times its element " + std::to_string(j) + ", FP4 " +
                kFp4Text[code] + " (code " + std::to_string(code) +
                "), is 2^128 or more: it overflows bf16";
          return false;
        }
      }
    }
    const uint16_t *values = table.bits[scale];
    unsigned char *out = outBf16 + 64 * g;
    for (unsigned j = 0; j < 16; ++j) {
      const uint16_t low = values[block[j] & 15], high = values[block[j] >> 4];
      out[4 * j] = static_cast<unsigned char>(low & 0xff);
      out[4 * j + 1] = static_cast<unsigned char>(low >> 8);
      out[4 * j + 2] = static_cast<unsigned char>(high & 0xff);
      out[4 * j + 3] = static_cast<unsigned char>(high >> 8);
    }
  }
  return true;
}

bool readMxfp4(const SafetensorsIndex &index, const kiln::runtime::ManifestWeight &w,
               const std::string &checkpoint, unsigned char *out,
               std::vector<unsigned char> &packed, std::string &error) {
  auto fail = [&](const std::string &what) {
    error = "weight '" + w.name + "' (mxfp4): " + what;
    return false;
  };
  const std::vector<int64_t> &dims = w.fromShape.empty() ? w.shape : w.fromShape;
  uint64_t elements = 0;
  if (!w.mxfp4 || w.dtype != "bf16" || dims.empty() || dims.back() % 32 ||
      !product(dims, dims.size(), elements) ||
      elements > std::numeric_limits<uint64_t>::max() / 2 || w.bytes != 2 * elements)
    return fail("not an MXFP4 bf16 weight of " + std::to_string(w.bytes) +
                " bytes whose checkpoint shape " + dimsText(dims) +
                " ends in a multiple of 32 (parseManifest never returns such a weight)");
  std::vector<int64_t> scalesShape(dims.begin(), dims.end() - 1);
  scalesShape.push_back(dims.back() / 32);
  std::vector<int64_t> blocksShape = scalesShape;
  blocksShape.push_back(16);
  const uint64_t groups = elements / 32;

  const std::string blocksName = w.name + "_blocks", scalesName = w.name + "_scales";
  const TensorInfo *blocks = index.find(blocksName), *scales = index.find(scalesName);
  // Each of the two is there, u8, of its shape.
  auto check = [&](const std::string &name, const TensorInfo *info,
                   const std::vector<int64_t> &shape) {
    if (!info)
      return fail(
          "'" + name + "' (u8 " + dimsText(shape) + ") is not in the checkpoint " + checkpoint +
          (index.find(w.name) ? " (it holds '" + w.name + "' itself: that checkpoint is not MXFP4)"
                              : std::string()));
    if (info->dtype != Dtype::u8)
      return fail("'" + name + "' in " + info->file + " is " + dtypeName(info->dtype) +
                  ", MXFP4 needs u8");
    if (info->shape != shape)
      return fail("'" + name + "' in " + info->file + " has shape " + dimsText(info->shape) +
                  ", the model needs " + dimsText(shape) + " (MXFP4 of " + dimsText(dims) + ")");
    return true;
  };
  if (!check(blocksName, blocks, blocksShape) || !check(scalesName, scales, scalesShape))
    return false;

  // A piece of at most 2^18 blocks: 4 MiB of blocks and 256 KiB of scales.
  constexpr uint64_t kPieceGroups = uint64_t(1) << 18;
  const uint64_t pieceGroups = std::min(groups, kPieceGroups);
  if (packed.size() < 17 * pieceGroups)
    packed.resize(17 * pieceGroups);
  unsigned char *blockBytes = packed.data(), *scaleBytes = packed.data() + 16 * pieceGroups;
  for (uint64_t first = 0; first < groups; first += pieceGroups) {
    const uint64_t count = std::min(pieceGroups, groups - first);
    if (!index.readRange(*blocks, 16 * first, 16 * count, blockBytes, error) ||
        !index.readRange(*scales, first, count, scaleBytes, error))
      return fail(error);
    uint64_t bad = 0;
    std::string why;
    if (!dequantizeMxfp4(blockBytes, scaleBytes, count, out + 64 * first, bad, why))
      return fail("'" + scalesName + "'" + indexText(first + bad, scalesShape) + " in " +
                  scales->file + ": " + why);
  }
  return true;
}

namespace {

// `count` 16-bit values (bf16, else IEEE f16) at the front of `data` widened in place to
// f32 (from the last: each write lands on values already read).
void widenInPlace(unsigned char *data, uint64_t count, bool bf16) {
  for (uint64_t i = count; i-- > 0;) {
    uint16_t bits;
    std::memcpy(&bits, data + 2 * i, 2);
    float value;
    if (bf16) {
      const uint32_t wide = static_cast<uint32_t>(bits) << 16;
      std::memcpy(&value, &wide, 4);
    } else {
      const int exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
      value = exponent == 0    ? std::ldexp(static_cast<float>(mantissa), -24)
              : exponent == 31 ? (mantissa ? std::numeric_limits<float>::quiet_NaN()
                                           : std::numeric_limits<float>::infinity())
                               : std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
      if (bits & 0x8000)
        value = -value;
    }
    std::memcpy(data + 4 * i, &value, 4);
  }
}

} // namespace

bool readShard(const SafetensorsIndex &index, const kiln::runtime::ManifestWeight &w,
               int32_t rank, int32_t ranks, const std::string &checkpoint, unsigned char *out,
               std::string &error) {
  auto fail = [&](const std::string &what) {
    error = "weight '" + w.name + "' (rank " + std::to_string(rank) + " of " +
            std::to_string(ranks) + "): " + what;
    return false;
  };
  const int64_t parts = w.shardParts;
  const size_t star = w.name.find('*');
  const bool stacked = star != std::string::npos;
  if (w.shardDim < 0 || static_cast<size_t>(w.shardDim) >= w.shape.size() || parts < 1 ||
      (stacked && w.shardDim == 0))
    return fail("not a sharded weight (parseManifest never returns such a weight)");
  if (ranks < 1 || rank < 0 || rank >= ranks || parts > ranks || ranks % parts != 0)
    return fail("shard=" + std::to_string(w.shardDim) + "/" + std::to_string(parts) +
                ": its parts do not divide the ranks");
  // A stack reads each of its tensors (`*` = 0, 1, ...) as a weight of the shape's rest.
  std::vector<int64_t> shape = w.shape;
  int64_t tensors = 1;
  size_t dim = static_cast<size_t>(w.shardDim);
  if (stacked) {
    tensors = shape.front();
    shape.erase(shape.begin());
    --dim;
  }
  // Along the shard dimension: the segments (one rank's sizes), or the one whole block.
  std::vector<int64_t> segments = w.shardSegments;
  if (segments.empty())
    segments.push_back(shape[dim]);
  int64_t segmentSum = 0;
  for (int64_t size : segments)
    segmentSum += size;
  if (segmentSum != shape[dim])
    return fail("its segments do not sum to dimension " + std::to_string(w.shardDim));
  std::vector<int64_t> whole = shape;
  if (__builtin_mul_overflow(whole[dim], parts, &whole[dim]))
    return fail("the checkpoint shape overflows");
  uint64_t outer = 0, elements = 0;
  if (tensors <= 0 || !product(shape, dim, outer) || outer == 0 ||
      !product(shape, shape.size(), elements) || elements == 0 ||
      w.bytes % static_cast<uint64_t>(tensors) != 0 ||
      (w.bytes / static_cast<uint64_t>(tensors)) % elements != 0)
    return fail("shape " + dimsText(w.shape) + " holds no whole runs of its " +
                std::to_string(w.bytes) + " bytes");
  const uint64_t tensorBytes = w.bytes / static_cast<uint64_t>(tensors);
  // Bytes of one index of the shard dimension (times the dimensions after it).
  const uint64_t unit = tensorBytes / outer / static_cast<uint64_t>(shape[dim]);
  const uint64_t block =
      static_cast<uint64_t>(rank) * static_cast<uint64_t>(parts) / static_cast<uint64_t>(ranks);
  for (int64_t t = 0; t < tensors; ++t) {
    const std::string name =
        stacked ? w.name.substr(0, star) + std::to_string(t) + w.name.substr(star + 1) : w.name;
    const TensorInfo *info = index.find(name);
    if (!info)
      return fail("'" + name + "' (" + w.dtype + " " + dimsText(whole) +
                  ") is not in the checkpoint " + checkpoint);
    // An f32 parameter (Mamba2's A_log, D, dt_bias) may be saved in a 16-bit dtype: its
    // block is read as it is, then widened exactly.
    const std::string found = dtypeName(info->dtype);
    const bool widen = w.dtype == "f32" && (found == "bf16" || found == "f16");
    if (w.dtype != found && !widen)
      return fail("'" + name + "' in " + info->file + " is " + found + ", the model needs " +
                  w.dtype);
    if (info->shape != whole)
      return fail("'" + name + "' in " + info->file + " has shape " + dimsText(info->shape) +
                  ", the model needs " + dimsText(whole) + " (" + std::to_string(parts) +
                  " blocks of " + dimsText(shape) + " along dimension " + std::to_string(dim) +
                  (w.shardSegments.empty() ? "" : ", in each of its segments") + ")");
    unsigned char *first = out + static_cast<uint64_t>(t) * tensorBytes, *dest = first;
    const uint64_t stored = widen ? unit / 2 : unit;
    // Index o of the dimensions before the shard dimension: for each segment, this rank's
    // block of it, which starts past the whole earlier segments.
    for (uint64_t o = 0; o < outer; ++o) {
      uint64_t wholeFirst = 0;
      for (int64_t size : segments) {
        const uint64_t run = static_cast<uint64_t>(size) * stored;
        const uint64_t from =
            o * static_cast<uint64_t>(whole[dim]) * stored + wholeFirst + block * run;
        if (!index.readRange(*info, from, run, dest, error))
          return fail(error);
        dest += run;
        wholeFirst += static_cast<uint64_t>(parts) * run;
      }
    }
    if (widen)
      widenInPlace(first, tensorBytes / 4, found == "bf16");
  }
  return true;
}

} // namespace kiln::weights
