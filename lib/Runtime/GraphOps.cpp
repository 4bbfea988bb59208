// The graph ops compiled code calls (embedding, the norms, linear, rope, add, swiglu, the
// gates, gather_rows): validation against the context's regions, then the Graph/Gemm kernels
// on the context's stream. Sticky: after the step's first failure they return at once.
#include "Context.h"
#include "GraphOpCommon.h"

#include "kiln/Kernels/Gemm.h"
#include "kiln/Kernels/Graph.h"
#include "kiln/Kernels/Moe.h"

#include <cmath>
#include <optional>

using namespace kiln::rt;

extern "C" int32_t kiln_rt_embedding(kiln_rt_context_t *ctx, const void *ids, const void *table,
                                     void *out, int64_t tokens, int64_t vocab, int64_t hidden) {
  KILN_RT_GRAPH_ENTER("kiln_rt_embedding")
  auto run = [&]() -> kiln_status_t {
    if (kiln_status_t s = positive(c, {{"tokens", tokens}, {"vocab", vocab}, {"hidden", hidden}});
        s != KILN_OK)
      return s;
    if (ctx->config.vocab_size > 0 && vocab != ctx->config.vocab_size)
      return c.error(KILN_ERROR_INVALID_ARGUMENT, "vocab %lld != the model's vocab_size %lld",
                     static_cast<long long>(vocab),
                     static_cast<long long>(ctx->config.vocab_size));
    if (kiln_status_t s = checkRanges(c, ctx,
                                      {{"ids", ids, bytesOf({tokens, 4}), 4, false},
                                       bf16("table", table, vocab, hidden),
                                       bf16("out", out, tokens, hidden, true)});
        s != KILN_OK)
      return s;
    return launchValidated(c, ctx, "kiln_embedding_bf16", out, tokens, hidden, [&] {
      return kiln_embedding_bf16(static_cast<const int32_t *>(ids), table, out, tokens, vocab,
                                 hidden, ctx->stream);
    });
  };
  return record(ctx, run());
}

extern "C" int32_t kiln_rt_embedding_rank(kiln_rt_context_t *ctx, const void *ids,
                                          const void *table, void *out, int64_t tokens,
                                          int64_t rows, int64_t hidden) {
  KILN_RT_GRAPH_ENTER("kiln_rt_embedding_rank")
  auto run = [&]() -> kiln_status_t {
    if (kiln_status_t s = positive(c, {{"tokens", tokens}, {"rows", rows}, {"hidden", hidden}});
        s != KILN_OK)
      return s;
    // The graph's block of the vocabulary must be the context's rank's share of it.
    const int64_t ranks = ctx->tpRanks, first = static_cast<int64_t>(ctx->tpRank) * rows;
    if (ctx->config.vocab_size > 0 && rows * ranks != ctx->config.vocab_size)
      return c.error(KILN_ERROR_INVALID_ARGUMENT,
                     "a vocabulary block of %lld rows on %lld tensor-parallel rank(s) is not the "
                     "model's vocab_size %lld (the graph is one rank's of vocab_size / rows "
                     "ranks)",
                     static_cast<long long>(rows), static_cast<long long>(ranks),
                     static_cast<long long>(ctx->config.vocab_size));
    if (kiln_status_t s = checkRanges(c, ctx,
                                      {{"ids", ids, bytesOf({tokens, 4}), 4, false},
                                       bf16("table", table, rows, hidden),
                                       bf16("out", out, tokens, hidden, true)});
        s != KILN_OK)
      return s;
    return launchValidated(c, ctx, "kiln_embedding_rows_bf16", out, tokens, hidden, [&] {
      return kiln_embedding_rows_bf16(static_cast<const int32_t *>(ids), table, out, tokens, first,
                                      rows, hidden, ctx->stream);
    });
  };
  return record(ctx, run());
}

namespace {
kiln_status_t checkNormEpsilon(const Call &c, float eps) {
  if (!(eps >= 0) || std::isinf(eps))
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "eps %g must be finite and >= 0", eps);
  return KILN_OK;
}

// The sizes and epsilon of a norm (rms_norm, add_rms_norm).
kiln_status_t checkNormShape(const Call &c, int64_t rows, int64_t dim, float eps) {
  if (kiln_status_t s = positive(c, {{"rows", rows}, {"dim", dim}}); s != KILN_OK)
    return s;
  return checkNormEpsilon(c, eps);
}

// The weight offset of kiln_rt_rms_norm_offset and kiln_rt_add_rms_norm_offset (1:
// Qwen3-Next's zero-centered weight, -0.0: gpt-oss's), checked here too so that a dry run
// catches it.
kiln_status_t checkWeightOffset(const Call &c, float weightOffset) {
  if (!std::isfinite(weightOffset))
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "weight_offset %g is not finite",
                   static_cast<double>(weightOffset));
  return KILN_OK;
}
} // namespace

namespace {
/// kiln_rt_rms_norm over rows x_stride elements apart (x_stride == dim: dense rows).
kiln_status_t rmsNormRows(const Call &c, kiln_rt_context_t *ctx, const void *x, int64_t xStride,
                          const void *weight, void *out, int64_t rows, int64_t dim, float eps) {
  if (kiln_status_t s = checkNormShape(c, rows, dim, eps); s != KILN_OK)
    return s;
  const bool dense = xStride == dim;
  if (kiln_status_t s = dense ? KILN_OK : checkStride(c, "x", xStride, dim); s != KILN_OK)
    return s;
  if (kiln_status_t s = checkRanges(c, ctx,
                                    {dense ? bf16("x", x, rows, dim)
                                           : stridedBf16("x", x, rows, dim, xStride),
                                     bf16("weight", weight, 1, dim),
                                     bf16("out", out, rows, dim, true)});
      s != KILN_OK)
    return s;
  if (dense)
    return launchValidated(c, ctx, "kiln_rms_norm_bf16", out, rows, dim, [&] {
      return kiln_rms_norm_bf16(x, weight, out, rows, dim, eps, ctx->stream);
    });
  return launchValidated(c, ctx, "kiln_rms_norm_rows_bf16", out, rows, dim, [&] {
    return kiln_rms_norm_rows_bf16(x, xStride, weight, out, rows, dim, eps, ctx->stream);
  });
}
} // namespace

extern "C" int32_t kiln_rt_rms_norm(kiln_rt_context_t *ctx, const void *x, const void *weight,
                                    void *out, int64_t rows, int64_t dim, float eps) {
  KILN_RT_GRAPH_ENTER("kiln_rt_rms_norm")
  return record(ctx, rmsNormRows(c, ctx, x, dim, weight, out, rows, dim, eps));
}

extern "C" int32_t kiln_rt_rms_norm_strided(kiln_rt_context_t *ctx, const void *x,
                                            int64_t x_stride, const void *weight, void *out,
                                            int64_t rows, int64_t dim, float eps) {
  KILN_RT_GRAPH_ENTER("kiln_rt_rms_norm_strided")
  return record(ctx, rmsNormRows(c, ctx, x, x_stride, weight, out, rows, dim, eps));
}

namespace {
/// kiln_rt_add_rms_norm and kiln_rt_add_rms_norm_offset: validated alike, then `launch`
/// (the norm's form, called as launch(a, b, weight, sum, out, rows, dim, eps, stream)); the
/// residual sum is traced too.
template <class Launch>
kiln_status_t addRmsNorm(const Call &c, kiln_rt_context_t *ctx, const void *a, const void *b,
                         const void *weight, void *sum, void *out, int64_t rows, int64_t dim,
                         float eps, Launch launch, const char *launcherName) {
  if (kiln_status_t s = checkNormShape(c, rows, dim, eps); s != KILN_OK)
    return s;
  if (sum == out)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "sum and out are the same buffer (the norm would overwrite the residual)");
  if (kiln_status_t s = checkRanges(
          c, ctx,
          {bf16("a", a, rows, dim), bf16("b", b, rows, dim), bf16("weight", weight, 1, dim),
           bf16("sum", sum, rows, dim, true), bf16("out", out, rows, dim, true)});
      s != KILN_OK)
    return s;
  if (kiln_status_t s = launchValidated(
          c, ctx, launcherName, out, rows, dim,
          [&] { return launch(a, b, weight, sum, out, rows, dim, eps, ctx->stream); });
      s != KILN_OK)
    return s;
  return traceOutput(c, ctx, sum, rows, dim, "sum"); // a no-op when dry
}
} // namespace

extern "C" int32_t kiln_rt_add_rms_norm(kiln_rt_context_t *ctx, const void *a, const void *b,
                                        const void *weight, void *sum, void *out, int64_t rows,
                                        int64_t dim, float eps) {
  KILN_RT_GRAPH_ENTER("kiln_rt_add_rms_norm")
  return record(ctx, addRmsNorm(c, ctx, a, b, weight, sum, out, rows, dim, eps,
                                kiln_add_rms_norm_bf16, "kiln_add_rms_norm_bf16"));
}

extern "C" int32_t kiln_rt_add_rms_norm_offset(kiln_rt_context_t *ctx, const void *a, const void *b,
                                               const void *weight, void *sum, void *out,
                                               int64_t rows, int64_t dim, float eps,
                                               float weight_offset) {
  KILN_RT_GRAPH_ENTER("kiln_rt_add_rms_norm_offset")
  if (kiln_status_t s = checkWeightOffset(c, weight_offset); s != KILN_OK)
    return record(ctx, s);
  auto launch = [weight_offset](const void *a, const void *b, const void *weight, void *sum,
                                void *out, int64_t rows, int64_t dim, float eps, void *stream) {
    return kiln_add_rms_norm_offset_bf16(a, b, weight, sum, out, rows, dim, eps, weight_offset,
                                         stream);
  };
  return record(ctx, addRmsNorm(c, ctx, a, b, weight, sum, out, rows, dim, eps, launch,
                                "kiln_add_rms_norm_offset_bf16"));
}

extern "C" int32_t kiln_rt_rms_norm_offset(kiln_rt_context_t *ctx, const void *x,
                                           int64_t x_token_stride, int64_t x_head_stride,
                                           const void *weight, void *out, int64_t tokens,
                                           int64_t heads, int64_t dim, float eps,
                                           float weight_offset) {
  KILN_RT_GRAPH_ENTER("kiln_rt_rms_norm_offset")
  auto run = [&]() -> kiln_status_t {
    if (kiln_status_t s = positive(c, {{"tokens", tokens}, {"heads", heads}, {"dim", dim}});
        s != KILN_OK)
      return s;
    if (kiln_status_t s = checkNormEpsilon(c, eps); s != KILN_OK)
      return s;
    if (kiln_status_t s = checkWeightOffset(c, weight_offset); s != KILN_OK)
      return s;
    // One head a token reads only the token stride (the head stride is unused).
    const int64_t headStride = heads == 1 ? dim : x_head_stride;
    if (headStride < dim || headStride > (int64_t(1) << 40))
      return c.error(KILN_ERROR_INVALID_ARGUMENT, "x head stride %lld outside [%lld, 2^40]",
                     static_cast<long long>(x_head_stride), static_cast<long long>(dim));
    // A token's rows in x; no token stride fits a span beyond 2^40 (nor overflows here).
    const int64_t limit = int64_t(1) << 40;
    const int64_t tokenSpan =
        heads - 1 <= limit / headStride ? (heads - 1) * headStride + dim : 2 * limit;
    if (x_token_stride < tokenSpan || x_token_stride > (int64_t(1) << 40))
      return c.error(KILN_ERROR_INVALID_ARGUMENT, "x token stride %lld outside [%lld, 2^40]",
                     static_cast<long long>(x_token_stride), static_cast<long long>(tokenSpan));
    // x spans (tokens - 1) token strides and one token's rows (saturated: a too large span
    // fails its range check).
    const uint64_t strides = bytesOf({tokens - 1, x_token_stride, 2});
    const uint64_t xBytes = strides > ~0ull / 2 ? ~0ull : strides + bytesOf({tokenSpan, 2});
    if (kiln_status_t s = checkRanges(c, ctx,
                                      {{"x", x, xBytes, 2, false},
                                       bf16("weight", weight, 1, dim),
                                       {"out", out, bytesOf({tokens, heads, dim, 2}), 2, true}});
        s != KILN_OK)
      return s;
    // In place needs each row's output where its input is: dense rows only.
    const bool dense = headStride == dim && x_token_stride == heads * dim;
    if (!(dense && x == out) && overlaps(out, bytesOf({tokens, heads, dim, 2}), x, xBytes))
      return c.error(KILN_ERROR_INVALID_ARGUMENT,
                     "out overlaps x (only dense rows may be normed in place, out == x)");
    return launchValidated(c, ctx, "kiln_rms_norm_offset_bf16", out, tokens * heads, dim, [&] {
      return kiln_rms_norm_offset_bf16(x, x_token_stride, headStride, weight, out, tokens, heads,
                                       dim, eps, weight_offset, ctx->stream);
    });
  };
  return record(ctx, run());
}

extern "C" int32_t kiln_rt_linear(kiln_rt_context_t *ctx, const void *x, const void *w,
                                  const void *bias, void *out, int64_t m, int64_t n, int64_t k) {
  KILN_RT_GRAPH_ENTER("kiln_rt_linear")
  auto run = [&]() -> kiln_status_t {
    if (kiln_status_t s = positive(c, {{"m", m}, {"n", n}, {"k", k}}); s != KILN_OK)
      return s;
    if (kiln_status_t s = checkRanges(c, ctx, {bf16("x", x, m, k), bf16("w", w, n, k)});
        s != KILN_OK)
      return s;
    if (bias)
      if (kiln_status_t s = checkRanges(c, ctx, {bf16("bias", bias, 1, n)}); s != KILN_OK)
        return s;
    if (kiln_status_t s = checkRanges(c, ctx, {bf16("out", out, m, n, true)}); s != KILN_OK)
      return s;
    return launchValidated(c, ctx, "kiln_gemm_bf16", out, m, n, [&] {
      return kiln_gemm_bf16(ctx->gemm, x, w, bias, out, m, n, k, ctx->base[kWorkspace],
                            KILN_GEMM_WORKSPACE_BYTES, ctx->stream);
    });
  };
  return record(ctx, run());
}

namespace {

// The distance from `a` to `b` in bf16 elements, when it is one a strided batch takes:
// positive, a multiple of 8 and below 2^31.
std::optional<int64_t> batchStride(const void *a, const void *b) {
  const auto from = reinterpret_cast<intptr_t>(a), to = reinterpret_cast<intptr_t>(b);
  if (to <= from || (to - from) % 16 != 0 || (to - from) / 2 > INT32_MAX)
    return std::nullopt;
  return (to - from) / 2;
}

// kiln_rt_linear_pair's one launch, when the plan's layout allows it: entry b of the
// batch reads x (batch stride 0), w0 + b * (w1 - w0) and writes out0 + b * (out1 - out0).
// The distances are the plan's, fixed for a model, so a shape always takes the same path
// and its rows stay invariant.
std::optional<kiln_gemm_strided_batch_t> sharedInputBatch(const void *x, const void *w0,
                                                          const void *w1, void *out0,
                                                          void *out1, int64_t m, int64_t n,
                                                          int64_t k) {
  const std::optional<int64_t> wStride = batchStride(w0, w1), outStride = batchStride(out0, out1);
  const bool aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(w0) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(out0) % 16 == 0;
  if (!wStride || !outStride || n % 8 != 0 || k % 8 != 0 || !aligned)
    return std::nullopt;
  kiln_gemm_strided_batch_t p{};
  p.x = x;
  p.ldx = k;
  p.x_batch_stride = 0;
  p.w = w0;
  p.ldw = k;
  p.w_batch_stride = *wStride;
  p.out = out0;
  p.ldo = n;
  p.out_batch_stride = *outStride;
  p.batch = 2;
  p.m = m;
  p.n = n;
  p.k = k;
  return p;
}

// kiln_rt_linear_pair's and kiln_rt_linear_pair_swiglu's operands: x [m, k], w0 and w1
// [n, k], the two outputs [m, n] apart (named as the call names them).
struct PairOutputs {
  void *first, *second;
  const char *firstName, *secondName;
};
kiln_status_t checkPair(const Call &c, kiln_rt_context *ctx, const void *x, const void *w0,
                        const void *w1, const PairOutputs &out, int64_t m, int64_t n,
                        int64_t k) {
  if (kiln_status_t s = positive(c, {{"m", m}, {"n", n}, {"k", k}}); s != KILN_OK)
    return s;
  if (kiln_status_t s = checkRanges(c, ctx,
                                    {bf16("x", x, m, k), bf16("w0", w0, n, k),
                                     bf16("w1", w1, n, k),
                                     bf16(out.firstName, out.first, m, n, true),
                                     bf16(out.secondName, out.second, m, n, true)});
      s != KILN_OK)
    return s;
  const uint64_t outBytes = bytesOf({m, n, 2}), xBytes = bytesOf({m, k, 2});
  if (overlaps(out.first, outBytes, out.second, outBytes))
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "%s and %s overlap (the two projections would write one buffer)",
                   out.firstName, out.secondName);
  // The GEMM reads x while it writes both outputs.
  for (auto [name, output] : {std::pair<const char *, void *>{out.firstName, out.first},
                              {out.secondName, out.second}})
    if (overlaps(output, outBytes, x, xBytes))
      return c.error(KILN_ERROR_INVALID_ARGUMENT, "%s overlaps x", name);
  return KILN_OK;
}

// The pair's GEMMs: one strided batch where the layout allows it (`batch`), else two.
kiln_status_t launchPair(kiln_rt_context *ctx, const std::optional<kiln_gemm_strided_batch_t> &batch,
                         const void *x, const void *w0, const void *w1, void *out0, void *out1,
                         int64_t m, int64_t n, int64_t k) {
  auto twoGemms = [&] {
    kiln_status_t s = kiln_gemm_bf16(ctx->gemm, x, w0, nullptr, out0, m, n, k,
                                     ctx->base[kWorkspace], KILN_GEMM_WORKSPACE_BYTES,
                                     ctx->stream);
    return s != KILN_OK ? s
                        : kiln_gemm_bf16(ctx->gemm, x, w1, nullptr, out1, m, n, k,
                                         ctx->base[kWorkspace], KILN_GEMM_WORKSPACE_BYTES,
                                         ctx->stream);
  };
  if (!batch)
    return twoGemms();
  const kiln_status_t s = kiln_gemm_bf16_strided_batched(
      ctx->gemm, &*batch, ctx->base[kWorkspace], KILN_GEMM_WORKSPACE_BYTES, ctx->stream);
  // cuBLASLt without an algorithm for the shared input (a shape's choice, the same every
  // call): the two GEMMs, as without pairing.
  return s == KILN_ERROR_UNSUPPORTED ? twoGemms() : s;
}

} // namespace

extern "C" int32_t kiln_rt_linear_pair(kiln_rt_context_t *ctx, const void *x, const void *w0,
                                       const void *w1, void *out0, void *out1, int64_t m,
                                       int64_t n, int64_t k) {
  KILN_RT_GRAPH_ENTER("kiln_rt_linear_pair")
  auto run = [&]() -> kiln_status_t {
    if (kiln_status_t s = checkPair(c, ctx, x, w0, w1, {out0, out1, "out0", "out1"}, m, n, k);
        s != KILN_OK)
      return s;
    const std::optional<kiln_gemm_strided_batch_t> batch =
        sharedInputBatch(x, w0, w1, out0, out1, m, n, k);
    const char *kernel = batch ? "kiln_gemm_bf16_strided_batched" : "kiln_gemm_bf16";
    if (kiln_status_t s = launchValidated(
            c, ctx, kernel, out0, m, n,
            [&] { return launchPair(ctx, batch, x, w0, w1, out0, out1, m, n, k); });
        s != KILN_OK)
      return s;
    return traceOutput(c, ctx, out1, m, n, "second"); // a no-op when dry
  };
  return record(ctx, run());
}

extern "C" int32_t kiln_rt_linear_pair_swiglu(kiln_rt_context_t *ctx, const void *x,
                                              const void *w0, const void *w1, void *gate,
                                              void *up, void *h, int64_t m, int64_t n,
                                              int64_t k) {
  KILN_RT_GRAPH_ENTER("kiln_rt_linear_pair_swiglu")
  auto run = [&]() -> kiln_status_t {
    if (kiln_status_t s = checkPair(c, ctx, x, w0, w1, {gate, up, "gate", "up"}, m, n, k);
        s != KILN_OK)
      return s;
    if (kiln_status_t s = checkRanges(c, ctx, {bf16("h", h, m, n, true)}); s != KILN_OK)
      return s;
    // The GEMM reads x while it writes h; the SwiGLU of the unfused path reads each
    // element of gate and up before it writes it, so h may be exactly one of them.
    const uint64_t xBytes = bytesOf({m, k, 2}), hBytes = bytesOf({m, n, 2});
    if (overlaps(h, hBytes, x, xBytes))
      return c.error(KILN_ERROR_INVALID_ARGUMENT, "h overlaps x");
    for (auto [name, scratch] : {std::pair<const char *, const void *>{"gate", gate},
                                 {"up", up}})
      if (h != scratch && overlaps(h, hBytes, scratch, hBytes))
        return c.error(KILN_ERROR_INVALID_ARGUMENT,
                       "h overlaps %s without being it (the SwiGLU works in place only "
                       "element for element)",
                       name);
    const std::optional<kiln_gemm_strided_batch_t> batch =
        sharedInputBatch(x, w0, w1, gate, up, m, n, k);
    return launchValidated(c, ctx, "kiln_gemm_bf16_pair_swiglu", h, m, n, [&] {
      if (batch) {
        const kiln_status_t fused = kiln_gemm_bf16_pair_swiglu(ctx->gemm, &*batch, h, ctx->stream);
        if (fused != KILN_ERROR_UNSUPPORTED)
          return fused;
      }
      if (kiln_status_t s = launchPair(ctx, batch, x, w0, w1, gate, up, m, n, k); s != KILN_OK)
        return s;
      return kiln_swiglu_bf16(gate, up, h, m * n, ctx->stream);
    });
  };
  return record(ctx, run());
}

extern "C" int32_t kiln_rt_linear_f32out(kiln_rt_context_t *ctx, const void *x, const void *w,
                                         void *out, int64_t m, int64_t n, int64_t k) {
  KILN_RT_GRAPH_ENTER("kiln_rt_linear_f32out")
  auto run = [&]() -> kiln_status_t {
    if (kiln_status_t s = positive(c, {{"m", m}, {"n", n}, {"k", k}}); s != KILN_OK)
      return s;
    if (kiln_status_t s = checkRanges(c, ctx,
                                      {bf16("x", x, m, k), bf16("w", w, n, k),
                                       {"out", out, bytesOf({m, n, 4}), 4, true}});
        s != KILN_OK)
      return s;
    return launchValidatedUntraced(c, ctx, "kiln_gemm_bf16_f32out", [&] {
      return kiln_gemm_bf16_f32out(ctx->gemm, x, w, out, m, n, k, ctx->base[kWorkspace],
                                   KILN_GEMM_WORKSPACE_BYTES, ctx->stream);
    });
  };
  return record(ctx, run());
}

extern "C" int32_t kiln_rt_sigmoid_gate(kiln_rt_context_t *ctx, const void *x, const void *w,
                                        const void *value, void *out, int64_t rows,
                                        int64_t dim, int64_t cols) {
  KILN_RT_GRAPH_ENTER("kiln_rt_sigmoid_gate")
  auto run = [&]() -> kiln_status_t {
    if (kiln_status_t s = positive(c, {{"rows", rows}, {"dim", dim}, {"cols", cols}});
        s != KILN_OK)
      return s;
    if (kiln_status_t s = checkRanges(c, ctx,
                                      {bf16("x", x, rows, dim), bf16("w", w, 1, dim),
                                       bf16("value", value, rows, cols),
                                       bf16("out", out, rows, cols, true)});
        s != KILN_OK)
      return s;
    return launchValidated(c, ctx, "kiln_sigmoid_gate_bf16", out, rows, cols, [&] {
      return kiln_sigmoid_gate_bf16(x, w, value, out, rows, dim, cols, ctx->stream);
    });
  };
  return record(ctx, run());
}

namespace {
using GatedNormLauncher = kiln_status_t (*)(const void *, const void *, const void *, void *,
                                            int64_t, int64_t, int64_t, int64_t, float, void *);

/// kiln_rt_gated_rms_norm and kiln_rt_rms_norm_gate: validated alike (the weight has
/// weightElems elements), then `launch` (the order of norm and gate).
kiln_status_t gatedNorm(const Call &c, kiln_rt_context_t *ctx, const void *x, const void *gate,
                        const void *weight, void *out, int64_t rows, int64_t width,
                        int64_t gate_stride, int64_t group_size, float eps, int64_t weightElems,
                        GatedNormLauncher launch, const char *launcherName) {
  if (kiln_status_t s = checkNormShape(c, rows, width, eps); s != KILN_OK)
    return s;
  if (kiln_status_t s = positive(c, {{"group_size", group_size}}); s != KILN_OK)
    return s;
  if (width % group_size != 0)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "group_size %lld does not divide width %lld",
                   static_cast<long long>(group_size), static_cast<long long>(width));
  if (kiln_status_t s = checkStride(c, "gate", gate_stride, width); s != KILN_OK)
    return s;
  if (kiln_status_t s = checkRanges(
          c, ctx,
          {bf16("x", x, rows, width), stridedBf16("gate", gate, rows, width, gate_stride),
           bf16("weight", weight, 1, weightElems), bf16("out", out, rows, width, true)});
      s != KILN_OK)
    return s;
  return launchValidated(c, ctx, launcherName, out, rows, width, [&] {
    return launch(x, gate, weight, out, rows, width, gate_stride, group_size, eps, ctx->stream);
  });
}
} // namespace

extern "C" int32_t kiln_rt_gated_rms_norm(kiln_rt_context_t *ctx, const void *x,
                                          const void *gate, const void *weight, void *out,
                                          int64_t rows, int64_t width, int64_t gate_stride,
                                          int64_t group_size, float eps) {
  KILN_RT_GRAPH_ENTER("kiln_rt_gated_rms_norm")
  return record(ctx, gatedNorm(c, ctx, x, gate, weight, out, rows, width, gate_stride, group_size,
                               eps, width, kiln_gated_rms_norm_bf16, "kiln_gated_rms_norm_bf16"));
}

extern "C" int32_t kiln_rt_rms_norm_gate(kiln_rt_context_t *ctx, const void *x, const void *gate,
                                         const void *weight, void *out, int64_t rows, int64_t width,
                                         int64_t gate_stride, int64_t group_size, float eps) {
  KILN_RT_GRAPH_ENTER("kiln_rt_rms_norm_gate")
  return record(ctx,
                gatedNorm(c, ctx, x, gate, weight, out, rows, width, gate_stride, group_size, eps,
                          group_size, kiln_rms_norm_gate_bf16, "kiln_rms_norm_gate_bf16"));
}

extern "C" int32_t kiln_rt_sigmoid_mul(kiln_rt_context_t *ctx, const void *x, const void *gate,
                                       void *out, int64_t rows, int64_t dim, int64_t gate_stride) {
  KILN_RT_GRAPH_ENTER("kiln_rt_sigmoid_mul")
  auto run = [&]() -> kiln_status_t {
    if (kiln_status_t s = positive(c, {{"rows", rows}, {"dim", dim}}); s != KILN_OK)
      return s;
    if (kiln_status_t s = checkStride(c, "gate", gate_stride, dim); s != KILN_OK)
      return s;
    if (kiln_status_t s =
            checkRanges(c, ctx,
                        {bf16("x", x, rows, dim), stridedBf16("gate", gate, rows, dim, gate_stride),
                         bf16("out", out, rows, dim, true)});
        s != KILN_OK)
      return s;
    return launchValidated(c, ctx, "kiln_sigmoid_mul_bf16", out, rows, dim, [&] {
      return kiln_sigmoid_mul_bf16(x, gate, out, rows, dim, gate_stride, ctx->stream);
    });
  };
  return record(ctx, run());
}

extern "C" int32_t kiln_rt_activation(kiln_rt_context_t *ctx, const void *x, void *out,
                                      int64_t n, int32_t kind) {
  KILN_RT_GRAPH_ENTER("kiln_rt_activation")
  auto run = [&]() -> kiln_status_t {
    if (kiln_status_t s = positive(c, {{"n", n}}); s != KILN_OK)
      return s;
    bool known = false;
#define KILN_RT_ACTIVATION(name, value, str) known = known || kind == value;
#include "kiln/Runtime/ABI.def"
    if (!known)
      return c.error(KILN_ERROR_INVALID_ARGUMENT, "activation kind %d unknown", kind);
    if (kiln_status_t s = checkRanges(c, ctx, {bf16("x", x, 1, n), bf16("out", out, 1, n, true)});
        s != KILN_OK)
      return s;
    return launchValidated(c, ctx, "kiln_activation_bf16", out, 1, n, [&] {
      return kiln_activation_bf16(x, out, n, kind, ctx->stream);
    });
  };
  return record(ctx, run());
}

extern "C" int32_t kiln_rt_moe(kiln_rt_context_t *ctx, const void *x, const void *logits,
                               const void *gate, const void *up, const void *down,
                               const void *score_bias, const void *gate_bias, const void *up_bias,
                               const void *down_bias, void *out, void *scratch, int64_t tokens,
                               int64_t hidden, int64_t inter, int64_t experts, int32_t top_k,
                               int32_t flags, int32_t groups, int32_t top_groups, float scale,
                               int32_t activation, float glu_alpha, float glu_limit,
                               int64_t scratch_per_token) {
  KILN_RT_GRAPH_ENTER("kiln_rt_moe")
  auto run = [&]() -> kiln_status_t {
    if (kiln_status_t s = positive(c, {{"tokens", tokens},
                                       {"hidden", hidden},
                                       {"inter", inter},
                                       {"experts", experts},
                                       {"top_k", top_k},
                                       {"groups", groups},
                                       {"top_groups", top_groups}});
        s != KILN_OK)
      return s;
    // The scratch the compiler planned must be what the kernel carves.
    uint64_t needed = 0;
    if (kiln_status_t s = kiln_moe_scratch_bytes_per_token(hidden, inter, top_k, &needed);
        s != KILN_OK)
      return c.launcher(s, "kiln_moe_scratch_bytes_per_token");
    if (static_cast<uint64_t>(scratch_per_token) != needed)
      return c.error(KILN_ERROR_INVALID_ARGUMENT,
                     "scratch_per_token %lld != the %llu bytes kiln_moe needs a token",
                     static_cast<long long>(scratch_per_token),
                     static_cast<unsigned long long>(needed));
    // gpt-oss's expert form, checked here too so that a dry run catches it: the gate's
    // bias and the clamped SwiGLU need gated experts, the clamp a limit.
    const bool clamped = flags & KILN_MOE_CLAMPED_SWIGLU;
    if (!gate && (gate_bias || clamped))
      return c.error(KILN_ERROR_INVALID_ARGUMENT, "%s needs gated experts (gate is null)",
                     gate_bias ? "gate_bias" : "KILN_MOE_CLAMPED_SWIGLU");
    if (clamped && (!std::isfinite(glu_alpha) || !std::isfinite(glu_limit) || !(glu_limit > 0)))
      return c.error(KILN_ERROR_INVALID_ARGUMENT,
                     "glu_alpha %g and glu_limit %g must be finite, the limit > 0",
                     static_cast<double>(glu_alpha), static_cast<double>(glu_limit));
    const bool f32Logits = flags & KILN_MOE_F32_LOGITS;
    if (kiln_status_t s = checkRanges(
            c, ctx,
            {bf16("x", x, tokens, hidden),
             {"logits", logits, bytesOf({tokens, experts, f32Logits ? 4 : 2}),
              f32Logits ? 4u : 2u, false},
             bf16("up", up, experts * inter, hidden), bf16("down", down, experts * hidden, inter),
             bf16("out", out, tokens, hidden, true),
             {"scratch", scratch, bytesOf({tokens, scratch_per_token}), 16, true}});
        s != KILN_OK)
      return s;
    if (gate)
      if (kiln_status_t s = checkRanges(c, ctx, {bf16("gate", gate, experts * inter, hidden)});
          s != KILN_OK)
        return s;
    if (score_bias)
      if (kiln_status_t s =
              checkRanges(c, ctx, {{"score_bias", score_bias, bytesOf({experts, 4}), 4, false}});
          s != KILN_OK)
        return s;
    // The expert GEMMs' biases, each optional (kiln_moe checks which form may take them).
    const struct {
      const char *what;
      const void *p;
      int64_t cols;
    } biases[] = {{"gate_bias", gate_bias, inter},
                  {"up_bias", up_bias, inter},
                  {"down_bias", down_bias, hidden}};
    for (const auto &b : biases)
      if (b.p)
        if (kiln_status_t s = checkRanges(c, ctx, {bf16(b.what, b.p, experts, b.cols)});
            s != KILN_OK)
          return s;
    return launchValidated(c, ctx, "kiln_moe", out, tokens, hidden, [&] {
      kiln_moe_params_t p{};
      p.x = x;
      p.logits = logits;
      p.gate = gate;
      p.up = up;
      p.down = down;
      p.score_bias = static_cast<const float *>(score_bias);
      p.gate_bias = gate_bias;
      p.up_bias = up_bias;
      p.down_bias = down_bias;
      p.out = out;
      p.scratch = scratch;
      p.tokens = tokens;
      p.hidden = hidden;
      p.inter = inter;
      p.experts = experts;
      p.top_k = top_k;
      // Decode and verify steps keep a token's bits independent of the batch (lossless
      // speculation); prefill and extend group the pairs by expert.
      p.flags = flags | (ctx->phase == KILN_RT_PHASE_DECODE ? KILN_MOE_ROW_INVARIANT
                                                            : KILN_MOE_GROUPED);
      p.groups = groups;
      p.top_groups = top_groups;
      p.scale = scale;
      p.activation = activation;
      p.glu_alpha = glu_alpha;
      p.glu_limit = glu_limit;
      p.gemm = ctx->gemm;
      p.gemm_workspace = ctx->base[kWorkspace];
      p.gemm_workspace_bytes = KILN_GEMM_WORKSPACE_BYTES;
      p.stream = ctx->stream;
      return kiln_moe(&p);
    });
  };
  return record(ctx, run());
}

namespace {

// The checks kiln_rt_rope and kiln_rt_rope_pair share (sizes, rope parameters, the step's
// tokens); on success `rope` holds the kernel's parameters.
kiln_status_t checkRope(const Call &c, const kiln_rt_context_t *ctx, int64_t tokens,
                        int64_t head_dim, int64_t rotary_dim, int32_t rope_type, float theta,
                        float factor, float low, float high, int64_t original_max_position,
                        float attention_factor, kiln_rope_params_t &rope) {
  if (head_dim % 2 != 0 || head_dim > KILN_ROPE_MAX_HEAD_DIM)
    return c.error(KILN_ERROR_UNSUPPORTED, "head_dim %lld must be even and <= %d",
                   static_cast<long long>(head_dim), KILN_ROPE_MAX_HEAD_DIM);
  if (rotary_dim < 0 || rotary_dim % 2 != 0 || rotary_dim > head_dim)
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "rotary_dim %lld must be 0 (the whole head) or even and <= head_dim %lld",
                   static_cast<long long>(rotary_dim), static_cast<long long>(head_dim));
  bool known = false;
#define KILN_RT_ROPE(name, value, str) known = known || rope_type == value;
#include "kiln/Runtime/ABI.def"
  if (!known)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "rope_type %d unknown", rope_type);
  if (!(theta > 0) || std::isinf(theta))
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "theta %g must be finite and > 0", theta);
  if (rope_type != KILN_RT_ROPE_DEFAULT && (!(factor > 0) || std::isinf(factor)))
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "%s rope: factor %g must be finite and > 0",
                   kiln_rt_rope_name(rope_type), factor);
  if (rope_type == KILN_RT_ROPE_LLAMA3 &&
      (!(low > 0) || !(high > low) || original_max_position < 1))
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "llama3 rope: need 0 < low_freq_factor (%g) < high_freq_factor (%g) and "
                   "original_max_position (%lld) >= 1", low, high,
                   static_cast<long long>(original_max_position));
  if (rope_type == KILN_RT_ROPE_YARN && (!(high >= low) || std::isinf(high) || std::isinf(low)))
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "yarn rope: correction range [%g, %g] must be finite with low <= high", low,
                   high);
  if (!(attention_factor > 0) || std::isinf(attention_factor))
    return c.error(KILN_ERROR_INVALID_ARGUMENT,
                   "attention_factor %g must be finite and > 0 (1 for no scaling)",
                   attention_factor);
  if (tokens != ctx->tokens)
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "tokens %lld != the step's %d tokens",
                   static_cast<long long>(tokens), ctx->tokens);
  rope = kiln_rope_params_t{};
  rope.type = rope_type;
  rope.theta = theta;
  rope.factor = factor;
  rope.low = low;
  rope.high = high;
  rope.original_max_position = original_max_position;
  rope.attention_factor = attention_factor;
  return KILN_OK;
}

} // namespace

extern "C" int32_t kiln_rt_rope(kiln_rt_context_t *ctx, const void *x, const void *positions,
                                void *out, int64_t tokens, int64_t heads, int64_t head_dim,
                                int64_t rotary_dim, int32_t rope_type, float theta, float factor,
                                float low, float high, int64_t original_max_position,
                                float attention_factor) {
  KILN_RT_GRAPH_ENTER("kiln_rt_rope")
  auto run = [&]() -> kiln_status_t {
    if (kiln_status_t s =
            positive(c, {{"tokens", tokens}, {"heads", heads}, {"head_dim", head_dim}});
        s != KILN_OK)
      return s;
    kiln_rope_params_t rope;
    if (kiln_status_t s = checkRope(c, ctx, tokens, head_dim, rotary_dim, rope_type, theta,
                                    factor, low, high, original_max_position, attention_factor,
                                    rope);
        s != KILN_OK)
      return s;
    if (kiln_status_t s = checkRanges(
            c, ctx,
            {bf16("x", x, tokens, heads * head_dim),
             {"positions", positions, bytesOf({tokens, 4}), 4, false},
             bf16("out", out, tokens, heads * head_dim, true)});
        s != KILN_OK)
      return s;
    return launchValidated(c, ctx, "kiln_rope_bf16", out, tokens, heads * head_dim, [&] {
      return kiln_rope_bf16(x, static_cast<const int32_t *>(positions), out, tokens, heads,
                            head_dim, rotary_dim, &rope, ctx->stream);
    });
  };
  return record(ctx, run());
}

extern "C" int32_t kiln_rt_rope_pair(kiln_rt_context_t *ctx, const void *x0, const void *x1,
                                     const void *positions, void *out0, void *out1,
                                     int64_t tokens, int64_t heads0, int64_t heads1,
                                     int64_t head_dim, int64_t rotary_dim, int32_t rope_type,
                                     float theta, float factor, float low, float high,
                                     int64_t original_max_position, float attention_factor) {
  KILN_RT_GRAPH_ENTER("kiln_rt_rope_pair")
  auto run = [&]() -> kiln_status_t {
    if (kiln_status_t s = positive(c, {{"tokens", tokens},
                                       {"heads0", heads0},
                                       {"heads1", heads1},
                                       {"head_dim", head_dim}});
        s != KILN_OK)
      return s;
    kiln_rope_params_t rope;
    if (kiln_status_t s = checkRope(c, ctx, tokens, head_dim, rotary_dim, rope_type, theta,
                                    factor, low, high, original_max_position, attention_factor,
                                    rope);
        s != KILN_OK)
      return s;
    if (kiln_status_t s = checkRanges(
            c, ctx,
            {bf16("x0", x0, tokens, heads0 * head_dim), bf16("x1", x1, tokens, heads1 * head_dim),
             {"positions", positions, bytesOf({tokens, 4}), 4, false},
             bf16("out0", out0, tokens, heads0 * head_dim, true),
             bf16("out1", out1, tokens, heads1 * head_dim, true)});
        s != KILN_OK)
      return s;
    // One block rotates a token of both tensors at once (kiln_rope_pair_bf16).
    const uint64_t bytes0 = bytesOf({tokens, heads0, head_dim, 2}),
                   bytes1 = bytesOf({tokens, heads1, head_dim, 2});
    if (overlaps(out0, bytes0, x1, bytes1) || overlaps(out1, bytes1, x0, bytes0) ||
        overlaps(out0, bytes0, out1, bytes1))
      return c.error(KILN_ERROR_INVALID_ARGUMENT,
                     "out0 and out1 must not overlap each other or the other tensor's input");
    kiln_rope_pair_t p{};
    p.x0 = x0;
    p.x1 = x1;
    p.out0 = out0;
    p.out1 = out1;
    p.positions = static_cast<const int32_t *>(positions);
    p.tokens = tokens;
    p.heads0 = heads0;
    p.heads1 = heads1;
    p.head_dim = head_dim;
    p.rotary_dim = rotary_dim;
    p.rope = rope;
    p.stream = ctx->stream;
    if (kiln_status_t s = launchValidated(c, ctx, "kiln_rope_pair_bf16", out0, tokens,
                                          heads0 * head_dim,
                                          [&] { return kiln_rope_pair_bf16(&p); });
        s != KILN_OK)
      return s;
    return traceOutput(c, ctx, out1, tokens, heads1 * head_dim, "second"); // no-op when dry
  };
  return record(ctx, run());
}

namespace {
using ElementwiseLauncher = kiln_status_t (*)(const void *, const void *, void *, int64_t,
                                              void *);

/// The element-wise ops (add, swiglu): two bf16 inputs and one output of n elements,
/// validated alike, then one launch.
kiln_status_t runElementwise(const Call &c, kiln_rt_context *ctx, const char *lhsName,
                             const void *lhs, const char *rhsName, const void *rhs, void *out,
                             int64_t n, ElementwiseLauncher launch, const char *launcherName) {
  if (kiln_status_t s = positive(c, {{"n", n}}); s != KILN_OK)
    return s;
  if (kiln_status_t s = checkRanges(c, ctx,
                                    {bf16(lhsName, lhs, 1, n), bf16(rhsName, rhs, 1, n),
                                     bf16("out", out, 1, n, true)});
      s != KILN_OK)
    return s;
  return launchValidated(c, ctx, launcherName, out, 1, n,
                         [&] { return launch(lhs, rhs, out, n, ctx->stream); });
}
} // namespace

extern "C" int32_t kiln_rt_add(kiln_rt_context_t *ctx, const void *a, const void *b, void *out,
                               int64_t n) {
  KILN_RT_GRAPH_ENTER("kiln_rt_add")
  return record(ctx, runElementwise(c, ctx, "a", a, "b", b, out, n, kiln_add_bf16,
                                    "kiln_add_bf16"));
}

extern "C" int32_t kiln_rt_swiglu(kiln_rt_context_t *ctx, const void *gate, const void *up,
                                  void *out, int64_t n) {
  KILN_RT_GRAPH_ENTER("kiln_rt_swiglu")
  return record(ctx, runElementwise(c, ctx, "gate", gate, "up", up, out, n, kiln_swiglu_bf16,
                                    "kiln_swiglu_bf16"));
}

extern "C" int32_t kiln_rt_concat(kiln_rt_context_t *ctx, const void *a, const void *b,
                                  void *out, int64_t rows, int64_t cols_a, int64_t cols_b) {
  KILN_RT_GRAPH_ENTER("kiln_rt_concat")
  auto run = [&]() -> kiln_status_t {
    if (kiln_status_t s =
            positive(c, {{"rows", rows}, {"cols_a", cols_a}, {"cols_b", cols_b}});
        s != KILN_OK)
      return s;
    if (kiln_status_t s = checkRanges(c, ctx,
                                      {bf16("a", a, rows, cols_a), bf16("b", b, rows, cols_b),
                                       bf16("out", out, rows, cols_a + cols_b, true)});
        s != KILN_OK)
      return s;
    return launchValidated(c, ctx, "kiln_concat_bf16", out, rows, cols_a + cols_b, [&] {
      return kiln_concat_bf16(a, b, out, rows, cols_a, cols_b, ctx->stream);
    });
  };
  return record(ctx, run());
}

extern "C" int32_t kiln_rt_argmax(kiln_rt_context_t *ctx, const void *logits, void *out,
                                  int64_t rows, int64_t cols) {
  KILN_RT_GRAPH_ENTER("kiln_rt_argmax")
  auto run = [&]() -> kiln_status_t {
    if (kiln_status_t s = positive(c, {{"rows", rows}, {"cols", cols}}); s != KILN_OK)
      return s;
    if (kiln_status_t s = checkRanges(c, ctx,
                                      {bf16("logits", logits, rows, cols),
                                       {"out", out, bytesOf({rows, 4}), 4, true}});
        s != KILN_OK)
      return s;
    return launchValidatedUntraced(c, ctx, "kiln_argmax_bf16", [&] {
      return kiln_argmax_bf16(logits, static_cast<int32_t *>(out), rows, cols, ctx->stream);
    });
  };
  return record(ctx, run());
}

extern "C" int32_t kiln_rt_next_tokens(kiln_rt_context_t *ctx, const void *ids,
                                       const void *picks, const void *rows, void *out,
                                       int64_t tokens, int64_t num_rows) {
  KILN_RT_GRAPH_ENTER("kiln_rt_next_tokens")
  auto run = [&]() -> kiln_status_t {
    if (kiln_status_t s = positive(c, {{"tokens", tokens}, {"num_rows", num_rows}});
        s != KILN_OK)
      return s;
    if (tokens != ctx->tokens)
      return c.error(KILN_ERROR_INVALID_ARGUMENT, "tokens %lld != the step's %d",
                     static_cast<long long>(tokens), ctx->tokens);
    if (kiln_status_t s = checkRanges(c, ctx,
                                      {{"ids", ids, bytesOf({tokens, 4}), 4, false},
                                       {"picks", picks, bytesOf({num_rows, 4}), 4, false},
                                       {"rows", rows, bytesOf({num_rows, 4}), 4, false},
                                       {"out", out, bytesOf({tokens, 4}), 4, true}});
        s != KILN_OK)
      return s;
    if (ids == out)
      return c.error(KILN_ERROR_INVALID_ARGUMENT, "out aliases ids");
    return launchValidatedUntraced(c, ctx, "kiln_next_tokens_i32", [&] {
      return kiln_next_tokens_i32(static_cast<const int32_t *>(ids),
                                  static_cast<const int32_t *>(picks),
                                  static_cast<const int32_t *>(rows),
                                  static_cast<int32_t *>(out), tokens, num_rows, ctx->stream);
    });
  };
  return record(ctx, run());
}

extern "C" int32_t kiln_rt_gather_rows(kiln_rt_context_t *ctx, const void *x, const void *rows,
                                       void *out, int64_t num_rows, int64_t dim,
                                       int64_t num_source_rows) {
  KILN_RT_GRAPH_ENTER("kiln_rt_gather_rows")
  auto run = [&]() -> kiln_status_t {
    if (kiln_status_t s = positive(
            c, {{"num_rows", num_rows}, {"dim", dim}, {"num_source_rows", num_source_rows}});
        s != KILN_OK)
      return s;
    if (kiln_status_t s = checkRanges(c, ctx,
                                      {bf16("x", x, num_source_rows, dim),
                                       {"rows", rows, bytesOf({num_rows, 4}), 4, false},
                                       bf16("out", out, num_rows, dim, true)});
        s != KILN_OK)
      return s;
    return launchValidated(c, ctx, "kiln_gather_rows_bf16", out, num_rows, dim, [&] {
      return kiln_gather_rows_bf16(x, static_cast<const int32_t *>(rows), out, num_rows, dim,
                                   num_source_rows, ctx->stream);
    });
  };
  return record(ctx, run());
}
