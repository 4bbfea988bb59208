// The host time of kiln_rt_set_batch, the one runtime call of a replayed decode step
// besides cudaGraphLaunch (issue 16's target: a step's host time within 5 us). Runs on
// any machine, no GPU: the validation is timed on a dry context (which validates exactly
// as a real one and writes nothing), the staging fill (lib/Runtime/StepStaging.h) on a
// plain buffer. The ceiling is memcpy of the bytes the fill writes, in one call, in the
// same run. Cases: the 8B benchmark's decode models (bench/Model/compile.sh) at batch 1,
// 64 and 256, and the batch-64 n-gram verify step (5 tokens a sequence).
//   build/bin/kiln_bench_set_batch [JSON]
#include "StepStaging.h"

#include "kiln/Runtime/Runtime.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

namespace {

struct Case {
  const char *name;
  int64_t maxBatch, maxSeqLen, draftLen;
  int32_t batch, qLen;
};

struct Step {
  std::vector<int32_t> qLens, seqLens, table, ids, rows, cu;
  kiln_rt_batch_t b{};
  int64_t tokens = 0, usedPages = 0;
};

constexpr int64_t kPage = 16;

kiln_rt_config_t configOf(const Case &c) {
  const int64_t P = (c.maxSeqLen + kPage - 1) / kPage;
  kiln_rt_config_t cfg{};
  cfg.vocab_size = 128256;
  cfg.max_batch = c.maxBatch;
  cfg.max_seq_len = c.maxSeqLen;
  cfg.page_size = kPage;
  cfg.kv_pages = c.maxBatch * P;
  cfg.max_draft_len = c.draftLen;
  cfg.max_step_tokens = c.maxBatch * (1 + c.draftLen);
  cfg.max_logit_rows = cfg.max_step_tokens;
  cfg.weight_bytes = 1 << 20;
  cfg.cache_bytes = 1 << 20;
  cfg.activation_bytes = 1 << 20;
  cfg.workspace_bytes = kiln_rt_workspace_bytes(cfg.max_logit_rows, cfg.max_batch, 64);
  cfg.io_bytes = kiln_rt_io_bytes(cfg.max_batch, cfg.max_step_tokens, cfg.max_logit_rows, P, 0);
  return cfg;
}

// Sequences of 129 to the model's length (the bench's 128-token prompts, part-way through
// decoding), each on its own pages, every token a logit row (greedy decode and verify).
Step stepOf(const Case &c) {
  const int64_t P = (c.maxSeqLen + kPage - 1) / kPage;
  const int64_t longest = std::min<int64_t>(c.maxSeqLen, 256);
  Step s;
  for (int i = 0; i < c.batch; ++i) {
    s.qLens.push_back(c.qLen);
    s.seqLens.push_back(static_cast<int32_t>(129 + (i * 37) % (longest - 128)));
    s.usedPages += (s.seqLens.back() + kPage - 1) / kPage;
  }
  s.table.resize(c.batch * P);
  std::iota(s.table.begin(), s.table.end(), 0);
  s.tokens = static_cast<int64_t>(c.batch) * c.qLen;
  s.ids.assign(s.tokens, 42);
  s.rows.resize(s.tokens);
  std::iota(s.rows.begin(), s.rows.end(), 0);
  s.cu.assign(c.batch + 1, 0);
  for (int i = 0; i < c.batch; ++i)
    s.cu[i + 1] = s.cu[i] + c.qLen;
  s.b.phase = KILN_RT_PHASE_DECODE;
  s.b.batch = c.batch;
  s.b.q_lens = s.qLens.data();
  s.b.seq_lens = s.seqLens.data();
  s.b.block_table = s.table.data();
  s.b.token_ids = s.ids.data();
  s.b.logit_rows = s.rows.data();
  s.b.num_logit_rows = static_cast<int32_t>(s.tokens);
  return s;
}

// Median over 51 rounds of the mean nanoseconds of `reps` calls of fn.
template <typename Fn> double medianNs(int reps, Fn &&fn) {
  std::vector<double> rounds;
  for (int round = 0; round < 51; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r)
      fn();
    const auto end = std::chrono::steady_clock::now();
    rounds.push_back(std::chrono::duration<double, std::nano>(end - start).count() / reps);
  }
  std::nth_element(rounds.begin(), rounds.begin() + rounds.size() / 2, rounds.end());
  return rounds[rounds.size() / 2];
}

} // namespace

int main(int argc, char **argv) {
  const Case cases[] = {{"decode b1", 1, 4608, 0, 1, 1},
                        {"decode b64", 64, 4608, 0, 64, 1},
                        {"decode b256", 256, 256, 0, 256, 1},
                        {"verify b64 ngram:4", 64, 4608, 4, 64, 5}};
  std::string json = "[";
  std::printf("%-20s%14s%12s%12s%12s%10s%14s\n", "case", "validate ns", "fill ns", "total ns",
              "memcpy ns", "% ceil", "fill bytes");
  for (const Case &c : cases) {
    const kiln_rt_config_t cfg = configOf(c);
    kiln_rt_context_t *ctx = nullptr;
    if (kiln_rt_create_dry(&cfg, &ctx) != KILN_OK) {
      std::fprintf(stderr, "%s: kiln_rt_create_dry: %s\n", c.name, kiln_last_error());
      return 1;
    }
    Step s = stepOf(c);
    if (kiln_rt_set_batch(ctx, &s.b) != KILN_OK) {
      std::fprintf(stderr, "%s: kiln_rt_set_batch: %s\n", c.name, kiln_last_error());
      return 1;
    }
    const int reps = c.batch >= 64 ? 200 : 2000;
    const double validate = medianNs(reps, [&] { kiln_rt_set_batch(ctx, &s.b); });
    kiln_rt_destroy(ctx);

    const int64_t P = (c.maxSeqLen + kPage - 1) / kPage;
    const kiln_rt_io_layout_t io = kiln_rt_io_layout(cfg.max_batch, cfg.max_step_tokens,
                                                     cfg.max_logit_rows, P, 0);
    std::vector<char> staging(io.bytes + 64);
    char *host = staging.data() + (64 - reinterpret_cast<uintptr_t>(staging.data()) % 64) % 64;
    const kiln::rt::StagingShape shape{P, kPage, 0};
    size_t uploaded = 0;
    const double fill = medianNs(reps, [&] {
      uploaded = kiln::rt::fillStepStaging(host, io, shape, s.b, s.cu.data(), s.tokens);
    });
    // What the fill must write: ids, positions, token_batch and logit rows (a token each),
    // seq_lens, slots, pending pairs and cu_seqlens (5 a sequence, and one), the pages in
    // use.
    const size_t bytes = 4 * (4 * s.tokens + 5 * c.batch + 1 + s.usedPages);
    std::vector<char> from(bytes, 1), to(bytes);
    const double copy = medianNs(reps, [&] {
      std::memcpy(to.data(), from.data(), bytes);
      asm volatile("" ::"r"(to.data()) : "memory");
    });
    std::printf("%-20s%14.0f%12.0f%12.0f%12.0f%10.1f%14zu\n", c.name, validate, fill,
                validate + fill, copy, 100.0 * copy / fill, bytes);
    char row[320];
    std::snprintf(row, sizeof row,
                  "%s{\"case\": \"%s\", \"validate_ns\": %.0f, \"fill_ns\": %.0f, "
                  "\"memcpy_ns\": %.0f, \"fill_bytes\": %zu, \"upload_bytes\": %zu}",
                  json.size() > 1 ? ", " : "", c.name, validate, fill, copy, bytes, uploaded);
    json += row;
  }
  json += "]\n";
  std::printf("target (issue 16): a replayed step's host time, set_batch + cudaGraphLaunch, "
              "<= 5000 ns\n");
  if (argc > 1) {
    if (FILE *f = std::fopen(argv[1], "w")) {
      std::fputs(json.c_str(), f);
      std::fclose(f);
    }
  }
  return 0;
}
