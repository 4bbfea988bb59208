// What the compiled-code calls of recurrent layers share (Recurrent.cpp: the Mamba2 conv
// and scan; GatedDeltaNet.cpp): the kernels a step's phase needs, the per-slot states as
// the layer's resources with the rewind commit before a step's launches, and a call's end.
#ifndef KILN_LIB_RUNTIME_RECURRENT_H
#define KILN_LIB_RUNTIME_RECURRENT_H

#include "Context.h"

#include <cstdint>

namespace kiln::rt::recurrent {

// The state kernels: what the call asks for against what the step needs. A prompt runs
// token by token (sequential) or prompt-wide (parallel: one launch a layer); a layer with
// one prompt kernel names it twice.
struct StateKernels {
  int32_t update, spec, prefill, parallelPrefill;
};

// A state layer's call against the step set: one is set, and its token count is the
// call's `tokens`.
kiln_status_t checkStep(const Call &c, const kiln_rt_context *ctx, int64_t tokens);

// Checks the call's kernels for the step's phase and returns whether the step runs the
// speculative (multi-token) kernel: a decode step of 1 + drafts tokens a sequence, which
// needs the spec kernel and the layer's intermediates (interOffset >= 0) of 1 +
// max_draft_len tokens a slot.
kiln_status_t checkPhase(const Call &c, const kiln_rt_context *ctx, StateKernels want,
                         int32_t decodeKernel, int32_t prefillKernel, int32_t specDecMode,
                         int64_t interOffset, bool *spec);

// What every state layer does before its launches: the state (and the intermediates,
// interOffset >= 0: [slots, 1 + max_draft_len] of slotBytes each) as the layer's
// resources `stateKind` / `interKind`, no capture of a prompt's launches, nothing more in
// a dry context (*launch false), else the context's device and the commit of the pending
// accepted states (a decode or extend step; one launch).
kiln_status_t claimStates(const Call &c, kiln_rt_context *ctx, const char *stateKind,
                          const char *interKind, uint64_t stateOffset, int64_t interOffset,
                          uint64_t slotBytes, bool *launch);

// The end of a call: the checked launch, the trace of `out` (rows x cols bf16) and the
// sticky record.
int32_t finish(const Call &c, kiln_rt_context *ctx, kiln_status_t s, const void *out, int64_t rows,
               int64_t cols);

} // namespace kiln::rt::recurrent

#endif
