// kiln_e2e: runs a compiled Kiln model (a shared object) on the GPU through the Kiln
// runtime and checks every layer op of every step against an fp64 CPU reference.
//
//   kiln_e2e <model.so> <hybrid|mla> <spec|nospec> [<model.so> <kind> <spec> ...]
//
// Per model: the arena the runtime allocates must equal kiln_model_arena_bytes();
// without speculation kiln_model_speculative_bytes() must be 0 and no intermediate
// state may be used. A validation-only ("dry") context first records which arena ranges
// the model's steps use. Then: one prefill step with ragged prompts, then several decode
// steps (q_len 1, or 4 with spec = 1 + 3 MTP drafts, followed by a commit of a random
// number of accepted tokens). After each step every op's output is compared with the
// fp64 reference computed from the same bf16 inputs and the cache contents before the
// step; KV/MLA pools are compared bit-exactly with a host mirror; SSM/conv states (and
// intermediate states) with the reference. Prints PASS/FAIL lines; exits 1 on failure,
// 0 with "skipped: no CUDA device" when there is no GPU.
#include "kiln/Runtime/Runtime.h"

#include "DecodeReference.h"
#include "MambaReference.h"
#include "PrefillReference.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

int gFailures = 0;
bool gDry = false; // --dry: validation-only context, no device memory (CI)
uintptr_t gFakeNext = 0x100000;

// A fake device pointer for --dry (never dereferenced: a dry context only checks it is bound).
void *fakePointer(size_t bytes) {
  void *p = reinterpret_cast<void *>(gFakeNext);
  gFakeNext += (bytes + 4095) / 4096 * 4096 + 4096;
  return p;
}

void report(bool ok, const char *format, ...) __attribute__((format(printf, 2, 3)));
void report(bool ok, const char *format, ...) {
  va_list args;
  va_start(args, format);
  std::printf("%s: ", ok ? "PASS" : "FAIL");
  std::vprintf(format, args);
  std::printf("\n");
  va_end(args);
  std::fflush(stdout);
  if (!ok)
    ++gFailures;
}

// ---- bf16 on the host ----------------------------------------------------------------
uint16_t toBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float fromBf16(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

#define CUDA_OK(call)                                                                      \
  do {                                                                                     \
    cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("FAIL: %s: %s\n", #call, cudaGetErrorString(e_));                        \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

// A device tensor with its bf16 (or fp32) host values.
struct Tensor {
  void *dev = nullptr;
  size_t elems = 0;
  bool f32 = false;
  std::vector<float> host; // values as the device sees them (bf16-rounded for bf16)

  void alloc(size_t n, bool isF32 = false) {
    elems = n;
    f32 = isF32;
    host.assign(n, 0.f);
    if (gDry) {
      dev = fakePointer(n * (f32 ? 4 : 2));
      return;
    }
    CUDA_OK(cudaMalloc(&dev, n * (f32 ? 4 : 2)));
    CUDA_OK(cudaMemset(dev, 0, n * (f32 ? 4 : 2)));
  }
  void fill(std::mt19937 &rng, float lo, float hi, size_t n = SIZE_MAX) {
    n = std::min(n, elems);
    std::uniform_real_distribution<float> dist(lo, hi);
    for (size_t i = 0; i < n; ++i)
      host[i] = f32 ? dist(rng) : fromBf16(toBf16(dist(rng)));
    upload(n);
  }
  void upload(size_t n) {
    if (gDry)
      return;
    if (f32) {
      CUDA_OK(cudaMemcpy(dev, host.data(), n * 4, cudaMemcpyHostToDevice));
      return;
    }
    std::vector<uint16_t> bits(n);
    for (size_t i = 0; i < n; ++i)
      bits[i] = toBf16(host[i]);
    CUDA_OK(cudaMemcpy(dev, bits.data(), n * 2, cudaMemcpyHostToDevice));
  }
  // Poisons the device tensor (outputs): a kernel that skips a row is caught.
  void poison(size_t n) {
    if (!gDry)
      CUDA_OK(cudaMemset(dev, 0xff, std::min(n, elems) * (f32 ? 4 : 2)));
  }
  std::vector<float> download(size_t n) const {
    std::vector<float> out(n);
    if (f32) {
      CUDA_OK(cudaMemcpy(out.data(), dev, n * 4, cudaMemcpyDeviceToHost));
      return out;
    }
    std::vector<uint16_t> bits(n);
    CUDA_OK(cudaMemcpy(bits.data(), dev, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i)
      out[i] = fromBf16(bits[i]);
    return out;
  }
};

std::vector<float> readArenaBf16(void *arena, uint64_t offset, size_t n) {
  std::vector<uint16_t> bits(n);
  CUDA_OK(cudaMemcpy(bits.data(), static_cast<char *>(arena) + offset, n * 2,
                     cudaMemcpyDeviceToHost));
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i)
    out[i] = fromBf16(bits[i]);
  return out;
}
std::vector<float> readArenaF32(void *arena, uint64_t offset, size_t n) {
  std::vector<float> out(n);
  CUDA_OK(cudaMemcpy(out.data(), static_cast<char *>(arena) + offset, n * 4,
                     cudaMemcpyDeviceToHost));
  return out;
}

// |gpu - ref| <= atol * max|ref| + rtol * |ref| everywhere (NaN fails).
template <typename G, typename R>
void compare(const std::string &what, const G &gpu, const R &ref, size_t n, double atol,
             double rtol) {
  double scale = 1e-6;
  for (size_t i = 0; i < n; ++i)
    scale = std::max(scale, std::fabs(static_cast<double>(ref[i])));
  double worst = 0, maxErr = 0;
  size_t worstAt = 0;
  bool ok = true;
  for (size_t i = 0; i < n; ++i) {
    double g = gpu[i], r = ref[i];
    double err = std::fabs(g - r);
    double tol = atol * scale + rtol * std::fabs(r);
    if (!(err <= tol) && ok) {
      ok = false;
      worstAt = i;
    }
    if (!(err <= tol) || std::isnan(err))
      ok = false;
    if (std::isnan(err))
      err = INFINITY;
    maxErr = std::max(maxErr, err);
    if (tol > 0 && err / tol > worst)
      worst = err / tol;
  }
  if (ok)
    report(true, "%s: max |err| %.3g (max |ref| %.3g, %zu values)", what.c_str(), maxErr, scale,
           n);
  else
    report(false, "%s: max |err| %.3g (max |ref| %.3g); first bad [%zu] gpu %.6g ref %.6g",
           what.c_str(), maxErr, scale, worstAt, static_cast<double>(gpu[worstAt]),
           static_cast<double>(ref[worstAt]));
}

bool statusOk(kiln_status_t s, const std::string &what) {
  if (s == KILN_OK)
    return true;
  report(false, "%s: %s: %s", what.c_str(), kiln_status_name(s), kiln_last_error());
  return false;
}

// ---- the models ----------------------------------------------------------------------
constexpr int kSlots = 4, kMaxSeq = 256;
constexpr int kHeads = 8, kKvHeads = 2, kHeadDim = 128;
constexpr int kConvDim = 1024, kWidth = 4;
constexpr int kSsmHeads = 8, kSsmP = 64, kSsmN = 128, kGroups = 2;
constexpr int kMlaHeads = 16, kLatent = 576, kLora = 512;

enum class OpKind { Attention, Mla, Ssm, Conv };

struct Op {
  OpKind kind;
  int layer;
  // activations [maxTokens, ...] and parameters
  Tensor q, k, v, out, latent, x, dt, b, c, z, A, D, dtBias, weight, bias;
  std::vector<float> mirror; // KV / MLA pool mirror
  uint64_t offset = 0, interOffset = 0;
  bool hasInter = false;
};

struct Model {
  std::string path, kind;
  bool spec = false;
  int pageSize = 16, numPages = 0, maxPages = 0;
  std::vector<Op> ops;
};

using ArenaFn = uint64_t (*)();
using StepFn = int32_t (*)(kiln_rt_context_t *);
using PagesFn = int32_t (*)();

std::string opName(const Op &op) {
  const char *k = op.kind == OpKind::Attention ? "attention"
                  : op.kind == OpKind::Mla     ? "mla"
                  : op.kind == OpKind::Ssm     ? "ssm"
                                               : "conv";
  return "layer " + std::to_string(op.layer) + " " + k;
}

size_t convSlotElems() { return static_cast<size_t>(kConvDim) * (kWidth - 1); }
size_t ssmSlotElems() { return static_cast<size_t>(kSsmHeads) * kSsmP * kSsmN; }

// Binds every tensor of the model's ops to a context.
bool bindAll(kiln_rt_context_t *ctx, Model &m) {
  bool ok = true;
  auto bind = [&](int layer, const char *name, const Tensor &t) {
    ok = ok && statusOk(kiln_rt_bind(ctx, layer, name, t.dev), std::string("bind ") + name);
  };
  for (Op &op : m.ops) {
    switch (op.kind) {
    case OpKind::Attention:
      bind(op.layer, "q", op.q), bind(op.layer, "k", op.k), bind(op.layer, "v", op.v);
      bind(op.layer, "out", op.out);
      break;
    case OpKind::Mla:
      bind(op.layer, "q", op.q), bind(op.layer, "latent", op.latent);
      bind(op.layer, "out", op.out);
      break;
    case OpKind::Ssm:
      bind(op.layer, "x", op.x), bind(op.layer, "dt", op.dt), bind(op.layer, "b", op.b);
      bind(op.layer, "c", op.c), bind(op.layer, "z", op.z), bind(op.layer, "out", op.out);
      bind(op.layer, "A", op.A), bind(op.layer, "D", op.D), bind(op.layer, "dt_bias", op.dtBias);
      break;
    case OpKind::Conv:
      bind(op.layer, "conv.x", op.x), bind(op.layer, "conv.out", op.out);
      bind(op.layer, "conv.weight", op.weight), bind(op.layer, "conv.bias", op.bias);
      break;
    }
  }
  return ok;
}

struct DeviceBatch {
  int32_t *seqLens = nullptr, *blockTable = nullptr, *slots = nullptr, *cuQ = nullptr;
};

// Host view of one step.
struct StepInfo {
  bool prefill = false;
  int batch = kSlots, qLen = 1, tokens = 0;
  std::vector<int32_t> cu;       // prefill
  std::vector<int32_t> seqLens;  // decode: incl. this step's tokens
  // token t -> (sequence, position)
  std::vector<int> tokBatch, tokPos;
};

void fillInputs(Model &m, const StepInfo &s, std::mt19937 &rng) {
  size_t T = s.tokens;
  for (Op &op : m.ops) {
    switch (op.kind) {
    case OpKind::Attention:
      op.q.fill(rng, -1, 1, T * kHeads * kHeadDim);
      op.k.fill(rng, -1, 1, T * kKvHeads * kHeadDim);
      op.v.fill(rng, -1, 1, T * kKvHeads * kHeadDim);
      op.out.poison(T * kHeads * kHeadDim);
      break;
    case OpKind::Mla:
      op.q.fill(rng, -1, 1, T * kMlaHeads * kLatent);
      op.latent.fill(rng, -1, 1, T * kLatent);
      op.out.poison(T * kMlaHeads * kLora);
      break;
    case OpKind::Ssm:
      op.x.fill(rng, -1, 1, T * kSsmHeads * kSsmP);
      op.dt.fill(rng, -3, 1, T * kSsmHeads);
      op.b.fill(rng, -1, 1, T * kGroups * kSsmN);
      op.c.fill(rng, -1, 1, T * kGroups * kSsmN);
      op.z.fill(rng, -2, 2, T * kSsmHeads * kSsmP);
      op.out.poison(T * kSsmHeads * kSsmP);
      break;
    case OpKind::Conv:
      op.x.fill(rng, -1, 1, T * kConvDim);
      op.out.poison(T * kConvDim);
      break;
    }
  }
}

int slotOf(const std::vector<int32_t> &slots, int b) { return slots[b]; }

// Checks all ops after a step. preStates: per op, the state before the step (ssm/conv).
void checkStep(Model &m, const StepInfo &s, const std::string &tag, void *arena,
               const std::vector<int32_t> &blockTable, const std::vector<int32_t> &slots,
               const std::vector<std::vector<float>> &preStates,
               std::vector<std::vector<float>> *interOut) {
  size_t T = s.tokens;
  for (size_t oi = 0; oi < m.ops.size(); ++oi) {
    Op &op = m.ops[oi];
    std::string name = tag + " " + opName(op);
    if (op.kind == OpKind::Attention) {
      // Mirror: write this step's K/V at their positions.
      const int P = m.pageSize;
      for (size_t t = 0; t < T; ++t) {
        int bIdx = s.tokBatch[t], pos = s.tokPos[t];
        int page = blockTable[bIdx * m.maxPages + pos / P];
        for (int kv = 0; kv < 2; ++kv)
          for (int h = 0; h < kKvHeads; ++h)
            for (int d = 0; d < kHeadDim; ++d) {
              size_t dst = ((((static_cast<size_t>(page) * 2 + kv) * P + pos % P) * kKvHeads + h) *
                            kHeadDim) + d;
              const Tensor &src = kv ? op.v : op.k;
              op.mirror[dst] = src.host[(t * kKvHeads + h) * kHeadDim + d];
            }
      }
      std::vector<float> pool = readArenaBf16(arena, op.offset, op.mirror.size());
      compare(name + " KV pool (exact)", pool, op.mirror, pool.size(), 0, 0);
      std::vector<float> out = op.out.download(T * kHeads * kHeadDim);
      std::vector<double> ref;
      double scale = 1.0 / std::sqrt(static_cast<double>(kHeadDim));
      if (s.prefill) {
        ref.assign(out.size(), 0);
        kiln::reference::prefillAttentionReference(op.q.host.data(), op.k.host.data(),
                                                   op.v.host.data(), ref.data(), s.cu.data(),
                                                   s.cu.data(), s.batch, kHeads, kKvHeads,
                                                   kHeadDim, scale, true);
      } else {
        kiln::reference::PagedShape shape;
        shape.batch = s.batch;
        shape.qLen = s.qLen;
        shape.qHeads = kHeads;
        shape.kvHeads = kKvHeads;
        shape.headDim = kHeadDim;
        shape.pageSize = P;
        shape.maxPages = m.maxPages;
        std::vector<float> q(op.q.host.begin(), op.q.host.begin() + out.size());
        ref = kiln::reference::gqaDecode(shape, q, op.mirror, blockTable, s.seqLens, scale);
      }
      compare(name + " out", out, ref, out.size(), 1e-2, 1e-2);
    } else if (op.kind == OpKind::Mla) {
      const int P = m.pageSize;
      for (size_t t = 0; t < T; ++t) {
        int bIdx = s.tokBatch[t], pos = s.tokPos[t];
        int page = blockTable[bIdx * m.maxPages + pos / P];
        std::copy_n(op.latent.host.begin() + t * kLatent, kLatent,
                    op.mirror.begin() + (static_cast<size_t>(page) * P + pos % P) * kLatent);
      }
      std::vector<float> pool = readArenaBf16(arena, op.offset, op.mirror.size());
      compare(name + " latent pool (exact)", pool, op.mirror, pool.size(), 0, 0);
      std::vector<float> out = op.out.download(T * kMlaHeads * kLora);
      double scale = 1.0 / std::sqrt(static_cast<double>(kLatent));
      std::vector<float> q(op.q.host.begin(), op.q.host.begin() + T * kMlaHeads * kLatent);
      std::vector<double> ref;
      if (s.prefill) {
        // Causal prefill = every token a q_len-1 query over positions 0..pos.
        std::vector<int32_t> table(T * m.maxPages), lens(T);
        for (size_t t = 0; t < T; ++t) {
          std::copy_n(blockTable.begin() + s.tokBatch[t] * m.maxPages, m.maxPages,
                      table.begin() + t * m.maxPages);
          lens[t] = s.tokPos[t] + 1;
        }
        ref = kiln::reference::mlaDecode(static_cast<int>(T), 1, kMlaHeads, m.maxPages, q,
                                         op.mirror, table, lens, scale);
      } else {
        ref = kiln::reference::mlaDecode(s.batch, s.qLen, kMlaHeads, m.maxPages, q, op.mirror,
                                         blockTable, s.seqLens, scale);
      }
      compare(name + " out", out, ref, out.size(), 1e-2, 1e-2);
    } else if (op.kind == OpKind::Conv) {
      const size_t S = convSlotElems();
      std::vector<double> state(preStates[oi].begin(), preStates[oi].end());
      std::vector<double> refOut(T * kConvDim);
      std::vector<double> refInter(static_cast<size_t>(kSlots) * s.qLen * S, 0);
      std::vector<double> w(op.weight.host.begin(), op.weight.host.end());
      std::vector<double> bias(op.bias.host.begin(), op.bias.host.end());
      for (size_t t = 0; t < T; ++t) {
        int bIdx = s.tokBatch[t];
        int slot = slotOf(slots, bIdx);
        std::vector<double> x(op.x.host.begin() + t * kConvDim,
                              op.x.host.begin() + (t + 1) * kConvDim);
        kiln::reference::convUpdateReference(kConvDim, kWidth, state.data() + slot * S, x.data(),
                                             w.data(), bias.data(), true,
                                             refOut.data() + t * kConvDim);
        if (!s.prefill && op.hasInter) {
          int i = static_cast<int>(t) % s.qLen;
          std::copy_n(state.begin() + slot * S, S,
                      refInter.begin() + (static_cast<size_t>(slot) * s.qLen + i) * S);
        }
      }
      std::vector<float> out = op.out.download(T * kConvDim);
      compare(name + " out", out, refOut, out.size(), 1e-2, 1e-2);
      if (!s.prefill && op.hasInter) {
        std::vector<float> inter =
            readArenaBf16(arena, op.interOffset, static_cast<size_t>(kSlots) * s.qLen * S);
        compare(name + " intermediate states (exact)", inter, refInter, inter.size(), 0, 0);
        (*interOut)[oi] = inter;
        std::vector<float> main = readArenaBf16(arena, op.offset, kSlots * S);
        compare(name + " state untouched by the spec step", main, preStates[oi], main.size(), 0,
                0);
      } else {
        std::vector<float> main = readArenaBf16(arena, op.offset, kSlots * S);
        compare(name + " state (exact)", main, state, main.size(), 0, 0);
      }
    } else { // SSM
      const size_t S = ssmSlotElems();
      const int HP = kSsmHeads * kSsmP, GN = kGroups * kSsmN;
      std::vector<double> state(preStates[oi].begin(), preStates[oi].end());
      std::vector<double> refOut(T * HP);
      std::vector<double> refInter(static_cast<size_t>(kSlots) * s.qLen * S, 0);
      std::vector<double> A(op.A.host.begin(), op.A.host.end());
      std::vector<double> D(op.D.host.begin(), op.D.host.end());
      std::vector<double> dtb(op.dtBias.host.begin(), op.dtBias.host.end());
      for (size_t t = 0; t < T; ++t) {
        int slot = slotOf(slots, s.tokBatch[t]);
        auto slice = [&](const Tensor &tt, size_t width) {
          return std::vector<double>(tt.host.begin() + t * width, tt.host.begin() + (t + 1) * width);
        };
        std::vector<double> x = slice(op.x, HP), dt = slice(op.dt, kSsmHeads),
                            B = slice(op.b, GN), C = slice(op.c, GN), z = slice(op.z, HP);
        kiln::reference::ssmUpdateReference(kSsmHeads, kSsmP, kSsmN, kGroups,
                                            state.data() + slot * S, x.data(), dt.data(),
                                            dtb.data(), A.data(), B.data(), C.data(), D.data(),
                                            z.data(), true, refOut.data() + t * HP);
        if (!s.prefill && op.hasInter) {
          int i = static_cast<int>(t) % s.qLen;
          std::copy_n(state.begin() + slot * S, S,
                      refInter.begin() + (static_cast<size_t>(slot) * s.qLen + i) * S);
        }
      }
      std::vector<float> out = op.out.download(T * HP);
      compare(name + " out", out, refOut, out.size(), 1e-2, 1e-2);
      if (!s.prefill && op.hasInter) {
        std::vector<float> inter =
            readArenaF32(arena, op.interOffset, static_cast<size_t>(kSlots) * s.qLen * S);
        compare(name + " intermediate states", inter, refInter, inter.size(), 1e-4, 1e-3);
        (*interOut)[oi] = inter;
        std::vector<float> main = readArenaF32(arena, op.offset, kSlots * S);
        compare(name + " state untouched by the spec step", main, preStates[oi], main.size(), 0,
                0);
      } else {
        std::vector<float> main = readArenaF32(arena, op.offset, kSlots * S);
        compare(name + " state", main, state, main.size(), 1e-4, 1e-3);
      }
    }
  }
}

bool runModel(const std::string &path, const std::string &kind, bool spec, uint32_t seed) {
  std::printf("== %s (%s, %s)\n", path.c_str(), kind.c_str(), spec ? "spec mtp:3" : "no spec");
  int failuresBefore = gFailures;
  // A bare file name would make dlopen search the library path, not the directory.
  std::string file = path.find('/') == std::string::npos ? "./" + path : path;
  void *handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    report(false, "dlopen %s: %s", path.c_str(), dlerror());
    return false;
  }
  auto arenaFn = reinterpret_cast<ArenaFn>(dlsym(handle, "kiln_model_arena_bytes"));
  auto specFn = reinterpret_cast<ArenaFn>(dlsym(handle, "kiln_model_speculative_bytes"));
  auto decodeFn = reinterpret_cast<StepFn>(dlsym(handle, "kiln_model_decode_step"));
  auto prefillFn = reinterpret_cast<StepFn>(dlsym(handle, "kiln_model_prefill_step"));
  auto pagesFn = reinterpret_cast<PagesFn>(dlsym(handle, "kiln_model_kv_pages"));
  report(arenaFn && specFn && decodeFn && prefillFn, "%s exports the four kiln_model_* symbols",
         path.c_str());
  if (!arenaFn || !specFn || !decodeFn || !prefillFn)
    return false;
  const uint64_t arenaBytes = arenaFn(), specBytes = specFn();
  std::printf("   arena %llu bytes, speculative %llu bytes\n",
              static_cast<unsigned long long>(arenaBytes),
              static_cast<unsigned long long>(specBytes));
  if (!spec)
    report(specBytes == 0, "no speculation: kiln_model_speculative_bytes() == 0 (got %llu)",
           static_cast<unsigned long long>(specBytes));

  Model m;
  m.path = path;
  m.kind = kind;
  m.spec = spec;
  bool mla = kind == "mla";
  m.pageSize = mla ? 64 : 16;
  m.maxPages = kMaxSeq / m.pageSize;
  m.numPages = pagesFn ? pagesFn() : kSlots * kMaxSeq / m.pageSize;
  if (mla) {
    m.ops.push_back(Op{OpKind::Mla, 0});
    m.ops.push_back(Op{OpKind::Mla, 1});
  } else {
    m.ops.push_back(Op{OpKind::Conv, 0});
    m.ops.push_back(Op{OpKind::Ssm, 0});
    m.ops.push_back(Op{OpKind::Attention, 1});
    m.ops.push_back(Op{OpKind::Conv, 2});
    m.ops.push_back(Op{OpKind::Ssm, 2});
    m.ops.push_back(Op{OpKind::Attention, 3});
  }

  std::mt19937 rng(seed);
  const int qLenDecode = spec ? 4 : 1;
  const std::vector<int> prompt = {37, 64, 5, 100};
  const int totalPrompt = std::accumulate(prompt.begin(), prompt.end(), 0);
  const size_t maxTokens = std::max(totalPrompt, kSlots * qLenDecode);
  for (Op &op : m.ops) {
    switch (op.kind) {
    case OpKind::Attention:
      op.q.alloc(maxTokens * kHeads * kHeadDim);
      op.k.alloc(maxTokens * kKvHeads * kHeadDim);
      op.v.alloc(maxTokens * kKvHeads * kHeadDim);
      op.out.alloc(maxTokens * kHeads * kHeadDim);
      op.mirror.assign(static_cast<size_t>(m.numPages) * 2 * m.pageSize * kKvHeads * kHeadDim, 0.f);
      break;
    case OpKind::Mla:
      op.q.alloc(maxTokens * kMlaHeads * kLatent);
      op.latent.alloc(maxTokens * kLatent);
      op.out.alloc(maxTokens * kMlaHeads * kLora);
      op.mirror.assign(static_cast<size_t>(m.numPages) * m.pageSize * kLatent, 0.f);
      break;
    case OpKind::Ssm:
      op.x.alloc(maxTokens * kSsmHeads * kSsmP);
      op.dt.alloc(maxTokens * kSsmHeads);
      op.b.alloc(maxTokens * kGroups * kSsmN);
      op.c.alloc(maxTokens * kGroups * kSsmN);
      op.z.alloc(maxTokens * kSsmHeads * kSsmP);
      op.out.alloc(maxTokens * kSsmHeads * kSsmP);
      op.A.alloc(kSsmHeads, true);
      op.D.alloc(kSsmHeads, true);
      op.dtBias.alloc(kSsmHeads, true);
      op.A.fill(rng, -1.5f, -0.2f);
      op.D.fill(rng, -1, 1);
      op.dtBias.fill(rng, -1, 1);
      break;
    case OpKind::Conv:
      op.x.alloc(maxTokens * kConvDim);
      op.out.alloc(maxTokens * kConvDim);
      op.weight.alloc(static_cast<size_t>(kConvDim) * kWidth);
      op.bias.alloc(kConvDim);
      op.weight.fill(rng, -0.5f, 0.5f);
      op.bias.fill(rng, -0.5f, 0.5f);
      break;
    }
  }

  // Block table: a random permutation of the pages; slots permuted too.
  std::vector<int32_t> pages(m.numPages);
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  std::vector<int32_t> blockTable(static_cast<size_t>(kSlots) * m.maxPages);
  for (size_t i = 0; i < blockTable.size(); ++i)
    blockTable[i] = pages[i % pages.size()];
  const std::vector<int32_t> slots = {2, 0, 3, 1};
  DeviceBatch db;
  if (gDry) {
    db.seqLens = static_cast<int32_t *>(fakePointer(64));
    db.slots = static_cast<int32_t *>(fakePointer(64));
    db.cuQ = static_cast<int32_t *>(fakePointer(64));
    db.blockTable = static_cast<int32_t *>(fakePointer(blockTable.size() * 4));
  } else {
  CUDA_OK(cudaMalloc(&db.seqLens, kSlots * sizeof(int32_t)));
  CUDA_OK(cudaMalloc(&db.slots, kSlots * sizeof(int32_t)));
  CUDA_OK(cudaMalloc(&db.cuQ, (kSlots + 1) * sizeof(int32_t)));
  CUDA_OK(cudaMalloc(&db.blockTable, blockTable.size() * sizeof(int32_t)));
  CUDA_OK(cudaMemcpy(db.blockTable, blockTable.data(), blockTable.size() * 4,
                     cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(db.slots, slots.data(), kSlots * 4, cudaMemcpyHostToDevice));
  }

  StepInfo pre;
  pre.prefill = true;
  pre.cu.assign(1, 0);
  for (int b = 0; b < kSlots; ++b) {
    for (int i = 0; i < prompt[b]; ++i)
      pre.tokBatch.push_back(b), pre.tokPos.push_back(i);
    pre.cu.push_back(pre.cu.back() + prompt[b]);
  }
  pre.tokens = totalPrompt;
  if (!gDry) {
    CUDA_OK(cudaMemcpy(db.cuQ, pre.cu.data(), pre.cu.size() * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(db.seqLens, prompt.data(), kSlots * 4, cudaMemcpyHostToDevice));
  }

  auto makeBatch = [&](const StepInfo &s) {
    kiln_rt_batch_t b{};
    b.batch = s.batch;
    b.q_len = s.prefill ? 1 : s.qLen;
    b.seq_lens = db.seqLens;
    b.block_table = db.blockTable;
    b.max_pages = m.maxPages;
    b.num_pages = m.numPages;
    b.slot_indices = db.slots;
    b.num_slots = kSlots;
    if (s.prefill) {
      b.cu_seqlens_q = db.cuQ;
      b.cu_seqlens_k = db.cuQ;
      b.cu_seqlens_q_host = s.cu.data();
      b.total_tokens = s.tokens;
      b.max_q_len = *std::max_element(prompt.begin(), prompt.end());
    }
    return b;
  };

  // -- dry run: the arena ranges the steps use ---------------------------------------
  {
    kiln_rt_context_t *dry = nullptr;
    if (!statusOk(kiln_rt_create_dry(arenaBytes, &dry), "kiln_rt_create_dry"))
      return false;
    bindAll(dry, m);
    kiln_rt_batch_t b = makeBatch(pre);
    bool ok = statusOk(kiln_rt_set_batch(dry, &b), "dry set_batch (prefill)") &&
              statusOk(static_cast<kiln_status_t>(prefillFn(dry)), "dry prefill step");
    StepInfo dec;
    dec.qLen = qLenDecode;
    kiln_rt_batch_t bd = makeBatch(dec);
    ok = ok && statusOk(kiln_rt_set_batch(dry, &bd), "dry set_batch (decode)") &&
         statusOk(static_cast<kiln_status_t>(decodeFn(dry)), "dry decode step");
    report(ok, "dry run (validation only) of prefill and decode steps");
    uint64_t interBytes = 0;
    int interCount = 0;
    for (Op &op : m.ops) {
      const char *main = op.kind == OpKind::Attention ? "kv"
                         : op.kind == OpKind::Mla     ? "mla_latent"
                         : op.kind == OpKind::Ssm     ? "ssm_state"
                                                      : "conv_state";
      const char *inter = op.kind == OpKind::Ssm    ? "intermediate_ssm_state"
                          : op.kind == OpKind::Conv ? "intermediate_conv_state"
                                                    : nullptr;
      uint64_t bytes = 0;
      ok = ok && statusOk(kiln_rt_resource(dry, op.layer, main, &op.offset, &bytes),
                          opName(op) + " resource");
      if (inter) {
        uint64_t ib = 0;
        op.hasInter = kiln_rt_resource(dry, op.layer, inter, &op.interOffset, &ib) == KILN_OK;
        if (op.hasInter)
          interBytes += ib, ++interCount;
      }
      std::printf("   %s: %s at %llu (%llu bytes)%s\n", opName(op).c_str(), main,
                  static_cast<unsigned long long>(op.offset), static_cast<unsigned long long>(bytes),
                  op.hasInter ? ", with intermediate states" : "");
    }
    if (spec && !mla)
      report(interCount == 4 && interBytes <= specBytes,
             "spec: every ssm/conv op writes intermediate states (%d, %llu bytes <= speculative "
             "%llu)", interCount, static_cast<unsigned long long>(interBytes),
             static_cast<unsigned long long>(specBytes));
    else
      report(interCount == 0, "no intermediate states used (%d)", interCount);
    kiln_rt_destroy(dry);
    if (!ok)
      return false;
  }
  if (gDry) {
    bool ok = gFailures == failuresBefore;
    std::printf("%s: %s (%s, %s), dry run only\n", ok ? "PASS" : "FAIL", path.c_str(),
                kind.c_str(), spec ? "spec" : "nospec");
    return ok;
  }

  // -- the GPU run -----------------------------------------------------------------------
  kiln_rt_context_t *ctx = nullptr;
  if (!statusOk(kiln_rt_create(0, arenaBytes, &ctx), "kiln_rt_create"))
    return false;
  report(kiln_rt_arena_bytes(ctx) == arenaBytes,
         "runtime arena bytes %llu == kiln_model_arena_bytes() %llu",
         static_cast<unsigned long long>(kiln_rt_arena_bytes(ctx)),
         static_cast<unsigned long long>(arenaBytes));
  void *arena = kiln_rt_arena(ctx);
  if (!bindAll(ctx, m))
    return false;

  // Poison the state slots: the prefill must start from zeros.
  for (Op &op : m.ops) {
    if (op.kind == OpKind::Ssm)
      CUDA_OK(cudaMemset(static_cast<char *>(arena) + op.offset, 0x3f,
                         kSlots * ssmSlotElems() * 4));
    if (op.kind == OpKind::Conv)
      CUDA_OK(cudaMemset(static_cast<char *>(arena) + op.offset, 0x3f,
                         kSlots * convSlotElems() * 2));
  }

  auto preStatesOf = [&](bool prefill) {
    std::vector<std::vector<float>> states(m.ops.size());
    for (size_t i = 0; i < m.ops.size(); ++i) {
      Op &op = m.ops[i];
      if (op.kind == OpKind::Ssm)
        states[i] = prefill ? std::vector<float>(kSlots * ssmSlotElems(), 0.f)
                            : readArenaF32(arena, op.offset, kSlots * ssmSlotElems());
      if (op.kind == OpKind::Conv)
        states[i] = prefill ? std::vector<float>(kSlots * convSlotElems(), 0.f)
                            : readArenaBf16(arena, op.offset, kSlots * convSlotElems());
    }
    return states;
  };

  // Prefill.
  {
    fillInputs(m, pre, rng);
    kiln_rt_batch_t b = makeBatch(pre);
    uint64_t launches = kiln_rt_launch_count(ctx);
    bool ok = statusOk(kiln_rt_set_batch(ctx, &b), "set_batch (prefill)") &&
              statusOk(static_cast<kiln_status_t>(prefillFn(ctx)), "prefill step") &&
              statusOk(kiln_rt_synchronize(ctx), "synchronize after prefill");
    report(ok, "prefill step ran (prompts 37/64/5/100, %llu launches)",
           static_cast<unsigned long long>(kiln_rt_launch_count(ctx) - launches));
    if (!ok)
      return false;
    std::vector<std::vector<float>> inter(m.ops.size());
    checkStep(m, pre, "prefill", arena, blockTable, slots, preStatesOf(true), &inter);
  }

  // Decode steps.
  std::vector<int32_t> committed(prompt.begin(), prompt.end());
  for (int stepIndex = 0; stepIndex < 3; ++stepIndex) {
    StepInfo s;
    s.qLen = qLenDecode;
    s.tokens = kSlots * qLenDecode;
    s.seqLens.resize(kSlots);
    for (int b = 0; b < kSlots; ++b) {
      s.seqLens[b] = committed[b] + qLenDecode;
      for (int i = 0; i < qLenDecode; ++i)
        s.tokBatch.push_back(b), s.tokPos.push_back(committed[b] + i);
    }
    CUDA_OK(cudaMemcpy(db.seqLens, s.seqLens.data(), kSlots * 4, cudaMemcpyHostToDevice));
    fillInputs(m, s, rng);
    std::vector<std::vector<float>> preStates = preStatesOf(false);
    kiln_rt_batch_t b = makeBatch(s);
    uint64_t launches = kiln_rt_launch_count(ctx);
    auto t0 = std::chrono::steady_clock::now();
    bool ok = statusOk(kiln_rt_set_batch(ctx, &b), "set_batch (decode)") &&
              statusOk(static_cast<kiln_status_t>(decodeFn(ctx)), "decode step");
    auto t1 = std::chrono::steady_clock::now();
    ok = ok && statusOk(kiln_rt_synchronize(ctx), "synchronize after decode");
    auto t2 = std::chrono::steady_clock::now();
    std::string tag = "decode " + std::to_string(stepIndex + 1);
    report(ok, "%s step ran (q_len %d, %llu launches, host %.1f us, step %.1f us, workspace %llu "
               "bytes)", tag.c_str(), qLenDecode,
           static_cast<unsigned long long>(kiln_rt_launch_count(ctx) - launches),
           std::chrono::duration<double, std::micro>(t1 - t0).count(),
           std::chrono::duration<double, std::micro>(t2 - t0).count(),
           static_cast<unsigned long long>(kiln_rt_workspace_bytes(ctx)));
    if (!ok)
      return false;
    std::vector<std::vector<float>> inter(m.ops.size());
    checkStep(m, s, tag, arena, blockTable, slots, preStates, &inter);
    if (spec) {
      std::vector<int32_t> accepted(kSlots);
      std::uniform_int_distribution<int> acc(1, qLenDecode);
      for (int bIdx = 0; bIdx < kSlots; ++bIdx)
        accepted[bIdx] = acc(rng);
      bool cok = statusOk(kiln_rt_commit_accepted(ctx, accepted.data()), "commit") &&
                 statusOk(kiln_rt_synchronize(ctx), "synchronize after commit");
      report(cok, "%s commit (accepted %d/%d/%d/%d)", tag.c_str(), accepted[0], accepted[1],
             accepted[2], accepted[3]);
      for (size_t oi = 0; oi < m.ops.size(); ++oi) {
        Op &op = m.ops[oi];
        if (!op.hasInter)
          continue;
        bool isSsm = op.kind == OpKind::Ssm;
        size_t S = isSsm ? ssmSlotElems() : convSlotElems();
        std::vector<float> main = isSsm ? readArenaF32(arena, op.offset, kSlots * S)
                                        : readArenaBf16(arena, op.offset, kSlots * S);
        std::vector<float> expect(main.size());
        for (int bIdx = 0; bIdx < kSlots; ++bIdx) {
          int slot = slots[bIdx];
          std::copy_n(inter[oi].begin() + (static_cast<size_t>(slot) * qLenDecode +
                                           accepted[bIdx] - 1) * S,
                      S, expect.begin() + slot * S);
        }
        compare(tag + " " + opName(op) + " committed state == intermediate[accepted-1]", main,
                expect, main.size(), 0, 0);
      }
      for (int bIdx = 0; bIdx < kSlots; ++bIdx)
        committed[bIdx] += accepted[bIdx];
    } else {
      for (int bIdx = 0; bIdx < kSlots; ++bIdx)
        committed[bIdx] += 1;
    }
  }
  kiln_rt_destroy(ctx);
  dlclose(handle);
  bool ok = gFailures == failuresBefore;
  std::printf("%s: %s (%s, %s)\n", ok ? "PASS" : "FAIL", path.c_str(), kind.c_str(),
              spec ? "spec" : "nospec");
  return ok;
}

} // namespace

int main(int argc, char **argv) {
  int first = 1;
  if (argc > 1 && std::string(argv[1]) == "--dry") {
    gDry = true;
    first = 2;
  }
  if (argc - first < 3 || (argc - first) % 3 != 0) {
    std::fprintf(stderr,
                 "usage: %s [--dry] <model.so> <hybrid|mla> <spec|nospec> [<model.so> <kind> "
                 "<spec>...]\n  --dry: only the validation-only (no GPU) part\n",
                 argv[0]);
    return 2;
  }
  int count = 0;
  if (!gDry && (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)) {
    std::printf("skipped: no CUDA device\n");
    return 0;
  }
  for (int i = first; i + 2 < argc; i += 3) {
    std::string kind = argv[i + 1], spec = argv[i + 2];
    if ((kind != "hybrid" && kind != "mla") || (spec != "spec" && spec != "nospec")) {
      std::fprintf(stderr, "kiln_e2e: bad model kind '%s' or spec '%s'\n", kind.c_str(),
                   spec.c_str());
      return 2;
    }
    runModel(argv[i], kind, spec == "spec", 1234u + static_cast<uint32_t>(i));
  }
  std::printf("%s: kiln_e2e, %d failure(s)\n", gFailures ? "FAIL" : "PASS", gFailures);
  return gFailures ? 1 : 0;
}
