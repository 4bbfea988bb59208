#include "CtaEmulator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace kiln::test::emu {
namespace {

constexpr size_t kStackBytes = 256 * 1024; // a thread's stack (pages are touched lazily)
constexpr size_t kGuardBytes = 256;        // after the shared memory, to catch overruns
constexpr size_t kSharedAlign = 1024;      // the 128-byte swizzle's period (Wgmma.cuh)
constexpr unsigned char kPoison = 0xFF;    // bf16 and fp32 NaN
constexpr unsigned char kGuard = 0xA5;
constexpr int kWgmmaK = 16; // K of one wgmma
constexpr int kMbarrierBytes = 8;
// What an initialized barrier's bytes hold here (the hardware's state is the emulator's).
constexpr char kMbarrierTag[kMbarrierBytes] = {'m', 'b', 'a', 'r', 'r', 'i', 'e', 'r'};
constexpr unsigned kMbarrierMaxCount = (1u << 20) - 1;
// The chance that a batch of handed-over copies lands in a given scheduling round.
constexpr double kLandingChance = 0.2;

CtaEmulator *active = nullptr; // the emulator running a block

float bf16Bits(uint32_t bits) { return bitsFloat(bits << 16); }

// ldmatrix x4: lanes 8i..8i+7 address the rows of 8x8 matrix i; lane t receives, for
// each matrix, the pair of elements at row t / 4, columns 2 (t % 4) and + 1 (transposed:
// column t / 4, rows 2 (t % 4) and + 1).
void ldmatrix(WarpLanes &lanes, bool trans) {
  CtaEmulator &cta = CtaEmulator::current();
  uint16_t m[4][8][8];
  for (int i = 0; i < 4; ++i) {
    uintptr_t rows[8];
    for (int r = 0; r < 8; ++r) {
      const auto *p = reinterpret_cast<const char *>(lanes[8 * i + r].in[0]);
      cta.checkShared(p, 16, "ldmatrix row");
      std::memcpy(m[i][r], p, 16);
      rows[r] = static_cast<uintptr_t>(p - cta.shared());
    }
    // The 8 rows of a phase are read in one wavefront when they fall in distinct 16-byte
    // groups of the 32 4-byte banks.
    bool conflict = false;
    for (int r = 0; r < 8; ++r)
      for (int q = 0; q < r; ++q)
        conflict |= rows[q] != rows[r] && (rows[q] / 16) % 8 == (rows[r] / 16) % 8;
    cta.countLdmatrixPhase(conflict);
  }
  for (int t = 0; t < kWarpSize; ++t)
    for (int i = 0; i < 4; ++i) {
      const int a = t / 4, b = 2 * (t % 4);
      const uint16_t lo = trans ? m[i][b][a] : m[i][a][b];
      const uint16_t hi = trans ? m[i][b + 1][a] : m[i][a][b + 1];
      lanes[t].out[i] = lo | static_cast<uint32_t>(hi) << 16;
    }
}

} // namespace

void ldmatrixX4(WarpLanes &lanes) { ldmatrix(lanes, false); }
void ldmatrixX4Trans(WarpLanes &lanes) { ldmatrix(lanes, true); }

// mma.sync m16n8k16 row.col, bf16 operands, fp32 accumulators; lane l = 4 g + c holds
// A rows g and g + 8 at columns 2c, 2c + 1 (registers 0, 1) and 2c + 8, 2c + 9 (2, 3), B
// column g at rows 2c, 2c + 1 and 2c + 8, 2c + 9, and C / D rows g and g + 8 at columns 2c
// and 2c + 1. The products are summed exactly (fp64) and rounded once.
void mmaBf16(WarpLanes &lanes) {
  double a[16][16], b[16][8], c[16][8];
  auto lo = [](uint64_t v) { return bf16Bits(static_cast<uint32_t>(v) & 0xffff); };
  auto hi = [](uint64_t v) { return bf16Bits(static_cast<uint32_t>(v) >> 16); };
  for (int l = 0; l < kWarpSize; ++l) {
    const int g = l / 4, k = 2 * (l % 4);
    const uint64_t *in = lanes[l].in;
    for (int half = 0; half < 2; ++half) {
      const int col = k + 8 * half;
      a[g][col] = lo(in[2 * half]);
      a[g][col + 1] = hi(in[2 * half]);
      a[g + 8][col] = lo(in[2 * half + 1]);
      a[g + 8][col + 1] = hi(in[2 * half + 1]);
      b[col][g] = lo(in[4 + half]);
      b[col + 1][g] = hi(in[4 + half]);
    }
    c[g][k] = bitsFloat(static_cast<uint32_t>(in[6]));
    c[g][k + 1] = bitsFloat(static_cast<uint32_t>(in[7]));
    c[g + 8][k] = bitsFloat(static_cast<uint32_t>(in[8]));
    c[g + 8][k + 1] = bitsFloat(static_cast<uint32_t>(in[9]));
  }
  float d[16][8];
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) {
      double sum = c[m][n];
      for (int k = 0; k < 16; ++k)
        sum += a[m][k] * b[k][n];
      d[m][n] = static_cast<float>(sum);
    }
  for (int l = 0; l < kWarpSize; ++l) {
    const int g = l / 4, k = 2 * (l % 4);
    const float out[4] = {d[g][k], d[g][k + 1], d[g + 8][k], d[g + 8][k + 1]};
    for (int i = 0; i < 4; ++i)
      lanes[l].out[i] = floatBits(out[i]);
  }
}

void shuffleIndexed(WarpLanes &lanes) {
  for (int l = 0; l < kWarpSize; ++l)
    lanes[l].out[0] = static_cast<uint32_t>(lanes[lanes[l].in[1] % kWarpSize].in[0]);
}

void warpBarrier(WarpLanes &) {}

void shuffleUp(WarpLanes &lanes) {
  for (int l = 0; l < kWarpSize; ++l) {
    const int delta = static_cast<int>(lanes[l].in[1]);
    lanes[l].out[0] = static_cast<uint32_t>(lanes[l >= delta ? l - delta : l].in[0]);
  }
}

struct CtaEmulator::AsyncCopy {
  char *dst;
  const char *src;
  bool valid;
};

// Copies a thread handed to a barrier: they land, then arrive on `bar` (cp.async), or
// complete `txBytes` transaction bytes on it (a TMA load).
struct CtaEmulator::Landing {
  int thread = 0;
  uint32_t bar = 0;
  std::vector<AsyncCopy> copies;
  uint32_t txBytes = 0;
};

struct CtaEmulator::Fiber {
  // Its operands of the warpgroup collective it is in.
  struct GroupArgs {
    int n = 0;
    uint64_t a = 0, b = 0;
    bool accumulate = false, bMnMajor = false;
    float *d = nullptr;
    int pending = 0;
    int registers = 0;
  };
  ucontext_t context;
  uint3 index;
  GroupArgs group;
  bool done = false;
  int waitScope = -1; // the collective (its scope) it waits in; -1: free to run
  uint64_t waitGeneration = 0;
  bool onMbarrier = false; // waits for the phase of parity waitParity of waitBar
  uint32_t waitBar = 0, waitParity = 0;
  std::vector<std::vector<AsyncCopy>> committed; // cp.async groups, oldest first
  std::vector<AsyncCopy> open;                   // copies not committed yet
};

// A queued wgmma: the instruction, and every thread of the warpgroup's accumulator
// array and its values at the issue (as later updated by the wgmmas run before it).
struct CtaEmulator::Wgmma {
  int n;
  uint64_t a, b;
  bool accumulate, bMnMajor;
  std::array<float *, kWarpgroupThreads> d;
  std::vector<float> issued; // thread t's n / 2 values from t * n / 2
};

struct CtaEmulator::Warpgroup {
  std::vector<std::vector<Wgmma>> committed; // oldest first
  std::vector<Wgmma> open;                   // issued, not committed yet
};

CtaEmulator::CtaEmulator(int threads, size_t sharedBytes, uint64_t seed)
    : threads_(threads), sharedBytes_(sharedBytes), rng_(seed),
      sharedAlloc_(new char[sharedBytes + kGuardBytes + kSharedAlign]),
      stacks_(new char[threads * kStackBytes]), fibers_(threads),
      scopes_(threads / kWarpSize + 1 + threads / kWarpgroupThreads + 16),
      warpgroups_(threads / kWarpgroupThreads), exchange_(threads / kWarpSize) {
  if (threads % kWarpSize != 0) {
    std::fprintf(stderr, "CtaEmulator: %d threads is not whole warps\n", threads);
    std::abort();
  }
  // On a 1024-byte boundary, as a dynamic shared memory at the start of the shared window
  // is: offsets from it (smemAddress) then swizzle as the hardware's addresses do.
  const auto base = reinterpret_cast<uintptr_t>(sharedAlloc_.get());
  shared_ = sharedAlloc_.get() + ((kSharedAlign - base % kSharedAlign) % kSharedAlign);
}

CtaEmulator::~CtaEmulator() = default;

CtaEmulator &CtaEmulator::current() {
  if (!active || !active->running_) {
    std::fprintf(stderr, "CtaEmulator: a device primitive called outside a running block\n");
    std::abort();
  }
  return *active;
}

const uint3 &CtaEmulator::threadIndex() const { return running_->index; }

LaneData &CtaEmulator::lane() {
  const unsigned t = running_->index.x;
  return exchange_[t / kWarpSize][t % kWarpSize];
}

bool CtaEmulator::run(uint3 block, const std::function<void()> &body) {
  active = this;
  block_ = block;
  body_ = &body;
  error_.clear();
  std::memset(shared_, kPoison, sharedBytes_);
  std::memset(shared_ + sharedBytes_, kGuard, kGuardBytes);
  for (Scope &s : scopes_)
    s = Scope{};
  for (Warpgroup &g : warpgroups_)
    g = Warpgroup{};
  mbarriers_.clear();
  landings_.clear();
  for (int t = 0; t < threads_; ++t) {
    Fiber &f = fibers_[t];
    f.index = uint3{static_cast<unsigned>(t), 0, 0};
    f.done = false;
    f.waitScope = -1;
    f.onMbarrier = false;
    f.committed.clear();
    f.open.clear();
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = stacks_.get() + t * kStackBytes;
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = &scheduler_; // where a thread goes when its body returns
    makecontext(&f.context, fiberEntry, 0);
  }
  bool ok = schedule();
  for (const Fiber &f : fibers_)
    if (ok && (!f.committed.empty() || !f.open.empty())) {
      abandon("thread " + std::to_string(f.index.x) + " left cp.async copies not waited for");
      ok = false;
    }
  if (ok && !sharedIntact()) {
    abandon("written past the end of the shared memory");
    ok = false;
  }
  body_ = nullptr;
  active = nullptr;
  return ok;
}

void CtaEmulator::fiberEntry() {
  (*active->body_)();
  const int group = static_cast<int>(active->running_->index.x) / kWarpgroupThreads;
  if (active->wgmmaInFlight(group))
    active->fail("wgmma still in flight at exit");
  active->running_->done = true;
}

bool CtaEmulator::schedule() {
  const int warps = threads_ / kWarpSize;
  // Each warp goes on in a round with its own probability: some run far ahead.
  std::vector<double> speed(warps);
  for (double &s : speed)
    s = std::uniform_real_distribution<double>(0.05, 1.0)(rng_);
  std::vector<int> ready;
  std::vector<char> go(warps);
  for (;;) {
    if (!landings_.empty())
      landSome();
    if (!error_.empty())
      return false;
    ready.clear();
    int done = 0;
    for (int t = 0; t < threads_; ++t) {
      const Fiber &f = fibers_[t];
      if (f.done)
        ++done;
      else if (runnable(f))
        ready.push_back(t);
    }
    if (done == threads_) {
      // The block ends when its copies have landed, those handed to barriers too.
      while (!landings_.empty())
        landThrough(landings_.size() - 1);
      return error_.empty();
    }
    if (ready.empty()) {
      if (landings_.empty()) {
        abandon(deadlock(done));
        return false;
      }
      // Only copies in flight can make a waiting thread go on: one batch lands.
      landThrough(std::uniform_int_distribution<size_t>(0, landings_.size() - 1)(rng_));
      if (!error_.empty())
        return false;
      continue;
    }
    std::shuffle(ready.begin(), ready.end(), rng_);
    for (int w = 0; w < warps; ++w)
      go[w] = std::uniform_real_distribution<double>(0.0, 1.0)(rng_) < speed[w];
    for (int t : ready) {
      Fiber &f = fibers_[t];
      if (!go[t / kWarpSize])
        continue;
      f.waitScope = -1;
      f.onMbarrier = false;
      running_ = &f;
      swapcontext(&scheduler_, &f.context);
      running_ = nullptr;
      if (!error_.empty())
        return false;
    }
  }
}

bool CtaEmulator::runnable(const Fiber &f) const {
  if (f.onMbarrier) // the barrier stays in mbarriers_ to the end of the block
    return mbarriers_.find(f.waitBar)->second.parity != f.waitParity;
  return f.waitScope < 0 || scopes_[f.waitScope].generation != f.waitGeneration;
}

std::string CtaEmulator::deadlock(int done) const {
  const int warps = threads_ / kWarpSize;
  int atBarrier = 0, inGroups = 0, onMbarriers = 0;
  std::map<std::pair<uint32_t, uint32_t>, int> waits; // (barrier, parity): threads
  for (const Fiber &f : fibers_) {
    if (f.done)
      continue;
    if (f.onMbarrier) {
      ++onMbarriers;
      ++waits[{f.waitBar, f.waitParity}];
    } else {
      atBarrier += f.waitScope == warps;
      inGroups += f.waitScope > warps;
    }
  }
  std::string what = "deadlock: every thread waits: " + std::to_string(done) +
                     " threads returned, " + std::to_string(atBarrier) +
                     " wait at __syncthreads, " + std::to_string(inGroups) +
                     " in warpgroup collectives, " + std::to_string(onMbarriers) +
                     " on mbarriers, the others in warp collectives";
  if (done > 0 && atBarrier > 0)
    what += " (a __syncthreads after threads returned never completes)";
  for (const auto &[wait, threads] : waits) {
    const Mbarrier &b = mbarriers_.find(wait.first)->second;
    what += "; " + std::to_string(threads) + " wait for the phase of parity " +
            std::to_string(wait.second) + " of the mbarrier at shared address " +
            std::to_string(wait.first) + " (its phase of parity " + std::to_string(b.parity) +
            " has " + std::to_string(b.pending) + " of " + std::to_string(b.count) +
            " arrivals pending)";
  }
  return what;
}

void CtaEmulator::arrive(int scope, WarpOp op, int groupOp) {
  Scope &s = scopes_[scope];
  const bool named = scope > namedScope(0);
  const bool block = scope == blockScope(), group = !named && scope > blockScope();
  if (s.arrived == 0) {
    s.op = op;
    s.groupOp = groupOp;
  } else if (s.op != op || s.groupOp != groupOp) {
    fail(named ? "bar.sync " + std::to_string(scope - namedScope(0)) +
                     " reached by a thread whose warp was in another collective"
         : block ? "__syncthreads reached by a thread whose warp was in another collective"
         : group ? "the threads of warpgroup " + std::to_string(scope - blockScope() - 1) +
                       " are in different warpgroup collectives (divergence)"
                 : "the threads of warp " + std::to_string(scope) +
                       " are in different collectives (divergence)");
  }
  running_->waitScope = scope;
  running_->waitGeneration = s.generation;
  if (++s.arrived == (named   ? s.expected
                      : block ? threads_
                      : group ? kWarpgroupThreads
                              : kWarpSize)) {
    if (group)
      performGroupOp(scope - blockScope() - 1, static_cast<GroupOp>(groupOp));
    else if (!block && !named)
      op(exchange_[scope]);
    s.arrived = 0;
    ++s.generation;
  }
  swapcontext(&running_->context, &scheduler_);
}

void CtaEmulator::warpCollective(WarpOp op) {
  arrive(static_cast<int>(running_->index.x) / kWarpSize, op, kNoGroupOp);
}

void CtaEmulator::barrier() { arrive(blockScope(), nullptr, kNoGroupOp); }

void CtaEmulator::namedBarrier(int id, int threads) {
  if (id < 1 || id > 15)
    fail("bar.sync: barrier id " + std::to_string(id) + " (1..15 here; 0 is __syncthreads')");
  if (threads <= 0 || threads % kWarpSize != 0 || threads > threads_)
    fail("bar.sync: " + std::to_string(threads) + " threads (whole warps of the block)");
  Scope &s = scopes_[namedScope(id)];
  if (s.arrived == 0)
    s.expected = threads;
  else if (s.expected != threads)
    fail("bar.sync " + std::to_string(id) + ": threads arrive with different thread counts");
  arrive(namedScope(id), nullptr, kNoGroupOp);
}

void CtaEmulator::abandon(const std::string &what) {
  if (!error_.empty())
    return;
  error_ = what;
  if (running_)
    error_ += " (thread " + std::to_string(running_->index.x) + ")";
  error_ += " in block (" + std::to_string(block_.x) + ", " + std::to_string(block_.y) + ", " +
            std::to_string(block_.z) + ")";
}

void CtaEmulator::fail(const std::string &what) {
  abandon(what);
  // The scheduler sees the error and never resumes this thread (nor any other).
  swapcontext(&running_->context, &scheduler_);
  std::abort();
}

void CtaEmulator::checkShared(const void *p, size_t bytes, const char *what) {
  const auto *c = static_cast<const char *>(p);
  if (c < shared_ || c + bytes > shared_ + sharedBytes_)
    fail(std::string(what) + " outside the shared memory");
  if ((c - shared_) % 16 != 0)
    fail(std::string(what) + " not at a 16-byte boundary");
}

void CtaEmulator::countLdmatrixPhase(bool conflict) {
  ++ldmatrixPhases_;
  bankConflicts_ += conflict;
}

void CtaEmulator::copyAsync(void *dst, const void *src, bool valid) {
  checkShared(dst, 16, "cp.async destination");
  if (valid && reinterpret_cast<uintptr_t>(src) % 16 != 0)
    fail("cp.async source not at a 16-byte boundary");
  // Until the wait, the destination may hold anything.
  std::memset(dst, kPoison, 16);
  running_->open.push_back({static_cast<char *>(dst), static_cast<const char *>(src), valid});
}

void CtaEmulator::commitAsync() {
  running_->committed.push_back(std::move(running_->open));
  running_->open.clear();
}

void CtaEmulator::waitAsync(int pendingGroups) {
  auto &groups = running_->committed;
  while (static_cast<int>(groups.size()) > pendingGroups) {
    land(groups.front());
    groups.erase(groups.begin());
  }
}

void CtaEmulator::land(const std::vector<AsyncCopy> &copies) {
  for (const AsyncCopy &c : copies)
    if (c.valid)
      std::memcpy(c.dst, c.src, 16);
    else
      std::memset(c.dst, 0, 16); // cp.async with src-size 0 zero-fills
}

CtaEmulator::Mbarrier &CtaEmulator::mbarrierAt(uint32_t bar, const char *what) {
  const std::string at = " at shared address " + std::to_string(bar);
  if (bar % kMbarrierBytes != 0 || uint64_t{bar} + kMbarrierBytes > sharedBytes_)
    fail(std::string(what) + ": the mbarrier" + at +
         " is not 8-byte aligned inside the shared memory");
  const auto it = mbarriers_.find(bar);
  if (it == mbarriers_.end())
    fail(std::string(what) + " on an uninitialized mbarrier" + at);
  if (std::memcmp(shared_ + bar, kMbarrierTag, kMbarrierBytes) != 0)
    fail(std::string(what) + ": the mbarrier" + at + " was overwritten since its init");
  return it->second;
}

void CtaEmulator::mbarrierFault(const std::string &what) {
  // Landings also run between threads, in the scheduler, which checks the error.
  if (running_)
    fail(what);
  abandon(what);
}

void CtaEmulator::completePhaseIfDone(Mbarrier &b) {
  if (b.pending == 0 && b.txPending == 0) {
    b.parity ^= 1;
    b.pending = b.count;
    ++mbarrierPhases_;
  }
}

void CtaEmulator::completeArrival(Mbarrier &b) {
  if (b.pending == 0)
    return mbarrierFault("mbarrier: an arrival on a phase that has all its arrivals (waiting "
                         "for bytes)");
  --b.pending;
  completePhaseIfDone(b);
}

void CtaEmulator::completeBytes(Mbarrier &b, uint32_t bytes) {
  // The hardware's count may dip below zero until the expect_tx that announced them;
  // every producer here announces first, so a dip means bytes nobody expected.
  b.txPending -= bytes;
  if (b.txPending < 0)
    return mbarrierFault("mbarrier: " + std::to_string(bytes) +
                         " transaction bytes landed that no expect_tx announced");
  completePhaseIfDone(b);
}

void CtaEmulator::finishLanding(const Landing &l) {
  land(l.copies);
  Mbarrier &b = mbarriers_.find(l.bar)->second;
  if (l.txBytes)
    completeBytes(b, l.txBytes);
  else
    completeArrival(b);
}

void CtaEmulator::mbarrierArriveExpectTx(uint32_t bar, uint32_t bytes) {
  Mbarrier &b = mbarrierAt(bar, "mbarrier arrive.expect_tx");
  b.txPending += bytes;
  completeArrival(b);
}

void CtaEmulator::tensorLoad2d(uint32_t dst, const void *base, uint64_t rows, uint64_t cols,
                               uint32_t boxRows, int32_t col, int32_t row, uint32_t bar) {
  mbarrierAt(bar, "TMA load");
  constexpr uint32_t kBoxRowBytes = 128, kAtomBytes = 1024;
  if (dst % kAtomBytes != 0)
    fail("TMA load: a 128-byte-swizzled box at shared address " + std::to_string(dst) +
         ", not on a 1024-byte boundary");
  if (boxRows == 0 || boxRows > 256 || col % 8 != 0)
    fail("TMA load: a box of " + std::to_string(boxRows) + " rows at column " +
         std::to_string(col) + " (1 to 256 rows, columns at 16-byte boundaries)");
  char *box = shared_ + dst;
  checkShared(box, size_t{boxRows} * kBoxRowBytes, "TMA load destination");
  std::memset(box, kPoison, size_t{boxRows} * kBoxRowBytes);
  Landing l{static_cast<int>(running_->index.x), bar, {}, boxRows * kBoxRowBytes};
  const char *matrix = static_cast<const char *>(base);
  for (uint32_t r = 0; r < boxRows; ++r)
    for (uint32_t c = 0; c < 8; ++c) {
      const int64_t y = int64_t{row} + r, x = int64_t{col} + 8 * c;
      const bool inside = y >= 0 && y < static_cast<int64_t>(rows) && x >= 0 &&
                          x + 8 <= static_cast<int64_t>(cols);
      l.copies.push_back({box + r * kBoxRowBytes + ((c ^ (r & 7)) << 4),
                          inside ? matrix + (y * static_cast<int64_t>(cols) + x) * 2 : nullptr,
                          inside});
    }
  landings_.push_back(std::move(l));
}

void CtaEmulator::mbarrierInit(uint32_t bar, unsigned count) {
  if (bar % kMbarrierBytes != 0 || uint64_t{bar} + kMbarrierBytes > sharedBytes_)
    fail("mbarrier init: shared address " + std::to_string(bar) +
         " is not 8-byte aligned inside the shared memory");
  if (count == 0 || count > kMbarrierMaxCount)
    fail("mbarrier init: an expected count of " + std::to_string(count) +
         " (1 to 2^20 - 1 arrivals a phase)");
  std::memcpy(shared_ + bar, kMbarrierTag, kMbarrierBytes);
  mbarriers_[bar] = Mbarrier{count, count, 0};
}

void CtaEmulator::mbarrierArrive(uint32_t bar) {
  completeArrival(mbarrierAt(bar, "mbarrier arrive"));
}

void CtaEmulator::mbarrierArriveOnCopies(uint32_t bar) {
  mbarrierAt(bar, "cp.async mbarrier arrive");
  Fiber &me = *running_;
  Landing l{static_cast<int>(me.index.x), bar, {}};
  for (std::vector<AsyncCopy> &group : me.committed)
    l.copies.insert(l.copies.end(), group.begin(), group.end());
  l.copies.insert(l.copies.end(), me.open.begin(), me.open.end());
  me.committed.clear();
  me.open.clear();
  landings_.push_back(std::move(l));
}

void CtaEmulator::mbarrierWait(uint32_t bar, uint32_t parity) {
  mbarrierAt(bar, "mbarrier wait");
  if (parity > 1)
    fail("mbarrier wait: parity " + std::to_string(parity) + " (0 or 1)");
  running_->onMbarrier = true;
  running_->waitBar = bar;
  running_->waitParity = parity;
  swapcontext(&running_->context, &scheduler_);
}

void CtaEmulator::waitAllAsync() {
  // The batches handed over first: their copies were issued before the thread's others.
  const int me = static_cast<int>(running_->index.x);
  for (size_t i = landings_.size(); i-- > 0;)
    if (landings_[i].thread == me) {
      landThrough(i);
      break;
    }
  commitAsync();
  waitAsync(0);
}

void CtaEmulator::landThrough(size_t i) {
  const int thread = landings_[i].thread;
  size_t kept = 0;
  for (size_t k = 0; k < landings_.size(); ++k) {
    Landing &l = landings_[k];
    if (k <= i && l.thread == thread) {
      finishLanding(l);
    } else {
      if (kept != k)
        landings_[kept] = std::move(l);
      ++kept;
    }
  }
  landings_.resize(kept);
}

void CtaEmulator::landSome() {
  // A thread's batch lands only after those it handed over before.
  std::vector<char> held(threads_, 0);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  size_t kept = 0;
  for (size_t k = 0; k < landings_.size(); ++k) {
    Landing &l = landings_[k];
    if (!held[l.thread] && coin(rng_) < kLandingChance) {
      finishLanding(l);
    } else {
      held[l.thread] = 1;
      if (kept != k)
        landings_[kept] = std::move(l);
      ++kept;
    }
  }
  landings_.resize(kept);
}

void CtaEmulator::setMaxRegisters(int registers, bool grow) {
  running_->group.registers = registers;
  warpgroupCollective(grow ? kGroupGrow : kGroupShrink);
}

uint32_t CtaEmulator::sharedAddress(const void *p) {
  const auto *c = static_cast<const char *>(p);
  if (c < shared_ || c > shared_ + sharedBytes_)
    fail("smemAddress of a pointer outside the shared memory");
  return static_cast<uint32_t>(c - shared_);
}

void CtaEmulator::wgmma(int n, float *d, uint64_t a, uint64_t b, bool accumulate, bool bMnMajor) {
  Fiber::GroupArgs &args = running_->group;
  args.n = n;
  args.a = a;
  args.b = b;
  args.accumulate = accumulate;
  args.bMnMajor = bMnMajor;
  args.d = d;
  warpgroupCollective(kGroupIssue);
}

void CtaEmulator::wgmmaFence() { warpgroupCollective(kGroupFence); }

void CtaEmulator::wgmmaCommit() { warpgroupCollective(kGroupCommit); }

void CtaEmulator::wgmmaWait(int pendingGroups) {
  running_->group.pending = pendingGroups;
  warpgroupCollective(kGroupWait);
}

void CtaEmulator::warpgroupCollective(GroupOp op) {
  const int group = static_cast<int>(running_->index.x) / kWarpgroupThreads;
  if (group >= static_cast<int>(warpgroups_.size()))
    fail("a warpgroup collective in a block of " + std::to_string(threads_) +
         " threads, whose warpgroup " + std::to_string(group) + " is not whole");
  arrive(blockScope() + 1 + group, nullptr, op);
}

bool CtaEmulator::wgmmaInFlight(int group) const {
  if (group >= static_cast<int>(warpgroups_.size()))
    return false;
  const Warpgroup &g = warpgroups_[group];
  bool queued = !g.open.empty();
  for (const std::vector<Wgmma> &c : g.committed)
    queued |= !c.empty();
  return queued;
}

void CtaEmulator::performGroupOp(int group, GroupOp op) {
  Warpgroup &g = warpgroups_[group];
  const Fiber *members = &fibers_[static_cast<size_t>(group) * kWarpgroupThreads];
  const Fiber::GroupArgs &first = members[0].group;
  switch (op) {
  case kNoGroupOp:
  case kGroupFence:
    break;
  case kGroupIssue: {
    for (int t = 1; t < kWarpgroupThreads; ++t) {
      const Fiber::GroupArgs &other = members[t].group;
      if (other.n != first.n || other.a != first.a || other.b != first.b ||
          other.accumulate != first.accumulate)
        fail("wgmma: thread " + std::to_string(members[t].index.x) + " issues another N, " +
             "descriptor or accumulate flag than thread " + std::to_string(members[0].index.x) +
             " of its warpgroup");
      if (other.bMnMajor != first.bMnMajor)
        fail("wgmma: thread " + std::to_string(members[t].index.x) +
             " issues another B transpose flag than thread " +
             std::to_string(members[0].index.x) + " of its warpgroup");
    }
    const int regs = first.n / 2;
    Wgmma w{first.n, first.a, first.b, first.accumulate, first.bMnMajor, {}, {}};
    w.issued.resize(static_cast<size_t>(kWarpgroupThreads) * regs);
    for (int t = 0; t < kWarpgroupThreads; ++t) {
      w.d[t] = members[t].group.d;
      std::memcpy(&w.issued[static_cast<size_t>(t) * regs], w.d[t], regs * sizeof(float));
    }
    g.open.push_back(std::move(w));
    break;
  }
  case kGroupCommit:
    g.committed.push_back(std::move(g.open));
    g.open.clear();
    break;
  case kGroupWait:
    for (int t = 1; t < kWarpgroupThreads; ++t)
      if (members[t].group.pending != first.pending)
        fail("wgmma.wait_group: the threads of warpgroup " + std::to_string(group) +
             " wait with different pending counts");
    while (static_cast<int>(g.committed.size()) > first.pending) {
      for (const Wgmma &w : g.committed.front())
        runWgmma(group, w);
      g.committed.erase(g.committed.begin());
    }
    break;
  case kGroupShrink:
  case kGroupGrow:
    for (int t = 1; t < kWarpgroupThreads; ++t)
      if (members[t].group.registers != first.registers)
        fail("setmaxnreg: the threads of warpgroup " + std::to_string(group) +
             " ask for different register counts (" + std::to_string(first.registers) + ", " +
             std::to_string(members[t].group.registers) + ")");
    break;
  }
}

// One wgmma m64nNk16, bf16 x bf16 -> fp32, both operands K-major through 128-byte swizzle
// descriptors. Element (row, k) of an operand lies at canonical byte address start +
// (row / 8) * stride + (row % 8) * 128 + 2 k, whose bits 4-6 the swizzle XORs with bits
// 7-9. Thread t = 32 w + l of the warpgroup holds, in registers 4i .. 4i + 3, D at rows
// 16 w + l / 4 (+ 8) and columns 8 i + 2 (l % 4) (+ 1). As in mmaBf16, the products
// (exact in fp64) are summed in fp64, with the fp32 accumulator, and rounded once to fp32:
// the hardware rounds differently, in the last bits.
void CtaEmulator::runWgmma(int group, const Wgmma &w) {
  Warpgroup &g = warpgroups_[group];
  const int regs = w.n / 2;
  for (int t = 0; t < kWarpgroupThreads; ++t)
    if (std::memcmp(w.d[t], &w.issued[static_cast<size_t>(t) * regs], regs * sizeof(float)) != 0)
      fail("accumulators touched while a wgmma is in flight (those of thread " +
           std::to_string(group * kWarpgroupThreads + t) + ")");
  // K-major: element (row, k) as above. MN-major (B only): element (row = n, k) at
  // canonical start + (n / 64) * leading + (k / 8) * stride + (k % 8) * 128 + 2 (n % 64).
  auto load = [&](uint64_t desc, int rows, const char *which, std::vector<double> &to,
                  bool mnMajor) {
    const std::string operand = std::string("wgmma operand ") + which;
    const unsigned layout = static_cast<unsigned>(desc >> 62);
    if (layout != 1)
      fail(operand + ": descriptor layout type " + std::to_string(layout) +
           " (the emulation has the 128-byte swizzle, 1, only)");
    const unsigned baseOffset = static_cast<unsigned>(desc >> 49) & 7;
    if (baseOffset != 0)
      fail(operand + ": descriptor base offset " + std::to_string(baseOffset) +
           " (the emulation has 0 only)");
    const uint64_t start = (desc & 0x3FFF) << 4, stride = ((desc >> 32) & 0x3FFF) << 4;
    const uint64_t leading = ((desc >> 16) & 0x3FFF) << 4;
    to.resize(static_cast<size_t>(rows) * kWgmmaK);
    for (int r = 0; r < rows; ++r)
      for (int k = 0; k < kWgmmaK; ++k) {
        const uint64_t canonical =
            mnMajor ? start + (r / 64) * leading + (k / 8) * stride + (k % 8) * 128 + (r % 64) * 2
                    : start + (r / 8) * stride + (r % 8) * 128 + k * 2;
        const uint64_t physical = canonical ^ (((canonical >> 7) & 7) << 4);
        if (physical + 2 > sharedBytes_)
          fail(operand + " outside the shared memory");
        uint16_t bits;
        std::memcpy(&bits, shared_ + physical, 2);
        to[static_cast<size_t>(r) * kWgmmaK + k] = bf16Bits(bits);
      }
  };
  std::vector<double> a, b;
  load(w.a, 64, "A", a, false);
  load(w.b, w.n, "B", b, w.bMnMajor);
  for (int t = 0; t < kWarpgroupThreads; ++t) {
    const int warp = t / kWarpSize, lane = t % kWarpSize;
    float *d = w.d[t];
    for (int i = 0; i < w.n / 8; ++i)
      for (int r = 0; r < 4; ++r) {
        const int row = 16 * warp + lane / 4 + 8 * (r / 2), col = 8 * i + 2 * (lane % 4) + r % 2;
        const double *ar = &a[static_cast<size_t>(row) * kWgmmaK];
        const double *br = &b[static_cast<size_t>(col) * kWgmmaK];
        double sum = w.accumulate ? d[4 * i + r] : 0.0;
        for (int k = 0; k < kWgmmaK; ++k)
          sum += ar[k] * br[k];
        d[4 * i + r] = static_cast<float>(sum);
      }
  }
  ++wgmmas_;
  // The wgmmas still queued over these registers take them as they are now: what the
  // instruction wrote is not a touch by the thread.
  auto refresh = [&](Wgmma &q) {
    if (&q == &w)
      return;
    const int qRegs = q.n / 2;
    for (int t = 0; t < kWarpgroupThreads; ++t) {
      const auto lo = reinterpret_cast<uintptr_t>(w.d[t]), hi = lo + regs * sizeof(float);
      for (int j = 0; j < qRegs; ++j) {
        const auto at = reinterpret_cast<uintptr_t>(q.d[t] + j);
        if (at >= lo && at < hi)
          q.issued[static_cast<size_t>(t) * qRegs + j] = q.d[t][j];
      }
    }
  };
  for (std::vector<Wgmma> &c : g.committed)
    for (Wgmma &q : c)
      refresh(q);
  for (Wgmma &q : g.open)
    refresh(q);
}

bool CtaEmulator::sharedIntact() const {
  for (size_t i = 0; i < kGuardBytes; ++i)
    if (static_cast<unsigned char>(shared_[sharedBytes_ + i]) != kGuard)
      return false;
  return true;
}

} // namespace kiln::test::emu
