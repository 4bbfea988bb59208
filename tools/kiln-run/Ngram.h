// N-gram (prompt-lookup) draft proposals for speculative decoding: pure host logic,
// no CUDA, used by kiln-run's `--spec ngram:K` and unit-tested on its own.
#ifndef KILN_TOOLS_KILN_RUN_NGRAM_H
#define KILN_TOOLS_KILN_RUN_NGRAM_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::spec {

// Proposes `k` tokens to follow `history` (prompt + generated tokens, the last one
// included). For n = maxN down to minN: if the last n tokens also occur earlier in the
// history, take their most recent earlier occurrence and copy the tokens that followed
// it (continuing into the proposals themselves when the copy reaches the end, so a
// repeating pattern keeps repeating). When no suffix matches, every proposal is the last
// token (or 0 for an empty history). Correctness of speculative decoding never depends
// on the proposals: the verify step accepts only drafts equal to the model's own argmax.
// Returns the n-gram size that matched (0: fallback).
int proposeNgram(const int32_t *history, size_t length, int k, int32_t *out, int maxN = 3,
                 int minN = 1);
std::vector<int32_t> proposeNgram(const std::vector<int32_t> &history, int k, int maxN = 3,
                                  int minN = 1);

// Accepted drafts of a verify step: the longest prefix of drafts[0..k) such that
// drafts[i] == argmax[i] (argmax[i] is the model's greedy token after the i-th token of
// [last, drafts...]). The bonus token is argmax[accepted].
int acceptedDrafts(const int32_t *drafts, const int32_t *argmax, int k);

} // namespace kiln::spec

#endif
