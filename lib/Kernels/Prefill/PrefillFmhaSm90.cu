// Instantiations of the Hopper wgmma prefill kernel (dense and paged, head_dim 64/128,
// bf16/fp16; head_dim 256 is PrefillFmhaSm90D256.cu's) and its launcher. On targets other
// than sm_90a the kernel bodies are empty, and the launcher refuses to run them
// (checkDeviceSm90).
#include "PrefillArgs.cuh"
#include "PrefillFmhaSm90.cuh"

namespace kiln::kernels::prefill {
namespace {

// Chosen on the H200 (bench/Prefill/NOTES.md); 2 warpgroups (128 query rows) per block.
// d64 asks for 2 blocks a SM (MIN_BLOCKS): the tiles were chosen at 120 registers, 2 blocks
// a SM; windows and sinks took the kernel to 136 and so to one block (8 warps) a SM, and
// d64 from 355 TFLOP/s (H200, 2026-12-02) to 264 (H100, 2026-12-06), below the mma.sync
// kernel's 295. The cap holds the registers at 128 without spilling (ptxas).
template <int D> struct Sm90Config;
template <> struct Sm90Config<64> { static constexpr int BN = 64, STAGES = 2, MIN_BLOCKS = 2; };
template <> struct Sm90Config<128> { static constexpr int BN = 128, STAGES = 2, MIN_BLOCKS = 1; };

// Whether the SM90 variant (and so AUTO on sm_90, and the runtime's prefill_fmha_sm90)
// runs the overlapped schedule at d64/d128 instead of the default one. Off until the
// H100 run of bench/Prefill (variant sm90_overlap next to sm90) says otherwise.
constexpr bool kSm90Overlaps = false;

template <bool PAGED, typename Params>
kiln_status_t dispatchSm90(const Params &p, const char *name, bool overlap) {
  kiln_status_t st = checkDeviceSm90(name);
  if (st != KILN_OK)
    return st;
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256)
    return fail(KILN_ERROR_UNSUPPORTED, "%s: variant sm90 has head_dim 64, 128 and 256 (got %d)",
                name, p.head_dim);
  if (overlap && p.head_dim == 256)
    return fail(KILN_ERROR_UNSUPPORTED,
                "%s: variant sm90_overlap has head_dim 64 and 128 (got 256: a third 64 KiB "
                "K/V stage does not fit next to the d256 tiles)",
                name);
  if constexpr (PAGED) {
    // One element type for q, the K/V tiles and the wgmma operands: an FP8 cache, or an
    // f16 one next to bf16 q, would need its own (converting) loads.
    if (p.kv_dtype != p.dtype)
      return fail(KILN_ERROR_UNSUPPORTED,
                  "%s: variant sm90 reads caches of q's dtype only (kv_dtype %d, dtype %d; the "
                  "mma.sync variant reads FP8 and f16 caches next to bf16)",
                  name, static_cast<int>(p.kv_dtype), static_cast<int>(p.dtype));
  }
  const FmhaArgs a = makeArgs(p);
  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  if (p.head_dim == 256)
    return launchResult(launchPrefillFmhaSm90D256<PAGED>(a, p.dtype == KILN_DTYPE_BF16, p.batch,
                                                         p.max_seqlen_q, p.q_heads, stream),
                        name);
  if (overlap)
    return launchResult(launchPrefillFmhaSm90Overlap<PAGED>(a, p.dtype == KILN_DTYPE_BF16,
                                                            p.head_dim, p.batch, p.max_seqlen_q,
                                                            p.q_heads, stream),
                        name);
  const cudaError_t err = forShippedConfig<64, 128>(p.dtype, p.head_dim, [&](auto t, auto d) {
    using T = decltype(t);
    using C = Sm90Config<decltype(d)::value>;
    return launchPrefillFmhaSm90<T, decltype(d)::value, C::BN, C::STAGES, PAGED, 2, false,
                                 C::MIN_BLOCKS>(a, p.batch, p.max_seqlen_q, p.q_heads, stream);
  });
  return launchResult(err, name);
}

} // namespace

kiln_status_t launchDenseSm90(const kiln_prefill_fmha_params_t &p, const char *name) {
  return dispatchSm90<false>(p, name, kSm90Overlaps && p.head_dim != 256);
}

kiln_status_t launchPagedSm90(const kiln_prefill_fmha_paged_params_t &p, const char *name) {
  return dispatchSm90<true>(p, name, kSm90Overlaps && p.head_dim != 256);
}

kiln_status_t launchDenseSm90Overlap(const kiln_prefill_fmha_params_t &p, const char *name) {
  return dispatchSm90<false>(p, name, true);
}

kiln_status_t launchPagedSm90Overlap(const kiln_prefill_fmha_paged_params_t &p, const char *name) {
  return dispatchSm90<true>(p, name, true);
}

} // namespace kiln::kernels::prefill
