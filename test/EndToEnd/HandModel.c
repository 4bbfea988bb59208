/* A hand-written stand-in for a model compiled by `kiln-compile --emit=so`: it exports
 * the same four functions and calls the Kiln runtime exactly as the generated step
 * functions do (one kiln_rt_<family>() call per cached layer op, in layer order, with
 * the planned arena offsets and shapes as constants, stopping at the first non-zero
 * status). Built four times by CMake:
 *   KILN_HAND_MLA 0: `hybrid` (conv+ssm layer 0, attention layer 1, conv+ssm layer 2,
 *                    attention layer 3; max_batch 4, max_seq_len 256, page 16, bf16 KV)
 *   KILN_HAND_MLA 1: `mla` (mla_attention layers 0 and 1, page 64)
 *   KILN_HAND_SPEC 0/1: without speculation / with mtp:3 (intermediate states, q_len 4).
 * Offsets follow the planner's rule: every resource 256-byte aligned, the KV pools first,
 * then the state pool, resources in layer order (per layer: conv state, its intermediate,
 * ssm state, its intermediate). */
#include <stdint.h>

#include "kiln/Runtime/Runtime.h"

#ifndef KILN_HAND_MLA
#define KILN_HAND_MLA 0
#endif
#ifndef KILN_HAND_SPEC
#define KILN_HAND_SPEC 0
#endif

#define ALIGN256(x) ((((uint64_t)(x)) + 255u) / 256u * 256u)
#define SLOTS 4ull
#define MAX_SEQ 256ull
#define DRAFT_T 4ull /* 1 + max_draft_len (mtp:3) */

#if KILN_HAND_MLA
#define PAGE 64ull
#define PAGES (SLOTS * MAX_SEQ / PAGE)
#define MLA_BYTES (PAGES * 64ull * 576ull * 2ull)
#define OFF_MLA0 0ull
#define OFF_MLA1 (OFF_MLA0 + ALIGN256(MLA_BYTES))
#define ARENA_BYTES (OFF_MLA1 + ALIGN256(MLA_BYTES))
#define SPEC_BYTES 0ull
#else
#define PAGE 16ull
#define PAGES (SLOTS * MAX_SEQ / PAGE)
#define KV_BYTES (PAGES * 2ull * PAGE * 2ull * 128ull * 2ull)
#define CONV_BYTES (SLOTS * 1024ull * 3ull * 2ull)
#define SSM_BYTES (SLOTS * 8ull * 64ull * 128ull * 4ull)
#if KILN_HAND_SPEC
#define ICONV_BYTES (SLOTS * DRAFT_T * 1024ull * 3ull * 2ull)
#define ISSM_BYTES (SLOTS * DRAFT_T * 8ull * 64ull * 128ull * 4ull)
#else
#define ICONV_BYTES 0ull
#define ISSM_BYTES 0ull
#endif
#define OFF_KV1 0ull
#define OFF_KV3 (OFF_KV1 + ALIGN256(KV_BYTES))
#define OFF_CONV0 (OFF_KV3 + ALIGN256(KV_BYTES))
#define OFF_ICONV0 (OFF_CONV0 + ALIGN256(CONV_BYTES))
#define OFF_SSM0 (OFF_ICONV0 + ALIGN256(ICONV_BYTES))
#define OFF_ISSM0 (OFF_SSM0 + ALIGN256(SSM_BYTES))
#define OFF_CONV2 (OFF_ISSM0 + ALIGN256(ISSM_BYTES))
#define OFF_ICONV2 (OFF_CONV2 + ALIGN256(CONV_BYTES))
#define OFF_SSM2 (OFF_ICONV2 + ALIGN256(ICONV_BYTES))
#define OFF_ISSM2 (OFF_SSM2 + ALIGN256(SSM_BYTES))
#define ARENA_BYTES (OFF_ISSM2 + ALIGN256(ISSM_BYTES))
#define SPEC_BYTES (2ull * (ALIGN256(ICONV_BYTES) + ALIGN256(ISSM_BYTES)))
#endif

#if KILN_HAND_SPEC
#define INTER(off) ((int64_t)(off))
#define MODE KILN_RT_MULTI_TOKEN
#define SSM_DECODE KILN_RT_KERNEL_SSM_UPDATE_SPEC
#define CONV_DECODE KILN_RT_KERNEL_CONV_UPDATE_SPEC
#else
#define INTER(off) ((int64_t)-1)
#define MODE KILN_RT_SINGLE_TOKEN
#define SSM_DECODE KILN_RT_KERNEL_SSM_UPDATE
#define CONV_DECODE KILN_RT_KERNEL_CONV_UPDATE
#endif

uint64_t kiln_model_arena_bytes(void) { return ARENA_BYTES; }
uint64_t kiln_model_speculative_bytes(void) { return SPEC_BYTES; }
/* Pages of every KV pool in the plan (the serving process sets batch.num_pages). */
int32_t kiln_model_kv_pages(void) { return (int32_t)PAGES; }

#if KILN_HAND_MLA
static int32_t step(kiln_rt_context_t *ctx, int32_t phase) {
  int32_t s;
  int32_t kernel = phase == KILN_RT_PREFILL ? KILN_RT_KERNEL_MLA_PREFILL_DECODE
                                            : KILN_RT_KERNEL_MLA_DECODE;
  if ((s = kiln_rt_mla(ctx, phase, 0, OFF_MLA0, 16, 512, 64, (int32_t)PAGE, kernel, MODE)))
    return s;
  if ((s = kiln_rt_mla(ctx, phase, 1, OFF_MLA1, 16, 512, 64, (int32_t)PAGE, kernel, MODE)))
    return s;
  return 0;
}
#else
static int32_t step(kiln_rt_context_t *ctx, int32_t phase) {
  int32_t s;
  int prefill = phase == KILN_RT_PREFILL;
  int32_t conv = prefill ? KILN_RT_KERNEL_CONV_PREFILL_SEQUENTIAL : CONV_DECODE;
  int32_t ssm = prefill ? KILN_RT_KERNEL_SSM_PREFILL_SEQUENTIAL : SSM_DECODE;
  int32_t attn = prefill ? KILN_RT_KERNEL_PREFILL_FMHA : KILN_RT_KERNEL_GQA_DECODE;
  if ((s = kiln_rt_conv(ctx, phase, 0, OFF_CONV0, INTER(OFF_ICONV0), 1024, 4, 1, conv)))
    return s;
  if ((s = kiln_rt_ssm(ctx, phase, 0, OFF_SSM0, INTER(OFF_ISSM0), 8, 64, 128, 2,
                       KILN_DTYPE_F32, ssm)))
    return s;
  if ((s = kiln_rt_attention(ctx, phase, 1, OFF_KV1, 8, 2, 128, (int32_t)PAGE, 0, attn, MODE)))
    return s;
  if ((s = kiln_rt_conv(ctx, phase, 2, OFF_CONV2, INTER(OFF_ICONV2), 1024, 4, 1, conv)))
    return s;
  if ((s = kiln_rt_ssm(ctx, phase, 2, OFF_SSM2, INTER(OFF_ISSM2), 8, 64, 128, 2,
                       KILN_DTYPE_F32, ssm)))
    return s;
  if ((s = kiln_rt_attention(ctx, phase, 3, OFF_KV3, 8, 2, 128, (int32_t)PAGE, 0, attn, MODE)))
    return s;
  return 0;
}
#endif

int32_t kiln_model_decode_step(kiln_rt_context_t *ctx) { return step(ctx, KILN_RT_DECODE); }
int32_t kiln_model_prefill_step(kiln_rt_context_t *ctx) { return step(ctx, KILN_RT_PREFILL); }
