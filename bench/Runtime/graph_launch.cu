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
// Build: nvcc -O2 -arch=sm_90a -rdc=true graph_launch.cu -lcudadevrt -o graph_launch
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
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
  CHECK(cudaFree(counter));
  CHECK(cudaFreeHost(hostCounter));
  return 0;
}
