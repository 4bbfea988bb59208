// CPU test (runs in CI): the CTA emulator's mbarriers (the primitives of
// lib/Kernels/Common/Mbarrier.cuh). A block of three warpgroups hands a ring of three
// stages (128 rows of 16 bytes each) from a producer to two consumers, as a warp-
// specialized kernel does: warpgroup 2 copies ten items from a host array into the ring
// with cp.async and hands the copies to full[stage] (cp.async.mbarrier.arrive), after
// waiting on empty[stage] before it reuses a stage; warpgroups 0 and 1 wait on full,
// check and sum the stage into a checksum a thread, and release it on empty, one thread a
// warpgroup once all its threads have read it (drained[warpgroup][stage]; one barrier a
// warpgroup for all stages would not do: its arrivals are anonymous, and threads a stage
// ahead would complete the phase of one still being read). The checksums must be the
// host's. Then what the emulator is to catch: a thread that reads a stage without
// waiting on full (it sees poison or stale data: the copies land late), a deadlock on a
// barrier no one arrives at, a wait on a barrier never initialized, a __syncthreads
// after threads returned, copies neither waited for nor handed to a barrier, a
// setmaxnreg whose threads disagree, and a barrier misplaced or overwritten.
#include "CtaEmulator.h" // first: Mbarrier.cuh takes its primitives from it

#include "Mbarrier.cuh"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

namespace sm90 = kiln::kernels::sm90;
namespace emu = kiln::test::emu;
using emu::CtaEmulator;

constexpr int kWarpgroup = emu::kWarpgroupThreads;
constexpr int kConsumers = 2;                           // warpgroups 0 and 1
constexpr int kThreads = (kConsumers + 1) * kWarpgroup; // warpgroup 2 produces
constexpr int kStages = 3;
constexpr int kItems = 10;
constexpr int kRowBytes = 16; // one cp.async a row, a producer thread a row
constexpr int kWords = kRowBytes / 4;
constexpr uint32_t kStageBytes = kWarpgroup * kRowBytes;
// After the ring: full[kStages], empty[kStages], drained[kConsumers][kStages], then a
// barrier no one arrives at and an address no barrier is initialized at.
constexpr uint32_t kFull = kStages * kStageBytes;
constexpr uint32_t kEmpty = kFull + kStages * 8;
constexpr uint32_t kDrained = kEmpty + kStages * 8;
constexpr uint32_t kNever = kDrained + kConsumers * kStages * 8;
constexpr uint32_t kUninitialized = kNever + 8;
constexpr size_t kSharedBytes = kUninitialized + 8;
// The thread that skips its waits on full in Twist::SkipFullWait (a consumer).
constexpr int kSkipper = kWarpgroup + 5;

struct alignas(16) Row {
  uint32_t w[kWords];
};

// Word j of row `row` of item `item`: scrambled, never 0 or the poison 0xFFFFFFFF.
uint32_t sourceWord(int item, int row, int j) {
  uint32_t h = static_cast<uint32_t>(item) * 2654435761u ^ static_cast<uint32_t>(row) * 40503u ^
               static_cast<uint32_t>(j) * 97u;
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  return (h & 0x7FFFFFFEu) | 1u;
}

// The one row the producer copies with src-size 0: zero-filled.
bool zeroFilled(int item, int row) { return item == kItems - 1 && row == kWarpgroup - 1; }

std::vector<Row> source() {
  std::vector<Row> rows(static_cast<size_t>(kItems) * kWarpgroup);
  for (int item = 0; item < kItems; ++item)
    for (int row = 0; row < kWarpgroup; ++row)
      for (int j = 0; j < kWords; ++j)
        rows[static_cast<size_t>(item) * kWarpgroup + row].w[j] = sourceWord(item, row, j);
  return rows;
}

// What a consumer thread sums over the ten items: its row of each.
uint64_t expectedChecksum(int row) {
  uint64_t sum = 0;
  for (int item = 0; item < kItems; ++item)
    for (int j = 0; j < kWords; ++j)
      sum += zeroFilled(item, row) ? 0 : sourceWord(item, row, j) * uint64_t(item + 1);
  return sum;
}

enum class Twist {
  None,
  SkipFullWait,      // kSkipper reads its rows without waiting on full
  WaitOnNever,       // the consumers first wait on a barrier no one arrives at
  WaitUninitialized, // the consumers wait on an address never initialized
  SyncAfterExit,     // the consumers __syncthreads after the producer returned
};

struct Result {
  std::vector<uint64_t> checksum = std::vector<uint64_t>(kThreads, 0);
  std::vector<int> wrong = std::vector<int>(kThreads, 0); // words not the source's
};

bool runRing(CtaEmulator &cta, const std::vector<Row> &src, Twist twist, Result &result) {
  return cta.run(uint3{0, 0, 0}, [&] {
    const int tid = static_cast<int>(threadIdx.x);
    const int wg = tid / kWarpgroup, t = tid % kWarpgroup;
    const uint32_t base = sm90::smemAddress(cta.shared());
    char *ring = cta.shared();
    if (tid == 0) {
      for (int s = 0; s < kStages; ++s) {
        sm90::mbarrierInit(base + kFull + 8 * s, kWarpgroup);
        sm90::mbarrierInit(base + kEmpty + 8 * s, kConsumers);
      }
      for (int d = 0; d < kConsumers * kStages; ++d)
        sm90::mbarrierInit(base + kDrained + 8 * d, kWarpgroup);
      sm90::mbarrierInit(base + kNever, 1);
    }
    __syncthreads();
    if (wg == kConsumers) { // the producer
      sm90::shrinkRegisters<40>();
      for (int item = 0; item < kItems; ++item) {
        const int s = item % kStages;
        if (item >= kStages)
          sm90::mbarrierWait(base + kEmpty + 8 * s, static_cast<uint32_t>(item / kStages - 1) & 1);
        kiln::decode::cpAsync16(ring + s * kStageBytes + t * kRowBytes,
                                &src[static_cast<size_t>(item) * kWarpgroup + t],
                                !zeroFilled(item, t));
        sm90::mbarrierArriveOnCopies(base + kFull + 8 * s);
      }
      sm90::cpAsyncWaitAll();
      return;
    }
    sm90::growRegisters<232>();
    if (twist == Twist::WaitOnNever)
      sm90::mbarrierWait(base + kNever, 0);
    if (twist == Twist::WaitUninitialized)
      sm90::mbarrierWait(base + kUninitialized, 0);
    for (int item = 0; item < kItems; ++item) {
      const int s = item % kStages;
      if (!(twist == Twist::SkipFullWait && tid == kSkipper))
        sm90::mbarrierWait(base + kFull + 8 * s, static_cast<uint32_t>(item / kStages) & 1);
      uint32_t words[kWords];
      std::memcpy(words, ring + s * kStageBytes + t * kRowBytes, sizeof(words));
      for (int j = 0; j < kWords; ++j) {
        const uint32_t want = zeroFilled(item, t) ? 0 : sourceWord(item, t, j);
        result.wrong[tid] += words[j] != want;
        result.checksum[tid] += words[j] * uint64_t(item + 1);
      }
      // Released once the whole warpgroup has read it.
      const uint32_t drained = base + kDrained + 8 * (wg * kStages + s);
      sm90::mbarrierArrive(drained);
      if (t == 0) {
        sm90::mbarrierWait(drained, static_cast<uint32_t>(item / kStages) & 1);
        sm90::mbarrierArrive(base + kEmpty + 8 * s);
      }
    }
    if (twist == Twist::SyncAfterExit)
      __syncthreads();
  });
}

// The consumer threads whose checksum is not the host's; `first` describes the first.
int countWrongChecksums(const Result &result, std::string &first) {
  int off = 0;
  for (int tid = 0; tid < kConsumers * kWarpgroup; ++tid) {
    const uint64_t want = expectedChecksum(tid % kWarpgroup);
    if (result.checksum[tid] != want && off++ == 0)
      first = "thread " + std::to_string(tid) + ": checksum " +
              std::to_string(result.checksum[tid]) + ", want " + std::to_string(want);
  }
  return off;
}

TEST(CtaEmulatorMbarrier, ProducerConsumerRing) {
  const std::vector<Row> src = source();
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    CtaEmulator cta(kThreads, kSharedBytes, seed);
    Result result;
    ASSERT_TRUE(runRing(cta, src, Twist::None, result)) << "seed " << seed << ": " << cta.error();
    std::string first;
    EXPECT_EQ(countWrongChecksums(result, first), 0) << "seed " << seed << ": " << first;
    for (int tid = 0; tid < kThreads; ++tid)
      EXPECT_EQ(result.wrong[tid], 0) << "seed " << seed << ", thread " << tid;
    // An item a phase of full, of empty (the last releases too, which no one waits for)
    // and of each consumer warpgroup's drained.
    EXPECT_EQ(cta.mbarrierPhases(), kItems + kItems + kConsumers * kItems) << "seed " << seed;
  }
}

// Every seed reads something else than the source (poison or the stage's previous
// item), which the checksum shows.
TEST(CtaEmulatorMbarrier, ReadWithoutWaitingOnFull) {
  const std::vector<Row> src = source();
  int differ = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    CtaEmulator cta(kThreads, kSharedBytes, seed);
    Result result;
    ASSERT_TRUE(runRing(cta, src, Twist::SkipFullWait, result))
        << "seed " << seed << ": " << cta.error();
    differ += result.checksum[kSkipper] != expectedChecksum(kSkipper % kWarpgroup);
    EXPECT_GT(result.wrong[kSkipper], 0) << "seed " << seed;
  }
  EXPECT_EQ(differ, 4);
}

void expectFailure(Twist twist, const std::vector<std::string> &messages) {
  const std::vector<Row> src = source();
  CtaEmulator cta(kThreads, kSharedBytes, 7);
  Result result;
  EXPECT_FALSE(runRing(cta, src, twist, result));
  for (const std::string &message : messages)
    EXPECT_NE(cta.error().find(message), std::string::npos) << cta.error();
}

// The producer fills the ring, then waits on empty[0] for good; the consumers on kNever.
TEST(CtaEmulatorMbarrier, Deadlock) {
  expectFailure(Twist::WaitOnNever,
                {"deadlock: every thread waits", "0 threads returned",
                 "256 wait for the phase of parity 0 of the mbarrier at shared address " +
                     std::to_string(kNever),
                 "128 wait for the phase of parity 0 of the mbarrier at shared address " +
                     std::to_string(kEmpty) + " (its phase of parity 0 has 2 of 2 arrivals"});
}

TEST(CtaEmulatorMbarrier, WaitOnAnUninitializedBarrier) {
  expectFailure(Twist::WaitUninitialized,
                {"mbarrier wait on an uninitialized mbarrier at shared address " +
                 std::to_string(kUninitialized)});
}

// The producer warpgroup has returned: the consumers' __syncthreads never completes (and
// the returned threads do not count as waiting).
TEST(CtaEmulatorMbarrier, SyncthreadsAfterThreadsReturned) {
  expectFailure(Twist::SyncAfterExit,
                {"deadlock: every thread waits: 128 threads returned, 256 wait at __syncthreads",
                 "a __syncthreads after threads returned never completes"});
}

// Copies handed to a barrier that no thread waits on still land by the end of the block
// (and arrive); the copies of a thread that neither waits for them nor hands them over
// fail it.
TEST(CtaEmulatorMbarrier, HandedOverCopiesLandByTheEnd) {
  const std::vector<Row> src = source();
  CtaEmulator cta(kWarpgroup, kSharedBytes, 3);
  ASSERT_TRUE(cta.run(uint3{0, 0, 0}, [&] {
    const int t = static_cast<int>(threadIdx.x);
    const uint32_t bar = sm90::smemAddress(cta.shared()) + kFull;
    if (t == 0)
      sm90::mbarrierInit(bar, kWarpgroup);
    __syncthreads();
    kiln::decode::cpAsync16(cta.shared() + t * kRowBytes, &src[t], true);
    kiln::decode::cpAsyncCommit();
    sm90::mbarrierArriveOnCopies(bar);
  })) << cta.error();
  EXPECT_EQ(std::memcmp(cta.shared(), src.data(), kStageBytes), 0);
  EXPECT_EQ(cta.mbarrierPhases(), 1);

  EXPECT_FALSE(cta.run(uint3{0, 0, 0}, [&] {
    const int t = static_cast<int>(threadIdx.x);
    kiln::decode::cpAsync16(cta.shared() + t * kRowBytes, &src[t], true);
  }));
  EXPECT_NE(cta.error().find("left cp.async copies not waited for"), std::string::npos)
      << cta.error();
}

TEST(CtaEmulatorMbarrier, RegisterCountsDiffer) {
  CtaEmulator cta(kWarpgroup, kSharedBytes, 4);
  EXPECT_FALSE(cta.run(uint3{0, 0, 0}, [&] {
    if (threadIdx.x == 3)
      sm90::shrinkRegisters<48>();
    else
      sm90::shrinkRegisters<40>();
  }));
  EXPECT_NE(cta.error().find("setmaxnreg: the threads of warpgroup 0 ask for different register "
                             "counts"),
            std::string::npos)
      << cta.error();
  EXPECT_FALSE(cta.run(uint3{0, 0, 0}, [&] {
    if (threadIdx.x < 64)
      sm90::shrinkRegisters<40>();
    else
      sm90::growRegisters<40>();
  }));
  EXPECT_NE(cta.error().find("different warpgroup collectives"), std::string::npos) << cta.error();
}

TEST(CtaEmulatorMbarrier, MisplacedOrOverwrittenBarriers) {
  CtaEmulator cta(kWarpgroup, kSharedBytes, 5);
  EXPECT_FALSE(cta.run(uint3{0, 0, 0}, [&] {
    if (threadIdx.x == 0)
      sm90::mbarrierInit(sm90::smemAddress(cta.shared()) + 4, 1);
  }));
  EXPECT_NE(cta.error().find("mbarrier init: shared address 4 is not 8-byte aligned"),
            std::string::npos)
      << cta.error();
  EXPECT_FALSE(cta.run(uint3{0, 0, 0}, [&] {
    if (threadIdx.x == 0)
      sm90::mbarrierArrive(sm90::smemAddress(cta.shared()) + kFull);
  }));
  EXPECT_NE(cta.error().find("mbarrier arrive on an uninitialized mbarrier"), std::string::npos)
      << cta.error();
  EXPECT_FALSE(cta.run(uint3{0, 0, 0}, [&] {
    const uint32_t bar = sm90::smemAddress(cta.shared()) + kFull;
    if (threadIdx.x == 0) {
      sm90::mbarrierInit(bar, 2);
      std::memset(cta.shared() + kFull, 0, 8);
      sm90::mbarrierArrive(bar);
    }
  }));
  EXPECT_NE(cta.error().find("mbarrier arrive: the mbarrier at shared address " +
                             std::to_string(kFull) + " was overwritten since its init"),
            std::string::npos)
      << cta.error();
}

} // namespace
