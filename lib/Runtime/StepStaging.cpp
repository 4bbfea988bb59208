#include "StepStaging.h"

#include <cstring>

namespace kiln::rt {
namespace {

int32_t *at(char *host, uint64_t offset) { return reinterpret_cast<int32_t *>(host + offset); }

// The ring pools' block table (Layout.h, kiln_rt_ring_pages): logical page p of the
// sequence in slot s is page s * R + p % R of its ring; only the pages in use.
void fillRingTable(int32_t *ring, const kiln_rt_batch_t &b, int64_t P, int64_t page,
                   int32_t R) {
  for (int i = 0; i < b.batch; ++i) {
    const int32_t slot = b.slots ? b.slots[i] : i;
    const int64_t used = (b.seq_lens[i] + page - 1) / page;
    for (int64_t p = 0; p < used; ++p)
      ring[i * P + p] = slot * R + static_cast<int32_t>(p % R);
  }
}

} // namespace

size_t fillStepStaging(char *h, const kiln_rt_io_layout_t &io, const StagingShape &shape,
                       const kiln_rt_batch_t &b, const int32_t *cu, int64_t tokens) {
  const int64_t P = shape.pagesPerSeq, page = shape.pageSize;
  int32_t *pos = at(h, io.positions), *tb = at(h, io.token_batch);
  int32_t *slots = at(h, io.slots), *pending = at(h, io.pending);
  int32_t *table = at(h, io.block_table);
  std::memcpy(at(h, io.token_ids), b.token_ids, static_cast<size_t>(tokens) * sizeof(int32_t));
  // One pass over the sequences. Of the block table, only each sequence's pages in use: a
  // whole row (max_seq_len / page_size entries) would dominate a large decode batch's
  // host time (73 KB at batch 64 of the 8B benchmark: 3.5 of its 6.6 us a step).
  for (int i = 0; i < b.batch; ++i) {
    const int32_t start = b.seq_lens[i] - b.q_lens[i], first = cu[i];
    for (int32_t t = 0; t < b.q_lens[i]; ++t) {
      pos[first + t] = start + t;
      tb[first + t] = i;
    }
    slots[i] = b.slots ? b.slots[i] : i;
    pending[2 * i] = b.pending ? b.pending[2 * i] : 0;
    pending[2 * i + 1] = b.pending ? b.pending[2 * i + 1] : 0;
    std::memcpy(table + i * P, b.block_table + i * P,
                static_cast<size_t>((b.seq_lens[i] + page - 1) / page) * sizeof(int32_t));
  }
  std::memcpy(at(h, io.seq_lens), b.seq_lens, static_cast<size_t>(b.batch) * sizeof(int32_t));
  std::memcpy(at(h, io.cu_seqlens), cu, static_cast<size_t>(b.batch + 1) * sizeof(int32_t));
  std::memcpy(at(h, io.logit_rows), b.logit_rows,
              static_cast<size_t>(b.num_logit_rows) * sizeof(int32_t));
  if (shape.ringPages > 0)
    fillRingTable(at(h, io.ring_table), b, P, page, shape.ringPages);
  return io.block_table + static_cast<size_t>(b.batch) * P * sizeof(int32_t);
}

} // namespace kiln::rt
