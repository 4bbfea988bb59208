// kiln_rt_mla (legacy, bind-based): absorbed MLA decode and its token-expanded prefill.
#include "Legacy.h"

#include "kiln/Kernels/Decode.h"

using namespace kiln::rt;
using namespace kiln::rt::legacy;

// ---- MLA ---------------------------------------------------------------------------------

extern "C" kiln_status_t kiln_rt_mla(kiln_rt_context_t *ctx, int32_t phase, int32_t layer,
                                     uint64_t cache_offset, int32_t num_heads,
                                     int32_t kv_lora_rank, int32_t rope_dim, int32_t page_size,
                                     int32_t kernel, int32_t spec_dec_mode) {
  Call c{"kiln_rt_mla", kiln_rt_kernel_name(kernel), layer};
  if (kiln_status_t s = refuseCapture(ctx, c.fn); s != KILN_OK)
    return s;
  if (kiln_status_t s = checkCall(c, ctx, phase); s != KILN_OK)
    return s;
  const LegacyBatch &b = ctx->legacy;
  bool decodeKernel =
      kernel == KILN_RT_KERNEL_MLA_DECODE || kernel == KILN_RT_KERNEL_MLA_DECODE_SMALL_SMEM;
  if (phase == KILN_RT_PHASE_DECODE && !decodeKernel)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "kernel %d (%s) cannot run MLA decode (mla_decode or mla_decode_small_smem)",
                   kernel, kiln_rt_kernel_name(kernel));
  if (phase == KILN_RT_PHASE_PREFILL && kernel != KILN_RT_KERNEL_MLA_PREFILL_DECODE)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "kernel %d (%s) cannot run MLA prefill (mla_prefill_decode)", kernel,
                   kiln_rt_kernel_name(kernel));
  if (spec_dec_mode < KILN_RT_SINGLE_TOKEN || spec_dec_mode > KILN_RT_EXTEND_CONTEXT)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "spec_dec_mode %d unknown", spec_dec_mode);
  if (kv_lora_rank != KILN_MLA_KV_LORA_RANK || rope_dim != KILN_MLA_ROPE_DIM)
    return c.error(KILN_ERROR_UNSUPPORTED,
                   "kv_lora_rank %d / rope_dim %d unsupported (512 / 64 only)", kv_lora_rank,
                   rope_dim);
  if (page_size != KILN_MLA_PAGE_SIZE)
    return c.error(KILN_ERROR_UNSUPPORTED, "page_size %d unsupported (64 only)", page_size);
  if (num_heads < 1 || num_heads > 128)
    return c.error(KILN_ERROR_UNSUPPORTED, "num_heads %d unsupported (1..128)", num_heads);
  if (kiln_status_t s = checkPaged(c, ctx, page_size); s != KILN_OK)
    return s;
  uint64_t poolBytes =
      static_cast<uint64_t>(b.num_pages) * KILN_MLA_PAGE_SIZE * KILN_MLA_HEAD_DIM * kBf16;
  if (kiln_status_t s = useResource(c, ctx, "mla_latent", cache_offset, poolBytes); s != KILN_OK)
    return s;
  void *q, *latent, *out;
  if (kiln_status_t s = requireAll(c, ctx, {{"q", &q}, {"latent", &latent}, {"out", &out}}); s != KILN_OK)
    return s;
  if (phase == KILN_RT_PHASE_DECODE) {
    if (!b.seq_lens)
      return c.error(KILN_ERROR_INVALID_ARGUMENT, "batch.seq_lens is null");
    if (spec_dec_mode == KILN_RT_SINGLE_TOKEN && b.q_len != 1)
      return c.error(KILN_ERROR_INVALID_ARGUMENT,
                     "batch.q_len %d > 1 but spec_dec_mode is SINGLE_TOKEN (speculation off)",
                     b.q_len);
    if (spec_dec_mode == KILN_RT_MULTI_TOKEN && kernel == KILN_RT_KERNEL_MLA_DECODE_SMALL_SMEM &&
        b.q_len > 1)
      return c.error(KILN_ERROR_UNSUPPORTED,
                     "mla_decode_small_smem decodes q_len 1 only (batch.q_len %d); draft tokens "
                     "need spec_dec_mode EXTEND_CONTEXT", b.q_len);
    if (spec_dec_mode == KILN_RT_MULTI_TOKEN && b.q_len > 4)
      return c.error(KILN_ERROR_UNSUPPORTED, "mla_decode supports q_len 1..4 (batch.q_len %d)",
                     b.q_len);
  } else if (kiln_status_t s = checkPrefillFits(c, ctx, page_size); s != KILN_OK) {
    return s;
  }
  if (kiln_status_t s = selectDevice(c, ctx); s != KILN_OK)
    return s;
  // Token-expanded launch: every token becomes its own q_len-1 "sequence" whose keys are
  // the cache positions up to and including its own (causal extend through the decode
  // kernel). Used for prefill and for EXTEND_CONTEXT draft tokens.
  bool expand = phase == KILN_RT_PHASE_PREFILL ||
                (spec_dec_mode == KILN_RT_EXTEND_CONTEXT && b.q_len > 1);
  int32_t tokens = phase == KILN_RT_PHASE_DECODE ? b.batch * b.q_len : b.total_tokens;
  bool small = kernel == KILN_RT_KERNEL_MLA_DECODE_SMALL_SMEM;
  if (phase == KILN_RT_PHASE_PREFILL)
    small = ctx->smemOptin < 231936; // mla_decode needs 226.5 KiB (231,936 B) for > 16 rows
  const char *decodeName = small ? "kiln_mla_decode_small_smem" : "kiln_mla_decode";

  if (ctx->dry)
    return kiln::kernels::ok();
  if (kiln_status_t s = ensureIndex(c, ctx, phase, expand); s != KILN_OK)
    return s;
  void *pool = at(ctx->base[kCaches], cache_offset);
  kiln_mla_decode_params_t dp{};
  dp.q = q;
  dp.latent_cache = pool;
  dp.out = out;
  dp.num_heads = num_heads;
  dp.num_pages = b.num_pages;
  dp.max_pages_per_seq = b.max_pages;
  dp.max_seq_len = b.max_pages * KILN_MLA_PAGE_SIZE;
  dp.softmax_scale = softmaxScale(ctx, KILN_MLA_HEAD_DIM);
  dp.dtype = KILN_DTYPE_BF16;
  dp.stream = ctx->stream;
  if (expand) {
    dp.block_table = ctx->expandedTable;
    dp.seq_lens = ctx->tokenLen;
    dp.batch = tokens;
    dp.q_len = 1;
  } else {
    dp.block_table = b.block_table;
    dp.seq_lens = b.seq_lens;
    dp.batch = b.batch;
    dp.q_len = b.q_len;
  }
  size_t wsBytes = 0;
  if (kiln_status_t s = kiln_mla_decode_workspace_bytes(&dp, &wsBytes); s != KILN_OK)
    return c.launcher(s, "kiln_mla_decode_workspace_bytes");
  if (kiln_status_t s = ensureBuffer(c, ctx, ctx->split, wsBytes); s != KILN_OK)
    return s;
  dp.workspace = wsBytes ? ctx->split.ptr : nullptr;
  dp.workspace_bytes = wsBytes ? ctx->split.bytes : 0;

  kiln_mla_kv_append_params_t ap{};
  ap.kv_c = latent;
  ap.k_pe = static_cast<const char *>(latent) + KILN_MLA_KV_LORA_RANK * kBf16;
  ap.kv_c_token_stride = KILN_MLA_HEAD_DIM;
  ap.k_pe_token_stride = KILN_MLA_HEAD_DIM;
  ap.latent_cache = pool;
  ap.block_table = b.block_table;
  ap.token_batch = ctx->tokenBatch;
  ap.token_pos = ctx->tokenPos;
  ap.num_tokens = tokens;
  ap.batch = b.batch;
  ap.num_pages = b.num_pages;
  ap.max_pages_per_seq = b.max_pages;
  ap.dtype = KILN_DTYPE_BF16;
  ap.stream = ctx->stream;
  kiln_status_t s = kiln_mla_kv_append(&ap);
  ++ctx->launches;
  if (s != KILN_OK)
    return c.launcher(s, "kiln_mla_kv_append");
  s = small ? kiln_mla_decode_small_smem(&dp) : kiln_mla_decode(&dp);
  ++ctx->launches;
  if (s != KILN_OK)
    return c.launcher(s, decodeName);
  return kiln::kernels::ok();
}
