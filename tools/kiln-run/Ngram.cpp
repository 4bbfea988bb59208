// N-gram draft proposals (see Ngram.h).
#include "Ngram.h"

#include <algorithm>

namespace kiln::spec {

int proposeNgram(const int32_t *history, size_t length, int k, int32_t *out, int maxN,
                 int minN) {
  if (k <= 0)
    return 0;
  minN = std::max(minN, 1);
  for (int n = maxN; n >= minN; --n) {
    const size_t un = static_cast<size_t>(n);
    if (length < un + 1)
      continue;
    const int32_t *suffix = history + length - un;
    // Most recent earlier occurrence starting at j, followed by at least one token
    // (j + n <= length - 1).
    for (size_t j = length - un; j-- > 0;) {
      if (!std::equal(suffix, suffix + un, history + j))
        continue;
      for (int i = 0; i < k; ++i) {
        const size_t pos = j + un + static_cast<size_t>(i);
        out[i] = pos < length ? history[pos] : out[pos - length];
      }
      return n;
    }
  }
  const int32_t fill = length ? history[length - 1] : 0;
  std::fill(out, out + k, fill);
  return 0;
}

std::vector<int32_t> proposeNgram(const std::vector<int32_t> &history, int k, int maxN,
                                  int minN) {
  std::vector<int32_t> out(static_cast<size_t>(std::max(k, 0)));
  proposeNgram(history.data(), history.size(), k, out.data(), maxN, minN);
  return out;
}

int acceptedDrafts(const int32_t *drafts, const int32_t *argmax, int k) {
  int a = 0;
  while (a < k && drafts[a] == argmax[a])
    ++a;
  return a;
}

} // namespace kiln::spec
