// Helpers of the legacy bind-based entry points (kiln_rt_mla, kiln_rt_ssm, kiln_rt_conv,
// kiln_rt_commit_accepted): bindings, the step's legacy view, the lazily built token
// index (MLA token-expanded tables) and state-slot helpers. Kept as they were until
// these families are rewritten onto the compiled-model ABI.
#ifndef KILN_LIB_RUNTIME_LEGACY_H
#define KILN_LIB_RUNTIME_LEGACY_H

#include "Context.h"

#include <initializer_list>
#include <string>
#include <utility>

namespace kiln::rt::legacy {

size_t dtypeBytes(int32_t dtype);
void *lookup(const kiln_rt_context *ctx, int32_t layer, const std::string &name);
// Required tensor: error "layer 3: tensor 'dt' is not bound".
kiln_status_t require(const Call &c, const kiln_rt_context *ctx, const char *name, void **out);
// Conv tensors: "conv.<name>" first, then "<name>".
void *lookupConv(const kiln_rt_context *ctx, int32_t layer, const char *name);
kiln_status_t requireConv(const Call &c, const kiln_rt_context *ctx, const char *name,
                          void **out);
using Named = std::initializer_list<std::pair<const char *, void **>>;
kiln_status_t requireAll(const Call &c, const kiln_rt_context *ctx, Named tensors);
kiln_status_t requireAllConv(const Call &c, const kiln_rt_context *ctx, Named tensors);
// Common checks of every legacy entry point: the call's phase must be the step's.
kiln_status_t checkCall(const Call &c, const kiln_rt_context *ctx, int32_t phase);
// Builds the token index of the current step in the legacy scratch (once per step and
// phase). expanded: also one block-table row per token; decode: cu_seqlens of q_len.
kiln_status_t ensureIndex(const Call &c, kiln_rt_context *ctx, int32_t phase, bool expanded);
float softmaxScale(const kiln_rt_context *ctx, int headDim);
kiln_status_t checkPaged(const Call &c, const kiln_rt_context *ctx, int32_t pageSize);
// Prefill: every prompt must fit in its block-table row.
kiln_status_t checkPrefillFits(const Call &c, const kiln_rt_context *ctx, int32_t pageSize);
kiln_status_t checkSlots(const Call &c, const kiln_rt_context *ctx);
// The state slot pointer and index array for sequence b of a one-sequence launch.
void slotFor(const kiln_rt_context *ctx, char *base, uint64_t slotBytes, int b, void **state,
             const int32_t **indices, int32_t *numSlots);
kiln_status_t zeroSlots(const Call &c, kiln_rt_context *ctx, uint64_t offset,
                        uint64_t slotBytes);

} // namespace kiln::rt::legacy

#endif
