// Internal interface between the host-side validation (PrefillFmha.cpp, plain C++) and
// the CUDA launch code (PrefillFmha.cu), also used by the benchmark's tuning build.
#ifndef KILN_LIB_KERNELS_PREFILL_PREFILLINTERNAL_H
#define KILN_LIB_KERNELS_PREFILL_PREFILLINTERNAL_H

#include "kiln/Kernels/Prefill.h"

namespace kiln::kernels::prefill {

// Argument checks only (no CUDA call); on failure records the message and returns the
// status. `name` is the launcher named in messages.
kiln_status_t validateDense(const kiln_prefill_fmha_params_t &p, const char *name);
kiln_status_t validatePaged(const kiln_prefill_fmha_paged_params_t &p, const char *name);

// Launches after validation (PrefillFmha.cu): checks the device SM, picks the
// instantiation for head_dim/dtype, launches on p.stream.
kiln_status_t launchDenseSm80(const kiln_prefill_fmha_params_t &p, const char *name);
kiln_status_t launchPagedSm80(const kiln_prefill_fmha_paged_params_t &p, const char *name);
// The mma.sync paged kernel over an FP8 e4m3 cache (PrefillFmhaPagedFp8.cu: a module of
// its own, loaded only by models that read FP8 caches).
kiln_status_t launchPagedFp8Sm80(const kiln_prefill_fmha_paged_params_t &p, const char *name);
// The mma.sync paged kernel over an f16 cache next to bf16 q/out (PrefillFmhaPagedF16.cu).
kiln_status_t launchPagedF16Sm80(const kiln_prefill_fmha_paged_params_t &p, const char *name);
// Hopper wgmma variant (PrefillFmhaSm90.cu): KILN_ERROR_UNSUPPORTED unless the library was
// built for sm_90a and the device is sm_90.
kiln_status_t launchDenseSm90(const kiln_prefill_fmha_params_t &p, const char *name);
kiln_status_t launchPagedSm90(const kiln_prefill_fmha_paged_params_t &p, const char *name);
// The same kernel on its overlapped schedule (softmax of key tile j next to the P V wgmma
// of tile j - 1; PrefillFmhaSm90Overlap.cu), head_dim 64 and 128.
kiln_status_t launchDenseSm90Overlap(const kiln_prefill_fmha_params_t &p, const char *name);
kiln_status_t launchPagedSm90Overlap(const kiln_prefill_fmha_paged_params_t &p, const char *name);
// The warp-specialized kernel (TMA producer warpgroup, two consumer warpgroups in
// ping-pong; PrefillFmhaSm90Ws.cu) where it applies (dense, head_dim 64/128, no window),
// the SM90 kernel elsewhere.
kiln_status_t launchDenseSm90Ws(const kiln_prefill_fmha_params_t &p, const char *name);
kiln_status_t launchPagedSm90Ws(const kiln_prefill_fmha_paged_params_t &p, const char *name);

// Packed default strides filled in where the caller passed 0.
struct ResolvedStrides {
  long long q_tok, q_head, k_tok, k_head, v_tok, v_head, o_tok, o_head;
};
ResolvedStrides resolveStrides(const kiln_prefill_fmha_params_t &p);
ResolvedStrides resolveStrides(const kiln_prefill_fmha_paged_params_t &p);

} // namespace kiln::kernels::prefill

#endif
