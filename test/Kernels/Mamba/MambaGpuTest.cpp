// GPU tests: every kernel against the fp64 CPU reference on random data (ragged batches,
// padding slots, shuffled slot indices, outputs poisoned before each run), and the spec
// variants step by step against the single-token kernel applied repeatedly.
#include "GpuTest.h"
#include "MambaReference.h"
#include "MambaTestUtil.h"
#include "kiln/Kernels/Mamba.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

using namespace kiln::test;
using namespace kiln::reference;

namespace {

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr
#define KILN_OK_(expr) ASSERT_EQ((expr), KILN_OK) << kiln_last_error()

struct DeviceBuffer {
  void *ptr = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    if (cudaMalloc(&ptr, n ? n : 16) != cudaSuccess)
      ptr = nullptr;
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  template <typename T> T *as() const { return static_cast<T *>(ptr); }
};

std::unique_ptr<DeviceBuffer> upload(const void *data, size_t bytes) {
  auto buf = std::make_unique<DeviceBuffer>(bytes);
  cudaMemcpy(buf->ptr, data, bytes, cudaMemcpyHostToDevice);
  return buf;
}
std::unique_ptr<DeviceBuffer> upload(const HostTensor &t) {
  return upload(t.bytes.data(), t.bytes.size());
}
template <typename T> std::unique_ptr<DeviceBuffer> upload(const std::vector<T> &v) {
  return upload(v.data(), v.size() * sizeof(T));
}
std::unique_ptr<DeviceBuffer> poisoned(size_t bytes) {
  auto buf = std::make_unique<DeviceBuffer>(bytes);
  cudaMemset(buf->ptr, 0xFF, bytes);
  return buf;
}
void download(HostTensor &t, const DeviceBuffer &buf) {
  cudaMemcpy(t.bytes.data(), buf.ptr, t.bytes.size(), cudaMemcpyDeviceToHost);
}

bool allPoison(const HostTensor &t, size_t first, size_t n) {
  const size_t e = t.elemBytes();
  for (size_t i = first * e; i < (first + n) * e; ++i)
    if (t.bytes[i] != 0xFF)
      return false;
  return true;
}

// |got - want| <= tol * (|want| + scale), scale = rms of the reference values.
struct Compare {
  double tol, scale;
  int failures = 0;
  double worst = 0.0;
  void check(double got, double want, const char *what, size_t index) {
    const double err = std::fabs(got - want);
    const double allowed = tol * (std::fabs(want) + scale);
    if (!(err <= allowed)) {
      if (++failures <= 5)
        ADD_FAILURE() << what << "[" << index << "]: got " << got << " want " << want
                      << " (err " << err << ", allowed " << allowed << ")";
    }
    if (std::isfinite(err))
      worst = std::max(worst, err / (std::fabs(want) + scale));
  }
};

double rms(const std::vector<double> &v) {
  double s = 0.0;
  for (double x : v)
    s += x * x;
  return v.empty() ? 1.0 : std::sqrt(s / static_cast<double>(v.size())) + 1e-30;
}

// ---------------------------------------------------------------------------------------
struct SsmCase {
  kiln_dtype_t stateDtype, dtype;
  int batch, slots, heads, headDim, stateSize, groups, tokens;
  bool z, D, dtBias, softplus;
  int padEvery;      // every padEvery-th sequence is padding (0: none)
  bool nullIndices;  // state_indices = NULL (slot = b)
  // A holds A_log (a_is_log, the compiled models' parameters) and dt is clamped to
  // [kDtMin, kDtMax] after the softplus.
  bool aLogClamp = false;
};
constexpr float kDtMin = 0.3f, kDtMax = 0.9f;

std::string name(const SsmCase &c) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "state=%s act=%s B=%d slots=%d H=%d P=%d N=%d G=%d T=%d z=%d D=%d bias=%d sp=%d pad=%d null=%d alog=%d",
                c.stateDtype == KILN_DTYPE_F32 ? "f32" : "bf16",
                c.dtype == KILN_DTYPE_BF16 ? "bf16" : "f16", c.batch, c.slots, c.heads,
                c.headDim, c.stateSize, c.groups, c.tokens, c.z, c.D, c.dtBias, c.softplus,
                c.padEvery, c.nullIndices, c.aLogClamp);
  return buf;
}

struct SsmData {
  SsmCase c;
  std::vector<int32_t> idx;
  HostTensor state, x, dt, B, C, z; // x etc. [batch, T, ...]
  std::vector<float> A, D, dtBias;

  SsmData(const SsmCase &cc, uint64_t seed) : c(cc) {
    Rng rng(seed);
    const size_t H = c.heads, P = c.headDim, N = c.stateSize, G = c.groups, T = c.tokens;
    idx = c.nullIndices ? std::vector<int32_t>() : makeIndices(rng, c.batch, c.slots, c.padEvery);
    state = HostTensor(c.stateDtype, c.slots * H * P * N);
    rng.fill(state, -1.0, 1.0);
    x = HostTensor(c.dtype, c.batch * T * H * P);
    rng.fill(x, -1.0, 1.0);
    dt = HostTensor(c.dtype, c.batch * T * H);
    if (c.softplus)
      rng.fill(dt, -3.0, 1.0);
    else
      rng.fill(dt, 0.01, 0.5);
    B = HostTensor(c.dtype, c.batch * T * G * N);
    C = HostTensor(c.dtype, c.batch * T * G * N);
    rng.fill(B, -1.0, 1.0);
    rng.fill(C, -1.0, 1.0);
    z = HostTensor(c.dtype, c.batch * T * H * P);
    rng.fill(z, -3.0, 3.0);
    A.resize(H);
    D.resize(H);
    dtBias.resize(H);
    rng.fill(A, -2.0, -0.1);
    if (c.aLogClamp)
      for (float &a : A)
        a = std::log(-a);
    rng.fill(D, -1.0, 1.0);
    if (c.softplus)
      rng.fill(dtBias, -1.0, 1.0);
    else
      rng.fill(dtBias, 0.0, 0.2);
  }
  int slotOf(int b) const { return c.nullIndices ? b : idx[b]; }

  // Reference: runs tokens 0..T-1 of every live sequence from the initial state;
  // refState[b][t] is the state after token t, refOut[b][t] its output.
  void reference(std::vector<std::vector<std::vector<double>>> &refState,
                 std::vector<std::vector<std::vector<double>>> &refOut) const {
    const size_t H = c.heads, P = c.headDim, N = c.stateSize, G = c.groups, T = c.tokens;
    refState.assign(c.batch, {});
    refOut.assign(c.batch, {});
    std::vector<double> Ad(A.begin(), A.end()), Dd(D.begin(), D.end()),
        biasd(dtBias.begin(), dtBias.end());
    for (int b = 0; b < c.batch; ++b) {
      const int slot = slotOf(b);
      if (slot < 0)
        continue;
      std::vector<double> st(H * P * N);
      for (size_t i = 0; i < st.size(); ++i)
        st[i] = state.get(slot * H * P * N + i);
      for (size_t t = 0; t < T; ++t) {
        auto slice = [&](const HostTensor &h, size_t n) {
          std::vector<double> v(n);
          for (size_t i = 0; i < n; ++i)
            v[i] = h.get((b * T + t) * n + i);
          return v;
        };
        auto xs = slice(x, H * P), dts = slice(dt, H), Bs = slice(B, G * N),
             Cs = slice(C, G * N), zs = slice(z, H * P);
        std::vector<double> out(H * P);
        ssmUpdateReference(c.heads, c.headDim, c.stateSize, c.groups, st.data(), xs.data(),
                           dts.data(), c.dtBias ? biasd.data() : nullptr, Ad.data(),
                           Bs.data(), Cs.data(), c.D ? Dd.data() : nullptr,
                           c.z ? zs.data() : nullptr, c.softplus, out.data(), c.aLogClamp,
                           c.aLogClamp ? kDtMin : 0.0, c.aLogClamp ? kDtMax : 0.0);
        refState[b].push_back(st);
        refOut[b].push_back(out);
      }
    }
  }
};

double stateTol(const SsmCase &c) { return c.stateDtype == KILN_DTYPE_F32 ? 2e-5 : 1e-2; }
double outTol(const SsmCase &c) {
  double t = c.dtype == KILN_DTYPE_BF16 ? 8e-3 : 2e-3;
  return c.stateDtype == KILN_DTYPE_BF16 ? t + 1e-2 : t;
}

void runSsmSingle(const SsmCase &c, uint64_t seed) {
  SCOPED_TRACE(name(c));
  ASSERT_EQ(c.tokens, 1);
  SsmData d(c, seed);
  const size_t H = c.heads, P = c.headDim, N = c.stateSize;
  auto dState = upload(d.state);
  auto dIdx = upload(d.idx);
  auto dx = upload(d.x), ddt = upload(d.dt), dB = upload(d.B), dC = upload(d.C),
       dz = upload(d.z);
  auto dA = upload(d.A), dD = upload(d.D), dBias = upload(d.dtBias);
  auto dOut = poisoned(c.batch * H * P * dtypeSize(c.dtype));

  kiln_ssm_update_params_t p{};
  p.state = dState->ptr;
  p.state_dtype = c.stateDtype;
  p.num_slots = c.slots;
  p.state_indices = c.nullIndices ? nullptr : dIdx->as<int32_t>();
  p.batch = c.batch;
  p.heads = c.heads;
  p.head_dim = c.headDim;
  p.state_size = c.stateSize;
  p.n_groups = c.groups;
  p.dtype = c.dtype;
  p.x = dx->ptr;
  p.dt = ddt->ptr;
  p.dt_bias = c.dtBias ? dBias->as<float>() : nullptr;
  p.A = dA->as<float>();
  p.B = dB->ptr;
  p.C = dC->ptr;
  p.D = c.D ? dD->as<float>() : nullptr;
  p.z = c.z ? dz->ptr : nullptr;
  p.out = dOut->ptr;
  p.dt_softplus = c.softplus;
  p.a_is_log = c.aLogClamp;
  p.dt_min = c.aLogClamp ? kDtMin : 0.0f;
  p.dt_max = c.aLogClamp ? kDtMax : 0.0f;
  KILN_OK_(kiln_ssm_update(&p));
  CUDA_OK(cudaDeviceSynchronize());

  HostTensor gotState(c.stateDtype, d.state.count), gotOut(c.dtype, c.batch * H * P);
  download(gotState, *dState);
  download(gotOut, *dOut);
  std::vector<std::vector<std::vector<double>>> refState, refOut;
  d.reference(refState, refOut);

  std::vector<bool> touched(c.slots, false);
  for (int b = 0; b < c.batch; ++b) {
    const int slot = d.slotOf(b);
    if (slot < 0) {
      EXPECT_TRUE(allPoison(gotOut, b * H * P, H * P)) << "padding sequence " << b << " written";
      continue;
    }
    touched[slot] = true;
    Compare cs{stateTol(c), rms(refState[b][0])}, co{outTol(c), rms(refOut[b][0])};
    for (size_t i = 0; i < H * P * N; ++i)
      cs.check(gotState.get(slot * H * P * N + i), refState[b][0][i], "state", i);
    for (size_t i = 0; i < H * P; ++i)
      co.check(gotOut.get(b * H * P + i), refOut[b][0][i], "out", i);
    ASSERT_EQ(cs.failures + co.failures, 0) << "sequence " << b;
  }
  for (int s = 0; s < c.slots; ++s)
    if (!touched[s])
      EXPECT_TRUE(gotState.sameBytes(s * H * P * N, H * P * N, d.state)) << "slot " << s << " modified";
}

// Spec: checks intermediates/outputs against the reference after every token, the main
// state untouched, and bit-equality with the single-token launcher applied T times
// (fed through strided views of the [batch, T, ...] inputs).
// The fields the spec and replay launchers share, for one step's inputs `d` on the
// device buffers `in` (x, dt, B, C, z, A, D, dt_bias, indices).
struct StepInputs {
  std::unique_ptr<DeviceBuffer> x, dt, B, C, z, A, D, bias, idx;
  explicit StepInputs(const SsmData &d)
      : x(upload(d.x)), dt(upload(d.dt)), B(upload(d.B)), C(upload(d.C)), z(upload(d.z)),
        A(upload(d.A)), D(upload(d.D)), bias(upload(d.dtBias)), idx(upload(d.idx)) {}
};
template <typename Params>
void fillStep(Params &p, const SsmCase &c, const StepInputs &in, void *state, void *out) {
  p.state = state;
  p.state_dtype = c.stateDtype;
  p.num_slots = c.slots;
  p.state_indices = c.nullIndices ? nullptr : in.idx->as<int32_t>();
  p.batch = c.batch;
  p.num_tokens = c.tokens;
  p.heads = c.heads;
  p.head_dim = c.headDim;
  p.state_size = c.stateSize;
  p.n_groups = c.groups;
  p.dtype = c.dtype;
  p.x = in.x->ptr;
  p.dt = in.dt->ptr;
  p.dt_bias = c.dtBias ? in.bias->as<float>() : nullptr;
  p.A = in.A->as<float>();
  p.B = in.B->ptr;
  p.C = in.C->ptr;
  p.D = c.D ? in.D->as<float>() : nullptr;
  p.z = c.z ? in.z->ptr : nullptr;
  p.out = out;
  p.dt_softplus = c.softplus;
  p.a_is_log = c.aLogClamp;
  p.dt_min = c.aLogClamp ? kDtMin : 0.0f;
  p.dt_max = c.aLogClamp ? kDtMax : 0.0f;
}

void runSsmSpec(const SsmCase &c, uint64_t seed) {
  SCOPED_TRACE(name(c));
  SsmData d(c, seed);
  const size_t H = c.heads, P = c.headDim, N = c.stateSize, G = c.groups, T = c.tokens;
  const size_t slotElems = H * P * N;
  auto dState = upload(d.state);
  StepInputs in(d);
  auto &dx = in.x, &ddt = in.dt, &dB = in.B, &dC = in.C, &dz = in.z;
  auto dOut = poisoned(c.batch * T * H * P * dtypeSize(c.dtype));
  auto dInter = poisoned(c.slots * T * slotElems * dtypeSize(c.stateDtype));

  kiln_ssm_update_spec_params_t p{};
  fillStep(p, c, in, dState->ptr, dOut->ptr);
  p.intermediate = dInter->ptr;
  KILN_OK_(kiln_ssm_update_spec(&p));
  CUDA_OK(cudaDeviceSynchronize());

  HostTensor gotState(c.stateDtype, d.state.count), gotOut(c.dtype, c.batch * T * H * P),
      gotInter(c.stateDtype, c.slots * T * slotElems);
  download(gotState, *dState);
  download(gotOut, *dOut);
  download(gotInter, *dInter);
  EXPECT_EQ(std::memcmp(gotState.bytes.data(), d.state.bytes.data(), d.state.bytes.size()), 0)
      << "spec kernel modified the main state";

  std::vector<std::vector<std::vector<double>>> refState, refOut;
  d.reference(refState, refOut);
  std::vector<bool> touched(c.slots, false);
  for (int b = 0; b < c.batch; ++b) {
    const int slot = d.slotOf(b);
    if (slot < 0) {
      EXPECT_TRUE(allPoison(gotOut, b * T * H * P, T * H * P)) << "padding sequence " << b;
      continue;
    }
    touched[slot] = true;
    for (size_t t = 0; t < T; ++t) {
      Compare cs{stateTol(c) * (t + 1), rms(refState[b][t])},
          co{outTol(c) * (t + 1), rms(refOut[b][t])};
      for (size_t i = 0; i < slotElems; ++i)
        cs.check(gotInter.get((slot * T + t) * slotElems + i), refState[b][t][i], "inter", i);
      for (size_t i = 0; i < H * P; ++i)
        co.check(gotOut.get((b * T + t) * H * P + i), refOut[b][t][i], "out", i);
      ASSERT_EQ(cs.failures + co.failures, 0) << "sequence " << b << " token " << t;
    }
  }
  for (int s = 0; s < c.slots; ++s)
    if (!touched[s])
      EXPECT_TRUE(allPoison(gotInter, s * T * slotElems, T * slotElems)) << "slot " << s;

  // Single-token launcher, T times, on a copy of the state.
  auto dState2 = upload(d.state);
  auto dOut2 = poisoned(c.batch * T * H * P * dtypeSize(c.dtype));
  const size_t ae = dtypeSize(c.dtype);
  HostTensor stepState(c.stateDtype, d.state.count);
  for (size_t t = 0; t < T; ++t) {
    kiln_ssm_update_params_t q{};
    q.state = dState2->ptr;
    q.state_dtype = c.stateDtype;
    q.num_slots = c.slots;
    q.state_indices = p.state_indices;
    q.batch = c.batch;
    q.heads = c.heads;
    q.head_dim = c.headDim;
    q.state_size = c.stateSize;
    q.n_groups = c.groups;
    q.dtype = c.dtype;
    q.x = static_cast<char *>(dx->ptr) + t * H * P * ae;
    q.x_stride_batch = T * H * P;
    q.dt = static_cast<char *>(ddt->ptr) + t * H * ae;
    q.dt_stride_batch = T * H;
    q.dt_bias = p.dt_bias;
    q.A = p.A;
    q.B = static_cast<char *>(dB->ptr) + t * G * N * ae;
    q.B_stride_batch = T * G * N;
    q.C = static_cast<char *>(dC->ptr) + t * G * N * ae;
    q.C_stride_batch = T * G * N;
    q.D = p.D;
    q.z = c.z ? static_cast<char *>(dz->ptr) + t * H * P * ae : nullptr;
    q.z_stride_batch = T * H * P;
    q.out = static_cast<char *>(dOut2->ptr) + t * H * P * ae;
    q.out_stride_batch = T * H * P;
    q.dt_softplus = c.softplus;
    q.a_is_log = p.a_is_log; // the same parameters as the spec launch
    q.dt_min = p.dt_min;
    q.dt_max = p.dt_max;
    KILN_OK_(kiln_ssm_update(&q));
    CUDA_OK(cudaDeviceSynchronize());
    download(stepState, *dState2);
    for (int b = 0; b < c.batch; ++b) {
      const int slot = d.slotOf(b);
      if (slot < 0)
        continue;
      EXPECT_EQ(std::memcmp(&stepState.bytes[slot * slotElems * stepState.elemBytes()],
                            &gotInter.bytes[(slot * T + t) * slotElems * gotInter.elemBytes()],
                            slotElems * stepState.elemBytes()),
                0)
          << "intermediate[slot " << slot << ", token " << t << "] != single-token state";
    }
  }
  HostTensor gotOut2(c.dtype, c.batch * T * H * P);
  download(gotOut2, *dOut2);
  EXPECT_EQ(std::memcmp(gotOut2.bytes.data(), gotOut.bytes.data(), gotOut.bytes.size()), 0)
      << "spec outputs != single-token outputs";
}

// Replay mode against rewind, bit for bit, over three steps of a sequence batch:
//   1. speculative from the initial state: outputs equal the spec kernel's, the state
//      is untouched, the inputs go to buffer 1;
//   2. speculative with k_b = 1 + b % T of step 1's tokens pending (buffer 1): the state
//      becomes step 1's intermediate k_b - 1, outputs equal the spec kernel's from it;
//      a fold alone (no tokens) of a copy gives the same state;
//   3. committing with step 2's T - b % T tokens pending (buffer 0): the state equals the
//      spec kernel's last intermediate from step 2's accepted state.
void runSsmReplay(const SsmCase &c, uint64_t seed) {
  SCOPED_TRACE(name(c));
  // Step 2's tokens are new; the layer's parameters (A, D, dt_bias) and slots are not.
  SsmData d1(c, seed), d2(c, seed + 1000);
  d2.idx = d1.idx;
  d2.A = d1.A;
  d2.D = d1.D;
  d2.dtBias = d1.dtBias;
  const size_t H = c.heads, P = c.headDim, N = c.stateSize, G = c.groups, T = c.tokens;
  const size_t slotElems = H * P * N, se = dtypeSize(c.stateDtype), ae = dtypeSize(c.dtype);
  const size_t outBytes = c.batch * T * H * P * ae, stateBytes = c.slots * slotElems * se;
  StepInputs in1(d1), in2(d2);
  auto state = upload(d1.state), rewind = upload(d1.state);
  // Poisoned (NaN) replay buffers: a read of anything not kept poisons the state.
  auto rx = poisoned(c.slots * 2 * T * H * P * ae), rb = poisoned(c.slots * 2 * T * G * N * ae),
       rdt = poisoned(c.slots * 2 * H * T * 4);
  auto inter = poisoned(c.slots * T * slotElems * se);

  auto replayStep = [&](const StepInputs &in, const std::vector<int32_t> &pairs, int commit,
                        int tokens, void *stateBuf, void *out) {
    auto dPairs = upload(pairs);
    kiln_ssm_update_replay_params_t p{};
    fillStep(p, c, in, stateBuf, out);
    p.replay = dPairs->as<int32_t>();
    p.replay_x = rx->ptr;
    p.replay_B = rb->ptr;
    p.replay_dt = rdt->as<float>();
    p.max_tokens = static_cast<int32_t>(T);
    p.commit = commit;
    p.num_tokens = tokens;
    KILN_OK_(kiln_ssm_update_replay(&p));
    CUDA_OK(cudaDeviceSynchronize());
  };
  auto specStep = [&](const StepInputs &in, void *out) {
    kiln_ssm_update_spec_params_t p{};
    fillStep(p, c, in, rewind->ptr, out);
    p.intermediate = inter->ptr;
    KILN_OK_(kiln_ssm_update_spec(&p));
    CUDA_OK(cudaDeviceSynchronize());
  };
  auto pairsOf = [&](auto pending, int buffer) {
    std::vector<int32_t> v;
    for (int b = 0; b < c.batch; ++b) {
      v.push_back(pending(b));
      v.push_back(buffer);
    }
    return v;
  };
  // The rewind commit: each live sequence's state becomes its intermediate k - 1.
  auto commitRewind = [&](auto accepted) {
    for (int b = 0; b < c.batch; ++b)
      if (const int slot = d1.slotOf(b); slot >= 0)
        CUDA_OK(cudaMemcpy(rewind->as<char>() + slot * slotElems * se,
                           inter->as<char>() + (slot * T + accepted(b) - 1) * slotElems * se,
                           slotElems * se, cudaMemcpyDeviceToDevice));
  };
  auto expectSame = [&](const DeviceBuffer &a, const DeviceBuffer &b, size_t bytes,
                        const char *what) {
    std::vector<uint8_t> ha(bytes), hb(bytes);
    cudaMemcpy(ha.data(), a.ptr, bytes, cudaMemcpyDeviceToHost);
    cudaMemcpy(hb.data(), b.ptr, bytes, cudaMemcpyDeviceToHost);
    EXPECT_EQ(std::memcmp(ha.data(), hb.data(), bytes), 0) << what;
  };
  auto expectLiveSlotsSame = [&](const DeviceBuffer &a, const DeviceBuffer &b,
                                 const char *what) {
    std::vector<uint8_t> ha(stateBytes), hb(stateBytes);
    cudaMemcpy(ha.data(), a.ptr, stateBytes, cudaMemcpyDeviceToHost);
    cudaMemcpy(hb.data(), b.ptr, stateBytes, cudaMemcpyDeviceToHost);
    for (int b = 0; b < c.batch; ++b)
      if (const int slot = d1.slotOf(b); slot >= 0)
        EXPECT_EQ(std::memcmp(&ha[slot * slotElems * se], &hb[slot * slotElems * se],
                              slotElems * se), 0)
            << what << ": sequence " << b << " (slot " << slot << ")";
  };
  auto first = [&](int b) { return 1 + b % static_cast<int>(T); };
  auto second = [&](int b) { return static_cast<int>(T) - b % static_cast<int>(T); };

  // Step 1.
  auto out1 = poisoned(outBytes), ref1 = poisoned(outBytes);
  replayStep(in1, pairsOf([](int) { return 0; }, 0), 0, static_cast<int>(T), state->ptr,
             out1->ptr);
  specStep(in1, ref1->ptr);
  expectSame(*out1, *ref1, outBytes, "step 1 outputs");
  auto initial = upload(d1.state);
  expectSame(*state, *initial, stateBytes, "a speculative step without pending tokens "
                                           "modified the state");
  // Step 2.
  auto out2 = poisoned(outBytes), ref2 = poisoned(outBytes);
  commitRewind(first);
  auto beforeStep2 = std::make_unique<DeviceBuffer>(stateBytes);
  CUDA_OK(cudaMemcpy(beforeStep2->ptr, state->ptr, stateBytes, cudaMemcpyDeviceToDevice));
  replayStep(in2, pairsOf(first, 1), 0, static_cast<int>(T), state->ptr, out2->ptr);
  expectLiveSlotsSame(*state, *rewind, "step 2's folded state");
  specStep(in2, ref2->ptr);
  expectSame(*out2, *ref2, outBytes, "step 2 outputs");
  replayStep(in2, pairsOf(first, 1), 1, 0, beforeStep2->ptr, nullptr);
  expectLiveSlotsSame(*beforeStep2, *rewind, "the fold alone");
  // Step 3: committing, step 1's inputs again.
  auto out3 = poisoned(outBytes), ref3 = poisoned(outBytes);
  commitRewind(second);
  replayStep(in1, pairsOf(second, 0), 1, static_cast<int>(T), state->ptr, out3->ptr);
  specStep(in1, ref3->ptr);
  commitRewind([&](int) { return static_cast<int>(T); });
  expectLiveSlotsSame(*state, *rewind, "step 3's committed state");
  expectSame(*out3, *ref3, outBytes, "step 3 outputs");
}

const kiln_dtype_t F32 = KILN_DTYPE_F32, BF16 = KILN_DTYPE_BF16, F16 = KILN_DTYPE_F16;

TEST(MambaGpu, SsmUpdate) {
  KILN_REQUIRE_GPU();
  const SsmCase cases[] = {
      // state act  B  slots H  P   N   G  T  z     D     bias  sp   pad null
      {F32, BF16, 7, 11, 8, 64, 128, 2, 1, true, true, true, true, 3, false},
      {F32, BF16, 5, 9, 4, 80, 128, 4, 1, false, false, false, false, 2, false},
      {F32, F16, 6, 6, 4, 64, 64, 1, 1, true, true, false, true, 0, true},
      {F32, BF16, 3, 5, 2, 40, 256, 2, 1, true, false, true, true, 0, false},
      {BF16, BF16, 7, 11, 8, 64, 128, 2, 1, true, true, true, true, 3, false},
      {BF16, F16, 4, 8, 6, 24, 64, 3, 1, false, true, true, false, 4, false},
      {BF16, BF16, 3, 4, 2, 72, 256, 1, 1, true, true, true, true, 0, false},
      {F32, BF16, 1, 3, 16, 64, 128, 8, 1, true, true, true, true, 0, false},
      {F32, BF16, 6, 8, 8, 32, 64, 2, 1, false, true, true, true, 0, false, true},
  };
  uint64_t seed = 1;
  for (const SsmCase &c : cases)
    runSsmSingle(c, seed++);
}

TEST(MambaGpu, SsmUpdateSpec) {
  KILN_REQUIRE_GPU();
  const SsmCase cases[] = {
      {F32, BF16, 7, 11, 8, 64, 128, 2, 4, true, true, true, true, 3, false},
      {F32, F16, 5, 9, 4, 80, 64, 4, 2, false, false, false, false, 2, false},
      {F32, BF16, 3, 3, 2, 40, 256, 2, 3, true, true, true, true, 0, true},
      {BF16, BF16, 7, 11, 8, 64, 128, 2, 4, true, true, true, true, 3, false},
      {BF16, BF16, 4, 6, 4, 24, 256, 1, 1, false, true, false, true, 0, false},
      {BF16, F16, 3, 5, 6, 64, 64, 3, 5, true, false, true, false, 2, false},
      {F32, BF16, 4, 6, 8, 32, 64, 2, 5, false, true, true, true, 0, false, true},
  };
  uint64_t seed = 100;
  for (const SsmCase &c : cases)
    runSsmSpec(c, seed++);
}

TEST(MambaGpu, SsmUpdateReplayEqualsRewind) {
  KILN_REQUIRE_GPU();
  const SsmCase cases[] = {
      {F32, BF16, 7, 11, 8, 64, 128, 2, 4, false, true, true, true, 3, false, true},
      {F32, BF16, 5, 9, 4, 80, 64, 4, 3, true, true, true, true, 2, false},
      {BF16, BF16, 6, 8, 8, 64, 128, 2, 4, false, true, true, true, 0, false, true},
      {F32, F16, 3, 3, 6, 40, 256, 3, 2, false, false, true, true, 0, true},
      {F32, BF16, 4, 6, 16, 64, 128, 8, 1, false, true, true, true, 0, false, true},
  };
  uint64_t seed = 200;
  for (const SsmCase &c : cases)
    runSsmReplay(c, seed++);
}

// ---------------------------------------------------------------------------------------
struct ConvCase {
  kiln_dtype_t stateDtype, dtype;
  int batch, slots, convDim, width, tokens;
  bool bias, silu;
  int padEvery;
  bool nullIndices;
};

std::string name(const ConvCase &c) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "state=%d act=%d B=%d slots=%d dim=%d W=%d T=%d bias=%d silu=%d pad=%d null=%d",
                c.stateDtype, c.dtype, c.batch, c.slots, c.convDim, c.width, c.tokens, c.bias,
                c.silu, c.padEvery, c.nullIndices);
  return buf;
}

void runConv(const ConvCase &c, uint64_t seed, bool spec) {
  SCOPED_TRACE(name(c) + (spec ? " spec" : " single"));
  Rng rng(seed);
  const size_t Dm = c.convDim, K = c.width - 1, T = c.tokens;
  std::vector<int32_t> idx =
      c.nullIndices ? std::vector<int32_t>() : makeIndices(rng, c.batch, c.slots, c.padEvery);
  auto slotOf = [&](int b) { return c.nullIndices ? b : idx[b]; };
  HostTensor state(c.stateDtype, c.slots * Dm * K), x(c.dtype, c.batch * T * Dm),
      w(c.dtype, Dm * c.width), bias(c.dtype, Dm);
  rng.fill(state, -1.0, 1.0);
  rng.fill(x, -1.0, 1.0);
  rng.fill(w, -1.0, 1.0);
  rng.fill(bias, -0.5, 0.5);
  auto dState = upload(state), dIdx = upload(idx), dx = upload(x), dw = upload(w),
       dBias = upload(bias);
  const size_t ae = dtypeSize(c.dtype), se = dtypeSize(c.stateDtype);
  auto dOut = poisoned(c.batch * T * Dm * ae);
  auto dInter = poisoned(c.slots * T * Dm * K * se);

  if (spec) {
    kiln_conv_update_spec_params_t p{};
    p.state = dState->ptr;
    p.state_dtype = c.stateDtype;
    p.num_slots = c.slots;
    p.state_indices = c.nullIndices ? nullptr : dIdx->as<int32_t>();
    p.intermediate = dInter->ptr;
    p.batch = c.batch;
    p.num_tokens = c.tokens;
    p.conv_dim = c.convDim;
    p.width = c.width;
    p.dtype = c.dtype;
    p.x = dx->ptr;
    p.weight = dw->ptr;
    p.bias = c.bias ? dBias->ptr : nullptr;
    p.out = dOut->ptr;
    p.silu = c.silu;
    KILN_OK_(kiln_conv_update_spec(&p));
  } else {
    kiln_conv_update_params_t p{};
    p.state = dState->ptr;
    p.state_dtype = c.stateDtype;
    p.num_slots = c.slots;
    p.state_indices = c.nullIndices ? nullptr : dIdx->as<int32_t>();
    p.batch = c.batch;
    p.conv_dim = c.convDim;
    p.width = c.width;
    p.dtype = c.dtype;
    p.x = dx->ptr;
    p.weight = dw->ptr;
    p.bias = c.bias ? dBias->ptr : nullptr;
    p.out = dOut->ptr;
    p.silu = c.silu;
    KILN_OK_(kiln_conv_update(&p));
  }
  CUDA_OK(cudaDeviceSynchronize());
  HostTensor gotState(c.stateDtype, state.count), gotOut(c.dtype, c.batch * T * Dm),
      gotInter(c.stateDtype, c.slots * T * Dm * K);
  download(gotState, *dState);
  download(gotOut, *dOut);
  download(gotInter, *dInter);

  auto wd = w.toDouble(), bd = bias.toDouble();
  std::vector<bool> touched(c.slots, false);
  const double tol = c.dtype == KILN_DTYPE_BF16 ? 8e-3 : 2e-3;
  for (int b = 0; b < c.batch; ++b) {
    const int slot = slotOf(b);
    if (slot < 0) {
      EXPECT_TRUE(allPoison(gotOut, b * T * Dm, T * Dm)) << "padding sequence " << b;
      continue;
    }
    touched[slot] = true;
    std::vector<double> st(Dm * K);
    for (size_t i = 0; i < st.size(); ++i)
      st[i] = state.get(slot * Dm * K + i);
    for (size_t t = 0; t < T; ++t) {
      std::vector<double> xs(Dm), out(Dm);
      for (size_t i = 0; i < Dm; ++i)
        xs[i] = x.get((b * T + t) * Dm + i);
      convUpdateReference(c.convDim, c.width, st.data(), xs.data(), wd.data(),
                          c.bias ? bd.data() : nullptr, c.silu, out.data());
      Compare co{tol, rms(out)};
      for (size_t i = 0; i < Dm; ++i)
        co.check(gotOut.get((b * T + t) * Dm + i), out[i], "out", i);
      // The window holds input values only: exact in any state dtype.
      const HostTensor &g = spec ? gotInter : gotState;
      const size_t base = spec ? (slot * T + t) * Dm * K : slot * Dm * K;
      int bad = 0;
      for (size_t i = 0; i < Dm * K; ++i)
        bad += g.get(base + i) != st[i];
      ASSERT_EQ(co.failures + bad, 0) << "sequence " << b << " token " << t;
    }
  }
  for (int s = 0; s < c.slots; ++s) {
    if (spec) {
      if (!touched[s])
        EXPECT_TRUE(allPoison(gotInter, s * T * Dm * K, T * Dm * K)) << "slot " << s;
    } else if (!touched[s]) {
      EXPECT_TRUE(gotState.sameBytes(s * Dm * K, Dm * K, state)) << "slot " << s;
    }
  }
  if (spec)
    EXPECT_EQ(std::memcmp(gotState.bytes.data(), state.bytes.data(), state.bytes.size()), 0)
        << "spec kernel modified the main state";
}

TEST(MambaGpu, ConvUpdate) {
  KILN_REQUIRE_GPU();
  const ConvCase cases[] = {
      // state act   B  slots dim  W  T  bias  silu  pad null
      {BF16, BF16, 7, 11, 1040, 4, 1, true, true, 3, false},
      {F32, BF16, 5, 9, 264, 3, 1, false, true, 2, false},
      {F16, F16, 4, 4, 64, 2, 1, true, false, 0, true},
      {F32, F16, 3, 6, 2056, 4, 1, true, true, 0, false},
      {BF16, BF16, 2, 3, 8, 2, 1, false, false, 0, false},
  };
  uint64_t seed = 200;
  for (const ConvCase &c : cases)
    runConv(c, seed++, false);
}

TEST(MambaGpu, ConvUpdateSpec) {
  KILN_REQUIRE_GPU();
  const ConvCase cases[] = {
      {BF16, BF16, 7, 11, 1040, 4, 4, true, true, 3, false},
      {F32, BF16, 5, 9, 264, 3, 3, false, true, 2, false},
      {F16, F16, 4, 4, 64, 2, 2, true, false, 0, true},
      {BF16, BF16, 3, 5, 1024, 4, 6, false, true, 0, false},
  };
  uint64_t seed = 300;
  for (const ConvCase &c : cases)
    runConv(c, seed++, true);
}

// ---- prompt-wide kernels -----------------------------------------------------------

// Sequences of these lengths (crossing 16/32/64-token chunk edges) packed one after the
// other; a padding sequence (slot -1) among them must leave its rows and slot untouched.
struct ChunkCase {
  kiln_dtype_t state;
  int heads, headDim, stateSize, groups;
  std::vector<int> lengths;
};

// ssm_chunk_scan against ssm_update applied token by token (the path it replaces) on
// the same inputs and starting states (random: a prompt continuing a sequence): the
// outputs within bf16 rounding plus fp32 noise, the final states to fp32 tolerance; a
// prompt split over two calls continues from the first call's states.
void runChunkScan(const ChunkCase &c, uint64_t seed) {
  SCOPED_TRACE("heads " + std::to_string(c.heads) + " head_dim " + std::to_string(c.headDim) +
               " state " + std::to_string(c.stateSize) + " state dtype " +
               std::to_string(c.state));
  Rng rng(seed);
  const PackedPrompts pp = packPrompts(c.lengths, 1);
  const int T = pp.tokens(), H = c.heads, P = c.headDim, N = c.stateSize, G = c.groups;
  const int slots = pp.batch();
  HostTensor x(KILN_DTYPE_BF16, size_t(T) * H * P), dt(KILN_DTYPE_BF16, size_t(T) * H),
      B(KILN_DTYPE_BF16, size_t(T) * G * N), C(KILN_DTYPE_BF16, size_t(T) * G * N),
      state(c.state, size_t(slots) * H * P * N);
  rng.fill(x, -1, 1);
  rng.fill(dt, -3, 1);
  rng.fill(B, -1, 1);
  rng.fill(C, -1, 1);
  rng.fill(state, -0.5, 0.5);
  std::vector<float> aLog(H), D(H), dtBias(H);
  rng.fill(aLog, -1, 1.5);
  rng.fill(D, -1, 1);
  rng.fill(dtBias, -1, 1);
  auto dx = upload(x), ddt = upload(dt), dB = upload(B), dC = upload(C), dA = upload(aLog),
       dD = upload(D), dBias = upload(dtBias), dcu = upload(pp.cu), dslots = upload(pp.slots);
  // The outputs are compared with a token-by-token run over an f32 copy of the state: a
  // bf16 state is rounded after every token on that path but once per call in the chunk
  // scan (Mamba.h), and over a hundred slowly decaying tokens those roundings move y by a
  // few percent; against fp64 the chunk scan is the exact one (H100, 2026-12-05). The
  // state-dtype run still gives the final states.
  HostTensor state32(KILN_DTYPE_F32, state.count);
  for (size_t i = 0; i < state.count; ++i)
    state32.set(i, state.get(i));
  auto chunked = upload(state), sequential = upload(state), sequential32 = upload(state32);
  auto outChunked = poisoned(size_t(T) * H * P * 2), outSeq = poisoned(size_t(T) * H * P * 2),
       outSeqStateDtype = poisoned(size_t(T) * H * P * 2);
  kiln_ssm_chunk_scan_params_t p{};
  p.state = chunked->ptr;
  p.state_dtype = c.state;
  p.num_slots = slots;
  p.state_indices = dslots->as<int32_t>();
  p.cu_seqlens = dcu->as<int32_t>();
  p.batch = pp.batch();
  p.heads = H;
  p.head_dim = P;
  p.state_size = N;
  p.n_groups = G;
  p.dtype = KILN_DTYPE_BF16;
  p.x = dx->ptr;
  p.dt = ddt->ptr;
  p.B = dB->ptr;
  p.C = dC->ptr;
  p.A = dA->as<float>();
  p.D = dD->as<float>();
  p.dt_bias = dBias->as<float>();
  p.out = outChunked->ptr;
  p.dt_softplus = 1;
  p.a_is_log = 1;
  p.dt_min = 0.01f;
  p.dt_max = 2.0f;
  KILN_OK_(kiln_ssm_chunk_scan(&p));
  // The path it replaces: one ssm_update a token.
  auto tokenByToken = [&](void *states, kiln_dtype_t stateDtype, void *out) {
    for (int b = 0; b < pp.batch(); ++b) {
      if (pp.slots[b] < 0)
        continue;
      for (int t = pp.cu[b]; t < pp.cu[b + 1]; ++t) {
        kiln_ssm_update_params_t q{};
        q.state = static_cast<char *>(states) +
                  size_t(pp.slots[b]) * H * P * N * dtypeSize(stateDtype);
        q.state_dtype = stateDtype;
        q.num_slots = 1;
        q.batch = 1;
        q.heads = H;
        q.head_dim = P;
        q.state_size = N;
        q.n_groups = G;
        q.dtype = KILN_DTYPE_BF16;
        q.x = dx->as<uint16_t>() + size_t(t) * H * P;
        q.dt = ddt->as<uint16_t>() + size_t(t) * H;
        q.B = dB->as<uint16_t>() + size_t(t) * G * N;
        q.C = dC->as<uint16_t>() + size_t(t) * G * N;
        q.A = p.A;
        q.D = p.D;
        q.dt_bias = p.dt_bias;
        q.out = static_cast<uint16_t *>(out) + size_t(t) * H * P;
        q.dt_softplus = 1;
        q.a_is_log = 1;
        q.dt_min = p.dt_min;
        q.dt_max = p.dt_max;
        KILN_OK_(kiln_ssm_update(&q));
      }
    }
  };
  tokenByToken(sequential->ptr, c.state, outSeqStateDtype->ptr);
  tokenByToken(sequential32->ptr, KILN_DTYPE_F32, outSeq->ptr);
  CUDA_OK(cudaDeviceSynchronize());
  HostTensor gotOut(KILN_DTYPE_BF16, x.count), refOut(KILN_DTYPE_BF16, x.count),
      gotState(c.state, state.count), refState(c.state, state.count);
  download(gotOut, *outChunked);
  download(refOut, *outSeq);
  download(gotState, *chunked);
  download(refState, *sequential);
  // A bf16 state is rounded after every token on the sequential path and once here.
  const double stateTol = c.state == KILN_DTYPE_F32 ? 2e-4 : 3e-2;
  for (int b = 0; b < pp.batch(); ++b) {
    const size_t rows = size_t(pp.cu[b + 1] - pp.cu[b]) * H * P, first = size_t(pp.cu[b]) * H * P;
    if (pp.slots[b] < 0) {
      EXPECT_TRUE(allPoison(gotOut, first, rows)) << "padding sequence " << b << " written";
      continue;
    }
    int far = 0;
    for (size_t i = first; i < first + rows; ++i) {
      const double got = gotOut.get(i), ref = refOut.get(i);
      if (!(std::fabs(got - ref) <= 2e-2 * std::max(1.0, std::fabs(ref))))
        ++far;
    }
    EXPECT_EQ(far, 0) << "sequence " << b << ": outputs off the token-by-token path";
    const size_t slotFirst = size_t(pp.slots[b]) * H * P * N;
    double worst = 0;
    for (size_t i = slotFirst; i < slotFirst + size_t(H) * P * N; ++i)
      worst = std::max(worst, std::fabs(gotState.get(i) - refState.get(i)) /
                                  std::max(1.0, std::fabs(refState.get(i))));
    EXPECT_LE(worst, stateTol) << "sequence " << b << ": final state";
  }
  // The padding sequence's slot does not exist (-1): every real slot was compared above.
  // Two calls (the first 37 tokens of every sequence, then the rest) give the one call's
  // states: a prompt continuing a sequence.
  PackedPrompts head = pp, tail = pp;
  head.cu = {0};
  tail.cu = {0};
  std::vector<int32_t> headRows, tailRows;
  for (int b = 0; b < pp.batch(); ++b) {
    const int len = pp.cu[b + 1] - pp.cu[b], first = std::min(len, 37);
    head.cu.push_back(head.cu.back() + first);
    tail.cu.push_back(tail.cu.back() + len - first);
    for (int t = 0; t < len; ++t)
      (t < first ? headRows : tailRows).push_back(pp.cu[b] + t);
  }
  auto gather = [&](const HostTensor &src, size_t width, const std::vector<int32_t> &rows) {
    HostTensor out(src.dtype, rows.size() * width);
    for (size_t r = 0; r < rows.size(); ++r)
      std::memcpy(&out.bytes[r * width * 2], &src.bytes[size_t(rows[r]) * width * 2], width * 2);
    return out;
  };
  auto twice = upload(state);
  for (const auto *part : {&headRows, &tailRows}) {
    const PackedPrompts &pk = part == &headRows ? head : tail;
    auto px = upload(gather(x, size_t(H) * P, *part)), pdt = upload(gather(dt, H, *part)),
         pB = upload(gather(B, size_t(G) * N, *part)), pC = upload(gather(C, size_t(G) * N, *part)),
         pcu = upload(pk.cu);
    auto pout = poisoned(std::max<size_t>(1, part->size()) * H * P * 2);
    kiln_ssm_chunk_scan_params_t q = p;
    q.state = twice->ptr;
    q.cu_seqlens = pcu->as<int32_t>();
    q.x = px->ptr;
    q.dt = pdt->ptr;
    q.B = pB->ptr;
    q.C = pC->ptr;
    q.out = pout->ptr;
    KILN_OK_(kiln_ssm_chunk_scan(&q));
    CUDA_OK(cudaDeviceSynchronize());
  }
  HostTensor split(c.state, state.count);
  download(split, *twice);
  double worst = 0;
  for (size_t i = 0; i < state.count; ++i)
    worst = std::max(worst, std::fabs(split.get(i) - gotState.get(i)) /
                                std::max(1.0, std::fabs(gotState.get(i))));
  EXPECT_LE(worst, stateTol) << "two calls differ from one";
}

TEST(MambaGpu, SsmChunkScanMatchesTokenByToken) {
  KILN_REQUIRE_GPU();
  const ChunkCase cases[] = {
      {KILN_DTYPE_F32, 8, 32, 64, 2, {130, 5, 64, 1, 200}},
      {KILN_DTYPE_F32, 4, 80, 128, 1, {300, 17}},
      {KILN_DTYPE_BF16, 4, 64, 128, 2, {70, 3, 129}},
      // Nemotron-H's 64 x 128 (the tensor-core kernel in two 32-row slices) at the f32
      // state tolerance.
      {KILN_DTYPE_F32, 4, 64, 128, 2, {150, 9, 70}},
      {KILN_DTYPE_F32, 2, 64, 256, 2, {100, 40}},
  };
  uint64_t seed = 400;
  for (const ChunkCase &c : cases)
    runChunkScan(c, seed++);
}

// conv_prefill against conv_update applied token by token: outputs to one bf16 rounding
// (the fp32 sums are the same taps in the same order), windows bit-exact (they are
// copies of inputs), padding rows untouched; sequences shorter than the window shift
// the old window through.
TEST(MambaGpu, ConvPrefillMatchesTokenByToken) {
  KILN_REQUIRE_GPU();
  for (kiln_dtype_t stateDtype : {KILN_DTYPE_BF16, KILN_DTYPE_F32})
    for (int width : {2, 4}) {
      SCOPED_TRACE("state " + std::to_string(stateDtype) + " width " + std::to_string(width));
      Rng rng(500 + width);
      const PackedPrompts pp = packPrompts({9, 1, 2, 70, 5}, 2);
      const int T = pp.tokens(), Dc = 264, K = width - 1, slots = pp.batch();
      HostTensor x(KILN_DTYPE_BF16, size_t(T) * Dc), w(KILN_DTYPE_BF16, size_t(Dc) * width),
          bias(KILN_DTYPE_BF16, Dc), state(stateDtype, size_t(slots) * Dc * K);
      rng.fill(x, -1, 1);
      rng.fill(w, -1, 1);
      rng.fill(bias, -1, 1);
      rng.fill(state, -1, 1);
      auto dx = upload(x), dw = upload(w), dbias = upload(bias), dcu = upload(pp.cu),
           dslots = upload(pp.slots);
      auto parallel = upload(state), sequential = upload(state);
      auto outPar = poisoned(size_t(T) * Dc * 2), outSeq = poisoned(size_t(T) * Dc * 2);
      kiln_conv_prefill_params_t p{};
      p.state = parallel->ptr;
      p.state_dtype = stateDtype;
      p.num_slots = slots;
      p.state_indices = dslots->as<int32_t>();
      p.cu_seqlens = dcu->as<int32_t>();
      p.batch = pp.batch();
      p.conv_dim = Dc;
      p.width = width;
      p.max_tokens = T;
      p.dtype = KILN_DTYPE_BF16;
      p.x = dx->ptr;
      p.weight = dw->ptr;
      p.bias = dbias->ptr;
      p.out = outPar->ptr;
      p.silu = 1;
      KILN_OK_(kiln_conv_prefill(&p));
      for (int b = 0; b < pp.batch(); ++b) {
        if (pp.slots[b] < 0)
          continue;
        for (int t = pp.cu[b]; t < pp.cu[b + 1]; ++t) {
          kiln_conv_update_params_t q{};
          q.state = static_cast<char *>(sequential->ptr) +
                    size_t(pp.slots[b]) * Dc * K * dtypeSize(stateDtype);
          q.state_dtype = stateDtype;
          q.num_slots = 1;
          q.batch = 1;
          q.conv_dim = Dc;
          q.width = width;
          q.dtype = KILN_DTYPE_BF16;
          q.x = dx->as<uint16_t>() + size_t(t) * Dc;
          q.weight = dw->ptr;
          q.bias = dbias->ptr;
          q.out = outSeq->as<uint16_t>() + size_t(t) * Dc;
          q.silu = 1;
          KILN_OK_(kiln_conv_update(&q));
        }
      }
      CUDA_OK(cudaDeviceSynchronize());
      HostTensor gotOut(KILN_DTYPE_BF16, x.count), refOut(KILN_DTYPE_BF16, x.count),
          gotState(stateDtype, state.count), refState(stateDtype, state.count);
      download(gotOut, *outPar);
      download(refOut, *outSeq);
      download(gotState, *parallel);
      download(refState, *sequential);
      for (int b = 0; b < pp.batch(); ++b) {
        const size_t first = size_t(pp.cu[b]) * Dc, n = size_t(pp.cu[b + 1] - pp.cu[b]) * Dc;
        if (pp.slots[b] < 0) {
          EXPECT_TRUE(allPoison(gotOut, first, n)) << "padding sequence " << b << " written";
          continue;
        }
        int far = 0;
        for (size_t i = first; i < first + n; ++i)
          if (!(std::fabs(gotOut.get(i) - refOut.get(i)) <=
                1e-2 * std::max(1.0, std::fabs(refOut.get(i)))))
            ++far;
        EXPECT_EQ(far, 0) << "sequence " << b;
      }
      EXPECT_TRUE(gotState.sameBytes(0, state.count, refState)) << "windows differ";
    }
}

} // namespace
