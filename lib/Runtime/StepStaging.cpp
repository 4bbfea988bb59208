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

// Positions and each token's sequence. A decode step of one token a sequence (the
// common step) is a loop the compiler vectorizes.
void fillTokens(int32_t *pos, int32_t *tb, const kiln_rt_batch_t &b, const int32_t *cu,
                int64_t tokens) {
  if (tokens == b.batch) { // every q_len is 1 (each is >= 1)
    for (int i = 0; i < b.batch; ++i) {
      pos[i] = b.seq_lens[i] - 1;
      tb[i] = i;
    }
    return;
  }
  for (int i = 0; i < b.batch; ++i) {
    const int32_t start = b.seq_lens[i] - b.q_lens[i], first = cu[i];
    for (int32_t t = 0; t < b.q_lens[i]; ++t) {
      pos[first + t] = start + t;
      tb[first + t] = i;
    }
  }
}

// The block table's pages in use. Short rows (kShortBlockTableRow: batch 256 of 256
// positions has 16 pages, 64 bytes) go in one copy of the whole table, since a copy a row
// costs about as much as copying the row whole; entries past a row's pages in use travel
// along unread. Long rows (1,152 bytes at 4,608 positions: 73 KB at batch 64, 3.5 of a
// 6.6 us step when copied whole) go a copy a row of their pages in use.
void fillBlockTable(int32_t *table, const kiln_rt_batch_t &b, int64_t P, int64_t page) {
  if (P <= kShortBlockTableRow) {
    std::memcpy(table, b.block_table, static_cast<size_t>(b.batch * P) * sizeof(int32_t));
    return;
  }
  for (int i = 0; i < b.batch; ++i)
    std::memcpy(table + i * P, b.block_table + i * P,
                static_cast<size_t>((b.seq_lens[i] + page - 1) / page) * sizeof(int32_t));
}

// A slot and a {pending, buffer} pair a sequence: the step's own, or the defaults (slot i,
// nothing pending).
void fillSlots(int32_t *slots, int32_t *pending, const kiln_rt_batch_t &b) {
  if (b.slots)
    std::memcpy(slots, b.slots, static_cast<size_t>(b.batch) * sizeof(int32_t));
  else
    for (int i = 0; i < b.batch; ++i)
      slots[i] = i;
  if (b.pending)
    std::memcpy(pending, b.pending, static_cast<size_t>(b.batch) * 2 * sizeof(int32_t));
  else
    std::memset(pending, 0, static_cast<size_t>(b.batch) * 2 * sizeof(int32_t));
}

} // namespace

size_t fillStepStaging(char *h, const kiln_rt_io_layout_t &io, const StagingShape &shape,
                       const kiln_rt_batch_t &b, const int32_t *cu, int64_t tokens) {
  const int64_t P = shape.pagesPerSeq, page = shape.pageSize;
  std::memcpy(at(h, io.token_ids), b.token_ids, static_cast<size_t>(tokens) * sizeof(int32_t));
  fillTokens(at(h, io.positions), at(h, io.token_batch), b, cu, tokens);
  std::memcpy(at(h, io.seq_lens), b.seq_lens, static_cast<size_t>(b.batch) * sizeof(int32_t));
  std::memcpy(at(h, io.cu_seqlens), cu, static_cast<size_t>(b.batch + 1) * sizeof(int32_t));
  fillSlots(at(h, io.slots), at(h, io.pending), b);
  std::memcpy(at(h, io.logit_rows), b.logit_rows,
              static_cast<size_t>(b.num_logit_rows) * sizeof(int32_t));
  fillBlockTable(at(h, io.block_table), b, P, page);
  if (shape.ringPages > 0)
    fillRingTable(at(h, io.ring_table), b, P, page, shape.ringPages);
  return io.block_table + static_cast<size_t>(b.batch) * P * sizeof(int32_t);
}

} // namespace kiln::rt
