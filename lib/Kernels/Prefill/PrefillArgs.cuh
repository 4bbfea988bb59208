// Host helpers turning validated params into kernel arguments (shared by the library and
// the benchmark's tuning build).
#ifndef KILN_LIB_KERNELS_PREFILL_PREFILLARGS_CUH
#define KILN_LIB_KERNELS_PREFILL_PREFILLARGS_CUH

#include "PrefillFmhaKernel.cuh"
#include "PrefillInternal.h"
#include "StatusInternal.h"

#include <cuda_runtime.h>

#include <type_traits>

namespace kiln::kernels::prefill {

inline FmhaArgs makeArgs(const kiln_prefill_fmha_params_t &p) {
  const ResolvedStrides s = resolveStrides(p);
  FmhaArgs a{};
  a.q = p.q;
  a.out = p.out;
  a.k = p.k;
  a.v = p.v;
  a.cu_q = p.cu_seqlens_q;
  a.cu_k = p.cu_seqlens_k;
  a.q_tok = s.q_tok, a.q_head = s.q_head;
  a.k_tok = s.k_tok, a.k_head = s.k_head;
  a.v_tok = s.v_tok, a.v_head = s.v_head;
  a.o_tok = s.o_tok, a.o_head = s.o_head;
  a.group = p.q_heads / p.kv_heads;
  a.scale_log2 = p.softmax_scale * 1.4426950408889634f;
  a.causal = p.causal;
  a.window = p.window;
  a.sinks = p.sinks;
  return a;
}

inline FmhaArgs makeArgs(const kiln_prefill_fmha_paged_params_t &p) {
  const ResolvedStrides s = resolveStrides(p);
  FmhaArgs a{};
  a.q = p.q;
  a.out = p.out;
  a.k = p.kv_cache;
  a.v = p.kv_cache;
  a.cu_q = p.cu_seqlens_q;
  a.seq_lens = p.seq_lens;
  a.block_table = p.block_table;
  a.q_tok = s.q_tok, a.q_head = s.q_head;
  a.k_tok = s.k_tok, a.k_head = s.k_head;
  a.v_tok = s.v_tok, a.v_head = s.v_head;
  a.o_tok = s.o_tok, a.o_head = s.o_head;
  a.page_size = p.page_size;
  a.max_pages = p.max_pages_per_seq;
  a.k_scale = p.k_scale;
  a.v_scale = p.v_scale;
  a.group = p.q_heads / p.kv_heads;
  a.scale_log2 = p.softmax_scale * 1.4426950408889634f;
  a.causal = p.causal;
  a.window = p.window;
  a.sinks = p.sinks;
  return a;
}

// KILN_OK when the current device can run the mma.sync kernels (sm_80+).
inline kiln_status_t checkDeviceSm80(const char *name) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return fail(KILN_ERROR_NO_DEVICE, "%s: cudaGetDevice: %s", name, cudaGetErrorString(err));
  }
  int major = 0;
  err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (err != cudaSuccess)
    return fail(KILN_ERROR_CUDA, "%s: cudaDeviceGetAttribute: %s", name,
                cudaGetErrorString(err));
  if (major < 8)
    return fail(KILN_ERROR_UNSUPPORTED, "%s: needs sm_80 or newer (device is sm_%d*)", name,
                major);
  return KILN_OK;
}

// KILN_OK when the sm_90a kernels are in this build and the current device is sm_90.
inline kiln_status_t checkDeviceSm90(const char *name) {
#ifndef KILN_PREFILL_SM90A_BUILT
  return fail(KILN_ERROR_UNSUPPORTED,
              "%s: variant sm90 needs a build with sm_90a in KILN_CUDA_ARCHITECTURES", name);
#else
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return fail(KILN_ERROR_NO_DEVICE, "%s: cudaGetDevice: %s", name, cudaGetErrorString(err));
  }
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (major != 9 || minor != 0)
    return fail(KILN_ERROR_UNSUPPORTED, "%s: variant sm90 needs an sm_90 device (found sm_%d%d)",
                name, major, minor);
  return KILN_OK;
#endif
}

inline kiln_status_t launchResult(cudaError_t err, const char *name) {
  if (err != cudaSuccess)
    return fail(KILN_ERROR_CUDA, "%s: kernel launch: %s", name, cudaGetErrorString(err));
  return ok();
}

// Tile configuration per head dim: BM query rows (BM/16 warps), BN keys per tile,
// STAGES-deep cp.async ring of K/V tiles, MT 16-row m-tiles per warp, QREG: Q fragments
// in registers. SMALL_SMEM_BN: the key tile where a block may not have the shared memory
// of BN-key tiles (sm_86, sm_89, sm_120: about 99 KiB); equal to BN where BN fits them.
template <int D> struct DefaultConfig;
// Chosen on the H200 (bench/Prefill/NOTES.md): d64 with 2 m-tiles per warp (4 warps),
// d128 with 1 m-tile per warp (8 warps, Q fragments in registers).
template <> struct DefaultConfig<64> {
  static constexpr int BM = 128, BN = 64, STAGES = 2, MT = 2, SMALL_SMEM_BN = BN;
  static constexpr bool QREG = true;
};
template <> struct DefaultConfig<128> {
  static constexpr int BM = 128, BN = 64, STAGES = 2, MT = 1, SMALL_SMEM_BN = BN;
  static constexpr bool QREG = true;
};
// d256 (Qwen3-Next's full attention): a warp's 16 rows hold 128 fp32 O accumulators, so
// Q is re-read from shared memory (its fragments would be 64 more registers, and spill).
// 128 x 32 tiles, 2 stages: Q 64 KiB + K/V ring 64 KiB = 128 KiB (sm_80: 163 KiB, sm_90:
// 227 KiB); 16-key tiles (96 KiB) where a block has less. BM stays 128, as the launch
// validation's grid limit assumes.
template <> struct DefaultConfig<256> {
  static constexpr int BM = 128, BN = 32, STAGES = 2, MT = 1, SMALL_SMEM_BN = 16;
  static constexpr bool QREG = false;
};

// Calls `launch(T{}, std::integral_constant<int, D>{})` with the element type of `dtype`
// (bf16 or fp16) and the D of HeadDims equal to headDim (validated before: one of them;
// head_dim 192 is dispatched before, by `dispatch`). Only HeadDims are instantiated.
template <int... HeadDims, typename Launch>
inline cudaError_t forShippedConfig(kiln_dtype_t dtype, int headDim, Launch &&launch) {
  auto withType = [&](auto t) {
    cudaError_t err = cudaErrorInvalidValue;
    ((headDim == HeadDims && (err = launch(t, std::integral_constant<int, HeadDims>{}), true)) ||
     ...);
    return err;
  };
  return dtype == KILN_DTYPE_BF16 ? withType(__nv_bfloat16{}) : withType(__half{});
}

// The largest dynamic shared memory a block of the current device may opt into.
inline cudaError_t optinSharedMemory(int &bytes) {
  int device = 0;
  bytes = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  return err;
}

// Launches DefaultConfig<D> (element type T; KT: the paged cache's element, T, uint8_t =
// FP8 e4m3 or __half = f16 next to bf16), with its SMALL_SMEM_BN key tiles where the
// device cannot give a block the BN tiles' memory.
template <typename T, int D, bool PAGED, typename KT = T>
inline cudaError_t launchDefaultConfig(const FmhaArgs &a, int batch, int maxSeqlenQ, int qHeads,
                                       cudaStream_t stream) {
  using C = DefaultConfig<D>;
  auto launchTiles = [&](auto bn) {
    return launchPrefillFmha<T, D, C::BM, decltype(bn)::value, C::STAGES, PAGED, C::MT, C::QREG,
                             KT>(a, batch, maxSeqlenQ, qHeads, stream);
  };
  if constexpr (C::SMALL_SMEM_BN != C::BN) {
    int optin = 0;
    if (const cudaError_t err = optinSharedMemory(optin); err != cudaSuccess)
      return err;
    if (optin < fmhaSmemBytes<D, C::BM, C::BN, C::STAGES, sizeof(KT) == 1>())
      return launchTiles(std::integral_constant<int, C::SMALL_SMEM_BN>{});
  }
  return launchTiles(std::integral_constant<int, C::BN>{});
}

// The head dims of the mma.sync kernel's DefaultConfig instantiations.
template <typename Launch>
inline cudaError_t forMmaHeadDim(kiln_dtype_t dtype, int headDim, Launch &&launch) {
  return forShippedConfig<64, 128, 256>(dtype, headDim, launch);
}

// DeepSeek MLA's expanded prompts: q/k 192 (nope 128 + rope 64), v/out 128, dense K/V.
// 8 warps of 16 query rows (Q fragments in registers: 48 registers), 2 stages of 64-key
// tiles (128 KiB of shared memory), or of 32-key tiles (88 KiB) where a block may not
// have 128 KiB (sm_86, sm_89, sm_120: about 99 KiB).
struct MlaPromptConfig {
  static constexpr int D = 192, DV = 128, BM = 128, STAGES = 2, MT = 1;
};

template <typename T, int BN>
inline cudaError_t launchMlaPromptTiles(const FmhaArgs &a, const kiln_prefill_fmha_params_t &p,
                                        cudaStream_t stream) {
  using C = MlaPromptConfig;
  return launchPrefillFmha<T, C::D, C::BM, BN, C::STAGES, false, C::MT, true, T, C::DV>(
      a, p.batch, p.max_seqlen_q, p.q_heads, stream);
}

template <typename T>
inline cudaError_t launchMlaPrompt(const FmhaArgs &a, const kiln_prefill_fmha_params_t &p,
                                   cudaStream_t stream) {
  using C = MlaPromptConfig;
  int optin = 0;
  if (const cudaError_t err = optinSharedMemory(optin); err != cudaSuccess)
    return err;
  if (optin >= fmhaSmemBytes<C::D, C::BM, 64, C::STAGES, false, C::DV>())
    return launchMlaPromptTiles<T, 64>(a, p, stream);
  return launchMlaPromptTiles<T, 32>(a, p, stream);
}

template <bool PAGED, typename Params>
inline kiln_status_t dispatch(const Params &p, const char *name) {
  kiln_status_t st = checkDeviceSm80(name);
  if (st != KILN_OK)
    return st;
  const FmhaArgs a = makeArgs(p);
  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  if constexpr (!PAGED) {
    if (p.head_dim == MlaPromptConfig::D)
      return launchResult(p.dtype == KILN_DTYPE_BF16
                              ? launchMlaPrompt<__nv_bfloat16>(a, p, stream)
                              : launchMlaPrompt<__half>(a, p, stream),
                          name);
  }
  const cudaError_t err = forMmaHeadDim(p.dtype, p.head_dim, [&](auto t, auto d) {
    return launchDefaultConfig<decltype(t), decltype(d)::value, PAGED>(a, p.batch, p.max_seqlen_q,
                                                                       p.q_heads, stream);
  });
  return launchResult(err, name);
}

// The mma.sync paged prefill over a cache of CacheT (FP8 e4m3 bytes, fp16) next to bf16
// q/out, head_dim 64/128/256 (validatePaged checked the pairing). Each cache type
// instantiates it in a translation unit of its own, loaded only by the models that read
// such a cache.
template <typename CacheT>
inline kiln_status_t dispatchPagedOverCache(const kiln_prefill_fmha_paged_params_t &p,
                                            const char *name) {
  kiln_status_t st = checkDeviceSm80(name);
  if (st != KILN_OK)
    return st;
  const FmhaArgs a = makeArgs(p);
  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  const cudaError_t err = forMmaHeadDim(KILN_DTYPE_BF16, p.head_dim, [&](auto, auto d) {
    return launchDefaultConfig<__nv_bfloat16, decltype(d)::value, true, CacheT>(
        a, p.batch, p.max_seqlen_q, p.q_heads, stream);
  });
  return launchResult(err, name);
}

} // namespace kiln::kernels::prefill

#endif
