// What the loader does to a checkpoint tensor's bytes on the host before copying them to
// the device: MXFP4 dequantization, transposition, regrouping (plain C++17: no CUDA, no
// LLVM).
#ifndef KILN_RUNTIME_WEIGHTTRANSFORMS_H
#define KILN_RUNTIME_WEIGHTTRANSFORMS_H

#include "kiln/Runtime/Manifest.h"
#include "kiln/Runtime/Safetensors.h"

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

// OCP Microscaling MXFP4 (the gpt-oss checkpoints' experts). A block is 32 FP4 E2M1
// values in 16 bytes, element 2j in the low nibble of byte j and 2j + 1 in its high nibble;
// the codes 0..7 are +0, 0.5, 1, 1.5, 2, 3, 4, 6 and 8..15 the same negated (8 is -0). Each
// block has one E8M0 scale byte s, the factor 2^(s - 127); 0xFF is NaN.
//
// Every such product is a bf16 number exactly whenever its magnitude is below 2^128: FP4
// values have at most two significant bits and the smallest product, 0.5 x 2^-127 = 2^-128,
// is a multiple of bf16's smallest subnormal 2^-133, so no rounding ever happens. What is
// left is refused rather than rounded: a NaN scale (0xFF), and a product of 2^128 or more
// (2, 3, 4 or 6 with s = 254; 4 or 6 with s = 253), which bf16 holds only as infinity.
// A block of only small codes under such a scale still dequantizes.

// The bf16 bits of FP4 code `code` (0..15) times 2^(scale - 127); false (and `bits`
// unchanged) for scale 0xFF or a product that overflows bf16.
bool mxfp4Bf16(unsigned code, unsigned scale, uint16_t &bits);

// `groups` MXFP4 blocks (`blocks`: 16 x groups bytes, `scales`: groups bytes) into
// 32 x groups bf16 values at `outBf16` (little-endian, as safetensors stores them; the
// blocks' values in order). False at the first block that cannot be dequantized (a NaN
// scale, an overflowing product; see above), with `badGroup` its index and `why` saying
// what is wrong; the blocks before it are written.
bool dequantizeMxfp4(const unsigned char *blocks, const unsigned char *scales, uint64_t groups,
                     unsigned char *outBf16, uint64_t &badGroup, std::string &why);

// Manifest weight `w` (with `mxfp4`) read from the checkpoint `index` (opened from
// `checkpoint`, named in errors) and dequantized into `out`: `w.bytes` bytes of bf16 in
// the checkpoint shape D (`w.fromShape`, or `w.shape`), ready for applyLayout. Checks that
// `<name>_blocks` is U8 [D but the last, last / 32, 16] and `<name>_scales` U8 [D but the
// last, last / 32], then reads them a bounded piece at a time through `packed` (grown to
// at most a few MiB, reused across calls). Errors name the weight, the tensor, its file
// or the checkpoint, and for a bad scale the block's index in `<name>_scales`.
bool readMxfp4(const SafetensorsIndex &index, const kiln::runtime::ManifestWeight &w,
               const std::string &checkpoint, unsigned char *out,
               std::vector<unsigned char> &packed, std::string &error);

// Manifest weight `w` (with `shard=D/P`) as tensor-parallel rank `rank` of `ranks`: block
// rank * P / ranks along dimension D of the checkpoint tensor (`w.shape` with D times P),
// read from `index` (opened from `checkpoint`, named in errors) into `out` (`w.bytes`
// bytes), one contiguous run for each index of the dimensions before D. With segments
// (`shard=D/P:S0,...`), the block of each segment, in order (runs of S0, S1, ... a
// rank). A stacked weight (`*`) reads every stacked tensor so, along its dimension
// D - 1. Checks each tensor's presence, dtype (exactly `w.dtype`) and shape, and that P
// divides `ranks`; errors name the weight and the rank.
bool readShard(const SafetensorsIndex &index, const kiln::runtime::ManifestWeight &w,
               int32_t rank, int32_t ranks, const std::string &checkpoint, unsigned char *out,
               std::string &error);

} // namespace kiln::weights

#endif // KILN_RUNTIME_WEIGHTTRANSFORMS_H
