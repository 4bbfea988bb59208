// kiln_moe: validation (before any CUDA call), the scratch carved per entry, then
// route -> gate/up GEMMs -> SwiGLU -> down GEMM -> combine, all on the caller's stream.
#include "kiln/Kernels/Moe.h"

#include "kiln/Kernels/Graph.h"

#include "ArgChecker.h"
#include "GraphInternal.h"
#include "StatusInternal.h"

#include <cstdint>

using namespace kiln::kernels;
using namespace kiln::graph;

namespace {

// The scratch's sections (Moe.h's table), each tokens x its bytes per token, in order.
struct MoeSections {
  uint64_t ids, weights, pointers, gateRows, upRows, yRows;

  MoeSections(int64_t hidden, int64_t inter, int32_t topK)
      : ids(section(hidden, inter, topK, 0)), weights(section(hidden, inter, topK, 1)),
        pointers(section(hidden, inter, topK, 2)), gateRows(section(hidden, inter, topK, 3)),
        upRows(section(hidden, inter, topK, 4)), yRows(section(hidden, inter, topK, 5)) {}

  uint64_t perToken() const { return ids + weights + pointers + gateRows + upRows + yRows; }

private:
  static uint64_t section(int64_t hidden, int64_t inter, int32_t topK, int which) {
    return kiln_moe_scratch_section_bytes(hidden, inter, topK, which);
  }
};

bool checkShape(ArgChecker &c, int64_t hidden, int64_t inter, int64_t experts, int32_t topK) {
  if (!c.positive(hidden, "hidden") || !c.positive(inter, "inter") ||
      !c.positive(experts, "experts") || !c.atMost(experts, KILN_MOE_MAX_EXPERTS, "experts") ||
      !c.positive(topK, "top_k") || !c.atMost(topK, KILN_MOE_MAX_TOP_K, "top_k") ||
      !c.atMost(hidden, int64_t{1} << 20, "hidden") || !c.atMost(inter, int64_t{1} << 20, "inter"))
    return false;
  if (topK > experts) {
    c.status = fail(KILN_ERROR_INVALID_ARGUMENT, "%s: top_k %d exceeds the %lld experts",
                    c.kernel, static_cast<int>(topK), static_cast<long long>(experts));
    return false;
  }
  if (hidden % 8 != 0 || inter % 8 != 0) {
    c.status = fail(KILN_ERROR_UNSUPPORTED,
                    "%s: hidden (%lld) and inter (%lld) must be multiples of 8 (16-byte rows)",
                    c.kernel, static_cast<long long>(hidden), static_cast<long long>(inter));
    return false;
  }
  return true;
}

} // namespace

extern "C" kiln_status_t kiln_moe_scratch_bytes_per_token(int64_t hidden, int64_t inter,
                                                          int32_t top_k, uint64_t *bytes) {
  ArgChecker c{"kiln_moe_scratch_bytes_per_token"};
  if (!c.notNull(bytes, "bytes") || !checkShape(c, hidden, inter, top_k, top_k))
    return c.status;
  *bytes = MoeSections(hidden, inter, top_k).perToken();
  return ok();
}

extern "C" kiln_status_t kiln_moe(const kiln_moe_params_t *p) {
  ArgChecker c{"kiln_moe"};
  if (!c.notNull(p, "params"))
    return c.status;
  const struct {
    const void *ptr;
    const char *name;
  } buffers[] = {{p->x, "x"},       {p->logits, "logits"}, {p->gate, "gate"},
                 {p->up, "up"},     {p->down, "down"},     {p->out, "out"},
                 {p->scratch, "scratch"}};
  for (const auto &b : buffers)
    // logits are read one element at a time; the rest with 16-byte vectors.
    if (!c.notNull(b.ptr, b.name) ||
        (b.ptr == p->logits ? !c.elementAligned(b.ptr, 2, b.name) : !c.aligned16(b.ptr, b.name)))
      return c.status;
  if (!c.notNull(p->gemm, "gemm") || !c.nonNegative(p->tokens, "tokens") ||
      !checkShape(c, p->hidden, p->inter, p->experts, p->top_k) ||
      !c.sizeFits(p->tokens, p->hidden, "x") || !c.sizeFits(p->tokens, p->experts, "logits") ||
      !c.sizeFits(p->experts * p->inter, p->hidden, "gate"))
    return c.status;
  if (p->flags & ~(KILN_MOE_NORMALIZE_TOP_K | KILN_MOE_ROUND_WEIGHTS))
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_moe: flags 0x%x has unknown bits",
                static_cast<unsigned>(p->flags));
  if (p->x == p->out)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_moe: out aliases x");
  int64_t entries = 0;
  if (__builtin_mul_overflow(p->tokens, static_cast<int64_t>(p->top_k), &entries) ||
      entries > INT32_MAX)
    return fail(KILN_ERROR_UNSUPPORTED, "kiln_moe: %lld tokens x top_k %d exceeds 2^31 entries",
                static_cast<long long>(p->tokens), static_cast<int>(p->top_k));
  if (p->tokens == 0)
    return ok();

  const MoeSections sections(p->hidden, p->inter, p->top_k);
  const uint64_t tokens = static_cast<uint64_t>(p->tokens);
  char *at = static_cast<char *>(p->scratch);
  auto carve = [&](uint64_t perToken) {
    char *section = at;
    at += perToken * tokens;
    return section;
  };
  MoeLayout layout{};
  layout.x = static_cast<const uint16_t *>(p->x);
  layout.gate = static_cast<const uint16_t *>(p->gate);
  layout.up = static_cast<const uint16_t *>(p->up);
  layout.down = static_cast<const uint16_t *>(p->down);
  layout.hidden = p->hidden;
  layout.inter = p->inter;
  layout.ids = reinterpret_cast<int32_t *>(carve(sections.ids));
  layout.weights = reinterpret_cast<float *>(carve(sections.weights));
  void **pointers = reinterpret_cast<void **>(carve(sections.pointers));
  layout.wPtrs = const_cast<const void **>(pointers);
  layout.xPtrs = const_cast<const void **>(pointers + 3 * entries);
  layout.outPtrs = pointers + 6 * entries;
  layout.gateRows = reinterpret_cast<uint16_t *>(carve(sections.gateRows));
  layout.upRows = reinterpret_cast<uint16_t *>(carve(sections.upRows));
  layout.yRows = reinterpret_cast<uint16_t *>(carve(sections.yRows));

  cudaStream_t stream = static_cast<cudaStream_t>(p->stream);
  cudaError_t e = launchMoeRoute(p->logits, layout, p->tokens, static_cast<int>(p->experts),
                                 p->top_k, p->flags, stream);
  if (e != cudaSuccess)
    return fail(KILN_ERROR_CUDA, "kiln_moe: routing launch failed: %s", cudaGetErrorString(e));
  // The gate, up and down GEMMs' entries lie one after the other in each array.
  const struct {
    int64_t first, n, k;
  } gemms[] = {{0, p->inter, p->hidden}, {entries, p->inter, p->hidden}};
  for (const auto &g : gemms)
    if (kiln_status_t s = kiln_gemm_bf16_rows_batched(
            p->gemm, layout.wPtrs + g.first, layout.xPtrs + g.first, layout.outPtrs + g.first,
            entries, g.n, g.k, p->gemm_workspace, p->gemm_workspace_bytes, p->stream);
        s != KILN_OK)
      return s;
  if (kiln_status_t s = kiln_swiglu_bf16(layout.gateRows, layout.upRows, layout.gateRows,
                                         entries * p->inter, p->stream);
      s != KILN_OK)
    return s;
  if (kiln_status_t s = kiln_gemm_bf16_rows_batched(
          p->gemm, layout.wPtrs + 2 * entries, layout.xPtrs + 2 * entries,
          layout.outPtrs + 2 * entries, entries, p->hidden, p->inter, p->gemm_workspace,
          p->gemm_workspace_bytes, p->stream);
      s != KILN_OK)
    return s;
  e = launchMoeCombine(layout.yRows, layout.weights, p->out, p->tokens, p->hidden, p->top_k,
                       stream);
  if (e != cudaSuccess)
    return fail(KILN_ERROR_CUDA, "kiln_moe: combine launch failed: %s", cudaGetErrorString(e));
  return ok();
}
