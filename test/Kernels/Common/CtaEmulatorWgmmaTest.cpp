// CPU test (runs in CI): the CTA emulator's Hopper wgmma (the instructions of
// lib/Kernels/Common/Wgmma.cuh). A block of two warpgroups writes a 128 x 64 A tile (64
// rows a warpgroup) and an N x 64 B tile into the emulated shared memory in the 128-byte
// swizzled layout (swizzledOffset), runs the four K16 slices of the tile through wgmma
// (swizzledDescriptor) and compares each thread's accumulator fragment with a host GEMM,
// for N = 32 and 256. The values are multiples of 1/8 in [-1, 1], so that every sum is
// exact in fp32 and the comparison is too. Then what the emulator is to catch: an operand
// overwritten between the commit and the wait (the wgmma runs at the wait, on the new
// values), accumulators touched while their wgmma is in flight, a block that exits with
// a wgmma in flight, threads of a warpgroup that issue different instructions, and a
// descriptor of a layout it does not have.
#include "CtaEmulator.h" // first: Wgmma.cuh takes its instructions from it

#include "Wgmma.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

namespace sm90 = kiln::kernels::sm90;
namespace emu = kiln::test::emu;
using emu::CtaEmulator;

constexpr int kThreads = 2 * sm90::kWarpgroupThreads;
constexpr int kARows = 64 * kThreads / sm90::kWarpgroupThreads; // 64 a warpgroup
constexpr int kK = sm90::kKBlock;                               // one K block: 4 wgmmas
constexpr uint32_t kBOffset = kARows * sm90::kSwizzleRowBytes;  // B after A
static_assert(kBOffset % sm90::kSwizzleAtomBytes == 0, "B on a swizzle atom boundary");

// A multiple of 1/8 in [-1, 1], scrambled over (row, k), so that a misplaced element
// shows up in the sums.
float tileValue(int row, int k, uint32_t salt) {
  const uint32_t h = (static_cast<uint32_t>(row) * 73856093u) ^
                     (static_cast<uint32_t>(k) * 19349663u) ^ (salt * 83492791u);
  return static_cast<float>(static_cast<int>((h >> 7) % 17) - 8) / 8;
}

std::vector<float> tile(int rows, uint32_t salt) {
  std::vector<float> t(static_cast<size_t>(rows) * kK);
  for (int r = 0; r < rows; ++r)
    for (int k = 0; k < kK; ++k)
      t[static_cast<size_t>(r) * kK + k] = tileValue(r, k, salt);
  return t;
}

// The starting accumulator of a thread's register (a multiple of 1/64).
float initialAccumulator(int thread, int reg) {
  return static_cast<float>((thread * 7 + reg * 3) % 29 - 14) / 64;
}

// Device side: the block's threads write `values` (rows x 64, row-major) as bf16 into the
// swizzled tile at `dst`, a 16-byte chunk at a time.
void writeTile(char *dst, const std::vector<float> &values, int rows) {
  for (int c = static_cast<int>(threadIdx.x); c < rows * 8; c += kThreads) {
    const int row = c / 8, chunk = c % 8;
    uint16_t bits[8];
    for (int j = 0; j < 8; ++j) // exact in bf16: the top half of the fp32
      bits[j] = static_cast<uint16_t>(
          emu::floatBits(values[static_cast<size_t>(row) * kK + chunk * 8 + j]) >> 16);
    std::memcpy(dst + sm90::swizzledOffset(row, chunk), bits, sizeof(bits));
  }
}

// How a block departs from: write the tiles, fence, four wgmmas, commit, wait, store.
enum class Twist {
  None,
  Accumulate,        // the first wgmma accumulates onto initialAccumulator (else NaN)
  TwoGroups,         // slices 0-1 and 2-3 in two groups, waited for by wait<1>, wait<0>
  OverwriteB,        // B rewritten (bSecond) between the commit and the wait
  TouchAccumulators, // a thread writes a register between the commit and the wait
  NoWait,            // exits after the commit
  NoCommit,          // exits after the issues
  MismatchedB,       // one thread's B descriptor 32 bytes off
  LinearLayout,      // descriptors of layout type 0 (no swizzle)
};

struct Operands {
  std::vector<float> a, b, bSecond;
  explicit Operands(int n) : a(tile(kARows, 1)), b(tile(n, 2)), bSecond(tile(n, 3)) {}
};

// Runs the block; `out` gets every thread's N / 2 accumulators (thread-major).
template <int N>
bool runBlock(CtaEmulator &cta, const Operands &ops, Twist twist, std::vector<float> &out) {
  constexpr int kRegs = N / 2;
  out.assign(static_cast<size_t>(kThreads) * kRegs, std::numeric_limits<float>::quiet_NaN());
  return cta.run(uint3{0, 0, 0}, [&] {
    char *smem = cta.shared();
    const int tid = static_cast<int>(threadIdx.x);
    writeTile(smem, ops.a, kARows);
    writeTile(smem + kBOffset, ops.b, N);
    __syncthreads();
    const int wg = tid / sm90::kWarpgroupThreads;
    const uint32_t a = sm90::smemAddress(smem) + wg * 64 * sm90::kSwizzleRowBytes;
    const uint32_t b = sm90::smemAddress(smem + kBOffset);
    const bool accumulate = twist == Twist::Accumulate;
    float d[kRegs];
    for (int i = 0; i < kRegs; ++i)
      d[i] = accumulate ? initialAccumulator(tid, i) : std::numeric_limits<float>::quiet_NaN();
    sm90::wgmmaFence();
    for (int s = 0; s < kK / sm90::kWgmmaK; ++s) {
      uint64_t descA = sm90::swizzledDescriptor(a, s), descB = sm90::swizzledDescriptor(b, s);
      if (twist == Twist::MismatchedB && tid == 37)
        descB += 2;
      if (twist == Twist::LinearLayout) {
        descA &= ~(uint64_t{3} << 62);
        descB &= ~(uint64_t{3} << 62);
      }
      sm90::wgmmaBf16<N>(d, descA, descB, accumulate || s > 0);
      if (twist == Twist::TwoGroups && s == 1)
        sm90::wgmmaCommit();
    }
    if (twist == Twist::NoCommit)
      return;
    sm90::wgmmaCommit();
    if (twist == Twist::NoWait)
      return;
    if (twist == Twist::OverwriteB) {
      __syncthreads(); // every warpgroup has issued before B changes
      writeTile(smem + kBOffset, ops.bSecond, N);
      __syncthreads(); // and B has changed before either waits
    }
    if (twist == Twist::TouchAccumulators && tid == 133)
      d[1] = 42.0f;
    if (twist == Twist::TwoGroups)
      sm90::wgmmaWait<1>();
    sm90::wgmmaWait<0>();
    sm90::pinAccumulators(d);
    for (int i = 0; i < kRegs; ++i)
      out[static_cast<size_t>(tid) * kRegs + i] = d[i];
  });
}

// The accumulators that differ from A . B^T (+ initialAccumulator), over the wgmma's
// fragment layout; `first` describes the first of them.
template <int N>
int countOff(const std::vector<float> &out, const Operands &ops, const std::vector<float> &b,
             bool accumulate, std::string &first) {
  constexpr int kRegs = N / 2;
  int off = 0;
  for (int tid = 0; tid < kThreads; ++tid) {
    const int wg = tid / sm90::kWarpgroupThreads, t = tid % sm90::kWarpgroupThreads;
    const int warp = t / 32, lane = t % 32;
    for (int reg = 0; reg < kRegs; ++reg) {
      const int i = reg / 4, r = reg % 4;
      const int row = 64 * wg + 16 * warp + lane / 4 + 8 * (r / 2);
      const int col = 8 * i + 2 * (lane % 4) + r % 2;
      float want = accumulate ? initialAccumulator(tid, reg) : 0.0f;
      for (int k = 0; k < kK; ++k)
        want += ops.a[static_cast<size_t>(row) * kK + k] * b[static_cast<size_t>(col) * kK + k];
      const float got = out[static_cast<size_t>(tid) * kRegs + reg];
      if (!(got == want) && off++ == 0)
        first = "thread " + std::to_string(tid) + " register " + std::to_string(reg) + " (D[" +
                std::to_string(row) + "][" + std::to_string(col) + "]): " + std::to_string(got) +
                ", want " + std::to_string(want);
    }
  }
  return off;
}

template <int N> constexpr size_t sharedBytes() {
  return kBOffset + static_cast<size_t>(N) * sm90::kSwizzleRowBytes;
}

template <int N> void expectGemm(Twist twist, uint64_t seed) {
  CtaEmulator cta(kThreads, sharedBytes<N>(), seed);
  const Operands ops(N);
  std::vector<float> out;
  ASSERT_TRUE(runBlock<N>(cta, ops, twist, out)) << cta.error();
  std::string first;
  EXPECT_EQ(countOff<N>(out, ops, ops.b, twist == Twist::Accumulate, first), 0) << first;
  EXPECT_EQ(cta.wgmmas(), 2 * kK / sm90::kWgmmaK); // four a warpgroup
}

// Runs a block that is to fail, with `message` in the error.
template <int N> void expectFailure(Twist twist, const std::string &message) {
  CtaEmulator cta(kThreads, sharedBytes<N>(), 7);
  const Operands ops(N);
  std::vector<float> out;
  EXPECT_FALSE(runBlock<N>(cta, ops, twist, out));
  EXPECT_NE(cta.error().find(message), std::string::npos) << cta.error();
}

TEST(CtaEmulatorWgmma, SharedMemoryAddresses) {
  CtaEmulator cta(sm90::kWarpgroupThreads, 4096, 1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(cta.shared()) % sm90::kSwizzleAtomBytes, 0u);
  uint32_t address = ~0u;
  ASSERT_TRUE(cta.run(uint3{0, 0, 0}, [&] {
    if (threadIdx.x == 0)
      address = sm90::smemAddress(cta.shared() + 1056);
  })) << cta.error();
  EXPECT_EQ(address, 1056u);
  int local = 0;
  EXPECT_FALSE(cta.run(uint3{0, 0, 0}, [&] { sm90::smemAddress(&local); }));
  EXPECT_NE(cta.error().find("outside the shared memory"), std::string::npos) << cta.error();
}

TEST(CtaEmulatorWgmma, N32) { expectGemm<32>(Twist::None, 1); }
TEST(CtaEmulatorWgmma, N32Accumulate) { expectGemm<32>(Twist::Accumulate, 2); }
// A group in flight while the next (on the same accumulators) is issued, as a pipelined
// kernel has it.
TEST(CtaEmulatorWgmma, N32TwoGroups) { expectGemm<32>(Twist::TwoGroups, 3); }
TEST(CtaEmulatorWgmma, N256) { expectGemm<256>(Twist::None, 4); }
TEST(CtaEmulatorWgmma, N256Accumulate) { expectGemm<256>(Twist::Accumulate, 5); }
TEST(CtaEmulatorWgmma, N256TwoGroups) { expectGemm<256>(Twist::TwoGroups, 6); }

// The wgmmas run at the wait, on the B written after the commit: not the product the
// kernel meant (that the test of such a kernel catches).
TEST(CtaEmulatorWgmma, OperandOverwrittenBeforeTheWait) {
  CtaEmulator cta(kThreads, sharedBytes<64>(), 8);
  const Operands ops(64);
  std::vector<float> out;
  ASSERT_TRUE(runBlock<64>(cta, ops, Twist::OverwriteB, out)) << cta.error();
  std::string first;
  EXPECT_GT(countOff<64>(out, ops, ops.b, false, first), 0) << "the product with B as issued";
  EXPECT_EQ(countOff<64>(out, ops, ops.bSecond, false, first), 0) << first;
}

TEST(CtaEmulatorWgmma, AccumulatorsTouchedInFlight) {
  expectFailure<32>(Twist::TouchAccumulators,
                    "accumulators touched while a wgmma is in flight (those of thread 133)");
}

TEST(CtaEmulatorWgmma, ExitWithWgmmaInFlight) {
  expectFailure<32>(Twist::NoWait, "wgmma still in flight at exit");
  expectFailure<32>(Twist::NoCommit, "wgmma still in flight at exit");
}

TEST(CtaEmulatorWgmma, ThreadsIssueDifferentWgmmas) {
  expectFailure<32>(Twist::MismatchedB, "issues another N, descriptor or accumulate flag");
}

TEST(CtaEmulatorWgmma, UnsupportedLayout) {
  expectFailure<32>(Twist::LinearLayout, "descriptor layout type 0");
}

} // namespace
