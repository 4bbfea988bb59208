#include "ProgrammaticLaunch.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace kiln::kernels {

cudaError_t launchMaybeProgrammatic(const void *fn, dim3 grid, dim3 block, void **argv,
                                    size_t smem, cudaStream_t stream, bool programmatic) {
  // The legacy default stream's ordering with programmatic launches is not documented:
  // plain launches there.
  if (!programmatic || stream == nullptr || stream == cudaStreamLegacy)
    return cudaLaunchKernel(fn, grid, block, argv, smem, stream);
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  const cudaError_t error = cudaLaunchKernelExC(&config, fn, argv);
  if (error != cudaErrorNotSupported && error != cudaErrorInvalidValue)
    return error;
  cudaGetLastError();
  return cudaLaunchKernel(fn, grid, block, argv, smem, stream);
}

bool imageWaits(const void *kernel) {
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, kernel) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  // Both: an image JIT-compiled onto sm_90 from older PTX reports binaryVersion 90 but
  // has no griddepcontrol.wait.
  return attributes.ptxVersion >= 90 && attributes.binaryVersion >= 90;
}

namespace {
// What decides for every stream: kUnread until KILN_PDL is read, then kByStream (unset or
// neither "0" nor "1"), 0 or 1; setChainSmallKernels after.
constexpr int kUnread = -2, kByStream = -1;
std::atomic<int> override{kUnread};

int overrideState() {
  int state = override.load(std::memory_order_relaxed);
  if (state == kUnread) {
    const char *v = std::getenv("KILN_PDL");
    const int fromEnv = v && std::strcmp(v, "1") == 0   ? 1
                        : v && std::strcmp(v, "0") == 0 ? 0
                                                        : kByStream;
    override.compare_exchange_strong(state, fromEnv, std::memory_order_relaxed);
    state = override.load(std::memory_order_relaxed);
  }
  return state;
}

// The marked streams: a slot each, null where free. Launches read them without a lock
// (scanning up to the highest slot ever used, a context's stream or two in practice);
// marking takes the lock.
std::array<std::atomic<cudaStream_t>, kMaxChainedStreams> marked{};
std::atomic<int> slotsUsed{0};
std::mutex marking;
} // namespace

bool chainSmallKernels(cudaStream_t stream) {
  const int state = overrideState();
  if (state != kByStream)
    return state == 1;
  if (!stream) // the legacy default stream, never marked
    return false;
  const int used = slotsUsed.load(std::memory_order_acquire);
  for (int i = 0; i < used; ++i)
    if (marked[i].load(std::memory_order_relaxed) == stream)
      return true;
  return false;
}

std::optional<bool> chainSmallKernelsEverywhere() {
  const int state = overrideState();
  return state == kByStream ? std::nullopt : std::optional<bool>(state == 1);
}

void setChainSmallKernels(std::optional<bool> everywhere) {
  override.store(everywhere ? (*everywhere ? 1 : 0) : kByStream, std::memory_order_relaxed);
}

bool markStreamChained(cudaStream_t stream, bool chain) {
  if (!stream || stream == cudaStreamLegacy)
    return !chain;
  std::lock_guard<std::mutex> lock(marking);
  const int used = slotsUsed.load(std::memory_order_relaxed);
  int free = -1;
  for (int i = 0; i < used; ++i) {
    const cudaStream_t s = marked[i].load(std::memory_order_relaxed);
    if (s == stream) {
      if (!chain)
        marked[i].store(nullptr, std::memory_order_relaxed);
      return true;
    }
    if (!s && free < 0)
      free = i;
  }
  if (!chain)
    return true;
  if (free < 0) {
    if (used == kMaxChainedStreams)
      return false;
    free = used;
  }
  marked[free].store(stream, std::memory_order_relaxed);
  if (free == used)
    slotsUsed.store(used + 1, std::memory_order_release);
  return true;
}

} // namespace kiln::kernels
