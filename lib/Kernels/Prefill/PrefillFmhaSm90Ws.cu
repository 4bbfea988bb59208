// Instantiations and dispatch of the warp-specialized Hopper prefill
// (KILN_PREFILL_VARIANT_SM90_WS, PrefillFmhaSm90Ws.cuh): dense K/V, head_dim 64 and 128,
// bf16/fp16, no sliding window. Everything else the variant is asked to run goes to the
// SM90 kernel (launchDenseSm90 / launchPagedSm90), so the variant is correct wherever SM90
// is: paged caches, windows, head_dim 256, and a call whose tensor maps the driver
// refuses.
//
// Tiles: 128 query rows (2 consumer warpgroups x 64) x 128 keys.
//   d128: 2 stages: Q 32 KiB + 2 x (K + V) 64 KiB = 160 KiB (+ 1 KiB alignment, barriers).
//   d64:  3 stages: Q 16 KiB + 3 x (K + V) 32 KiB = 112 KiB.
// The schedule: ping-pong of the two consumer warpgroups with the intra-warpgroup overlap.
// AUTO's choice on sm_90 where it applies (1.02-1.08x cuDNN at d128, 0.95x at d64 on an
// H200; docs/performance.md).
#include "PrefillArgs.cuh"
#include "PrefillFmhaSm90Ws.cuh"
#include "TensorMap.h"

namespace kiln::kernels::prefill {
namespace {

template <int D> struct WsConfig;
template <> struct WsConfig<64> { static constexpr int BN = 128, STAGES = 3; };
template <> struct WsConfig<128> { static constexpr int BN = 128, STAGES = 2; };

// Where the warp-specialized kernel runs: the rest goes to the SM90 kernel.
bool wsApplies(const kiln_prefill_fmha_params_t &p) {
  return (p.head_dim == 64 || p.head_dim == 128) && p.window == 0 && p.total_k > 0 &&
         (p.v_head_dim == 0 || p.v_head_dim == p.head_dim);
}

cudaError_t encodeMaps(const kiln_prefill_fmha_params_t &p, WsMaps &maps) {
  const ResolvedStrides s = resolveStrides(p);
  const bool bf16 = p.dtype == KILN_DTYPE_BF16;
  const uint64_t d = static_cast<uint64_t>(p.head_dim);
  cudaError_t e = sm90::encodeSwizzledMap3d(&maps.q, bf16, p.q, p.total_q, p.q_heads, d, s.q_head,
                                            s.q_tok, ws::kBM);
  if (e == cudaSuccess)
    e = sm90::encodeSwizzledMap3d(&maps.k, bf16, p.k, p.total_k, p.kv_heads, d, s.k_head, s.k_tok,
                                  128);
  if (e == cudaSuccess)
    e = sm90::encodeSwizzledMap3d(&maps.v, bf16, p.v, p.total_k, p.kv_heads, d, s.v_head, s.v_tok,
                                  128);
  return e;
}

template <typename T, int D>
cudaError_t launchWs(const FmhaArgs &a, const WsMaps &maps, const kiln_prefill_fmha_params_t &p,
                     cudaStream_t stream) {
  using C = WsConfig<D>;
  static_assert(C::BN == 128, "the K/V maps' boxes (encodeMaps) are 128 keys");
  return launchPrefillFmhaSm90Ws<T, D, C::BN, C::STAGES>(a, maps, p.batch, p.max_seqlen_q,
                                                         p.q_heads, stream);
}

} // namespace

kiln_status_t launchDenseSm90Ws(const kiln_prefill_fmha_params_t &p, const char *name) {
  if (!wsApplies(p))
    return launchDenseSm90(p, name);
  kiln_status_t st = checkDeviceSm90(name);
  if (st != KILN_OK)
    return st;
  WsMaps maps{};
  if (encodeMaps(p, maps) != cudaSuccess)
    return launchDenseSm90(p, name); // strides or sizes the tensor-map engine refuses
  const FmhaArgs a = makeArgs(p);
  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  const cudaError_t err = forShippedConfig<64, 128>(p.dtype, p.head_dim, [&](auto t, auto d) {
    return launchWs<decltype(t), decltype(d)::value>(a, maps, p, stream);
  });
  return launchResult(err, name);
}

kiln_status_t launchPagedSm90Ws(const kiln_prefill_fmha_paged_params_t &p, const char *name) {
  return launchPagedSm90(p, name); // the paged cache keeps the SM90 kernel
}

} // namespace kiln::kernels::prefill
