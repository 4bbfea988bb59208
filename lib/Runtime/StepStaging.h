// The step inputs in the io staging: what kiln_rt_set_batch writes, once it has validated
// a step, into the pinned host mirror of the io region (Layout.h) that the step's first
// kernel copies to the device. Apart from the context so that a CPU test checks it and a
// CPU benchmark (bench/Runtime/bench_set_batch.cpp) times it: it is the host path of
// every step, and at batch 256 most of a replayed step's host time.
#ifndef KILN_LIB_RUNTIME_STEPSTAGING_H
#define KILN_LIB_RUNTIME_STEPSTAGING_H

#include "kiln/Runtime/Layout.h"
#include "kiln/Runtime/Runtime.h"

#include <cstddef>
#include <cstdint>

namespace kiln::rt {

// Block-table rows of at most this many pages (128 bytes) are handled whole, the unused
// entries along: validated masked, copied in one copy of the table. Longer rows, mostly
// unused at decode (288 pages at 4,608 positions), a sequence's pages in use only.
constexpr int64_t kShortBlockTableRow = 32;

struct StagingShape {
  int64_t pagesPerSeq; // a block-table row (max_pages_per_seq)
  int64_t pageSize;
  int32_t ringPages; // pages a slot of a KV ring pool keeps (0: the model has no ring)
};

// Writes the validated step `b` into `host` (laid out as `io`): token ids, positions,
// each token's sequence, logit rows, sequence lengths, cu_seqlens (`cu`, batch + 1
// entries), slots, pending drafts, and of the block table (and ring table) each
// sequence's pages in use: no kernel reads an entry past its sequence's length. Returns
// the bytes the step uploads: the io region up to its last block-table row.
size_t fillStepStaging(char *host, const kiln_rt_io_layout_t &io, const StagingShape &shape,
                       const kiln_rt_batch_t &b, const int32_t *cu, int64_t tokens);

} // namespace kiln::rt

#endif // KILN_LIB_RUNTIME_STEPSTAGING_H
