// Launches GroupedGemmSm90.cuh's kernel (its TMA ring, with the tensor maps encoded
// here per call): one persistent CTA per SM. The kernel body is
// compiled for sm_90a only (wgmma); groupedGemmDeviceReady() tells the MoE launcher
// whether this device runs that image, else it keeps the cuBLASLt GEMM.
#include "GroupedGemmSm90.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>

namespace kiln::graph {
static_assert(grouped::kMaxTileTokens == kGroupedGemmMaxTileTokens &&
                  grouped::kFeatureTile == kGroupedGemmFeatureTile,
              "the library compiles the tiles GroupedGemm.h promises");
namespace {

// 1 in the image compiled with wgmma (sm_90a), 0 in the others: the image the device
// loaded says whether the kernel below has a body (sm_90 without "a" compiles it empty).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KILN_GROUPED_GEMM_HAS_WGMMA 1
__device__ int groupedGemmHasWgmma = 1;
#else
__device__ int groupedGemmHasWgmma = 0;
#endif

__global__ void __launch_bounds__(grouped::kTmaThreads, 1)
    groupedGemmSm90Kernel(GroupedGemmArgs a,
                          const __grid_constant__ grouped::GroupedGemmMaps maps) {
#ifdef KILN_GROUPED_GEMM_HAS_WGMMA
  extern __shared__ __align__(16) char shared[];
  grouped::groupedGemmCtaTma(a, maps, shared, static_cast<int>(blockIdx.x),
                             static_cast<int>(gridDim.x));
#endif
}

constexpr int kMaxDevices = 64;

// Per device: 0 unknown, 1 ready, -1 not (another architecture, or no sm_90a image).
int readiness(int device) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess ||
      major != 9 || minor != 0)
    return -1;
  int hasWgmma = 0;
  if (cudaMemcpyFromSymbol(&hasWgmma, groupedGemmHasWgmma, sizeof hasWgmma) != cudaSuccess ||
      hasWgmma != 1)
    return -1;
  // The driver must encode tensor maps (a map of any valid shape tells).
  alignas(16) static const uint16_t probe[64] = {}; // maps need a 16-byte aligned base
  CUtensorMap map;
  if (kernels::sm90::encodeBf16SwizzledMap(&map, probe, 1, 64, 1) != cudaSuccess)
    return -1;
  return cudaFuncSetAttribute(groupedGemmSm90Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              grouped::kTmaSharedBytes) == cudaSuccess
             ? 1
             : -1;
}

} // namespace

GroupedGemmDevice groupedGemmDeviceState(bool mayProbe) {
  static std::mutex mutex;
  static int known[kMaxDevices] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices)
    return GroupedGemmDevice::Unavailable;
  std::lock_guard<std::mutex> lock(mutex);
  if (known[device] == 0 && mayProbe)
    known[device] = readiness(device);
  return known[device] == 0  ? GroupedGemmDevice::Unknown
         : known[device] > 0 ? GroupedGemmDevice::Ready
                             : GroupedGemmDevice::Unavailable;
}

cudaError_t launchGroupedGemm(const GroupedGemmArgs &args, int64_t tileBound, cudaStream_t stream) {
  int device = 0, sms = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess)
    e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess)
    return e;
  grouped::GroupedGemmMaps maps{};
  if ((e = grouped::encodeMaps(args, maps)) != cudaSuccess)
    return e;
  const int64_t work = tileBound * (args.n / groupedGemmCtaFeatures(args.up != nullptr));
  const unsigned ctas = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(sms, work)));
  groupedGemmSm90Kernel<<<ctas, grouped::kTmaThreads, grouped::kTmaSharedBytes, stream>>>(args,
                                                                                        maps);
  return cudaGetLastError();
}

cudaError_t launchDenseGemm(const uint16_t *x, const uint16_t *w, uint16_t *out, int64_t m,
                            int64_t n, int64_t k, cudaStream_t stream) {
  GroupedGemmArgs args{x, w, out, nullptr, nullptr, n, k, m, 1};
  args.denseTiles =
      static_cast<int32_t>((m + kGroupedGemmMaxTileTokens - 1) / kGroupedGemmMaxTileTokens);
  return launchGroupedGemm(args, args.denseTiles, stream);
}

} // namespace kiln::graph
