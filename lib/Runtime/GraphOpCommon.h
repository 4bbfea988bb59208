// Helpers every graph op of the runtime shares (GraphOps.cpp, Recurrent.cpp): the sticky
// entry, size and range checks, and the launch epilogue (status, checked launch, trace).
#ifndef KILN_LIB_RUNTIME_GRAPHOPCOMMON_H
#define KILN_LIB_RUNTIME_GRAPHOPCOMMON_H

#include "Context.h"

namespace kiln::rt {

// Common start of every graph op: the sticky check, the op's position, the step.
#define KILN_RT_GRAPH_ENTER(name)                                                              \
  if (!ctx)                                                                                    \
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: context is null", name);                     \
  if (ctx->status != KILN_OK)                                                                  \
    return replay(ctx);                                                                        \
  ++ctx->opIndex;                                                                              \
  Call c{name, nullptr, -1, ctx};                                                              \
  if (!ctx->hasBatch)                                                                          \
    return record(ctx, c.error(KILN_ERROR_INVALID_ARGUMENT,                                    \
                               "no step set (call kiln_rt_set_batch first)"));

inline kiln_status_t positive(const Call &c, std::initializer_list<std::pair<const char *, int64_t>> sizes) {
  for (const auto &[name, v] : sizes)
    if (v < 1 || v > (int64_t(1) << 40))
      return c.error(KILN_ERROR_INVALID_ARGUMENT, "%s %lld outside [1, 2^40]", name,
                     static_cast<long long>(v));
  return KILN_OK;
}

// Bytes of a product of sizes (sizes already checked: no overflow below 2^63).
inline uint64_t bytesOf(std::initializer_list<int64_t> factors) {
  uint64_t b = 0;
  if (!product(&b, factors))
    return ~0ull;
  return b;
}

// Whether [a, a + aBytes) and [b, b + bBytes) share a byte.
inline bool overlaps(const void *a, uint64_t aBytes, const void *b, uint64_t bBytes) {
  const auto p = reinterpret_cast<uintptr_t>(a), q = reinterpret_cast<uintptr_t>(b);
  return p < q + bBytes && q < p + aBytes;
}

// One device range a graph op reads or writes (checkRange's arguments).
struct Range {
  const char *what;
  const void *p;
  uint64_t bytes;
  uint64_t align;
  bool output;
};

inline kiln_status_t checkRanges(const Call &c, const kiln_rt_context *ctx,
                          std::initializer_list<Range> ranges) {
  for (const Range &r : ranges)
    if (kiln_status_t s = checkRange(c, ctx, r.what, r.p, r.bytes, r.align, r.output);
        s != KILN_OK)
      return s;
  return KILN_OK;
}

// bf16 data of `rows` x `cols` elements.
inline Range bf16(const char *what, const void *p, int64_t rows, int64_t cols, bool output = false) {
  return {what, p, bytesOf({rows, cols, 2}), 2, output};
}

// bf16 rows of `cols` elements, `stride` elements apart (a column slice of a wider
// tensor): the range spans (rows - 1) * stride + cols elements.
inline Range stridedBf16(const char *what, const void *p, int64_t rows, int64_t cols,
                         int64_t stride) {
  return {what, p, bytesOf({(rows - 1) * stride + cols, 2}), 2, false};
}

// A row stride of at least the row's width.
inline kiln_status_t checkStride(const Call &c, const char *what, int64_t stride,
                                 int64_t width) {
  if (stride < width || stride > (int64_t(1) << 40))
    return c.error(KILN_ERROR_INVALID_ARGUMENT, "%s row stride %lld outside [%lld, 2^40]", what,
                   static_cast<long long>(stride), static_cast<long long>(width));
  return KILN_OK;
}

// After a launch: its status, the checked-launch wait, and the trace of its output
// (`rows` x `cols` bf16 at `out`).
inline kiln_status_t launched(const Call &c, kiln_rt_context *ctx, kiln_status_t s, const char *name,
                       const void *out, int64_t rows, int64_t cols) {
  ++ctx->launches;
  if (s != KILN_OK)
    return c.launcher(s, name);
  if (kiln_status_t checked = checkLaunch(c, ctx); checked != KILN_OK)
    return checked;
  return traceOutput(c, ctx, out, rows, cols);
}

// The end of every validated graph op: nothing more in a dry context, else the launch
// on the context's device and what follows it (launched).
template <typename Launch>
inline kiln_status_t launchValidated(const Call &c, kiln_rt_context *ctx, const char *name,
                              const void *out, int64_t rows, int64_t cols, Launch launch) {
  if (ctx->dry)
    return KILN_OK;
  if (kiln_status_t s = selectDevice(c, ctx); s != KILN_OK)
    return s;
  return launched(c, ctx, launch(), name, out, rows, cols);
}

// launchValidated for an output the trace cannot hold (not bf16): no trace.
template <typename Launch>
inline kiln_status_t launchValidatedUntraced(const Call &c, kiln_rt_context *ctx,
                                             const char *name, Launch launch) {
  if (ctx->dry)
    return KILN_OK;
  if (kiln_status_t s = selectDevice(c, ctx); s != KILN_OK)
    return s;
  ++ctx->launches;
  if (kiln_status_t s = launch(); s != KILN_OK)
    return c.launcher(s, name);
  return checkLaunch(c, ctx);
}

} // namespace kiln::rt

#endif
