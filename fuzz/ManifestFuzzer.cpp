// libFuzzer target kiln-fuzz-manifest: the compiled-model manifest parser
// (kiln::runtime::parseManifest) and the loader's layout of what it accepts
// (kiln::weights::applyLayout, after kiln::weights::dequantizeMxfp4 of synthetic blocks
// for an `mxfp4` weight). Built with KILN_BUILD_FUZZERS (fuzz/CMakeLists.txt), run by
// scripts/fuzz.sh; seeds in test/Fuzz/corpus/manifest/.
#include "kiln/Runtime/Manifest.h"
#include "kiln/Runtime/WeightTransforms.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kiln::runtime::Manifest m;
  std::string error;
  std::string_view text(reinterpret_cast<const char *>(data), size);
  if (kiln::runtime::parseManifest(text, m, error)) {
    // What the parser promises: weights inside weight_bytes, sizes consistent.
    // And the loader's layout (transpose, rows=) takes every weight it accepts, on weights
    // small enough to lay out here.
    // An mxfp4 weight is bf16 whose every 32 values are one block: its blocks (the
    // input's bytes over and over) and finite scales dequantize, then lay out; a NaN scale
    // in its last block is refused there.
    std::vector<unsigned char> bytes, scratch, blocks, scales;
    for (const kiln::runtime::ManifestWeight &w : m.weights) {
      if (w.offset > m.weightBytes || w.bytes > m.weightBytes - w.offset || w.offset % 256)
        std::abort();
      if (w.bytes > (1u << 20))
        continue;
      bytes.assign(w.bytes, 0);
      if (w.mxfp4) {
        if (w.dtype != "bf16" || w.bytes % 64 || w.name.find('*') != std::string::npos)
          std::abort();
        const uint64_t groups = w.bytes / 64;
        blocks.resize(16 * groups);
        scales.resize(groups);
        for (uint64_t i = 0; i < blocks.size(); ++i)
          blocks[i] = data[i % size];
        for (uint64_t g = 0; g < groups; ++g)
          scales[g] = static_cast<unsigned char>(100 + (g + data[g % size]) % 60);
        uint64_t bad = 0;
        std::string why;
        if (!kiln::weights::dequantizeMxfp4(blocks.data(), scales.data(), groups, bytes.data(), bad,
                                            why))
          std::abort();
        if (groups) {
          uint16_t first = 0;
          if (!kiln::weights::mxfp4Bf16(blocks[0] & 15, scales[0], first) ||
              bytes[0] != (first & 0xff) || bytes[1] != first >> 8)
            std::abort();
          scales[groups - 1] = 0xff;
          if (kiln::weights::dequantizeMxfp4(blocks.data(), scales.data(), groups, bytes.data(),
                                             bad, why) ||
              bad != groups - 1)
            std::abort();
        }
      }
      if (!kiln::weights::applyLayout(bytes.data(), w, scratch, error))
        std::abort();
    }
    if (m.totalBytes() < m.weightBytes)
      std::abort();
  } else if (error.rfind("line ", 0) != 0) {
    std::abort();
  }
  return 0;
}
