// GPU tests of the decode family against the fp64 CPU reference: fresh random inputs per
// case, ragged sequence lengths, shuffled page tables, NaN-poisoned unused pages/slots
// and outputs. Tolerance (documented in docs/kernels-decode.md):
//   |out - ref| <= atol + rtol * |ref|; bf16: 2e-2 + 2e-2|ref|, fp16: 4e-3 + 4e-3|ref|;
//   bf16 q/out over an f16 pool (fp16 arithmetic, bf16 output): 5e-3 + 8e-3|ref|.
#include "DecodeReference.h"
#include "F16PoolBound.h"
#include "GpuTest.h"
#include "kiln/Kernels/Decode.h"
#include "kiln/Kernels/HostNumeric.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr uint16_t kNanBits = 0x7fff; // NaN in both bf16 and fp16

uint16_t toBits(float v, kiln_dtype_t dtype) {
  return dtype == KILN_DTYPE_BF16 ? kiln_float_to_bf16(v) : kiln_float_to_f16(v);
}
float fromBits(uint16_t b, kiln_dtype_t dtype) {
  return dtype == KILN_DTYPE_BF16 ? kiln_bf16_to_float(b) : kiln_f16_to_float(b);
}

template <typename T> struct DeviceBuffer {
  T *ptr = nullptr;
  size_t count = 0;
  explicit DeviceBuffer(size_t n) : count(n) {
    if (n) {
      EXPECT_EQ(cudaMalloc(&ptr, n * sizeof(T)), cudaSuccess);
    }
  }
  explicit DeviceBuffer(const std::vector<T> &host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() { cudaFree(ptr); }
  void upload(const std::vector<T> &host) {
    EXPECT_EQ(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  std::vector<T> download() const {
    std::vector<T> host(count);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }
};

std::mt19937 &rng() {
  static std::mt19937 generator(12345);
  return generator;
}

// Random values in storage precision: bits for the device, floats for the reference.
void randomValues(size_t n, kiln_dtype_t dtype, std::vector<uint16_t> &bits,
                  std::vector<float> &values, float sigma = 1.f) {
  std::normal_distribution<float> dist(0.f, sigma);
  bits.resize(n);
  values.resize(n);
  for (size_t i = 0; i < n; ++i) {
    bits[i] = toBits(dist(rng()), dtype);
    values[i] = fromBits(bits[i], dtype);
  }
}

struct PagedLayout {
  std::vector<int32_t> seqLens, blockTable;
  int numPages = 0, maxPages = 0, maxSeqLen = 0;
  std::vector<char> pageUsed; // per page
};

// Ragged lengths in [minLen, maxLen]; pages of all sequences shuffled over a pool with a
// few extra (unused, NaN) pages; unused table entries point to an unused page.
PagedLayout makeLayout(int batch, int minLen, int maxLen, int pageSize) {
  PagedLayout layout;
  std::uniform_int_distribution<int> lenDist(minLen, maxLen);
  int totalPages = 0;
  for (int b = 0; b < batch; ++b) {
    layout.seqLens.push_back(b == 0 ? maxLen : lenDist(rng()));
    layout.maxSeqLen = std::max(layout.maxSeqLen, layout.seqLens.back());
    totalPages += (layout.seqLens.back() + pageSize - 1) / pageSize;
  }
  layout.maxPages = (layout.maxSeqLen + pageSize - 1) / pageSize + 1;
  layout.numPages = totalPages + 3;
  std::vector<int32_t> perm(layout.numPages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng());
  int spare = perm[layout.numPages - 1]; // never used by any sequence
  layout.blockTable.assign(static_cast<size_t>(batch) * layout.maxPages, spare);
  layout.pageUsed.assign(layout.numPages, 0);
  int next = 0;
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < (layout.seqLens[b] + pageSize - 1) / pageSize; ++i) {
      layout.blockTable[static_cast<size_t>(b) * layout.maxPages + i] = perm[next];
      layout.pageUsed[perm[next++]] = 1;
    }
  return layout;
}

struct Tolerance {
  double atol, rtol;
};
Tolerance toleranceFor(kiln_dtype_t dtype) {
  return dtype == KILN_DTYPE_BF16 ? Tolerance{2e-2, 2e-2} : Tolerance{4e-3, 4e-3};
}
// bf16 q/out over an f16 pool: the fp16 kernel's arithmetic (within fp16's tolerance of
// the reference) and then a bf16 rounding of the output (at most 2^-8 relative).
constexpr Tolerance kF16PoolTolerance{5e-3, 8e-3};

// Compares and reports the first few mismatches; returns the number of bad elements.
size_t compare(const std::vector<uint16_t> &got, const std::vector<double> &ref, kiln_dtype_t dtype,
               const std::string &what, Tolerance tol) {
  size_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double v = fromBits(got[i], dtype);
    double err = std::fabs(v - ref[i]);
    worst = std::isnan(v) ? INFINITY : std::max(worst, err);
    if (!(err <= tol.atol + tol.rtol * std::fabs(ref[i]))) {
      if (bad < 5)
        ADD_FAILURE() << what << ": element " << i << " got " << v << " want " << ref[i];
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0u) << what << " (" << bad << " of " << ref.size() << " bad, worst " << worst
                     << ")";
  return bad;
}
size_t compare(const std::vector<uint16_t> &got, const std::vector<double> &ref, kiln_dtype_t dtype,
               const std::string &what) {
  return compare(got, ref, dtype, what, toleranceFor(dtype));
}

// Device buffers of one gqa_decode launch.
struct GqaBuffers {
  const void *q, *kv;
  const int32_t *table, *lens;
  void *out;
};

// The parameters every gqa_decode test sets alike (the rest are the test's own).
kiln_gqa_decode_params_t gqaParams(const GqaBuffers &buffers, int batch, int qLen, int qHeads,
                                   int kvHeads, int headDim, int pageSize,
                                   const PagedLayout &layout, int maxSeqLen) {
  kiln_gqa_decode_params_t p{};
  p.q = buffers.q;
  p.kv_cache = buffers.kv;
  p.block_table = buffers.table;
  p.seq_lens = buffers.lens;
  p.out = buffers.out;
  p.batch = batch;
  p.q_len = qLen;
  p.q_heads = qHeads;
  p.kv_heads = kvHeads;
  p.head_dim = headDim;
  p.page_size = pageSize;
  p.num_pages = layout.numPages;
  p.max_pages_per_seq = layout.maxPages;
  p.max_seq_len = maxSeqLen;
  return p;
}

struct GqaCase {
  kiln_dtype_t dtype;
  int headDim, pageSize, group, qLen;
  int batch = 3, kvHeads = 2, minLen = 1, maxLen = 300;
  int numSplits = 0; // 0 = automatic
  int splitKeys = 0; // > 0: fixed key chunks (batch-invariant mode)
  int window = 0;    // > 0: sliding window
  bool sinks = false; // per-head attention-sink logits
  bool fp8 = false;   // an FP8 e4m3 pool (bf16 q/out) with per-KV-head scales
  bool fp8Scales = true; // false: the scales' NULL (1)
  bool f16Pool = false;  // an f16 pool (bf16 q/out) of values with fp16's full precision
  // Also: capture the launch in a CUDA graph and replay it twice (the fused combine's
  // counters must be back at 0 after every launch), and with an explicit split count
  // (or split_keys with counters) compare the bits with the separate combine kernel's.
  bool replays = false;
  // Pass split_counters (a buffer of their own, as the runtime does): split_keys mode
  // then combines in the kernel too.
  bool counters = false;
};

// The workspace contract: zeroed once after allocating (the fused combine's arrival
// counters start at 0; every launch leaves them at 0).
void zeroWorkspace(void *ptr, size_t bytes) {
  if (bytes)
    ASSERT_EQ(cudaMemset(ptr, 0, bytes), cudaSuccess);
}

// Bytes of gqa_decode's fused-combine counters in a workspace of the num_splits mode:
// one a (sequence, kv head, block of 16 or 32 query rows), after the partials.
size_t gqaCounterBytes(int batch, int kvHeads, int qLen, int group) {
  const int rows = qLen * group, perBlock = rows > 16 ? 32 : 16;
  return static_cast<size_t>(batch) * kvHeads * ((rows + perBlock - 1) / perBlock) * 4;
}

// The pool's element type of a case.
kiln_dtype_t poolDtype(const GqaCase &c) {
  return c.fp8 ? KILN_DTYPE_FP8_E4M3 : c.f16Pool ? KILN_DTYPE_F16 : c.dtype;
}

// FP8 pools' per-KV-head dequantization scales: different per head, not powers of two.
std::vector<float> fp8Scales(int kvHeads, float base) {
  std::vector<float> scales(kvHeads);
  for (int h = 0; h < kvHeads; ++h)
    scales[h] = base * (1.f + 0.75f * static_cast<float>(h));
  return scales;
}

constexpr uint8_t kE4m3Nan = 0x7f;

// A paged pool's storage (16-bit bits or e4m3 bytes, as bytes) and the values the
// kernel must see (scales applied), with unowned entries poisoned as NaN.
struct PoolData {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
  bool fp8 = false;
  void poison(size_t element, size_t count) {
    if (fp8) {
      std::fill(bytes.begin() + element, bytes.begin() + element + count, kE4m3Nan);
    } else {
      for (size_t i = element; i < element + count; ++i)
        std::memcpy(&bytes[2 * i], &kNanBits, 2);
    }
  }
};

// Random pool entries: `dtype` bits, or e4m3 bytes whose values are byte * scale of
// their KV head (element i belongs to head (i / headDim) % kvHeads).
PoolData randomPool(size_t n, kiln_dtype_t dtype, bool fp8, int kvHeads, int headDim,
                    const std::vector<float> &kScales, const std::vector<float> &vScales,
                    int pageSize) {
  PoolData pool;
  pool.fp8 = fp8;
  if (!fp8) {
    std::vector<uint16_t> bits;
    randomValues(n, dtype, bits, pool.values);
    pool.bytes.resize(2 * n);
    std::memcpy(pool.bytes.data(), bits.data(), 2 * n);
    return pool;
  }
  std::normal_distribution<float> dist(0.f, 1.f);
  pool.bytes.resize(n);
  pool.values.resize(n);
  const size_t half = static_cast<size_t>(pageSize) * kvHeads * headDim; // K or V of a page
  for (size_t i = 0; i < n; ++i) {
    const int head = static_cast<int>((i / headDim) % kvHeads);
    const bool isV = (i / half) % 2 == 1;
    const std::vector<float> &scales = isV ? vScales : kScales;
    pool.bytes[i] = kiln_float_to_e4m3(dist(rng()));
    pool.values[i] = kiln_e4m3_to_float(pool.bytes[i]) * (scales.empty() ? 1.f : scales[head]);
  }
  return pool;
}

// Sink logits of `heads` heads: spread around the scores' range, so that they matter.
std::vector<float> sinkLogits(int heads) {
  std::vector<float> sinks(heads);
  for (int h = 0; h < heads; ++h)
    sinks[h] = -3.0f + 6.0f * static_cast<float>((h * 37) % 11) / 10.0f;
  return sinks;
}

std::string describe(const GqaCase &c) {
  return std::string(c.dtype == KILN_DTYPE_BF16 ? "bf16" : "fp16") +
         " D=" + std::to_string(c.headDim) + " page=" + std::to_string(c.pageSize) +
         " group=" + std::to_string(c.group) + " q_len=" + std::to_string(c.qLen) +
         " batch=" + std::to_string(c.batch) + " kv_heads=" + std::to_string(c.kvHeads) +
         " len<=" + std::to_string(c.maxLen) + " splits=" + std::to_string(c.numSplits) +
         " split_keys=" + std::to_string(c.splitKeys) + " window=" + std::to_string(c.window) +
         (c.sinks ? " sinks" : "") +
         (c.fp8 ? (c.fp8Scales ? " fp8 pool" : " fp8 pool, no scales") : "") +
         (c.f16Pool ? " f16 pool" : "");
}

void runGqaCase(const GqaCase &c) {
  SCOPED_TRACE(describe(c));
  const int qHeads = c.kvHeads * c.group, D = c.headDim;
  PagedLayout layout = makeLayout(c.batch, std::max(c.minLen, c.qLen), c.maxLen, c.pageSize);
  kiln::reference::PagedShape shape;
  shape.batch = c.batch;
  shape.qLen = c.qLen;
  shape.qHeads = qHeads;
  shape.kvHeads = c.kvHeads;
  shape.headDim = D;
  shape.pageSize = c.pageSize;
  shape.maxPages = layout.maxPages;

  std::vector<uint16_t> qBits;
  std::vector<float> qVals;
  randomValues(static_cast<size_t>(c.batch) * c.qLen * qHeads * D, c.dtype, qBits, qVals);
  const size_t pageElems = 2ull * c.pageSize * c.kvHeads * D;
  const bool scaled = c.fp8 && c.fp8Scales;
  const std::vector<float> kScales = scaled ? fp8Scales(c.kvHeads, 0.5f) : std::vector<float>{};
  const std::vector<float> vScales = scaled ? fp8Scales(c.kvHeads, 0.3f) : std::vector<float>{};
  PoolData pool = randomPool(pageElems * layout.numPages, c.f16Pool ? KILN_DTYPE_F16 : c.dtype,
                             c.fp8, c.kvHeads, D, kScales, vScales, c.pageSize);
  // Poison what no sequence owns: unused pages, and slots past each sequence's end.
  for (int p = 0; p < layout.numPages; ++p)
    if (!layout.pageUsed[p])
      pool.poison(p * pageElems, pageElems);
  for (int b = 0; b < c.batch; ++b) {
    int len = layout.seqLens[b];
    if (len % c.pageSize == 0)
      continue;
    size_t page = layout.blockTable[static_cast<size_t>(b) * layout.maxPages + len / c.pageSize];
    for (int half = 0; half < 2; ++half)
      for (int slot = len % c.pageSize; slot < c.pageSize; ++slot) {
        size_t at = ((page * 2 + half) * c.pageSize + slot) * c.kvHeads * D;
        pool.poison(at, static_cast<size_t>(c.kvHeads) * D);
      }
  }
  // With a window, also the keys below every query's window: the kernel must not read
  // them (a recycled page holds anything).
  if (c.window > 0)
    for (int b = 0; b < c.batch; ++b)
      for (int pos = 0; pos < layout.seqLens[b] - c.qLen - c.window + 1; ++pos) {
        size_t page = layout.blockTable[static_cast<size_t>(b) * layout.maxPages +
                                        pos / c.pageSize];
        for (int half = 0; half < 2; ++half) {
          size_t at = ((page * 2 + half) * c.pageSize + pos % c.pageSize) * c.kvHeads * D;
          pool.poison(at, static_cast<size_t>(c.kvHeads) * D);
        }
      }
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const std::vector<float> sinks = c.sinks ? sinkLogits(qHeads) : std::vector<float>{};
  std::vector<double> ref = kiln::reference::gqaDecode(
      shape, qVals, pool.values, layout.blockTable, layout.seqLens, scale, c.window, sinks);
  DeviceBuffer<float> dSinks(sinks.empty() ? std::vector<float>{0.f} : sinks);
  DeviceBuffer<float> dKScale(scaled ? kScales : std::vector<float>{0.f});
  DeviceBuffer<float> dVScale(scaled ? vScales : std::vector<float>{0.f});

  DeviceBuffer<uint16_t> dQ(qBits), dOut(qBits.size());
  DeviceBuffer<uint8_t> dKv(pool.bytes);
  DeviceBuffer<int32_t> dTable(layout.blockTable), dLens(layout.seqLens);
  dOut.upload(std::vector<uint16_t>(qBits.size(), kNanBits));

  kiln_gqa_decode_params_t p =
      gqaParams({dQ.ptr, dKv.ptr, dTable.ptr, dLens.ptr, dOut.ptr}, c.batch, c.qLen, qHeads,
                c.kvHeads, D, c.pageSize, layout, layout.maxSeqLen);
  p.softmax_scale = static_cast<float>(scale);
  p.dtype = c.dtype;
  p.kv_dtype = poolDtype(c);
  p.k_scale = scaled ? dKScale.ptr : nullptr;
  p.v_scale = scaled ? dVScale.ptr : nullptr;
  p.num_splits = c.numSplits;
  p.split_keys = c.splitKeys;
  p.window = c.window;
  p.sinks = c.sinks ? dSinks.ptr : nullptr;
  // Exactly the queried workspace, explicit num_splits included (the query once
  // returned less than the launcher then demanded for splits that round down).
  size_t wsBytes = 0;
  ASSERT_EQ(kiln_gqa_decode_workspace_bytes(&p, &wsBytes), KILN_OK) << kiln_last_error();
  DeviceBuffer<float> dWs((wsBytes + 3) / 4);
  zeroWorkspace(dWs.ptr, wsBytes);
  p.workspace = dWs.ptr;
  p.workspace_bytes = wsBytes;
  // The caller's counters: exactly the documented size, zeroed once.
  const size_t ownCounterBytes =
      c.counters ? gqaCounterBytes(c.batch, c.kvHeads, c.qLen, c.group) : 0;
  DeviceBuffer<uint32_t> dCounters(std::max<size_t>(1, ownCounterBytes / 4));
  zeroWorkspace(dCounters.ptr, ownCounterBytes);
  if (c.counters) {
    p.split_counters = dCounters.ptr;
    p.split_counter_bytes = ownCounterBytes;
  }
  ASSERT_EQ(kiln_gqa_decode(&p), KILN_OK) << kiln_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint16_t> first = dOut.download();
  compare(first, ref, c.dtype, "gqa_decode " + describe(c),
          c.f16Pool ? kF16PoolTolerance : toleranceFor(c.dtype));
  if (!c.replays)
    return;

  // The fused combine's counters: the caller's (split_counters), or in num_splits mode
  // with split-KV at the workspace's end; the partials are scratch, so they are poisoned
  // before each replay.
  const size_t counterBytes = c.splitKeys == 0 && !c.counters && wsBytes
                                  ? gqaCounterBytes(c.batch, c.kvHeads, c.qLen, c.group)
                                  : 0;
  ASSERT_LE(counterBytes, wsBytes);
  auto countersAreZero = [&](const char *when) {
    std::vector<uint32_t> counters(counterBytes / 4);
    if (counterBytes) {
      std::vector<float> ws = dWs.download();
      std::memcpy(counters.data(),
                  reinterpret_cast<const char *>(ws.data()) + wsBytes - counterBytes, counterBytes);
    } else if (c.counters) {
      counters = dCounters.download();
    }
    for (size_t i = 0; i < counters.size(); ++i)
      EXPECT_EQ(counters[i], 0u) << "counter " << i << " " << when;
  };
  countersAreZero("after the eager launch");
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  p.stream = stream;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  // Two launches back to back on one workspace, as a decode graph holds them: the second
  // may start (programmatic launch) while the first combines, and must wait for it.
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(kiln_gqa_decode(&p), KILN_OK) << kiln_last_error();
  ASSERT_EQ(kiln_gqa_decode(&p), KILN_OK) << kiln_last_error();
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 2; ++replay) {
    dOut.upload(std::vector<uint16_t>(qBits.size(), kNanBits));
    if (wsBytes > counterBytes) // no workspace without split-KV
      ASSERT_EQ(cudaMemset(dWs.ptr, 0xff, wsBytes - counterBytes), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_TRUE(dOut.download() == first) << "graph replay " << replay << " != the eager launch";
    countersAreZero(replay ? "after the second replay" : "after the first replay");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  p.stream = nullptr;

  // The same splits through the separate combine kernel (the knob's old launch; with
  // split_keys: no split_counters): the fused combine runs its arithmetic, so the bits
  // agree.
  if ((c.numSplits > 0 && c.splitKeys == 0) || (c.splitKeys > 0 && c.counters)) {
    dOut.upload(std::vector<uint16_t>(qBits.size(), kNanBits));
    setenv("KILN_GQA_SEPARATE_COMBINE", "1", 1);
    p.split_counters = nullptr;
    p.split_counter_bytes = 0;
    const kiln_status_t status = kiln_gqa_decode(&p);
    unsetenv("KILN_GQA_SEPARATE_COMBINE");
    ASSERT_EQ(status, KILN_OK) << kiln_last_error();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_TRUE(dOut.download() == first) << "fused combine != separate combine kernel";
  }
}

TEST(GqaDecodeGpu, HeadDimPageGroupCrossProduct) {
  KILN_REQUIRE_GPU();
  const int groups[] = {1, 4, 16, 5};
  const int qLens[] = {1, 4, 2, 3};
  int n = 0;
  for (kiln_dtype_t dtype : {KILN_DTYPE_BF16, KILN_DTYPE_F16})
    for (int headDim : {64, 128, 256})
      for (int pageSize : {16, 32, 64, 128})
        for (int gi = 0; gi < 4; ++gi, ++n)
          runGqaCase({dtype, headDim, pageSize, groups[gi], qLens[(gi + n) % 4]});
}

TEST(GqaDecodeGpu, EveryQLenAndLargeRowCounts) {
  KILN_REQUIRE_GPU();
  for (int qLen = 1; qLen <= 8; ++qLen)
    for (int group : {1, 4, 8})
      runGqaCase({KILN_DTYPE_BF16, 128, 64, group, qLen});
  // q_len * group = 128 rows (8 row tiles) at every head dim.
  for (int headDim : {64, 128, 256})
    runGqaCase({KILN_DTYPE_F16, headDim, 32, 16, 8});
  // Every group size 1..16 once.
  for (int group = 1; group <= 16; ++group)
    runGqaCase({KILN_DTYPE_BF16, 64, 16, group, 1 + group % 3});
}

// The workspace query covers what the launch then demands, counters included, for every
// explicit split count and the automatic one (it once returned less for counts that round
// down): each launch gets exactly the queried bytes, zeroed, and must leave the fused
// combine's counters (the last bytes) at 0.
TEST(GqaDecodeGpu, WorkspaceQueryCoversEverySplitCount) {
  KILN_REQUIRE_GPU();
  const int batch = 2, kvHeads = 2, headDim = 128, pageSize = 64, maxLen = 3000;
  PagedLayout layout = makeLayout(batch, maxLen, maxLen, pageSize);
  std::vector<uint16_t> kvBits, qBits;
  std::vector<float> unused;
  randomValues(2ull * pageSize * kvHeads * headDim * layout.numPages, KILN_DTYPE_BF16, kvBits,
               unused);
  DeviceBuffer<uint16_t> dKv(kvBits);
  DeviceBuffer<int32_t> dTable(layout.blockTable), dLens(layout.seqLens);
  for (int qLen : {1, 8})
    for (int group : {4, 16}) {
      const int qHeads = kvHeads * group;
      randomValues(static_cast<size_t>(batch) * qLen * qHeads * headDim, KILN_DTYPE_BF16, qBits,
                   unused);
      DeviceBuffer<uint16_t> dQ(qBits), dOut(qBits.size());
      for (int splits = 0; splits <= KILN_DECODE_MAX_SPLITS; ++splits) {
        SCOPED_TRACE("q_len=" + std::to_string(qLen) + " group=" + std::to_string(group) +
                     " num_splits=" + std::to_string(splits));
        kiln_gqa_decode_params_t p =
            gqaParams({dQ.ptr, dKv.ptr, dTable.ptr, dLens.ptr, dOut.ptr}, batch, qLen, qHeads,
                      kvHeads, headDim, pageSize, layout, layout.maxSeqLen);
        p.softmax_scale = 0.088f;
        p.dtype = KILN_DTYPE_BF16;
        p.kv_dtype = KILN_DTYPE_BF16;
        p.num_splits = splits;
        size_t wsBytes = 0;
        ASSERT_EQ(kiln_gqa_decode_workspace_bytes(&p, &wsBytes), KILN_OK) << kiln_last_error();
        DeviceBuffer<uint32_t> dWs((wsBytes + 3) / 4);
        zeroWorkspace(dWs.ptr, wsBytes);
        p.workspace = dWs.ptr;
        p.workspace_bytes = wsBytes;
        ASSERT_EQ(kiln_gqa_decode(&p), KILN_OK) << kiln_last_error();
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        if (wsBytes == 0)
          continue;
        const std::vector<uint32_t> ws = dWs.download();
        const size_t counters = gqaCounterBytes(batch, kvHeads, qLen, group) / 4;
        ASSERT_LE(counters, ws.size());
        for (size_t i = ws.size() - counters; i < ws.size(); ++i)
          EXPECT_EQ(ws[i], 0u) << "counter " << i - (ws.size() - counters) << " left nonzero";
      }
    }
}

TEST(GqaDecodeGpu, SplitKv) {
  KILN_REQUIRE_GPU();
  for (int splits : {1, 2, 3, 7, 40}) {
    GqaCase c{KILN_DTYPE_BF16, 128, 64, 4, 1};
    c.numSplits = splits;
    c.maxLen = 1500;
    c.replays = true;
    runGqaCase(c);
  }
  // Automatic splits: one long sequence, few heads -> many splits.
  GqaCase c{KILN_DTYPE_F16, 128, 16, 8, 4};
  c.batch = 1;
  c.kvHeads = 1;
  c.maxLen = 6000;
  runGqaCase(c);
  GqaCase d{KILN_DTYPE_BF16, 256, 128, 2, 2};
  d.batch = 2;
  d.maxLen = 4000;
  runGqaCase(d);
  // Short sequences with many splits: empty splits must not disturb the result.
  GqaCase e{KILN_DTYPE_BF16, 64, 16, 4, 3};
  e.minLen = 3;
  e.maxLen = 70;
  e.numSplits = 16;
  runGqaCase(e);
}

// Case `n` of the fused-combine grids: pool 0-3 (bf16, fp16, an f16 pool under bf16
// q/out, FP8), batch 1 (8 kv heads) or 16 (2), head dim 64 or 128, q_len 1 or 4.
GqaCase fusedCombineCase(int pool, int batch, int n) {
  GqaCase c{pool == 1 ? KILN_DTYPE_F16 : KILN_DTYPE_BF16, n % 5 == 4 ? 64 : 128, 64, 4,
            n % 3 == 2 ? 4 : 1};
  c.f16Pool = pool == 2;
  c.fp8 = pool == 3;
  c.batch = batch;
  c.kvHeads = batch == 1 ? 8 : 2;
  return c;
}

// The fused combine (the last split block of a group combines the partials) at the
// small-batch shapes it is for: batch 1 and 16, short to long sequences, automatic and
// explicit split counts (many splits and a few), every pool and q/out dtype, multi-token
// rows, sinks and a window; each replayed from a CUDA graph twice, explicit counts also
// against the separate combine kernel bit for bit.
TEST(GqaDecodeGpu, FusedCombineReplaysAndMatchesSeparateCombine) {
  KILN_REQUIRE_GPU();
  int n = 0;
  for (int pool = 0; pool < 4; ++pool) // bf16, fp16, f16 pool (bf16 q/out), FP8 pool
    for (int batch : {1, 16})
      for (int len : {1000, 4100, 9000}) {
        if (batch == 16 && len == 9000)
          continue; // the fp64 reference's time
        GqaCase c = fusedCombineCase(pool, batch, n);
        c.minLen = len / 2;
        c.maxLen = len;
        c.numSplits = n % 2 ? (n % 4 == 1 ? 3 : 40) : 0;
        c.sinks = n % 3 == 1;
        c.window = n % 7 == 5 ? 700 : 0;
        c.replays = true;
        ++n;
        runGqaCase(c);
      }
  // d = 256 (64-thread blocks), two row tiles (q_len 8 x group 4 = 32 rows).
  for (int headDim : {256, 128}) {
    GqaCase c{KILN_DTYPE_BF16, headDim, 32, 4, headDim == 256 ? 2 : 8};
    c.batch = 1;
    c.kvHeads = 4;
    c.maxLen = 3000;
    c.numSplits = 17;
    c.sinks = true;
    c.replays = true;
    runGqaCase(c);
  }
}

// The runtime's mode: fixed split_keys chunks with the caller's counters (split_counters)
// combine in the kernel, replay from a CUDA graph with the counters back at 0, and give
// the separate combine kernel's bits; empty chunks past a row's keys, windows and sinks
// included.
TEST(GqaDecodeGpu, SplitKeysFusedCombineReplaysAndMatchesSeparateCombine) {
  KILN_REQUIRE_GPU();
  int n = 0;
  for (int pool = 0; pool < 4; ++pool) // bf16, fp16, f16 pool (bf16 q/out), FP8 pool
    for (int batch : {1, 16})
      for (int len : {700, 4100}) {
        GqaCase c = fusedCombineCase(pool, batch, n);
        c.minLen = len / 3;
        c.maxLen = len;
        c.splitKeys = n % 2 ? 256 : 512;
        c.sinks = n % 3 == 1;
        c.window = n % 7 == 5 ? 300 : 0;
        c.replays = true;
        c.counters = true;
        ++n;
        runGqaCase(c);
      }
  // d = 256, two row tiles (q_len 8 x group 4 = 32 rows), group 5 (3 row blocks).
  for (int headDim : {256, 128}) {
    GqaCase c{KILN_DTYPE_BF16, headDim, 32, headDim == 256 ? 4 : 5, 8};
    c.batch = 2;
    c.kvHeads = 3;
    c.maxLen = 2000;
    c.splitKeys = 256;
    c.sinks = true;
    c.replays = true;
    c.counters = true;
    runGqaCase(c);
  }
}

// Sliding windows: shorter, equal to and longer than the tile (64/32 keys) and the split
// chunk, with every split mode and multi-token rows whose windows differ per token.
TEST(GqaDecodeGpu, SlidingWindowMatchesReference) {
  KILN_REQUIRE_GPU();
  int n = 0;
  for (int window : {1, 7, 64, 100, 257, 2000})
    for (int headDim : {64, 128, 256}) {
      GqaCase c{n % 2 ? KILN_DTYPE_F16 : KILN_DTYPE_BF16, headDim, n % 3 ? 16 : 64,
                1 + 3 * (n % 3), 1 + n % 5};
      c.maxLen = 1200;
      c.window = window;
      c.numSplits = n % 4 == 1 ? 1 : 0;
      c.splitKeys = n % 4 == 2 ? 256 : 0;
      ++n;
      runGqaCase(c);
    }
}

// Attention sinks (gpt-oss) with every split mode, alone and with a window.
TEST(GqaDecodeGpu, AttentionSinksMatchReference) {
  KILN_REQUIRE_GPU();
  int n = 0;
  for (int headDim : {64, 128, 256})
    for (int mode = 0; mode < 3; ++mode) {
      GqaCase c{KILN_DTYPE_BF16, headDim, 16, 8, 1 + n % 4};
      c.maxLen = 900;
      c.sinks = true;
      c.numSplits = mode == 1 ? 1 : 0;
      c.splitKeys = mode == 2 ? 256 : 0;
      c.window = n % 2 ? 128 : 0;
      ++n;
      runGqaCase(c);
    }
}

// FP8 e4m3 pools (bf16 q/out) against the reference on the dequantized values: every
// head dim and row-tile count, pages, split modes, windows, sinks, and no scales.
TEST(GqaDecodeGpu, Fp8PoolMatchesReference) {
  KILN_REQUIRE_GPU();
  const int groups[] = {1, 4, 8, 16};
  int n = 0;
  for (int headDim : {64, 128, 256})
    for (int pageSize : {16, 64, 128})
      for (int gi = 0; gi < 4; ++gi, ++n) {
        GqaCase c{KILN_DTYPE_BF16, headDim, pageSize, groups[gi], 1 + n % 4};
        c.fp8 = true;
        c.maxLen = 700;
        c.numSplits = n % 3 == 1 ? 1 : 0;
        c.splitKeys = n % 3 == 2 ? 256 : 0;
        c.window = n % 5 == 3 ? 100 : 0;
        c.sinks = n % 4 == 1;
        c.fp8Scales = n % 7 != 0;
        runGqaCase(c);
      }
  // Long sequences through many splits, and q_len 8 x group 16 (eight row tiles).
  GqaCase c{KILN_DTYPE_BF16, 128, 64, 8, 1};
  c.fp8 = true;
  c.batch = 2;
  c.maxLen = 5000;
  runGqaCase(c);
  for (int headDim : {64, 128, 256}) {
    GqaCase big{KILN_DTYPE_BF16, headDim, 32, 16, 8};
    big.fp8 = true;
    runGqaCase(big);
  }
}

// f16 pools (bf16 q/out) of values with fp16's full precision (not bf16-representable)
// against the reference, at the fp16 kernel's tolerance plus the bf16 output's rounding:
// every head dim and row-tile count, pages, every split mode (automatic, none, explicit,
// fixed chunks), windows, sinks and multi-token rows.
TEST(GqaDecodeGpu, F16PoolMatchesReference) {
  KILN_REQUIRE_GPU();
  const int groups[] = {1, 4, 8, 16};
  int n = 0;
  for (int headDim : {64, 128, 256})
    for (int pageSize : {16, 64, 128})
      for (int gi = 0; gi < 4; ++gi, ++n) {
        GqaCase c{KILN_DTYPE_BF16, headDim, pageSize, groups[gi], 1 + n % 4};
        c.f16Pool = true;
        c.maxLen = 700;
        c.numSplits = n % 4 == 1 ? 1 : n % 4 == 3 ? 5 : 0;
        c.splitKeys = n % 4 == 2 ? 256 : 0;
        c.window = n % 5 == 3 ? 100 : 0;
        c.sinks = n % 3 == 1;
        runGqaCase(c);
      }
  // Long sequences through many automatic splits (one KV head: many splits a head), and
  // q_len 8 x group 16 (eight row tiles) at every head dim.
  GqaCase c{KILN_DTYPE_BF16, 128, 64, 8, 1};
  c.f16Pool = true;
  c.batch = 2;
  c.maxLen = 5000;
  runGqaCase(c);
  c.batch = 1;
  c.kvHeads = 1;
  c.qLen = 4;
  c.maxLen = 6000;
  runGqaCase(c);
  for (int headDim : {64, 128, 256}) {
    GqaCase big{KILN_DTYPE_BF16, headDim, 32, 16, 8};
    big.f16Pool = true;
    runGqaCase(big);
  }
}

TEST(GqaDecodeGpu, FixedSplitKeysMatchReference) {
  KILN_REQUIRE_GPU();
  for (int headDim : {64, 128, 256})
    for (int qLen : {1, 5}) {
      GqaCase c{KILN_DTYPE_BF16, headDim, 64, 7, qLen};
      c.maxLen = 1500;
      c.splitKeys = 256;
      runGqaCase(c);
    }
}

// Batch invariance (the property lossless speculation rests on): a verify step of q_len
// T and the T plain decode steps that would produce the same tokens see the same query
// rows over the same cached keys, so with fixed split_keys they must give the same bits,
// and so must a step of any other batch holding the same sequence.
struct InvariantRun {
  const std::vector<uint16_t> &kv;
  const PagedLayout &layout;
  int qHeads, kvHeads, headDim, pageSize, splitKeys;
  int window = 0;
  const float *sinks = nullptr; // device
  kiln_dtype_t kvDtype = KILN_DTYPE_BF16; // the pool's type (kv holds its bits; FP8: bytes)
  kiln_dtype_t dtype = KILN_DTYPE_BF16;   // q and out
  int numSplits = 0;                      // with splitKeys 0: 0 = automatic
};

std::vector<uint16_t> decodeBits(const InvariantRun &run, const std::vector<uint16_t> &q,
                                 const std::vector<int32_t> &table,
                                 const std::vector<int32_t> &lens, int qLen) {
  const int batch = static_cast<int>(lens.size());
  DeviceBuffer<uint16_t> dQ(q), dKv(run.kv), dOut(q.size());
  DeviceBuffer<int32_t> dTable(table), dLens(lens);
  kiln_gqa_decode_params_t p =
      gqaParams({dQ.ptr, dKv.ptr, dTable.ptr, dLens.ptr, dOut.ptr}, batch, qLen, run.qHeads,
                run.kvHeads, run.headDim, run.pageSize, run.layout,
                *std::max_element(lens.begin(), lens.end()));
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(run.headDim));
  p.dtype = run.dtype;
  p.kv_dtype = run.kvDtype;
  p.split_keys = run.splitKeys;
  p.num_splits = run.numSplits;
  p.window = run.window;
  p.sinks = run.sinks;
  size_t wsBytes = 0;
  EXPECT_EQ(kiln_gqa_decode_workspace_bytes(&p, &wsBytes), KILN_OK) << kiln_last_error();
  DeviceBuffer<float> dWs((wsBytes + 3) / 4);
  zeroWorkspace(dWs.ptr, wsBytes);
  p.workspace = dWs.ptr;
  p.workspace_bytes = wsBytes;
  EXPECT_EQ(kiln_gqa_decode(&p), KILN_OK) << kiln_last_error();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint16_t> separate = dOut.download();
  if (run.splitKeys == 0)
    return separate;
  // The runtime's launch: the same chunks combined in the kernel (split_counters) must
  // give the same bits, so batch invariance holds for it as well.
  const size_t counterBytes = gqaCounterBytes(batch, run.kvHeads, qLen, run.qHeads / run.kvHeads);
  DeviceBuffer<uint32_t> dCounters(std::vector<uint32_t>(counterBytes / 4, 0u));
  p.split_counters = dCounters.ptr;
  p.split_counter_bytes = counterBytes;
  dOut.upload(std::vector<uint16_t>(q.size(), kNanBits));
  EXPECT_EQ(kiln_gqa_decode(&p), KILN_OK) << kiln_last_error();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint16_t> fused = dOut.download();
  EXPECT_TRUE(fused == separate) << "split_keys: fused combine != separate combine kernel";
  for (uint32_t counter : dCounters.download())
    EXPECT_EQ(counter, 0u);
  return fused;
}

// Random e4m3 bytes (the encoder saturates: no NaN byte), two a 16-bit element: an FP8
// pool of `bytes` bytes for an InvariantRun (whose kv holds the pool's bits).
std::vector<uint16_t> randomFp8Pool(size_t bytes) {
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<uint8_t> raw(bytes);
  for (uint8_t &byte : raw)
    byte = kiln_float_to_e4m3(dist(rng()));
  std::vector<uint16_t> bits((bytes + 1) / 2);
  std::memcpy(bits.data(), raw.data(), bytes);
  return bits;
}

// An f16 pool and an FP8 pool (bf16 q/out) must keep the property: speculation over them
// is lossless too. (FP8 at head_dim 128: the decode steps run one row tile, the verify
// step two, and the integer widening, which only one row tile has, must stay out of
// split_keys mode.)
TEST(GqaDecodeGpu, FixedSplitKeysAreBatchInvariant) {
  KILN_REQUIRE_GPU();
  const int T = 5, kvHeads = 2, pageSize = 64;
  for (kiln_dtype_t kvDtype : {KILN_DTYPE_BF16, KILN_DTYPE_F16, KILN_DTYPE_FP8_E4M3})
    for (int headDim : {64, 128, 256})
      for (int group : {4, 7})
        for (int window : {0, 77, 300}) {
          // Sinks with the window of 77 (the one-split and the combined path must agree).
          DeviceBuffer<float> dSinks(sinkLogits(kvHeads * group));
          SCOPED_TRACE(std::string(kvDtype == KILN_DTYPE_F16          ? "f16 pool "
                                   : kvDtype == KILN_DTYPE_FP8_E4M3 ? "fp8 pool "
                                                                    : "bf16 pool ") +
                       "D=" + std::to_string(headDim) + " group=" + std::to_string(group) +
                       " window=" + std::to_string(window));
          const int qHeads = kvHeads * group, batch = 3;
          PagedLayout layout = makeLayout(batch, T + 1, 1300, pageSize);
          std::vector<uint16_t> kvBits, qBits;
          std::vector<float> unused;
          const size_t poolElems = 2ull * pageSize * kvHeads * headDim * layout.numPages;
          if (kvDtype == KILN_DTYPE_FP8_E4M3)
            kvBits = randomFp8Pool(poolElems);
          else
            randomValues(poolElems, kvDtype, kvBits, unused);
          const size_t row = static_cast<size_t>(qHeads) * headDim; // one token's q
          randomValues(batch * T * row, KILN_DTYPE_BF16, qBits, unused);
          InvariantRun run{kvBits,  layout,  qHeads,
                           kvHeads, headDim, pageSize,
                           256,     window,  window == 77 ? dSinks.ptr : nullptr,
                           kvDtype};
          const std::vector<uint16_t> verify =
              decodeBits(run, qBits, layout.blockTable, layout.seqLens, T);
          for (int t = 0; t < T; ++t) {
            // Token t of every sequence alone, as a plain decode step of the whole batch.
            std::vector<uint16_t> q(batch * row);
            std::vector<int32_t> lens(batch);
            for (int b = 0; b < batch; ++b) {
              std::copy_n(qBits.begin() + (b * T + t) * row, row, q.begin() + b * row);
              lens[b] = layout.seqLens[b] - (T - 1 - t);
            }
            const std::vector<uint16_t> decode = decodeBits(run, q, layout.blockTable, lens, 1);
            for (int b = 0; b < batch; ++b)
              EXPECT_TRUE(std::equal(decode.begin() + b * row, decode.begin() + (b + 1) * row,
                                     verify.begin() + (b * T + t) * row))
                  << "token " << t << " of sequence " << b << ": decode != verify";
            // The last sequence alone in a batch of one.
            const int b = batch - 1;
            std::vector<int32_t> table(layout.blockTable.begin() + b * layout.maxPages,
                                       layout.blockTable.begin() + (b + 1) * layout.maxPages);
            const std::vector<uint16_t> alone = decodeBits(
                run, std::vector<uint16_t>(q.begin() + b * row, q.end()), table, {lens[b]}, 1);
            EXPECT_TRUE(std::equal(alone.begin(), alone.end(), decode.begin() + b * row))
                << "token " << t << ": a batch of one != the batch of " << batch;
          }
        }
}

// The split count gqa_decode plans for `run` (its workspace: partials of (d + 1) floats a
// row and split, the few counter bytes after them round away); the launch is not made.
int plannedSplits(const InvariantRun &run, int batch) {
  void *fake = reinterpret_cast<void *>(256); // never dereferenced by the query
  const int32_t *fakeInts = static_cast<const int32_t *>(fake);
  kiln_gqa_decode_params_t p =
      gqaParams({fake, fake, fakeInts, fakeInts, fake}, batch, 1, run.qHeads, run.kvHeads,
                run.headDim, run.pageSize, run.layout, run.layout.maxSeqLen);
  p.softmax_scale = 0.1f;
  p.dtype = run.dtype;
  p.kv_dtype = run.kvDtype;
  p.split_keys = run.splitKeys;
  p.num_splits = run.numSplits;
  size_t bytes = 0;
  EXPECT_EQ(kiln_gqa_decode_workspace_bytes(&p, &bytes), KILN_OK) << kiln_last_error();
  const size_t perSplit = static_cast<size_t>(batch) * run.qHeads * (run.headDim + 1) * 4;
  return bytes ? static_cast<int>(bytes / perSplit) : 1;
}

// The benchmark's tuning variants (KILN_GQA_VARIANT; kGqaVariants in
// GqaDecodeKernel.cuh: bf16 d = 128, one row tile) must be correct before one may become
// a default: each against the reference (windows, sinks, pages smaller than a tile, where
// page hoisting falls back, split_keys with fused counters), and those that keep the
// 64-key tile bitwise equal to variant 0 at the same split plan (they change the
// pipeline, not the arithmetic). The plan is not always the same: the automatic split
// count fills one wave of resident blocks, and the stage count and blocks/SM move that
// (variants 1 and 3, one block an SM: 16 splits here where variant 0 runs 32, so other
// key chunks, other bits; measured on H100 2026-12-06). So automatic splits are compared
// against variant 0 run at the variant's own split count.
TEST(GqaDecodeGpu, TuningVariantsMatchReferenceAndDefault) {
  KILN_REQUIRE_GPU();
  const std::set<int> otherBits = {4, 5, 6, 11}; // 32-key tiles: another key split
  for (int variant = 1;; ++variant) {
    setenv("KILN_GQA_VARIANT", std::to_string(variant).c_str(), 1);
    // The launcher refuses a variant that does not exist: the end of the table.
    {
      // Never dereferenced: the query validates and plans only.
      void *fake = reinterpret_cast<void *>(256);
      const int32_t *fakeInts = static_cast<const int32_t *>(fake);
      PagedLayout layout = makeLayout(1, 1, 64, 64);
      kiln_gqa_decode_params_t p =
          gqaParams({fake, fake, fakeInts, fakeInts, fake}, 1, 1, 8, 2, 128, 64, layout, 64);
      p.softmax_scale = 0.1f;
      p.dtype = KILN_DTYPE_BF16;
      p.kv_dtype = KILN_DTYPE_BF16;
      size_t bytes = 0;
      if (kiln_gqa_decode_workspace_bytes(&p, &bytes) != KILN_OK) {
        EXPECT_GT(variant, 13) << kiln_last_error();
        EXPECT_NE(std::string(kiln_last_error()).find("variant"), std::string::npos);
        break;
      }
    }
    SCOPED_TRACE("variant " + std::to_string(variant));
    int n = 0;
    for (int pageSize : {64, 16})
      for (int qLen : {1, 4}) {
        GqaCase c{KILN_DTYPE_BF16, 128, pageSize, 4, qLen};
        c.batch = 3;
        c.kvHeads = 2;
        c.minLen = 200;
        c.maxLen = 1500;
        c.numSplits = n % 2 ? 5 : 0;
        c.window = n == 2 ? 300 : 0;
        c.sinks = n == 1;
        c.replays = n == 3;
        ++n;
        runGqaCase(c);
      }
    GqaCase fixed{KILN_DTYPE_BF16, 128, 64, 4, 1};
    fixed.maxLen = 1500;
    fixed.splitKeys = 256;
    fixed.counters = true;
    fixed.replays = true;
    runGqaCase(fixed);
    if (otherBits.count(variant))
      continue;
    // Bitwise against variant 0 at the same split plan (windowed): automatic splits,
    // num_splits 1 and 5, split_keys 256.
    const int kvHeads = 2, group = 4, qHeads = kvHeads * group, headDim = 128, pageSize = 64;
    const int batch = 3;
    PagedLayout layout = makeLayout(batch, 100, 2000, pageSize);
    std::vector<uint16_t> kvBits, qBits;
    std::vector<float> unused;
    randomValues(2ull * pageSize * kvHeads * headDim * layout.numPages, KILN_DTYPE_BF16, kvBits,
                 unused);
    randomValues(static_cast<size_t>(batch) * qHeads * headDim, KILN_DTYPE_BF16, qBits, unused);
    for (const auto &[splitKeys, numSplits] :
         std::vector<std::pair<int, int>>{{0, 0}, {0, 1}, {0, 5}, {256, 0}}) {
      InvariantRun run{kvBits, layout, qHeads, kvHeads, headDim, pageSize, splitKeys, 77};
      run.numSplits = numSplits;
      const std::vector<uint16_t> got =
          decodeBits(run, qBits, layout.blockTable, layout.seqLens, 1);
      // Variant 0 at the variant's plan: its automatic count made explicit.
      const int splits = plannedSplits(run, batch);
      if (splitKeys == 0)
        run.numSplits = splits;
      unsetenv("KILN_GQA_VARIANT");
      const std::vector<uint16_t> base =
          decodeBits(run, qBits, layout.blockTable, layout.seqLens, 1);
      setenv("KILN_GQA_VARIANT", std::to_string(variant).c_str(), 1);
      EXPECT_TRUE(got == base) << "split_keys " << splitKeys << ", num_splits " << numSplits << " ("
                               << splits << " splits): bits differ from variant 0";
    }
  }
  unsetenv("KILN_GQA_VARIANT");
}

// FP8 pools at head_dim 128 with one row tile run one of two widenings of the bytes
// (gqaFastFp8 in DecodeApi.cpp): cvt with one split and in split_keys mode, the integer
// widening with several automatic or explicit splits. Both against the reference on the
// dequantized values: batch 1 and 16, ragged lengths, pages smaller and larger than a
// tile, every split mode (num_splits 1, automatic, 5, split_keys with the kernel's
// combine), windows, sinks, no scales, q_len 1 and 4. (That split_keys mode keeps a
// query's bits whatever the step's chunk count: FixedSplitKeysAreBatchInvariant.)
TEST(GqaDecodeGpu, Fp8WideningsMatchReference) {
  KILN_REQUIRE_GPU();
  int n = 0;
  for (int pageSize : {64, 16, 128})
    for (int qLen : {1, 4})
      for (int batch : {1, 16}) {
        GqaCase c{KILN_DTYPE_BF16, 128, pageSize, qLen == 1 ? 1 + 3 * (n % 3) : 4, qLen};
        c.fp8 = true;
        c.batch = batch;
        c.kvHeads = batch == 1 ? 8 : 2;
        c.minLen = batch == 1 ? 3000 : 1;
        c.maxLen = batch == 1 ? 4100 : 1500;
        // 0: one split (cvt); 1: automatic and 2: 5 splits (the integer widening; these
        // shapes split automatically); 3: split_keys 256 (cvt). Each (q_len, batch) pair
        // meets three of them over the page sizes.
        const int mode = (n + n / 4) % 4;
        c.numSplits = mode == 0 ? 1 : mode == 2 ? 5 : 0;
        c.splitKeys = mode == 3 ? 256 : 0;
        c.counters = mode == 3;
        c.window = n % 5 == 2 ? 300 : 0;
        c.sinks = n % 3 == 1;
        c.fp8Scales = n % 6 != 4;
        c.replays = n % 3 == 0;
        ++n;
        runGqaCase(c);
      }
}

// The spacing of bf16 / fp16 numbers at |v| (fp16's subnormals below 2^-14).
double bf16Ulp(double v) {
  return v == 0 ? std::ldexp(1.0, -133) : std::ldexp(1.0, std::ilogb(v) - 7);
}
double f16Ulp(double v) {
  return std::fabs(v) < std::ldexp(1.0, -14) ? std::ldexp(1.0, -24)
                                             : std::ldexp(1.0, std::ilogb(v) - 10);
}
// True when one real value rounds (to nearest) to both the bf16 bits `b` and the fp16
// bits `h`: the two outputs are roundings of the same result.
bool oneValueRoundsToBoth(uint16_t b, uint16_t h) {
  const double vb = kiln_bf16_to_float(b), vh = kiln_f16_to_float(h);
  return std::isfinite(vb) && std::isfinite(vh) &&
         std::fabs(vb - vh) <= 0.5 * bf16Ulp(vb) + 0.5 * f16Ulp(vh);
}

// Random pool (f16 bits, fp16's full precision) and bf16 queries, poison-free: the pages
// of a layout for the arithmetic comparisons below.
struct F16PoolData {
  PagedLayout layout;
  std::vector<uint16_t> pool, q;
};
F16PoolData f16PoolData(int batch, int qLen, int qHeads, int kvHeads, int headDim, int pageSize,
                        int maxLen) {
  F16PoolData data;
  data.layout = makeLayout(batch, qLen, maxLen, pageSize);
  std::vector<float> unused;
  randomValues(2ull * pageSize * kvHeads * headDim * data.layout.numPages, KILN_DTYPE_F16,
               data.pool, unused);
  randomValues(static_cast<size_t>(batch) * qLen * qHeads * headDim, KILN_DTYPE_BF16, data.q,
               unused);
  return data;
}

// bf16 q/out over an f16 pool runs the arithmetic of the fp16 kernel over the same pool
// (fp16 operands, P rounded to fp16, fp32 accumulation, the same split and combine), with
// only the output rounded to bf16: every output must be a rounding of the value whose
// fp16 rounding the fp16 kernel returns, given q converted to fp16 (round to nearest even,
// as the kernel does). Explicit split counts, so both launches split alike (an automatic
// count would follow each kernel's occupancy).
TEST(GqaDecodeGpu, F16PoolRunsTheFp16Arithmetic) {
  KILN_REQUIRE_GPU();
  const int kvHeads = 2, batch = 3;
  int n = 0;
  for (int headDim : {64, 128, 256})
    for (int mode = 0; mode < 4; ++mode, ++n) {
      const int group = mode == 3 ? 16 : 1 + 3 * (n % 3), qLen = 1 + n % 5;
      const int qHeads = kvHeads * group;
      SCOPED_TRACE("D=" + std::to_string(headDim) + " mode=" + std::to_string(mode) +
                   " group=" + std::to_string(group) + " q_len=" + std::to_string(qLen));
      F16PoolData data = f16PoolData(batch, qLen, qHeads, kvHeads, headDim, 32, 900);
      DeviceBuffer<float> dSinks(sinkLogits(qHeads));
      // 0: one split, 1: three, 2: the runtime's fixed chunks, 3: chunks, window, sinks
      // and 32 query rows (two row tiles) a block.
      InvariantRun run{data.pool,
                       data.layout,
                       qHeads,
                       kvHeads,
                       headDim,
                       32,
                       mode >= 2 ? 256 : 0,
                       mode == 3 ? 100 : 0,
                       mode == 3 ? dSinks.ptr : nullptr,
                       KILN_DTYPE_F16};
      run.numSplits = mode == 0 ? 1 : mode == 1 ? 3 : 0;
      std::vector<uint16_t> qHalf(data.q.size());
      for (size_t i = 0; i < qHalf.size(); ++i)
        qHalf[i] = kiln_float_to_f16(kiln_bf16_to_float(data.q[i]));
      const std::vector<uint16_t> bf16Out =
          decodeBits(run, data.q, data.layout.blockTable, data.layout.seqLens, qLen);
      run.dtype = KILN_DTYPE_F16;
      const std::vector<uint16_t> f16Out =
          decodeBits(run, qHalf, data.layout.blockTable, data.layout.seqLens, qLen);
      size_t bad = 0;
      for (size_t i = 0; i < bf16Out.size(); ++i)
        if (!oneValueRoundsToBoth(bf16Out[i], f16Out[i]) && bad++ < 5)
          ADD_FAILURE() << "element " << i << ": bf16 out " << kiln_bf16_to_float(bf16Out[i])
                        << ", fp16 out " << kiln_f16_to_float(f16Out[i]);
      EXPECT_EQ(bad, 0u) << bad << " of " << bf16Out.size();
    }
}

// An f16 pool holding bf16 values in fp16's normal range (or zero) holds them exactly, so
// it attends over the same keys and values as a bf16 pool. The outputs are not the same
// bits: the bf16 pool's kernel rounds P to bf16 before P V (relative error up to 2^-8),
// the f16 pool's to fp16 (2^-11), and each output is then rounded to bf16 (2^-8 of it).
// The tightest bound that holds is their sum: per output element,
//   |f16 - bf16| <= (2^-8 + 2^-11) * sum_j w_j |v_j| + 2^-8 (|f16| + |bf16|),
// with w the softmax weights (sinks included) and sum_j w_j |v_j| the reference run on
// |V|; the score and accumulation arithmetic (fp32) adds far less than the margin kept.
// Runs with the runtime's fixed split chunks, and with automatic splits.
TEST(GqaDecodeGpu, F16PoolOfBf16ValuesMatchesBf16Pool) {
  KILN_REQUIRE_GPU();
  int n = 0;
  for (int headDim : {64, 128, 256})
    for (int group : {1, 4, 8})
      for (int mode = 0; mode < 2; ++mode, ++n) {
        const int kvHeads = 2, qHeads = kvHeads * group, batch = 3, pageSize = 64;
        const int qLen = 1 + n % 4, window = n % 3 == 2 ? 200 : 0;
        const bool sinks = n % 4 == 1;
        SCOPED_TRACE("D=" + std::to_string(headDim) + " group=" + std::to_string(group) +
                     " q_len=" + std::to_string(qLen) + " window=" + std::to_string(window) +
                     (sinks ? " sinks" : "") + (mode ? " automatic splits" : " split_keys"));
        PagedLayout layout = makeLayout(batch, qLen, 1100, pageSize);
        std::vector<uint16_t> bf16Pool, f16Pool, qBits;
        std::vector<float> values, unused;
        randomValues(2ull * pageSize * kvHeads * headDim * layout.numPages, KILN_DTYPE_BF16,
                     bf16Pool, values);
        f16Pool.resize(bf16Pool.size());
        for (size_t i = 0; i < values.size(); ++i) {
          if (std::fabs(values[i]) < std::ldexp(1.f, -14)) { // below fp16's normal range
            values[i] = 0.f;
            bf16Pool[i] = 0;
          }
          f16Pool[i] = kiln_float_to_f16(values[i]);
          ASSERT_EQ(kiln_f16_to_float(f16Pool[i]), values[i]) << "not exact in fp16";
        }
        randomValues(static_cast<size_t>(batch) * qLen * qHeads * headDim, KILN_DTYPE_BF16, qBits,
                     unused);
        const std::vector<float> sinkValues = sinks ? sinkLogits(qHeads) : std::vector<float>{};
        DeviceBuffer<float> dSinks(sinks ? sinkValues : std::vector<float>{0.f});
        InvariantRun run{bf16Pool,       layout,  qHeads,
                         kvHeads,        headDim, pageSize,
                         mode ? 0 : 256, window,  sinks ? dSinks.ptr : nullptr};
        const std::vector<uint16_t> fromBf16 =
            decodeBits(run, qBits, layout.blockTable, layout.seqLens, qLen);
        InvariantRun f16Run{f16Pool,        layout,  qHeads,
                            kvHeads,        headDim, pageSize,
                            mode ? 0 : 256, window,  sinks ? dSinks.ptr : nullptr,
                            KILN_DTYPE_F16};
        const std::vector<uint16_t> fromF16 =
            decodeBits(f16Run, qBits, layout.blockTable, layout.seqLens, qLen);
        // The weighted mean of |V| each output sees: the reference over |V| (K as is).
        kiln::reference::PagedShape shape;
        shape.batch = batch;
        shape.qLen = qLen;
        shape.qHeads = qHeads;
        shape.kvHeads = kvHeads;
        shape.headDim = headDim;
        shape.pageSize = pageSize;
        shape.maxPages = layout.maxPages;
        std::vector<float> qVals(qBits.size()), absV = values;
        for (size_t i = 0; i < qBits.size(); ++i)
          qVals[i] = kiln_bf16_to_float(qBits[i]);
        const size_t half = static_cast<size_t>(pageSize) * kvHeads * headDim;
        for (size_t i = 0; i < absV.size(); ++i)
          if ((i / half) % 2 == 1)
            absV[i] = std::fabs(absV[i]);
        const double scale = 1.0 / std::sqrt(static_cast<double>(headDim));
        const std::vector<double> meanAbsV = kiln::reference::gqaDecode(
            shape, qVals, absV, layout.blockTable, layout.seqLens, scale, window, sinkValues);
        const double worst =
            kiln::test::expectF16PoolWithinBound(fromBf16, fromF16, meanAbsV, "pool");
        std::printf("  [D=%d group=%d q_len=%d] f16 vs bf16 pool: worst %.3f of the bound\n",
                    headDim, group, qLen, worst);
      }
}

struct MlaCase {
  int batch, qLen, heads, maxLen;
  bool small;
  int numSplits = 0;
  // Per-token mode (q_len 1): entry b is the last token of sequence b, given by
  // token_rows / token_pos instead of seq_lens (the same attention).
  bool perToken = false;
};

void runMlaCase(const MlaCase &c) {
  const bool sm90 = std::getenv("KILN_MLA_SM90") != nullptr;
  std::string what = std::string(c.small ? "mla_decode_small_smem"
                                 : sm90  ? "mla_decode(sm90)"
                                         : "mla_decode") +
                     (c.perToken ? " per-token" : "") + " batch=" + std::to_string(c.batch) +
                     " q_len=" + std::to_string(c.qLen) + " heads=" + std::to_string(c.heads) +
                     " len<=" + std::to_string(c.maxLen) + " splits=" + std::to_string(c.numSplits);
  SCOPED_TRACE(what);
  constexpr int Dqk = 576, Dv = 512, Page = 64;
  const kiln_dtype_t dtype = KILN_DTYPE_BF16;
  PagedLayout layout = makeLayout(c.batch, c.qLen, c.maxLen, Page);
  std::vector<uint16_t> qBits, poolBits;
  std::vector<float> qVals, poolVals;
  randomValues(static_cast<size_t>(c.batch) * c.qLen * c.heads * Dqk, dtype, qBits, qVals);
  randomValues(static_cast<size_t>(layout.numPages) * Page * Dqk, dtype, poolBits, poolVals);
  for (int p = 0; p < layout.numPages; ++p)
    if (!layout.pageUsed[p])
      std::fill(poolBits.begin() + static_cast<size_t>(p) * Page * Dqk,
                poolBits.begin() + static_cast<size_t>(p + 1) * Page * Dqk, kNanBits);
  for (int b = 0; b < c.batch; ++b) {
    int len = layout.seqLens[b];
    if (len % Page == 0)
      continue;
    size_t page = layout.blockTable[static_cast<size_t>(b) * layout.maxPages + len / Page];
    std::fill(poolBits.begin() + (page * Page + len % Page) * Dqk,
              poolBits.begin() + (page + 1) * Page * Dqk, kNanBits);
  }
  const double scale = 1.0 / std::sqrt(192.0);
  std::vector<double> ref = kiln::reference::mlaDecode(c.batch, c.qLen, c.heads, layout.maxPages,
                                                       qVals, poolVals, layout.blockTable,
                                                       layout.seqLens, scale);
  const size_t outElems = static_cast<size_t>(c.batch) * c.qLen * c.heads * Dv;
  DeviceBuffer<uint16_t> dQ(qBits), dPool(poolBits), dOut(outElems);
  DeviceBuffer<int32_t> dTable(layout.blockTable), dLens(layout.seqLens);
  std::vector<int32_t> tokenRows(c.batch), tokenPos(c.batch);
  for (int b = 0; b < c.batch; ++b) {
    tokenRows[b] = b;
    tokenPos[b] = layout.seqLens[b] - 1;
  }
  DeviceBuffer<int32_t> dTokenRows(tokenRows), dTokenPos(tokenPos);
  dOut.upload(std::vector<uint16_t>(outElems, kNanBits));
  kiln_mla_decode_params_t p{};
  p.q = dQ.ptr;
  p.latent_cache = dPool.ptr;
  p.block_table = dTable.ptr;
  p.seq_lens = c.perToken ? nullptr : dLens.ptr;
  p.token_rows = c.perToken ? dTokenRows.ptr : nullptr;
  p.token_pos = c.perToken ? dTokenPos.ptr : nullptr;
  p.out = dOut.ptr;
  p.batch = c.batch;
  p.q_len = c.qLen;
  p.num_heads = c.heads;
  p.num_pages = layout.numPages;
  p.max_pages_per_seq = layout.maxPages;
  p.max_seq_len = layout.maxSeqLen;
  p.softmax_scale = static_cast<float>(scale);
  p.dtype = dtype;
  p.num_splits = c.numSplits;
  size_t wsBytes = 0;
  ASSERT_EQ(kiln_mla_decode_workspace_bytes(&p, &wsBytes), KILN_OK) << kiln_last_error();
  if (c.numSplits > 1)
    wsBytes = std::max(wsBytes, outElems / Dv * c.numSplits * (Dv + 1) * sizeof(float));
  DeviceBuffer<float> dWs((wsBytes + 3) / 4);
  p.workspace = dWs.ptr;
  p.workspace_bytes = wsBytes;
  kiln_status_t status = c.small ? kiln_mla_decode_small_smem(&p) : kiln_mla_decode(&p);
  ASSERT_EQ(status, KILN_OK) << kiln_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  compare(dOut.download(), ref, dtype, what);
}

// Sets an environment variable (an experiment knob) for one scope.
struct ScopedEnv {
  const char *name;
  explicit ScopedEnv(const char *n) : name(n) { setenv(name, "1", 1); }
  ~ScopedEnv() { unsetenv(name); }
};

// The mma.sync kernel (KILN_MLA_MMA_SYNC: on sm_90 mla_decode_sm90 runs by default; its
// own test is Sm90Variant).
TEST(MlaDecodeGpu, MultiTokenVariant) {
  KILN_REQUIRE_GPU();
  ScopedEnv mmaSync("KILN_MLA_MMA_SYNC");
  for (int heads : {1, 16, 128, 40})
    for (int qLen : {1, 2, 4})
      runMlaCase({2, qLen, heads, 400, false});
  runMlaCase({1, 1, 128, 3000, false});    // automatic splits
  runMlaCase({3, 2, 16, 700, false, 5});   // forced splits
  runMlaCase({2, 3, 64, 300, false, 64});  // more splits than tiles
}

TEST(MlaDecodeGpu, SmallSmemVariant) {
  KILN_REQUIRE_GPU();
  for (int heads : {1, 16, 128, 24})
    runMlaCase({2, 1, heads, 500, true});
  runMlaCase({1, 1, 16, 3000, true});
  runMlaCase({3, 1, 128, 600, true, 3});
}


bool deviceIsSm90() {
  int device = 0, major = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
         major == 9;
}

// mla_decode_sm90 (wgmma + TMA), the KILN_MLA_SM90 knob of kiln_mla_decode: every row
// count runs its 64-row blocks, so small heads x q_len are covered too.
TEST(MlaDecodeGpu, Sm90Variant) {
  KILN_REQUIRE_GPU();
  if (!deviceIsSm90())
    GTEST_SKIP() << "mla_decode_sm90 needs an sm_90 device";
  ScopedEnv knob("KILN_MLA_SM90");
  for (int heads : {16, 32, 64, 128})
    for (int qLen : {1, 2, 3, 4})
      runMlaCase({2, qLen, heads, 400, false}); // ragged, last pages partial
  for (int heads : {1, 40})                     // one row; rows across 64-row blocks
    runMlaCase({3, 3, heads, 333, false});
  runMlaCase({2, 4, 128, 640, false});          // sequence 0 ends on a page boundary
  runMlaCase({3, 1, 16, 64, false});            // one page each at most
  runMlaCase({1, 1, 128, 3000, false});         // automatic splits, 2 row blocks
  runMlaCase({1, 2, 16, 5000, false});          // automatic splits, 1 row block
  runMlaCase({3, 2, 16, 700, false, 5});        // forced splits
  runMlaCase({2, 3, 64, 300, false, 64});       // more splits than tiles
  runMlaCase({4, 1, 16, 900, false, 0, true});  // per-token mode
  runMlaCase({4, 1, 128, 900, false, 3, true}); // per-token mode, splits
}

// FP8 latent pools (Decode.h's 656-byte token): kiln_mla_kv_append quantizes every cached
// token of a ragged batch (its bytes must equal the host encoder's), then mla_decode reads
// the pool. Tight: against the fp64 reference on the dequantized values (the bf16
// kernel's tolerance, since the widening is exact). Reported: the relative error (L2 and
// worst element over the largest |ref|) against the fp64 reference on the bf16 values
// and against the bf16 pool's kernel output, i.e. what FP8 costs.
struct MlaFp8Case {
  int batch, qLen, heads, maxLen;
  bool small;
  int numSplits = 0;
  bool perToken = false;
};

struct RelError {
  double l2, worst;
};
RelError relError(const std::vector<double> &got, const std::vector<double> &want) {
  double num = 0, den = 0, worst = 0, peak = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
    worst = std::max(worst, std::fabs(got[i] - want[i]));
    peak = std::max(peak, std::fabs(want[i]));
  }
  return {std::sqrt(num / std::max(den, 1e-300)), worst / std::max(peak, 1e-300)};
}

void runMlaFp8Case(const MlaFp8Case &c) {
  std::string what = std::string(c.small ? "mla_decode_small_smem" : "mla_decode") + " FP8" +
                     (c.perToken ? " per-token" : "") + " batch=" + std::to_string(c.batch) +
                     " q_len=" + std::to_string(c.qLen) + " heads=" + std::to_string(c.heads) +
                     " len<=" + std::to_string(c.maxLen) + " splits=" + std::to_string(c.numSplits);
  SCOPED_TRACE(what);
  constexpr int Dqk = 576, Dv = 512, Page = 64, Tok = KILN_MLA_FP8_TOKEN_BYTES;
  const kiln_dtype_t dtype = KILN_DTYPE_BF16;
  PagedLayout layout = makeLayout(c.batch, c.qLen, c.maxLen, Page);
  std::vector<uint16_t> qBits, latentBits, ropeBits;
  std::vector<float> qVals, unused;
  randomValues(static_cast<size_t>(c.batch) * c.qLen * c.heads * Dqk, dtype, qBits, qVals);
  // Every cached token, sequence by sequence; the latent's groups at different magnitudes.
  std::vector<int32_t> tb, tp;
  for (int b = 0; b < c.batch; ++b)
    for (int i = 0; i < layout.seqLens[b]; ++i) {
      tb.push_back(b);
      tp.push_back(i);
    }
  const int numTokens = static_cast<int>(tb.size());
  randomValues(static_cast<size_t>(numTokens) * 512, dtype, latentBits, unused);
  randomValues(static_cast<size_t>(numTokens) * 64, dtype, ropeBits, unused);
  for (size_t i = 0; i < latentBits.size(); ++i)
    latentBits[i] = kiln_float_to_bf16(kiln_bf16_to_float(latentBits[i]) *
                                       std::ldexp(1.f, static_cast<int>(i % 512 / 128) - 2));
  // The pools: 0xff (NaN e4m3, NaN scales) and NaN bf16 wherever no token is appended.
  std::vector<uint8_t> fp8Want(static_cast<size_t>(layout.numPages) * Page * Tok, 0xff);
  std::vector<uint16_t> bf16Pool(static_cast<size_t>(layout.numPages) * Page * Dqk, kNanBits);
  std::vector<float> dequant(bf16Pool.size()), exact(bf16Pool.size());
  for (int t = 0; t < numTokens; ++t) {
    const size_t page =
        layout.blockTable[static_cast<size_t>(tb[t]) * layout.maxPages + tp[t] / Page];
    const size_t slot = page * Page + tp[t] % Page;
    uint8_t *token = fp8Want.data() + slot * Tok;
    kiln_mla_fp8_encode_token(&latentBits[static_cast<size_t>(t) * 512],
                              &ropeBits[static_cast<size_t>(t) * 64], token);
    std::copy_n(&latentBits[static_cast<size_t>(t) * 512], 512, &bf16Pool[slot * Dqk]);
    std::copy_n(&ropeBits[static_cast<size_t>(t) * 64], 64, &bf16Pool[slot * Dqk + 512]);
    uint16_t widened[576];
    kiln_mla_fp8_decode_token(token, widened);
    for (int i = 0; i < Dqk; ++i) {
      dequant[slot * Dqk + i] = kiln_bf16_to_float(widened[i]);
      exact[slot * Dqk + i] = kiln_bf16_to_float(bf16Pool[slot * Dqk + i]);
    }
  }
  DeviceBuffer<uint16_t> dLatent(latentBits), dRope(ropeBits);
  DeviceBuffer<uint8_t> dFp8(std::vector<uint8_t>(fp8Want.size(), 0xff));
  DeviceBuffer<uint16_t> dBf16(bf16Pool);
  DeviceBuffer<int32_t> dTable(layout.blockTable), dLens(layout.seqLens), dB(tb), dP(tp);
  kiln_mla_kv_append_params_t ap{};
  ap.kv_c = dLatent.ptr;
  ap.k_pe = dRope.ptr;
  ap.latent_cache = dFp8.ptr;
  ap.block_table = dTable.ptr;
  ap.token_batch = dB.ptr;
  ap.token_pos = dP.ptr;
  ap.num_tokens = numTokens;
  ap.batch = c.batch;
  ap.num_pages = layout.numPages;
  ap.max_pages_per_seq = layout.maxPages;
  ap.dtype = dtype;
  ap.kv_dtype = KILN_DTYPE_FP8_E4M3;
  ASSERT_EQ(kiln_mla_kv_append(&ap), KILN_OK) << kiln_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint8_t> fp8Got = dFp8.download();
  size_t badBytes = 0;
  for (size_t i = 0; i < fp8Want.size(); ++i)
    if (fp8Got[i] != fp8Want[i] && badBytes++ < 5)
      ADD_FAILURE() << "appended byte " << i << " (token " << i / Tok << ", offset " << i % Tok
                    << "): got " << int(fp8Got[i]) << " want " << int(fp8Want[i]);
  ASSERT_EQ(badBytes, 0u) << "kiln_mla_kv_append's FP8 token differs from the host encoder";

  const double scale = 1.0 / std::sqrt(192.0);
  const std::vector<double> refDequant =
      kiln::reference::mlaDecode(c.batch, c.qLen, c.heads, layout.maxPages, qVals, dequant,
                                 layout.blockTable, layout.seqLens, scale);
  const std::vector<double> refExact =
      kiln::reference::mlaDecode(c.batch, c.qLen, c.heads, layout.maxPages, qVals, exact,
                                 layout.blockTable, layout.seqLens, scale);
  const size_t outElems = static_cast<size_t>(c.batch) * c.qLen * c.heads * Dv;
  DeviceBuffer<uint16_t> dQ(qBits), dOut(outElems), dOutBf16(outElems);
  std::vector<int32_t> tokenRows(c.batch), tokenPos(c.batch);
  for (int b = 0; b < c.batch; ++b) {
    tokenRows[b] = b;
    tokenPos[b] = layout.seqLens[b] - 1;
  }
  DeviceBuffer<int32_t> dTokenRows(tokenRows), dTokenPos(tokenPos);
  auto decode = [&](kiln_dtype_t kvDtype, void *pool, DeviceBuffer<uint16_t> &out) {
    out.upload(std::vector<uint16_t>(outElems, kNanBits));
    kiln_mla_decode_params_t p{};
    p.q = dQ.ptr;
    p.latent_cache = pool;
    p.block_table = dTable.ptr;
    p.seq_lens = c.perToken ? nullptr : dLens.ptr;
    p.token_rows = c.perToken ? dTokenRows.ptr : nullptr;
    p.token_pos = c.perToken ? dTokenPos.ptr : nullptr;
    p.out = out.ptr;
    p.batch = c.batch;
    p.q_len = c.qLen;
    p.num_heads = c.heads;
    p.num_pages = layout.numPages;
    p.max_pages_per_seq = layout.maxPages;
    p.max_seq_len = layout.maxSeqLen;
    p.softmax_scale = static_cast<float>(scale);
    p.dtype = dtype;
    p.kv_dtype = kvDtype;
    p.num_splits = c.numSplits;
    size_t wsBytes = 0;
    ASSERT_EQ(kiln_mla_decode_workspace_bytes(&p, &wsBytes), KILN_OK) << kiln_last_error();
    if (c.numSplits > 1)
      wsBytes = std::max(wsBytes, outElems / Dv * c.numSplits * (Dv + 1) * sizeof(float));
    DeviceBuffer<float> dWs((wsBytes + 3) / 4);
    p.workspace = dWs.ptr;
    p.workspace_bytes = wsBytes;
    ASSERT_EQ(c.small ? kiln_mla_decode_small_smem(&p) : kiln_mla_decode(&p), KILN_OK)
        << kiln_last_error();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  };
  decode(KILN_DTYPE_FP8_E4M3, dFp8.ptr, dOut);
  decode(KILN_DTYPE_BF16, dBf16.ptr, dOutBf16);
  const std::vector<uint16_t> got = dOut.download(), gotBf16 = dOutBf16.download();
  compare(got, refDequant, dtype, what);
  std::vector<double> fp8Out(outElems), bf16Out(outElems);
  for (size_t i = 0; i < outElems; ++i) {
    fp8Out[i] = kiln_bf16_to_float(got[i]);
    bf16Out[i] = kiln_bf16_to_float(gotBf16[i]);
  }
  const RelError vsExact = relError(fp8Out, refExact), vsBf16 = relError(fp8Out, bf16Out),
                 bf16VsExact = relError(bf16Out, refExact);
  std::printf("  [%s] FP8 vs fp64(bf16 cache): rel L2 %.4f, worst %.4f; vs the bf16 pool's "
              "kernel: rel L2 %.4f, worst %.4f (bf16 pool vs fp64: rel L2 %.4f)\n",
              what.c_str(), vsExact.l2, vsExact.worst, vsBf16.l2, vsBf16.worst, bf16VsExact.l2);
  // e4m3 keeps 4 significant bits (a value's error up to 2^-4 relative, in V and in the
  // scores): a few percent in all; a wrong scale or layout gives errors of order 1.
  EXPECT_LT(vsExact.l2, 0.15) << what;
  EXPECT_LT(vsBf16.l2, 0.15) << what;
}

TEST(MlaDecodeGpu, Fp8LatentPool) {
  KILN_REQUIRE_GPU();
  for (int heads : {16, 128})
    for (int qLen : {1, 2, 3, 4})
      runMlaFp8Case({3, qLen, heads, 400, false}); // ragged, last pages partial
  runMlaFp8Case({2, 1, 40, 333, false});           // rows across 64-row blocks
  runMlaFp8Case({1, 1, 128, 3000, false});         // automatic splits
  runMlaFp8Case({3, 2, 16, 700, false, 5});        // forced splits
  runMlaFp8Case({2, 3, 64, 300, false, 64});       // more splits than tiles
  runMlaFp8Case({4, 1, 16, 900, false, 0, true});  // per-token mode (prompts)
  runMlaFp8Case({4, 1, 128, 900, false, 3, true}); // per-token mode, splits
}

TEST(MlaDecodeGpu, Fp8LatentPoolSmallSmem) {
  KILN_REQUIRE_GPU();
  for (int heads : {1, 16, 128})
    runMlaFp8Case({3, 1, heads, 500, true});
  runMlaFp8Case({1, 1, 16, 3000, true});
  runMlaFp8Case({3, 1, 128, 600, true, 3});
  runMlaFp8Case({4, 1, 16, 700, true, 0, true});
}

// The wgmma kernel reads bf16 pools only: asked for by name over an FP8 pool it refuses.
TEST(MlaDecodeGpu, Fp8LatentPoolRefusesTheWgmmaKnob) {
  KILN_REQUIRE_GPU();
  ScopedEnv knob("KILN_MLA_SM90");
  PagedLayout layout = makeLayout(1, 1, 64, 64);
  DeviceBuffer<uint16_t> dQ(576 * 16), dOut(512 * 16);
  DeviceBuffer<uint8_t> dPool(static_cast<size_t>(layout.numPages) * 64 * KILN_MLA_FP8_TOKEN_BYTES);
  DeviceBuffer<int32_t> dTable(layout.blockTable), dLens(layout.seqLens);
  kiln_mla_decode_params_t p{};
  p.q = dQ.ptr;
  p.latent_cache = dPool.ptr;
  p.block_table = dTable.ptr;
  p.seq_lens = dLens.ptr;
  p.out = dOut.ptr;
  p.batch = 1;
  p.q_len = 1;
  p.num_heads = 16;
  p.num_pages = layout.numPages;
  p.max_pages_per_seq = layout.maxPages;
  p.max_seq_len = layout.maxSeqLen;
  p.softmax_scale = 0.1f;
  p.dtype = KILN_DTYPE_BF16;
  p.kv_dtype = KILN_DTYPE_FP8_E4M3;
  EXPECT_EQ(kiln_mla_decode(&p), KILN_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(kiln_last_error()).find("bf16 pools only"), std::string::npos)
      << kiln_last_error();
}

// The parameters both kv_append tests set alike: buffers, token tables and shapes.
struct AppendBuffers {
  const void *k, *v;
  void *pool;
  const int32_t *table, *tokenBatch, *tokenPos;
};
kiln_kv_append_params_t appendParams(const AppendBuffers &buffers, int numTokens, int batch,
                                     int kvHeads, int headDim, int pageSize,
                                     const PagedLayout &layout, kiln_dtype_t dtype,
                                     kiln_dtype_t kvDtype) {
  kiln_kv_append_params_t p{};
  p.k = buffers.k;
  p.v = buffers.v;
  p.kv_cache = buffers.pool;
  p.block_table = buffers.table;
  p.token_batch = buffers.tokenBatch;
  p.token_pos = buffers.tokenPos;
  p.num_tokens = numTokens;
  p.batch = batch;
  p.kv_heads = kvHeads;
  p.head_dim = headDim;
  p.page_size = pageSize;
  p.num_pages = layout.numPages;
  p.max_pages_per_seq = layout.maxPages;
  p.dtype = dtype;
  p.kv_dtype = kvDtype;
  return p;
}

TEST(KvAppendGpu, RaggedTokensLandInTheirPages) {
  KILN_REQUIRE_GPU();
  for (kiln_dtype_t dtype : {KILN_DTYPE_BF16, KILN_DTYPE_F16})
    for (int headDim : {64, 128, 256})
      for (int pageSize : {16, 32, 64, 128}) {
        SCOPED_TRACE("D=" + std::to_string(headDim) + " page=" + std::to_string(pageSize));
        const int batch = 3, kvHeads = 2;
        PagedLayout layout = makeLayout(batch, 1, 200, pageSize);
        // Tokens: a ragged set of (sequence, position) pairs, shuffled.
        std::vector<int32_t> tokBatch, tokPos;
        for (int b = 0; b < batch; ++b) {
          int count = 1 + b * 3; // 1, 4, 7 tokens
          for (int i = 0; i < count && i < layout.seqLens[b]; ++i) {
            tokBatch.push_back(b);
            tokPos.push_back(layout.seqLens[b] - 1 - i);
          }
        }
        std::vector<int> order(tokBatch.size());
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), rng());
        std::vector<int32_t> sb, sp;
        for (int i : order) {
          sb.push_back(tokBatch[i]);
          sp.push_back(tokPos[i]);
        }
        const int numTokens = static_cast<int>(sb.size());
        const long long stride = kvHeads * headDim + 8; // padded token stride
        std::vector<uint16_t> kBits, vBits;
        std::vector<float> unused;
        randomValues(numTokens * stride, dtype, kBits, unused);
        randomValues(numTokens * stride, dtype, vBits, unused);
        const size_t poolElems = 2ull * layout.numPages * pageSize * kvHeads * headDim;
        std::vector<uint16_t> pool(poolElems, 0x1234);
        DeviceBuffer<uint16_t> dK(kBits), dV(vBits), dPool(pool);
        DeviceBuffer<int32_t> dTable(layout.blockTable), dB(sb), dP(sp);
        kiln_kv_append_params_t p =
            appendParams({dK.ptr, dV.ptr, dPool.ptr, dTable.ptr, dB.ptr, dP.ptr}, numTokens,
                         batch, kvHeads, headDim, pageSize, layout, dtype, dtype);
        p.k_token_stride = stride;
        p.v_token_stride = stride;
        ASSERT_EQ(kiln_kv_append(&p), KILN_OK) << kiln_last_error();
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        std::vector<uint16_t> want = pool;
        for (int t = 0; t < numTokens; ++t) {
          size_t page = layout.blockTable[static_cast<size_t>(sb[t]) * layout.maxPages +
                                          sp[t] / pageSize];
          for (int half = 0; half < 2; ++half) {
            size_t at = ((page * 2 + half) * pageSize + sp[t] % pageSize) * kvHeads * headDim;
            const std::vector<uint16_t> &src = half ? vBits : kBits;
            std::copy(src.begin() + t * stride, src.begin() + t * stride + kvHeads * headDim,
                      want.begin() + at);
          }
        }
        EXPECT_TRUE(dPool.download() == want);
      }
}

// bf16 K/V quantized into an FP8 pool: each byte is e4m3(value * (1 / its head's
// scale)) rounded to nearest even and saturated, as the host encoder computes it;
// every other byte is untouched.
TEST(KvAppendGpu, Fp8PoolQuantizes) {
  KILN_REQUIRE_GPU();
  for (int headDim : {64, 128, 256})
    for (bool withScales : {true, false}) {
      SCOPED_TRACE("D=" + std::to_string(headDim) + (withScales ? " scales" : " no scales"));
      const int batch = 3, kvHeads = 3, pageSize = 32;
      PagedLayout layout = makeLayout(batch, 1, 200, pageSize);
      std::vector<int32_t> tb, tp;
      for (int b = 0; b < batch; ++b)
        for (int i = 0; i < std::min(2 * b + 1, layout.seqLens[b]); ++i) {
          tb.push_back(b);
          tp.push_back(layout.seqLens[b] - 1 - i);
        }
      const int numTokens = static_cast<int>(tb.size());
      const long long row = static_cast<long long>(kvHeads) * headDim;
      std::vector<uint16_t> kBits, vBits;
      std::vector<float> kVals, vVals;
      randomValues(numTokens * row, KILN_DTYPE_BF16, kBits, kVals, 40.f);
      randomValues(numTokens * row, KILN_DTYPE_BF16, vBits, vVals, 3.f);
      kBits[5] = kiln_float_to_bf16(1e5f); // saturates
      kVals[5] = kiln_bf16_to_float(kBits[5]);
      const std::vector<float> kScales = fp8Scales(kvHeads, 0.3f), vScales = fp8Scales(kvHeads, 0.7f);
      std::vector<uint8_t> pool(2ull * layout.numPages * pageSize * row, 0x5a);
      DeviceBuffer<uint16_t> dK(kBits), dV(vBits);
      DeviceBuffer<uint8_t> dPool(pool);
      DeviceBuffer<float> dKs(kScales), dVs(vScales);
      DeviceBuffer<int32_t> dTable(layout.blockTable), dB(tb), dP(tp);
      kiln_kv_append_params_t p = appendParams(
          {dK.ptr, dV.ptr, dPool.ptr, dTable.ptr, dB.ptr, dP.ptr}, numTokens, batch, kvHeads,
          headDim, pageSize, layout, KILN_DTYPE_BF16, KILN_DTYPE_FP8_E4M3);
      p.k_scale = withScales ? dKs.ptr : nullptr;
      p.v_scale = withScales ? dVs.ptr : nullptr;
      ASSERT_EQ(kiln_kv_append(&p), KILN_OK) << kiln_last_error();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<uint8_t> want = pool;
      for (int t = 0; t < numTokens; ++t) {
        size_t page = layout.blockTable[static_cast<size_t>(tb[t]) * layout.maxPages +
                                        tp[t] / pageSize];
        for (int half = 0; half < 2; ++half) {
          size_t at = ((page * 2 + half) * pageSize + tp[t] % pageSize) * row;
          const std::vector<float> &vals = half ? vVals : kVals;
          const std::vector<float> &scales = half ? vScales : kScales;
          for (long long i = 0; i < row; ++i) {
            const float inv = withScales ? 1.f / scales[i / headDim] : 1.f;
            want[at + i] = kiln_float_to_e4m3(vals[t * row + i] * inv);
          }
        }
      }
      EXPECT_TRUE(dPool.download() == want);
    }
}

// bf16 K/V into an f16 pool: each value rounded to fp16 (nearest even), finite values
// beyond +-65504 and infinities saturated to +-65504, NaN kept, as kiln_float_to_f16_sat
// computes it; magnitudes from below fp16's subnormals to beyond its range, padded token
// strides; every other element of the pool untouched.
TEST(KvAppendGpu, F16PoolRoundsAndSaturates) {
  KILN_REQUIRE_GPU();
  for (int headDim : {64, 128, 256})
    for (int pageSize : {16, 64}) {
      SCOPED_TRACE("D=" + std::to_string(headDim) + " page=" + std::to_string(pageSize));
      const int batch = 3, kvHeads = 3;
      PagedLayout layout = makeLayout(batch, 1, 200, pageSize);
      std::vector<int32_t> tb, tp;
      for (int b = 0; b < batch; ++b)
        for (int i = 0; i < std::min(2 * b + 1, layout.seqLens[b]); ++i) {
          tb.push_back(b);
          tp.push_back(layout.seqLens[b] - 1 - i);
        }
      const int numTokens = static_cast<int>(tb.size());
      const long long row = static_cast<long long>(kvHeads) * headDim, stride = row + 16;
      // bf16 values n * 2^e, n ~ N(0, 1), e in [-30, 18]: fp16 subnormals, values it
      // rounds, values it holds exactly, values beyond its range.
      std::normal_distribution<float> mantissa(0.f, 1.f);
      std::uniform_int_distribution<int> exponent(-30, 18);
      std::vector<uint16_t> kBits(numTokens * stride), vBits(numTokens * stride);
      for (std::vector<uint16_t> *bits : {&kBits, &vBits})
        for (uint16_t &b : *bits)
          b = kiln_float_to_bf16(std::ldexp(mantissa(rng()), exponent(rng())));
      const uint16_t special[] = {
          0x7f80,                                    // +inf: +65504
          0xff80,                                    // -inf: -65504
          0x4780,                                    // 65536: +65504
          kiln_float_to_bf16(-1e5f),                 // -65504
          0x477f,                                    // 65280: exact
          0x7fc0,                                    // NaN: NaN
          kiln_float_to_bf16(std::ldexp(1.f, -25)),  // half the smallest subnormal: 0
          kiln_float_to_bf16(std::ldexp(3.f, -26)),  // 0.75 of it: the smallest
          kiln_float_to_bf16(-std::ldexp(3.f, -25)), // 1.5 units: to even, -2 units
          kiln_float_to_bf16(std::ldexp(1.f, -14)),  // the smallest normal
          0x8000,                                    // -0
      };
      std::copy(std::begin(special), std::end(special), kBits.begin());
      std::copy(std::begin(special), std::end(special), vBits.begin() + stride + 8);
      std::vector<uint16_t> pool(2ull * layout.numPages * pageSize * row, 0x1234);
      DeviceBuffer<uint16_t> dK(kBits), dV(vBits), dPool(pool);
      DeviceBuffer<int32_t> dTable(layout.blockTable), dB(tb), dP(tp);
      kiln_kv_append_params_t p =
          appendParams({dK.ptr, dV.ptr, dPool.ptr, dTable.ptr, dB.ptr, dP.ptr}, numTokens, batch,
                       kvHeads, headDim, pageSize, layout, KILN_DTYPE_BF16, KILN_DTYPE_F16);
      p.k_token_stride = stride;
      p.v_token_stride = stride;
      ASSERT_EQ(kiln_kv_append(&p), KILN_OK) << kiln_last_error();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<uint16_t> want = pool;
      for (int t = 0; t < numTokens; ++t) {
        size_t page =
            layout.blockTable[static_cast<size_t>(tb[t]) * layout.maxPages + tp[t] / pageSize];
        for (int half = 0; half < 2; ++half) {
          size_t at = ((page * 2 + half) * pageSize + tp[t] % pageSize) * row;
          const std::vector<uint16_t> &src = half ? vBits : kBits;
          for (long long i = 0; i < row; ++i)
            want[at + i] = kiln_float_to_f16_sat(kiln_bf16_to_float(src[t * stride + i]));
        }
      }
      EXPECT_EQ(kiln_float_to_f16_sat(kiln_bf16_to_float(0x7f80)), 0x7bff); // the reference
      const std::vector<uint16_t> got = dPool.download();
      size_t bad = 0, nans = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        const bool wantNan = (want[i] & 0x7c00) == 0x7c00 && (want[i] & 0x3ff) != 0;
        nans += wantNan;
        const bool ok =
            wantNan ? (got[i] & 0x7c00) == 0x7c00 && (got[i] & 0x3ff) != 0 : got[i] == want[i];
        if (!ok && bad++ < 5)
          ADD_FAILURE() << "element " << i << ": got 0x" << std::hex << got[i] << ", want 0x"
                        << want[i] << std::dec;
      }
      EXPECT_EQ(bad, 0u) << bad << " of " << want.size();
      EXPECT_EQ(nans, 2u); // the NaNs of token 0's K and token 1's V
    }
}

TEST(KvAppendGpu, MlaLatents) {
  KILN_REQUIRE_GPU();
  const int batch = 4, Page = 64;
  PagedLayout layout = makeLayout(batch, 1, 300, Page);
  std::vector<int32_t> tb, tp;
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < std::min(b + 1, layout.seqLens[b]); ++i) {
      tb.push_back(b);
      tp.push_back(layout.seqLens[b] - 1 - i);
    }
  const int numTokens = static_cast<int>(tb.size());
  std::vector<uint16_t> kvc, kpe;
  std::vector<float> unused;
  randomValues(numTokens * 576, KILN_DTYPE_BF16, kvc, unused); // fused [kv_c | k_pe] rows
  randomValues(numTokens * 64, KILN_DTYPE_BF16, kpe, unused);
  std::vector<uint16_t> pool(static_cast<size_t>(layout.numPages) * Page * 576, 0x4321);
  DeviceBuffer<uint16_t> dC(kvc), dPe(kpe), dPool(pool);
  DeviceBuffer<int32_t> dTable(layout.blockTable), dB(tb), dP(tp);
  kiln_mla_kv_append_params_t p{};
  p.kv_c = dC.ptr;
  p.kv_c_token_stride = 576;
  p.k_pe = dPe.ptr;
  p.latent_cache = dPool.ptr;
  p.block_table = dTable.ptr;
  p.token_batch = dB.ptr;
  p.token_pos = dP.ptr;
  p.num_tokens = numTokens;
  p.batch = batch;
  p.num_pages = layout.numPages;
  p.max_pages_per_seq = layout.maxPages;
  p.dtype = KILN_DTYPE_BF16;
  ASSERT_EQ(kiln_mla_kv_append(&p), KILN_OK) << kiln_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint16_t> want = pool;
  for (int t = 0; t < numTokens; ++t) {
    size_t page = layout.blockTable[static_cast<size_t>(tb[t]) * layout.maxPages + tp[t] / Page];
    size_t at = (page * Page + tp[t] % Page) * 576;
    std::copy(kvc.begin() + t * 576, kvc.begin() + t * 576 + 512, want.begin() + at);
    std::copy(kpe.begin() + t * 64, kpe.begin() + t * 64 + 64, want.begin() + at + 512);
  }
  EXPECT_TRUE(dPool.download() == want);
}

} // namespace
