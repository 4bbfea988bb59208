// The host fill of a step (lib/Runtime/StepStaging.h), on a plain buffer: what
// kiln_rt_set_batch writes into the pinned staging that the step's first kernel copies to
// the device. Checked field by field for decode, verify and mixed prefill/extend steps,
// with and without slots, pending drafts and a KV ring.
#include "StepStaging.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

namespace {

using kiln::rt::fillStepStaging;
using kiln::rt::StagingShape;

constexpr int32_t kPoison = -7;

struct Step {
  std::vector<int32_t> qLens, seqLens, table, ids, rows, slots, pending;
  kiln_rt_batch_t batch(int phase, bool withSlots, bool withPending) const {
    kiln_rt_batch_t b{};
    b.phase = static_cast<kiln_rt_phase_t>(phase);
    b.batch = static_cast<int32_t>(qLens.size());
    b.q_lens = qLens.data();
    b.seq_lens = seqLens.data();
    b.block_table = table.data();
    b.token_ids = ids.data();
    b.logit_rows = rows.data();
    b.num_logit_rows = static_cast<int32_t>(rows.size());
    b.slots = withSlots ? slots.data() : nullptr;
    b.pending = withPending ? pending.data() : nullptr;
    return b;
  }
};

// A step over `seqLens` / `qLens` with a block table of P pages a row whose entries
// encode (sequence, page), token ids 1000 + t, the last token of each sequence a logit row,
// slots in reverse order and pending pairs (i % 3, i).
Step makeStep(std::vector<int32_t> qLens, std::vector<int32_t> seqLens, int64_t P) {
  Step s;
  s.qLens = std::move(qLens);
  s.seqLens = std::move(seqLens);
  const int n = static_cast<int>(s.qLens.size());
  s.table.resize(n * P);
  for (int i = 0; i < n; ++i)
    for (int64_t p = 0; p < P; ++p)
      s.table[i * P + p] = i * 100 + static_cast<int32_t>(p);
  const int32_t tokens = std::accumulate(s.qLens.begin(), s.qLens.end(), 0);
  s.ids.resize(tokens);
  std::iota(s.ids.begin(), s.ids.end(), 1000);
  for (int i = 0, end = 0; i < n; ++i)
    s.rows.push_back((end += s.qLens[i]) - 1);
  for (int i = 0; i < n; ++i) {
    s.slots.push_back(n - 1 - i);
    s.pending.push_back(i % 3);
    s.pending.push_back(i);
  }
  return s;
}

struct Staged {
  kiln_rt_io_layout_t io;
  std::vector<char> host;
  size_t uploadBytes;
  const int32_t *at(uint64_t offset) const {
    return reinterpret_cast<const int32_t *>(host.data() + offset);
  }
};

Staged fill(const kiln_rt_batch_t &b, int64_t maxBatch, int64_t P, int64_t page,
            int32_t ringPages) {
  Staged s;
  s.io = kiln_rt_io_layout(maxBatch, 512, maxBatch * 5, P, ringPages > 0 ? 1 : 0);
  s.host.resize(s.io.bytes);
  for (size_t i = 0; i + 4 <= s.host.size(); i += 4)
    std::memcpy(s.host.data() + i, &kPoison, 4);
  std::vector<int32_t> cu(b.batch + 1, 0);
  for (int i = 0; i < b.batch; ++i)
    cu[i + 1] = cu[i] + b.q_lens[i];
  s.uploadBytes = fillStepStaging(s.host.data(), s.io, StagingShape{P, page, ringPages}, b,
                                  cu.data(), cu.back());
  return s;
}

void expectStaged(const Step &step, const kiln_rt_batch_t &b, const Staged &s, int64_t P,
                  int64_t page, int32_t ringPages) {
  const int n = b.batch;
  EXPECT_EQ(s.uploadBytes, s.io.block_table + n * P * sizeof(int32_t));
  int32_t token = 0;
  for (int i = 0; i < n; ++i) {
    SCOPED_TRACE("sequence " + std::to_string(i));
    EXPECT_EQ(s.at(s.io.cu_seqlens)[i], token);
    for (int32_t t = 0; t < step.qLens[i]; ++t, ++token) {
      EXPECT_EQ(s.at(s.io.token_ids)[token], 1000 + token);
      EXPECT_EQ(s.at(s.io.positions)[token], step.seqLens[i] - step.qLens[i] + t);
      EXPECT_EQ(s.at(s.io.token_batch)[token], i);
    }
    EXPECT_EQ(s.at(s.io.seq_lens)[i], step.seqLens[i]);
    const int32_t slot = b.slots ? step.slots[i] : i;
    EXPECT_EQ(s.at(s.io.slots)[i], slot);
    EXPECT_EQ(s.at(s.io.pending)[2 * i], b.pending ? step.pending[2 * i] : 0);
    EXPECT_EQ(s.at(s.io.pending)[2 * i + 1], b.pending ? step.pending[2 * i + 1] : 0);
    const int64_t used = (step.seqLens[i] + page - 1) / page;
    for (int64_t p = 0; p < used; ++p) {
      EXPECT_EQ(s.at(s.io.block_table)[i * P + p], step.table[i * P + p]) << "page " << p;
      if (ringPages > 0) {
        EXPECT_EQ(s.at(s.io.ring_table)[i * P + p], slot * ringPages + p % ringPages)
            << "ring page " << p;
      }
    }
  }
  EXPECT_EQ(s.at(s.io.cu_seqlens)[n], token);
  for (int r = 0; r < b.num_logit_rows; ++r)
    EXPECT_EQ(s.at(s.io.logit_rows)[r], step.rows[r]);
}

TEST(StepStaging, DecodeStepOfManySequences) {
  constexpr int64_t P = 16, page = 16, maxBatch = 256;
  std::vector<int32_t> seqLens(maxBatch);
  for (int i = 0; i < maxBatch; ++i)
    seqLens[i] = 1 + (i * 37) % 256;
  const Step step = makeStep(std::vector<int32_t>(maxBatch, 1), seqLens, P);
  for (bool slots : {false, true}) {
    SCOPED_TRACE(slots ? "slots" : "no slots");
    const auto b = step.batch(KILN_RT_PHASE_DECODE, slots, false);
    expectStaged(step, b, fill(b, maxBatch, P, page, 0), P, page, 0);
  }
}

TEST(StepStaging, VerifyStepWithPendingDrafts) {
  constexpr int64_t P = 8, page = 16;
  const Step step = makeStep({5, 5, 5}, {5, 40, 128}, P);
  const auto b = step.batch(KILN_RT_PHASE_DECODE, true, true);
  expectStaged(step, b, fill(b, 4, P, page, 0), P, page, 0);
}

TEST(StepStaging, MixedPromptsWithARing) {
  constexpr int64_t P = 32, page = 4;
  constexpr int32_t ring = 3;
  const Step step = makeStep({7, 1, 30}, {7, 100, 128}, P);
  const auto b = step.batch(KILN_RT_PHASE_EXTEND, true, false);
  expectStaged(step, b, fill(b, 4, P, page, ring), P, page, ring);
}

// Of long rows (more than 128 bytes: 64 pages here), entries past a sequence's pages in
// use are left alone: no kernel reads them, and copying them would dominate a large
// batch's fill. (Short rows go whole, in one copy of the table.)
TEST(StepStaging, BlockTableRowsPastTheUsedPagesAreLeftAlone) {
  constexpr int64_t P = 64, page = 16;
  const Step step = makeStep({1, 1}, {16, 17}, P);
  const auto b = step.batch(KILN_RT_PHASE_DECODE, false, false);
  const Staged s = fill(b, 2, P, page, 0);
  expectStaged(step, b, s, P, page, 0);
  EXPECT_EQ(s.at(s.io.block_table)[1], kPoison);     // sequence 0 uses page 0 only
  EXPECT_EQ(s.at(s.io.block_table)[P + 2], kPoison); // sequence 1 pages 0 and 1
}

} // namespace
