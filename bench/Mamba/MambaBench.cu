// Benchmark of the Mamba2 decode kernels (ssm_update, ssm_update_spec, ssm_update_replay,
// conv_update, conv_update_spec) with Nemotron-H shapes, against the copy (read+write) bandwidth
// ceiling measured in the same run. Prints one line per case and writes JSON (argv[1])
// that peer_torch.py merges with its peers (ratios).
//
// Timing: CUDA graph of `launches` launches, each on a different part of a state pool
// (pool >= 1 GiB so state traffic never sits in the 60 MB L2), replayed after warm-up;
// per-launch time = median over replays / launches.
#include "BenchCheck.h"
#include "BenchDevice.cuh"
#include "kiln/Kernels/Mamba.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>


namespace {

using kiln::bench::copyKernel;

__global__ void fillKernel(float *p, size_t n, float scale, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] = scale * (kiln::bench::hashUnit(i, seed) - 0.5f);
}

void *alloc(size_t bytes, float scale = 1.0f, bool isFloat = false) {
  void *p;
  CHECK(cudaMalloc(&p, bytes));
  if (isFloat)
    fillKernel<<<1024, 256>>>(static_cast<float *>(p), bytes / 4, scale, (uint32_t)bytes);
  else
    CHECK(cudaMemset(p, 0x3c, bytes)); // bf16 0x3c3c ~ 0.0115
  return p;
}

template <typename F> double timeGraph(F &&enqueue, int launches, int replays = 30) {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int i = 0; i < launches; ++i) // warm-up, also checks the status
    enqueue(i, s);
  CHECK(cudaStreamSynchronize(s));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < launches; ++i)
    enqueue(i, s);
  CHECK(cudaStreamEndCapture(s, &g));
  CHECK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i)
    CHECK(cudaGraphLaunch(ge, s));
  std::vector<double> ms;
  for (int r = 0; r < replays; ++r) {
    CHECK(cudaEventRecord(a, s));
    CHECK(cudaGraphLaunch(ge, s));
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventSynchronize(b));
    float t;
    CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaStreamDestroy(s));
  return ms[ms.size() / 2] * 1e-3 / launches; // seconds per launch
}

struct Result {
  std::string kernel;
  int batch, tokens;
  double seconds, stateBytes, totalBytes;
};
std::vector<Result> results;
double ceilingTBps = 0.0;

void report(const Result &r) {
  const double st = r.stateBytes / r.seconds / 1e12, tot = r.totalBytes / r.seconds / 1e12;
  std::printf("%-18s B=%-4d T=%d  %9.2f us  state %5.2f TB/s  total %5.2f TB/s  %5.1f%% of ceiling\n",
              r.kernel.c_str(), r.batch, r.tokens, r.seconds * 1e6, st, tot,
              100.0 * tot / ceilingTBps);
  std::fflush(stdout);
  results.push_back(r);
}

// Pool of `groups` * batch slots; group i uses indices[i*batch .. (i+1)*batch) (a shuffled
// partition of the pool), so consecutive launches touch disjoint state.
int32_t *makeIndices(int batch, int groups) {
  std::vector<int32_t> idx(static_cast<size_t>(batch) * groups);
  std::iota(idx.begin(), idx.end(), 0);
  std::mt19937 rng(7);
  std::shuffle(idx.begin(), idx.end(), rng);
  int32_t *d;
  CHECK(cudaMalloc(&d, idx.size() * 4));
  CHECK(cudaMemcpy(d, idx.data(), idx.size() * 4, cudaMemcpyHostToDevice));
  return d;
}

const int H = 128, P = 64, N = 128, G = 8;

// The fields every SSM launcher's params share, for `batch` sequences of T tokens on
// the benchmark's buffers, launch i of the graph (its own part of the slot pool).
struct SsmBuffers {
  int32_t *idx;
  int slots;
  void *x, *z, *out, *dt, *B, *C;
  float *A, *D, *bias;
};
template <typename Params>
void fillSsm(Params &p, const SsmBuffers &b, int batch, int i, cudaStream_t s) {
  p.state_dtype = KILN_DTYPE_F32;
  p.num_slots = b.slots;
  p.state_indices = b.idx + size_t(i) * batch;
  p.batch = batch;
  p.heads = H;
  p.head_dim = P;
  p.state_size = N;
  p.n_groups = G;
  p.dtype = KILN_DTYPE_BF16;
  p.x = b.x;
  p.dt = b.dt;
  p.dt_bias = b.bias;
  p.A = b.A;
  p.B = b.B;
  p.C = b.C;
  p.D = b.D;
  p.z = b.z;
  p.out = b.out;
  p.dt_softplus = 1;
  p.stream = s;
}

void benchSsm(int batch, int T) {
  const bool spec = T > 1;
  const double slotBytes = double(H) * P * N * 4;
  const double perLaunch = batch * slotBytes * (spec ? 1 + T : 2);
  int groups = std::max(2, (int)std::ceil(2.0e9 / perLaunch));
  groups = std::min(groups, 256);
  const int slots = batch * groups;
  int32_t *idx = makeIndices(batch, groups);
  void *state = alloc(size_t(slots * slotBytes), 1.0f, true);
  void *inter = spec ? alloc(size_t(slots * slotBytes * T), 1.0f, true) : nullptr;
  void *x = alloc(size_t(batch) * T * H * P * 2), *z = alloc(size_t(batch) * T * H * P * 2);
  void *out = alloc(size_t(batch) * T * H * P * 2);
  void *dt = alloc(size_t(batch) * T * H * 2);
  void *B = alloc(size_t(batch) * T * G * N * 2), *C = alloc(size_t(batch) * T * G * N * 2);
  float *A = static_cast<float *>(alloc(H * 4));
  CHECK(cudaMemset(A, 0xbf, H * 4)); // -1.498f: A < 0
  float *D = static_cast<float *>(alloc(H * 4, 1.0f, true));
  float *bias = static_cast<float *>(alloc(H * 4, 1.0f, true));
  const double inputs = double(batch) * T * (3.0 * H * P * 2 + 2.0 * G * N * 2 + H * 2);
  const SsmBuffers buffers{idx, slots, x, z, out, dt, B, C, A, D, bias};
  double sec;
  if (!spec) {
    sec = timeGraph(
        [&](int i, cudaStream_t s) {
          kiln_ssm_update_params_t p{};
          fillSsm(p, buffers, batch, i, s);
          p.state = state;
          KCHECK(kiln_ssm_update(&p));
        },
        groups);
  } else {
    sec = timeGraph(
        [&](int i, cudaStream_t s) {
          kiln_ssm_update_spec_params_t p{};
          fillSsm(p, buffers, batch, i, s);
          p.state = state;
          p.intermediate = inter;
          p.num_tokens = T;
          KCHECK(kiln_ssm_update_spec(&p));
        },
        groups);
  }
  const double stateBytes = batch * slotBytes * (spec ? 1 + T : 2);
  report({spec ? "ssm_update_spec" : "ssm_update", batch, T, sec, stateBytes,
          stateBytes + inputs});
  for (void *p : {(void *)idx, state, inter, x, z, out, dt, B, C, (void *)A, (void *)D,
                  (void *)bias})
    if (p)
      CHECK(cudaFree(p));
}

// The rewind commit as a runtime at its best would do it: one launch copying each
// sequence's accepted intermediate (token k - 1) into its state.
__global__ void commitKernel(const float *__restrict__ inter, float *__restrict__ state,
                             const int32_t *__restrict__ idx, size_t slotFloats, int T, int k) {
  const int slot = idx[blockIdx.y];
  const uint4 *src = reinterpret_cast<const uint4 *>(inter + (size_t(slot) * T + k - 1) * slotFloats);
  uint4 *dst = reinterpret_cast<uint4 *>(state + size_t(slot) * slotFloats);
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < slotFloats / 4;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = src[i];
}

// One speculative SSM step of a batch in each mode (docs/replay.md), k = T - 1 of the
// last step's T tokens accepted:
//   rewind: ssm_update_spec (state read, T states written) + the commit of the accepted
//           state (read + write): (3 + T) state bytes a sequence;
//   replay: ssm_update_replay folding the k pending tokens, then keeping the T new
//           tokens' inputs: 2 state bytes a sequence plus the small replay buffers.
void benchReplayStep(int batch, int T) {
  const double slotBytes = double(H) * P * N * 4;
  const double rewindBytes = batch * slotBytes * (3 + T);
  int groups = std::min(256, std::max(2, (int)std::ceil(2.0e9 / rewindBytes)));
  const int slots = batch * groups;
  int32_t *idx = makeIndices(batch, groups);
  void *state = alloc(size_t(slots * slotBytes), 1.0f, true);
  void *inter = alloc(size_t(slots * slotBytes * T), 1.0f, true);
  void *x = alloc(size_t(batch) * T * H * P * 2), *out = alloc(size_t(batch) * T * H * P * 2);
  void *dt = alloc(size_t(batch) * T * H * 2);
  void *B = alloc(size_t(batch) * T * G * N * 2), *C = alloc(size_t(batch) * T * G * N * 2);
  float *A = static_cast<float *>(alloc(H * 4));
  CHECK(cudaMemset(A, 0xbf, H * 4));
  float *D = static_cast<float *>(alloc(H * 4, 1.0f, true));
  float *bias = static_cast<float *>(alloc(H * 4, 1.0f, true));
  void *rx = alloc(size_t(slots) * 2 * T * H * P * 2), *rb = alloc(size_t(slots) * 2 * T * G * N * 2);
  float *rdt = static_cast<float *>(alloc(size_t(slots) * 2 * H * T * 4, 0.1f, true));
  std::vector<int32_t> pairs;
  for (int b = 0; b < batch; ++b) {
    pairs.push_back(T - 1);
    pairs.push_back(0);
  }
  int32_t *dPairs;
  CHECK(cudaMalloc(&dPairs, pairs.size() * 4));
  CHECK(cudaMemcpy(dPairs, pairs.data(), pairs.size() * 4, cudaMemcpyHostToDevice));
  const SsmBuffers buffers{idx, slots, x, nullptr, out, dt, B, C, A, D, bias};
  const double rewind = timeGraph(
      [&](int i, cudaStream_t s) {
        kiln_ssm_update_spec_params_t p{};
        fillSsm(p, buffers, batch, i, s);
        p.num_tokens = T;
        p.state = state;
        p.intermediate = inter;
        KCHECK(kiln_ssm_update_spec(&p));
        commitKernel<<<dim3(16, batch), 256, 0, s>>>(
            static_cast<const float *>(inter), static_cast<float *>(state),
            idx + size_t(i) * batch, size_t(H) * P * N, T, T - 1);
      },
      groups);
  const double replay = timeGraph(
      [&](int i, cudaStream_t s) {
        kiln_ssm_update_replay_params_t p{};
        fillSsm(p, buffers, batch, i, s);
        p.num_tokens = T;
        p.state = state;
        p.replay = dPairs;
        p.replay_x = rx;
        p.replay_B = rb;
        p.replay_dt = rdt;
        p.max_tokens = T;
        KCHECK(kiln_ssm_update_replay(&p));
      },
      groups);
  const double inputs = double(batch) * T * (2.0 * H * P * 2 + 2.0 * G * N * 2 + H * 2);
  const double kept = double(batch) * T * (H * P * 2 + G * N * 2 + H * 4);
  report({"ssm_step_rewind", batch, T, rewind, batch * slotBytes * (3 + T),
          batch * slotBytes * (3 + T) + inputs});
  report({"ssm_step_replay", batch, T, replay, batch * slotBytes * 2,
          batch * slotBytes * 2 + inputs + 2 * kept});
  std::printf("replay step / rewind step at B=%d T=%d: %.2fx faster (predicted %.2fx from "
              "state bytes)\n", batch, T, rewind / replay, (3.0 + T) / 2.0);
  for (void *p : {(void *)idx, state, inter, x, out, dt, B, C, (void *)A, (void *)D,
                  (void *)bias, rx, rb, (void *)rdt, (void *)dPairs})
    CHECK(cudaFree(p));
}

void benchConv(int batch, int T) {
  const bool spec = T > 1;
  const int Dm = 10240, W = 4, K = W - 1;
  const double slotBytes = double(Dm) * K * 2;
  const double perLaunch = batch * slotBytes * (spec ? 1 + T : 2);
  int groups = std::min(256, std::max(2, (int)std::ceil(1.0e9 / perLaunch)));
  const int slots = batch * groups;
  int32_t *idx = makeIndices(batch, groups);
  void *state = alloc(size_t(slots * slotBytes));
  void *inter = spec ? alloc(size_t(slots * slotBytes * T)) : nullptr;
  void *x = alloc(size_t(batch) * T * Dm * 2), *out = alloc(size_t(batch) * T * Dm * 2);
  void *w = alloc(size_t(Dm) * W * 2), *bias = alloc(size_t(Dm) * 2);
  double sec = timeGraph(
      [&](int i, cudaStream_t s) {
        if (!spec) {
          kiln_conv_update_params_t p{};
          p.state = state;
          p.state_dtype = KILN_DTYPE_BF16;
          p.num_slots = slots;
          p.state_indices = idx + size_t(i) * batch;
          p.batch = batch;
          p.conv_dim = Dm;
          p.width = W;
          p.dtype = KILN_DTYPE_BF16;
          p.x = x;
          p.weight = w;
          p.bias = bias;
          p.out = out;
          p.silu = 1;
          p.stream = s;
          KCHECK(kiln_conv_update(&p));
        } else {
          kiln_conv_update_spec_params_t p{};
          p.state = state;
          p.state_dtype = KILN_DTYPE_BF16;
          p.num_slots = slots;
          p.state_indices = idx + size_t(i) * batch;
          p.intermediate = inter;
          p.batch = batch;
          p.num_tokens = T;
          p.conv_dim = Dm;
          p.width = W;
          p.dtype = KILN_DTYPE_BF16;
          p.x = x;
          p.weight = w;
          p.bias = bias;
          p.out = out;
          p.silu = 1;
          p.stream = s;
          KCHECK(kiln_conv_update_spec(&p));
        }
      },
      groups);
  const double stateBytes = batch * slotBytes * (spec ? 1 + T : 2);
  const double inputs = double(batch) * T * Dm * 2 * 2 + double(Dm) * (W + 1) * 2;
  report({spec ? "conv_update_spec" : "conv_update", batch, T, sec, stateBytes,
          stateBytes + inputs});
  for (void *p : {(void *)idx, state, inter, x, out, w, bias})
    if (p)
      CHECK(cudaFree(p));
}

// An fp32 FMA ceiling: every thread chains independent FMAs in registers.
__global__ void fmaKernel(float *out, int iters) {
  float a[8];
#pragma unroll
  for (int j = 0; j < 8; ++j)
    a[j] = threadIdx.x * 1e-3f + j;
  for (int i = 0; i < iters; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j)
      a[j] = fmaf(a[j], 0.9999f, 1e-4f);
  float sum = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j)
    sum += a[j];
  if (sum == 12345.0f)
    out[0] = sum;
}

double fmaCeilingTflops(const cudaDeviceProp &prop) {
  float *out;
  CHECK(cudaMalloc(&out, 4));
  const int blocks = prop.multiProcessorCount * 8, threads = 256, iters = 4096;
  const double sec = timeGraph(
      [&](int, cudaStream_t s) { fmaKernel<<<blocks, threads, 0, s>>>(out, iters); }, 1, 10);
  CHECK(cudaFree(out));
  return 2.0 * blocks * threads * iters * 8 / sec / 1e12;
}

// Eager launches (what the runtime's sequential prefill does: no graph), seconds each.
template <typename F> double timeEager(F &&enqueue, int launches, int repeats = 3) {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int i = 0; i < std::min(launches, 64); ++i)
    enqueue(i, s);
  CHECK(cudaStreamSynchronize(s));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    CHECK(cudaEventRecord(a, s));
    for (int i = 0; i < launches; ++i)
      enqueue(i, s);
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventSynchronize(b));
    float t;
    CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  CHECK(cudaStreamDestroy(s));
  return ms[ms.size() / 2] * 1e-3;
}

// A prompt of T tokens through one Mamba2 layer's SSM (Nemotron-H 8B shapes): the SSD
// chunked scan in one launch against ssm_update once per token (the sequential
// prefill). FLOPs: the recurrence's 4 x head_dim x state_size a token and head (state
// update and output), the work any form must do.
// The fields the prompt benchmark's chunk scan and token-by-token update share: one
// sequence of the layer's shape, an f32 state, bf16 activations, softplus dt.
template <typename Params>
void promptLayer(Params &p, void *state, const float *A, const float *D, const float *bias,
                 cudaStream_t s) {
  p.state = state;
  p.state_dtype = KILN_DTYPE_F32;
  p.num_slots = 1;
  p.batch = 1;
  p.heads = H;
  p.head_dim = P;
  p.state_size = N;
  p.n_groups = G;
  p.dtype = KILN_DTYPE_BF16;
  p.dt_bias = bias;
  p.A = A;
  p.D = D;
  p.dt_softplus = 1;
  p.stream = s;
}

void benchPrefill(int T, double fmaTflops) {
  void *state = alloc(size_t(H) * P * N * 4, 0.1f, true);
  // x rows are H P + 4 elements apart in the second timing: rows that are not 16-byte
  // aligned send the call to the fp32 CUDA-core kernel (the tensor-core one copies
  // 16-byte pieces), the previous design measured in the same run.
  const int64_t oddStride = int64_t(H) * P + 4;
  void *x = alloc(size_t(T) * oddStride * 2), *out = alloc(size_t(T) * H * P * 2);
  void *dt = alloc(size_t(T) * H * 2);
  void *B = alloc(size_t(T) * G * N * 2), *C = alloc(size_t(T) * G * N * 2);
  float *A = static_cast<float *>(alloc(H * 4));
  CHECK(cudaMemset(A, 0xbf, H * 4));
  float *D = static_cast<float *>(alloc(H * 4, 1.0f, true));
  float *bias = static_cast<float *>(alloc(H * 4, 1.0f, true));
  int32_t cuHost[2] = {0, T}, *cu;
  CHECK(cudaMalloc(&cu, 8));
  CHECK(cudaMemcpy(cu, cuHost, 8, cudaMemcpyHostToDevice));
  const double flops = 4.0 * T * H * P * N;
  auto scan = [&](int64_t xStride) {
    return timeGraph(
        [&](int, cudaStream_t s) {
          kiln_ssm_chunk_scan_params_t p{};
          promptLayer(p, state, A, D, bias, s);
          p.x_stride_token = xStride;
          p.cu_seqlens = cu;
          p.x = x;
          p.dt = dt;
          p.B = B;
          p.C = C;
          p.out = out;
          KCHECK(kiln_ssm_chunk_scan(&p));
        },
        1, 10);
  };
  const double chunk = scan(0), chunkFp32 = scan(oddStride);
  const double sequential = timeEager(
      [&](int t, cudaStream_t s) {
        kiln_ssm_update_params_t p{};
        promptLayer(p, state, A, D, bias, s);
        p.x = static_cast<char *>(x) + size_t(t) * H * P * 2;
        p.dt = static_cast<char *>(dt) + size_t(t) * H * 2;
        p.B = static_cast<char *>(B) + size_t(t) * G * N * 2;
        p.C = static_cast<char *>(C) + size_t(t) * G * N * 2;
        p.out = static_cast<char *>(out) + size_t(t) * H * P * 2;
        KCHECK(kiln_ssm_update(&p));
      },
      T, 2);
  std::printf("ssm prefill T=%d (H %d P %d N %d): chunk_scan %.3f ms = %.2f nominal TFLOP/s "
              "(4 T H P N); the fp32 CUDA-core kernel %.3f ms (%.1f%% of the %.1f TFLOP/s "
              "fp32 FMA ceiling), tensor cores %.2fx it; token by token %.3f ms; %.1fx\n",
              T, H, P, N, chunk * 1e3, flops / chunk / 1e12, chunkFp32 * 1e3,
              100.0 * flops / chunkFp32 / 1e12 / fmaTflops, fmaTflops, chunkFp32 / chunk,
              sequential * 1e3, sequential / chunk);
  results.push_back({"ssm_chunk_scan", 1, T, chunk, flops, flops});
  results.push_back({"ssm_chunk_scan_fp32", 1, T, chunkFp32, flops, flops});
  results.push_back({"ssm_prefill_sequential", 1, T, sequential, flops, flops});
  for (void *p : {state, x, out, dt, B, C, (void *)A, (void *)D, (void *)bias, (void *)cu})
    CHECK(cudaFree(p));
}

// The results as JSON (peer_torch.py reads it).
void writeJson(const char *jsonPath, const cudaDeviceProp &prop) {
  FILE *f = std::fopen(jsonPath, "w");
  if (f) {
    std::fprintf(f, "{\"device\": \"%s\", \"ceiling_TBps\": %.4f, \"cases\": [\n", prop.name,
                 ceilingTBps);
    for (size_t i = 0; i < results.size(); ++i) {
      const Result &r = results[i];
      std::fprintf(f,
                   "  {\"kernel\": \"%s\", \"B\": %d, \"T\": %d, \"us\": %.4f, "
                   "\"state_bytes\": %.0f, \"total_bytes\": %.0f}%s\n",
                   r.kernel.c_str(), r.batch, r.tokens, r.seconds * 1e6, r.stateBytes,
                   r.totalBytes, i + 1 < results.size() ? "," : "");
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
}

} // namespace

int main(int argc, char **argv) {
  const char *jsonPath = argc > 1 ? argv[1] : "mamba_kiln.json";
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20);
  { // copy ceiling: 2 GiB read + 2 GiB written
    const size_t bytes = size_t(2) << 30, n = bytes / 16;
    void *src = alloc(bytes), *dst = alloc(bytes);
    double best = 0.0;
    for (int blocks : {prop.multiProcessorCount * 4, prop.multiProcessorCount * 8,
                       prop.multiProcessorCount * 16}) {
      double sec = timeGraph(
          [&](int, cudaStream_t s) {
            copyKernel<<<blocks, 512, 0, s>>>(static_cast<uint4 *>(src),
                                              static_cast<uint4 *>(dst), n);
          },
          1, 20);
      best = std::max(best, 2.0 * bytes / sec / 1e12);
    }
    ceilingTBps = best;
    std::printf("copy ceiling (read+write, 2 GiB each way): %.2f TB/s\n", ceilingTBps);
    CHECK(cudaFree(src));
    CHECK(cudaFree(dst));
  }
  const char *only = std::getenv("KILN_BENCH_ONLY"); // "ssm" to skip the conv cases,
                                                     // "prefill" for the prompt cases only
  if (!only || std::string(only) == "prefill") {
    const double fma = fmaCeilingTflops(prop);
    for (int T : {1024, 8192})
      benchPrefill(T, fma);
    if (only) {
      writeJson(jsonPath, prop);
      return 0;
    }
  }
  for (int b : {1, 64, 256})
    benchSsm(b, 1);
  for (int b : {64, 256})
    benchSsm(b, 4);
  // Replay vs rewind, one speculative step with 3 drafts (issue 14's target: >= 1.2x at
  // batch 128).
  for (int b : {32, 128})
    benchReplayStep(b, 4);
  if (!only || std::string(only) != "ssm") {
    for (int b : {64, 512})
      benchConv(b, 1);
    for (int b : {64, 512})
      benchConv(b, 4);
  }
  writeJson(jsonPath, prop);
  return 0;
}
