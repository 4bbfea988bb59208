// Tensor parallelism on one GPU (issue 18's one-rank run): a context joined to a
// one-rank NCCL communicator sums over itself, so kiln_rt_all_reduce must return its
// input bit for bit, eagerly and replayed from a CUDA graph, exactly as a context without
// a communicator does; and the communicator's memory stays out of the plan's measure.
// NCCL comes from $KILN_NCCL_LIBRARY or libnccl.so.2 on the loader's path; without it the
// tests skip and say so.
#include "kiln/Runtime/Runtime.h"

#include "GpuTest.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

std::string lastError() { return kiln_last_error(); }

kiln_rt_config_t smallConfig() {
  kiln_rt_config_t c{};
  c.vocab_size = 512;
  c.max_batch = 4;
  c.max_seq_len = 256;
  c.page_size = 16;
  c.kv_pages = 16;
  c.max_step_tokens = 256;
  c.max_logit_rows = 16;
  c.max_draft_len = 0;
  c.weight_bytes = 1 << 20;
  c.cache_bytes = 1 << 20;
  c.activation_bytes = 4 << 20;
  c.workspace_bytes = kiln_rt_workspace_bytes(16, 4, 64);
  c.io_bytes = kiln_rt_io_bytes(4, 256, 16, 16, 0);
  return c;
}

// A real context with a decode step set, and bf16 values in its activations.
struct Context {
  kiln_rt_context_t *ctx = nullptr;
  std::vector<uint16_t> values;
  Context() {
    kiln_rt_config_t c = smallConfig();
    EXPECT_EQ(kiln_rt_create(0, &c, &ctx), KILN_OK) << lastError();
  }
  ~Context() { kiln_rt_destroy(ctx); }
  char *a(uint64_t off = 0) { return static_cast<char *>(kiln_rt_activations(ctx)) + off; }
  void setStep() {
    int32_t q[1] = {1}, lens[1] = {3}, table[16] = {}, ids[1] = {5}, rows[1] = {0};
    kiln_rt_batch_t b{};
    b.phase = KILN_RT_PHASE_DECODE;
    b.batch = 1;
    b.q_lens = q;
    b.seq_lens = lens;
    b.block_table = table;
    b.token_ids = ids;
    b.logit_rows = rows;
    b.num_logit_rows = 1;
    ASSERT_EQ(kiln_rt_set_batch(ctx, &b), KILN_OK) << lastError();
  }
  // n bf16 values at activations + 0 (every bit pattern but NaNs' payload matters).
  void fill(int64_t n) {
    values.resize(n);
    for (int64_t i = 0; i < n; ++i)
      values[i] = static_cast<uint16_t>((i * 40503u + 17u) & 0x7f7fu);
    ASSERT_EQ(cudaMemcpy(a(), values.data(), n * 2, cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<uint16_t> read(uint64_t off, int64_t n) {
    std::vector<uint16_t> out(n);
    EXPECT_EQ(kiln_rt_synchronize(ctx), KILN_OK) << lastError();
    EXPECT_EQ(cudaMemcpy(out.data(), a(off), n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
};

// Joins `c` as the only rank; false (and a skip message) when NCCL is not there.
bool joinOneRank(Context &c, std::string *why) {
  kiln_rt_nccl_id_t id;
  if (kiln_rt_nccl_unique_id(&id) == KILN_ERROR_UNSUPPORTED) {
    *why = lastError();
    return false;
  }
  EXPECT_EQ(kiln_rt_set_tensor_parallel(c.ctx, 0, 1, &id), KILN_OK) << lastError();
  return true;
}

constexpr int64_t kElems = 64 * 4096 + 7; // odd: no size NCCL would round
constexpr uint64_t kOutOffset = 1 << 20;

TEST(CollectivesGpu, WithoutACommunicatorAllReduceIsTheIdentity) {
  KILN_REQUIRE_GPU();
  Context c;
  c.setStep();
  c.fill(kElems);
  ASSERT_EQ(kiln_rt_all_reduce(c.ctx, c.a(), c.a(kOutOffset), kElems), KILN_OK) << lastError();
  ASSERT_EQ(kiln_rt_all_reduce(c.ctx, c.a(), c.a(), kElems), KILN_OK) << lastError();
  EXPECT_EQ(c.read(kOutOffset, kElems), c.values);
  EXPECT_EQ(c.read(0, kElems), c.values);
}

TEST(CollectivesGpu, OneRankNcclAllReduceIsBitwiseTheIdentity) {
  KILN_REQUIRE_GPU();
  Context c;
  const uint64_t usedBefore = kiln_rt_device_bytes_used(c.ctx);
  std::string why;
  if (!joinOneRank(c, &why))
    GTEST_SKIP() << "skipped: " << why;
  EXPECT_EQ(kiln_rt_tp_rank(c.ctx), 0);
  EXPECT_EQ(kiln_rt_tp_ranks(c.ctx), 1);
  std::printf("one-rank communicator: %llu bytes of device memory (kept out of the plan's "
              "measure)\n",
              static_cast<unsigned long long>(kiln_rt_collective_bytes(c.ctx)));
  c.setStep();
  c.fill(kElems);
  ASSERT_EQ(kiln_rt_all_reduce(c.ctx, c.a(), c.a(kOutOffset), kElems), KILN_OK) << lastError();
  EXPECT_EQ(c.read(kOutOffset, kElems), c.values);
  ASSERT_EQ(kiln_rt_all_reduce(c.ctx, c.a(), c.a(), kElems), KILN_OK) << lastError();
  EXPECT_EQ(c.read(0, kElems), c.values);
  // The plan's measure: what the context itself holds, before and after NCCL.
  EXPECT_EQ(kiln_rt_device_bytes_used(c.ctx), usedBefore)
      << "collective bytes " << kiln_rt_collective_bytes(c.ctx);
}

// The collective is issued on the context's stream, so a decode step's graph holds it.
TEST(CollectivesGpu, OneRankAllReduceReplaysFromACudaGraph) {
  KILN_REQUIRE_GPU();
  Context c;
  std::string why;
  if (!joinOneRank(c, &why))
    GTEST_SKIP() << "skipped: " << why;
  c.setStep();
  c.fill(kElems);
  auto stream = static_cast<cudaStream_t>(kiln_rt_stream(c.ctx));
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  int32_t status = kiln_rt_all_reduce(c.ctx, c.a(), c.a(kOutOffset), kElems);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(status, KILN_OK) << lastError();
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 2; ++replay) {
    ASSERT_EQ(cudaMemset(c.a(kOutOffset), 0xff, kElems * 2), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    EXPECT_EQ(c.read(kOutOffset, kElems), c.values) << "replay " << replay;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// kiln.all_gather over one rank (the lm_head's logits in a one-rank per-rank graph): the
// logits come back bit for bit, without a communicator (a copy) and through NCCL (an
// all-gather into the blocks, then the blocks' interleave), eagerly and from a graph.
constexpr int64_t kRows = 7, kCols = 4099; // odd: no width a copy would round
constexpr uint64_t kBlocksOffset = 2 << 20;

TEST(CollectivesGpu, OneRankAllGatherIsBitwiseTheIdentity) {
  KILN_REQUIRE_GPU();
  for (bool withNccl : {false, true}) {
    SCOPED_TRACE(withNccl ? "one-rank NCCL communicator" : "no communicator");
    Context c;
    std::string why;
    if (withNccl && !joinOneRank(c, &why))
      GTEST_SKIP() << "skipped: " << why;
    c.setStep();
    c.fill(kRows * kCols);
    ASSERT_EQ(
        kiln_rt_all_gather(c.ctx, c.a(), c.a(kBlocksOffset), c.a(kOutOffset), kRows, kCols, 1),
        KILN_OK)
        << lastError();
    EXPECT_EQ(c.read(kOutOffset, kRows * kCols), c.values);
    // The graph gathers over 2 ranks, the context is one: refused by name.
    EXPECT_EQ(
        kiln_rt_all_gather(c.ctx, c.a(), c.a(kBlocksOffset), c.a(kOutOffset), kRows, kCols / 2, 2),
        KILN_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(lastError().find("the graph gathers over 2 tensor-parallel rank(s)"),
              std::string::npos)
        << lastError();
  }
}

TEST(CollectivesGpu, OneRankAllGatherReplaysFromACudaGraph) {
  KILN_REQUIRE_GPU();
  Context c;
  std::string why;
  if (!joinOneRank(c, &why))
    GTEST_SKIP() << "skipped: " << why;
  c.setStep();
  c.fill(kRows * kCols);
  auto stream = static_cast<cudaStream_t>(kiln_rt_stream(c.ctx));
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  int32_t status =
      kiln_rt_all_gather(c.ctx, c.a(), c.a(kBlocksOffset), c.a(kOutOffset), kRows, kCols, 1);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(status, KILN_OK) << lastError();
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 2; ++replay) {
    ASSERT_EQ(cudaMemset(c.a(kOutOffset), 0xff, kRows * kCols * 2), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    EXPECT_EQ(c.read(kOutOffset, kRows * kCols), c.values) << "replay " << replay;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

} // namespace
