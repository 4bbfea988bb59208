// Bench-only instantiations of other tile shapes (BM, BN, STAGES) of the dense bf16
// kernel, to choose the library's defaults. Built with -DKILN_PREFILL_TUNING=ON.
#include "PrefillArgs.cuh"
#include "PrefillFmhaSm90.cuh"

#include <cstdio>

using namespace kiln::kernels::prefill;

namespace {
template <int D, int BM, int BN, int STAGES, int MT, bool QREG>
kiln_status_t run(const kiln_prefill_fmha_params_t &p) {
  const FmhaArgs a = makeArgs(p);
  return launchResult(launchPrefillFmha<__nv_bfloat16, D, BM, BN, STAGES, false, MT, QREG>(
                          a, p.batch, p.max_seqlen_q, p.q_heads,
                          static_cast<cudaStream_t>(p.stream)),
                      "tuned");
}
template <int D, int BN, int STAGES, int NWG, bool LAZY = false, int MINB = 1, bool OVERLAP = false>
kiln_status_t run90(const kiln_prefill_fmha_params_t &p) {
  kiln_status_t st = checkDeviceSm90("tuned");
  if (st != KILN_OK)
    return st;
  const FmhaArgs a = makeArgs(p);
  return launchResult(
      launchPrefillFmhaSm90<__nv_bfloat16, D, BN, STAGES, false, NWG, LAZY, MINB, OVERLAP>(
          a, p.batch, p.max_seqlen_q, p.q_heads, static_cast<cudaStream_t>(p.stream)),
      "tuned");
}
} // namespace

// config >= 1 picks a shape for p.head_dim; returns KILN_ERROR_UNSUPPORTED past the last.
extern "C" kiln_status_t kiln_prefill_bench_tuned(const kiln_prefill_fmha_params_t *p,
                                                  int config, char *label, int labelSize) {
  kiln_status_t st = validateDense(*p, "tuned");
  if (st != KILN_OK)
    return st;
  if (p->dtype != KILN_DTYPE_BF16)
    return KILN_ERROR_UNSUPPORTED;
#define KILN_TUNE(D_, BM_, BN_, ST_, MT_, QREG_)                                               \
  if (p->head_dim == D_ && --config == 0) {                                                    \
    std::snprintf(label, labelSize, "BM%d_BN%d_S%d_MT%d%s", BM_, BN_, ST_, MT_,                \
                  QREG_ ? "" : "_Qsmem");                                                      \
    return run<D_, BM_, BN_, ST_, MT_, QREG_>(*p);                                             \
  }
  KILN_TUNE(128, 128, 64, 3, 1, true)
  KILN_TUNE(128, 128, 128, 2, 1, true)
  KILN_TUNE(128, 64, 64, 2, 1, true)
  KILN_TUNE(128, 128, 64, 2, 2, false)
  KILN_TUNE(128, 128, 64, 3, 2, false)
  KILN_TUNE(128, 64, 64, 3, 2, false)
  KILN_TUNE(64, 128, 64, 2, 1, true)
  KILN_TUNE(64, 128, 128, 2, 1, true)
  KILN_TUNE(64, 128, 64, 2, 2, true)
  KILN_TUNE(64, 128, 64, 3, 2, true)
  KILN_TUNE(64, 128, 128, 2, 2, false)
#undef KILN_TUNE
#define KILN_TUNE90(D_, BN_, ST_, NWG_)                                                        \
  if (p->head_dim == D_ && --config == 0) {                                                    \
    std::snprintf(label, labelSize, "sm90_BM%d_BN%d_S%d", 64 * NWG_, BN_, ST_);                \
    return run90<D_, BN_, ST_, NWG_>(*p);                                                      \
  }
  KILN_TUNE90(128, 64, 2, 2)
  KILN_TUNE90(128, 64, 3, 2)
  KILN_TUNE90(128, 128, 3, 2)
  KILN_TUNE90(128, 64, 2, 1)
  KILN_TUNE90(128, 64, 3, 1)
  KILN_TUNE90(64, 64, 2, 2)
  KILN_TUNE90(64, 128, 3, 2)
  KILN_TUNE90(64, 128, 2, 1)
  // d256: one warpgroup a block (64 query rows, 161 KiB) against the library's two.
  KILN_TUNE90(256, 64, 2, 1)
#undef KILN_TUNE90
  // The library's d256 and d128 tiles with the O rescale skipped on tiles that raise no
  // row maximum of a warp (LAZY_RESCALE, PrefillFmhaSm90.cuh).
#define KILN_TUNE90_LAZY(D_, BN_, ST_, NWG_)                                                   \
  if (p->head_dim == D_ && --config == 0) {                                                    \
    std::snprintf(label, labelSize, "sm90_BM%d_BN%d_S%d_lazy", 64 * NWG_, BN_, ST_);           \
    return run90<D_, BN_, ST_, NWG_, true>(*p);                                                \
  }
  KILN_TUNE90_LAZY(256, 64, 2, 2)
  KILN_TUNE90_LAZY(128, 128, 2, 2)
#undef KILN_TUNE90_LAZY
  // d64 without the library's cap of 128 registers (MIN_BLOCKS 1; ptxas takes 123 today,
  // so 2 blocks a SM either way: what the cap costs), and a 3-stage ring under the cap.
#define KILN_TUNE90_MINB(D_, BN_, ST_, MINB_)                                                      \
  if (p->head_dim == D_ && --config == 0) {                                                        \
    std::snprintf(label, labelSize, "sm90_BM128_BN%d_S%d_minb%d", BN_, ST_, MINB_);                \
    return run90<D_, BN_, ST_, 2, false, MINB_>(*p);                                               \
  }
  KILN_TUNE90_MINB(64, 64, 2, 1)
  KILN_TUNE90_MINB(64, 64, 3, 2)
#undef KILN_TUNE90_MINB
  // The overlapped schedule (softmax of tile j next to the P V wgmma of tile j - 1) on
  // other tiles than the library's (d128 BN128 S3, d64 BN64 S3): 64-key tiles at d128
  // (173 registers), with 2 tiles of prefetch at 4 stages; 128-key tiles at d64 (191).
  // Not at d64 BN64 under 2 blocks a SM: 128 registers spill 32 B there.
#define KILN_TUNE90_OVERLAP(D_, BN_, ST_, MINB_)                                                   \
  if (p->head_dim == D_ && --config == 0) {                                                        \
    std::snprintf(label, labelSize, "sm90_overlap_BM128_BN%d_S%d_minb%d", BN_, ST_, MINB_);        \
    return run90<D_, BN_, ST_, 2, false, MINB_, true>(*p);                                         \
  }
  KILN_TUNE90_OVERLAP(128, 64, 3, 1)
  KILN_TUNE90_OVERLAP(128, 64, 4, 1)
  KILN_TUNE90_OVERLAP(64, 128, 3, 1)
#undef KILN_TUNE90_OVERLAP
  return KILN_ERROR_UNSUPPORTED;
}
