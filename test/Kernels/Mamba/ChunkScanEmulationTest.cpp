// CPU test (runs in CI): the tensor-core ssm_chunk_scan kernel (ChunkScanMma.cuh) run on
// the host, one CTA at a time, by the CTA emulator (Common/CtaEmulator.h), against the fp64
// token-by-token reference at MambaGpuTest's tolerances. Without a GPU this checks the
// kernel's fragment layouts (ldmatrix addresses, mma operand packing), its barriers and
// cp.async pipeline (under random warp schedules), its padding logic (partial chunks,
// padding sequences, strides) and that its ldmatrix loads are free of bank conflicts.
// The first four cases are MambaGpuTest.SsmChunkScanMatchesTokenByToken's tensor-core
// ones: the same shapes, lengths and seeds, hence the same data.
#include "CtaEmulator.h" // first: ChunkScanMma.cuh takes its device primitives from it

#include "ChunkScanMma.cuh"
#include "MambaReference.h"
#include "MambaTestUtil.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace kiln::test;
using kiln::kernels::mamba::ChunkScanArgs;
using kiln::test::emu::CtaEmulator;

namespace {

struct EmuCase {
  kiln_dtype_t state;
  int heads, headDim, stateSize, groups;
  std::vector<int> lengths;
  int padIndex = 1; // the padding sequence (slot -1); -1: none
  // Extra elements after every token row of x, dt, B, out (C: twice as many, so that B
  // and C differ in stride) and every row, head and slot of the state: poisoned, and to
  // be neither read nor written.
  int pad = 0;
};

// Element offsets of the case's tensors.
struct Layout {
  int slots, heads, headDim, stateSize;
  int64_t xToken, dtToken, bToken, cToken, yToken, stDim, stHead, stSlot;
  Layout(const EmuCase &c, int slots)
      : slots(slots), heads(c.heads), headDim(c.headDim), stateSize(c.stateSize) {
    const int H = c.heads, P = c.headDim, N = c.stateSize, G = c.groups, pad = c.pad;
    xToken = int64_t(H) * P + pad;
    dtToken = H + pad;
    bToken = int64_t(G) * N + pad;
    cToken = int64_t(G) * N + 2 * pad;
    yToken = int64_t(H) * P + pad;
    stDim = N + pad;
    stHead = P * stDim + pad;
    stSlot = H * stHead + pad;
  }
  // f(slot, packed index, strided index) for every state value, in packed order.
  template <typename F> void forEachState(F &&f) const {
    size_t packed = 0;
    for (int s = 0; s < slots; ++s)
      for (int h = 0; h < heads; ++h)
        for (int p = 0; p < headDim; ++p)
          for (int n = 0; n < stateSize; ++n)
            f(s, packed++, size_t(s * stSlot + h * stHead + p * stDim + n));
  }
};

HostTensor poisoned(kiln_dtype_t dtype, int64_t count) {
  HostTensor t(dtype, size_t(std::max<int64_t>(count, 1)));
  std::fill(t.bytes.begin(), t.bytes.end(), 0xFF);
  return t;
}

// `rows` rows of `stride` elements whose first `width` are random, the rest poisoned
// (drawn in row order: without padding, what Rng::fill draws).
HostTensor randomRows(Rng &rng, kiln_dtype_t dtype, int64_t rows, int64_t width, int64_t stride,
                      double lo, double hi) {
  HostTensor t = poisoned(dtype, rows * stride);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < width; ++i)
      t.set(size_t(r * stride + i), rng.uniform(lo, hi));
  return t;
}

bool isPoison(const HostTensor &t, size_t i) {
  for (size_t b = 0; b < t.elemBytes(); ++b)
    if (t.bytes[i * t.elemBytes() + b] != 0xFF)
      return false;
  return true;
}

// The tensor-core kernel for head rows in CTAs of Slice rows, over the case's grid.
template <int Slice, int N, typename StateT>
void emulateGrid(const ChunkScanArgs &a, int slices, uint64_t seed) {
  using namespace kiln::kernels::mamba;
  CtaEmulator cta(kMmaThreads, MmaScanSmem<Slice, N>::bytes, seed);
  for (int z = 0; z < slices; ++z)
    for (int b = 0; b < a.batch; ++b)
      for (int h = 0; h < a.heads; ++h) {
        const uint3 block{unsigned(h), unsigned(b), unsigned(z)};
        ASSERT_TRUE(cta.run(block, [&] {
          chunkScanMmaCta<Slice, N, StateT>(a, a.cuSeqlens, cta.shared());
        })) << cta.error();
      }
  EXPECT_EQ(cta.bankConflicts(), 0) << "of " << cta.ldmatrixPhases() << " ldmatrix phases";
}

template <int Slice, int N> void runCase(const EmuCase &c, uint64_t seed) {
  ASSERT_EQ(c.stateSize, N);
  ASSERT_EQ(c.headDim % Slice, 0);
  const auto start = std::chrono::steady_clock::now();
  Rng rng(seed);
  const PackedPrompts pp = packPrompts(c.lengths, c.padIndex);
  const int T = pp.tokens(), H = c.heads, P = c.headDim, G = c.groups, slots = pp.batch();
  const Layout l(c, slots);
  // Drawn in MambaGpuTest's order.
  HostTensor x = randomRows(rng, KILN_DTYPE_BF16, T, int64_t(H) * P, l.xToken, -1, 1);
  HostTensor dt = randomRows(rng, KILN_DTYPE_BF16, T, H, l.dtToken, -3, 1);
  HostTensor B = randomRows(rng, KILN_DTYPE_BF16, T, int64_t(G) * N, l.bToken, -1, 1);
  HostTensor C = randomRows(rng, KILN_DTYPE_BF16, T, int64_t(G) * N, l.cToken, -1, 1);
  HostTensor state = poisoned(c.state, slots * l.stSlot);
  l.forEachState([&](int, size_t, size_t i) { state.set(i, rng.uniform(-0.5, 0.5)); });
  std::vector<float> aLog(H), D(H), dtBias(H);
  rng.fill(aLog, -1, 1.5);
  rng.fill(D, -1, 1);
  rng.fill(dtBias, -1, 1);
  // With a guard row after the last token.
  HostTensor out = poisoned(KILN_DTYPE_BF16, (T + 1) * l.yToken);
  const HostTensor state0 = state;

  ChunkScanArgs a{};
  a.state = state.bytes.data();
  a.stSlot = l.stSlot;
  a.stHead = l.stHead;
  a.stDim = l.stDim;
  a.numSlots = slots;
  a.indices = pp.slots.data();
  a.cuSeqlens = pp.cu.data();
  a.batch = pp.batch();
  a.heads = H;
  a.headDim = P;
  a.stateSize = N;
  a.headsPerGroup = H / G;
  a.x = x.bytes.data();
  a.dt = dt.bytes.data();
  a.B = B.bytes.data();
  a.C = C.bytes.data();
  a.xToken = l.xToken;
  a.dtToken = l.dtToken;
  a.bToken = l.bToken;
  a.cToken = l.cToken;
  a.yToken = l.yToken;
  a.dtBias = dtBias.data();
  a.A = aLog.data();
  a.D = D.data();
  a.out = out.bytes.data();
  a.dtSoftplus = 1;
  a.aIsLog = 1;
  a.dtMin = 0.01f;
  a.dtMax = 2.0f;
  // Other schedules: KILN_CTA_SCHEDULE_SEED=<n>.
  const char *scheduleSeed = std::getenv("KILN_CTA_SCHEDULE_SEED");
  const uint64_t schedule =
      seed * 7919 + (scheduleSeed ? std::strtoull(scheduleSeed, nullptr, 10) : 0);
  if (c.state == KILN_DTYPE_F32)
    emulateGrid<Slice, N, float>(a, P / Slice, schedule);
  else
    emulateGrid<Slice, N, __nv_bfloat16>(a, P / Slice, schedule);
  if (::testing::Test::HasFatalFailure())
    return;

  // The fp64 reference, token by token, from the same starting states.
  const size_t slotValues = size_t(H) * P * N;
  std::vector<double> ref(size_t(slots) * slotValues);
  l.forEachState([&](int, size_t packed, size_t i) { ref[packed] = state0.get(i); });
  const std::vector<double> aRef(aLog.begin(), aLog.end()), dRef(D.begin(), D.end()),
      biasRef(dtBias.begin(), dtBias.end());
  std::vector<double> xt(size_t(H) * P), dtt(H), bt(size_t(G) * N), ct(size_t(G) * N),
      yt(xt.size());
  auto row = [](const HostTensor &t, int64_t first, std::vector<double> &to) {
    for (size_t i = 0; i < to.size(); ++i)
      to[i] = t.get(size_t(first) + i);
  };
  // Outputs: within 2e-2 of the reference relative to max(1, |y|) (NaN is off); the
  // padding sequence's rows and every row's padding untouched.
  double worstOut = 0, worstState = 0;
  for (int b = 0; b < pp.batch(); ++b) {
    const int slot = pp.slots[b];
    int far = 0, firstFar = -1, written = 0;
    for (int t = pp.cu[b]; t < pp.cu[b + 1]; ++t) {
      for (int64_t i = slot < 0 ? 0 : int64_t(H) * P; i < l.yToken; ++i)
        written += !isPoison(out, size_t(t * l.yToken + i));
      if (slot < 0)
        continue;
      row(x, t * l.xToken, xt);
      row(dt, t * l.dtToken, dtt);
      row(B, t * l.bToken, bt);
      row(C, t * l.cToken, ct);
      kiln::reference::ssmUpdateReference(
          H, P, N, G, &ref[slot * slotValues], xt.data(), dtt.data(), biasRef.data(), aRef.data(),
          bt.data(), ct.data(), dRef.data(), nullptr, true, yt.data(), true, 0.01, 2.0);
      for (size_t i = 0; i < yt.size(); ++i) {
        const double e =
            std::fabs(out.get(size_t(t * l.yToken) + i) - yt[i]) / std::max(1.0, std::fabs(yt[i]));
        if (!(e <= 2e-2) && far++ == 0)
          firstFar = t - pp.cu[b];
        worstOut = std::max(worstOut, e);
      }
    }
    EXPECT_EQ(far, 0) << "sequence " << b << ": outputs off the reference, the first at token "
                      << firstFar;
    EXPECT_EQ(written, 0) << "sequence " << b << ": elements written outside its outputs"
                          << (slot < 0 ? " (a padding sequence)" : " (row padding)");
  }
  int pastEnd = 0;
  for (int64_t i = 0; i < l.yToken; ++i)
    pastEnd += !isPoison(out, size_t(T * l.yToken + i));
  EXPECT_EQ(pastEnd, 0) << "elements written after the last token";
  // Final states: a slot with tokens to the GPU test's tolerance; one without (a sequence
  // without tokens, or no sequence) untouched, as is the padding around the states.
  const double stateTol = c.state == KILN_DTYPE_F32 ? 2e-4 : 3e-2;
  std::vector<int> tokens(slots, 0);
  for (int b = 0; b < pp.batch(); ++b)
    if (pp.slots[b] >= 0)
      tokens[pp.slots[b]] = pp.cu[b + 1] - pp.cu[b];
  std::vector<int> far(slots, 0);
  l.forEachState([&](int s, size_t packed, size_t i) {
    const double r = ref[packed], e = std::fabs(state.get(i) - r) / std::max(1.0, std::fabs(r));
    far[s] += !(e <= stateTol);
    worstState = std::max(worstState, e);
  });
  for (int s = 0; s < slots; ++s) {
    if (tokens[s] > 0) {
      EXPECT_EQ(far[s], 0) << "slot " << s << ": final state values off the reference";
    } else {
      EXPECT_TRUE(state.sameBytes(size_t(s * l.stSlot), size_t(l.stSlot), state0))
          << "slot " << s << " changed";
    }
  }
  size_t paddingWritten = 0;
  for (size_t i = 0; i < state.count; ++i)
    paddingWritten += isPoison(state0, i) && !isPoison(state, i);
  EXPECT_EQ(paddingWritten, 0u) << "state padding elements written";
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("worst output error %.3g, worst state error %.3g, %.0f ms\n", worstOut, worstState,
              ms);
}

TEST(MambaChunkScanEmulation, HeadDim32State64) {
  runCase<32, 64>({KILN_DTYPE_F32, 8, 32, 64, 2, {130, 5, 64, 1, 200}}, 400);
}

TEST(MambaChunkScanEmulation, HeadDim80State128) {
  runCase<80, 128>({KILN_DTYPE_F32, 4, 80, 128, 1, {300, 17}}, 401);
}

// head_dim 64 in two CTAs of 32 rows.
TEST(MambaChunkScanEmulation, HeadDim64State128Bf16State) {
  runCase<32, 128>({KILN_DTYPE_BF16, 4, 64, 128, 2, {70, 3, 129}}, 402);
}

TEST(MambaChunkScanEmulation, HeadDim64State128) {
  runCase<32, 128>({KILN_DTYPE_F32, 4, 64, 128, 2, {150, 9, 70}}, 403);
}

// Padded token rows (B and C at different strides) and state rows, heads and slots; two
// heads a group; sequences of 65 tokens (a chunk and one token), 2 (padding) and 64.
TEST(MambaChunkScanEmulation, PaddedStrides) {
  runCase<32, 128>({KILN_DTYPE_F32, 2, 64, 128, 1, {65, 2, 64}, 1, 8}, 404);
}

// Sequences without tokens keep their states (bit for bit); first and last in the batch.
TEST(MambaChunkScanEmulation, EmptySequences) {
  runCase<32, 64>({KILN_DTYPE_BF16, 2, 32, 64, 1, {0, 40, 0}, -1}, 405);
}

} // namespace
