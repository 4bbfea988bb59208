// C ABI launchers of the graph glue kernels: argument validation (before any CUDA call,
// so it runs on machines without a GPU too), the RoPE frequency table, dispatch.
#include "kiln/Kernels/Graph.h"

#include "GraphInternal.h"
#include "RopeFrequencies.h"
#include "ArgChecker.h"
#include "ProgrammaticLaunch.h"
#include "StatusInternal.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>

using namespace kiln::kernels;
using namespace kiln::graph;

namespace {

using Checker = ArgChecker;

kiln_status_t launched(const char *kernel, cudaError_t error) {
  if (error != cudaSuccess)
    return fail(KILN_ERROR_CUDA, "%s: kernel launch failed: %s", kernel,
                cudaGetErrorString(error));
  return ok();
}

cudaStream_t asStream(void *stream) { return static_cast<cudaStream_t>(stream); }

// The rope parameters beyond head_dim; false after recording the message.
bool checkRopeParams(Checker &c, const kiln_rope_params_t &p) {
  if (p.type < kRopeDefault || p.type > kRopeYarn) {
    c.status = fail(KILN_ERROR_INVALID_ARGUMENT,
                    "%s: rope->type %d is not a KILN_RT_ROPE_* value (0 default, 1 linear, "
                    "2 llama3, 3 yarn)",
                    c.kernel, static_cast<int>(p.type));
    return false;
  }
  if (!c.positiveFloat(p.theta, "rope->theta") || !c.finite(p.attention_factor, "rope->attention_factor"))
    return false;
  if (p.type != kRopeDefault && !c.positiveFloat(p.factor, "rope->factor"))
    return false;
  if (p.type == kRopeLlama3) {
    if (!c.positiveFloat(p.low, "rope->low (low_freq_factor)") ||
        !c.positiveFloat(p.high, "rope->high (high_freq_factor)") ||
        !c.positive(p.original_max_position, "rope->original_max_position"))
      return false;
    if (p.high == p.low) {
      c.status = fail(KILN_ERROR_INVALID_ARGUMENT,
                      "%s: rope->high (high_freq_factor) equals rope->low (low_freq_factor)",
                      c.kernel);
      return false;
    }
  }
  if (p.type == kRopeYarn && (!c.finite(p.low, "rope->low") || !c.finite(p.high, "rope->high")))
    return false;
  return true;
}

bool sameRope(const kiln_rope_params_t &a, const kiln_rope_params_t &b) {
  return a.type == b.type && a.theta == b.theta && a.factor == b.factor && a.low == b.low &&
         a.high == b.high && a.original_max_position == b.original_max_position;
}

// The frequency table of (params, the rotated dims: head_dim, or rotary_dim of a partial
// rope): a few per thread are kept, so the layers of a step (which share their rope)
// compute it once.
const RopeTable *ropeTable(const kiln_rope_params_t &p, int64_t dim) {
  struct Entry {
    bool used = false;
    kiln_rope_params_t params;
    int64_t dim;
    RopeTable table;
  };
  constexpr int kEntries = 4;
  thread_local Entry cache[kEntries];
  thread_local int next = 0;
  for (Entry &e : cache)
    if (e.used && e.dim == dim && sameRope(e.params, p))
      return &e.table;
  Entry &e = cache[next];
  next = (next + 1) % kEntries;
  e.used = false;
  if (!ropeInverseFrequencies(p, dim, e.table.invFreq))
    return nullptr;
  for (int64_t i = 0; i < dim / 2; ++i)
    if (!std::isfinite(e.table.invFreq[i]))
      return nullptr;
  e.params = p;
  e.dim = dim;
  e.used = true;
  return &e.table;
}

} // namespace

extern "C" kiln_status_t kiln_embedding_bf16(const int32_t *ids, const void *table, void *out,
                                             int64_t tokens, int64_t vocab, int64_t hidden,
                                             void *stream) {
  Checker c{"kiln_embedding_bf16"};
  if (!c.notNull(ids, "ids") || !c.notNull(table, "table") || !c.notNull(out, "out") ||
      !c.elementAligned(ids, 4, "ids") || !c.elementAligned(table, 2, "table") ||
      !c.elementAligned(out, 2, "out") || !c.nonNegative(tokens, "tokens") ||
      !c.positive(vocab, "vocab") || !c.positive(hidden, "hidden") ||
      !c.sizeFits(vocab, hidden, "table") || !c.sizeFits(tokens, hidden, "out"))
    return c.status;
  if (tokens == 0)
    return ok();
  return launched(c.kernel,
                  launchGatherRows(table, ids, out, tokens, hidden, vocab, asStream(stream)));
}

extern "C" kiln_status_t kiln_embedding_rows_bf16(const int32_t *ids, const void *table, void *out,
                                                  int64_t tokens, int64_t first, int64_t rows,
                                                  int64_t hidden, void *stream) {
  Checker c{"kiln_embedding_rows_bf16"};
  if (!c.notNull(ids, "ids") || !c.notNull(table, "table") || !c.notNull(out, "out") ||
      !c.elementAligned(ids, 4, "ids") || !c.elementAligned(table, 2, "table") ||
      !c.elementAligned(out, 2, "out") || !c.nonNegative(tokens, "tokens") ||
      !c.nonNegative(first, "first") || !c.atMost(first, INT32_MAX, "first") ||
      !c.positive(rows, "rows") || !c.positive(hidden, "hidden") ||
      !c.sizeFits(rows, hidden, "table") || !c.sizeFits(tokens, hidden, "out"))
    return c.status;
  if (tokens == 0)
    return ok();
  return launched(c.kernel,
                  launchGatherRows(table, ids, out, tokens, hidden, rows, asStream(stream), first));
}

extern "C" kiln_status_t kiln_blocks_to_columns_bf16(const void *blocks, void *out, int64_t parts,
                                                     int64_t rows, int64_t cols, void *stream) {
  Checker c{"kiln_blocks_to_columns_bf16"};
  if (!c.notNull(blocks, "blocks") || !c.notNull(out, "out") ||
      !c.elementAligned(blocks, 2, "blocks") || !c.elementAligned(out, 2, "out") ||
      !c.positive(parts, "parts") || !c.nonNegative(rows, "rows") || !c.positive(cols, "cols") ||
      !c.sizeFits(parts, cols, "a row of out") || !c.sizeFits(rows, parts * cols, "out"))
    return c.status;
  if (rows == 0)
    return ok();
  // Part p is a [rows, cols] matrix at blocks + p * rows * cols; it lands in out's columns
  // [p * cols, (p + 1) * cols): one strided 2D copy a part, captured by CUDA graphs as a
  // memcpy node.
  const size_t width = static_cast<size_t>(cols) * 2, pitch = width * static_cast<size_t>(parts);
  for (int64_t p = 0; p < parts; ++p) {
    const auto *from = static_cast<const char *>(blocks) + static_cast<size_t>(p * rows) * width;
    char *to = static_cast<char *>(out) + static_cast<size_t>(p) * width;
    if (cudaError_t e = cudaMemcpy2DAsync(to, pitch, from, width, width, static_cast<size_t>(rows),
                                          cudaMemcpyDeviceToDevice, asStream(stream));
        e != cudaSuccess)
      return launched(c.kernel, e);
  }
  return ok();
}

extern "C" kiln_status_t kiln_gather_rows_bf16(const void *x, const int32_t *rows, void *out,
                                               int64_t num_rows, int64_t dim,
                                               int64_t num_source_rows, void *stream) {
  Checker c{"kiln_gather_rows_bf16"};
  if (!c.notNull(x, "x") || !c.notNull(rows, "rows") || !c.notNull(out, "out") ||
      !c.elementAligned(x, 2, "x") || !c.elementAligned(rows, 4, "rows") ||
      !c.elementAligned(out, 2, "out") || !c.nonNegative(num_rows, "num_rows") ||
      !c.positive(dim, "dim") || !c.positive(num_source_rows, "num_source_rows") ||
      !c.sizeFits(num_source_rows, dim, "x") || !c.sizeFits(num_rows, dim, "out"))
    return c.status;
  if (num_rows == 0)
    return ok();
  return launched(c.kernel, launchGatherRows(x, rows, out, num_rows, dim, num_source_rows,
                                             asStream(stream)));
}

namespace {
// A norm's epsilon: finite and >= 0 (0 only divides by zero on an all-zero row).
bool normEpsilonValid(Checker &c, float eps) {
  if (std::isfinite(eps) && eps >= 0.0f)
    return true;
  c.status = fail(KILN_ERROR_INVALID_ARGUMENT, "%s: eps must be finite and >= 0 (got %g)",
                  c.kernel, static_cast<double>(eps));
  return false;
}
} // namespace

extern "C" kiln_status_t kiln_rms_norm_bf16(const void *x, const void *weight, void *out,
                                            int64_t rows, int64_t dim, float eps,
                                            void *stream) {
  Checker c{"kiln_rms_norm_bf16"};
  if (!c.notNull(x, "x") || !c.notNull(weight, "weight") || !c.notNull(out, "out") ||
      !c.elementAligned(x, 2, "x") || !c.elementAligned(weight, 2, "weight") ||
      !c.elementAligned(out, 2, "out") || !c.nonNegative(rows, "rows") ||
      !c.positive(dim, "dim") || !c.sizeFits(rows, dim, "x"))
    return c.status;
  if (!normEpsilonValid(c, eps))
    return c.status;
  if (rows == 0)
    return ok();
  return launched(c.kernel, launchRmsNorm(x, weight, out, rows, dim, eps, asStream(stream)));
}

extern "C" kiln_status_t kiln_rms_norm_rows_bf16(const void *x, int64_t x_row_stride,
                                                 const void *weight, void *out, int64_t rows,
                                                 int64_t dim, float eps, void *stream) {
  if (x_row_stride == dim)
    return kiln_rms_norm_bf16(x, weight, out, rows, dim, eps, stream);
  Checker c{"kiln_rms_norm_rows_bf16"};
  if (!c.notNull(x, "x") || !c.notNull(weight, "weight") || !c.notNull(out, "out") ||
      !c.nonNegative(rows, "rows") || !c.positive(dim, "dim") ||
      !c.sizeFits(rows, x_row_stride, "x"))
    return c.status;
  if (x_row_stride < dim)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: x_row_stride %lld < dim %lld", c.kernel,
                static_cast<long long>(x_row_stride), static_cast<long long>(dim));
  if (!rmsNormStridedFits(x, x_row_stride, weight, out, dim))
    return fail(KILN_ERROR_UNSUPPORTED,
                "%s: strided rows need dim (%lld) and x_row_stride (%lld) multiples of 8 up "
                "to 32768 and 16-byte aligned x, weight and out",
                c.kernel, static_cast<long long>(dim), static_cast<long long>(x_row_stride));
  if (!normEpsilonValid(c, eps))
    return c.status;
  if (rows == 0)
    return ok();
  return launched(c.kernel, launchRmsNormStrided(x, x_row_stride, weight, out, rows, dim, eps,
                                                 asStream(stream)));
}

namespace {
// kiln_add_rms_norm_bf16 and kiln_add_rms_norm_offset_bf16: the same arguments, the
// norm's weight applied as `kind` (weightOffset: kOffset's, checked only for it).
kiln_status_t addRmsNorm(const char *kernel, const void *a, const void *b, const void *weight,
                         void *sum, void *out, int64_t rows, int64_t dim, float eps,
                         RmsNormWeight kind, float weightOffset, void *stream) {
  Checker c{kernel};
  if (!c.notNull(a, "a") || !c.notNull(b, "b") || !c.notNull(weight, "weight") ||
      !c.notNull(sum, "sum") || !c.notNull(out, "out") || !c.elementAligned(a, 2, "a") ||
      !c.elementAligned(b, 2, "b") || !c.elementAligned(weight, 2, "weight") ||
      !c.elementAligned(sum, 2, "sum") || !c.elementAligned(out, 2, "out") ||
      !c.nonNegative(rows, "rows") || !c.positive(dim, "dim") || !c.sizeFits(rows, dim, "a"))
    return c.status;
  if (out == sum)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: out and sum are the same buffer (the norm would overwrite the residual)",
                c.kernel);
  if (!normEpsilonValid(c, eps) ||
      (kind == RmsNormWeight::kOffset && !c.finite(weightOffset, "weight_offset")))
    return c.status;
  if (rows == 0)
    return ok();
  return launched(c.kernel, launchAddRmsNorm(a, b, weight, sum, out, rows, dim, eps, kind,
                                             weightOffset, asStream(stream)));
}

// Whether [a, a + aBytes) and [b, b + bBytes) share a byte.
bool overlaps(const void *a, int64_t aBytes, const void *b, int64_t bBytes) {
  const auto *p = static_cast<const char *>(a), *q = static_cast<const char *>(b);
  return p < q + bBytes && q < p + aBytes;
}
} // namespace

extern "C" kiln_status_t kiln_add_rms_norm_bf16(const void *a, const void *b, const void *weight,
                                                void *sum, void *out, int64_t rows, int64_t dim,
                                                float eps, void *stream) {
  return addRmsNorm("kiln_add_rms_norm_bf16", a, b, weight, sum, out, rows, dim, eps,
                    RmsNormWeight::kRoundThenScale, 0.0f, stream);
}

extern "C" kiln_status_t kiln_add_rms_norm_offset_bf16(const void *a, const void *b,
                                                       const void *weight, void *sum, void *out,
                                                       int64_t rows, int64_t dim, float eps,
                                                       float weight_offset, void *stream) {
  return addRmsNorm("kiln_add_rms_norm_offset_bf16", a, b, weight, sum, out, rows, dim, eps,
                    RmsNormWeight::kOffset, weight_offset, stream);
}

extern "C" kiln_status_t kiln_rms_norm_offset_bf16(const void *x, int64_t x_token_stride,
                                                   int64_t x_head_stride, const void *weight,
                                                   void *out, int64_t tokens, int64_t heads,
                                                   int64_t dim, float eps, float weight_offset,
                                                   void *stream) {
  Checker c{"kiln_rms_norm_offset_bf16"};
  if (!c.notNull(x, "x") || !c.notNull(weight, "weight") || !c.notNull(out, "out") ||
      !c.elementAligned(x, 2, "x") || !c.elementAligned(weight, 2, "weight") ||
      !c.elementAligned(out, 2, "out") || !c.nonNegative(tokens, "tokens") ||
      !c.positive(heads, "heads") || !c.positive(dim, "dim") ||
      !c.sizeFits(heads, dim, "a token's rows") || !c.sizeFits(tokens, heads * dim, "out"))
    return c.status;
  // One head a token reads only the token stride.
  const int64_t headStride = heads == 1 ? dim : x_head_stride;
  if (!c.sizeFits(heads, headStride, "a token of x") || !c.sizeFits(tokens, x_token_stride, "x"))
    return c.status;
  const int64_t tokenSpan = (heads - 1) * headStride + dim; // one token's rows in x
  if (headStride < dim || x_token_stride < tokenSpan)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: x strides (token %lld, head %lld) overlap its rows of %lld elements x %lld "
                "heads",
                c.kernel, static_cast<long long>(x_token_stride),
                static_cast<long long>(x_head_stride), static_cast<long long>(dim),
                static_cast<long long>(heads));
  if (!normEpsilonValid(c, eps) || !c.finite(weight_offset, "weight_offset"))
    return c.status;
  if (tokens == 0)
    return ok();
  // In place needs each row's output where its input is: dense rows only.
  const bool dense = headStride == dim && x_token_stride == heads * dim;
  if (!(dense && out == x) &&
      overlaps(x, ((tokens - 1) * x_token_stride + tokenSpan) * 2, out, tokens * heads * dim * 2))
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: out overlaps x (only dense rows may be normed in place, out == x)", c.kernel);
  return launched(c.kernel, launchRmsNormOffset(x, x_token_stride, headStride, weight, out, tokens,
                                                heads, dim, eps, weight_offset, asStream(stream)));
}

namespace {

// The checks of one tensor of a rope launch: x and out [tokens, heads, head_dim] bf16.
bool ropeTensorFits(Checker &c, const void *x, const void *out, int64_t tokens, int64_t heads,
                    int64_t head_dim, const char *xName, const char *outName,
                    const char *headsName) {
  return c.notNull(x, xName) && c.notNull(out, outName) && c.elementAligned(x, 2, xName) &&
         c.elementAligned(out, 2, outName) && c.positive(heads, headsName) &&
         c.atMost(heads, std::numeric_limits<int32_t>::max() / KILN_ROPE_MAX_HEAD_DIM,
                  headsName) &&
         c.sizeFits(tokens, heads * head_dim, xName);
}

// The checks every rope launch shares (positions, sizes, rotary_dim, the parameters),
// then the launch of one tensor (b.heads == 0) or two with one table.
kiln_status_t checkedRope(Checker &c, const RopeTensor &a, const RopeTensor &b,
                          const int32_t *positions, int64_t tokens, int64_t head_dim,
                          int64_t rotary_dim, const kiln_rope_params_t *rope, void *stream) {
  if (!c.notNull(positions, "positions") || !c.notNull(rope, "rope") ||
      !c.elementAligned(positions, 4, "positions") || !c.nonNegative(tokens, "tokens") ||
      !c.positive(head_dim, "head_dim"))
    return c.status;
  if (head_dim % 2 != 0)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: head_dim must be even (got %lld)", c.kernel,
                static_cast<long long>(head_dim));
  if (!c.atMost(head_dim, KILN_ROPE_MAX_HEAD_DIM, "head_dim") || !checkRopeParams(c, *rope))
    return c.status;
  if (rotary_dim < 0 || rotary_dim % 2 != 0 || rotary_dim > head_dim)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: rotary_dim %lld must be 0 (the whole head) or even and <= head_dim %lld",
                c.kernel, static_cast<long long>(rotary_dim), static_cast<long long>(head_dim));
  // The frequencies span the rotated dims (transformers' dim = head_dim *
  // partial_rotary_factor), whatever the rope type.
  const int64_t rotary = rotary_dim == 0 ? head_dim : rotary_dim;
  if (tokens == 0)
    return ok();
  const RopeTable *table = ropeTable(*rope, rotary);
  if (!table)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: rope parameters (theta %g, factor %g) give non-finite frequencies",
                c.kernel, static_cast<double>(rope->theta), static_cast<double>(rope->factor));
  return launched(c.kernel, launchRope(a, b, positions, tokens, head_dim, rotary, *table,
                                       rope->attention_factor, asStream(stream)));
}

} // namespace

extern "C" kiln_status_t kiln_rope_bf16(const void *x, const int32_t *positions, void *out,
                                        int64_t tokens, int64_t heads, int64_t head_dim,
                                        int64_t rotary_dim, const kiln_rope_params_t *rope,
                                        void *stream) {
  Checker c{"kiln_rope_bf16"};
  if (!c.positive(head_dim, "head_dim") || !c.nonNegative(tokens, "tokens") ||
      !ropeTensorFits(c, x, out, tokens, heads, head_dim, "x", "out", "heads"))
    return c.status;
  return checkedRope(c, RopeTensor{x, out, heads}, RopeTensor{}, positions, tokens, head_dim,
                     rotary_dim, rope, stream);
}

extern "C" kiln_status_t kiln_rope_pair_bf16(const kiln_rope_pair_t *p) {
  Checker c{"kiln_rope_pair_bf16"};
  if (!c.notNull(p, "params"))
    return c.status;
  if (!c.positive(p->head_dim, "head_dim") || !c.nonNegative(p->tokens, "tokens") ||
      !ropeTensorFits(c, p->x0, p->out0, p->tokens, p->heads0, p->head_dim, "x0", "out0",
                      "heads0") ||
      !ropeTensorFits(c, p->x1, p->out1, p->tokens, p->heads1, p->head_dim, "x1", "out1",
                      "heads1"))
    return c.status;
  // One block rotates a token of both tensors at once: neither output may touch the
  // other tensor's input or output (each may be its own input).
  const int64_t bytes0 = p->tokens * p->heads0 * p->head_dim * 2,
                bytes1 = p->tokens * p->heads1 * p->head_dim * 2;
  if (overlaps(p->out0, bytes0, p->x1, bytes1) || overlaps(p->out1, bytes1, p->x0, bytes0) ||
      overlaps(p->out0, bytes0, p->out1, bytes1))
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: out0 and out1 must not overlap each other or the other tensor's input",
                c.kernel);
  return checkedRope(c, RopeTensor{p->x0, p->out0, p->heads0},
                     RopeTensor{p->x1, p->out1, p->heads1}, p->positions, p->tokens, p->head_dim,
                     p->rotary_dim, &p->rope, p->stream);
}

extern "C" kiln_status_t kiln_rope_rows_bf16(const kiln_rope_rows_t *p) {
  Checker c{"kiln_rope_rows_bf16"};
  if (!c.notNull(p, "params"))
    return c.status;
  if (!c.notNull(p->x, "x") || !c.notNull(p->positions, "positions") ||
      !c.notNull(p->out, "out") || !c.elementAligned(p->x, 2, "x") ||
      !c.elementAligned(p->positions, 4, "positions") || !c.elementAligned(p->out, 2, "out") ||
      !c.nonNegative(p->tokens, "tokens") || !c.positive(p->heads, "heads") ||
      !c.positive(p->head_dim, "head_dim") || !c.nonNegative(p->pass, "pass") ||
      !c.atMost(p->head_dim, KILN_ROPE_MAX_HEAD_DIM, "head_dim") ||
      !c.atMost(p->pass, std::numeric_limits<int32_t>::max() / 2, "pass") ||
      !c.atMost(p->heads, std::numeric_limits<int32_t>::max() / KILN_ROPE_MAX_HEAD_DIM,
                "heads") ||
      !checkRopeParams(c, p->rope))
    return c.status;
  if (p->head_dim % 2 != 0)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: head_dim must be even (got %lld)", c.kernel,
                static_cast<long long>(p->head_dim));
  if (p->style < KILN_ROPE_STYLE_ROTATE_HALF || p->style > KILN_ROPE_STYLE_COMPLEX_PAIRS)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: style %d is not a KILN_ROPE_STYLE_* value (0 rotate_half, 1 "
                "deinterleave, 2 complex_pairs)",
                c.kernel, p->style);
  const int64_t row = p->pass + p->head_dim;
  for (auto [name, token, head] :
       {std::tuple<const char *, int64_t, int64_t>{"x", p->x_token_stride, p->x_head_stride},
        {"out", p->out_token_stride, p->out_head_stride}})
    if (head < row || token < head * p->heads)
      return fail(KILN_ERROR_INVALID_ARGUMENT,
                  "%s: %s strides (token %lld, head %lld) overlap its rows of %lld elements "
                  "x %lld heads",
                  c.kernel, name, static_cast<long long>(token), static_cast<long long>(head),
                  static_cast<long long>(row), static_cast<long long>(p->heads));
  if (p->tokens == 0)
    return ok();
  const RopeTable *table = ropeTable(p->rope, p->head_dim);
  if (!table)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: rope parameters (theta %g, factor %g) give non-finite frequencies",
                c.kernel, static_cast<double>(p->rope.theta),
                static_cast<double>(p->rope.factor));
  return launched(c.kernel, launchRopeRows(*p, *table, asStream(p->stream)));
}

extern "C" kiln_status_t kiln_add_bf16(const void *a, const void *b, void *out, int64_t n,
                                       void *stream) {
  Checker c{"kiln_add_bf16"};
  if (!c.notNull(a, "a") || !c.notNull(b, "b") || !c.notNull(out, "out") ||
      !c.elementAligned(a, 2, "a") || !c.elementAligned(b, 2, "b") ||
      !c.elementAligned(out, 2, "out") || !c.nonNegative(n, "n") || !c.sizeFits(n, 1, "n"))
    return c.status;
  if (n == 0)
    return ok();
  return launched(c.kernel, launchAdd(a, b, out, n, asStream(stream)));
}

extern "C" kiln_status_t kiln_swiglu_bf16(const void *gate, const void *up, void *out,
                                          int64_t n, void *stream) {
  Checker c{"kiln_swiglu_bf16"};
  if (!c.notNull(gate, "gate") || !c.notNull(up, "up") || !c.notNull(out, "out") ||
      !c.elementAligned(gate, 2, "gate") || !c.elementAligned(up, 2, "up") ||
      !c.elementAligned(out, 2, "out") || !c.nonNegative(n, "n") || !c.sizeFits(n, 1, "n"))
    return c.status;
  if (n == 0)
    return ok();
  return launched(c.kernel, launchSwiglu(gate, up, out, n, asStream(stream)));
}

extern "C" kiln_status_t kiln_sigmoid_gate_bf16(const void *x, const void *w, const void *value,
                                                void *out, int64_t rows, int64_t dim,
                                                int64_t cols, void *stream) {
  Checker c{"kiln_sigmoid_gate_bf16"};
  if (!c.notNull(x, "x") || !c.notNull(w, "w") || !c.notNull(value, "value") ||
      !c.notNull(out, "out") || !c.elementAligned(x, 2, "x") || !c.elementAligned(w, 2, "w") ||
      !c.elementAligned(value, 2, "value") || !c.elementAligned(out, 2, "out") ||
      !c.nonNegative(rows, "rows") || !c.positive(dim, "dim") || !c.positive(cols, "cols") ||
      !c.sizeFits(rows, dim, "x") || !c.sizeFits(rows, cols, "value"))
    return c.status;
  if (rows == 0)
    return ok();
  return launched(c.kernel, launchSigmoidGate(x, w, value, out, rows, dim, cols,
                                              asStream(stream)));
}

namespace {
using GatedNormLauncher = cudaError_t (*)(const void *, const void *, const void *, void *, int64_t,
                                          int64_t, int64_t, int64_t, float, cudaStream_t);

// kiln_gated_rms_norm_bf16 and kiln_rms_norm_gate_bf16: the same arguments, validated
// alike, then `launch` (the order of norm and gate).
kiln_status_t gatedNorm(const char *kernel, const void *x, const void *gate, const void *weight,
                        void *out, int64_t rows, int64_t width, int64_t gate_stride,
                        int64_t group_size, float eps, GatedNormLauncher launch, void *stream) {
  Checker c{kernel};
  if (!c.notNull(x, "x") || !c.notNull(gate, "gate") || !c.notNull(weight, "weight") ||
      !c.notNull(out, "out") || !c.elementAligned(x, 2, "x") ||
      !c.elementAligned(gate, 2, "gate") || !c.elementAligned(weight, 2, "weight") ||
      !c.elementAligned(out, 2, "out") || !c.nonNegative(rows, "rows") ||
      !c.positive(width, "width") || !c.positive(group_size, "group_size") ||
      !c.sizeFits(rows, width, "x") || !c.sizeFits(rows, gate_stride, "gate"))
    return c.status;
  if (width % group_size != 0)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: group_size %lld does not divide width %lld",
                c.kernel, static_cast<long long>(group_size), static_cast<long long>(width));
  if (gate_stride < width)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: gate_stride %lld < width %lld", c.kernel,
                static_cast<long long>(gate_stride), static_cast<long long>(width));
  if (!(eps >= 0.0f) || std::isinf(eps))
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: eps %g must be finite and >= 0", c.kernel, eps);
  if (rows == 0)
    return ok();
  return launched(c.kernel, launch(x, gate, weight, out, rows, width, gate_stride, group_size, eps,
                                   asStream(stream)));
}
} // namespace

extern "C" kiln_status_t kiln_gated_rms_norm_bf16(const void *x, const void *gate,
                                                  const void *weight, void *out, int64_t rows,
                                                  int64_t width, int64_t gate_stride,
                                                  int64_t group_size, float eps, void *stream) {
  return gatedNorm("kiln_gated_rms_norm_bf16", x, gate, weight, out, rows, width, gate_stride,
                   group_size, eps, launchGatedRmsNorm, stream);
}

extern "C" kiln_status_t kiln_rms_norm_gate_bf16(const void *x, const void *gate,
                                                 const void *weight, void *out, int64_t rows,
                                                 int64_t width, int64_t gate_stride,
                                                 int64_t group_size, float eps, void *stream) {
  return gatedNorm("kiln_rms_norm_gate_bf16", x, gate, weight, out, rows, width, gate_stride,
                   group_size, eps, launchRmsNormGate, stream);
}

extern "C" kiln_status_t kiln_sigmoid_mul_bf16(const void *x, const void *gate, void *out,
                                               int64_t rows, int64_t dim, int64_t gate_stride,
                                               void *stream) {
  Checker c{"kiln_sigmoid_mul_bf16"};
  if (!c.notNull(x, "x") || !c.notNull(gate, "gate") || !c.notNull(out, "out") ||
      !c.elementAligned(x, 2, "x") || !c.elementAligned(gate, 2, "gate") ||
      !c.elementAligned(out, 2, "out") || !c.nonNegative(rows, "rows") || !c.positive(dim, "dim") ||
      !c.sizeFits(rows, dim, "x") || !c.sizeFits(rows, gate_stride, "gate"))
    return c.status;
  if (gate_stride < dim)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: gate_stride %lld < dim %lld", c.kernel,
                static_cast<long long>(gate_stride), static_cast<long long>(dim));
  if (rows == 0)
    return ok();
  return launched(c.kernel,
                  launchSigmoidMul(x, gate, out, rows, dim, gate_stride, asStream(stream)));
}

extern "C" kiln_status_t kiln_activation_bf16(const void *x, void *out, int64_t n, int32_t kind,
                                              void *stream) {
  Checker c{"kiln_activation_bf16"};
  if (!c.notNull(x, "x") || !c.notNull(out, "out") || !c.elementAligned(x, 2, "x") ||
      !c.elementAligned(out, 2, "out") || !c.nonNegative(n, "n") || !c.sizeFits(n, 1, "n"))
    return c.status;
  if (kind != 0 && kind != 1)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "kiln_activation_bf16: kind %d unknown (0 relu2, 1 silu)", kind);
  if (n == 0)
    return ok();
  return launched(c.kernel, launchActivation(x, out, n, kind, asStream(stream)));
}

extern "C" kiln_status_t kiln_concat_bf16(const void *a, const void *b, void *out,
                                          int64_t rows, int64_t cols_a, int64_t cols_b,
                                          void *stream) {
  Checker c{"kiln_concat_bf16"};
  if (!c.notNull(a, "a") || !c.notNull(b, "b") || !c.notNull(out, "out") ||
      !c.elementAligned(a, 2, "a") || !c.elementAligned(b, 2, "b") ||
      !c.elementAligned(out, 2, "out") || !c.nonNegative(rows, "rows") ||
      !c.positive(cols_a, "cols_a") || !c.positive(cols_b, "cols_b") ||
      !c.sizeFits(rows, cols_a + cols_b, "out"))
    return c.status;
  const auto *o = static_cast<const char *>(out);
  const int64_t outBytes = rows * (cols_a + cols_b) * 2;
  auto overlaps = [&](const void *p, int64_t bytes) {
    const auto *q = static_cast<const char *>(p);
    return q < o + outBytes && o < q + bytes;
  };
  if (rows > 0 && (overlaps(a, rows * cols_a * 2) || overlaps(b, rows * cols_b * 2)))
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: out overlaps a or b", c.kernel);
  if (rows == 0)
    return ok();
  return launched(c.kernel, launchConcat(a, b, out, rows, cols_a, cols_b, asStream(stream)));
}

extern "C" kiln_status_t kiln_next_tokens_i32(const int32_t *ids, const int32_t *picks,
                                              const int32_t *rows, int32_t *out,
                                              int64_t tokens, int64_t num_rows, void *stream) {
  Checker c{"kiln_next_tokens_i32"};
  if (!c.notNull(ids, "ids") || !c.notNull(out, "out") || !c.nonNegative(tokens, "tokens") ||
      !c.nonNegative(num_rows, "num_rows") ||
      (num_rows > 0 && (!c.notNull(picks, "picks") || !c.notNull(rows, "rows"))))
    return c.status;
  auto overlaps = [&](const int32_t *p, int64_t n) {
    return p && p < out + tokens && out < p + n;
  };
  if (overlaps(ids, tokens) || overlaps(picks, num_rows) || overlaps(rows, num_rows))
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: out overlaps ids, picks or rows", c.kernel);
  if (tokens == 0)
    return ok();
  return launched(c.kernel,
                  launchNextTokens(ids, picks, rows, out, tokens, num_rows, asStream(stream)));
}

extern "C" kiln_status_t kiln_argmax_bf16(const void *logits, int32_t *out, int64_t rows,
                                          int64_t cols, void *stream) {
  Checker c{"kiln_argmax_bf16"};
  if (!c.notNull(logits, "logits") || !c.notNull(out, "out") ||
      !c.elementAligned(logits, 2, "logits") || !c.elementAligned(out, 4, "out") ||
      !c.nonNegative(rows, "rows") || !c.positive(cols, "cols") ||
      !c.atMost(cols, std::numeric_limits<int32_t>::max(), "cols") ||
      !c.sizeFits(rows, cols, "logits"))
    return c.status;
  if (rows == 0)
    return ok();
  return launched(c.kernel, launchArgmax(logits, out, rows, cols, asStream(stream)));
}

extern "C" kiln_status_t kiln_graph_chain_launches(void *stream, int chain) {
  const cudaStream_t s = asStream(stream);
  if (chain && (!s || s == cudaStreamLegacy))
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "kiln_graph_chain_launches: the legacy default stream is never chained");
  if (!markStreamChained(s, chain != 0))
    return fail(KILN_ERROR_UNSUPPORTED,
                "kiln_graph_chain_launches: %d streams are chained already (unmark one first)",
                kMaxChainedStreams);
  return ok();
}
