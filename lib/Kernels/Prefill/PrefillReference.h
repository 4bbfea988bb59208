// fp64 CPU reference of the prefill attention math (plain C++, no CUDA), used by the
// tests and available to other tools through KilnKernelReferencePrefill.
#ifndef KILN_LIB_KERNELS_PREFILL_PREFILLREFERENCE_H
#define KILN_LIB_KERNELS_PREFILL_PREFILLREFERENCE_H

#include <cstdint>

namespace kiln::reference {

// Packed layouts: q/out [total_q, q_heads, head_dim], k/v [total_k, kv_heads, head_dim];
// sequence b owns q rows cu_q[b]..cu_q[b+1] and k rows cu_k[b]..cu_k[b+1] (host arrays).
// Causal masks are bottom-right aligned: query t sees keys <= t + (k_len - q_len); a
// query seeing no key gets zeros; a window > 0 (causal) leaves it the last `window` of
// its keys; sinks ([q_heads] logits in scaled-score units, or null) join each head's
// softmax without a value. Inputs are the values the kernel sees (already rounded to bf16/fp16); all
// math in double. v_head_dim > 0: v and out have that many columns a head (q and k
// head_dim; DeepSeek MLA's 128 under 192).
void prefillAttentionReference(const float *q, const float *k, const float *v, double *out,
                               const int32_t *cu_q, const int32_t *cu_k, int batch,
                               int q_heads, int kv_heads, int head_dim, double softmax_scale,
                               bool causal, int window = 0, const float *sinks = nullptr,
                               int v_head_dim = 0);

} // namespace kiln::reference

#endif
