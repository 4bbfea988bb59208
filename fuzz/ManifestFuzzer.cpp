// libFuzzer target kiln-fuzz-manifest: the compiled-model manifest parser
// (kiln::runtime::parseManifest) and the loader's layout of what it accepts
// (kiln::weights::applyLayout). Built with KILN_BUILD_FUZZERS (fuzz/CMakeLists.txt),
// run by scripts/fuzz.sh; seeds in test/Fuzz/corpus/manifest/.
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
    std::vector<unsigned char> bytes, scratch;
    for (const kiln::runtime::ManifestWeight &w : m.weights) {
      if (w.offset > m.weightBytes || w.bytes > m.weightBytes - w.offset || w.offset % 256)
        std::abort();
      if (w.bytes > (1u << 20))
        continue;
      bytes.assign(w.bytes, 0);
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
