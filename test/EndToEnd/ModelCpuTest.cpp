// The serving layer (Model.h) on the hand-written tiny models loaded dry: manifest and
// info, sequence slots, page accounting, page exhaustion (all or nothing), truncate,
// chunked prefill, multi-token decode, extend, and a failing forward's message. Every
// step runs the model's kiln_model_forward on a validation-only context.
#include "kiln/Runtime/Model.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

std::string lastError() { return kiln_last_error(); }

struct Loaded {
  kiln_model_t *m = nullptr;
  explicit Loaded(const char *path) {
    EXPECT_EQ(kiln_model_load_dry(path, &m), KILN_OK) << lastError();
  }
  ~Loaded() { kiln_model_unload(m); }
  int32_t add() {
    int32_t id = -1;
    EXPECT_EQ(kiln_model_add_sequence(m, &id), KILN_OK) << lastError();
    return id;
  }
};

std::vector<int32_t> prompt(int n, int seed = 1) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i)
    p[i] = (seed * 31 + i * 7) % 512;
  return p;
}

kiln_status_t prefill(kiln_model_t *m, std::vector<int32_t> ids,
                      const std::vector<std::vector<int32_t>> &prompts,
                      std::vector<int32_t> *next = nullptr) {
  std::vector<const int32_t *> ptrs;
  std::vector<int32_t> lens, out(ids.size(), -1);
  for (const auto &p : prompts) {
    ptrs.push_back(p.data());
    lens.push_back(static_cast<int32_t>(p.size()));
  }
  kiln_status_t s = kiln_model_prefill(m, ids.data(), static_cast<int32_t>(ids.size()),
                                       ptrs.data(), lens.data(), out.data(), nullptr);
  if (next)
    *next = out;
  return s;
}

TEST(ModelCpu, LoadAndInfo) {
  Loaded t(KILN_TINY);
  ASSERT_NE(t.m, nullptr);
  kiln_model_info_t info;
  ASSERT_EQ(kiln_model_get_info(t.m, &info), KILN_OK);
  EXPECT_EQ(info.vocab_size, 512);
  EXPECT_EQ(info.num_layers, 2);
  EXPECT_EQ(info.max_batch, 8);
  EXPECT_EQ(info.kv_pages, 48);
  EXPECT_EQ(info.max_draft_len, 4);
  EXPECT_EQ(info.dry, 1);
  EXPECT_STREQ(kiln_model_name(t.m), "tiny-qwen2");
  EXPECT_EQ(std::string(kiln_model_manifest_text(t.m)).rfind("kiln-model 2\n", 0), 0u);
  const uint64_t planned = info.weight_bytes + info.cache_bytes + info.activation_bytes +
                           info.workspace_bytes + info.io_bytes;
  EXPECT_EQ(kiln_model_planned_bytes(t.m), planned);
  EXPECT_EQ(planned % (2u << 20), 0u); // the tiny model pads to cudaMalloc's granularity
  EXPECT_EQ(kiln_model_device_bytes_used(t.m), 0u);
  EXPECT_EQ(kiln_model_free_pages(t.m), 48);

  kiln_model_t *bad = nullptr;
  EXPECT_EQ(kiln_model_load_dry("/nonexistent/model.so", &bad), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kiln_model_load_dry: dlopen /nonexistent/model.so"),
            std::string::npos)
      << lastError();
  EXPECT_EQ(bad, nullptr);
  EXPECT_EQ(kiln_model_load(KILN_TINY, "/nonexistent/weights", 0, &bad) == KILN_OK, false);
  EXPECT_EQ(bad, nullptr);
}

TEST(ModelCpu, SlotsAndPages) {
  Loaded t(KILN_TINY);
  std::vector<int32_t> ids;
  for (int i = 0; i < 8; ++i)
    ids.push_back(t.add());
  for (int i = 1; i < 8; ++i)
    EXPECT_NE(ids[i], ids[i - 1]);
  EXPECT_EQ(kiln_model_live_sequences(t.m), 8);
  int32_t extra = -1;
  EXPECT_EQ(kiln_model_add_sequence(t.m, &extra), KILN_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(lastError().find("all 8 sequence slots are in use"), std::string::npos)
      << lastError();
  ASSERT_EQ(kiln_model_remove_sequence(t.m, ids[3]), KILN_OK);
  EXPECT_EQ(kiln_model_seq_len(t.m, ids[3]), -1);
  EXPECT_EQ(kiln_model_remove_sequence(t.m, ids[3]), KILN_ERROR_INVALID_ARGUMENT);
  int32_t again = t.add();
  EXPECT_NE(again, ids[3]); // ids are never reused
  ids[3] = again;

  // Prefill 40 and 200 tokens (200 > max_step_tokens 128: PREFILL + EXTEND chunks).
  auto a = prompt(40, 1), b = prompt(200, 2);
  std::vector<int32_t> next;
  ASSERT_EQ(prefill(t.m, {ids[0], ids[1]}, {a, b}, &next), KILN_OK) << lastError();
  EXPECT_EQ(next, (std::vector<int32_t>{0, 0})); // dry: greedy tokens are 0
  EXPECT_EQ(kiln_model_seq_len(t.m, ids[0]), 40);
  EXPECT_EQ(kiln_model_seq_len(t.m, ids[1]), 200);
  EXPECT_EQ(kiln_model_seq_pages(t.m, ids[0]), 3);
  EXPECT_EQ(kiln_model_seq_pages(t.m, ids[1]), 13);
  EXPECT_EQ(kiln_model_free_pages(t.m), 48 - 16);
  // Prefill only starts empty sequences.
  EXPECT_EQ(prefill(t.m, {ids[0]}, {a}), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("already holds 40 tokens"), std::string::npos) << lastError();

  // Decode: one token, then 1 + 4 drafts; q_len 6 exceeds max_draft_len 4.
  int32_t tok[2] = {5, 6}, argmax[10];
  ASSERT_EQ(kiln_model_decode(t.m, ids.data(), 2, tok, 1, argmax, nullptr), KILN_OK)
      << lastError();
  EXPECT_EQ(kiln_model_seq_len(t.m, ids[0]), 41);
  EXPECT_EQ(kiln_model_seq_len(t.m, ids[1]), 201);
  EXPECT_EQ(kiln_model_seq_pages(t.m, ids[1]), 13);
  std::vector<int32_t> five(10, 3);
  ASSERT_EQ(kiln_model_decode(t.m, ids.data(), 2, five.data(), 5, argmax, nullptr), KILN_OK)
      << lastError();
  EXPECT_EQ(kiln_model_seq_len(t.m, ids[0]), 46);
  EXPECT_EQ(kiln_model_seq_pages(t.m, ids[0]), 3);
  EXPECT_EQ(kiln_model_seq_len(t.m, ids[1]), 206);
  EXPECT_EQ(kiln_model_seq_pages(t.m, ids[1]), 13);
  std::vector<int32_t> six(12, 3);
  EXPECT_EQ(kiln_model_decode(t.m, ids.data(), 2, six.data(), 6, argmax, nullptr),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("max_draft_len 4"), std::string::npos) << lastError();
  // Duplicates and dead sequences.
  int32_t dup[2] = {ids[0], ids[0]};
  EXPECT_EQ(kiln_model_decode(t.m, dup, 2, tok, 1, argmax, nullptr), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("appears twice"), std::string::npos) << lastError();
  int32_t dead[1] = {12345};
  EXPECT_EQ(kiln_model_decode(t.m, dead, 1, tok, 1, argmax, nullptr),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("sequence 12345 (seq_ids[0]) is not live"), std::string::npos);

  // Truncate (rejected drafts): pages beyond the new length return to the free list.
  ASSERT_EQ(kiln_model_truncate(t.m, ids[1], 150), KILN_OK);
  EXPECT_EQ(kiln_model_seq_len(t.m, ids[1]), 150);
  EXPECT_EQ(kiln_model_seq_pages(t.m, ids[1]), 10);
  EXPECT_EQ(kiln_model_free_pages(t.m), 48 - 13);
  EXPECT_EQ(kiln_model_truncate(t.m, ids[1], 151), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("new_len 151 outside [0, its length 150]"), std::string::npos);

  // Extend (varlen chunks continuing the sequences).
  std::vector<int32_t> e0 = {1, 2}, e1 = {3};
  const int32_t *ext[2] = {e0.data(), e1.data()};
  int32_t lens[2] = {2, 1}, last[2];
  ASSERT_EQ(kiln_model_extend(t.m, ids.data(), 2, ext, lens, last, nullptr), KILN_OK)
      << lastError();
  EXPECT_EQ(kiln_model_seq_len(t.m, ids[0]), 48);
  EXPECT_EQ(kiln_model_seq_len(t.m, ids[1]), 151);

  // Removing a sequence returns its pages.
  ASSERT_EQ(kiln_model_remove_sequence(t.m, ids[1]), KILN_OK);
  EXPECT_EQ(kiln_model_free_pages(t.m), 48 - 3);
}

TEST(ModelCpu, PageExhaustionIsAllOrNothing) {
  Loaded t(KILN_TINY);
  std::vector<int32_t> ids;
  for (int i = 0; i < 4; ++i)
    ids.push_back(t.add());
  ASSERT_EQ(prefill(t.m, {ids[0]}, {prompt(250, 9)}), KILN_OK) << lastError();
  ASSERT_EQ(kiln_model_free_pages(t.m), 48 - 16);
  // Three 200-token prompts need 39 pages; 32 are free. The chunks of the first round
  // fit (3 x 8 pages), the second round runs out: everything is rolled back.
  auto p = prompt(200, 3);
  EXPECT_EQ(prefill(t.m, {ids[1], ids[2], ids[3]}, {p, p, p}), KILN_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(lastError().find("kiln_model_prefill: sequence"), std::string::npos) << lastError();
  EXPECT_NE(lastError().find("more KV page(s)"), std::string::npos) << lastError();
  EXPECT_NE(lastError().find("of 48 pages are free"), std::string::npos) << lastError();
  EXPECT_EQ(kiln_model_free_pages(t.m), 32);
  for (int i = 1; i < 4; ++i) {
    EXPECT_EQ(kiln_model_seq_len(t.m, ids[i]), 0);
    EXPECT_EQ(kiln_model_seq_pages(t.m, ids[i]), 0);
  }
  // Two of them fit.
  EXPECT_EQ(prefill(t.m, {ids[1], ids[2]}, {p, p}), KILN_OK) << lastError();
  EXPECT_EQ(kiln_model_free_pages(t.m), 32 - 26);
  // A sequence cannot outgrow max_seq_len.
  std::vector<int32_t> tok(7, 1);
  int32_t argmax[8];
  ASSERT_EQ(kiln_model_decode(t.m, ids.data(), 1, tok.data(), 5, argmax, nullptr), KILN_OK);
  EXPECT_EQ(kiln_model_decode(t.m, ids.data(), 1, tok.data(), 2, argmax, nullptr),
            KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("would reach 257 tokens > max_seq_len 256"), std::string::npos)
      << lastError();
  EXPECT_EQ(kiln_model_seq_len(t.m, ids[0]), 255);
}

TEST(ModelCpu, ManySequencesSplitIntoSteps) {
  Loaded t(KILN_TINY);
  std::vector<int32_t> ids;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 8; ++i) {
    ids.push_back(t.add());
    prompts.push_back(prompt(20 + i, i));
  }
  const uint64_t before = kiln_model_steps(t.m);
  ASSERT_EQ(prefill(t.m, ids, prompts), KILN_OK) << lastError();
  EXPECT_EQ(kiln_model_steps(t.m) - before, 2u); // 188 tokens > 128 per step
  // 8 sequences x q_len 5 = 40 logit rows: one step; q_len 3 x 8 = 24: one step.
  std::vector<int32_t> tok(40, 2), argmax(40);
  ASSERT_EQ(kiln_model_decode(t.m, ids.data(), 8, tok.data(), 5, argmax.data(), nullptr),
            KILN_OK) << lastError();
  EXPECT_EQ(kiln_model_steps(t.m) - before, 3u);
  std::vector<float> logits(8 * 512, -1.f);
  int32_t one[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  ASSERT_EQ(kiln_model_decode(t.m, ids.data(), 8, one, 1, argmax.data(), logits.data()),
            KILN_OK) << lastError();
  EXPECT_EQ(logits[0], 0.f); // dry: zeros
}

TEST(ModelCpu, NoSpeculationModel) {
  Loaded t(KILN_TINY_NOSPEC);
  int32_t id = t.add();
  ASSERT_EQ(prefill(t.m, {id}, {prompt(10)}), KILN_OK) << lastError();
  int32_t tok[2] = {1, 2}, argmax[2];
  EXPECT_EQ(kiln_model_decode(t.m, &id, 1, tok, 2, argmax, nullptr), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("max_draft_len 0"), std::string::npos) << lastError();
  EXPECT_EQ(kiln_model_decode(t.m, &id, 1, tok, 1, argmax, nullptr), KILN_OK) << lastError();
}

TEST(ModelCpu, FailingForwardNamesTheLayer) {
  Loaded t(KILN_TINY_BUG);
  int32_t id = t.add();
  EXPECT_EQ(prefill(t.m, {id}, {prompt(10)}), KILN_ERROR_INVALID_ARGUMENT);
  const std::string e = lastError();
  EXPECT_NE(e.find("kiln_model_prefill: prefill step of 1 sequence(s), 10 token(s): forward: "
                   "kiln_rt_attention (prefill_fmha): layer 1: window -1 < 0"),
            std::string::npos)
      << e;
  EXPECT_EQ(kiln_model_seq_len(t.m, id), 0);
  EXPECT_EQ(kiln_model_free_pages(t.m), 48);
}

} // namespace
