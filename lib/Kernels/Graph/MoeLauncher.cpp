// kiln_moe: validation (before any CUDA call), the scratch carved per entry, then
// route -> gate/up GEMMs -> SwiGLU or its clamped form, with the biases (or up GEMM ->
// activation) -> down GEMM -> combine (with the down bias), all on the caller's stream.
#include "kiln/Kernels/Moe.h"

#include "kiln/Kernels/Graph.h"

#include "ArgChecker.h"
#include "GraphInternal.h"
#include "GroupedGemm.h"
#include "StatusInternal.h"

#include <cstdint>

using namespace kiln::kernels;
using namespace kiln::graph;

namespace {

// Bytes per token of each scratch section (Moe.h's table).
uint64_t section(const kiln_moe_params_t &p, int which) {
  return kiln_moe_scratch_section_bytes(p.hidden, p.inter, p.top_k, which);
}

// Largest tile: past it an expert's GEMM is split into several entries (cuBLASLt tiles
// each entry's rows on its own).
constexpr int kMaxTileRows = 256;

// The grouped mode's tile rows for `pairs` (token, expert) pairs, or 1 for the pairs
// mode: grouped needs pairs >= 4 x experts, so that the padded rows (< pairs + experts x
// M <= 2 x pairs), the tiles (<= pairs / M + experts <= pairs) and the expert table
// (2 x (experts + 1) ints) fit the scratch sized for the pairs.
int tileRowsFor(const kiln_moe_params_t &p, int64_t pairs) {
  if (!(p.flags & KILN_MOE_GROUPED) || pairs < 4 * p.experts)
    return 1;
  int rows = 4;
  while (rows < kMaxTileRows && 2 * rows * p.experts <= pairs)
    rows *= 2;
  return rows;
}

// The row sizes and top_k the scratch layout depends on.
bool checkRows(ArgChecker &c, int64_t hidden, int64_t inter, int32_t topK) {
  if (!c.positive(hidden, "hidden") || !c.positive(inter, "inter") ||
      !c.positive(topK, "top_k") || !c.atMost(topK, KILN_MOE_MAX_TOP_K, "top_k") ||
      !c.atMost(hidden, int64_t{1} << 20, "hidden") || !c.atMost(inter, int64_t{1} << 20, "inter"))
    return false;
  if (hidden % 8 != 0 || inter % 8 != 0) {
    c.status = fail(KILN_ERROR_UNSUPPORTED,
                    "%s: hidden (%lld) and inter (%lld) must be multiples of 8 (16-byte rows)",
                    c.kernel, static_cast<long long>(hidden), static_cast<long long>(inter));
    return false;
  }
  return true;
}

bool checkExperts(ArgChecker &c, int64_t experts, int32_t topK) {
  if (!c.positive(experts, "experts") || !c.atMost(experts, KILN_MOE_MAX_EXPERTS, "experts"))
    return false;
  if (topK > experts) {
    c.status = fail(KILN_ERROR_INVALID_ARGUMENT, "%s: top_k %d exceeds the %lld experts",
                    c.kernel, static_cast<int>(topK), static_cast<long long>(experts));
    return false;
  }
  return true;
}

int32_t orOne(int32_t v) { return v == 0 ? 1 : v; }

// DeepSeek's group-limited routing needs equal groups of at least two experts (a group's
// key is its top two) and enough experts in the kept groups for top_k.
bool checkGroups(ArgChecker &c, const kiln_moe_params_t &p) {
  const int32_t groups = orOne(p.groups), kept = orOne(p.top_groups);
  if (!c.positive(groups, "groups") || !c.positive(kept, "top_groups"))
    return false;
  if (groups == 1 && kept == 1)
    return true;
  if (p.experts % groups != 0 || p.experts / groups < 2 || kept > groups ||
      kept * (p.experts / groups) < p.top_k) {
    c.status = fail(KILN_ERROR_INVALID_ARGUMENT,
                    "%s: %d expert groups keeping %d do not fit %lld experts and top_k %d "
                    "(groups must divide the experts into groups of >= 2, and the kept "
                    "groups must hold top_k experts)",
                    c.kernel, static_cast<int>(groups), static_cast<int>(kept),
                    static_cast<long long>(p.experts), static_cast<int>(p.top_k));
    return false;
  }
  return true;
}

// Gated experts run SwiGLU or its clamped form (activation unread); plain ones one of
// kiln_activation_bf16's functions. The gate's bias and the clamped form need a gate.
bool checkExpertForm(ArgChecker &c, const kiln_moe_params_t &p) {
  if (!p.gate && p.activation != 0 && p.activation != 1) {
    c.status = fail(KILN_ERROR_INVALID_ARGUMENT, "%s: activation %d unknown", c.kernel,
                    static_cast<int>(p.activation));
    return false;
  }
  if (!p.gate && (p.gate_bias || (p.flags & KILN_MOE_CLAMPED_SWIGLU))) {
    c.status = fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s needs gated experts (gate is null)",
                    c.kernel, p.gate_bias ? "gate_bias" : "KILN_MOE_CLAMPED_SWIGLU");
    return false;
  }
  if ((p.flags & KILN_MOE_CLAMPED_SWIGLU) &&
      (!c.finite(p.glu_alpha, "glu_alpha") || !c.positiveFloat(p.glu_limit, "glu_limit")))
    return false;
  if (!(p.scale > 0.0f) && p.scale != 0.0f) {
    c.status = fail(KILN_ERROR_INVALID_ARGUMENT, "%s: scale %g is not positive", c.kernel,
                    static_cast<double>(p.scale));
    return false;
  }
  return true;
}

// Whether the grouped mode's GEMMs run on the own grouped GEMM (GroupedGemm.h): the
// shapes fit it, the device runs the sm_90a image, and the caller did not ask for
// cuBLASLt.
bool useOwnGroupedGemm(const kiln_moe_params_t &p, int64_t pairs, cudaStream_t stream) {
  if ((p.flags & KILN_MOE_LIBRARY_GEMM) ||
      !groupedGemmShapesFit(p.hidden, p.inter, p.experts, pairs))
    return false;
  return groupedGemmDeviceReady(!streamCapturing(stream));
}

// The row-invariant mode's GEMM: the own grouped GEMM wherever the layer's shapes and
// the device take it, whatever the tokens, so that every call of the layer computes a
// token's rows alike (a decode step and a verify step: lossless speculation); else the
// pairs mode's one-row GEMMs. A capture before the device's probe cannot know which.
kiln_status_t rowInvariantGemm(const kiln_moe_params_t &p, cudaStream_t stream, bool *own) {
  *own = false;
  if ((p.flags & KILN_MOE_LIBRARY_GEMM) || !groupedGemmFeaturesFit(p.hidden, p.inter))
    return ok();
  switch (groupedGemmDeviceState(!streamCapturing(stream))) {
  case GroupedGemmDevice::Ready:
    *own = true;
    return ok();
  case GroupedGemmDevice::Unavailable:
    return ok();
  case GroupedGemmDevice::Unknown:
    break;
  }
  return fail(KILN_ERROR_INVALID_ARGUMENT,
              "kiln_moe: a row-invariant call is being captured on a device not yet probed "
              "(call kiln_moe_prepare before the capture)");
}

// One of the layer's GEMMs over the expert-sorted rows: out = in . W_e^T, or with `up`
// (the own grouped GEMM's gated form) out = SwiGLU(in . W_e^T, in . U_e^T).
struct ExpertGemm {
  const uint16_t *in, *weights;
  uint16_t *out;
  int64_t n, k;
  int64_t first; // the cuBLASLt path's first entry in the pointer arrays
  const uint16_t *up = nullptr;
};

// `rows`: the expert-sorted rows in and out hold.
kiln_status_t runExpertGemm(const kiln_moe_params_t &p, const MoeLayout &layout,
                            const ExpertGemm &g, int tileRows, int64_t tileBound, int64_t rows) {
  if (layout.gemmTiles) {
    // The first GEMM reads x through the rows' tokens (x has `tokens` rows); the down
    // GEMM its sorted activation rows.
    const bool gather = g.in == layout.xRows && layout.rowTokens;
    const GroupedGemmArgs args{gather ? layout.x : g.in,
                               g.weights,
                               g.out,
                               layout.gemmTiles,
                               layout.gemmTileCount,
                               g.n,
                               g.k,
                               gather ? p.tokens : rows,
                               p.experts,
                               g.up,
                               gather ? layout.rowTokens : nullptr};
    const cudaError_t e = launchGroupedGemm(args, tileBound, static_cast<cudaStream_t>(p.stream));
    return e == cudaSuccess ? ok()
                            : fail(KILN_ERROR_CUDA, "kiln_moe: grouped GEMM launch failed: %s",
                                   cudaGetErrorString(e));
  }
  return kiln_gemm_bf16_batched(p.gemm, layout.wPtrs + g.first, layout.xPtrs + g.first,
                                layout.outPtrs + g.first, layout.entries, tileRows, g.n, g.k,
                                p.gemm_workspace, p.gemm_workspace_bytes, p.stream);
}

// Whether the experts' activation needs launchMoeActivation: the gate or up biases, or
// the clamped form (else kiln_swiglu_bf16 or kiln_activation_bf16 over the rows).
bool perPairActivation(const kiln_moe_params_t &p) {
  return p.gate_bias || p.up_bias || (p.flags & KILN_MOE_CLAMPED_SWIGLU);
}

// The activation of the `rows` rows the gate/up GEMMs wrote (`pairs` of them a pair's),
// into the gate rows the down GEMM reads.
kiln_status_t activate(const kiln_moe_params_t &p, const MoeLayout &layout, int64_t pairs,
                       int64_t rows) {
  if (!perPairActivation(p))
    return p.gate ? kiln_swiglu_bf16(layout.gateRows, layout.upRows, layout.gateRows,
                                     rows * p.inter, p.stream)
                  : kiln_activation_bf16(layout.upRows, layout.gateRows, rows * p.inter,
                                         p.activation, p.stream);
  const MoeActivation a{!p.gate                               ? MoeGlu::kPlain
                        : (p.flags & KILN_MOE_CLAMPED_SWIGLU) ? MoeGlu::kClamped
                                                              : MoeGlu::kSwiglu,
                        static_cast<const uint16_t *>(p.gate_bias),
                        static_cast<const uint16_t *>(p.up_bias),
                        p.activation,
                        p.glu_alpha,
                        p.glu_limit};
  const cudaError_t e = launchMoeActivation(layout, pairs, a, static_cast<cudaStream_t>(p.stream));
  return e == cudaSuccess ? ok()
                          : fail(KILN_ERROR_CUDA, "kiln_moe: activation launch failed: %s",
                                 cudaGetErrorString(e));
}

// The weighted sum of each token's expert rows into out.
kiln_status_t combine(const MoeLayout &layout, const kiln_moe_params_t *p) {
  const cudaError_t e = launchMoeCombine(layout, p->down_bias, p->out, p->tokens, p->top_k,
                                         (p->flags & KILN_MOE_F32_COMBINE) != 0,
                                         static_cast<cudaStream_t>(p->stream));
  return e == cudaSuccess
             ? ok()
             : fail(KILN_ERROR_CUDA, "kiln_moe: combine launch failed: %s", cudaGetErrorString(e));
}

} // namespace

extern "C" kiln_status_t kiln_moe_scratch_bytes_per_token(int64_t hidden, int64_t inter,
                                                          int32_t top_k, uint64_t *bytes) {
  ArgChecker c{"kiln_moe_scratch_bytes_per_token"};
  if (!c.notNull(bytes, "bytes") || !checkRows(c, hidden, inter, top_k))
    return c.status;
  *bytes = kiln_moe_scratch_per_token(hidden, inter, top_k);
  return ok();
}

extern "C" kiln_status_t kiln_moe(const kiln_moe_params_t *p) {
  ArgChecker c{"kiln_moe"};
  if (!c.notNull(p, "params"))
    return c.status;
  const struct {
    const void *ptr;
    const char *name;
  } buffers[] = {{p->x, "x"},     {p->logits, "logits"}, {p->up, "up"},
                 {p->down, "down"}, {p->out, "out"},       {p->scratch, "scratch"}};
  const int logitBytes = (p->flags & KILN_MOE_F32_LOGITS) ? 4 : 2;
  for (const auto &b : buffers)
    // logits are read one element at a time; the rest with 16-byte vectors.
    if (!c.notNull(b.ptr, b.name) ||
        (b.ptr == p->logits ? !c.elementAligned(b.ptr, logitBytes, b.name)
                            : !c.aligned16(b.ptr, b.name)))
      return c.status;
  if ((p->gate && !c.aligned16(p->gate, "gate")) ||
      (p->score_bias && !c.elementAligned(p->score_bias, 4, "score_bias")) ||
      (p->gate_bias && !c.aligned16(p->gate_bias, "gate_bias")) ||
      (p->up_bias && !c.aligned16(p->up_bias, "up_bias")) ||
      (p->down_bias && !c.aligned16(p->down_bias, "down_bias")))
    return c.status;
  if (!c.notNull(p->gemm, "gemm") || !c.nonNegative(p->tokens, "tokens") ||
      !checkRows(c, p->hidden, p->inter, p->top_k) || !checkExperts(c, p->experts, p->top_k) ||
      !c.sizeFits(p->tokens, p->hidden, "x") || !c.sizeFits(p->tokens, p->experts, "logits") ||
      !c.sizeFits(p->experts * p->inter, p->hidden, "up") || !checkGroups(c, *p) ||
      !checkExpertForm(c, *p))
    return c.status;
  if (p->flags & ~KILN_MOE_KNOWN_FLAGS)
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

  cudaStream_t stream = static_cast<cudaStream_t>(p->stream);
  const bool rowInvariant = p->flags & KILN_MOE_ROW_INVARIANT;
  int tileRows = rowInvariant ? 1 : tileRowsFor(*p, entries);
  bool ownGemm = !rowInvariant && tileRows > 1 && useOwnGroupedGemm(*p, entries, stream);
  if (rowInvariant)
    if (kiln_status_t s = rowInvariantGemm(*p, stream, &ownGemm); s != KILN_OK)
      return s;
  // The own grouped GEMM reads exact per-expert rows: no padding, no cuBLASLt entries.
  if (ownGemm)
    tileRows = 1;
  const uint64_t tokens = static_cast<uint64_t>(p->tokens);
  char *at = static_cast<char *>(p->scratch);
  auto carve = [&](int which) {
    char *start = at;
    at += section(*p, which) * tokens;
    return start;
  };
  MoeLayout layout{};
  layout.x = static_cast<const uint16_t *>(p->x);
  layout.gate = static_cast<const uint16_t *>(p->gate); // null: plain experts
  layout.up = static_cast<const uint16_t *>(p->up);
  layout.down = static_cast<const uint16_t *>(p->down);
  layout.hidden = p->hidden;
  layout.inter = p->inter;
  layout.ids = reinterpret_cast<int32_t *>(carve(0));
  layout.weights = reinterpret_cast<float *>(carve(1));
  layout.slots = reinterpret_cast<int32_t *>(carve(2));
  layout.table = reinterpret_cast<int32_t *>(carve(3));
  // Pairs mode: an entry per pair. Grouped: per M-row tile, at most (pairs + experts x
  // (M - 1)) / M of them. The own grouped GEMM: none; its token tiles take the pointer
  // section (at most 12 x (pairs / 160 + experts) + 4 bytes of its 72 x pairs).
  layout.entries = ownGemm         ? 0
                   : tileRows == 1 ? entries
                                   : (entries + p->experts * (tileRows - 1)) / tileRows;
  void **pointers = reinterpret_cast<void **>(carve(4));
  layout.wPtrs = const_cast<const void **>(pointers);
  layout.xPtrs = const_cast<const void **>(pointers + 3 * layout.entries);
  layout.outPtrs = pointers + 6 * layout.entries;
  const int64_t tileBound = groupedGemmTileBound(entries, p->experts);
  if (ownGemm) {
    layout.gemmTiles = reinterpret_cast<GroupedGemmTile *>(pointers);
    layout.gemmTileCount = reinterpret_cast<int32_t *>(layout.gemmTiles + tileBound);
  }
  layout.xRows = reinterpret_cast<uint16_t *>(carve(5));
  // The own grouped GEMM can gather x's rows itself (the x rows section then holds each
  // sorted row's token), but its producer's cp.async gather ran the gate/up GEMM at 75%
  // of the read ceiling against 86% over the gather kernel's sorted copy (H100,
  // DeepSeek-V3 at 4096 tokens, kiln_bench_grouped_gemm's forms): the copy stays.
  constexpr bool kGatherInGemm = false;
  layout.rowTokens = ownGemm && kGatherInGemm ? reinterpret_cast<int32_t *>(layout.xRows) : nullptr;
  layout.gateRows = reinterpret_cast<uint16_t *>(carve(6));
  layout.upRows = reinterpret_cast<uint16_t *>(carve(7));
  layout.yRows = reinterpret_cast<uint16_t *>(carve(8));
  // Rows the GEMMs and the SwiGLU cover: the pairs, or their padded expert-sorted rows.
  const int64_t rows = ownGemm ? entries : layout.entries * tileRows;

  const MoeRouting routing{static_cast<int>(p->experts),
                           p->top_k,
                           p->flags,
                           p->score_bias,
                           orOne(p->groups),
                           orOne(p->top_groups),
                           p->scale == 0.0f ? 1.0f : p->scale};
  const bool grouped = ownGemm || tileRows > 1;
  cudaError_t e = launchMoeRoute(p->logits, layout, p->tokens, routing, !grouped, stream);
  if (e == cudaSuccess && grouped)
    e = launchMoeGroup(layout, entries, p->top_k, static_cast<int>(p->experts), tileRows, stream);
  if (e != cudaSuccess)
    return fail(KILN_ERROR_CUDA, "kiln_moe: routing launch failed: %s", cudaGetErrorString(e));
  // The gate, up and down GEMMs (their cuBLASLt entries lie one after the other in each
  // pointer array); down reads the activation written over the gate rows.
  auto weight = [](const void *w) { return static_cast<const uint16_t *>(w); };
  const ExpertGemm gemms[] = {
      {layout.xRows, weight(p->gate), layout.gateRows, p->inter, p->hidden, 0},
      {layout.xRows, weight(p->up), layout.upRows, p->inter, p->hidden, layout.entries},
      {layout.gateRows, weight(p->down), layout.yRows, p->hidden, p->inter, 2 * layout.entries}};
  // The own GEMM's gated form runs gate, up and SwiGLU in one pass over the weights, the
  // activation straight into the gate rows (bitwise what the three steps give); its
  // epilogue knows neither the biases nor the clamped form (the down bias alone is the
  // combine's: the fused form stays).
  const bool fusedGateUp = ownGemm && p->gate && !perPairActivation(*p);
  // Plain experts skip the gate GEMM; their activation goes where SwiGLU's would.
  for (int g = p->gate ? 0 : 1; g < 3; ++g) {
    if (fusedGateUp && g == 1)
      continue; // the up GEMM ran with the gate's
    if (g == 2 && !fusedGateUp)
      if (kiln_status_t s = activate(*p, layout, entries, rows); s != KILN_OK)
        return s;
    ExpertGemm gemm = gemms[g];
    if (fusedGateUp && g == 0)
      gemm.up = weight(p->up);
    if (kiln_status_t s = runExpertGemm(*p, layout, gemm, tileRows, tileBound, rows);
        s != KILN_OK)
      return s;
  }
  return combine(layout, p);
}

extern "C" kiln_status_t kiln_moe_prepare(void) {
  groupedGemmDeviceState(/*mayProbe=*/true);
  return ok();
}
