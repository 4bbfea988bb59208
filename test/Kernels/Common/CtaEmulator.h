// A host emulator of one CUDA thread block (CTA), to run warp-synchronous device code in
// CI, where there is no GPU. Every thread is a fiber; the warp-wide operations (ldmatrix,
// mma.sync, shuffles), Hopper's warpgroup-wide ones (wgmma.mma_async, its fence, commit
// and wait) and __syncthreads are collectives: a thread that reaches one waits until its
// whole warp (warpgroup: the 128 threads of warps 4g..4g+3; block) has arrived, and the
// last to arrive performs it for all. A seeded random scheduler picks which waiting
// threads go on, with warps at random relative speeds, so that a missing barrier shows up
// as a read of stale or poisoned data.
//
// Include it before a device header (e.g. Mamba/ChunkScanMma.cuh, Common/Wgmma.cuh): it
// defines KILN_CTA_EMULATION, which such a header checks for on the host, the CUDA
// built-ins the device code names, in kiln::decode the primitives of
// Decode/DecodeDevice.cuh that the emulated kernels use, and in kiln::kernels::sm90 the
// instructions of Common/Wgmma.cuh (which keeps its descriptor and swizzle arithmetic).
// The CUDA headers' host pass already defines __device__, __global__, __forceinline__
// and __shared__ (as nothing) and the bf16 conversions.
//
// A wgmma is asynchronous, as on the GPU: issuing one only queues it in its warpgroup's
// open group, with every thread's accumulator registers (the address of its array and
// their values then); the wait that retires its group runs it, reading the shared memory
// at that time, so that an operand overwritten before the wait gives a wrong result.
//
// What a run checks: every thread of the warp (warpgroup, block) takes part in every
// collective, and in the same one (a wgmma with the same shape, descriptors and
// accumulate flag); ldmatrix and cp.async addresses are 16-byte aligned and inside the
// shared memory, as is every byte a wgmma reads; cp.async destinations are undefined
// (poisoned) from the issue until the issuing thread waits for them (or they land for the
// mbarrier it handed them to), and every copy is waited for or handed to a barrier; a
// wgmma's accumulators are not touched from its issue until the wait that runs it, and no
// thread exits with a wgmma in flight; nothing is written past the end of the shared
// memory, which is poisoned (0xFF: bf16 / fp32 NaN) before each block and starts on a
// 1024-byte boundary (offsets from it swizzle as shared-window addresses do). It counts
// ldmatrix bank conflicts.
//
// Hopper's shared-memory mbarriers (Common/Mbarrier.cuh) are the emulator's too: a thread
// that waits on one yields until the phase it names has completed, and the copies a
// thread hands to one (cp.async.mbarrier.arrive) land, and then arrive, at a later point
// of the schedule that the scheduler picks, so that a consumer that reads a stage before
// its barrier says the copies are in sees poison or stale data. When every thread that
// has not returned waits (in collectives or on mbarriers) and no handed-over copy is left
// to land, the block fails with a deadlock, naming the barriers waited on.
//
// TMA loads (Common/Tma.cuh) land the same way: the box is poisoned at the issue and
// copied, 128-byte swizzled and zero past the matrix, at a later point of the schedule,
// and then completes its bytes on its barrier, whose phase waits for both its arrivals
// and the bytes announced by arrive.expect_tx.
#ifndef KILN_TEST_KERNELS_COMMON_CTAEMULATOR_H
#define KILN_TEST_KERNELS_COMMON_CTAEMULATOR_H

#define KILN_CTA_EMULATION 1

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <ucontext.h>

#include <array>
#include <cmath> // expf, log1pf, fmaxf, ...: the host twins of the device math functions
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace kiln::test::emu {

constexpr int kWarpSize = 32;
constexpr int kWarpgroupThreads = 128; // four warps, the threads of a wgmma

// One thread's operands of a warp collective and its results.
struct LaneData {
  uint64_t in[10];
  uint32_t out[4];
};
using WarpLanes = std::array<LaneData, kWarpSize>;
// A warp collective: every lane's results from all lanes' operands.
using WarpOp = void (*)(WarpLanes &lanes);

class CtaEmulator {
public:
  // `threads` a multiple of 32; `sharedBytes` of dynamic shared memory; `seed` picks the
  // schedules of all the blocks this emulator runs.
  CtaEmulator(int threads, size_t sharedBytes, uint64_t seed);
  ~CtaEmulator();
  CtaEmulator(const CtaEmulator &) = delete;
  CtaEmulator &operator=(const CtaEmulator &) = delete;

  // Runs `body` as every thread of block `block`: true when they all returned, false at
  // the first failure (error() says which). The shared memory is poisoned first.
  bool run(uint3 block, const std::function<void()> &body);
  char *shared() const { return shared_; }
  const std::string &error() const { return error_; }
  // 8-row phases of ldmatrix loads so far, and those whose rows share a bank.
  long ldmatrixPhases() const { return ldmatrixPhases_; }
  long bankConflicts() const { return bankConflicts_; }
  // wgmma instructions run (retired by a wait) so far.
  long wgmmas() const { return wgmmas_; }
  // mbarrier phases completed so far.
  long mbarrierPhases() const { return mbarrierPhases_; }

  // The device side: what the built-ins and primitives below call, in the running block.
  static CtaEmulator &current();
  const uint3 &threadIndex() const;
  const uint3 &blockIndex() const { return block_; }
  // This thread's operands and results in its warp's collectives.
  LaneData &lane();
  // Waits until all 32 threads of this warp have called it, with the same op; the last
  // runs it.
  void warpCollective(WarpOp op);
  void barrier(); // __syncthreads
  // bar.sync id, threads: a barrier of `threads` (whole warps) of the block, named by `id`
  // (1..15; 0 is __syncthreads'), for code whose other threads have left or work apart.
  void namedBarrier(int id, int threads);
  // Records the failure (the first one counts) and abandons the block: does not return.
  [[noreturn]] void fail(const std::string &what);
  // Fails unless [p, p + bytes) is inside the shared memory at a 16-byte boundary.
  void checkShared(const void *p, size_t bytes, const char *what);
  void countLdmatrixPhase(bool conflict);
  void copyAsync(void *dst, const void *src, bool valid);
  void commitAsync();
  void waitAsync(int pendingGroups); // lands all but the newest `pendingGroups` groups
  // The offset of `p` from the start of the shared memory: its shared-window address.
  // Fails unless p is inside the shared memory (or just past its end).
  uint32_t sharedAddress(const void *p);
  // Hopper's wgmma.mma_async m64nNk16 (bf16 operands in shared memory through 128-byte
  // swizzle K-major descriptors, fp32 accumulators `d`, N / 2 of them a thread) and its
  // fence, commit_group and wait_group: collectives of the calling thread's warpgroup.
  // The issue queues the instruction in the warpgroup's open group; commit closes that
  // group (empty or not); wait runs, in issue order, the wgmmas of every committed group
  // but the newest `pendingGroups`. `bMnMajor`: B is MN-major instead (the transpose
  // flag: element (n, k) of B at n % 64 of 128-byte row k % 8 of the 8-row atom, atoms
  // the descriptor's stride apart along K and its leading offset apart per 64 of N).
  void wgmma(int n, float *d, uint64_t a, uint64_t b, bool accumulate, bool bMnMajor = false);
  void wgmmaFence();
  void wgmmaCommit();
  void wgmmaWait(int pendingGroups);
  // Hopper's shared-memory mbarriers, named by their shared address (sharedAddress: 8-byte
  // aligned, the barrier's 8 bytes inside the shared memory). The emulator keeps their
  // state: the arrivals a phase expects (`count`, 1 to 2^20 - 1), those still pending and
  // the parity of the phase in progress (0 after the init, which may be repeated and then
  // resets it). The init writes a tag into the 8 bytes, which every later operation on the
  // barrier checks is still there (nothing is to write over a barrier in use). The phase
  // completes at the arrival that leaves none pending: the parity flips and the count
  // starts over.
  void mbarrierInit(uint32_t bar, unsigned count);
  void mbarrierArrive(uint32_t bar);
  // cp.async.mbarrier.arrive.noinc: hands the copies this thread issued and has not waited
  // for (its committed cp.async groups and its open one) to the barrier; they are no
  // longer the thread's to wait for. The scheduler lands them, and then arrives on the
  // barrier once, at a later point of its choosing; a thread's handed-over batches land
  // in the order it handed them over, and all are landed by the end of the block.
  void mbarrierArriveOnCopies(uint32_t bar);
  // mbarrier.try_wait.parity in a loop: blocks until the phase of parity `parity` (0 or
  // 1) has completed, i.e. until the barrier's current parity is the other one. Always a
  // point where the scheduler may run other threads.
  void mbarrierWait(uint32_t bar, uint32_t parity);
  // mbarrier.arrive.expect_tx: the phase in progress also waits for `bytes` more
  // transaction bytes, then this thread arrives. A phase completes when it has all its
  // arrivals and its transaction bytes are all in.
  void mbarrierArriveExpectTx(uint32_t bar, uint32_t bytes);
  // cp.async.bulk.tensor.2d (TMA) with the 128-byte swizzle: the box of `boxRows` rows x
  // 64 bf16 at element (col, row) of the row-major bf16 matrix [rows, cols] at `base`
  // into shared memory at `dst` (1024-byte aligned; chunk c of box row r at chunk
  // c ^ (r % 8)), elements past the matrix read as zeros. The box is poisoned now; it
  // lands later, at a point the scheduler picks (after this thread's earlier hand-overs),
  // and then completes its bytes on `bar`.
  void tensorLoad2d(uint32_t dst, const void *base, uint64_t rows, uint64_t cols,
                    uint32_t boxRows, int32_t col, int32_t row, uint32_t bar);
  // cp.async.wait_all: lands, now, every copy this thread issued: those it handed to
  // barriers (which then arrive on them), then its groups, open one included.
  void waitAllAsync();
  // setmaxnreg.dec / .inc: a collective of the calling thread's warpgroup, with the same
  // register count in every thread; it checks that, and changes nothing.
  void setMaxRegisters(int registers, bool grow);

private:
  struct Fiber;
  struct Wgmma;
  struct Warpgroup;
  struct AsyncCopy;
  struct Landing;
  struct Mbarrier {
    unsigned count = 0, pending = 0;
    uint32_t parity = 0;
    int64_t txPending = 0; // transaction bytes the phase still waits for
  };
  // The warpgroup collectives (0: none, a warp collective or __syncthreads).
  enum GroupOp : int {
    kNoGroupOp,
    kGroupFence,
    kGroupIssue,
    kGroupCommit,
    kGroupWait,
    kGroupShrink,
    kGroupGrow
  };
  struct Scope {
    int arrived = 0;
    uint64_t generation = 0;
    WarpOp op = nullptr;
    int groupOp = kNoGroupOp;
    int expected = 0; // a named barrier's threads
  };
  static void fiberEntry();
  // Scopes: one a warp, then the block, then one a warpgroup.
  int blockScope() const { return threads_ / kWarpSize; }
  int namedScope(int id) const { return blockScope() + 1 + threads_ / kWarpgroupThreads + id; }
  void arrive(int scope, WarpOp op, int groupOp);
  void warpgroupCollective(GroupOp op);
  void performGroupOp(int group, GroupOp op);
  void runWgmma(int group, const Wgmma &w); // checks its accumulators, runs it
  bool wgmmaInFlight(int group) const;
  bool schedule();
  bool runnable(const Fiber &f) const;
  std::string deadlock(int done) const; // why no thread can go on
  void abandon(const std::string &what);
  // The initialized, intact barrier at `bar`; fails (naming `what`) otherwise.
  Mbarrier &mbarrierAt(uint32_t bar, const char *what);
  void completeArrival(Mbarrier &b);
  void completeBytes(Mbarrier &b, uint32_t bytes);
  void completePhaseIfDone(Mbarrier &b);
  void mbarrierFault(const std::string &what); // fails in a thread, records in the scheduler
  // A landed batch: its copies, then its arrival or its bytes on its barrier.
  void finishLanding(const Landing &l);
  static void land(const std::vector<AsyncCopy> &copies);
  // Lands the handed-over batch landings_[i] and, first, those its thread handed over
  // before it, and arrives on their barriers.
  void landThrough(size_t i);
  void landSome(); // each batch at random, in each thread's order
  bool sharedIntact() const;

  int threads_;
  size_t sharedBytes_;
  std::mt19937_64 rng_;
  std::unique_ptr<char[]> sharedAlloc_, stacks_;
  char *shared_;
  std::vector<Fiber> fibers_;
  std::vector<Scope> scopes_;
  std::vector<Warpgroup> warpgroups_; // the whole ones
  std::vector<WarpLanes> exchange_;
  std::map<uint32_t, Mbarrier> mbarriers_; // by shared address
  std::vector<Landing> landings_;          // handed-over copies, oldest first
  ucontext_t scheduler_;
  uint3 block_{};
  const std::function<void()> *body_ = nullptr;
  Fiber *running_ = nullptr;
  std::string error_;
  long ldmatrixPhases_ = 0, bankConflicts_ = 0, wgmmas_ = 0, mbarrierPhases_ = 0;
};

// The warp collectives (CtaEmulator.cpp).
void ldmatrixX4(WarpLanes &lanes);
void ldmatrixX4Trans(WarpLanes &lanes);
void mmaBf16(WarpLanes &lanes);
void shuffleIndexed(WarpLanes &lanes);
void shuffleUp(WarpLanes &lanes);
void warpBarrier(WarpLanes &lanes); // __syncwarp: exchanges nothing

// The calling thread's part in a collective of 32-bit operands with one 32-bit result.
inline uint32_t warpExchange(WarpOp op, uint32_t value, uint32_t arg) {
  CtaEmulator &cta = CtaEmulator::current();
  LaneData &me = cta.lane();
  me.in[0] = value;
  me.in[1] = arg;
  cta.warpCollective(op);
  return me.out[0];
}

inline uint32_t floatBits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}
inline float bitsFloat(uint32_t u) {
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

} // namespace kiln::test::emu

// CUDA built-ins, for the running thread.
#define threadIdx (::kiln::test::emu::CtaEmulator::current().threadIndex())
#define blockIdx (::kiln::test::emu::CtaEmulator::current().blockIndex())
#define __launch_bounds__(...)

inline void __syncthreads() { kiln::test::emu::CtaEmulator::current().barrier(); }
// A warp barrier: every lane's shared-memory writes before it are seen by every lane after
// it (whole warps only, as the shuffles).
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  namespace emu = kiln::test::emu;
  if (mask != 0xffffffffu)
    emu::CtaEmulator::current().fail("__syncwarp: partial mask");
  emu::CtaEmulator::current().warpCollective(emu::warpBarrier);
}
// Whole-warp shuffles only (the emulation has no partial masks).
inline float __shfl_sync(unsigned mask, float v, int srcLane) {
  namespace emu = kiln::test::emu;
  if (mask != 0xffffffffu)
    emu::CtaEmulator::current().fail("__shfl_sync: partial mask");
  return emu::bitsFloat(
      emu::warpExchange(emu::shuffleIndexed, emu::floatBits(v), static_cast<uint32_t>(srcLane)));
}
inline float __shfl_up_sync(unsigned mask, float v, unsigned delta) {
  namespace emu = kiln::test::emu;
  if (mask != 0xffffffffu)
    emu::CtaEmulator::current().fail("__shfl_up_sync: partial mask");
  return emu::bitsFloat(emu::warpExchange(emu::shuffleUp, emu::floatBits(v), delta));
}
inline float __uint_as_float(unsigned u) { return kiln::test::emu::bitsFloat(u); }
inline unsigned __float_as_uint(float f) { return kiln::test::emu::floatBits(f); }
inline int min(int a, int b) { return a < b ? a : b; }

// Decode/DecodeDevice.cuh's primitives (the bf16 ones), emulated.
namespace kiln::decode {

inline void cpAsync16(void *smem, const void *gmem, bool valid) {
  test::emu::CtaEmulator::current().copyAsync(smem, gmem, valid);
}
inline void cpAsyncCommit() { test::emu::CtaEmulator::current().commitAsync(); }
template <int N> inline void cpAsyncWait() { test::emu::CtaEmulator::current().waitAsync(N); }

namespace detail {
inline void ldmatrix(test::emu::WarpOp op, uint32_t (&r)[4], const void *smem) {
  test::emu::CtaEmulator &cta = test::emu::CtaEmulator::current();
  test::emu::LaneData &me = cta.lane();
  me.in[0] = reinterpret_cast<uintptr_t>(smem);
  cta.warpCollective(op);
  for (int i = 0; i < 4; ++i)
    r[i] = me.out[i];
}
} // namespace detail

inline void ldsmX4(uint32_t (&r)[4], const void *smem) {
  detail::ldmatrix(test::emu::ldmatrixX4, r, smem);
}
inline void ldsmX4T(uint32_t (&r)[4], const void *smem) {
  detail::ldmatrix(test::emu::ldmatrixX4Trans, r, smem);
}

template <typename T>
inline void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  static_assert(std::is_same_v<T, __nv_bfloat16>, "the emulation has the bf16 mma only");
  test::emu::CtaEmulator &cta = test::emu::CtaEmulator::current();
  test::emu::LaneData &me = cta.lane();
  for (int i = 0; i < 4; ++i) {
    me.in[i] = a[i];
    me.in[6 + i] = test::emu::floatBits(c[i]);
  }
  me.in[4] = b0;
  me.in[5] = b1;
  cta.warpCollective(test::emu::mmaBf16);
  for (int i = 0; i < 4; ++i)
    c[i] = test::emu::bitsFloat(me.out[i]);
}

template <typename T> inline uint32_t pack2(float lo, float hi);
template <> inline uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

} // namespace kiln::decode

// Common/Wgmma.cuh's instructions, emulated (the header itself supplies swizzledOffset,
// swizzledDescriptor and the constants), and Common/Mbarrier.cuh's.
namespace kiln::kernels::sm90 {

inline uint32_t smemAddress(const void *ptr) {
  return ::kiln::test::emu::CtaEmulator::current().sharedAddress(ptr);
}

// m64nNk16: d (64 x N, fp32, the warpgroup's N/2 registers a thread) = A (64 x 16, from
// the descriptor a) . B^T (N x 16, descriptor b) + (accumulate ? d : 0), when a
// wgmmaWait retires it.
template <int N> inline void wgmmaBf16(float (&d)[N / 2], uint64_t a, uint64_t b, bool accumulate) {
  static_assert(N >= 8 && N <= 256 && N % 8 == 0, "wgmma m64nNk16: N a multiple of 8 to 256");
  ::kiln::test::emu::CtaEmulator::current().wgmma(N, d, a, b, accumulate);
}
inline void wgmmaFence() { ::kiln::test::emu::CtaEmulator::current().wgmmaFence(); }
inline void wgmmaCommit() { ::kiln::test::emu::CtaEmulator::current().wgmmaCommit(); }
template <int Pending> inline void wgmmaWait() {
  static_assert(Pending >= 0, "wgmma.wait_group: a pending count of 0 or more");
  ::kiln::test::emu::CtaEmulator::current().wgmmaWait(Pending);
}
// The accumulators live in memory here, where the emulator can see them: nothing to pin.
template <int Regs> inline void pinAccumulators(float (&)[Regs]) {}
// The emulated wgmma reads the shared memory as every other access does.
inline void fenceProxyAsyncShared() {}

// Common/Tma.cuh's, emulated: a tensor map is the matrix and the box rows it loads (the
// box is 64 bf16 wide, 128-byte swizzled, as Common/TensorMap.h encodes them).
struct TensorMap {
  const void *base;
  uint64_t rows, cols;
  uint32_t boxRows;
};
inline void mbarrierArriveExpectTx(uint32_t bar, uint32_t bytes) {
  ::kiln::test::emu::CtaEmulator::current().mbarrierArriveExpectTx(bar, bytes);
}
inline void tmaLoad2d(uint32_t dst, const TensorMap *map, int32_t col, int32_t row, uint32_t bar) {
  ::kiln::test::emu::CtaEmulator::current().tensorLoad2d(dst, map->base, map->rows, map->cols,
                                                         map->boxRows, col, row, bar);
}

// Common/Mbarrier.cuh's, emulated.
inline void mbarrierInit(uint32_t bar, unsigned count) {
  ::kiln::test::emu::CtaEmulator::current().mbarrierInit(bar, count);
}
inline void mbarrierArrive(uint32_t bar) {
  ::kiln::test::emu::CtaEmulator::current().mbarrierArrive(bar);
}
inline void mbarrierArriveOnCopies(uint32_t bar) {
  ::kiln::test::emu::CtaEmulator::current().mbarrierArriveOnCopies(bar);
}
inline void mbarrierWait(uint32_t bar, uint32_t parity) {
  ::kiln::test::emu::CtaEmulator::current().mbarrierWait(bar, parity);
}
inline void cpAsyncWaitAll() { ::kiln::test::emu::CtaEmulator::current().waitAllAsync(); }
template <int Registers> inline void shrinkRegisters() {
  static_assert(Registers >= 24 && Registers <= 256 && Registers % 8 == 0,
                "setmaxnreg: a multiple of 8 from 24 to 256");
  ::kiln::test::emu::CtaEmulator::current().setMaxRegisters(Registers, false);
}
template <int Registers> inline void growRegisters() {
  static_assert(Registers >= 24 && Registers <= 256 && Registers % 8 == 0,
                "setmaxnreg: a multiple of 8 from 24 to 256");
  ::kiln::test::emu::CtaEmulator::current().setMaxRegisters(Registers, true);
}

} // namespace kiln::kernels::sm90

#endif
