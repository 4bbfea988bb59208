// CPU tests (run in CI): the fp64 references against hand-computed tiny cases, and the
// launchers' argument validation, which happens before any CUDA call.
#include "MambaReference.h"
#include "kiln/Kernels/Mamba.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

using namespace kiln::reference;

namespace {

TEST(MambaReference, SsmUpdateHandComputed) {
  // Head 0: no softplus path is taken (flag off for the whole call), see second test.
  // heads 2, head_dim 1, state 2, one group; D and z on head 1 only through values.
  double state[4] = {1.0, 2.0, -1.0, 0.5};
  const double x[2] = {2.0, -1.0}, dt[2] = {0.5, 0.25}, A[2] = {-2.0, -4.0};
  const double B[2] = {1.0, -1.0}, C[2] = {0.5, 1.0}, D[2] = {1.0, 0.0};
  double out[2];
  ssmUpdateReference(2, 1, 2, 1, state, x, dt, nullptr, A, B, C, D, nullptr, false, out);
  const double e1 = std::exp(-1.0); // dA of both heads: exp(0.5*-2) = exp(0.25*-4)
  EXPECT_NEAR(state[0], 1.0 * e1 + 0.5 * 1.0 * 2.0, 1e-15);
  EXPECT_NEAR(state[1], 2.0 * e1 - 0.5 * 1.0 * 2.0, 1e-15);
  EXPECT_NEAR(state[2], -1.0 * e1 + 0.25 * 1.0 * -1.0, 1e-15);
  EXPECT_NEAR(state[3], 0.5 * e1 - 0.25 * 1.0 * -1.0, 1e-15);
  EXPECT_NEAR(out[0], 0.5 * state[0] + state[1] + 2.0, 1e-15);
  EXPECT_NEAR(out[1], 0.5 * state[2] + state[3], 1e-15);
  // Numbers: 1.36787944117, -0.26424111766, out 2.41969860292.
  EXPECT_NEAR(out[0], 2.41969860292, 1e-10);
}

TEST(MambaReference, SsmUpdateSoftplusBiasGateGroups) {
  // heads 2 in 2 groups, head_dim 1, state 1: dt' = softplus(dt + bias), out *= silu(z).
  double state[2] = {1.0, 1.0};
  const double x[2] = {1.0, 1.0}, dt[2] = {0.0, 30.0}, bias[2] = {0.0, -5.0};
  const double A[2] = {-1.0, -0.01}, B[2] = {2.0, 3.0}, C[2] = {1.0, 2.0}, D[2] = {0.5, 0.5};
  const double z[2] = {0.0, 1.0};
  double out[2];
  ssmUpdateReference(2, 1, 1, 2, state, x, dt, bias, A, B, C, D, z, true, out);
  const double d0 = std::log(2.0);  // softplus(0)
  const double d1 = 25.0;           // softplus(25) ~ 25 (> 20: identity)
  EXPECT_NEAR(state[0], std::exp(-d0) + d0 * 2.0, 1e-15);
  EXPECT_NEAR(state[1], std::exp(-0.01 * d1) + d1 * 3.0, 1e-12);
  EXPECT_EQ(out[0], 0.0); // silu(0) = 0
  const double silu1 = 1.0 / (1.0 + std::exp(-1.0));
  EXPECT_NEAR(out[1], (2.0 * state[1] + 0.5) * silu1, 1e-12);
  EXPECT_NEAR(softplusReference(1.0), std::log1p(std::exp(1.0)), 1e-15);
}

TEST(MambaReference, ConvUpdateHandComputed) {
  // width 3, two channels.
  double state[4] = {1.0, 2.0, -1.0, 0.0};
  const double x[2] = {3.0, 4.0};
  const double w[6] = {0.5, -1.0, 2.0, 1.0, 1.0, 1.0};
  const double bias[2] = {1.0, -2.0};
  double out[2];
  convUpdateReference(2, 3, state, x, w, bias, false, out);
  EXPECT_DOUBLE_EQ(out[0], 1.0 + 0.5 - 2.0 + 6.0);
  EXPECT_DOUBLE_EQ(out[1], -2.0 - 1.0 + 0.0 + 4.0);
  EXPECT_DOUBLE_EQ(state[0], 2.0);
  EXPECT_DOUBLE_EQ(state[1], 3.0);
  EXPECT_DOUBLE_EQ(state[2], 0.0);
  EXPECT_DOUBLE_EQ(state[3], 4.0);
  // SiLU, width 2, no bias: y = 2*1 + 1*3 = 5.
  double s2[1] = {1.0};
  const double x2[1] = {3.0}, w2[2] = {2.0, 1.0};
  convUpdateReference(1, 2, s2, x2, w2, nullptr, true, out);
  EXPECT_NEAR(out[0], 5.0 / (1.0 + std::exp(-5.0)), 1e-15);
  EXPECT_DOUBLE_EQ(s2[0], 3.0);
}

// ---- launcher validation (fake, aligned device addresses: never dereferenced) --------
void *fake(uintptr_t v) { return reinterpret_cast<void *>(v); }

kiln_ssm_update_params_t validSsm() {
  kiln_ssm_update_params_t p{};
  p.state = fake(0x10000);
  p.state_dtype = KILN_DTYPE_F32;
  p.num_slots = 8;
  p.batch = 4;
  p.heads = 8;
  p.head_dim = 64;
  p.state_size = 128;
  p.n_groups = 2;
  p.dtype = KILN_DTYPE_BF16;
  p.x = fake(0x20000);
  p.dt = fake(0x30000);
  p.A = static_cast<const float *>(fake(0x40000));
  p.B = fake(0x50000);
  p.C = fake(0x60000);
  p.out = fake(0x70000);
  return p;
}

void expectError(kiln_status_t got, kiln_status_t want, const char *kernel, const char *arg) {
  EXPECT_EQ(got, want) << kiln_last_error();
  std::string msg = kiln_last_error();
  EXPECT_NE(msg.find(kernel), std::string::npos) << msg;
  EXPECT_NE(msg.find(arg), std::string::npos) << msg;
}

TEST(MambaLaunchers, SsmUpdateValidation) {
  expectError(kiln_ssm_update(nullptr), KILN_ERROR_INVALID_ARGUMENT, "ssm_update", "params");
  {
    auto p = validSsm();
    p.batch = 0; // nothing to do: OK without touching the device
    EXPECT_EQ(kiln_ssm_update(&p), KILN_OK) << kiln_last_error();
  }
  struct Case {
    void (*mutate)(kiln_ssm_update_params_t &);
    kiln_status_t status;
    const char *arg;
  } cases[] = {
      {[](kiln_ssm_update_params_t &p) { p.state = nullptr; }, KILN_ERROR_INVALID_ARGUMENT, "state"},
      {[](kiln_ssm_update_params_t &p) { p.x = nullptr; }, KILN_ERROR_INVALID_ARGUMENT, "x"},
      {[](kiln_ssm_update_params_t &p) { p.dt = nullptr; }, KILN_ERROR_INVALID_ARGUMENT, "dt"},
      {[](kiln_ssm_update_params_t &p) { p.A = nullptr; }, KILN_ERROR_INVALID_ARGUMENT, "A"},
      {[](kiln_ssm_update_params_t &p) { p.B = nullptr; }, KILN_ERROR_INVALID_ARGUMENT, "B"},
      {[](kiln_ssm_update_params_t &p) { p.C = nullptr; }, KILN_ERROR_INVALID_ARGUMENT, "C"},
      {[](kiln_ssm_update_params_t &p) { p.out = nullptr; }, KILN_ERROR_INVALID_ARGUMENT, "out"},
      {[](kiln_ssm_update_params_t &p) { p.state_dtype = KILN_DTYPE_F16; }, KILN_ERROR_UNSUPPORTED, "state_dtype"},
      {[](kiln_ssm_update_params_t &p) { p.dtype = KILN_DTYPE_F32; }, KILN_ERROR_UNSUPPORTED, "dtype"},
      {[](kiln_ssm_update_params_t &p) { p.batch = -1; }, KILN_ERROR_INVALID_ARGUMENT, "batch"},
      {[](kiln_ssm_update_params_t &p) { p.batch = 70000; }, KILN_ERROR_UNSUPPORTED, "batch"},
      {[](kiln_ssm_update_params_t &p) { p.num_slots = 0; }, KILN_ERROR_INVALID_ARGUMENT, "num_slots"},
      {[](kiln_ssm_update_params_t &p) { p.heads = 0; }, KILN_ERROR_INVALID_ARGUMENT, "heads"},
      {[](kiln_ssm_update_params_t &p) { p.head_dim = 0; }, KILN_ERROR_INVALID_ARGUMENT, "head_dim"},
      {[](kiln_ssm_update_params_t &p) { p.state_size = 96; }, KILN_ERROR_UNSUPPORTED, "state_size"},
      {[](kiln_ssm_update_params_t &p) { p.state_size = -4; }, KILN_ERROR_INVALID_ARGUMENT, "state_size"},
      {[](kiln_ssm_update_params_t &p) { p.n_groups = 3; }, KILN_ERROR_INVALID_ARGUMENT, "n_groups"},
      {[](kiln_ssm_update_params_t &p) { p.n_groups = 0; }, KILN_ERROR_INVALID_ARGUMENT, "n_groups"},
      {[](kiln_ssm_update_params_t &p) { p.batch = 9; }, KILN_ERROR_INVALID_ARGUMENT, "num_slots"},
      {[](kiln_ssm_update_params_t &p) { p.state = fake(0x10004); }, KILN_ERROR_UNSUPPORTED, "state"},
      {[](kiln_ssm_update_params_t &p) { p.state_stride_dim = 130; }, KILN_ERROR_UNSUPPORTED, "state_stride_dim"},
      {[](kiln_ssm_update_params_t &p) { p.state_stride_dim = 64; }, KILN_ERROR_INVALID_ARGUMENT, "state_stride_dim"},
      {[](kiln_ssm_update_params_t &p) { p.state_stride_head = -8; }, KILN_ERROR_INVALID_ARGUMENT, "state_stride_head"},
      {[](kiln_ssm_update_params_t &p) { p.x_stride_batch = -1; }, KILN_ERROR_INVALID_ARGUMENT, "x_stride_batch"},
      {[](kiln_ssm_update_params_t &p) { p.out_stride_head = -1; }, KILN_ERROR_INVALID_ARGUMENT, "out_stride_head"},
  };
  for (const Case &c : cases) {
    auto p = validSsm();
    c.mutate(p);
    SCOPED_TRACE(c.arg);
    expectError(kiln_ssm_update(&p), c.status, "ssm_update", c.arg);
  }
}

// validSsm()'s fields in a multi-token launcher's params (4 tokens a sequence).
template <typename Params> Params multiTokenSsm() {
  Params p{};
  auto s = validSsm();
  p.state = s.state;
  p.state_dtype = s.state_dtype;
  p.num_slots = s.num_slots;
  p.batch = s.batch;
  p.num_tokens = 4;
  p.heads = s.heads;
  p.head_dim = s.head_dim;
  p.state_size = s.state_size;
  p.n_groups = s.n_groups;
  p.dtype = s.dtype;
  p.x = s.x;
  p.dt = s.dt;
  p.A = s.A;
  p.B = s.B;
  p.C = s.C;
  p.out = s.out;
  return p;
}

kiln_ssm_update_spec_params_t validSsmSpec() {
  auto p = multiTokenSsm<kiln_ssm_update_spec_params_t>();
  p.intermediate = fake(0x80000);
  return p;
}

TEST(MambaLaunchers, SsmUpdateSpecValidation) {
  expectError(kiln_ssm_update_spec(nullptr), KILN_ERROR_INVALID_ARGUMENT, "ssm_update_spec",
              "params");
  struct Case {
    void (*mutate)(kiln_ssm_update_spec_params_t &);
    kiln_status_t status;
    const char *arg;
  } cases[] = {
      {[](kiln_ssm_update_spec_params_t &p) { p.intermediate = nullptr; }, KILN_ERROR_INVALID_ARGUMENT, "intermediate"},
      {[](kiln_ssm_update_spec_params_t &p) { p.intermediate = fake(0x80008); }, KILN_ERROR_UNSUPPORTED, "intermediate"},
      {[](kiln_ssm_update_spec_params_t &p) { p.num_tokens = 0; }, KILN_ERROR_INVALID_ARGUMENT, "num_tokens"},
      {[](kiln_ssm_update_spec_params_t &p) { p.num_tokens = 65; }, KILN_ERROR_UNSUPPORTED, "num_tokens"},
      {[](kiln_ssm_update_spec_params_t &p) { p.state = nullptr; }, KILN_ERROR_INVALID_ARGUMENT, "state"},
      {[](kiln_ssm_update_spec_params_t &p) { p.inter_stride_token = 3; }, KILN_ERROR_UNSUPPORTED, "inter_stride_token"},
      {[](kiln_ssm_update_spec_params_t &p) { p.inter_stride_dim = 100; }, KILN_ERROR_INVALID_ARGUMENT, "inter_stride_dim"},
      {[](kiln_ssm_update_spec_params_t &p) { p.x_stride_token = -2; }, KILN_ERROR_INVALID_ARGUMENT, "x_stride_token"},
      {[](kiln_ssm_update_spec_params_t &p) { p.dt_stride_token = -2; }, KILN_ERROR_INVALID_ARGUMENT, "dt_stride_token"},
      {[](kiln_ssm_update_spec_params_t &p) { p.state_size = 32; }, KILN_ERROR_UNSUPPORTED, "state_size"},
  };
  for (const Case &c : cases) {
    auto p = validSsmSpec();
    c.mutate(p);
    SCOPED_TRACE(c.arg);
    expectError(kiln_ssm_update_spec(&p), c.status, "ssm_update_spec", c.arg);
  }
  auto p = validSsmSpec();
  p.batch = 0;
  EXPECT_EQ(kiln_ssm_update_spec(&p), KILN_OK) << kiln_last_error();
}

kiln_ssm_update_replay_params_t validSsmReplay() {
  auto p = multiTokenSsm<kiln_ssm_update_replay_params_t>();
  p.replay = static_cast<const int32_t *>(fake(0x90000));
  p.replay_x = fake(0xa0000);
  p.replay_B = fake(0xb0000);
  p.replay_dt = static_cast<float *>(fake(0xc0000));
  p.max_tokens = 4;
  return p;
}

TEST(MambaLaunchers, SsmUpdateReplayValidation) {
  expectError(kiln_ssm_update_replay(nullptr), KILN_ERROR_INVALID_ARGUMENT,
              "ssm_update_replay", "params");
  struct Case {
    void (*mutate)(kiln_ssm_update_replay_params_t &);
    kiln_status_t status;
    const char *arg;
  } cases[] = {
      {[](kiln_ssm_update_replay_params_t &p) { p.replay = nullptr; }, KILN_ERROR_INVALID_ARGUMENT, "replay"},
      {[](kiln_ssm_update_replay_params_t &p) { p.replay_x = nullptr; }, KILN_ERROR_INVALID_ARGUMENT, "replay_x"},
      {[](kiln_ssm_update_replay_params_t &p) { p.replay_B = nullptr; }, KILN_ERROR_INVALID_ARGUMENT, "replay_B"},
      {[](kiln_ssm_update_replay_params_t &p) { p.replay_dt = nullptr; }, KILN_ERROR_INVALID_ARGUMENT, "replay_dt"},
      {[](kiln_ssm_update_replay_params_t &p) { p.max_tokens = 0; }, KILN_ERROR_INVALID_ARGUMENT, "max_tokens"},
      {[](kiln_ssm_update_replay_params_t &p) { p.max_tokens = 65; }, KILN_ERROR_UNSUPPORTED, "max_tokens"},
      // Speculative tokens must fit a replay buffer; a step of none must commit.
      {[](kiln_ssm_update_replay_params_t &p) { p.num_tokens = 5; }, KILN_ERROR_INVALID_ARGUMENT, "fit a replay buffer"},
      {[](kiln_ssm_update_replay_params_t &p) { p.num_tokens = 0; }, KILN_ERROR_INVALID_ARGUMENT, "with commit set"},
      {[](kiln_ssm_update_replay_params_t &p) { p.num_tokens = -1; }, KILN_ERROR_INVALID_ARGUMENT, "num_tokens -1"},
      {[](kiln_ssm_update_replay_params_t &p) { p.x = nullptr; }, KILN_ERROR_INVALID_ARGUMENT, "x"},
      {[](kiln_ssm_update_replay_params_t &p) { p.state = fake(0x10008); }, KILN_ERROR_UNSUPPORTED, "state"},
      {[](kiln_ssm_update_replay_params_t &p) { p.state_stride_dim = 64; }, KILN_ERROR_INVALID_ARGUMENT, "state_stride_dim"},
      {[](kiln_ssm_update_replay_params_t &p) { p.B_stride_token = -2; }, KILN_ERROR_INVALID_ARGUMENT, "B_stride_token"},
  };
  for (const Case &c : cases) {
    auto p = validSsmReplay();
    c.mutate(p);
    SCOPED_TRACE(c.arg);
    expectError(kiln_ssm_update_replay(&p), c.status, "ssm_update_replay", c.arg);
  }
  // A committing step may outgrow the buffers (its tokens are not kept), and a fold of
  // the pending tokens alone needs no activations.
  auto commit = validSsmReplay();
  commit.commit = 1;
  commit.num_tokens = 5;
  commit.batch = 0;
  EXPECT_EQ(kiln_ssm_update_replay(&commit), KILN_OK) << kiln_last_error();
  auto fold = validSsmReplay();
  fold.commit = 1;
  fold.num_tokens = 0;
  fold.x = fold.dt = fold.B = fold.C = nullptr;
  fold.out = nullptr;
  fold.batch = 0;
  EXPECT_EQ(kiln_ssm_update_replay(&fold), KILN_OK) << kiln_last_error();
}

kiln_conv_update_params_t validConv() {
  kiln_conv_update_params_t p{};
  p.state = fake(0x10000);
  p.state_dtype = KILN_DTYPE_BF16;
  p.num_slots = 8;
  p.batch = 4;
  p.conv_dim = 1024;
  p.width = 4;
  p.dtype = KILN_DTYPE_BF16;
  p.x = fake(0x20000);
  p.weight = fake(0x30000);
  p.bias = fake(0x40000);
  p.out = fake(0x50000);
  p.silu = 1;
  return p;
}

TEST(MambaLaunchers, ConvUpdateValidation) {
  expectError(kiln_conv_update(nullptr), KILN_ERROR_INVALID_ARGUMENT, "conv_update", "params");
  struct Case {
    void (*mutate)(kiln_conv_update_params_t &);
    kiln_status_t status;
    const char *arg;
  } cases[] = {
      {[](kiln_conv_update_params_t &p) { p.state = nullptr; }, KILN_ERROR_INVALID_ARGUMENT, "state"},
      {[](kiln_conv_update_params_t &p) { p.x = nullptr; }, KILN_ERROR_INVALID_ARGUMENT, "x"},
      {[](kiln_conv_update_params_t &p) { p.weight = nullptr; }, KILN_ERROR_INVALID_ARGUMENT, "weight"},
      {[](kiln_conv_update_params_t &p) { p.out = nullptr; }, KILN_ERROR_INVALID_ARGUMENT, "out"},
      {[](kiln_conv_update_params_t &p) { p.width = 5; }, KILN_ERROR_UNSUPPORTED, "width"},
      {[](kiln_conv_update_params_t &p) { p.width = 1; }, KILN_ERROR_UNSUPPORTED, "width"},
      {[](kiln_conv_update_params_t &p) { p.conv_dim = 1020; }, KILN_ERROR_UNSUPPORTED, "conv_dim"},
      {[](kiln_conv_update_params_t &p) { p.conv_dim = 0; }, KILN_ERROR_INVALID_ARGUMENT, "conv_dim"},
      {[](kiln_conv_update_params_t &p) { p.dtype = KILN_DTYPE_F32; }, KILN_ERROR_UNSUPPORTED, "dtype"},
      {[](kiln_conv_update_params_t &p) { p.state_dtype = KILN_DTYPE_F16; }, KILN_ERROR_UNSUPPORTED, "state_dtype"},
      {[](kiln_conv_update_params_t &p) { p.batch = -3; }, KILN_ERROR_INVALID_ARGUMENT, "batch"},
      {[](kiln_conv_update_params_t &p) { p.num_slots = -1; }, KILN_ERROR_INVALID_ARGUMENT, "num_slots"},
      {[](kiln_conv_update_params_t &p) { p.bias = fake(0x40002); }, KILN_ERROR_UNSUPPORTED, "bias"},
      {[](kiln_conv_update_params_t &p) { p.x_stride_batch = 1028; }, KILN_ERROR_UNSUPPORTED, "x_stride_batch"},
      {[](kiln_conv_update_params_t &p) { p.state_stride_slot = -1; }, KILN_ERROR_INVALID_ARGUMENT, "state_stride_slot"},
      {[](kiln_conv_update_params_t &p) { p.batch = 9; }, KILN_ERROR_INVALID_ARGUMENT, "num_slots"},
  };
  for (const Case &c : cases) {
    auto p = validConv();
    c.mutate(p);
    SCOPED_TRACE(c.arg);
    expectError(kiln_conv_update(&p), c.status, "conv_update", c.arg);
  }
  auto p = validConv();
  p.batch = 0;
  EXPECT_EQ(kiln_conv_update(&p), KILN_OK) << kiln_last_error();
}

TEST(MambaLaunchers, ConvUpdateSpecValidation) {
  expectError(kiln_conv_update_spec(nullptr), KILN_ERROR_INVALID_ARGUMENT, "conv_update_spec",
              "params");
  auto base = validConv();
  kiln_conv_update_spec_params_t p{};
  p.state = base.state;
  p.state_dtype = base.state_dtype;
  p.num_slots = base.num_slots;
  p.intermediate = fake(0x90000);
  p.batch = base.batch;
  p.num_tokens = 4;
  p.conv_dim = base.conv_dim;
  p.width = base.width;
  p.dtype = base.dtype;
  p.x = base.x;
  p.weight = base.weight;
  p.bias = base.bias;
  p.out = base.out;
  auto q = p;
  q.intermediate = nullptr;
  expectError(kiln_conv_update_spec(&q), KILN_ERROR_INVALID_ARGUMENT, "conv_update_spec",
              "intermediate");
  q = p;
  q.num_tokens = 0;
  expectError(kiln_conv_update_spec(&q), KILN_ERROR_INVALID_ARGUMENT, "conv_update_spec",
              "num_tokens");
  q = p;
  q.inter_stride_token = 1;
  expectError(kiln_conv_update_spec(&q), KILN_ERROR_UNSUPPORTED, "conv_update_spec",
              "inter_stride_token");
  q = p;
  q.x_stride_token = 4;
  expectError(kiln_conv_update_spec(&q), KILN_ERROR_UNSUPPORTED, "conv_update_spec",
              "x_stride_token");
  q = p;
  q.batch = 0;
  EXPECT_EQ(kiln_conv_update_spec(&q), KILN_OK) << kiln_last_error();
}

kiln_ssm_chunk_scan_params_t validChunkScan() {
  kiln_ssm_chunk_scan_params_t p{};
  p.state = fake(0x10000);
  p.state_dtype = KILN_DTYPE_F32;
  p.num_slots = 8;
  p.cu_seqlens = static_cast<const int32_t *>(fake(0x80000));
  p.batch = 4;
  p.heads = 8;
  p.head_dim = 64;
  p.state_size = 128;
  p.n_groups = 2;
  p.dtype = KILN_DTYPE_BF16;
  p.x = fake(0x20000);
  p.dt = fake(0x30000);
  p.A = static_cast<const float *>(fake(0x40000));
  p.B = fake(0x50000);
  p.C = fake(0x60000);
  p.out = fake(0x70000);
  return p;
}

// Every argument checked before any CUDA call (the addresses are never dereferenced).
TEST(MambaLaunchers, SsmChunkScanValidation) {
  expectError(kiln_ssm_chunk_scan(nullptr), KILN_ERROR_INVALID_ARGUMENT, "ssm_chunk_scan",
              "params");
  struct Case {
    void (*mutate)(kiln_ssm_chunk_scan_params_t &);
    kiln_status_t status;
    const char *arg;
  } cases[] = {
      {[](kiln_ssm_chunk_scan_params_t &p) { p.cu_seqlens = nullptr; }, KILN_ERROR_INVALID_ARGUMENT, "cu_seqlens"},
      {[](kiln_ssm_chunk_scan_params_t &p) { p.cu_seqlens = static_cast<const int32_t *>(fake(0x80002)); }, KILN_ERROR_INVALID_ARGUMENT, "cu_seqlens"},
      {[](kiln_ssm_chunk_scan_params_t &p) { p.state = nullptr; }, KILN_ERROR_INVALID_ARGUMENT, "state"},
      {[](kiln_ssm_chunk_scan_params_t &p) { p.out = nullptr; }, KILN_ERROR_INVALID_ARGUMENT, "out"},
      {[](kiln_ssm_chunk_scan_params_t &p) { p.state_size = 96; }, KILN_ERROR_UNSUPPORTED, "state_size"},
      {[](kiln_ssm_chunk_scan_params_t &p) { p.n_groups = 3; }, KILN_ERROR_INVALID_ARGUMENT, "n_groups"},
      {[](kiln_ssm_chunk_scan_params_t &p) { p.dtype = KILN_DTYPE_F32; }, KILN_ERROR_UNSUPPORTED, "dtype"},
      {[](kiln_ssm_chunk_scan_params_t &p) { p.x_stride_token = -1; }, KILN_ERROR_INVALID_ARGUMENT, "x_stride_token"},
      {[](kiln_ssm_chunk_scan_params_t &p) { p.state_stride_dim = 64; }, KILN_ERROR_INVALID_ARGUMENT, "state strides"},
      {[](kiln_ssm_chunk_scan_params_t &p) { p.batch = 9; }, KILN_ERROR_INVALID_ARGUMENT, "num_slots"},
  };
  for (const Case &c : cases) {
    auto p = validChunkScan();
    c.mutate(p);
    SCOPED_TRACE(c.arg);
    expectError(kiln_ssm_chunk_scan(&p), c.status, "ssm_chunk_scan", c.arg);
  }
  auto p = validChunkScan();
  p.batch = 0;
  EXPECT_EQ(kiln_ssm_chunk_scan(&p), KILN_OK) << kiln_last_error();
}

TEST(MambaLaunchers, ConvPrefillValidation) {
  expectError(kiln_conv_prefill(nullptr), KILN_ERROR_INVALID_ARGUMENT, "conv_prefill", "params");
  auto valid = [] {
    kiln_conv_prefill_params_t p{};
    p.state = fake(0x10000);
    p.state_dtype = KILN_DTYPE_BF16;
    p.num_slots = 8;
    p.cu_seqlens = static_cast<const int32_t *>(fake(0x80000));
    p.batch = 4;
    p.conv_dim = 1024;
    p.width = 4;
    p.max_tokens = 100;
    p.dtype = KILN_DTYPE_BF16;
    p.x = fake(0x20000);
    p.weight = fake(0x30000);
    p.out = fake(0x50000);
    return p;
  };
  struct Case {
    void (*mutate)(kiln_conv_prefill_params_t &);
    kiln_status_t status;
    const char *arg;
  } cases[] = {
      {[](kiln_conv_prefill_params_t &p) { p.cu_seqlens = nullptr; }, KILN_ERROR_INVALID_ARGUMENT, "cu_seqlens"},
      {[](kiln_conv_prefill_params_t &p) { p.max_tokens = -1; }, KILN_ERROR_INVALID_ARGUMENT, "max_tokens"},
      {[](kiln_conv_prefill_params_t &p) { p.width = 5; }, KILN_ERROR_UNSUPPORTED, "width"},
      {[](kiln_conv_prefill_params_t &p) { p.conv_dim = 1020; }, KILN_ERROR_UNSUPPORTED, "conv_dim"},
      {[](kiln_conv_prefill_params_t &p) { p.weight = nullptr; }, KILN_ERROR_INVALID_ARGUMENT, "weight"},
      {[](kiln_conv_prefill_params_t &p) { p.x_stride_token = -2; }, KILN_ERROR_INVALID_ARGUMENT, "x_stride_token"},
      {[](kiln_conv_prefill_params_t &p) { p.state_dtype = KILN_DTYPE_F16; }, KILN_ERROR_UNSUPPORTED, "state_dtype"},
  };
  for (const Case &c : cases) {
    auto p = valid();
    c.mutate(p);
    SCOPED_TRACE(c.arg);
    expectError(kiln_conv_prefill(&p), c.status, "conv_prefill", c.arg);
  }
  auto p = valid();
  p.max_tokens = 0;
  EXPECT_EQ(kiln_conv_prefill(&p), KILN_OK) << kiln_last_error();
}

} // namespace
