// CPU test (runs in CI): the CTA emulator's TMA loads and mbarrier transaction bytes (the
// primitives of lib/Kernels/Common/Tma.cuh), which the grouped GEMM's emulation test
// relies on. One warp: thread 0 announces a box's bytes on a barrier
// (arrive.expect_tx) and loads the box; every thread waits on the barrier and checks
// the 128-byte swizzle of each row (16-byte chunk c of box row r at chunk c ^ (r % 8)),
// and zeros for the rows past the matrix's end. Then what the emulator is to catch: a
// read before the wait (the box is poison until it lands), bytes no expect_tx announced,
// fewer bytes than announced (the phase never completes: a deadlock), and a box that is
// not on a 1024-byte boundary.
#include "CtaEmulator.h" // first: Tma.cuh takes its primitives from it

#include "Mbarrier.cuh"
#include "Tma.cuh"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

namespace sm90 = kiln::kernels::sm90;
using kiln::test::emu::CtaEmulator;

constexpr int kRows = 20, kCols = 192;                  // the bf16 matrix
constexpr int kBoxRows = 16, kBoxCol = 64, kBoxRow = 8; // rows 8..23: 4 past the end
constexpr uint32_t kBoxBytes = kBoxRows * 128;
constexpr uint32_t kBar = 4096; // after the box (and a second, misaligned box slot)
constexpr size_t kSharedBytes = kBar + 8;

enum class Twist { None, ReadBeforeWait, Unannounced, ShortAnnounced, Misaligned };

std::vector<uint16_t> matrix() {
  std::vector<uint16_t> m(static_cast<size_t>(kRows) * kCols);
  for (size_t i = 0; i < m.size(); ++i)
    m[i] = static_cast<uint16_t>(1 + (i * 2654435761u >> 20) % 0x7F00); // never 0 or poison
  return m;
}

// Whether the box at `box` holds what the load promises (see the file comment).
bool boxMatches(const char *box, const std::vector<uint16_t> &m) {
  for (int r = 0; r < kBoxRows; ++r)
    for (int c = 0; c < 8; ++c) {
      uint16_t want[8] = {};
      if (kBoxRow + r < kRows)
        std::memcpy(want, &m[static_cast<size_t>(kBoxRow + r) * kCols + kBoxCol + 8 * c], 16);
      if (std::memcmp(box + r * 128 + ((c ^ (r & 7)) << 4), want, 16) != 0)
        return false;
    }
  return true;
}

bool runBox(CtaEmulator &cta, const std::vector<uint16_t> &m, Twist twist, int &matches) {
  matches = 0;
  const sm90::TensorMap map{m.data(), kRows, kCols, kBoxRows};
  return cta.run({0, 0, 0}, [&] {
    const uint32_t dst = twist == Twist::Misaligned ? 2048 + 128 : 0;
    if (threadIdx.x == 0) {
      sm90::mbarrierInit(kBar, 1);
      if (twist == Twist::Unannounced)
        sm90::mbarrierArrive(kBar);
      else
        sm90::mbarrierArriveExpectTx(kBar,
                                     twist == Twist::ShortAnnounced ? kBoxBytes + 16 : kBoxBytes);
      sm90::tmaLoad2d(dst, &map, kBoxCol, kBoxRow, kBar);
      if (twist == Twist::ReadBeforeWait && boxMatches(cta.shared(), m))
        ++matches;
    }
    __syncthreads();
    sm90::mbarrierWait(kBar, 0);
    if (boxMatches(cta.shared() + dst, m))
      ++matches;
  });
}

TEST(CtaEmulatorTma, SwizzledBoxWithZerosPastTheEnd) {
  const std::vector<uint16_t> m = matrix();
  for (const uint64_t seed : {1u, 2u, 3u}) {
    CtaEmulator cta(32, kSharedBytes, seed);
    int matches = 0;
    ASSERT_TRUE(runBox(cta, m, Twist::None, matches)) << cta.error();
    EXPECT_EQ(matches, 32);
    EXPECT_EQ(cta.mbarrierPhases(), 1);
  }
}

TEST(CtaEmulatorTma, ReadBeforeTheWaitSeesPoison) {
  const std::vector<uint16_t> m = matrix();
  CtaEmulator cta(32, kSharedBytes, 4);
  int matches = 0;
  ASSERT_TRUE(runBox(cta, m, Twist::ReadBeforeWait, matches)) << cta.error();
  EXPECT_EQ(matches, 32); // the 32 after the wait; the early read saw poison
}

TEST(CtaEmulatorTma, CatchesMisuse) {
  const std::vector<uint16_t> m = matrix();
  const struct {
    Twist twist;
    const char *message;
  } cases[] = {{Twist::Unannounced, "no expect_tx announced"},
               {Twist::ShortAnnounced, "deadlock"},
               {Twist::Misaligned, "not on a 1024-byte boundary"}};
  for (const auto &c : cases) {
    CtaEmulator cta(32, kSharedBytes, 5);
    int matches = 0;
    EXPECT_FALSE(runBox(cta, m, c.twist, matches)) << c.message;
    EXPECT_NE(cta.error().find(c.message), std::string::npos) << cta.error();
  }
}

} // namespace
