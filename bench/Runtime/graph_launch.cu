// Host cost of launching a CUDA graph of a decode step's shape: N small kernels in a
// straight line (a Llama-8B step is ~450), with kernel parameters of the sizes Kiln's
// launches carry (most under 128 bytes; rope's frequency table makes 1 KiB).
//
// Three ways to launch the same graph, timed on the host around the launch call alone
// (the stream is drained before each, so no launch waits on a full queue), and on the
// GPU with events:
//   host     cudaGraphLaunch of the instantiated graph (what kiln_rt_forward does now);
//   device   the graph instantiated for device launch; the host launches a one-node
//            graph whose kernel tail-launches it (cudaStreamGraphTailLaunch), so the
//            host cost is that of one node whatever N is. Each kernel bumps a counter and
//            a copy queued after the launch reads it: "ordered" says whether the stream
//            waited for the tail-launched graph.
// PyTorch's torch.cuda.CUDAGraph replay of N small ops is the peer (graph_launch_peer.py).
//
// Then the node kinds a Kiln decode step holds besides plain kernels, each as a chain of
// N nodes of that kind alone (host launch only), to find which makes a real step's graph
// launch cost 5-20 µs when a plain one of its size costs 2-4 (docs/performance.md, "Host
// time of a decode step"): kernels launched with a cluster dimension (cuBLASLt's sm_90
// GEMMs), with programmatic dependent launch, 32 distinct kernel functions in turn, and
// cuBLASLt bf16 GEMMs of a decode step's shape (m = 1, n = k = 4096).
//
// Build: nvcc -O2 -arch=sm_90a -rdc=true graph_launch.cu -lcudadevrt -lcublasLt -o graph_launch
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#define CHECK(expr)                                                                        \
  do {                                                                                     \
    cudaError_t e_ = (expr);                                                               \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr,                   \
                   cudaGetErrorString(e_));                                                \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

template <int Bytes> struct Params {
  unsigned char payload[Bytes];
};

template <int Bytes>
__global__ void bump(unsigned long long *counter, Params<Bytes> params) {
  if (threadIdx.x == 0 && blockIdx.x == 0)
    atomicAdd(counter, 1ull + (params.payload[0] & 0));
}

// One of 32 distinct functions (a decode step runs ~15 distinct kernels a layer).
template <int Id> __global__ void distinct(unsigned long long *counter) {
  if (threadIdx.x == 0 && blockIdx.x == 0)
    atomicAdd(counter, 1ull + Id * 0ull);
}

__global__ void tailLaunch(cudaGraphExec_t graph) {
  if (threadIdx.x == 0)
    cudaGraphLaunch(graph, cudaStreamGraphTailLaunch);
}

using Clock = std::chrono::steady_clock;

double micros(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

template <int Bytes>
cudaGraph_t captureChain(cudaStream_t stream, unsigned long long *counter, int kernels) {
  Params<Bytes> params{};
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kernels; ++i)
    bump<Bytes><<<1, 32, 0, stream>>>(counter, params);
  CHECK(cudaStreamEndCapture(stream, &graph));
  return graph;
}

struct Timing {
  double hostMicros = 0, gpuMicros = 0;
  bool ordered = true;
};

// Times `launch` (which enqueues one graph run on `stream`) `iterations` times.
template <typename Launch>
Timing timeLaunches(cudaStream_t stream, unsigned long long *counter,
                    unsigned long long *hostCounter, int kernels, int iterations,
                    Launch launch) {
  cudaEvent_t begin, end;
  CHECK(cudaEventCreate(&begin));
  CHECK(cudaEventCreate(&end));
  Timing t;
  double host = 0, gpu = 0;
  for (int i = 0; i < iterations + 3; ++i) {
    CHECK(cudaMemsetAsync(counter, 0, sizeof(*counter), stream));
    CHECK(cudaStreamSynchronize(stream));
    CHECK(cudaEventRecord(begin, stream));
    const auto a = Clock::now();
    launch();
    const auto b = Clock::now();
    CHECK(cudaEventRecord(end, stream));
    CHECK(cudaMemcpyAsync(hostCounter, counter, sizeof(*counter), cudaMemcpyDeviceToHost,
                          stream));
    CHECK(cudaStreamSynchronize(stream));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, begin, end));
    if (*hostCounter != static_cast<unsigned long long>(kernels))
      t.ordered = false;
    if (i >= 3) { // warm-up runs excluded
      host += micros(a, b);
      gpu += 1000.0 * ms;
    }
  }
  t.hostMicros = host / iterations;
  t.gpuMicros = gpu / iterations;
  CHECK(cudaEventDestroy(begin));
  CHECK(cudaEventDestroy(end));
  return t;
}

template <int Bytes>
void run(cudaStream_t stream, unsigned long long *counter, unsigned long long *hostCounter,
         int kernels) {
  const int iterations = 50;
  cudaGraph_t graph = captureChain<Bytes>(stream, counter, kernels);

  cudaGraphExec_t hostExec = nullptr;
  CHECK(cudaGraphInstantiate(&hostExec, graph, 0));
  CHECK(cudaGraphUpload(hostExec, stream));
  Timing host = timeLaunches(stream, counter, hostCounter, kernels, iterations,
                             [&] { CHECK(cudaGraphLaunch(hostExec, stream)); });

  // Device launch: the chain instantiated for it, and a one-node host graph around the
  // kernel that tail-launches it.
  cudaGraphExec_t deviceExec = nullptr;
  Timing device;
  bool deviceOk = cudaGraphInstantiate(&deviceExec, graph,
                                       cudaGraphInstantiateFlagDeviceLaunch) == cudaSuccess;
  cudaGraphExec_t launcherExec = nullptr;
  if (deviceOk) {
    CHECK(cudaGraphUpload(deviceExec, stream));
    cudaGraph_t launcher = nullptr;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    tailLaunch<<<1, 1, 0, stream>>>(deviceExec);
    CHECK(cudaStreamEndCapture(stream, &launcher));
    CHECK(cudaGraphInstantiate(&launcherExec, launcher, 0));
    CHECK(cudaGraphUpload(launcherExec, stream));
    CHECK(cudaGraphDestroy(launcher));
    device = timeLaunches(stream, counter, hostCounter, kernels, iterations,
                          [&] { CHECK(cudaGraphLaunch(launcherExec, stream)); });
  } else {
    cudaGetLastError();
  }
  char devHost[32] = "refused", devGpu[32] = "-";
  if (deviceOk) {
    std::snprintf(devHost, sizeof(devHost), "%.2f", device.hostMicros);
    std::snprintf(devGpu, sizeof(devGpu), "%.2f", device.gpuMicros);
  }
  std::printf("%8d %8d %12.2f %12.2f %14s %14s %8s\n", kernels, Bytes, host.hostMicros,
              host.gpuMicros, devHost, devGpu,
              deviceOk ? (device.ordered ? "yes" : "NO") : "-");
  if (!host.ordered)
    std::printf("  host launch: the copy after the graph saw an unfinished counter\n");
  if (launcherExec)
    CHECK(cudaGraphExecDestroy(launcherExec));
  if (deviceExec)
    CHECK(cudaGraphExecDestroy(deviceExec));
  CHECK(cudaGraphExecDestroy(hostExec));
  CHECK(cudaGraphDestroy(graph));
}

// ---- node kinds -------------------------------------------------------------------

#define CHECK_LT(expr)                                                                     \
  do {                                                                                     \
    cublasStatus_t s_ = (expr);                                                            \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                     \
      std::fprintf(stderr, "%s:%d: %s: status %d\n", __FILE__, __LINE__, #expr,             \
                   static_cast<int>(s_));                                                  \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

using KernelFn = void (*)(unsigned long long *);

template <int... Ids> void distinctTable(KernelFn *out, std::integer_sequence<int, Ids...>) {
  ((out[Ids] = distinct<Ids>), ...);
}

// Launches `kernel` with the attributes of one node kind.
void launchWith(cudaStream_t stream, KernelFn kernel, unsigned long long *counter,
                bool cluster, bool pdl) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(cluster ? 2 : 1);
  config.blockDim = dim3(32);
  config.stream = stream;
  cudaLaunchAttribute attributes[2];
  unsigned count = 0;
  if (cluster) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count].val.clusterDim.x = 2;
    attributes[count].val.clusterDim.y = 1;
    attributes[count].val.clusterDim.z = 1;
    ++count;
  }
  if (pdl) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  config.attrs = attributes;
  config.numAttrs = count;
  CHECK(cudaLaunchKernelEx(&config, kernel, counter));
}

// A bf16 GEMM of a decode step's shape, y[1, n] = x[1, k] W[n, k]^T, with the heuristic's
// first algorithm; its workspace is preallocated, as Kiln's is.
struct Gemm {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  void *w = nullptr, *x = nullptr, *y = nullptr, *workspace = nullptr;
  size_t workspaceBytes = 32u << 20;
  int n = 4096, k = 4096;

  Gemm() {
    CHECK_LT(cublasLtCreate(&handle));
    CHECK(cudaMalloc(&w, size_t(n) * k * 2));
    CHECK(cudaMalloc(&x, size_t(k) * 2));
    CHECK(cudaMalloc(&y, size_t(n) * 2));
    CHECK(cudaMalloc(&workspace, workspaceBytes));
    CHECK_LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t transpose = CUBLAS_OP_T;
    CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose,
                                            sizeof(transpose)));
    // Column-major: C[n, 1] = W^T[n, k] x[k, 1], W stored [k, n] column-major = [n, k] rows.
    CHECK_LT(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, k, n, k));
    CHECK_LT(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, k, 1, k));
    CHECK_LT(cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, n, 1, n));
    cublasLtMatmulPreference_t preference = nullptr;
    CHECK_LT(cublasLtMatmulPreferenceCreate(&preference));
    CHECK_LT(cublasLtMatmulPreferenceSetAttribute(preference,
                                                  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &workspaceBytes, sizeof(workspaceBytes)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    CHECK_LT(cublasLtMatmulAlgoGetHeuristic(handle, op, a, b, c, c, preference, 1, &result,
                                            &found));
    if (found < 1) {
      std::fprintf(stderr, "cuBLASLt found no algorithm\n");
      std::exit(1);
    }
    algo = result.algo;
    CHECK_LT(cublasLtMatmulPreferenceDestroy(preference));
  }
  void launch(cudaStream_t stream) {
    const float one = 1.0f, zero = 0.0f;
    CHECK_LT(cublasLtMatmul(handle, op, &one, w, a, x, b, &zero, y, c, y, c, &algo, workspace,
                            workspaceBytes, stream));
  }
  ~Gemm() {
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(c);
    cublasLtMatmulDescDestroy(op);
    cublasLtDestroy(handle);
    cudaFree(w);
    cudaFree(x);
    cudaFree(y);
    cudaFree(workspace);
  }
};

// Keeps one SM busy for about `nanos` of GPU time (a decode step's kernels before the
// host's next launch).
__global__ void spinFor(unsigned long long nanos) {
  unsigned long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < nanos);
}

// Host µs of one cudaGraphLaunch of the graph `enqueue` captures, the stream drained;
// with `busyMicros`, the stream first ran a kernel of that length and the host waited
// for it in cudaStreamSynchronize, as kiln-run waits for each step's tokens.
template <typename Enqueue>
double hostLaunchMicros(cudaStream_t stream, Enqueue enqueue, double busyMicros = 0) {
  enqueue(); // outside capture first: module loading, cuBLASLt's lazy setup
  CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  enqueue();
  CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphUpload(exec, stream));
  const int iterations = 50;
  double total = 0;
  for (int i = 0; i < iterations + 3; ++i) {
    if (busyMicros > 0)
      spinFor<<<1, 1, 0, stream>>>(static_cast<unsigned long long>(busyMicros * 1e3));
    CHECK(cudaStreamSynchronize(stream));
    const auto a = Clock::now();
    CHECK(cudaGraphLaunch(exec, stream));
    const auto b = Clock::now();
    if (i >= 3)
      total += micros(a, b);
  }
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  return total / iterations;
}

void runNodeKinds(cudaStream_t stream, unsigned long long *counter) {
  KernelFn functions[32];
  distinctTable(functions, std::make_integer_sequence<int, 32>{});
  Gemm gemm;
  std::printf("\nhost µs of one cudaGraphLaunch, a chain of N nodes of one kind\n");
  std::printf("%8s %10s %10s %10s %12s %10s\n", "nodes", "plain", "cluster", "pdl",
              "distinct32", "cublasLt");
  for (int nodes : {64, 256, 512}) {
    auto chain = [&](bool cluster, bool pdl, bool distinctFns) {
      return hostLaunchMicros(stream, [&] {
        for (int i = 0; i < nodes; ++i)
          launchWith(stream, distinctFns ? functions[i % 32] : functions[0], counter, cluster,
                     pdl);
      });
    };
    const double plain = chain(false, false, false);
    const double cluster = chain(true, false, false);
    const double pdl = chain(false, true, false);
    const double many = chain(false, false, true);
    const double gemms = hostLaunchMicros(stream, [&] {
      for (int i = 0; i < nodes; ++i)
        gemm.launch(stream);
    });
    std::printf("%8d %10.2f %10.2f %10.2f %12.2f %10.2f\n", nodes, plain, cluster, pdl, many,
                gemms);
  }
}

// Whether a launch costs more after the host waited for a long step: a 512-node chain
// (a decode step's size) launched after the GPU ran 0 µs to 5 ms.
void runAfterBusy(cudaStream_t stream, unsigned long long *counter) {
  KernelFn functions[32];
  distinctTable(functions, std::make_integer_sequence<int, 32>{});
  std::printf("\nhost µs of one cudaGraphLaunch of 512 plain nodes, after the host waited "
              "for a kernel of T µs\n");
  std::printf("%10s %10s\n", "T us", "launch us");
  for (double busy : {0.0, 100.0, 1000.0, 5000.0})
    std::printf("%10.0f %10.2f\n", busy, hostLaunchMicros(stream, [&] {
                  for (int i = 0; i < 512; ++i)
                    launchWith(stream, functions[0], counter, false, false);
                }, busy));
}

int main() {
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s; graph of N one-block kernels in a straight line\n", prop.name);
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  unsigned long long *counter = nullptr, *hostCounter = nullptr;
  CHECK(cudaMalloc(&counter, sizeof(*counter)));
  CHECK(cudaMallocHost(&hostCounter, sizeof(*hostCounter)));
  std::printf("%8s %8s %12s %12s %14s %14s %8s\n", "kernels", "params", "host us",
              "gpu us", "dev-launch us", "dev gpu us", "ordered");
  for (int kernels : {16, 64, 256, 512, 1024}) {
    run<64>(stream, counter, hostCounter, kernels);
    run<1024>(stream, counter, hostCounter, kernels);
  }
  runNodeKinds(stream, counter);
  runAfterBusy(stream, counter);
  CHECK(cudaFree(counter));
  CHECK(cudaFreeHost(hostCounter));
  return 0;
}
