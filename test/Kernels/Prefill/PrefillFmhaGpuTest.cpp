// GPU tests of the prefill kernels against the fp64 CPU reference on random data:
// ragged varlen batches (lengths 1, not multiples of the tiles), GQA groups 1/4/8, head
// dims 64/128/256, bf16/fp16, q_len < k_len (bottom-right causal) and q_len > k_len, the
// non-causal mode and the paged-KV variant. Outputs are poisoned (NaN) before each run.
//
// Tolerance (inputs rounded to the dtype first, so only the kernel's own rounding counts:
// P rounded to the dtype before the PV product, fp32 accumulation, output rounding):
//   |out - ref| <= atol + rtol * |ref|, bf16: atol 1e-2, rtol 1e-2; fp16: atol 2e-3, rtol 2e-3;
//   bf16 q/out over an f16 cache (fp16 arithmetic, output rounded to bf16, 2^-8 of it):
//   atol 3e-3, rtol 6e-3.
#include "F16PoolBound.h"
#include "GpuTest.h"
#include "PrefillReference.h"
#include "kiln/Kernels/HostNumeric.h"
#include "kiln/Kernels/Prefill.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

uint16_t toBits(float x, kiln_dtype_t dt) {
  return dt == KILN_DTYPE_BF16 ? kiln_float_to_bf16(x) : kiln_float_to_f16(x);
}
float fromBits(uint16_t b, kiln_dtype_t dt) {
  return dt == KILN_DTYPE_BF16 ? kiln_bf16_to_float(b) : kiln_f16_to_float(b);
}

// Fills `bits` with uniform values in [-range, range] and `vals` with their rounded floats.
void randomTensor(std::mt19937_64 &rng, size_t n, float range, kiln_dtype_t dt,
                  std::vector<uint16_t> &bits, std::vector<float> &vals) {
  std::uniform_real_distribution<float> dist(-range, range);
  bits.resize(n);
  vals.resize(n);
  for (size_t i = 0; i < n; ++i) {
    bits[i] = toBits(dist(rng), dt);
    vals[i] = fromBits(bits[i], dt);
  }
}

template <typename T> struct DeviceBuffer {
  T *ptr = nullptr;
  explicit DeviceBuffer(size_t n) { cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(T)); }
  ~DeviceBuffer() { cudaFree(ptr); }
  void upload(const std::vector<T> &h) {
    ASSERT_EQ(cudaMemcpy(ptr, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
};

struct Case {
  std::vector<int> qLens, kLens;
  int qHeads, kvHeads, headDim;
  kiln_dtype_t dtype;
  bool causal;
  int pageSize = 0; // > 0: run the paged variant with this page size
  int window = 0;   // > 0: sliding window
  bool sinks = false; // per-head attention-sink logits
  bool fp8 = false;   // paged only: an FP8 e4m3 cache with per-KV-head scales
  bool f16Pool = false; // paged only: an f16 cache (bf16 q/out), fp16's full precision
};

// Keys below this are outside every query's window in sequence b (0 without a window).
int keyFloor(const Case &c, size_t b) {
  return c.window > 0 ? std::max(0, c.kLens[b] - c.qLens[b] - c.window + 1) : 0;
}

std::vector<int32_t> prefix(const std::vector<int> &lens) {
  std::vector<int32_t> cu(lens.size() + 1, 0);
  for (size_t i = 0; i < lens.size(); ++i)
    cu[i + 1] = cu[i] + lens[i];
  return cu;
}

void compare(const Case &c, const std::vector<uint16_t> &got, const std::vector<double> &ref) {
  const double atol = c.f16Pool ? 3e-3 : c.dtype == KILN_DTYPE_BF16 ? 1e-2 : 2e-3;
  const double rtol = c.f16Pool ? 6e-3 : atol;
  double maxErr = 0.0;
  size_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = fromBits(got[i], c.dtype);
    const double err = std::fabs(g - ref[i]);
    if (!(err <= atol + rtol * std::fabs(ref[i]))) {
      if (bad < 5)
        ADD_FAILURE() << "element " << i << ": got " << g << ", expected " << ref[i];
      ++bad;
    }
    if (err > maxErr || std::isnan(err))
      maxErr = err;
  }
  EXPECT_EQ(bad, 0u) << "mismatches of " << ref.size();
  std::printf("  [%s d=%d Hq=%d Hkv=%d causal=%d page=%d window=%d sinks=%d] max abs err %.3g "
              "over %zu values\n",
              c.f16Pool                    ? "bf16/f16 cache"
              : c.dtype == KILN_DTYPE_BF16 ? "bf16"
                                           : "fp16",
              c.headDim, c.qHeads, c.kvHeads, c.causal, c.pageSize, c.window, c.sinks, maxErr,
              ref.size());
}

// The wgmma variant runs head dims 64, 128 and 256 over caches of q's dtype. Where it
// reports UNSUPPORTED, the reason must be the device or the build (or an FP8/f16 cache),
// so that a head dim it refuses on an sm_90 device fails here instead of passing untested.
// The overlapped schedule (SM90_OVERLAP) has no d256 tiles.
void expectSm90Unavailable(const Case &c, kiln_prefill_variant_t variant) {
  const std::string why = kiln_last_error();
  const bool elsewhere = why.find("needs a build with sm_90a") != std::string::npos ||
                         why.find("needs an sm_90 device") != std::string::npos;
  const bool cache =
      (c.fp8 || c.f16Pool) && why.find("reads caches of q's dtype only") != std::string::npos;
  const bool noTiles = variant == KILN_PREFILL_VARIANT_SM90_OVERLAP && c.headDim == 256 &&
                       why.find("sm90_overlap has head_dim 64 and 128") != std::string::npos;
  EXPECT_TRUE(elsewhere || cache || noTiles) << why;
}

const char *variantName(kiln_prefill_variant_t v) {
  switch (v) {
  case KILN_PREFILL_VARIANT_SM90:
    return "sm90";
  case KILN_PREFILL_VARIANT_SM90_OVERLAP:
    return "sm90_overlap";
  case KILN_PREFILL_VARIANT_SM90_WS:
    return "sm90_ws";
  default:
    return "sm80";
  }
}

void runCaseVariant(const Case &c, uint64_t seed, kiln_prefill_variant_t variant) {
  std::mt19937_64 rng(seed);
  const int batch = static_cast<int>(c.qLens.size());
  const std::vector<int32_t> cuQ = prefix(c.qLens), cuK = prefix(c.kLens);
  const int totalQ = cuQ.back(), totalK = cuK.back();
  const int d = c.headDim;
  const size_t qElems = static_cast<size_t>(totalQ) * c.qHeads * d;
  const size_t kvElems = static_cast<size_t>(totalK) * c.kvHeads * d;

  std::vector<uint16_t> qBits;
  std::vector<float> qVals, kVals(kvElems), vVals(kvElems);
  randomTensor(rng, qElems, 2.0f, c.dtype, qBits, qVals);

  DeviceBuffer<uint16_t> dQ(qElems), dOut(qElems);
  DeviceBuffer<int32_t> dCuQ(cuQ.size());
  dQ.upload(qBits);
  dCuQ.upload(cuQ);
  CUDA_OK(cudaMemset(dOut.ptr, 0xff, qElems * 2)); // NaN poison in bf16 and fp16
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int maxQ = *std::max_element(c.qLens.begin(), c.qLens.end());
  std::vector<float> sinks(c.qHeads);
  for (int h = 0; h < c.qHeads; ++h)
    sinks[h] = -3.0f + 6.0f * static_cast<float>((h * 37) % 11) / 10.0f;
  DeviceBuffer<float> dSinks(sinks.size());
  dSinks.upload(sinks);
  const float *sinkPtr = c.sinks ? dSinks.ptr : nullptr;

  kiln_status_t st;
  std::vector<uint16_t> cacheBits; // kept alive for the paged case
  if (c.pageSize == 0) {
    std::vector<uint16_t> kBits, vBits;
    randomTensor(rng, kvElems, 2.0f, c.dtype, kBits, kVals);
    randomTensor(rng, kvElems, 1.0f, c.dtype, vBits, vVals);
    // Keys no query's window reaches are NaN on the device: they must not be read.
    for (int b = 0; b < batch; ++b) {
      const size_t rows = static_cast<size_t>(keyFloor(c, b)) * c.kvHeads * d;
      const size_t at = static_cast<size_t>(cuK[b]) * c.kvHeads * d;
      std::fill_n(kBits.begin() + at, rows, uint16_t{0xffff});
      std::fill_n(vBits.begin() + at, rows, uint16_t{0xffff});
    }
    DeviceBuffer<uint16_t> dK(kvElems), dV(kvElems);
    DeviceBuffer<int32_t> dCuK(cuK.size());
    dK.upload(kBits);
    dV.upload(vBits);
    dCuK.upload(cuK);
    kiln_prefill_fmha_params_t p{};
    p.q = dQ.ptr;
    p.k = dK.ptr;
    p.v = dV.ptr;
    p.out = dOut.ptr;
    p.cu_seqlens_q = dCuQ.ptr;
    p.cu_seqlens_k = dCuK.ptr;
    p.batch = batch;
    p.total_q = totalQ;
    p.total_k = totalK;
    p.max_seqlen_q = maxQ;
    p.q_heads = c.qHeads;
    p.kv_heads = c.kvHeads;
    p.head_dim = d;
    p.dtype = c.dtype;
    p.softmax_scale = scale;
    p.causal = c.causal;
    p.window = c.window;
    p.sinks = sinkPtr;
    st = kiln_prefill_fmha_variant(&p, variant);
    if (st == KILN_ERROR_UNSUPPORTED && variant != KILN_PREFILL_VARIANT_MMA_SM80) {
      expectSm90Unavailable(c, variant); // this variant cannot run here
      return;
    }
    ASSERT_EQ(st, KILN_OK) << kiln_last_error();
    CUDA_OK(cudaDeviceSynchronize());
  } else {
    // Paged cache with shuffled pages and spare pages of garbage.
    const int ps = c.pageSize;
    std::vector<int> pagesOf(batch);
    int maxPages = 1, needed = 0;
    for (int b = 0; b < batch; ++b) {
      pagesOf[b] = (c.kLens[b] + ps - 1) / ps;
      maxPages = std::max(maxPages, pagesOf[b]);
      needed += pagesOf[b];
    }
    const int numPages = needed + 3;
    std::vector<int> perm(numPages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int32_t> table(static_cast<size_t>(batch) * maxPages, -1);
    int next = 0;
    for (int b = 0; b < batch; ++b)
      for (int i = 0; i < pagesOf[b]; ++i)
        table[static_cast<size_t>(b) * maxPages + i] = perm[next++];
    const size_t tok = static_cast<size_t>(c.kvHeads) * d;
    std::vector<float> cacheVals;
    const size_t cacheElems = static_cast<size_t>(numPages) * 2 * ps * tok;
    std::vector<uint8_t> cacheBytes;
    std::vector<float> kScales(c.kvHeads), vScales(c.kvHeads);
    if (c.fp8) {
      // e4m3 bytes of values in [-2, 2]; a head's values are byte * its scale.
      for (int h = 0; h < c.kvHeads; ++h) {
        kScales[h] = 0.6f + 0.45f * static_cast<float>(h);
        vScales[h] = 1.3f - 0.2f * static_cast<float>(h);
      }
      std::uniform_real_distribution<float> dist(-2.f, 2.f);
      cacheBytes.resize(cacheElems);
      cacheVals.resize(cacheElems);
      for (size_t i = 0; i < cacheElems; ++i) {
        const bool isV = (i / (ps * tok)) % 2 == 1;
        const int head = static_cast<int>((i / d) % c.kvHeads);
        cacheBytes[i] = kiln_float_to_e4m3(dist(rng));
        cacheVals[i] = kiln_e4m3_to_float(cacheBytes[i]) * (isV ? vScales : kScales)[head];
      }
    } else {
      randomTensor(rng, cacheElems, 2.0f, c.f16Pool ? KILN_DTYPE_F16 : c.dtype, cacheBits,
                   cacheVals);
      cacheBytes.resize(cacheElems * 2);
      std::memcpy(cacheBytes.data(), cacheBits.data(), cacheElems * 2);
    }
    for (int b = 0; b < batch; ++b)
      for (int j = 0; j < c.kLens[b]; ++j) {
        const size_t page = table[static_cast<size_t>(b) * maxPages + j / ps];
        const size_t kOff = ((page * 2 + 0) * ps + j % ps) * tok;
        const size_t vOff = ((page * 2 + 1) * ps + j % ps) * tok;
        std::copy_n(cacheVals.begin() + kOff, tok, kVals.begin() + (cuK[b] + j) * tok);
        std::copy_n(cacheVals.begin() + vOff, tok, vVals.begin() + (cuK[b] + j) * tok);
      }
    // Pages wholly below every query's window are recycled: their table entries say -1,
    // which the kernel must never follow.
    for (int b = 0; b < batch; ++b)
      for (int i = 0; (i + 1) * ps <= keyFloor(c, b); ++i)
        table[static_cast<size_t>(b) * maxPages + i] = -1;
    DeviceBuffer<uint8_t> dCache(cacheBytes.size());
    DeviceBuffer<float> dKScale(c.kvHeads), dVScale(c.kvHeads);
    DeviceBuffer<int32_t> dTable(table.size()), dSeq(batch);
    dCache.upload(cacheBytes);
    dKScale.upload(kScales);
    dVScale.upload(vScales);
    dTable.upload(table);
    dSeq.upload(std::vector<int32_t>(c.kLens.begin(), c.kLens.end()));
    kiln_prefill_fmha_paged_params_t p{};
    p.q = dQ.ptr;
    p.kv_cache = dCache.ptr;
    p.out = dOut.ptr;
    p.cu_seqlens_q = dCuQ.ptr;
    p.seq_lens = dSeq.ptr;
    p.block_table = dTable.ptr;
    p.batch = batch;
    p.total_q = totalQ;
    p.max_seqlen_q = maxQ;
    p.num_pages = numPages;
    p.page_size = ps;
    p.max_pages_per_seq = maxPages;
    p.q_heads = c.qHeads;
    p.kv_heads = c.kvHeads;
    p.head_dim = d;
    p.dtype = c.dtype;
    p.kv_dtype = c.fp8 ? KILN_DTYPE_FP8_E4M3 : c.f16Pool ? KILN_DTYPE_F16 : c.dtype;
    p.k_scale = c.fp8 ? dKScale.ptr : nullptr;
    p.v_scale = c.fp8 ? dVScale.ptr : nullptr;
    p.softmax_scale = scale;
    p.causal = c.causal;
    p.window = c.window;
    p.sinks = sinkPtr;
    st = kiln_prefill_fmha_paged_variant(&p, variant);
    if (st == KILN_ERROR_UNSUPPORTED && variant != KILN_PREFILL_VARIANT_MMA_SM80) {
      expectSm90Unavailable(c, variant);
      return;
    }
    ASSERT_EQ(st, KILN_OK) << kiln_last_error();
    CUDA_OK(cudaDeviceSynchronize());
  }

  std::vector<uint16_t> got(qElems);
  CUDA_OK(cudaMemcpy(got.data(), dOut.ptr, qElems * 2, cudaMemcpyDeviceToHost));
  std::vector<double> ref(qElems);
  kiln::reference::prefillAttentionReference(qVals.data(), kVals.data(), vVals.data(),
                                             ref.data(), cuQ.data(), cuK.data(), batch,
                                             c.qHeads, c.kvHeads, d, scale, c.causal,
                                             c.window, c.sinks ? sinks.data() : nullptr);
  std::printf("  variant %s:", variantName(variant));
  compare(c, got, ref);
}

// Every case runs on every variant (the wgmma ones only where the device and build allow
// it): AUTO's choice on sm_90 (SM90_WS, which runs the SM90 kernel where it does not
// apply: paged caches, windows, head_dim 256) and the ones it does not choose.
void runCase(const Case &c, uint64_t seed) {
  for (kiln_prefill_variant_t v : {KILN_PREFILL_VARIANT_MMA_SM80, KILN_PREFILL_VARIANT_SM90,
                                   KILN_PREFILL_VARIANT_SM90_OVERLAP,
                                   KILN_PREFILL_VARIANT_SM90_WS}) {
    SCOPED_TRACE(std::string("variant ") + variantName(v));
    runCaseVariant(c, seed, v);
  }
}

const kiln_dtype_t kDtypes[] = {KILN_DTYPE_BF16, KILN_DTYPE_F16};
// 256: Qwen3-Next's full attention (both variants; the wgmma one on its own 64-key tiles).
const int kHeadDims[] = {64, 128, 256};

// DeepSeek MLA's expanded prompts: q/k head_dim 192 over v/out 128 (the kernel's DV),
// v read in place inside the kv_b output ([k_nope 128 | v 128] a head, so v's head stride
// is 256 and its token stride heads x 256), out packed at 128 a head.
void runMlaPromptCase(const std::vector<int> &lens, int heads, kiln_dtype_t dt,
                      uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int batch = static_cast<int>(lens.size()), d = 192, dv = 128, kvHead = 256;
  const std::vector<int32_t> cu = prefix(lens);
  const int total = cu.back();
  std::vector<uint16_t> qBits, kBits, kvBits;
  std::vector<float> qVals, kVals, kvVals;
  randomTensor(rng, static_cast<size_t>(total) * heads * d, 2.0f, dt, qBits, qVals);
  randomTensor(rng, static_cast<size_t>(total) * heads * d, 2.0f, dt, kBits, kVals);
  randomTensor(rng, static_cast<size_t>(total) * heads * kvHead, 1.0f, dt, kvBits, kvVals);
  std::vector<float> vVals(static_cast<size_t>(total) * heads * dv);
  for (size_t r = 0; r < static_cast<size_t>(total) * heads; ++r)
    std::copy_n(kvVals.begin() + r * kvHead + 128, dv, vVals.begin() + r * dv);
  const size_t outElems = static_cast<size_t>(total) * heads * dv;
  DeviceBuffer<uint16_t> dQ(qBits.size()), dK(kBits.size()), dKv(kvBits.size()),
      dOut(outElems);
  DeviceBuffer<int32_t> dCu(cu.size());
  dQ.upload(qBits);
  dK.upload(kBits);
  dKv.upload(kvBits);
  dCu.upload(cu);
  CUDA_OK(cudaMemset(dOut.ptr, 0xff, outElems * 2));
  kiln_prefill_fmha_params_t p{};
  p.q = dQ.ptr;
  p.k = dK.ptr;
  p.v = dKv.ptr + 128;
  p.v_token_stride = static_cast<int64_t>(heads) * kvHead;
  p.v_head_stride = kvHead;
  p.out = dOut.ptr;
  p.cu_seqlens_q = dCu.ptr;
  p.cu_seqlens_k = dCu.ptr;
  p.batch = batch;
  p.total_q = p.total_k = total;
  p.max_seqlen_q = *std::max_element(lens.begin(), lens.end());
  p.q_heads = p.kv_heads = heads;
  p.head_dim = d;
  p.v_head_dim = dv;
  p.dtype = dt;
  p.softmax_scale = 0.1352f; // yarn-scaled, not 1/sqrt(192)
  p.causal = 1;
  ASSERT_EQ(kiln_prefill_fmha(&p), KILN_OK) << kiln_last_error();
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint16_t> got(outElems);
  CUDA_OK(cudaMemcpy(got.data(), dOut.ptr, outElems * 2, cudaMemcpyDeviceToHost));
  std::vector<double> ref(outElems);
  kiln::reference::prefillAttentionReference(qVals.data(), kVals.data(), vVals.data(),
                                             ref.data(), cu.data(), cu.data(), batch, heads,
                                             heads, d, p.softmax_scale, true, 0, nullptr, dv);
  Case c{lens, lens, heads, heads, d, dt, true};
  compare(c, got, ref);
}

} // namespace

// q_len == k_len, ragged lengths around the tile sizes (64, 128), length 1, GQA 1/4/8.
TEST(PrefillFmhaGpu, CausalSelfAttention) {
  KILN_REQUIRE_GPU();
  const std::vector<int> lens = {1, 17, 64, 129, 300, 77};
  const int groups[][2] = {{4, 4}, {8, 2}, {16, 2}};
  uint64_t seed = 1;
  for (kiln_dtype_t dt : kDtypes)
    for (int d : kHeadDims)
      for (auto &g : groups)
        runCase({lens, lens, g[0], g[1], d, dt, true}, seed++);
}

// q_len < k_len (bottom-right causal: new tokens after a prefix), and q_len > k_len
// (leading queries see no key and must be zero).
TEST(PrefillFmhaGpu, CausalUnequalLengths) {
  KILN_REQUIRE_GPU();
  const std::vector<int> qLens = {5, 100, 257, 1, 50, 130};
  const std::vector<int> kLens = {5, 300, 1000, 700, 20, 129};
  uint64_t seed = 100;
  for (kiln_dtype_t dt : kDtypes)
    for (int d : kHeadDims)
      runCase({qLens, kLens, 8, 1, d, dt, true}, seed++);
}

TEST(PrefillFmhaGpu, NonCausal) {
  KILN_REQUIRE_GPU();
  const std::vector<int> qLens = {3, 200, 65};
  const std::vector<int> kLens = {190, 64, 1};
  uint64_t seed = 200;
  for (kiln_dtype_t dt : kDtypes)
    for (int d : kHeadDims)
      runCase({qLens, kLens, 4, 1, d, dt, false}, seed++);
}

// A longer sequence: many key tiles, pipeline wrap-around, load-balanced grid order.
TEST(PrefillFmhaGpu, LongSequence) {
  KILN_REQUIRE_GPU();
  runCase({{2048, 33}, {2048, 33}, 8, 2, 128, KILN_DTYPE_BF16, true}, 300);
  runCase({{1500}, {1500}, 4, 4, 64, KILN_DTYPE_F16, true}, 301);
  // d256: 64-key tiles, so 32+ trips around the wgmma variant's 2-stage ring.
  runCase({{2100, 65}, {2100, 65}, 8, 1, 256, KILN_DTYPE_BF16, true}, 302);
}

// The warp-specialized kernel (SM90_WS: TMA producer warpgroup, two consumer warpgroups
// in ping-pong) where it applies: dense K/V, head_dim 64 and 128, causal and not, GQA
// 1/4/8, varlen batches whose lengths end inside a 128-key tile (the producer's cp.async
// tail tiles) and on one (TMA only), q_len != k_len, sinks, and sequences long enough to
// wrap the 2-stage (d128) and 3-stage (d64) rings many times.
void runWsCase(const Case &c, uint64_t seed) {
  runCaseVariant(c, seed, KILN_PREFILL_VARIANT_SM90_WS);
}

TEST(PrefillFmhaGpu, WarpSpecialized) {
  KILN_REQUIRE_GPU();
  const std::vector<int> ragged = {1, 17, 128, 129, 300, 77, 256};
  const std::vector<int> qLens = {5, 100, 257, 1, 50, 130};
  const std::vector<int> kLens = {5, 300, 1000, 700, 20, 129};
  uint64_t seed = 900;
  for (kiln_dtype_t dt : kDtypes)
    for (int d : {64, 128}) {
      runWsCase({ragged, ragged, 8, 2, d, dt, true}, seed++);
      runWsCase({ragged, ragged, 4, 4, d, dt, false}, seed++);
      runWsCase({qLens, kLens, 8, 1, d, dt, true}, seed++);
      runWsCase({kLens, qLens, 8, 8, d, dt, false}, seed++);
      Case sinks{qLens, kLens, 8, 2, d, dt, true};
      sinks.sinks = true;
      runWsCase(sinks, seed++);
    }
  // Long: many trips around the ring, and the benchmark's layout (B sequences of equal,
  // tile-multiple length, 32 q / 8 kv heads scaled down).
  runWsCase({{1600, 33}, {1600, 33}, 8, 2, 128, KILN_DTYPE_BF16, true}, seed++);
  runWsCase({{1280, 1280}, {1280, 1280}, 8, 2, 64, KILN_DTYPE_BF16, true}, seed++);
  runWsCase({{1100, 257}, {1100, 257}, 4, 1, 128, KILN_DTYPE_F16, false}, seed++);
}

// Extend context through the paged cache: a few new tokens after a long cached prefix,
// page sizes 16 and 7 (not a power of two), shuffled pages.
TEST(PrefillFmhaGpu, PagedExtend) {
  KILN_REQUIRE_GPU();
  const std::vector<int> qLens = {1, 7, 20, 3};
  const std::vector<int> kLens = {513, 900, 64, 3};
  uint64_t seed = 400;
  for (kiln_dtype_t dt : kDtypes)
    for (int d : kHeadDims)
      for (int ps : {16, 7})
        runCase({qLens, kLens, 8, 2, d, dt, true, ps}, seed++);
  // A full prefill through the cache (q_len == k_len), GQA 8.
  runCase({{300, 129}, {300, 129}, 16, 2, 128, KILN_DTYPE_BF16, true, 16}, seed++);
}

// Sliding windows (Mistral, Qwen2's upper layers, gpt-oss's 128): windows under, at and
// over the tiles (64 keys, 128 query rows), dense and paged with recycled pages, q_len ==
// k_len and chunks continuing a prefix.
TEST(PrefillFmhaGpu, SlidingWindow) {
  KILN_REQUIRE_GPU();
  const std::vector<int> lens = {1, 17, 64, 129, 700, 300};
  const std::vector<int> qLens = {5, 100, 257, 1, 50, 130};
  const std::vector<int> kLens = {5, 300, 1000, 700, 20, 129};
  uint64_t seed = 500;
  for (int window : {1, 16, 64, 100, 128, 333}) {
    for (int d : kHeadDims) {
      const kiln_dtype_t dt = kDtypes[seed % 2];
      Case self{lens, lens, 8, 2, d, dt, true};
      self.window = window;
      runCase(self, seed++);
      Case extend{qLens, kLens, 8, 1, d, dt, true};
      extend.window = window;
      runCase(extend, seed++);
      extend.pageSize = window % 2 ? 7 : 16;
      runCase(extend, seed++);
    }
  }
}

// Attention sinks (gpt-oss): dense and paged, with and without a window.
TEST(PrefillFmhaGpu, AttentionSinks) {
  KILN_REQUIRE_GPU();
  const std::vector<int> qLens = {5, 100, 257, 1, 50, 130};
  const std::vector<int> kLens = {5, 300, 1000, 700, 20, 129};
  uint64_t seed = 600;
  for (int d : kHeadDims)
    for (int window : {0, 128}) {
      Case c{qLens, kLens, 8, 2, d, kDtypes[seed % 2], true};
      c.window = window;
      c.sinks = true;
      runCase(c, seed++);
      c.pageSize = 16;
      runCase(c, seed++);
    }
}

// The paged-cache grid the FP8 and f16 cache tests share: chunks of 1-130 tokens over
// 3-900 cached keys, every head dim, page sizes 16 and 7, GQA 1/4/8, windows and sinks
// alternating; `mark` makes each case's cache FP8 or f16.
template <typename Mark> void runPagedCacheGrid(uint64_t &seed, Mark mark) {
  const std::vector<int> qLens = {1, 7, 130, 3};
  const std::vector<int> kLens = {513, 900, 200, 3};
  for (int d : kHeadDims)
    for (int ps : {16, 7})
      for (auto [qHeads, kvHeads] : {std::pair{8, 2}, std::pair{4, 4}, std::pair{8, 1}}) {
        Case c{qLens, kLens, qHeads, kvHeads, d, KILN_DTYPE_BF16, true, ps};
        mark(c);
        c.window = seed % 3 == 0 ? 100 : 0;
        c.sinks = seed % 2 == 0;
        runCase(c, seed++);
      }
}

// An FP8 e4m3 paged cache (extend context, chunked prefill) against the reference on
// the dequantized values: head dims 64/128/256, GQA 1/4/8, page sizes 16 and 7, windows and
// sinks; the mma.sync variant runs it, the wgmma one refuses it (expectSm90Unavailable).
TEST(PrefillFmhaGpu, PagedFp8Cache) {
  KILN_REQUIRE_GPU();
  uint64_t seed = 900;
  runPagedCacheGrid(seed, [](Case &c) { c.fp8 = true; });
}

// An f16 paged cache next to bf16 q/out (values with fp16's full precision) against the
// reference: head dims 64/128/256, GQA 1/4/8, page sizes 16 and 7, windows and sinks,
// short and long chunks; the mma.sync variant runs it, the wgmma one refuses it.
TEST(PrefillFmhaGpu, PagedF16Cache) {
  KILN_REQUIRE_GPU();
  uint64_t seed = 1100;
  runPagedCacheGrid(seed, [](Case &c) { c.f16Pool = true; });
  // A whole prompt through the cache (q_len == k_len), and a non-causal extend.
  Case self{{300, 129}, {300, 129}, 16, 2, 128, KILN_DTYPE_BF16, true, 16};
  self.f16Pool = true;
  runCase(self, seed++);
  Case nonCausal{{3, 200, 65}, {190, 264, 66}, 4, 1, 64, KILN_DTYPE_BF16, false, 16};
  nonCausal.f16Pool = true;
  runCase(nonCausal, seed++);
}

// Qwen3-Next's full attention at TP1: head_dim 256, 16 q heads over 2 KV heads (GQA 8),
// bf16, as the runtime runs it. Prompts of odd lengths around the 32-key (mma.sync),
// 64-key (wgmma) and 128-row tiles and one long prompt (many trips around the 2-stage
// ring), dense and through a cache of 16-token pages; then chunks extending cached
// prompts (bf16, FP8 and f16 pools; the wgmma variant reads the bf16 one).
TEST(PrefillFmhaGpu, HeadDim256Qwen3Next) {
  KILN_REQUIRE_GPU();
  constexpr int d = 256, qHeads = 16, kvHeads = 2, page = 16;
  const kiln_dtype_t bf16 = KILN_DTYPE_BF16;
  uint64_t seed = 1000;
  const std::vector<int> lens = {1, 31, 33, 63, 65, 127, 129, 255, 1100};
  runCase({lens, lens, qHeads, kvHeads, d, bf16, true}, seed++);
  runCase({lens, lens, qHeads, kvHeads, d, bf16, true, page}, seed++);
  const std::vector<int> qLens = {1, 3, 17, 64, 200};
  const std::vector<int> kLens = {1025, 40, 517, 64, 333};
  Case extend{qLens, kLens, qHeads, kvHeads, d, bf16, true, page};
  runCase(extend, seed++);
  extend.fp8 = true;
  runCase(extend, seed++);
  extend.fp8 = false;
  extend.f16Pool = true;
  runCase(extend, seed++);
}

// DeepSeek MLA prompts: head_dim 192 over v_head_dim 128, v strided inside kv.
TEST(PrefillFmhaGpu, MlaPromptHeadDims) {
  KILN_REQUIRE_GPU();
  uint64_t seed = 900;
  for (kiln_dtype_t dt : kDtypes) {
    runMlaPromptCase({1, 17, 64, 129, 300}, 4, dt, seed++);
    runMlaPromptCase({513, 7}, 16, dt, seed++);
  }
}

namespace {

// The spacing of bf16 / fp16 numbers at |v| (fp16's subnormals below 2^-14).
double bf16Ulp(double v) {
  return v == 0 ? std::ldexp(1.0, -133) : std::ldexp(1.0, std::ilogb(v) - 7);
}
double f16Ulp(double v) {
  return std::fabs(v) < std::ldexp(1.0, -14) ? std::ldexp(1.0, -24)
                                             : std::ldexp(1.0, std::ilogb(v) - 10);
}

// A ragged extend batch over a paged cache of shuffled pages, with host data.
struct PagedSetup {
  std::vector<int> qLens, kLens;
  int qHeads, kvHeads, headDim, pageSize;
  int window = 0;
  bool sinks = false;
  std::vector<int32_t> cuQ, cuK, table;
  int numPages = 0, maxPages = 1;
  size_t qElems = 0, cacheElems = 0;
};

PagedSetup pagedSetup(std::mt19937_64 &rng, std::vector<int> qLens, std::vector<int> kLens,
                      int qHeads, int kvHeads, int headDim, int pageSize) {
  PagedSetup s{std::move(qLens), std::move(kLens), qHeads, kvHeads, headDim, pageSize};
  const int batch = static_cast<int>(s.qLens.size());
  s.cuQ = prefix(s.qLens);
  s.cuK = prefix(s.kLens);
  int needed = 0;
  for (int b = 0; b < batch; ++b) {
    const int pages = (s.kLens[b] + pageSize - 1) / pageSize;
    s.maxPages = std::max(s.maxPages, pages);
    needed += pages;
  }
  s.numPages = needed + 3;
  std::vector<int> perm(s.numPages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  s.table.assign(static_cast<size_t>(batch) * s.maxPages, -1);
  int next = 0;
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < (s.kLens[b] + pageSize - 1) / pageSize; ++i)
      s.table[static_cast<size_t>(b) * s.maxPages + i] = perm[next++];
  s.qElems = static_cast<size_t>(s.cuQ.back()) * qHeads * headDim;
  s.cacheElems = static_cast<size_t>(s.numPages) * 2 * pageSize * kvHeads * headDim;
  return s;
}

std::vector<float> sinkValues(int heads) {
  std::vector<float> sinks(heads);
  for (int h = 0; h < heads; ++h)
    sinks[h] = -3.0f + 6.0f * static_cast<float>((h * 37) % 11) / 10.0f;
  return sinks;
}

// One paged launch of `variant`: q of `dtype`, the cache's 16-bit bits of `kvDtype`;
// the output's bits.
std::vector<uint16_t> runPaged(const PagedSetup &s, kiln_dtype_t dtype, kiln_dtype_t kvDtype,
                               const std::vector<uint16_t> &q, const std::vector<uint16_t> &cache,
                               kiln_prefill_variant_t variant) {
  const int batch = static_cast<int>(s.qLens.size());
  DeviceBuffer<uint16_t> dQ(q.size()), dOut(q.size()), dCache(cache.size());
  DeviceBuffer<int32_t> dCuQ(s.cuQ.size()), dTable(s.table.size()), dSeq(batch);
  DeviceBuffer<float> dSinks(s.qHeads);
  dQ.upload(q);
  dCache.upload(cache);
  dCuQ.upload(s.cuQ);
  dTable.upload(s.table);
  dSeq.upload(std::vector<int32_t>(s.kLens.begin(), s.kLens.end()));
  dSinks.upload(sinkValues(s.qHeads));
  std::vector<uint16_t> out(q.size(), 0xffff);
  if (cudaMemset(dOut.ptr, 0xff, q.size() * 2) != cudaSuccess) {
    ADD_FAILURE() << "cudaMemset";
    return out;
  }
  kiln_prefill_fmha_paged_params_t p{};
  p.q = dQ.ptr;
  p.kv_cache = dCache.ptr;
  p.out = dOut.ptr;
  p.cu_seqlens_q = dCuQ.ptr;
  p.seq_lens = dSeq.ptr;
  p.block_table = dTable.ptr;
  p.batch = batch;
  p.total_q = s.cuQ.back();
  p.max_seqlen_q = *std::max_element(s.qLens.begin(), s.qLens.end());
  p.num_pages = s.numPages;
  p.page_size = s.pageSize;
  p.max_pages_per_seq = s.maxPages;
  p.q_heads = s.qHeads;
  p.kv_heads = s.kvHeads;
  p.head_dim = s.headDim;
  p.dtype = dtype;
  p.kv_dtype = kvDtype;
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(s.headDim));
  p.causal = 1;
  p.window = s.window;
  p.sinks = s.sinks ? dSinks.ptr : nullptr;
  EXPECT_EQ(kiln_prefill_fmha_paged_variant(&p, variant), KILN_OK) << kiln_last_error();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(out.data(), dOut.ptr, q.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

// The cache's values as packed K and V rows ([total_k, kv_heads, head_dim]) for the
// reference; `absV` takes |V|.
void gatherRows(const PagedSetup &s, const std::vector<float> &cache, std::vector<float> &k,
                std::vector<float> &v, bool absV = false) {
  const size_t tok = static_cast<size_t>(s.kvHeads) * s.headDim;
  k.assign(static_cast<size_t>(s.cuK.back()) * tok, 0.f);
  v.assign(k.size(), 0.f);
  for (size_t b = 0; b < s.kLens.size(); ++b)
    for (int j = 0; j < s.kLens[b]; ++j) {
      const size_t page = s.table[b * s.maxPages + j / s.pageSize];
      const size_t kOff = ((page * 2 + 0) * s.pageSize + j % s.pageSize) * tok;
      const size_t vOff = ((page * 2 + 1) * s.pageSize + j % s.pageSize) * tok;
      std::copy_n(cache.begin() + kOff, tok, k.begin() + (s.cuK[b] + j) * tok);
      for (size_t i = 0; i < tok; ++i)
        v[(s.cuK[b] + j) * tok + i] = absV ? std::fabs(cache[vOff + i]) : cache[vOff + i];
    }
}

} // namespace

// bf16 q/out over an f16 cache runs the fp16 kernel's arithmetic over the same cache
// (fp16 operands, P rounded to fp16, fp32 accumulation), only the output rounded to bf16
// instead of fp16: every output must be a rounding of the value whose fp16 rounding the
// fp16 kernel returns (q converted to fp16, round to nearest even, as the kernel does).
// Both on the mma.sync variant (AUTO would run the fp16 case on wgmma on sm_90).
TEST(PrefillFmhaGpu, PagedF16CacheRunsTheFp16Arithmetic) {
  KILN_REQUIRE_GPU();
  uint64_t seed = 1200;
  for (int d : kHeadDims)
    for (int mode = 0; mode < 2; ++mode) {
      SCOPED_TRACE("d=" + std::to_string(d) + " mode=" + std::to_string(mode));
      std::mt19937_64 rng(seed++);
      PagedSetup s = pagedSetup(rng, {1, 7, 130, 3}, {513, 900, 200, 3}, 8, 2, d, 16);
      s.window = mode ? 100 : 0;
      s.sinks = mode == 1;
      std::vector<uint16_t> qBits, cacheBits;
      std::vector<float> unused;
      randomTensor(rng, s.qElems, 2.0f, KILN_DTYPE_BF16, qBits, unused);
      randomTensor(rng, s.cacheElems, 2.0f, KILN_DTYPE_F16, cacheBits, unused);
      std::vector<uint16_t> qHalf(qBits.size());
      for (size_t i = 0; i < qBits.size(); ++i)
        qHalf[i] = kiln_float_to_f16(kiln_bf16_to_float(qBits[i]));
      const std::vector<uint16_t> bf16Out = runPaged(s, KILN_DTYPE_BF16, KILN_DTYPE_F16, qBits,
                                                     cacheBits, KILN_PREFILL_VARIANT_MMA_SM80);
      const std::vector<uint16_t> f16Out = runPaged(s, KILN_DTYPE_F16, KILN_DTYPE_F16, qHalf,
                                                    cacheBits, KILN_PREFILL_VARIANT_MMA_SM80);
      size_t bad = 0;
      for (size_t i = 0; i < bf16Out.size(); ++i) {
        const double vb = kiln_bf16_to_float(bf16Out[i]), vh = kiln_f16_to_float(f16Out[i]);
        const bool same = std::isfinite(vb) && std::isfinite(vh) &&
                          std::fabs(vb - vh) <= 0.5 * bf16Ulp(vb) + 0.5 * f16Ulp(vh);
        if (!same && bad++ < 5)
          ADD_FAILURE() << "element " << i << ": bf16 out " << vb << ", fp16 out " << vh;
      }
      EXPECT_EQ(bad, 0u) << bad << " of " << bf16Out.size();
    }
}

// An f16 cache holding bf16 values in fp16's normal range (or zero) holds them exactly:
// the same keys and values as a bf16 cache. Not the same bits (the bf16 cache's kernel
// rounds P to bf16, relative error up to 2^-8; the f16 cache's to fp16, 2^-11; each output
// is then rounded to bf16, 2^-8 of it), so per output element
//   |f16 - bf16| <= (2^-8 + 2^-11) * sum_j w_j |v_j| + 2^-8 (|f16| + |bf16|),
// w the softmax weights (sinks included), sum_j w_j |v_j| the reference run on |V|; the
// fp32 arithmetic adds far less than the margin kept. Both on the mma.sync variant.
TEST(PrefillFmhaGpu, PagedF16CacheOfBf16ValuesMatchesBf16Cache) {
  KILN_REQUIRE_GPU();
  uint64_t seed = 1300;
  for (int d : kHeadDims)
    for (int mode = 0; mode < 2; ++mode) {
      SCOPED_TRACE("d=" + std::to_string(d) + " mode=" + std::to_string(mode));
      std::mt19937_64 rng(seed++);
      PagedSetup s = pagedSetup(rng, {1, 7, 130, 3}, {513, 900, 200, 3}, 8, 2, d, 7);
      s.window = mode ? 100 : 0;
      s.sinks = mode == 1;
      std::vector<uint16_t> qBits, bf16Cache, f16Cache(s.cacheElems);
      std::vector<float> qVals, values;
      randomTensor(rng, s.qElems, 2.0f, KILN_DTYPE_BF16, qBits, qVals);
      randomTensor(rng, s.cacheElems, 2.0f, KILN_DTYPE_BF16, bf16Cache, values);
      for (size_t i = 0; i < values.size(); ++i) {
        if (std::fabs(values[i]) < std::ldexp(1.f, -14)) { // below fp16's normal range
          values[i] = 0.f;
          bf16Cache[i] = 0;
        }
        f16Cache[i] = kiln_float_to_f16(values[i]);
        ASSERT_EQ(kiln_f16_to_float(f16Cache[i]), values[i]) << "not exact in fp16";
      }
      const std::vector<uint16_t> fromBf16 = runPaged(s, KILN_DTYPE_BF16, KILN_DTYPE_BF16, qBits,
                                                      bf16Cache, KILN_PREFILL_VARIANT_MMA_SM80);
      const std::vector<uint16_t> fromF16 = runPaged(s, KILN_DTYPE_BF16, KILN_DTYPE_F16, qBits,
                                                     f16Cache, KILN_PREFILL_VARIANT_MMA_SM80);
      std::vector<float> k, absV;
      gatherRows(s, values, k, absV, /*absV=*/true);
      std::vector<double> meanAbsV(s.qElems);
      const std::vector<float> sinks = sinkValues(s.qHeads);
      kiln::reference::prefillAttentionReference(
          qVals.data(), k.data(), absV.data(), meanAbsV.data(), s.cuQ.data(), s.cuK.data(),
          static_cast<int>(s.qLens.size()), s.qHeads, s.kvHeads, d,
          1.0 / std::sqrt(static_cast<double>(d)), true, s.window,
          s.sinks ? sinks.data() : nullptr);
      const double worst =
          kiln::test::expectF16PoolWithinBound(fromBf16, fromF16, meanAbsV, "cache");
      std::printf("  [d=%d mode=%d] f16 vs bf16 cache: worst %.3f of the bound\n", d, mode, worst);
    }
}
