// Runtime checks that need no GPU: context creation, the step (kiln_rt_set_batch), every
// compiled-code entry point's validation on a validation-only ("dry") context (pointers
// inside the regions, sizes, kernels per phase, spec-dec modes), the sticky status, and
// the legacy bind-based MLA/SSM/conv rules.
#include "kiln/Kernels/Decode.h"
#include "kiln/Kernels/Graph.h"
#include "kiln/Kernels/Moe.h"
#include "kiln/Runtime/Runtime.h"

#include "GpuTest.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace {

std::string lastError() { return kiln_last_error(); }

// The plan of a small model: vocab 512, hidden 256, 4 heads x 64 (2 KV heads).
kiln_rt_config_t tinyConfig() {
  kiln_rt_config_t c{};
  c.vocab_size = 512;
  c.max_batch = 4;
  c.max_seq_len = 256;
  c.page_size = 16;
  c.kv_pages = 64;
  c.max_step_tokens = 256;
  c.max_logit_rows = 16;
  c.max_draft_len = 3;
  c.weight_bytes = 4 << 20;
  c.cache_bytes = 2 * (64ull * 2 * 16 * 2 * 64 * 2);
  c.activation_bytes = 4 << 20;
  c.workspace_bytes = kiln_rt_workspace_bytes(16, 4, 64);
  c.io_bytes = kiln_rt_io_bytes(4, 256, 16, 16, 0);
  return c;
}

const uint64_t kPool = 64ull * 2 * 16 * 2 * 64 * 2; // one layer's KV pool

struct Dry {
  kiln_rt_context_t *ctx = nullptr;
  explicit Dry(const kiln_rt_config_t &c = tinyConfig()) {
    EXPECT_EQ(kiln_rt_create_dry(&c, &ctx), KILN_OK) << lastError();
  }
  ~Dry() { kiln_rt_destroy(ctx); }
  char *w(uint64_t off = 0) { return static_cast<char *>(kiln_rt_weights(ctx)) + off; }
  char *a(uint64_t off = 0) { return static_cast<char *>(kiln_rt_activations(ctx)) + off; }
};

// A step: batch sequences, q tokens each (seq_lens = cached + q), pages 0.. in order.
struct Step {
  std::vector<int32_t> q, lens, table, slots, ids, rows;
  kiln_rt_batch_t b{};
  Step(int32_t phase, std::vector<int32_t> qLens, std::vector<int32_t> seqLens,
       int rowsPerSeq = 1) {
    q = qLens;
    lens = seqLens;
    int n = static_cast<int>(q.size());
    table.assign(static_cast<size_t>(n) * 16, 0);
    int page = 0;
    for (int i = 0; i < n; ++i)
      for (int p = 0; p < (lens[i] + 15) / 16 && p < 16; ++p)
        table[i * 16 + p] = page++;
    int tokens = 0;
    for (int i = 0; i < n; ++i) {
      for (int r = 0; r < rowsPerSeq; ++r)
        rows.push_back(tokens + q[i] - rowsPerSeq + r);
      tokens += q[i];
      slots.push_back(n - 1 - i);
    }
    ids.assign(tokens, 7);
    b.phase = phase;
    b.batch = n;
    b.q_lens = q.data();
    b.seq_lens = lens.data();
    b.block_table = table.data();
    b.slots = slots.data();
    b.token_ids = ids.data();
    b.logit_rows = rows.data();
    b.num_logit_rows = static_cast<int32_t>(rows.size());
  }
  int tokens() const { return static_cast<int>(ids.size()); }
};

// A step over the given host arrays, without slots or pending pairs.
kiln_rt_batch_t batchOf(int32_t phase, const std::vector<int32_t> &q,
                        const std::vector<int32_t> &lens, const std::vector<int32_t> &table,
                        const std::vector<int32_t> &ids, const std::vector<int32_t> &rows) {
  kiln_rt_batch_t b{};
  b.phase = phase;
  b.batch = static_cast<int32_t>(q.size());
  b.q_lens = q.data();
  b.seq_lens = lens.data();
  b.block_table = table.data();
  b.token_ids = ids.data();
  b.logit_rows = rows.data();
  b.num_logit_rows = static_cast<int32_t>(rows.size());
  return b;
}

TEST(RuntimeCpu, CreateWithoutDevice) {
  kiln_rt_context_t *ctx = nullptr;
  kiln_rt_config_t c = tinyConfig();
  kiln_status_t s = kiln_rt_create(0, &c, &ctx);
  if (kiln::test::hasCudaDevice()) {
    ASSERT_EQ(s, KILN_OK) << lastError();
    EXPECT_NE(kiln_rt_weights(ctx), nullptr);
    kiln_rt_destroy(ctx);
    return;
  }
  EXPECT_EQ(s, KILN_ERROR_NO_DEVICE);
  EXPECT_EQ(ctx, nullptr);
  EXPECT_NE(lastError().find("kiln_rt_create: no CUDA device"), std::string::npos) << lastError();
}

TEST(RuntimeCpu, ConfigValidation) {
  kiln_rt_context_t *ctx = nullptr;
  kiln_rt_config_t c = tinyConfig();
  c.io_bytes += 256;
  EXPECT_EQ(kiln_rt_create_dry(&c, &ctx), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("io_bytes"), std::string::npos) << lastError();
  c = tinyConfig();
  c.workspace_bytes = 1 << 20;
  EXPECT_EQ(kiln_rt_create_dry(&c, &ctx), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("KILN_GEMM_WORKSPACE_BYTES"), std::string::npos) << lastError();
  c = tinyConfig();
  c.max_batch = 0;
  EXPECT_EQ(kiln_rt_create_dry(&c, &ctx), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("max_batch 0"), std::string::npos) << lastError();
  c = tinyConfig();
  c.kv_pages = -1;
  EXPECT_EQ(kiln_rt_create_dry(&c, &ctx), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kv_pages -1 outside [0, 2^31)"), std::string::npos) << lastError();
  // No pages: a model without attention layers; its steps' block tables are not read.
  c.kv_pages = 0;
  ASSERT_EQ(kiln_rt_create_dry(&c, &ctx), KILN_OK) << lastError();
  {
    Step prefill(KILN_RT_PHASE_PREFILL, {5}, {5});
    prefill.table.assign(prefill.table.size(), -1);
    EXPECT_EQ(kiln_rt_set_batch(ctx, &prefill.b), KILN_OK) << lastError();
  }
  kiln_rt_destroy(ctx);
  ctx = nullptr;
  c = tinyConfig();
  c.kv_ring_window = -1;
  EXPECT_EQ(kiln_rt_create_dry(&c, &ctx), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kv_ring_window -1 outside [0, 2^31)"), std::string::npos)
      << lastError();
  // A ring window adds the ring table to the io buffer: io_bytes without it is refused.
  c = tinyConfig();
  c.kv_ring_window = 32;
  EXPECT_EQ(kiln_rt_create_dry(&c, &ctx), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("ring tables 1"), std::string::npos) << lastError();
  c.io_bytes = kiln_rt_io_bytes(4, 256, 16, 16, 1);
  ASSERT_EQ(kiln_rt_create_dry(&c, &ctx), KILN_OK) << lastError();
  kiln_rt_destroy(ctx);
  ctx = nullptr;
  EXPECT_EQ(kiln_rt_create_dry(nullptr, &ctx), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(ctx, nullptr);
}

TEST(RuntimeCpu, LayoutFormulas) {
  // Every array rounded up to 256 bytes; the block table last (a step uploads up to its
  // used rows).
  kiln_rt_io_layout_t l = kiln_rt_io_layout(4, 256, 16, 16, 0);
  EXPECT_EQ(l.token_ids, 0u);
  EXPECT_EQ(l.positions, 1024u);
  EXPECT_EQ(l.token_batch, 2048u);
  EXPECT_EQ(l.logit_rows, 3072u);
  EXPECT_EQ(l.pending + 256u, l.block_table); // {pending, buffer} of 4 sequences
  EXPECT_EQ(l.block_table + 256u, l.bytes);
  EXPECT_EQ(l.bytes, 3072u + 256 * 6);
  EXPECT_EQ(kiln_rt_io_bytes(4, 256, 16, 16, 0), l.bytes);
  EXPECT_EQ(l.ring_table, l.block_table); // no ring table without a ring window
  // With a KV ring window the ring pools' table (as big as the block table) comes
  // before the block table, which stays last.
  kiln_rt_io_layout_t ring = kiln_rt_io_layout(4, 256, 16, 16, 1);
  EXPECT_EQ(ring.ring_table, l.block_table);
  EXPECT_EQ(ring.block_table, ring.ring_table + 256u);
  EXPECT_EQ(ring.bytes, l.bytes + 256u);
  // Ring pages a slot: ceil((window + max_step_tokens - 1) / page) + 1, capped at a
  // sequence's pages.
  EXPECT_EQ(kiln_rt_ring_pages(128, 64, 256, 4096), 7);
  EXPECT_EQ(kiln_rt_ring_pages(32, 64, 64, 512), 3);
  EXPECT_EQ(kiln_rt_ring_pages(64, 64, 1, 4096), 2);  // one token: the window and a page
  EXPECT_EQ(kiln_rt_ring_pages(480, 64, 256, 512), 8); // capped
  EXPECT_EQ(kiln_rt_ring_pages(0, 64, 256, 512), 0);   // no window, no ring
  EXPECT_EQ(kiln_rt_max_pages_per_seq(257, 16), 17);
  // The split-KV region: 16 splits x every decode row (tokens x heads) x (d + 1) x 4 of
  // partials P, then the fused combine's counters: align256(P + P / 1023 + 32).
  // P = 133120: 133120 + 130 + 32 -> 133376.
  EXPECT_EQ(kiln_rt_workspace_bytes(8, 4, 64), KILN_GEMM_WORKSPACE_BYTES + 133376u);
  // P = 16640000: + 16265 + 32 -> 16656384.
  EXPECT_EQ(kiln_rt_workspace_bytes(1000, 4, 64), KILN_GEMM_WORKSPACE_BYTES + 16656384u);
  // Counters: floor(region / 1024) rounded up to 16 bytes, none in a region under 1 KiB.
  EXPECT_EQ(kiln_rt_split_counter_bytes(133376), 144u);
  EXPECT_EQ(kiln_rt_split_counter_bytes(16656384), 16272u);
  EXPECT_EQ(kiln_rt_split_counter_bytes(768), 0u);
  EXPECT_EQ(kiln_rt_split_counter_bytes(0), 0u);
  // Whatever the shape (or a padded, larger region): one counter a query row of the
  // largest step, and every launch's partials before them, 16-byte aligned.
  for (int64_t tokens : {1, 3, 8, 17, 64, 1000, 65536})
    for (int64_t heads : {1, 3, 8, 32, 128})
      for (int64_t dim : {64, 128, 256})
        for (uint64_t padding : {0u, 256u, 4096u, 1u << 20}) {
          const uint64_t region = kiln_rt_split_workspace_bytes(tokens, heads, dim) + padding;
          const uint64_t counters = kiln_rt_split_counter_bytes(region);
          const uint64_t partials = 16ull * tokens * heads * (dim + 1) * 4;
          EXPECT_GE(counters, 4ull * tokens * heads) << tokens << " " << heads << " " << dim;
          EXPECT_GE((region - counters) / 16 * 16, partials)
              << tokens << " " << heads << " " << dim;
        }
  // Split chunks: multiples of 64, at least 256 keys, at most 16 per max_seq_len.
  EXPECT_EQ(kiln_rt_decode_split_keys(1), 256);
  EXPECT_EQ(kiln_rt_decode_split_keys(4096), 256);
  EXPECT_EQ(kiln_rt_decode_split_keys(4097), 320);
  EXPECT_EQ(kiln_rt_decode_split_keys(131072), 8192);
  for (int64_t len : {1, 100, 4096, 4097, 100000, 131072})
    EXPECT_LE((len + kiln_rt_decode_split_keys(len) - 1) / kiln_rt_decode_split_keys(len),
              KILN_RT_DECODE_SPLITS);
  EXPECT_STREQ(kiln_rt_kernel_name(KILN_RT_KERNEL_GQA_DECODE), "gqa_decode");
  EXPECT_STREQ(kiln_rt_phase_name(KILN_RT_PHASE_EXTEND), "extend");
  EXPECT_STREQ(kiln_rt_rope_name(KILN_RT_ROPE_YARN), "yarn");
  EXPECT_STREQ(kiln_rt_input_name(KILN_RT_INPUT_LOGIT_ROWS), "logit_rows");
  EXPECT_STREQ(kiln_rt_kernel_name(999), "unknown kernel");
}

// The GDN scratch: five regions, each 256-byte aligned, disjoint and in order, inside
// tokens x bytes_per_token for any tokens and any 16-byte aligned start.
TEST(RuntimeCpu, GdnScratchLayout) {
  EXPECT_EQ(kiln_rt_gdn_scratch_bytes_per_token(16, 32, 128, 128),
            2 * (2 * 16 * 128 + 32 * 128) + 4 * 2 * 32 + 5 * 256);
  for (int64_t tokens : {1, 2, 3, 7, 64, 1000})
    for (uint64_t start = 1 << 20; start < (1 << 20) + 256; start += 16) {
      const kiln_rt_gdn_scratch_t l = kiln_rt_gdn_scratch_layout(start, tokens, 2, 4, 64, 64);
      const uint64_t keys = tokens * 2 * 2 * 64, values = tokens * 2 * 4 * 64,
                     gates = tokens * 4 * 4;
      for (uint64_t region : {l.qn, l.kn, l.v, l.g, l.beta})
        EXPECT_EQ((start + region) % 256, 0u) << tokens << " tokens from " << start;
      EXPECT_GE(l.kn, l.qn + keys);
      EXPECT_GE(l.v, l.kn + keys);
      EXPECT_GE(l.g, l.v + values);
      EXPECT_GE(l.beta, l.g + gates);
      EXPECT_EQ(l.end, l.beta + gates);
      EXPECT_LE(l.end, uint64_t(tokens * kiln_rt_gdn_scratch_bytes_per_token(2, 4, 64, 64)))
          << tokens << " tokens from " << start;
    }
}

TEST(RuntimeCpu, NullContext) {
  EXPECT_EQ(kiln_rt_linear(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 1, 1),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kiln_rt_linear: context is null"), std::string::npos)
      << lastError();
  EXPECT_EQ(kiln_rt_attention(nullptr, 1, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 4, 2,
                              64, 16, 0, KILN_RT_KERNEL_GQA_DECODE, KILN_RT_KERNEL_PREFILL_FMHA, 0,
                              0.f, KILN_RT_DTYPE_BF16),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("layer 1: context is null"), std::string::npos) << lastError();
  EXPECT_EQ(kiln_rt_set_batch(nullptr, nullptr), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kiln_rt_status(nullptr), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kiln_rt_input(nullptr, 0), nullptr);
  EXPECT_EQ(kiln_rt_synchronize(nullptr), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kiln_rt_bind(nullptr, 0, "q", nullptr), KILN_ERROR_INVALID_ARGUMENT);
  kiln_rt_destroy(nullptr);
}

TEST(RuntimeCpu, SetBatchValidation) {
  Dry d;
  auto expectError = [&](Step &s, const char *what) {
    EXPECT_EQ(kiln_rt_set_batch(d.ctx, &s.b), KILN_ERROR_INVALID_ARGUMENT) << what;
    EXPECT_NE(lastError().find(what), std::string::npos) << lastError();
    EXPECT_EQ(kiln_rt_status(d.ctx), KILN_ERROR_INVALID_ARGUMENT);
  };
  Step ok(KILN_RT_PHASE_DECODE, {1, 1}, {10, 20});
  EXPECT_EQ(kiln_rt_set_batch(d.ctx, &ok.b), KILN_OK) << lastError();
  EXPECT_EQ(kiln_rt_step_tokens(d.ctx), 2);
  Step big(KILN_RT_PHASE_DECODE, {1, 1, 1, 1, 1}, {1, 1, 1, 1, 1});
  expectError(big, "batch 5 outside [1, max_batch 4]");
  Step ragged(KILN_RT_PHASE_DECODE, {2, 1}, {10, 20});
  expectError(ragged, "decode steps are uniform");
  Step drafts(KILN_RT_PHASE_DECODE, {5}, {10});
  expectError(drafts, "q_len 5 > 1 + max_draft_len 3");
  Step prefill(KILN_RT_PHASE_PREFILL, {5}, {9});
  expectError(prefill, "seq_lens 9 != q_lens 5");
  Step tooLong(KILN_RT_PHASE_EXTEND, {5}, {300});
  expectError(tooLong, "outside [q_lens 5, max_seq_len 256]");
  Step tooMany(KILN_RT_PHASE_PREFILL, {200, 100}, {200, 100});
  expectError(tooMany, "300 tokens > max_step_tokens 256");
  Step badRow(KILN_RT_PHASE_DECODE, {1}, {10});
  badRow.rows[0] = 1;
  expectError(badRow, "logit_rows[0] = 1 outside the step's 1 tokens");
  Step badPage(KILN_RT_PHASE_DECODE, {1}, {40});
  badPage.table[2] = 64;
  expectError(badPage, "block_table[0][2] = 64 outside [0, kv_pages 64)");
  Step badId(KILN_RT_PHASE_DECODE, {1}, {10});
  badId.ids[0] = 512;
  expectError(badId, "token_ids[0] = 512 outside the vocabulary");
  // Negative values fail the unsigned range checks too.
  badId.ids[0] = -1;
  expectError(badId, "token_ids[0] = -1 outside the vocabulary");
  badRow.rows[0] = -2;
  expectError(badRow, "logit_rows[0] = -2 outside the step's 1 tokens");
  Step noTokens(KILN_RT_PHASE_EXTEND, {1, 0}, {10, 10});
  expectError(noTokens, "q_lens[1] = 0 < 1");
  Step shortSeq(KILN_RT_PHASE_EXTEND, {1, 4}, {10, 3});
  expectError(shortSeq, "seq_lens[1] = 3 outside [q_lens 4, max_seq_len 256]");
  Step farSlot(KILN_RT_PHASE_DECODE, {1, 1}, {10, 10});
  farSlot.slots[1] = 4;
  expectError(farSlot, "slots[1] = 4 outside [0, 4)");
  Step sameSlot(KILN_RT_PHASE_DECODE, {1, 1}, {10, 10});
  sameSlot.slots[1] = sameSlot.slots[0];
  expectError(sameSlot, "share slot");
  Step noRows(KILN_RT_PHASE_DECODE, {1}, {10});
  noRows.b.num_logit_rows = 0;
  expectError(noRows, "num_logit_rows 0");
  // A failed set_batch fails the step: compiled-code calls return its message.
  EXPECT_EQ(kiln_rt_add(d.ctx, d.a(), d.a(), d.a(), 8), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("num_logit_rows 0"), std::string::npos) << lastError();
  // The next good step clears it.
  EXPECT_EQ(kiln_rt_set_batch(d.ctx, &ok.b), KILN_OK);
  EXPECT_EQ(kiln_rt_status(d.ctx), KILN_OK);
}

// A step's pages in use are checked and nothing past them: on rows of 16 pages (scanned
// whole, the unused entries masked) and of 64 (the pages in use only).
TEST(RuntimeCpu, SetBatchChecksPagesInUseOnly) {
  for (int64_t maxSeqLen : {256, 1024}) {
    SCOPED_TRACE("max_seq_len " + std::to_string(maxSeqLen));
    kiln_rt_config_t c = tinyConfig();
    c.max_seq_len = maxSeqLen;
    const int64_t P = maxSeqLen / 16;
    c.io_bytes = kiln_rt_io_bytes(4, 256, 16, P, 0);
    Dry d(c);
    std::vector<int32_t> q = {1, 1}, lens = {40, 17}, ids = {7, 7}, rows = {0, 1};
    std::vector<int32_t> table(2 * P, -3); // entries past the pages in use: anything
    table[0] = 0, table[1] = 1, table[2] = 2, table[P] = 3, table[P + 1] = 4;
    const kiln_rt_batch_t b = batchOf(KILN_RT_PHASE_DECODE, q, lens, table, ids, rows);
    EXPECT_EQ(kiln_rt_set_batch(d.ctx, &b), KILN_OK) << lastError();
    for (int32_t bad : {-1, 64}) {
      table[P + 1] = bad;
      EXPECT_EQ(kiln_rt_set_batch(d.ctx, &b), KILN_ERROR_INVALID_ARGUMENT);
      EXPECT_NE(lastError().find("block_table[1][1] = " + std::to_string(bad) +
                                 " outside [0, kv_pages 64)"),
                std::string::npos)
          << lastError();
    }
    table[P + 1] = 4;
    lens[1] = 33; // a third page for sequence 1, whose entry is -3
    EXPECT_EQ(kiln_rt_set_batch(d.ctx, &b), KILN_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(lastError().find("block_table[1][2] = -3"), std::string::npos) << lastError();
  }
}

// Pending pairs ride in the step: accepted tokens within one speculative step (none for
// a new prompt), a replay buffer of the two.
TEST(RuntimeCpu, SetBatchPendingPairs) {
  Dry d;
  Step decode(KILN_RT_PHASE_DECODE, {2, 2}, {10, 20});
  std::vector<int32_t> pairs = {2, 1, 0, 0};
  decode.b.pending = pairs.data();
  EXPECT_EQ(kiln_rt_set_batch(d.ctx, &decode.b), KILN_OK) << lastError();
  auto expectError = [&](Step &s, const char *what) {
    EXPECT_EQ(kiln_rt_set_batch(d.ctx, &s.b), KILN_ERROR_INVALID_ARGUMENT) << what;
    EXPECT_NE(lastError().find(what), std::string::npos) << lastError();
  };
  pairs = {5, 0, 0, 0};
  expectError(decode, "pending[0] = {5, 0}: accepted tokens must be in [0, 4]");
  pairs = {1, 0, 0, 2};
  expectError(decode, "pending[1] = {0, 2}");
  pairs = {-1, 0, 0, 0};
  expectError(decode, "pending[0] = {-1, 0}");
  Step prefill(KILN_RT_PHASE_PREFILL, {5}, {5});
  std::vector<int32_t> one = {1, 0};
  prefill.b.pending = one.data();
  expectError(prefill, "must be in [0, 0] (a prefill starts a sequence)");
}

// A replay-mode Mamba2 layer on a dry context: its three buffers are claimed as the
// layer's resources, and the call's mode, kernels and offsets are checked.
TEST(RuntimeCpu, MambaReplayValidation) {
  kiln_rt_config_t config = tinyConfig();
  config.cache_bytes = 4 << 20;
  Dry d(config);
  // 8 heads x 64, state 64, 2 groups; x [tokens, 512], dt [tokens, 8], B = C [tokens, 128].
  const uint64_t state = 0, stateBytes = 4ull * 8 * 64 * 64 * 4;
  const uint64_t rx = stateBytes, rxBytes = 4ull * 2 * 4 * 8 * 64 * 2;
  const uint64_t rb = rx + rxBytes, rbBytes = 4ull * 2 * 4 * 2 * 64 * 2;
  const uint64_t rdt = rb + rbBytes;
  auto ssm = [&](int64_t interOffset, int64_t xOff, int64_t bOff, int64_t dtOff,
                 int32_t decodeKernel, int64_t tokens) {
    return kiln_rt_mamba_ssm(d.ctx, 3, state, interOffset, xOff, bOff, dtOff, d.a(),
                             d.a(1 << 16), d.a(2 << 16), d.a(3 << 16), d.w(), d.w(256),
                             d.w(512), d.a(4 << 16), tokens, 8, 64, 64, 2, 512, 8, 128, 0.f,
                             0.f, KILN_DTYPE_F32, decodeKernel, KILN_RT_KERNEL_SSM_CHUNK_SCAN,
                             0);
  };
  Step spec(KILN_RT_PHASE_DECODE, {3, 3}, {10, 20});
  std::vector<int32_t> pairs = {2, 1, 0, 0};
  spec.b.pending = pairs.data();
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &spec.b), KILN_OK) << lastError();
  EXPECT_EQ(ssm(-1, rx, rb, rdt, KILN_RT_KERNEL_SSM_UPDATE_REPLAY, 6), KILN_OK) << lastError();
  uint64_t offset = 0, bytes = 0;
  EXPECT_EQ(kiln_rt_resource(d.ctx, 3, "replay_b", &offset, &bytes), KILN_OK) << lastError();
  EXPECT_EQ(offset, rb);
  EXPECT_EQ(bytes, rbBytes);
  // One token a sequence commits through the same kernel; so does a continuing chunk
  // (after folding the pending tokens).
  Step one(KILN_RT_PHASE_DECODE, {1, 1}, {10, 20});
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &one.b), KILN_OK) << lastError();
  EXPECT_EQ(ssm(-1, rx, rb, rdt, KILN_RT_KERNEL_SSM_UPDATE_REPLAY, 2), KILN_OK) << lastError();
  Step extend(KILN_RT_PHASE_EXTEND, {4, 2}, {14, 22});
  extend.b.pending = pairs.data();
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &extend.b), KILN_OK) << lastError();
  EXPECT_EQ(ssm(-1, rx, rb, rdt, KILN_RT_KERNEL_SSM_UPDATE_REPLAY, 6), KILN_OK) << lastError();

  struct Case {
    const char *what;
    std::function<int32_t()> call;
  };
  std::vector<Case> cases = {
      {"replay mode needs all three buffers and no rewind intermediates",
       [&] { return ssm(-1, rx, -1, rdt, KILN_RT_KERNEL_SSM_UPDATE_REPLAY, 6); }},
      {"replay mode needs all three buffers and no rewind intermediates",
       [&] { return ssm(rdt + 4096, rx, rb, rdt, KILN_RT_KERNEL_SSM_UPDATE_REPLAY, 6); }},
      {"decode_kernel 6 (ssm_update_spec) cannot run a replay-mode layer",
       [&] { return ssm(-1, rx, rb, rdt, KILN_RT_KERNEL_SSM_UPDATE_SPEC, 6); }},
      {"a decode step of 3 tokens a sequence needs ssm_update_spec",
       [&] { return ssm(rdt + 4096, -1, -1, -1, KILN_RT_KERNEL_SSM_UPDATE_REPLAY, 6); }},
      {"replay_x [4194304, 4227072) does not fit in the caches",
       [&] { return ssm(-1, 4 << 20, rb, rdt, KILN_RT_KERNEL_SSM_UPDATE_REPLAY, 6); }},
      {"replay_dt [0, 1024) overlaps layer 3's ssm_state",
       [&] { return ssm(-1, rx, rb, 0, KILN_RT_KERNEL_SSM_UPDATE_REPLAY, 6); }},
  };
  for (const Case &c : cases) {
    ASSERT_EQ(kiln_rt_set_batch(d.ctx, &spec.b), KILN_OK) << lastError();
    SCOPED_TRACE(c.what);
    EXPECT_EQ(c.call(), KILN_ERROR_INVALID_ARGUMENT) << c.what;
    EXPECT_NE(lastError().find(c.what), std::string::npos) << lastError();
  }
}

// A Gated DeltaNet layer (kiln_rt_gated_delta_net) on a dry context: 2 key heads and 4
// value heads of 64, q, k and v column slices of a projection of 1024 columns, a and b of
// one of 8. Every phase validates and records the state (and the intermediates), and every
// argument, kernel and dtype error names what is wrong.
struct GdnCall {
  int32_t layer = 5;
  uint64_t state = 0;
  int64_t inter = -1;
  int64_t replayK = -1, replayV = -1, replayGb = -1; // replay mode: all three
  const void *q, *k, *v, *a, *b, *aLog, *dtBias;
  void *scratch, *out;
  int64_t tokens;
  int64_t kHeads = 2, vHeads = 4, kDim = 64, vDim = 64;
  int64_t qStride = 1024, kStride = 1024, vStride = 1024, aStride = 8, bStride = 8;
  int32_t stateDtype = KILN_DTYPE_F32;
  int32_t decodeKernel = KILN_RT_KERNEL_GDN_UPDATE;
  int32_t prefillKernel = KILN_RT_KERNEL_GDN_CHUNK_PREFILL;

  GdnCall(Dry &d, int64_t tokens)
      : q(d.a()), k(d.a(256)), v(d.a(512)), a(d.a(1 << 16)), b(d.a((1 << 16) + 8)), aLog(d.w()),
        dtBias(d.w(64)), scratch(d.a(1 << 20)), out(d.a(2 << 20)), tokens(tokens) {}
  int32_t operator()(kiln_rt_context_t *ctx) const {
    return kiln_rt_gated_delta_net(ctx, layer, state, inter, replayK, replayV, replayGb, q, k, v, a,
                                   b, aLog, dtBias, scratch, out, tokens, kHeads, vHeads, kDim,
                                   vDim, qStride, kStride, vStride, aStride, bStride, stateDtype,
                                   decodeKernel, prefillKernel, 0);
  }
};

TEST(RuntimeCpu, GatedDeltaNetValidation) {
  kiln_rt_config_t config = tinyConfig();
  config.cache_bytes = 4 << 20;
  Dry d(config);
  const uint64_t stateBytes = 4ull * 4 * 64 * 64 * 4; // max_batch slots of [4, 64, 64] f32
  const uint64_t interBytes = stateBytes * 4;         // 1 + max_draft_len 3 a slot
  uint64_t offset = 0, bytes = 0;

  // One token a sequence: in place, the state recorded.
  Step decode(KILN_RT_PHASE_DECODE, {1, 1}, {10, 20});
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &decode.b), KILN_OK) << lastError();
  EXPECT_EQ(GdnCall(d, 2)(d.ctx), KILN_OK) << lastError();
  EXPECT_EQ(kiln_rt_resource(d.ctx, 5, "gdn_state", &offset, &bytes), KILN_OK) << lastError();
  EXPECT_EQ(offset, 0u);
  EXPECT_EQ(bytes, stateBytes);
  // 1 + drafts: the spec kernel into the intermediates, which are recorded too; a model
  // compiled with speculation also runs one token a sequence (in place).
  Step spec(KILN_RT_PHASE_DECODE, {3, 3}, {10, 20});
  std::vector<int32_t> pairs = {2, 1, 0, 0};
  spec.b.pending = pairs.data();
  GdnCall speculative(d, 6);
  speculative.inter = stateBytes;
  speculative.decodeKernel = KILN_RT_KERNEL_GDN_UPDATE_SPEC;
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &spec.b), KILN_OK) << lastError();
  EXPECT_EQ(speculative(d.ctx), KILN_OK) << lastError();
  EXPECT_EQ(kiln_rt_resource(d.ctx, 5, "intermediate_gdn_state", &offset, &bytes), KILN_OK)
      << lastError();
  EXPECT_EQ(offset, stateBytes);
  EXPECT_EQ(bytes, interBytes);
  GdnCall oneWithSpec = speculative;
  oneWithSpec.tokens = 2;
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &decode.b), KILN_OK) << lastError();
  EXPECT_EQ(oneWithSpec(d.ctx), KILN_OK) << lastError();
  // Prompts and their continuations through the chunked prefill.
  Step prefill(KILN_RT_PHASE_PREFILL, {5, 2}, {5, 2});
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &prefill.b), KILN_OK) << lastError();
  EXPECT_EQ(GdnCall(d, 7)(d.ctx), KILN_OK) << lastError();
  Step extend(KILN_RT_PHASE_EXTEND, {4, 2}, {14, 22});
  extend.b.pending = pairs.data();
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &extend.b), KILN_OK) << lastError();
  EXPECT_EQ(speculative(d.ctx), KILN_OK) << lastError();

  struct Case {
    const char *what;
    Step *step;
    kiln_status_t status;
    std::function<void(GdnCall &)> change;
  };
  const int64_t activations = 4 << 20;
  std::vector<Case> cases = {
      {"kiln_rt_gated_delta_net (gdn_chunk_prefill): layer 5: decode_kernel 19 "
       "(gdn_chunk_prefill) cannot run a decode step (gdn_update or gdn_update_spec)",
       &decode, KILN_ERROR_INVALID_ARGUMENT,
       [](GdnCall &g) { g.decodeKernel = KILN_RT_KERNEL_GDN_CHUNK_PREFILL; }},
      {"decode_kernel 5 (ssm_update) cannot run a decode step", &decode,
       KILN_ERROR_INVALID_ARGUMENT, [](GdnCall &g) { g.decodeKernel = KILN_RT_KERNEL_SSM_UPDATE; }},
      {"prefill_kernel 17 (gdn_update) cannot run a prefill step (gdn_chunk_prefill)", &prefill,
       KILN_ERROR_INVALID_ARGUMENT,
       [](GdnCall &g) {
         g.tokens = 7;
         g.prefillKernel = KILN_RT_KERNEL_GDN_UPDATE;
       }},
      {"prefill_kernel 13 (ssm_chunk_scan) cannot run a extend step (gdn_chunk_prefill)", &extend,
       KILN_ERROR_INVALID_ARGUMENT,
       [](GdnCall &g) { g.prefillKernel = KILN_RT_KERNEL_SSM_CHUNK_SCAN; }},
      {"a decode step of 3 tokens a sequence needs gdn_update_spec", &spec,
       KILN_ERROR_INVALID_ARGUMENT, [](GdnCall &) {}},
      {"gdn_update_spec needs the layer's rewind intermediates (offset < 0)", &spec,
       KILN_ERROR_INVALID_ARGUMENT,
       [](GdnCall &g) {
         g.inter = -1;
         g.decodeKernel = KILN_RT_KERNEL_GDN_UPDATE_SPEC;
       }},
      {"state_dtype 0 (bf16) unsupported (f32: the GDN kernels keep fp32 states)", &decode,
       KILN_ERROR_UNSUPPORTED, [](GdnCall &g) { g.stateDtype = KILN_DTYPE_BF16; }},
      {"k_dim 96 unsupported (64 or 128)", &decode, KILN_ERROR_UNSUPPORTED,
       [](GdnCall &g) { g.kDim = 96; }},
      {"v_dim 256 unsupported (64 or 128)", &decode, KILN_ERROR_UNSUPPORTED,
       [](GdnCall &g) { g.vDim = 256; }},
      {"v_heads 3 must be a multiple of k_heads 2", &decode, KILN_ERROR_INVALID_ARGUMENT,
       [](GdnCall &g) { g.vHeads = 3; }},
      {"k_heads 0 outside [1, 2^40]", &decode, KILN_ERROR_INVALID_ARGUMENT,
       [](GdnCall &g) { g.kHeads = 0; }},
      {"tokens 3 != the step's 2", &decode, KILN_ERROR_INVALID_ARGUMENT,
       [](GdnCall &g) { g.tokens = 3; }},
      {"q row stride 100 outside [128, 2^40]", &decode, KILN_ERROR_INVALID_ARGUMENT,
       [](GdnCall &g) { g.qStride = 100; }},
      {"v row stride 255 outside [256, 2^40]", &decode, KILN_ERROR_INVALID_ARGUMENT,
       [](GdnCall &g) { g.vStride = 255; }},
      {"b row stride 3 outside [4, 2^40]", &decode, KILN_ERROR_INVALID_ARGUMENT,
       [](GdnCall &g) { g.bStride = 3; }},
      {"a_log is null", &decode, KILN_ERROR_INVALID_ARGUMENT, [](GdnCall &g) { g.aLog = nullptr; }},
      {"dt_bias is null", &decode, KILN_ERROR_INVALID_ARGUMENT,
       [](GdnCall &g) { g.dtBias = nullptr; }},
      {"k is null", &decode, KILN_ERROR_INVALID_ARGUMENT, [](GdnCall &g) { g.k = nullptr; }},
      {"scratch [4193280, 4197952) of the activations region runs past its end", &decode,
       KILN_ERROR_INVALID_ARGUMENT, [&](GdnCall &g) { g.scratch = d.a(activations - 1024); }},
      {"out (offset 0 of the weights region) is an output", &decode, KILN_ERROR_INVALID_ARGUMENT,
       [&](GdnCall &g) { g.out = d.w(); }},
      {"is not 16-byte aligned", &decode, KILN_ERROR_INVALID_ARGUMENT,
       [&](GdnCall &g) { g.out = d.a((2 << 20) + 8); }},
      {"gdn_state offset 8 is not 16-byte aligned", &decode, KILN_ERROR_INVALID_ARGUMENT,
       [](GdnCall &g) { g.state = 8; }},
      {"gdn_state [4194304, 4456448) does not fit in the caches", &decode,
       KILN_ERROR_INVALID_ARGUMENT, [](GdnCall &g) { g.state = 4 << 20; }},
      {"gdn_state [0, 262144) overlaps layer 5's gdn_state", &decode, KILN_ERROR_INVALID_ARGUMENT,
       [](GdnCall &g) { g.layer = 6; }},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.what);
    ASSERT_EQ(kiln_rt_set_batch(d.ctx, &c.step->b), KILN_OK) << lastError();
    GdnCall call(d, c.step->tokens());
    c.change(call);
    EXPECT_EQ(call(d.ctx), c.status);
    EXPECT_NE(lastError().find(c.what), std::string::npos) << lastError();
    // Sticky: the step's next call returns the same failure.
    EXPECT_EQ(kiln_rt_status(d.ctx), c.status);
  }
  EXPECT_EQ(GdnCall(d, 1)(nullptr), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kiln_rt_gated_delta_net: layer 5: context is null"),
            std::string::npos)
      << lastError();
}

// A replay-mode Gated DeltaNet layer on a dry context: every phase validates, the three
// buffers are claimed as the layer's resources at their planned sizes, and the call's
// mode, kernels and offsets are checked.
TEST(RuntimeCpu, GatedDeltaNetReplayValidation) {
  kiln_rt_config_t config = tinyConfig();
  config.cache_bytes = 4 << 20;
  Dry d(config);
  // max_batch 4 slots, 2 steps of 1 + max_draft_len 3 tokens a slot; GdnCall's 2 key and 4
  // value heads of 64.
  const uint64_t stateBytes = 4ull * 4 * 64 * 64 * 4;
  const uint64_t rk = stateBytes, rkBytes = 4ull * 2 * 4 * 2 * 64 * 2;
  const uint64_t rv = rk + rkBytes, rvBytes = 4ull * 2 * 4 * 4 * 64 * 2;
  const uint64_t rgb = rv + rvBytes, rgbBytes = 4ull * 2 * 4 * 4 * 2 * 4;
  auto replayCall = [&](int64_t tokens) {
    GdnCall g(d, tokens);
    g.replayK = rk;
    g.replayV = rv;
    g.replayGb = rgb;
    g.decodeKernel = KILN_RT_KERNEL_GDN_UPDATE_REPLAY;
    return g;
  };
  Step spec(KILN_RT_PHASE_DECODE, {3, 3}, {10, 20});
  std::vector<int32_t> pairs = {2, 1, 0, 0};
  spec.b.pending = pairs.data();
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &spec.b), KILN_OK) << lastError();
  EXPECT_EQ(replayCall(6)(d.ctx), KILN_OK) << lastError();
  const struct {
    const char *kind;
    uint64_t offset, bytes;
  } resources[] = {{"gdn_state", 0, stateBytes},
                   {"gdn_replay_k", rk, rkBytes},
                   {"gdn_replay_v", rv, rvBytes},
                   {"gdn_replay_gb", rgb, rgbBytes}};
  for (const auto &r : resources) {
    uint64_t offset = 0, bytes = 0;
    EXPECT_EQ(kiln_rt_resource(d.ctx, 5, r.kind, &offset, &bytes), KILN_OK) << lastError();
    EXPECT_EQ(offset, r.offset) << r.kind;
    EXPECT_EQ(bytes, r.bytes) << r.kind;
  }
  // One token a sequence commits through the same kernel; a continuing chunk folds the
  // pending tokens first; a prompt runs as in rewind mode.
  Step one(KILN_RT_PHASE_DECODE, {1, 1}, {10, 20});
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &one.b), KILN_OK) << lastError();
  EXPECT_EQ(replayCall(2)(d.ctx), KILN_OK) << lastError();
  Step extend(KILN_RT_PHASE_EXTEND, {4, 2}, {14, 22});
  extend.b.pending = pairs.data();
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &extend.b), KILN_OK) << lastError();
  EXPECT_EQ(replayCall(6)(d.ctx), KILN_OK) << lastError();
  Step prefill(KILN_RT_PHASE_PREFILL, {5, 2}, {5, 2});
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &prefill.b), KILN_OK) << lastError();
  EXPECT_EQ(replayCall(7)(d.ctx), KILN_OK) << lastError();

  struct Case {
    const char *what;
    Step *step;
    std::function<void(GdnCall &)> change;
  };
  const std::vector<Case> cases = {
      {"replay offsets {k 262144, v -1, gb 286720} with intermediate_offset -1: replay mode "
       "needs all three buffers and no rewind intermediates",
       &spec, [](GdnCall &g) { g.replayV = -1; }},
      {"replay mode needs all three buffers and no rewind intermediates", &spec,
       [&](GdnCall &g) { g.inter = rgb + rgbBytes; }},
      {"replay mode needs all three buffers and no rewind intermediates", &prefill,
       [](GdnCall &g) { g.replayK = -1; }},
      {"decode_kernel 18 (gdn_update_spec) cannot run a replay-mode layer (gdn_update_replay)",
       &spec, [](GdnCall &g) { g.decodeKernel = KILN_RT_KERNEL_GDN_UPDATE_SPEC; }},
      {"decode_kernel 17 (gdn_update) cannot run a replay-mode layer", &one,
       [](GdnCall &g) { g.decodeKernel = KILN_RT_KERNEL_GDN_UPDATE; }},
      {"a decode step of 3 tokens a sequence needs gdn_update_spec", &spec,
       [](GdnCall &g) { g.replayK = g.replayV = g.replayGb = -1; }},
      {"gdn_replay_k [4194304, 4202496) does not fit in the caches", &spec,
       [](GdnCall &g) { g.replayK = 4 << 20; }},
      {"gdn_replay_gb offset 286724 is not 16-byte aligned", &spec,
       [](GdnCall &g) { g.replayGb += 4; }},
      {"gdn_replay_v [0, 16384) overlaps layer 5's gdn_state", &spec,
       [](GdnCall &g) { g.replayV = 0; }},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.what);
    ASSERT_EQ(kiln_rt_set_batch(d.ctx, &c.step->b), KILN_OK) << lastError();
    GdnCall call = replayCall(c.step->tokens());
    c.change(call);
    EXPECT_EQ(call(d.ctx), KILN_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(lastError().find(c.what), std::string::npos) << lastError();
  }
}

// The ops and the output of an MTP module run after the target (docs/mtp.md) on a dry
// context: argmax, next_tokens and concat validate like every op; draft tokens come
// back per logit row, and a step that hands none back says so.
TEST(RuntimeCpu, MtpOpsValidation) {
  Dry d;
  Step verify(KILN_RT_PHASE_DECODE, {2, 2}, {10, 20}, 2); // 4 tokens, 4 logit rows
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &verify.b), KILN_OK) << lastError();
  void *ids = kiln_rt_input(d.ctx, KILN_RT_INPUT_TOKEN_IDS);
  void *rows = kiln_rt_input(d.ctx, KILN_RT_INPUT_LOGIT_ROWS);
  char *logits = d.a(), *picks = d.a(1 << 16), *next = d.a(2 << 16), *both = d.a(3 << 16);
  EXPECT_EQ(kiln_rt_argmax(d.ctx, logits, picks, 4, 512), KILN_OK) << lastError();
  EXPECT_EQ(kiln_rt_next_tokens(d.ctx, ids, picks, rows, next, 4, 4), KILN_OK) << lastError();
  EXPECT_EQ(kiln_rt_concat(d.ctx, d.a(4 << 16), d.a(5 << 16), both, 4, 256, 256), KILN_OK)
      << lastError();
  EXPECT_EQ(kiln_rt_output(d.ctx, KILN_RT_OUTPUT_LOGITS, logits, 4, 512), KILN_OK)
      << lastError();
  EXPECT_EQ(kiln_rt_output(d.ctx, KILN_RT_OUTPUT_DRAFT_TOKENS, picks, 4, 1), KILN_OK)
      << lastError();
  EXPECT_EQ(kiln_rt_has_draft_tokens(d.ctx), 1);
  int32_t drafts[4] = {9, 9, 9, 9};
  EXPECT_EQ(kiln_rt_read_draft_tokens(d.ctx, drafts, 4), KILN_OK) << lastError();
  EXPECT_EQ(drafts[3], 0); // dry: zeros

  struct Case {
    const char *what;
    std::function<int32_t()> call;
  };
  std::vector<Case> cases = {
      {"kiln_rt_next_tokens: op 1 of the decode step (before the first attention): tokens 3 "
       "!= the step's 4",
       [&] { return kiln_rt_next_tokens(d.ctx, ids, picks, rows, next, 3, 4); }},
      {"out (offset 0 of the io region) is an output",
       [&] { return kiln_rt_next_tokens(d.ctx, ids, picks, rows, ids, 4, 4); }},
      {"cols_b 0", [&] { return kiln_rt_concat(d.ctx, d.a(), d.a(), both, 4, 256, 0); }},
      {"draft_tokens: [3, 1], but the step asks for [4, 1]",
       [&] { return kiln_rt_output(d.ctx, KILN_RT_OUTPUT_DRAFT_TOKENS, picks, 3, 1); }},
      {"output 7 unknown (logits is 0, draft_tokens 1)",
       [&] { return kiln_rt_output(d.ctx, 7, picks, 4, 1); }},
  };
  for (const Case &c : cases) {
    ASSERT_EQ(kiln_rt_set_batch(d.ctx, &verify.b), KILN_OK) << lastError();
    SCOPED_TRACE(c.what);
    EXPECT_EQ(c.call(), KILN_ERROR_INVALID_ARGUMENT) << c.what;
    EXPECT_NE(lastError().find(c.what), std::string::npos) << lastError();
  }
  // A step whose forward hands back logits only has no drafts to read.
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &verify.b), KILN_OK) << lastError();
  ASSERT_EQ(kiln_rt_output(d.ctx, KILN_RT_OUTPUT_LOGITS, logits, 4, 512), KILN_OK);
  EXPECT_EQ(kiln_rt_has_draft_tokens(d.ctx), 0);
  EXPECT_EQ(kiln_rt_read_draft_tokens(d.ctx, drafts, 4), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("handed back no draft tokens"), std::string::npos) << lastError();
}

TEST(RuntimeCpu, InputsAndRegions) {
  Dry d;
  Step s(KILN_RT_PHASE_PREFILL, {5, 7}, {5, 7});
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &s.b), KILN_OK) << lastError();
  kiln_rt_io_layout_t l = kiln_rt_io_layout(4, 256, 16, 16, 0);
  char *io = static_cast<char *>(kiln_rt_io(d.ctx));
  EXPECT_EQ(kiln_rt_input(d.ctx, KILN_RT_INPUT_TOKEN_IDS), io + l.token_ids);
  EXPECT_EQ(kiln_rt_input(d.ctx, KILN_RT_INPUT_POSITIONS), io + l.positions);
  EXPECT_EQ(kiln_rt_input(d.ctx, KILN_RT_INPUT_LOGIT_ROWS), io + l.logit_rows);
  EXPECT_EQ(kiln_rt_input_size(d.ctx, KILN_RT_INPUT_TOKEN_IDS), 12);
  EXPECT_EQ(kiln_rt_input_size(d.ctx, KILN_RT_INPUT_LOGIT_ROWS), 2);
  EXPECT_EQ(kiln_rt_status(d.ctx), KILN_OK);
  // Regions are disjoint fake addresses.
  EXPECT_NE(kiln_rt_weights(d.ctx), nullptr);
  EXPECT_NE(kiln_rt_weights(d.ctx), kiln_rt_activations(d.ctx));
  EXPECT_EQ(kiln_rt_is_dry(d.ctx), 1);
  EXPECT_EQ(kiln_rt_planned_bytes(d.ctx),
            (4u << 20) + 2 * kPool + (4u << 20) + kiln_rt_workspace_bytes(16, 4, 64) + l.bytes);
  // Unknown input: sticky failure.
  EXPECT_EQ(kiln_rt_input(d.ctx, 9), nullptr);
  EXPECT_EQ(kiln_rt_status(d.ctx), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("input 9 unknown"), std::string::npos) << lastError();
}

TEST(RuntimeCpu, GraphOpValidation) {
  Dry d;
  Step s(KILN_RT_PHASE_PREFILL, {5, 7}, {5, 7});
  auto fresh = [&]() { ASSERT_EQ(kiln_rt_set_batch(d.ctx, &s.b), KILN_OK) << lastError(); };
  void *ids = kiln_rt_input(d.ctx, KILN_RT_INPUT_TOKEN_IDS);
  fresh();
  // A valid chain of ops.
  EXPECT_EQ(kiln_rt_embedding(d.ctx, ids, d.w(), d.a(), 12, 512, 256), KILN_OK) << lastError();
  EXPECT_EQ(kiln_rt_rms_norm(d.ctx, d.a(), d.w(512 * 256 * 2), d.a(1 << 20), 12, 256, 1e-6f),
            KILN_OK) << lastError();
  EXPECT_EQ(kiln_rt_linear(d.ctx, d.a(1 << 20), d.w(), nullptr, d.a(2 << 20), 12, 512, 256),
            KILN_OK) << lastError();
  EXPECT_EQ(kiln_rt_linear_pair(d.ctx, d.a(1 << 20), d.w(), d.w(256 * 256 * 2), d.a(2 << 20),
                                d.a(3 << 20), 12, 256, 256),
            KILN_OK)
      << lastError();
  // A gate/up pair and its SwiGLU in one call; the output over the gate, as the plan may
  // place it.
  EXPECT_EQ(kiln_rt_linear_pair_swiglu(d.ctx, d.a(1 << 20), d.w(), d.w(256 * 256 * 2),
                                       d.a(2 << 20), d.a(3 << 20), d.a(2 << 20), 12, 256, 256),
            KILN_OK)
      << lastError();
  EXPECT_EQ(kiln_rt_rope(d.ctx, d.a(), kiln_rt_input(d.ctx, KILN_RT_INPUT_POSITIONS), d.a(), 12, 4,
                         64, 0, KILN_RT_ROPE_LLAMA3, 500000.f, 8.f, 1.f, 4.f, 8192, 1.f),
            KILN_OK)
      << lastError();
  // Partial rope (Qwen3-Next: a quarter of each head rotated), in place.
  EXPECT_EQ(kiln_rt_rope(d.ctx, d.a(), kiln_rt_input(d.ctx, KILN_RT_INPUT_POSITIONS), d.a(), 12, 4,
                         64, 16, KILN_RT_ROPE_DEFAULT, 1e7f, 1.f, 0.f, 0.f, 0, 1.f),
            KILN_OK)
      << lastError();
  // q and k rotated in one launch, each in place.
  EXPECT_EQ(kiln_rt_rope_pair(d.ctx, d.a(), d.a(1 << 20), kiln_rt_input(d.ctx, KILN_RT_INPUT_POSITIONS),
                              d.a(), d.a(1 << 20), 12, 4, 2, 64, 0, KILN_RT_ROPE_LLAMA3, 500000.f,
                              8.f, 1.f, 4.f, 8192, 1.f),
            KILN_OK)
      << lastError();
  EXPECT_EQ(kiln_rt_add(d.ctx, d.a(), d.a(4096), d.a(), 1024), KILN_OK) << lastError();
  EXPECT_EQ(kiln_rt_swiglu(d.ctx, d.a(), d.a(4096), d.a(8192), 1024), KILN_OK) << lastError();
  // The fused residual add + norm, its sum over the residual.
  EXPECT_EQ(kiln_rt_add_rms_norm(d.ctx, d.a(), d.a(1 << 20), d.w(512 * 256 * 2), d.a(),
                                 d.a(2 << 20), 12, 256, 1e-6f),
            KILN_OK) << lastError();
  EXPECT_EQ(kiln_rt_gather_rows(d.ctx, d.a(), kiln_rt_input(d.ctx, KILN_RT_INPUT_LOGIT_ROWS),
                                d.a(1 << 20), 2, 256, 12),
            KILN_OK) << lastError();
  EXPECT_EQ(kiln_rt_output(d.ctx, KILN_RT_OUTPUT_LOGITS, d.a(1 << 20), 2, 512), KILN_OK)
      << lastError();
  // A MoE layer: 12 tokens of hidden 256, 8 experts of 64, top 2; experts in the
  // weights (3 x 8 x 64 x 256 bf16), scratch of 12 x the kernel's bytes per token.
  uint64_t moeScratch = 0;
  ASSERT_EQ(kiln_moe_scratch_bytes_per_token(256, 64, 2, &moeScratch), KILN_OK);
  const int64_t expertBytes = 8 * 64 * 256 * 2;
  auto moe = [&](int64_t scratchPerToken, int32_t topK) {
    return kiln_rt_moe(d.ctx, d.a(), d.a(1 << 20), d.w(), d.w(expertBytes), d.w(2 * expertBytes),
                       nullptr, nullptr, nullptr, nullptr, d.a(2 << 20), d.a(3 << 20), 12, 256, 64,
                       8, topK, KILN_MOE_NORMALIZE_TOP_K, 1, 1, 1.0f, 1, 0.0f, 0.0f,
                       scratchPerToken);
  };
  EXPECT_EQ(moe(static_cast<int64_t>(moeScratch), 2), KILN_OK) << lastError();
  // gpt-oss's form: the clamped SwiGLU and the expert biases after the experts in the
  // weights (gate and up biases [8, 64], the down bias [8, 256]); `gate` and the biases
  // replaceable, to be refused by name.
  const uint64_t biasAt = 3 * expertBytes;
  auto gptOss = [&](const void *gate, const void *gateBias, const void *upBias,
                    const void *downBias, int32_t flags, float limit) {
    return kiln_rt_moe(d.ctx, d.a(), d.a(1 << 20), gate, d.w(expertBytes), d.w(2 * expertBytes),
                       nullptr, gateBias, upBias, downBias, d.a(2 << 20), d.a(3 << 20), 12, 256, 64,
                       8, 2, flags, 1, 1, 1.0f, 1, 1.702f, limit, static_cast<int64_t>(moeScratch));
  };
  constexpr int32_t kGptOssFlags =
      KILN_MOE_NORMALIZE_TOP_K | KILN_MOE_ROUND_WEIGHTS | KILN_MOE_CLAMPED_SWIGLU;
  EXPECT_EQ(gptOss(d.w(), d.w(biasAt), d.w(biasAt + 1024), d.w(biasAt + 2048), kGptOssFlags, 7.0f),
            KILN_OK)
      << lastError();
  // Plain experts with the up and down biases.
  EXPECT_EQ(gptOss(nullptr, nullptr, d.w(biasAt + 1024), d.w(biasAt + 2048),
                   KILN_MOE_NORMALIZE_TOP_K, 0.0f),
            KILN_OK)
      << lastError();
  EXPECT_EQ(kiln_rt_sigmoid_gate(d.ctx, d.a(), d.w(), d.a(1 << 20), d.a(1 << 20), 12, 256, 256),
            KILN_OK)
      << lastError();
  // Qwen3-Next's norms and gates: the hidden norm (one head a token), the per-head q norm
  // of 2 heads x 64 read from [q | gate] rows (token stride 256, head stride 128), the
  // fused residual form, the gated output norm (weight [group_size]) and the attention
  // gate (the gate half of each head's [q | gate]).
  EXPECT_EQ(
      kiln_rt_rms_norm_offset(d.ctx, d.a(), 256, 256, d.w(), d.a(1 << 20), 12, 1, 256, 1e-6f, 1.0f),
      KILN_OK)
      << lastError();
  EXPECT_EQ(
      kiln_rt_rms_norm_offset(d.ctx, d.a(), 256, 128, d.w(), d.a(1 << 20), 12, 2, 64, 1e-6f, 1.0f),
      KILN_OK)
      << lastError();
  EXPECT_EQ(kiln_rt_rms_norm_offset(d.ctx, d.a(), 256, 256, d.w(), d.a(), 12, 1, 256, 1e-6f, 1.0f),
            KILN_OK)
      << lastError(); // dense rows in place
  EXPECT_EQ(kiln_rt_add_rms_norm_offset(d.ctx, d.a(), d.a(1 << 20), d.w(), d.a(), d.a(2 << 20), 12,
                                        256, 1e-6f, 1.0f),
            KILN_OK)
      << lastError();
  EXPECT_EQ(kiln_rt_rms_norm_gate(d.ctx, d.a(), d.a(1 << 20), d.w(), d.a(2 << 20), 12, 256, 512, 64,
                                  1e-6f),
            KILN_OK)
      << lastError();
  // gpt-oss's norms: the same calls with the weight offset -0.0 (the weight as is).
  EXPECT_EQ(kiln_rt_rms_norm_offset(d.ctx, d.a(), 256, 256, d.w(), d.a(1 << 20), 12, 1, 256, 1e-5f,
                                    -0.0f),
            KILN_OK)
      << lastError();
  EXPECT_EQ(kiln_rt_add_rms_norm_offset(d.ctx, d.a(), d.a(1 << 20), d.w(), d.a(), d.a(2 << 20), 12,
                                        256, 1e-5f, -0.0f),
            KILN_OK)
      << lastError();
  EXPECT_EQ(kiln_rt_sigmoid_mul(d.ctx, d.a(), d.a((1 << 20) + 128), d.a(), 24, 64, 128), KILN_OK)
      << lastError();
  EXPECT_EQ(kiln_rt_rms_norm_gate(d.ctx, d.a(), d.a(1 << 20), d.w((4 << 20) - 128), d.a(2 << 20),
                                  12, 256, 512, 64, 1e-6f),
            KILN_OK)
      << lastError(); // weight [group_size]: 128 bytes
  EXPECT_EQ(kiln_rt_gated_rms_norm(d.ctx, d.a(), d.a(1 << 20), d.w(), d.a(2 << 20), 12, 256, 512,
                                   64, 1e-6f),
            KILN_OK)
      << lastError();
  int32_t argmax[2] = {5, 5};
  EXPECT_EQ(kiln_rt_read_argmax(d.ctx, argmax, 2), KILN_OK) << lastError();
  EXPECT_EQ(argmax[0], 0); // dry: zeros

  struct Case {
    const char *what;
    std::function<int32_t()> call;
  };
  std::vector<Case> cases = {
      {"kiln_rt_linear: op 1 of the prefill step (before the first attention): x is null",
       [&] { return kiln_rt_linear(d.ctx, nullptr, d.w(), nullptr, d.a(), 1, 1, 1); }},
      {"w [0, 4194306) of the weights region runs past its end",
       [&] { return kiln_rt_linear(d.ctx, d.a(), d.w(), nullptr, d.a(), 1, 2097153, 1); }},
      {"lies in no region",
       [&] { return kiln_rt_add(d.ctx, reinterpret_cast<void *>(0x1000), d.a(), d.a(), 8); }},
      {"out (offset 0 of the weights region) is an output",
       [&] { return kiln_rt_add(d.ctx, d.a(), d.a(), d.w(), 8); }},
      {"m 0 outside", [&] { return kiln_rt_linear(d.ctx, d.a(), d.w(), nullptr, d.a(), 0, 1, 1); }},
      // kiln.linear_pair: its second weight and output are checked like the first.
      {"w1 [4194240, 4194368) of the weights region runs past its end",
       [&] {
         return kiln_rt_linear_pair(d.ctx, d.a(), d.w(), d.w(4194240), d.a(), d.a(64), 1, 8, 8);
       }},
      {"out1 (offset 0 of the weights region) is an output",
       [&] { return kiln_rt_linear_pair(d.ctx, d.a(), d.w(), d.w(64), d.a(), d.w(), 1, 8, 8); }},
      {"out0 and out1 overlap",
       [&] { return kiln_rt_linear_pair(d.ctx, d.a(), d.w(), d.w(128), d.a(), d.a(8), 1, 8, 8); }},
      {"out0 overlaps x",
       [&] { return kiln_rt_linear_pair(d.ctx, d.a(), d.w(), d.w(128), d.a(8), d.a(64), 1, 8, 8); }},
      // kiln.linear_pair_swiglu: every operand's range, and an output over an input.
      {"h (offset 0 of the weights region) is an output",
       [&] {
         return kiln_rt_linear_pair_swiglu(d.ctx, d.a(), d.w(), d.w(128), d.a(64), d.a(128),
                                           d.w(), 1, 8, 8);
       }},
      {"w1 [4194240, 4194368) of the weights region runs past its end",
       [&] {
         return kiln_rt_linear_pair_swiglu(d.ctx, d.a(), d.w(), d.w(4194240), d.a(64),
                                           d.a(128), d.a(256), 1, 8, 8);
       }},
      {"kiln_rt_linear_pair_swiglu: op 1 of the prefill step (before the first attention): "
       "gate and up overlap",
       [&] {
         return kiln_rt_linear_pair_swiglu(d.ctx, d.a(), d.w(), d.w(128), d.a(64), d.a(72),
                                           d.a(256), 1, 8, 8);
       }},
      {"h overlaps x",
       [&] {
         return kiln_rt_linear_pair_swiglu(d.ctx, d.a(), d.w(), d.w(128), d.a(64), d.a(128),
                                           d.a(8), 1, 8, 8);
       }},
      {"h overlaps up without being it",
       [&] {
         return kiln_rt_linear_pair_swiglu(d.ctx, d.a(), d.w(), d.w(128), d.a(64), d.a(128),
                                           d.a(136), 1, 8, 8);
       }},
      {"k 0 outside",
       [&] {
         return kiln_rt_linear_pair_swiglu(d.ctx, d.a(), d.w(), d.w(128), d.a(64), d.a(128),
                                           d.a(256), 1, 8, 0);
       }},
      {"rope_type 7 unknown",
       [&] {
         return kiln_rt_rope(d.ctx, d.a(), ids, d.a(), 12, 4, 64, 0, 7, 1e4f, 1, 0, 0, 0, 1);
       }},
      {"attention_factor 0 must be finite and > 0",
       [&] {
         return kiln_rt_rope(d.ctx, d.a(), ids, d.a(), 12, 4, 64, 0, 0, 1e4f, 1, 0, 0, 0, 0);
       }},
      {"tokens 11 != the step's 12 tokens",
       [&] {
         return kiln_rt_rope(d.ctx, d.a(), ids, d.a(), 11, 4, 64, 0, 0, 1e4f, 1, 0, 0, 0, 1);
       }},
      // kiln.rope_pair: the rope checks, then both tensors' ranges by name.
      {"kiln_rt_rope_pair: op 1 of the prefill step (before the first attention): heads1 0 outside",
       [&] {
         return kiln_rt_rope_pair(d.ctx, d.a(), d.a(1 << 20), ids, d.a(), d.a(1 << 20), 12, 4, 0,
                                  64, 0, 0, 1e4f, 1, 0, 0, 0, 1);
       }},
      {"rotary_dim 3 must be 0 (the whole head) or even",
       [&] {
         return kiln_rt_rope_pair(d.ctx, d.a(), d.a(1 << 20), ids, d.a(), d.a(1 << 20), 12, 4, 2,
                                  64, 3, 0, 1e4f, 1, 0, 0, 0, 1);
       }},
      {"out0 and out1 must not overlap each other or the other tensor's input",
       [&] {
         return kiln_rt_rope_pair(d.ctx, d.a(), d.a(1 << 20), ids, d.a(1 << 20), d.a(1 << 20), 12,
                                  4, 2, 64, 0, 0, 1e4f, 1, 0, 0, 0, 1);
       }},
      {"out1 (offset 0 of the weights region) is an output",
       [&] {
         return kiln_rt_rope_pair(d.ctx, d.a(), d.a(1 << 20), ids, d.a(), d.w(), 12, 4, 2, 64, 0,
                                  0, 1e4f, 1, 0, 0, 0, 1);
       }},
      {"is not 2-byte aligned", [&] { return kiln_rt_add(d.ctx, d.a(1), d.a(), d.a(), 8); }},
      {"kiln_rt_moe: op 1 of the prefill step (before the first attention): scratch_per_token 100 "
       "!= the",
       [&] { return moe(100, 2); }},
      {"top_k 0 outside", [&] { return moe(static_cast<int64_t>(moeScratch), 0); }},
      // The expert biases are checked by name like the weights they sit with.
      {"kiln_rt_moe: op 1 of the prefill step (before the first attention): gate_bias (",
       [&] {
         return gptOss(d.w(), d.w(biasAt + 1), d.w(biasAt + 1024), d.w(biasAt + 2048), kGptOssFlags,
                       7.0f);
       }},
      {"is not 2-byte aligned",
       [&] {
         return gptOss(d.w(), d.w(biasAt + 1), d.w(biasAt + 1024), d.w(biasAt + 2048), kGptOssFlags,
                       7.0f);
       }},
      {"up_bias (0x1000, 1024 bytes) lies in no region",
       [&] {
         return gptOss(d.w(), d.w(biasAt), reinterpret_cast<void *>(0x1000), d.w(biasAt + 2048),
                       kGptOssFlags, 7.0f);
       }},
      {"down_bias [4193280, 4197376) of the weights region runs past its end",
       [&] {
         return gptOss(d.w(), d.w(biasAt), d.w(biasAt + 1024), d.w((4 << 20) - 1024), kGptOssFlags,
                       7.0f);
       }},
      {"gate_bias needs gated experts (gate is null)",
       [&] {
         return gptOss(nullptr, d.w(biasAt), d.w(biasAt + 1024), d.w(biasAt + 2048),
                       KILN_MOE_NORMALIZE_TOP_K, 7.0f);
       }},
      {"KILN_MOE_CLAMPED_SWIGLU needs gated experts (gate is null)",
       [&] { return gptOss(nullptr, nullptr, nullptr, nullptr, kGptOssFlags, 7.0f); }},
      {"glu_alpha 1.702 and glu_limit 0 must be finite, the limit > 0",
       [&] { return gptOss(d.w(), nullptr, nullptr, nullptr, kGptOssFlags, 0.0f); }},
      {"kiln_rt_sigmoid_gate: op 1 of the prefill step (before the first attention): out "
       "(offset 0 of the weights region) is an output",
       [&] { return kiln_rt_sigmoid_gate(d.ctx, d.a(), d.w(), d.a(64), d.w(), 12, 256, 256); }},
      {"vocab 500 != the model's vocab_size 512",
       [&] { return kiln_rt_embedding(d.ctx, ids, d.w(), d.a(), 12, 500, 256); }},
      {"logits: 3 rows, but the step asks for 2 logit rows",
       [&] { return kiln_rt_output(d.ctx, KILN_RT_OUTPUT_LOGITS, d.a(), 3, 512); }},
      {"eps -1 must be finite",
       [&] { return kiln_rt_rms_norm(d.ctx, d.a(), d.w(), d.a(), 1, 8, -1.f); }},
      {"kiln_rt_add_rms_norm: op 1 of the prefill step (before the first attention): sum and "
       "out are the same buffer",
       [&] {
         return kiln_rt_add_rms_norm(d.ctx, d.a(), d.a(), d.w(), d.a(64), d.a(64), 1, 8, 1e-6f);
       }},
      {"sum (offset 0 of the weights region) is an output",
       [&] {
         return kiln_rt_add_rms_norm(d.ctx, d.a(), d.a(), d.w(), d.w(), d.a(64), 1, 8, 1e-6f);
       }},
      {"dim 0 outside",
       [&] {
         return kiln_rt_add_rms_norm(d.ctx, d.a(), d.a(), d.w(), d.a(), d.a(64), 1, 0, 1e-6f);
       }},
      {"kiln_rt_rope: op 1 of the prefill step (before the first attention): rotary_dim 63 "
       "must be 0 (the whole head) or even and <= head_dim 64",
       [&] {
         return kiln_rt_rope(d.ctx, d.a(), ids, d.a(), 12, 4, 64, 63, 0, 1e4f, 1, 0, 0, 0, 1);
       }},
      {"rotary_dim 66 must be",
       [&] {
         return kiln_rt_rope(d.ctx, d.a(), ids, d.a(), 12, 4, 64, 66, 0, 1e4f, 1, 0, 0, 0, 1);
       }},
      // kiln_rt_rms_norm_offset: sizes, strides, ranges, in place.
      {"kiln_rt_rms_norm_offset: op 1 of the prefill step (before the first attention): heads "
       "0 outside",
       [&] {
         return kiln_rt_rms_norm_offset(d.ctx, d.a(), 256, 128, d.w(), d.a(1 << 20), 12, 0, 64,
                                        1e-6f, 1.0f);
       }},
      {"x head stride 32 outside [64, 2^40]",
       [&] {
         return kiln_rt_rms_norm_offset(d.ctx, d.a(), 256, 32, d.w(), d.a(1 << 20), 12, 2, 64,
                                        1e-6f, 1.0f);
       }},
      {"x token stride 191 outside [192, 2^40]",
       [&] {
         return kiln_rt_rms_norm_offset(d.ctx, d.a(), 191, 128, d.w(), d.a(1 << 20), 12, 2, 64,
                                        1e-6f, 1.0f);
       }},
      {"x token stride 255 outside [256, 2^40]",
       [&] {
         return kiln_rt_rms_norm_offset(d.ctx, d.a(), 255, 0, d.w(), d.a(1 << 20), 12, 1, 256,
                                        1e-6f, 1.0f);
       }},
      {"eps nan must be finite",
       [&] {
         return kiln_rt_rms_norm_offset(d.ctx, d.a(), 256, 128, d.w(), d.a(1 << 20), 12, 2, 64, NAN,
                                        1.0f);
       }},
      {"weight_offset nan is not finite",
       [&] {
         return kiln_rt_rms_norm_offset(d.ctx, d.a(), 256, 128, d.w(), d.a(1 << 20), 12, 2, 64,
                                        1e-6f, NAN);
       }},
      {"x [4190208, 4196224) of the activations region runs past its end",
       [&] {
         return kiln_rt_rms_norm_offset(d.ctx, d.a((4 << 20) - 4096), 256, 128, d.w(), d.a(), 12, 2,
                                        64, 1e-6f, 1.0f);
       }},
      {"weight is null",
       [&] {
         return kiln_rt_rms_norm_offset(d.ctx, d.a(), 256, 128, nullptr, d.a(1 << 20), 12, 2, 64,
                                        1e-6f, 1.0f);
       }},
      {"out (offset 0 of the weights region) is an output",
       [&] {
         return kiln_rt_rms_norm_offset(d.ctx, d.a(), 256, 128, d.w(), d.w(), 12, 2, 64, 1e-6f,
                                        1.0f);
       }},
      {"out overlaps x (only dense rows may be normed in place, out == x)",
       [&] {
         return kiln_rt_rms_norm_offset(d.ctx, d.a(), 256, 128, d.w(), d.a(), 12, 2, 64, 1e-6f,
                                        1.0f);
       }},
      {"out overlaps x",
       [&] {
         return kiln_rt_rms_norm_offset(d.ctx, d.a(), 256, 256, d.w(), d.a(512), 12, 1, 256, 1e-6f,
                                        1.0f);
       }},
      // kiln_rt_add_rms_norm_offset validates like kiln_rt_add_rms_norm.
      {"kiln_rt_add_rms_norm_offset: op 1 of the prefill step (before the first attention): sum "
       "and out are the same buffer",
       [&] {
         return kiln_rt_add_rms_norm_offset(d.ctx, d.a(), d.a(), d.w(), d.a(64), d.a(64), 1, 8,
                                            1e-6f, 1.0f);
       }},
      {"b is null",
       [&] {
         return kiln_rt_add_rms_norm_offset(d.ctx, d.a(), nullptr, d.w(), d.a(), d.a(64), 1, 8,
                                            1e-6f, 1.0f);
       }},
      {"weight_offset inf is not finite",
       [&] {
         return kiln_rt_add_rms_norm_offset(d.ctx, d.a(), d.a(64), d.w(), d.a(), d.a(128), 1, 8,
                                            1e-6f, INFINITY);
       }},
      // kiln_rt_rms_norm_gate: weight [group_size], not [width].
      {"kiln_rt_rms_norm_gate: op 1 of the prefill step (before the first attention): "
       "group_size 48 does not divide width 256",
       [&] {
         return kiln_rt_rms_norm_gate(d.ctx, d.a(), d.a(1 << 20), d.w(), d.a(2 << 20), 12, 256, 512,
                                      48, 1e-6f);
       }},
      {"gate row stride 128 outside [256, 2^40]",
       [&] {
         return kiln_rt_rms_norm_gate(d.ctx, d.a(), d.a(1 << 20), d.w(), d.a(2 << 20), 12, 256, 128,
                                      64, 1e-6f);
       }},
      {"weight [4194288, 4194416) of the weights region runs past its end",
       [&] {
         return kiln_rt_rms_norm_gate(d.ctx, d.a(), d.a(1 << 20), d.w((4 << 20) - 16), d.a(2 << 20),
                                      12, 256, 512, 64, 1e-6f);
       }},
      {"eps -1 must be finite",
       [&] {
         return kiln_rt_rms_norm_gate(d.ctx, d.a(), d.a(1 << 20), d.w(), d.a(2 << 20), 12, 256, 512,
                                      64, -1.f);
       }},
      {"out (offset 0 of the weights region) is an output",
       [&] {
         return kiln_rt_rms_norm_gate(d.ctx, d.a(), d.a(1 << 20), d.w(), d.w(), 12, 256, 512, 64,
                                      1e-6f);
       }},
      // Mamba2's gated norm keeps its weight [width] (the same pointer passes as
      // kiln_rt_rms_norm_gate's [group_size] weight above).
      {"kiln_rt_gated_rms_norm: op 1 of the prefill step (before the first attention): "
       "weight [4194288, 4194800) of the weights region runs past its end",
       [&] {
         return kiln_rt_gated_rms_norm(d.ctx, d.a(), d.a(1 << 20), d.w((4 << 20) - 16),
                                       d.a(2 << 20), 12, 256, 512, 4, 1e-6f);
       }},
      // kiln_rt_sigmoid_mul.
      {"kiln_rt_sigmoid_mul: op 1 of the prefill step (before the first attention): gate row "
       "stride 32 outside [64, 2^40]",
       [&] { return kiln_rt_sigmoid_mul(d.ctx, d.a(), d.a(1 << 20), d.a(), 24, 64, 32); }},
      {"rows 0 outside",
       [&] { return kiln_rt_sigmoid_mul(d.ctx, d.a(), d.a(1 << 20), d.a(), 0, 64, 128); }},
      {"gate is null",
       [&] { return kiln_rt_sigmoid_mul(d.ctx, d.a(), nullptr, d.a(), 24, 64, 128); }},
      {"gate (0x", [&] { return kiln_rt_sigmoid_mul(d.ctx, d.a(), d.a(1), d.a(), 24, 64, 128); }},
      {"out (offset 0 of the weights region) is an output",
       [&] { return kiln_rt_sigmoid_mul(d.ctx, d.a(), d.a(1 << 20), d.w(), 24, 64, 128); }},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.what);
    fresh();
    EXPECT_EQ(c.call(), KILN_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(lastError().find(c.what), std::string::npos) << lastError();
  }
  // A top_k beyond the kernel's: unsupported, named by the kernel's own query.
  fresh();
  EXPECT_EQ(moe(static_cast<int64_t>(moeScratch), 33), KILN_ERROR_UNSUPPORTED);
  EXPECT_NE(lastError().find("top_k = 33 exceeds the supported maximum 32"), std::string::npos)
      << lastError();
  // Reading results without logits.
  fresh();
  EXPECT_EQ(kiln_rt_read_argmax(d.ctx, argmax, 2), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kiln_rt_output(LOGITS) not called"), std::string::npos)
      << lastError();
}

// The plan of a small MLA model: one latent pool of 8 pages of 64 tokens x 576 values.
kiln_rt_config_t mlaConfig() {
  kiln_rt_config_t c = tinyConfig();
  c.page_size = KILN_MLA_PAGE_SIZE;
  c.kv_pages = 8;
  c.cache_bytes = 8ull * KILN_MLA_PAGE_SIZE * KILN_MLA_HEAD_DIM * 2;
  c.io_bytes = kiln_rt_io_bytes(4, 256, 16, 256 / KILN_MLA_PAGE_SIZE, 0);
  return c;
}

// kiln_rt_mla_attention's shape, kernel and pointer rules on a dry context (16 heads,
// qk_nope 128, v 128), and the strided norm of its latent.
TEST(RuntimeCpu, MlaAttentionValidation) {
  Dry d(mlaConfig());
  Step dec(KILN_RT_PHASE_DECODE, {1, 1}, {10, 20});
  Step pre(KILN_RT_PHASE_PREFILL, {5, 7}, {5, 7});
  struct Args {
    int64_t tokens = 2, kPeStride = 576;
    int32_t heads = 16, rank = 512, decodeKernel = KILN_RT_KERNEL_MLA_DECODE,
            prefillKernel = KILN_RT_KERNEL_MLA_PREFILL, style = KILN_ROPE_STYLE_DEINTERLEAVE;
    uint64_t cacheOffset = 0;
    float scale = 0.1f;
    int32_t kvDtype = KILN_RT_DTYPE_BF16;
  };
  auto mla = [&](const Args &a) {
    // q, the kv_a output (latent | k_pe columns), the normed latent, scratch, out.
    return kiln_rt_mla_attention(
        d.ctx, 0, a.cacheOffset, d.a(0), d.a(1 << 20), d.a((1 << 20) + 1024), a.kPeStride,
        kiln_rt_input(d.ctx, KILN_RT_INPUT_POSITIONS), d.w(), d.a(2 << 20), d.a(3 << 20), a.tokens,
        a.heads, a.rank, 64, 128, 128, KILN_MLA_PAGE_SIZE, a.decodeKernel, a.prefillKernel,
        KILN_RT_SINGLE_TOKEN, a.scale, a.style, KILN_RT_ROPE_DEFAULT, 1e4f, 1.f, 0.f, 0.f, 0, 1.f,
        a.kvDtype);
  };
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &dec.b), KILN_OK) << lastError();
  EXPECT_EQ(mla(Args{}), KILN_OK) << lastError();
  // An FP8 pool holds KILN_MLA_FP8_TOKEN_BYTES a token: it fits where the bf16 pool's
  // 1152 bytes a token would overrun the caches.
  Args fp8;
  fp8.kvDtype = KILN_RT_DTYPE_F8E4M3FN;
  fp8.cacheOffset = 8ull * KILN_MLA_PAGE_SIZE * (KILN_MLA_HEAD_DIM * 2 - KILN_MLA_FP8_TOKEN_BYTES);
  EXPECT_EQ(mla(fp8), KILN_OK) << lastError();
  fp8.cacheOffset += 16;
  EXPECT_EQ(mla(fp8), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("mla_latent"), std::string::npos) << lastError();
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &dec.b), KILN_OK) << lastError(); // clears the failure
  EXPECT_EQ(kiln_rt_rms_norm_strided(d.ctx, d.a(1 << 20), 576, d.w(), d.a((1 << 20) + 4096), 2,
                                     512, 1e-6f),
            KILN_OK)
      << lastError();
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &pre.b), KILN_OK) << lastError();
  Args prompt;
  prompt.tokens = 12;
  EXPECT_EQ(mla(prompt), KILN_OK) << lastError();

  struct Case {
    const char *what;
    Step *step;
    Args args;
    kiln_status_t status;
  };
  auto with = [](auto edit) {
    Args a;
    edit(a);
    return a;
  };
  const Case cases[] = {
      {"kv_lora_rank 256 / qk_rope_head_dim 64 unsupported", &dec,
       with([](Args &a) { a.rank = 256; }), KILN_ERROR_UNSUPPORTED},
      {"num_heads 129 unsupported", &dec, with([](Args &a) { a.heads = 129; }),
       KILN_ERROR_UNSUPPORTED},
      {"decode_kernel 1 (gqa_decode) cannot run MLA decode", &dec,
       with([](Args &a) { a.decodeKernel = KILN_RT_KERNEL_GQA_DECODE; }),
       KILN_ERROR_INVALID_ARGUMENT},
      {"prefill_kernel 2 (prefill_fmha) cannot run MLA in prefill", &pre, with([](Args &a) {
         a.tokens = 12;
         a.prefillKernel = KILN_RT_KERNEL_PREFILL_FMHA;
       }),
       KILN_ERROR_INVALID_ARGUMENT},
      {"tokens 3 != the step's 2 tokens", &dec, with([](Args &a) { a.tokens = 3; }),
       KILN_ERROR_INVALID_ARGUMENT},
      {"softmax_scale 0 must be finite and > 0", &dec, with([](Args &a) { a.scale = 0.f; }),
       KILN_ERROR_INVALID_ARGUMENT},
      {"rope_style 5 unknown", &dec, with([](Args &a) { a.style = 5; }),
       KILN_ERROR_INVALID_ARGUMENT},
      {"k_pe row stride 32 outside", &dec, with([](Args &a) { a.kPeStride = 32; }),
       KILN_ERROR_INVALID_ARGUMENT},
      {"mla_latent", &dec, with([](Args &a) { a.cacheOffset = 4096; }),
       KILN_ERROR_INVALID_ARGUMENT},
      {"kv_dtype 1 (f16) unsupported (the MLA kernels read bf16 or f8E4M3FN", &dec,
       with([](Args &a) { a.kvDtype = KILN_RT_DTYPE_F16; }), KILN_ERROR_UNSUPPORTED},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.what);
    ASSERT_EQ(kiln_rt_set_batch(d.ctx, &c.step->b), KILN_OK) << lastError();
    EXPECT_EQ(mla(c.args), c.status);
    EXPECT_NE(lastError().find(c.what), std::string::npos) << lastError();
  }
  // The strided norm: a stride below the row's width.
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &dec.b), KILN_OK) << lastError();
  EXPECT_EQ(kiln_rt_rms_norm_strided(d.ctx, d.a(1 << 20), 256, d.w(), d.a(), 2, 512, 1e-6f),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("x row stride 256 outside [512"), std::string::npos) << lastError();
}

TEST(RuntimeCpu, StickyStatus) {
  Dry d;
  Step s(KILN_RT_PHASE_DECODE, {1}, {10});
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &s.b), KILN_OK);
  EXPECT_EQ(kiln_rt_add(d.ctx, d.a(), d.a(), d.a(), 8), KILN_OK);
  EXPECT_EQ(kiln_rt_linear(d.ctx, d.a(), d.w(), nullptr, d.a(), 1, 8, 0),
            KILN_ERROR_INVALID_ARGUMENT);
  const std::string first = lastError();
  EXPECT_NE(first.find("kiln_rt_linear: op 2 of the decode step"), std::string::npos) << first;
  // Every later call returns at once with the first failure, valid or not.
  EXPECT_EQ(kiln_rt_add(d.ctx, d.a(), d.a(), d.a(), 8), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(lastError(), first);
  EXPECT_EQ(kiln_rt_rms_norm(d.ctx, nullptr, nullptr, nullptr, 0, 0, 0),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(lastError(), first);
  EXPECT_EQ(kiln_rt_output(d.ctx, KILN_RT_OUTPUT_LOGITS, d.a(), 1, 512),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(lastError(), first);
  EXPECT_EQ(kiln_rt_status(d.ctx), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(lastError(), first);
  int32_t argmax[1];
  EXPECT_EQ(kiln_rt_read_argmax(d.ctx, argmax, 1), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("the step failed: " + first), std::string::npos) << lastError();
  kiln_rt_clear_status(d.ctx);
  EXPECT_EQ(kiln_rt_status(d.ctx), KILN_OK);
  EXPECT_EQ(kiln_rt_add(d.ctx, d.a(), d.a(), d.a(), 8), KILN_OK);
}

// kiln_rt_forward validates its arguments; on a dry context (no device: no graphs) it
// runs the forward and returns the step's status; the graph limit is checked.
int forwardCalls = 0;
void countingForward(kiln_rt_context_t *ctx) {
  ++forwardCalls;
  kiln_rt_linear(ctx, nullptr, nullptr, nullptr, nullptr, 1, 8, 8); // fails: x is null
}

TEST(RuntimeCpu, ForwardAndGraphLimits) {
  EXPECT_EQ(kiln_rt_forward(nullptr, countingForward), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kiln_rt_forward: context is null"), std::string::npos);
  Dry d;
  EXPECT_EQ(kiln_rt_forward(d.ctx, nullptr), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("forward is null"), std::string::npos) << lastError();
  EXPECT_EQ(kiln_rt_set_max_graphs(nullptr, 4), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kiln_rt_set_max_graphs(d.ctx, -1), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("max_graphs -1 < 0"), std::string::npos) << lastError();
  EXPECT_EQ(kiln_rt_set_max_graphs(d.ctx, 8), KILN_OK);
  Step s(KILN_RT_PHASE_DECODE, {1}, {10});
  for (int i = 0; i < 3; ++i) { // a decode step shape seen three times: never captured here
    ASSERT_EQ(kiln_rt_set_batch(d.ctx, &s.b), KILN_OK);
    EXPECT_EQ(kiln_rt_forward(d.ctx, countingForward), KILN_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(lastError().find("kiln_rt_linear"), std::string::npos) << lastError();
  }
  EXPECT_EQ(forwardCalls, 3);
  kiln_rt_graph_stats_t stats{};
  EXPECT_EQ(kiln_rt_graph_stats(nullptr, &stats), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kiln_rt_graph_stats(d.ctx, nullptr), KILN_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(kiln_rt_graph_stats(d.ctx, &stats), KILN_OK);
  EXPECT_EQ(stats.graphs, 0);
  EXPECT_EQ(stats.replays, 0u);
  // Checked launches are a no-op without a device; no fault is ever seen.
  EXPECT_EQ(kiln_rt_set_check_launches(nullptr, 1), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kiln_rt_set_check_launches(d.ctx, 1), KILN_OK);
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &s.b), KILN_OK);
  EXPECT_EQ(kiln_rt_add(d.ctx, d.a(), d.a(), d.a(), 8), KILN_OK);
  EXPECT_EQ(kiln_rt_is_faulted(d.ctx), 0);
  EXPECT_EQ(kiln_rt_is_faulted(nullptr), 0);
}

// Graph limits: batches ascending within [1, max_batch], a byte limit; validation only
// without a device.
TEST(RuntimeCpu, GraphLimitsAreValidated) {
  Dry d;
  const int32_t good[] = {1, 2, 4}, descending[] = {2, 1}, zero[] = {0}, tooBig[] = {1, 5};
  EXPECT_EQ(kiln_rt_set_graph_limits(nullptr, good, 3, 1), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kiln_rt_set_graph_limits(d.ctx, nullptr, 2, 1), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kiln_rt_set_graph_limits(d.ctx, good, -1, 1), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kiln_rt_set_graph_limits(d.ctx, descending, 2, 1), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("ascending without repeats (2 then 1)"), std::string::npos)
      << lastError();
  EXPECT_EQ(kiln_rt_set_graph_limits(d.ctx, zero, 1, 1), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kiln_rt_set_graph_limits(d.ctx, tooBig, 2, 1), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("batches[1] = 5 outside [1, max_batch 4]"), std::string::npos)
      << lastError();
  EXPECT_EQ(kiln_rt_set_graph_limits(d.ctx, good, 3, UINT64_MAX), KILN_OK);
  EXPECT_EQ(kiln_rt_set_graph_limits(d.ctx, nullptr, 0, 0), KILN_OK);
  kiln_rt_graph_stats_t stats{};
  ASSERT_EQ(kiln_rt_graph_stats(d.ctx, &stats), KILN_OK);
  EXPECT_EQ(stats.graph_byte_limit, 0u);
}

// The skinny GEMM's form: the tensor cores by default for max_batch 1 (plain and
// speculative models alike, so they agree bit for bit), cuBLASLt otherwise; any form on
// request, an unknown one refused by number.
TEST(RuntimeCpu, SkinnyGemmForm) {
  EXPECT_EQ(kiln_rt_set_skinny_gemm(nullptr, KILN_GEMM_SKINNY_OFF), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kiln_rt_skinny_gemm(nullptr), KILN_GEMM_SKINNY_OFF);
  kiln_rt_config_t batched = tinyConfig();
  ASSERT_GT(batched.max_batch, 1);
  Dry wide(batched);
  EXPECT_EQ(kiln_rt_skinny_gemm(wide.ctx), KILN_GEMM_SKINNY_OFF);
  for (int64_t drafts : {0, 3}) {
    kiln_rt_config_t single = tinyConfig();
    single.max_batch = 1;
    single.max_draft_len = drafts;
    Dry one(single);
    EXPECT_EQ(kiln_rt_skinny_gemm(one.ctx), KILN_GEMM_SKINNY_TENSOR_CORES) << drafts;
  }
  EXPECT_EQ(kiln_rt_set_skinny_gemm(wide.ctx, KILN_GEMM_SKINNY_CUDA_CORES), KILN_OK)
      << lastError();
  EXPECT_EQ(kiln_rt_skinny_gemm(wide.ctx), KILN_GEMM_SKINNY_CUDA_CORES);
  EXPECT_EQ(kiln_rt_set_skinny_gemm(wide.ctx, static_cast<kiln_gemm_skinny_t>(5)),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kiln_rt_set_skinny_gemm: form 5 unknown"), std::string::npos)
      << lastError();
  EXPECT_EQ(kiln_rt_skinny_gemm(wide.ctx), KILN_GEMM_SKINNY_CUDA_CORES);
}

// The GEMM policy: two values, and HEURISTIC only where no speculation needs invariant
// rows. Decode steps also count their kiln_rt_set_batch in the graph statistics.
TEST(RuntimeCpu, GemmPolicyRules) {
  EXPECT_EQ(kiln_rt_set_gemm_policy(nullptr, KILN_GEMM_HEURISTIC), KILN_ERROR_INVALID_ARGUMENT);
  Dry speculative; // tinyConfig verifies up to 3 drafts
  EXPECT_EQ(kiln_rt_set_gemm_policy(speculative.ctx, static_cast<kiln_gemm_policy_t>(7)),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("policy 7 is neither ROW_INVARIANT (0) nor HEURISTIC (1)"),
            std::string::npos)
      << lastError();
  EXPECT_EQ(kiln_rt_set_gemm_policy(speculative.ctx, KILN_GEMM_HEURISTIC),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("up to 3 draft tokens a step; its GEMM rows must stay invariant"),
            std::string::npos)
      << lastError();
  EXPECT_EQ(kiln_rt_set_gemm_policy(speculative.ctx, KILN_GEMM_ROW_INVARIANT), KILN_OK);
  kiln_rt_config_t plain = tinyConfig();
  plain.max_draft_len = 0;
  Dry d(plain);
  EXPECT_EQ(kiln_rt_set_gemm_policy(d.ctx, KILN_GEMM_HEURISTIC), KILN_OK) << lastError();
  Step s(KILN_RT_PHASE_DECODE, {1, 1}, {10, 20});
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &s.b), KILN_OK) << lastError();
  kiln_rt_graph_stats_t stats{};
  ASSERT_EQ(kiln_rt_graph_stats(d.ctx, &stats), KILN_OK);
  EXPECT_EQ(stats.decode_batches, 1u);
  EXPECT_GE(stats.decode_set_batch_seconds, 0.0);
  EXPECT_EQ(stats.replay_host_seconds, 0.0);
}

// The trace creates its directory, and refuses a file or a non-empty directory: it never
// mixes with or overwrites what is there. A dry context writes nothing.
TEST(RuntimeCpu, TraceDirectoryRules) {
  EXPECT_EQ(kiln_rt_set_trace(nullptr, "/tmp/x"), KILN_ERROR_INVALID_ARGUMENT);
  Dry d;
  char base[] = "/tmp/kiln-trace-XXXXXX";
  ASSERT_NE(mkdtemp(base), nullptr);
  const std::string root = base;
  const std::string fresh = root + "/a/b";
  ASSERT_EQ(kiln_rt_set_trace(d.ctx, fresh.c_str()), KILN_OK) << lastError();
  Step s(KILN_RT_PHASE_DECODE, {1}, {10});
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &s.b), KILN_OK);
  EXPECT_EQ(kiln_rt_add(d.ctx, d.a(), d.a(), d.a(), 8), KILN_OK);
  EXPECT_EQ(std::fopen((fresh + "/trace.tsv").c_str(), "r"), nullptr) << "dry contexts trace";

  const std::string user = root + "/a/b/mine.txt";
  std::FILE *f = std::fopen(user.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("keep me", f);
  std::fclose(f);
  EXPECT_EQ(kiln_rt_set_trace(d.ctx, fresh.c_str()), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("is not empty"), std::string::npos) << lastError();
  EXPECT_EQ(kiln_rt_set_trace(d.ctx, user.c_str()), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("is not a directory"), std::string::npos) << lastError();
  EXPECT_EQ(kiln_rt_set_trace(d.ctx, ""), KILN_OK);
  EXPECT_EQ(kiln_rt_set_trace(d.ctx, nullptr), KILN_OK);
  f = std::fopen(user.c_str(), "r");
  ASSERT_NE(f, nullptr);
  char text[16] = {};
  EXPECT_NE(std::fgets(text, sizeof text, f), nullptr);
  std::fclose(f);
  EXPECT_STREQ(text, "keep me");
  std::remove(user.c_str());
  std::remove(fresh.c_str());
  std::remove((root + "/a").c_str());
  std::remove(root.c_str());
}

// attention(layer, kv offset, ...) with the tiny shapes.
int32_t attend(Dry &d, int layer, uint64_t kvOffset, int tokens, int32_t decodeKernel,
               int32_t prefillKernel, int32_t spec, int headDim = 64, int page = 16,
               int window = 0, int32_t kvDtype = KILN_RT_DTYPE_BF16) {
  return kiln_rt_attention(d.ctx, layer, kvOffset, d.a(0), d.a(1 << 20), d.a(2 << 20), nullptr,
                           d.a(3 << 20), tokens, 4, 2, headDim, page, window, decodeKernel,
                           prefillKernel, spec, 0.f, kvDtype);
}

TEST(RuntimeCpu, AttentionValidation) {
  Dry d;
  const int32_t GQA = KILN_RT_KERNEL_GQA_DECODE, FMHA = KILN_RT_KERNEL_PREFILL_FMHA;
  Step dec(KILN_RT_PHASE_DECODE, {1, 1}, {10, 20});
  auto set = [&](Step &s) { ASSERT_EQ(kiln_rt_set_batch(d.ctx, &s.b), KILN_OK) << lastError(); };
  set(dec);
  EXPECT_EQ(attend(d, 0, 0, 2, GQA, FMHA, KILN_RT_SINGLE_TOKEN), KILN_OK) << lastError();
  EXPECT_EQ(attend(d, 1, kPool, 2, GQA, FMHA, KILN_RT_SINGLE_TOKEN), KILN_OK) << lastError();
  uint64_t off = 0, bytes = 0;
  EXPECT_EQ(kiln_rt_resource(d.ctx, 1, "kv", &off, &bytes), KILN_OK);
  EXPECT_EQ(off, kPool);
  EXPECT_EQ(bytes, kPool);
  {
    // An f8E4M3FN pool takes one byte an element: half the bf16 pool.
    Dry f8;
    ASSERT_EQ(kiln_rt_set_batch(f8.ctx, &dec.b), KILN_OK) << lastError();
    EXPECT_EQ(attend(f8, 0, 0, 2, GQA, FMHA, KILN_RT_SINGLE_TOKEN, 64, 16, 0,
                     KILN_RT_DTYPE_F8E4M3FN),
              KILN_OK)
        << lastError();
    EXPECT_EQ(kiln_rt_resource(f8.ctx, 0, "kv", &off, &bytes), KILN_OK);
    EXPECT_EQ(bytes, kPool / 2);
  }
  {
    // An f16 pool takes two bytes an element, as bf16 does, and runs in every phase on
    // gqa_decode and prefill_fmha: decode, multi-token and EXTEND_CONTEXT decode,
    // prefill and extend.
    Dry h;
    const int32_t F16 = KILN_RT_DTYPE_F16;
    ASSERT_EQ(kiln_rt_set_batch(h.ctx, &dec.b), KILN_OK) << lastError();
    EXPECT_EQ(attend(h, 0, 0, 2, GQA, FMHA, KILN_RT_SINGLE_TOKEN, 64, 16, 0, F16), KILN_OK)
        << lastError();
    EXPECT_EQ(kiln_rt_resource(h.ctx, 0, "kv", &off, &bytes), KILN_OK);
    EXPECT_EQ(off, 0u);
    EXPECT_EQ(bytes, kPool);
    // A layer's pool is one dtype: the f16 pool of layer 0 ends where layer 1's begins.
    EXPECT_EQ(attend(h, 1, kPool, 2, GQA, FMHA, KILN_RT_SINGLE_TOKEN, 64, 16, 0, F16), KILN_OK)
        << lastError();
    Step verify(KILN_RT_PHASE_DECODE, {3, 3}, {10, 20}, 3);
    ASSERT_EQ(kiln_rt_set_batch(h.ctx, &verify.b), KILN_OK) << lastError();
    EXPECT_EQ(attend(h, 0, 0, 6, GQA, FMHA, KILN_RT_MULTI_TOKEN, 64, 16, 0, F16), KILN_OK)
        << lastError();
    EXPECT_EQ(attend(h, 1, kPool, 6, GQA, FMHA, KILN_RT_EXTEND_CONTEXT, 64, 16, 0, F16), KILN_OK)
        << lastError();
    Step prompt(KILN_RT_PHASE_PREFILL, {5, 7}, {5, 7});
    ASSERT_EQ(kiln_rt_set_batch(h.ctx, &prompt.b), KILN_OK) << lastError();
    EXPECT_EQ(attend(h, 0, 0, 12, GQA, FMHA, 0, 64, 16, 0, F16), KILN_OK) << lastError();
    Step chunk(KILN_RT_PHASE_EXTEND, {2, 1}, {12, 30});
    ASSERT_EQ(kiln_rt_set_batch(h.ctx, &chunk.b), KILN_OK) << lastError();
    EXPECT_EQ(attend(h, 0, 0, 3, GQA, FMHA, 0, 64, 16, 0, F16), KILN_OK) << lastError();
    // A window reads the same pool (a sliding-window layer over an f16 cache).
    EXPECT_EQ(attend(h, 1, kPool, 3, GQA, FMHA, 0, 64, 16, 100, F16), KILN_OK) << lastError();
  }
  struct Case {
    Step *step;
    std::function<int32_t()> call;
    kiln_status_t status;
    const char *what;
  };
  Step multi(KILN_RT_PHASE_DECODE, {3, 3}, {10, 20}, 3);
  Step pre(KILN_RT_PHASE_PREFILL, {5, 7}, {5, 7});
  Step ext(KILN_RT_PHASE_EXTEND, {2, 1}, {12, 30});
  std::vector<Case> cases = {
      {&dec, [&] { return attend(d, 0, 0, 2, FMHA, FMHA, 0); }, KILN_ERROR_INVALID_ARGUMENT,
       "kiln_rt_attention (prefill_fmha): layer 0: decode_kernel 2 (prefill_fmha) cannot run "
       "attention in decode"},
      {&pre, [&] { return attend(d, 0, 0, 12, GQA, GQA, 0); }, KILN_ERROR_INVALID_ARGUMENT,
       "prefill_kernel 1 (gqa_decode) cannot run attention in prefill"},
      {&multi, [&] { return attend(d, 3, 0, 6, GQA, FMHA, KILN_RT_SINGLE_TOKEN); },
       KILN_ERROR_INVALID_ARGUMENT, "layer 3: q_len 3 > 1 but spec_dec_mode is SINGLE_TOKEN"},
      {&dec, [&] { return attend(d, 0, 0, 2, GQA, FMHA, 0, 64, 32); }, KILN_ERROR_INVALID_ARGUMENT,
       "page_size 32 != the model's page_size 16"},
      {&dec, [&] { return attend(d, 0, 0, 2, GQA, FMHA, 0, 64, 24); }, KILN_ERROR_UNSUPPORTED,
       "page_size 24 unsupported"},
      {&dec, [&] { return attend(d, 0, 0, 3, GQA, FMHA, 0); }, KILN_ERROR_INVALID_ARGUMENT,
       "tokens 3 != the step's 2 tokens"},
      {&dec, [&] { return attend(d, 0, 0, 2, GQA, FMHA, 0, 96); }, KILN_ERROR_UNSUPPORTED,
       "head_dim 96 unsupported"},
      {&pre, [&] { return attend(d, 0, 0, 12, GQA, KILN_RT_KERNEL_PREFILL_FMHA_SM90, 0, 256); },
       KILN_ERROR_UNSUPPORTED, "prefill_fmha_sm90 supports head_dim 64/128 in prefill"},
      // The wgmma prefill's d256 tiles have a kernel id of their own, for 256 only.
      {&pre,
       [&] { return attend(d, 0, 0, 12, GQA, KILN_RT_KERNEL_PREFILL_FMHA_SM90_D256, 0, 128); },
       KILN_ERROR_UNSUPPORTED, "prefill_fmha_sm90_d256 supports head_dim 256 in prefill (got 128"},
      {&ext, [&] { return attend(d, 0, 0, 3, GQA, KILN_RT_KERNEL_PREFILL_FMHA_SM90_D256, 0, 64); },
       KILN_ERROR_UNSUPPORTED, "prefill_fmha_sm90_d256 supports head_dim 256 in extend (got 64"},
      {&dec, [&] { return attend(d, 0, 0, 2, GQA, FMHA, 0, 64, 16, -1); },
       KILN_ERROR_INVALID_ARGUMENT, "window -1 < 0"},
      {&dec, [&] { return attend(d, 0, 0, 2, GQA, FMHA, 0, 64, 16, 0, KILN_RT_DTYPE_F32); },
       KILN_ERROR_UNSUPPORTED, "kv_dtype 2 (f32) unsupported (bf16, f16 or f8E4M3FN)"},
      {&dec, [&] { return attend(d, 0, 0, 2, GQA, FMHA, 0, 64, 16, 0, KILN_RT_DTYPE_I32); },
       KILN_ERROR_UNSUPPORTED, "kv_dtype 3 (i32) unsupported (bf16, f16 or f8E4M3FN)"},
      // The wgmma prefill reads bf16 pools only: in PREFILL (the phase's kernel is the
      // same one that EXTEND runs over the pool) and EXTEND, f16 is refused by name.
      {&pre,
       [&] {
         return attend(d, 0, 0, 12, GQA, KILN_RT_KERNEL_PREFILL_FMHA_SM90, 0, 64, 16, 0,
                       KILN_RT_DTYPE_F16);
       },
       KILN_ERROR_UNSUPPORTED,
       "kiln_rt_attention (prefill_fmha_sm90): layer 0: prefill_fmha_sm90 reads bf16 caches "
       "only (the activations' dtype); an f16 pool needs prefill_fmha"},
      {&ext,
       [&] {
         return attend(d, 0, 0, 3, GQA, KILN_RT_KERNEL_PREFILL_FMHA_SM90, 0, 64, 16, 0,
                       KILN_RT_DTYPE_F16);
       },
       KILN_ERROR_UNSUPPORTED, "an f16 pool needs prefill_fmha"},
      // A decode step's EXTEND_CONTEXT runs the prefill kernel over the pool too.
      {&multi,
       [&] {
         return attend(d, 0, 0, 6, GQA, KILN_RT_KERNEL_PREFILL_FMHA_SM90, KILN_RT_EXTEND_CONTEXT,
                       64, 16, 0, KILN_RT_DTYPE_F16);
       },
       KILN_ERROR_UNSUPPORTED, "an f16 pool needs prefill_fmha"},
      {&pre,
       [&] {
         return attend(d, 0, 0, 12, GQA, KILN_RT_KERNEL_PREFILL_FMHA_SM90, 0, 64, 16, 0,
                       KILN_RT_DTYPE_F8E4M3FN);
       },
       KILN_ERROR_UNSUPPORTED, "an f8E4M3FN pool needs prefill_fmha"},
      {&dec, [&] { return attend(d, 2, kPool + kPool / 2, 2, GQA, FMHA, 0); },
       KILN_ERROR_INVALID_ARGUMENT, "does not fit in the caches"},
      {&dec, [&] { return attend(d, 2, kPool / 2, 2, GQA, FMHA, 0); }, KILN_ERROR_INVALID_ARGUMENT,
       "overlaps layer 0's kv"},
      {&dec, [&] { return attend(d, 2, 8, 2, GQA, FMHA, 0); }, KILN_ERROR_INVALID_ARGUMENT,
       "not 16-byte aligned"},
      {&dec, [&] { return attend(d, 0, 0, 2, GQA, FMHA, 7); }, KILN_ERROR_INVALID_ARGUMENT,
       "spec_dec_mode 7 unknown"},
      {&dec,
       [&] {
         return kiln_rt_attention(d.ctx, 0, 0, d.a(8), d.a(1 << 20), d.a(2 << 20), nullptr,
                                  d.a(3 << 20), 2, 4, 2, 64, 16, 0, GQA, FMHA, 0, 0.f,
                                  KILN_RT_DTYPE_BF16);
       },
       KILN_ERROR_INVALID_ARGUMENT, "q ("},
      {&dec,
       [&] {
         return kiln_rt_attention(d.ctx, 0, 0, d.a(), d.a(1 << 20), d.a(2 << 20), nullptr, d.w(), 2,
                                  4, 2, 64, 16, 0, GQA, FMHA, 0, 0.f, KILN_RT_DTYPE_BF16);
       },
       KILN_ERROR_INVALID_ARGUMENT, "is an output"},
      {&dec,
       [&] {
         return kiln_rt_attention(d.ctx, 0, 0, d.a(), d.a(1 << 20), d.a(2 << 20), nullptr,
                                  d.a(3 << 20), 2, 68, 2, 64, 16, 0, GQA, FMHA, 0, 0.f,
                                  KILN_RT_DTYPE_BF16);
       },
       KILN_ERROR_UNSUPPORTED, "1..16 query heads per KV head"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.what);
    set(*c.step);
    EXPECT_EQ(c.call(), c.status);
    EXPECT_NE(lastError().find(c.what), std::string::npos) << lastError();
  }
  // Valid: multi-token decode, EXTEND_CONTEXT decode, prefill, extend.
  set(multi);
  EXPECT_EQ(attend(d, 0, 0, 6, GQA, FMHA, KILN_RT_MULTI_TOKEN), KILN_OK) << lastError();
  EXPECT_EQ(attend(d, 1, kPool, 6, GQA, FMHA, KILN_RT_EXTEND_CONTEXT), KILN_OK) << lastError();
  set(pre);
  EXPECT_EQ(attend(d, 0, 0, 12, GQA, KILN_RT_KERNEL_PREFILL_FMHA_SM90, 0), KILN_OK)
      << lastError();
  set(ext);
  EXPECT_EQ(attend(d, 0, 0, 3, GQA, FMHA, 0), KILN_OK) << lastError();
  {
    // head_dim 256 (Qwen3-Next's full attention): prefill and extend on prefill_fmha and
    // on the wgmma prefill's d256 variant, in a pool of 256-wide heads; the wgmma one
    // refuses an f16 pool as the d64/d128 one does.
    kiln_rt_config_t wideConfig = tinyConfig();
    wideConfig.cache_bytes = 4 * kPool;
    Dry wide(wideConfig);
    const int32_t D256 = KILN_RT_KERNEL_PREFILL_FMHA_SM90_D256;
    for (auto [step, tokens] : {std::pair{&pre, 12}, std::pair{&ext, 3}}) {
      ASSERT_EQ(kiln_rt_set_batch(wide.ctx, &step->b), KILN_OK) << lastError();
      EXPECT_EQ(attend(wide, 0, 0, tokens, GQA, FMHA, 0, 256), KILN_OK) << lastError();
      EXPECT_EQ(attend(wide, 0, 0, tokens, GQA, D256, 0, 256), KILN_OK) << lastError();
      EXPECT_EQ(attend(wide, 0, 0, tokens, GQA, D256, 0, 256, 16, 0, KILN_RT_DTYPE_F16),
                KILN_ERROR_UNSUPPORTED);
      EXPECT_NE(lastError().find("prefill_fmha_sm90_d256 reads bf16 caches only"),
                std::string::npos)
          << lastError();
    }
  }
  // Graph-op errors name the last attention layer.
  EXPECT_EQ(kiln_rt_add(d.ctx, nullptr, d.a(), d.a(), 8), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("op 2 of the extend step (after layer 0's attention)"),
            std::string::npos)
      << lastError();
}

// ---- legacy bind-based families ---------------------------------------------------------

void *fake(int i) { return reinterpret_cast<void *>(static_cast<uintptr_t>(0x1000 * (i + 1))); }

kiln_rt_config_t legacyConfig(int64_t pageSize, int64_t pages, uint64_t cacheBytes) {
  kiln_rt_config_t c = tinyConfig();
  c.page_size = pageSize;
  c.max_seq_len = 256;
  c.kv_pages = pages;
  c.cache_bytes = cacheBytes;
  c.io_bytes = kiln_rt_io_bytes(4, 256, 16, kiln_rt_max_pages_per_seq(256, pageSize), 0);
  return c;
}

TEST(RuntimeCpu, LegacyBindAndPhase) {
  kiln_rt_config_t c = legacyConfig(64, 16, 64ull << 20);
  Dry d(c);
  EXPECT_EQ(kiln_rt_bind(d.ctx, 0, nullptr, fake(0)), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kiln_rt_bind(d.ctx, -1, "q", fake(0)), KILN_ERROR_INVALID_ARGUMENT);
  // A launch without a step.
  EXPECT_EQ(kiln_rt_mla(d.ctx, 0, 0, 0, 16, 512, 64, 64, KILN_RT_KERNEL_MLA_DECODE, 0),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("no batch set"), std::string::npos) << lastError();
  // The call's phase must be the step's.
  std::vector<int32_t> q = {4, 4}, lens = {10, 20}, table(2 * 4, 0), ids(8, 1), rows = {0};
  table[4] = 1;
  const kiln_rt_batch_t b = batchOf(KILN_RT_PHASE_DECODE, q, lens, table, ids, rows);
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &b), KILN_OK) << lastError();
  for (const char *name : {"q", "latent", "out"})
    ASSERT_EQ(kiln_rt_bind(d.ctx, 0, name, fake(3)), KILN_OK);
  EXPECT_EQ(kiln_rt_mla(d.ctx, KILN_RT_PHASE_PREFILL, 0, 0, 16, 512, 64, 64,
                        KILN_RT_KERNEL_MLA_PREFILL_DECODE, 0),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("called for prefill, but the step is a decode step"),
            std::string::npos)
      << lastError();
}

TEST(RuntimeCpu, MlaAndMambaRules) {
  Dry d(legacyConfig(64, 16, 64ull << 20));
  for (const char *name : {"q", "latent", "out"})
    ASSERT_EQ(kiln_rt_bind(d.ctx, 0, name, fake(3)), KILN_OK);
  // Four sequences, q_len 4 (the old decodeBatch(4, 16, 4)).
  std::vector<int32_t> q(4, 4), lens = {20, 30, 40, 50}, table(4 * 4, 0), ids(16, 1), rows = {0};
  for (int i = 0; i < 4; ++i)
    table[i * 4] = i;
  std::vector<int32_t> slots = {3, 2, 1, 0};
  kiln_rt_batch_t b = batchOf(KILN_RT_PHASE_DECODE, q, lens, table, ids, rows);
  b.slots = slots.data();
  kiln_rt_config_t c = legacyConfig(64, 16, 64ull << 20);
  c.max_draft_len = 3;
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &b), KILN_OK) << lastError();
  EXPECT_EQ(kiln_rt_mla(d.ctx, 0, 0, 0, 16, 512, 64, 64, KILN_RT_KERNEL_MLA_DECODE_SMALL_SMEM,
                        KILN_RT_MULTI_TOKEN),
            KILN_ERROR_UNSUPPORTED);
  EXPECT_NE(lastError().find("q_len 1 only"), std::string::npos) << lastError();
  EXPECT_EQ(kiln_rt_mla(d.ctx, 0, 0, 0, 16, 512, 64, 64, KILN_RT_KERNEL_MLA_DECODE_SMALL_SMEM,
                        KILN_RT_EXTEND_CONTEXT),
            KILN_OK) << lastError();
  EXPECT_EQ(kiln_rt_mla(d.ctx, 0, 0, 0, 16, 256, 64, 64, KILN_RT_KERNEL_MLA_DECODE, 1),
            KILN_ERROR_UNSUPPORTED);
  EXPECT_EQ(kiln_rt_mla(d.ctx, 0, 0, 0, 16, 512, 64, 32, KILN_RT_KERNEL_MLA_DECODE, 1),
            KILN_ERROR_UNSUPPORTED);
  uint64_t off = 0, bytes = 0;
  EXPECT_EQ(kiln_rt_resource(d.ctx, 0, "mla_latent", &off, &bytes), KILN_OK);
  EXPECT_EQ(bytes, 16u * 64 * 576 * 2);
  // SSM: spec kernel without intermediate states; bad state size; bad dtype.
  for (const char *name : {"x", "dt", "b", "c", "out", "A"})
    ASSERT_EQ(kiln_rt_bind(d.ctx, 1, name, fake(4)), KILN_OK);
  EXPECT_EQ(kiln_rt_ssm(d.ctx, 0, 1, 8 << 20, -1, 8, 64, 128, 2, KILN_DTYPE_F32,
                        KILN_RT_KERNEL_SSM_UPDATE_SPEC),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("intermediate_offset < 0"), std::string::npos) << lastError();
  EXPECT_EQ(kiln_rt_ssm(d.ctx, 0, 1, 8 << 20, 16 << 20, 8, 64, 128, 2, KILN_DTYPE_F32,
                        KILN_RT_KERNEL_SSM_UPDATE_SPEC),
            KILN_OK) << lastError();
  EXPECT_EQ(kiln_rt_resource(d.ctx, 1, "ssm_state", &off, &bytes), KILN_OK);
  EXPECT_EQ(bytes, 4u * 8 * 64 * 128 * 4); // num_slots = max_batch = 4
  EXPECT_EQ(kiln_rt_resource(d.ctx, 1, "intermediate_ssm_state", &off, &bytes), KILN_OK);
  EXPECT_EQ(bytes, 4u * 4 * 8 * 64 * 128 * 4);
  EXPECT_EQ(kiln_rt_ssm(d.ctx, 0, 1, 8 << 20, 16 << 20, 8, 64, 96, 2, KILN_DTYPE_F32,
                        KILN_RT_KERNEL_SSM_UPDATE_SPEC),
            KILN_ERROR_UNSUPPORTED);
  EXPECT_EQ(kiln_rt_ssm(d.ctx, 0, 1, 8 << 20, 16 << 20, 8, 64, 128, 2, KILN_DTYPE_F16,
                        KILN_RT_KERNEL_SSM_UPDATE_SPEC),
            KILN_ERROR_UNSUPPORTED);
  EXPECT_EQ(kiln_rt_ssm(d.ctx, 0, 1, 8 << 20, 16 << 20, 8, 64, 128, 3, KILN_DTYPE_F32,
                        KILN_RT_KERNEL_SSM_UPDATE_SPEC),
            KILN_ERROR_INVALID_ARGUMENT);
  // q_len 4 without the spec kernel.
  EXPECT_EQ(kiln_rt_ssm(d.ctx, 0, 1, 8 << 20, -1, 8, 64, 128, 2, KILN_DTYPE_F32,
                        KILN_RT_KERNEL_SSM_UPDATE),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("needs ssm_update_spec"), std::string::npos) << lastError();
  // Conv: width 5 unsupported, prefill kernel in decode rejected.
  for (const char *name : {"conv.x", "conv.out", "conv.weight"})
    ASSERT_EQ(kiln_rt_bind(d.ctx, 1, name, fake(5)), KILN_OK);
  EXPECT_EQ(kiln_rt_conv(d.ctx, 0, 1, 40 << 20, 41 << 20, 1024, 5, 1,
                         KILN_RT_KERNEL_CONV_UPDATE_SPEC),
            KILN_ERROR_UNSUPPORTED);
  EXPECT_EQ(kiln_rt_conv(d.ctx, 0, 1, 40 << 20, 41 << 20, 1024, 4, 1,
                         KILN_RT_KERNEL_CONV_PREFILL_SEQUENTIAL),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kiln_rt_conv(d.ctx, 0, 1, 40 << 20, 41 << 20, 1024, 4, 1,
                         KILN_RT_KERNEL_CONV_UPDATE_SPEC),
            KILN_OK) << lastError();
  int32_t accepted[4] = {1, 2, 3, 4};
  EXPECT_EQ(kiln_rt_commit_accepted(d.ctx, accepted), KILN_OK) << lastError();
  int32_t bad[4] = {1, 2, 3, 5};
  EXPECT_EQ(kiln_rt_commit_accepted(d.ctx, bad), KILN_ERROR_INVALID_ARGUMENT);
  // A missing binding names the layer and tensor; optional ones may stay unbound.
  ASSERT_EQ(kiln_rt_bind(d.ctx, 1, "dt", nullptr), KILN_OK);
  EXPECT_EQ(kiln_rt_ssm(d.ctx, 0, 1, 8 << 20, 16 << 20, 8, 64, 128, 2, KILN_DTYPE_F32,
                        KILN_RT_KERNEL_SSM_UPDATE_SPEC),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kiln_rt_ssm (ssm_update_spec): layer 1: tensor 'dt' is not bound"),
            std::string::npos)
      << lastError();
  ASSERT_EQ(kiln_rt_bind(d.ctx, 1, "conv.weight", nullptr), KILN_OK);
  EXPECT_EQ(kiln_rt_conv(d.ctx, 0, 1, 40 << 20, 41 << 20, 1024, 4, 1,
                         KILN_RT_KERNEL_CONV_UPDATE_SPEC),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("layer 1: tensor 'conv.weight' (or 'weight') is not bound"),
            std::string::npos)
      << lastError();
  // Legacy calls are not sticky.
  EXPECT_EQ(kiln_rt_mla(d.ctx, 0, 0, 0, 16, 512, 64, 64, KILN_RT_KERNEL_MLA_DECODE_SMALL_SMEM,
                        KILN_RT_EXTEND_CONTEXT),
            KILN_OK) << lastError();
  (void)c;
}

TEST(RuntimeCpu, LegacyPrefill) {
  Dry d(legacyConfig(16, 64, 64ull << 20));
  for (const char *name : {"x", "dt", "b", "c", "out", "A", "conv.x", "conv.out", "conv.weight"})
    ASSERT_EQ(kiln_rt_bind(d.ctx, 0, name, fake(6)), KILN_OK);
  Step pre(KILN_RT_PHASE_PREFILL, {37, 64, 5, 100}, {37, 64, 5, 100});
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &pre.b), KILN_OK) << lastError();
  EXPECT_EQ(kiln_rt_conv(d.ctx, KILN_RT_PHASE_PREFILL, 0, 0, -1, 1024, 4, 1,
                         KILN_RT_KERNEL_CONV_PREFILL_SEQUENTIAL),
            KILN_OK) << lastError();
  EXPECT_EQ(kiln_rt_ssm(d.ctx, KILN_RT_PHASE_PREFILL, 0, 1 << 20, -1, 8, 64, 128, 2,
                        KILN_DTYPE_F32, KILN_RT_KERNEL_SSM_PREFILL_SEQUENTIAL),
            KILN_OK) << lastError();
  EXPECT_EQ(kiln_rt_ssm(d.ctx, KILN_RT_PHASE_PREFILL, 0, 1 << 20, -1, 8, 64, 128, 2,
                        KILN_DTYPE_F32, KILN_RT_KERNEL_SSM_UPDATE),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("cannot run an SSM prefill"), std::string::npos) << lastError();
}

// Tensor parallelism on a dry context: the rank is recorded without NCCL, joined once,
// and kiln_rt_all_reduce validates its ranges like every graph op.
TEST(RuntimeCpu, TensorParallelOnADryContext) {
  Dry d;
  EXPECT_EQ(kiln_rt_tp_rank(d.ctx), 0);
  EXPECT_EQ(kiln_rt_tp_ranks(d.ctx), 1);
  EXPECT_EQ(kiln_rt_set_tensor_parallel(d.ctx, 2, 2, nullptr), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("rank 2 of 2 ranks"), std::string::npos) << lastError();
  ASSERT_EQ(kiln_rt_set_tensor_parallel(d.ctx, 1, 2, nullptr), KILN_OK) << lastError();
  EXPECT_EQ(kiln_rt_tp_rank(d.ctx), 1);
  EXPECT_EQ(kiln_rt_tp_ranks(d.ctx), 2);
  EXPECT_EQ(kiln_rt_collective_bytes(d.ctx), 0u);
  EXPECT_EQ(kiln_rt_set_tensor_parallel(d.ctx, 0, 2, nullptr), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("already is rank 1 of 2"), std::string::npos) << lastError();

  Step decode(KILN_RT_PHASE_DECODE, {1, 1}, {5, 9});
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &decode.b), KILN_OK) << lastError();
  EXPECT_EQ(kiln_rt_all_reduce(d.ctx, d.a(), d.a(), 2 * 256), KILN_OK) << lastError();
  EXPECT_EQ(kiln_rt_all_reduce(d.ctx, d.a(), d.a(1), 256), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kiln_rt_all_reduce"), std::string::npos) << lastError();
  EXPECT_NE(lastError().find("out"), std::string::npos) << lastError();

  kiln_rt_clear_status(d.ctx); // errors are sticky

  // The vocabulary-parallel embedding: a rank holds 256 rows of the 512-token vocabulary.
  EXPECT_EQ(kiln_rt_embedding_rank(d.ctx, d.a(), d.w(), d.a(4096), 2, 256, 64), KILN_OK)
      << lastError();
  EXPECT_EQ(kiln_rt_embedding_rank(d.ctx, d.a(), d.w(), d.a(4096), 2, 512, 64),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("a vocabulary block of 512 rows on 2 tensor-parallel rank(s) is "
                             "not the model's vocab_size 512"),
            std::string::npos)
      << lastError();
  kiln_rt_clear_status(d.ctx);
  // The lm_head's gather: 2 rows of 256 columns a rank into [2, 512], through [2, 2, 256].
  EXPECT_EQ(kiln_rt_all_gather(d.ctx, d.a(), d.a(8192), d.a(16384), 2, 256, 2), KILN_OK)
      << lastError();
  EXPECT_EQ(kiln_rt_all_gather(d.ctx, d.a(), d.a(8192), d.a(16384), 2, 128, 4),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("the graph gathers over 4 tensor-parallel rank(s), the context is "
                             "rank 1 of 2"),
            std::string::npos)
      << lastError();
  kiln_rt_clear_status(d.ctx);
  EXPECT_EQ(kiln_rt_all_gather(d.ctx, d.a(), d.a(8192), d.a((4 << 20) - 1024), 2, 256, 2),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kiln_rt_all_gather"), std::string::npos) << lastError();
  EXPECT_NE(lastError().find("out"), std::string::npos) << lastError();
}

// Without kiln_rt_set_tensor_parallel a context is one rank: the rank form of the
// embedding holds the whole vocabulary, the gather is over one rank.
TEST(RuntimeCpu, OneRankVocabularyParallelOnADryContext) {
  Dry d;
  Step decode(KILN_RT_PHASE_DECODE, {1, 1}, {5, 9});
  ASSERT_EQ(kiln_rt_set_batch(d.ctx, &decode.b), KILN_OK) << lastError();
  EXPECT_EQ(kiln_rt_embedding_rank(d.ctx, d.a(), d.w(), d.a(4096), 2, 512, 64), KILN_OK)
      << lastError();
  EXPECT_EQ(kiln_rt_all_gather(d.ctx, d.a(), d.a(8192), d.a(16384), 2, 512, 1), KILN_OK)
      << lastError();
  EXPECT_EQ(kiln_rt_all_gather(d.ctx, d.a(), d.a(8192), d.a(16384), 2, 256, 2),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("the context is rank 0 of 1"), std::string::npos) << lastError();
}

// Where NCCL cannot be loaded, the collectives say so and name the library they tried
// (the process loads NCCL once: this is the binary's only NCCL user).
TEST(RuntimeCpu, MissingNcclIsNamed) {
  setenv("KILN_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
  kiln_rt_nccl_id_t id;
  EXPECT_EQ(kiln_rt_nccl_unique_id(&id), KILN_ERROR_UNSUPPORTED);
  EXPECT_NE(lastError().find("NCCL could not be loaded from /nonexistent/libnccl.so.2"),
            std::string::npos)
      << lastError();
  EXPECT_NE(lastError().find("KILN_NCCL_LIBRARY"), std::string::npos) << lastError();
  EXPECT_EQ(kiln_rt_nccl_unique_id(nullptr), KILN_ERROR_INVALID_ARGUMENT);
}

} // namespace
