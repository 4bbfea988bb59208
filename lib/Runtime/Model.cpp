// The serving API (include/kiln/Runtime/Model.h): loading a compiled model and its
// weights, sequences with slots and KV pages, and the prefill / decode / extend steps.
#include "kiln/Runtime/Model.h"

#include "Context.h"

#include "kiln/Kernels/HostNumeric.h"
#include "kiln/Runtime/Manifest.h"
#include "kiln/Runtime/Safetensors.h"
#include "kiln/Runtime/WeightTransforms.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using kiln::kernels::fail;
using kiln::rt::guarded;

namespace {

using ManifestFn = const char *(*)(void);
using ForwardFn = void (*)(kiln_rt_context_t *);

struct Sequence {
  bool live = false;
  int32_t id = -1;
  int32_t len = 0;
  std::vector<int32_t> pages;
  // A speculative decode step left the recurrent layers' state after each of its
  // `specTokens` tokens in their rewind intermediates (or, replay mode, the tokens' inputs
  // in the replay buffer `replayBuffer`); the length the sequence has when it is next
  // used (truncated to the accepted prefix, or stepped) gives the accepted count, which
  // its next step commits (`pendingAccepted`, docs/replay.md). -1: nothing pending.
  int32_t specBase = -1;
  int32_t specTokens = 0;
  int32_t pendingAccepted = 0;
  int32_t replayBuffer = 0;
};

// One sequence's part of a step.
struct Piece {
  int32_t slot = 0;
  const int32_t *tokens = nullptr;
  int32_t count = 0;
  int32_t out = -1; // index of the result (next token / logits row) it fills, or -1
};

} // namespace

struct kiln_model {
  void *handle = nullptr;
  ManifestFn manifestFn = nullptr;
  ForwardFn forwardFn = nullptr;
  std::string soPath;
  std::string manifestText;
  kiln::runtime::Manifest manifest;
  kiln_rt_context_t *ctx = nullptr;
  bool dry = false;
  int32_t pagesPerSeq = 0;
  std::vector<Sequence> slots;
  std::vector<int32_t> freePages; // a stack
  int32_t nextId = 1;
  uint64_t usedBytes = 0;
  uint64_t steps = 0;
  // Tensor parallelism: this model's rank of the manifest's tp_ranks (its weights are
  // that rank's blocks of the sharded tensors).
  int32_t tpRank = 0, tpRanks = 1;

  // Host scratch of a step, sized at load (no allocation per step).
  std::vector<int32_t> qLens, seqLens, table, slotIds, tokens, rows, argmax, oldLens;
  std::vector<int32_t> pendingPairs; // the step's {pending, buffer} per sequence
  // MTP drafts (a model compiled with --spec mtp:1): the step's, by logit row, and the
  // last call's, in the layout of its greedy tokens (-1 where none came).
  std::vector<int32_t> stepDrafts, lastDrafts;
  std::vector<float> logits; // [max_logit_rows, vocab], sized on first use
  std::vector<Piece> pieces;
};

namespace {

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void destroy(kiln_model *m) {
  if (!m)
    return;
  kiln_rt_destroy(m->ctx);
  if (m->handle)
    dlclose(m->handle);
  delete m;
}

// dlopen + manifest + context configuration (everything but the context).
kiln_status_t openModel(const char *fn, const char *soPath, kiln_model *m,
                        kiln_rt_config_t *config) {
  if (!soPath || !*soPath)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: so_path is null or empty", fn);
  m->soPath = soPath;
  dlerror();
  m->handle = dlopen(soPath, RTLD_NOW | RTLD_LOCAL);
  if (!m->handle) {
    const char *e = dlerror();
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: dlopen %s: %s", fn, soPath, e ? e : "?");
  }
  m->manifestFn = reinterpret_cast<ManifestFn>(dlsym(m->handle, "kiln_model_manifest"));
  m->forwardFn = reinterpret_cast<ForwardFn>(dlsym(m->handle, "kiln_model_forward"));
  if (!m->manifestFn || !m->forwardFn)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: %s does not export kiln_model_manifest and kiln_model_forward (not a "
                "model compiled with kiln-compile --emit=so?)", fn, soPath);
  const char *text = m->manifestFn();
  if (!text)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s: kiln_model_manifest() returned NULL", fn,
                soPath);
  m->manifestText = text;
  std::string error;
  if (!kiln::runtime::parseManifest(m->manifestText, m->manifest, error))
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s: manifest: %s", fn, soPath, error.c_str());
  const auto &mf = m->manifest;
  kiln_rt_config_t &c = *config;
  c = kiln_rt_config_t{};
  c.vocab_size = mf.vocabSize;
  c.max_batch = mf.maxBatch;
  c.max_seq_len = mf.maxSeqLen;
  c.page_size = mf.pageSize;
  c.kv_pages = mf.kvPages;
  c.max_step_tokens = mf.maxStepTokens;
  c.max_logit_rows = mf.maxLogitRows;
  c.max_draft_len = mf.maxDraftLen;
  c.weight_bytes = mf.weightBytes;
  c.cache_bytes = mf.cacheBytes;
  c.activation_bytes = mf.activationBytes;
  c.workspace_bytes = mf.workspaceBytes;
  c.io_bytes = mf.ioBytes;
  c.kv_ring_window = mf.kvRingWindow;
  if (mf.vocabSize < 1)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s: manifest: vocab_size %lld < 1", fn, soPath,
                static_cast<long long>(mf.vocabSize));
  return KILN_OK;
}

// Sequence bookkeeping sized from the manifest.
// The compile-time choice of CUDA graphs: how many shapes, of which batches, within the
// plan's memory reserve (the manifest's cuda_graphs, cuda_graph_batches,
// cuda_graph_bytes).
kiln_status_t applyGraphChoices(kiln_model *m) {
  const std::vector<int32_t> &batches = m->manifest.cudaGraphBatches;
  if (kiln_status_t s = kiln_rt_set_max_graphs(m->ctx, static_cast<int32_t>(
                                                           m->manifest.cudaGraphs));
      s != KILN_OK)
    return s;
  return kiln_rt_set_graph_limits(m->ctx, batches.data(), static_cast<int32_t>(batches.size()),
                                  m->manifest.cudaGraphBytes);
}

void initSequences(kiln_model *m) {
  const auto &mf = m->manifest;
  m->pagesPerSeq = static_cast<int32_t>(kiln_rt_max_pages_per_seq(mf.maxSeqLen, mf.pageSize));
  m->slots.assign(static_cast<size_t>(mf.maxBatch), Sequence{});
  for (auto &s : m->slots)
    s.pages.reserve(static_cast<size_t>(m->pagesPerSeq));
  m->freePages.clear();
  for (int64_t p = mf.kvPages - 1; p >= 0; --p)
    m->freePages.push_back(static_cast<int32_t>(p));
  const size_t B = static_cast<size_t>(mf.maxBatch);
  m->qLens.resize(B);
  m->seqLens.resize(B);
  m->slotIds.resize(B);
  m->pendingPairs.assign(2 * static_cast<size_t>(B), 0);
  m->table.resize(B * static_cast<size_t>(m->pagesPerSeq));
  m->tokens.resize(static_cast<size_t>(mf.maxStepTokens));
  m->rows.resize(static_cast<size_t>(mf.maxLogitRows));
  m->argmax.resize(static_cast<size_t>(mf.maxLogitRows));
  m->pieces.reserve(B);
}

// `count` 16-bit values at the start of `data` widened in place to f32 (from the last
// element down, so no value is overwritten before it is read).
void widenToF32(unsigned char *data, uint64_t count, bool bf16) {
  for (uint64_t i = count; i-- > 0;) {
    uint16_t bits;
    std::memcpy(&bits, data + 2 * i, 2);
    const float value = bf16 ? kiln_bf16_to_float(bits) : kiln_f16_to_float(bits);
    std::memcpy(data + 4 * i, &value, 4);
  }
}

// Manifest weight `w` with `mxfp4` into `w.bytes` at `device`: its checkpoint tensors
// `<name>_blocks` and `<name>_scales` read a piece at a time through `scratch` and
// dequantized to bf16 in the host buffer (kiln::weights::readMxfp4), then laid out
// (applyLayout) as a bf16 checkpoint tensor would be.
kiln_status_t loadMxfp4(const char *fn, const kiln::weights::SafetensorsIndex &index,
                        const char *weightsPath, const kiln::runtime::ManifestWeight &w,
                        char *device, std::vector<unsigned char> &host,
                        std::vector<unsigned char> &scratch) {
  std::string error;
  if (w.bytes > host.size())
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: weight '%s' (mxfp4): %llu bytes do not fit the host buffer", fn,
                w.name.c_str(), static_cast<unsigned long long>(w.bytes));
  if (!kiln::weights::readMxfp4(index, w, weightsPath, host.data(), scratch, error) ||
      !kiln::weights::applyLayout(host.data(), w, scratch, error))
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s", fn, error.c_str());
  cudaError_t e = cudaMemcpy(device, host.data(), w.bytes, cudaMemcpyHostToDevice);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return fail(KILN_ERROR_CUDA, "%s: copying weight '%s' (mxfp4, from %s) to the device: %s", fn,
                w.name.c_str(), weightsPath, cudaGetErrorString(e));
  }
  return KILN_OK;
}

// One checkpoint tensor `name` of `checkpointShape` and the manifest's dtype into `bytes`
// at `device`, through the host buffer: read, widened to f32 when the manifest says f32,
// then, when `layout` (its manifest weight) says so, transposed and regrouped
// (kiln::weights::applyLayout) in `scratch`.
kiln_status_t loadTensor(const char *fn, const kiln::weights::SafetensorsIndex &index,
                         const char *weightsPath, const std::string &name, const std::string &dtype,
                         const std::vector<int64_t> &checkpointShape, char *device, uint64_t bytes,
                         std::vector<unsigned char> &host, std::vector<unsigned char> &scratch,
                         const kiln::runtime::ManifestWeight *layout = nullptr) {
  std::string error;
  const kiln::weights::TensorInfo *info = index.find(name);
  if (!info)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: weight '%s' (%s %s) is not in the checkpoint %s",
                fn, name.c_str(), dtype.c_str(), shapeText(checkpointShape).c_str(), weightsPath);
  const char *found = kiln::weights::dtypeName(info->dtype);
  // An f32 parameter (Mamba2's A_log, D, dt_bias) may be saved in a 16-bit dtype: the
  // values widen exactly.
  const bool widen = dtype == "f32" && (std::strcmp(found, "bf16") == 0 ||
                                        std::strcmp(found, "f16") == 0);
  if (dtype != found && !widen)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: weight '%s' in %s is %s, the model needs %s",
                fn, name.c_str(), info->file.c_str(), found, dtype.c_str());
  if (info->shape != checkpointShape) {
    // With from=, the checkpoint's shape differs from the loaded one: say both.
    const std::string loadedAs =
        layout && !layout->fromShape.empty()
            ? " (the manifest's from=; it loads as " + shapeText(layout->shape) + ")"
            : std::string();
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: weight '%s' in %s has shape %s, the model needs %s%s", fn, name.c_str(),
                info->file.c_str(), shapeText(info->shape).c_str(),
                shapeText(checkpointShape).c_str(), loadedAs.c_str());
  }
  if (info->bytes != (widen ? bytes / 2 : bytes) || bytes > host.size())
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: weight '%s' in %s holds %llu bytes, the manifest plans %llu", fn,
                name.c_str(), info->file.c_str(), static_cast<unsigned long long>(info->bytes),
                static_cast<unsigned long long>(bytes));
  if (!index.read(*info, host.data(), error))
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: weight '%s': %s", fn, name.c_str(),
                error.c_str());
  if (widen)
    widenToF32(host.data(), info->bytes / 2, std::strcmp(found, "bf16") == 0);
  if (layout && !kiln::weights::applyLayout(host.data(), *layout, scratch, error))
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s", fn, error.c_str());
  cudaError_t e = cudaMemcpy(device, host.data(), bytes, cudaMemcpyHostToDevice);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return fail(KILN_ERROR_CUDA, "%s: copying weight '%s' from %s to the device: %s", fn,
                name.c_str(), info->file.c_str(), cudaGetErrorString(e));
  }
  return KILN_OK;
}

// Manifest weight `w` with shard=D/P into `w.bytes` at `device`: this rank's block of
// the checkpoint tensor (kiln::weights::readShard) through the host buffer.
kiln_status_t loadShard(const char *fn, const kiln::weights::SafetensorsIndex &index,
                        const char *weightsPath, const kiln::runtime::ManifestWeight &w,
                        int32_t rank, int32_t ranks, char *device,
                        std::vector<unsigned char> &host) {
  std::string error;
  if (w.bytes > host.size() ||
      !kiln::weights::readShard(index, w, rank, ranks, weightsPath, host.data(), error))
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s", fn,
                error.empty() ? "a sharded weight does not fit the host buffer" : error.c_str());
  cudaError_t e = cudaMemcpy(device, host.data(), w.bytes, cudaMemcpyHostToDevice);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return fail(KILN_ERROR_CUDA, "%s: copying weight '%s' (rank %d's block) to the device: %s",
                fn, w.name.c_str(), rank, cudaGetErrorString(e));
  }
  return KILN_OK;
}

// A manifest weight whose name holds `*` (a MoE layer's experts) is the stack of the
// checkpoint's tensors with `*` replaced by 0, 1, ... along its leading dimension, each
// loaded as it is (parseManifest refuses from=, transpose, rows= and mxfp4 on a stack).
// An `mxfp4` weight loads from its blocks and scales (loadMxfp4).
kiln_status_t loadWeights(const char *fn, kiln_model *m, const char *weightsPath) {
  kiln::weights::SafetensorsIndex index;
  std::string error;
  if (!index.open(weightsPath, error))
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: weights %s: %s", fn, weightsPath,
                error.c_str());
  uint64_t largest = 0;
  for (const auto &w : m->manifest.weights)
    largest = std::max(largest, w.bytes);
  std::vector<unsigned char> host(static_cast<size_t>(largest)), scratch;
  char *base = static_cast<char *>(kiln_rt_weights(m->ctx));
  for (const auto &w : m->manifest.weights) {
    if (w.offset > m->manifest.weightBytes || w.bytes > m->manifest.weightBytes - w.offset)
      return fail(KILN_ERROR_INVALID_ARGUMENT,
                  "%s: weight '%s': %llu bytes at offset %llu do not fit the manifest's "
                  "weight_bytes %llu", fn, w.name.c_str(),
                  static_cast<unsigned long long>(w.bytes),
                  static_cast<unsigned long long>(w.offset),
                  static_cast<unsigned long long>(m->manifest.weightBytes));
    const size_t star = w.name.find('*');
    if (w.shardDim >= 0) {
      if (kiln_status_t s = loadShard(fn, index, weightsPath, w, m->tpRank, m->tpRanks,
                                      base + w.offset, host);
          s != KILN_OK)
        return s;
      continue;
    }
    if (star == std::string::npos && w.mxfp4) {
      if (kiln_status_t s = loadMxfp4(fn, index, weightsPath, w, base + w.offset, host, scratch);
          s != KILN_OK)
        return s;
      continue;
    }
    if (star == std::string::npos) {
      if (kiln_status_t s = loadTensor(fn, index, weightsPath, w.name, w.dtype,
                                       w.fromShape.empty() ? w.shape : w.fromShape, base + w.offset,
                                       w.bytes, host, scratch, &w);
          s != KILN_OK)
        return s;
      continue;
    }
    if (w.shape.size() < 2 || w.shape[0] <= 0 || w.bytes % static_cast<uint64_t>(w.shape[0]))
      return fail(KILN_ERROR_INVALID_ARGUMENT,
                  "%s: stacked weight '%s' needs a leading dimension that divides its bytes "
                  "(shape %s)", fn, w.name.c_str(), shapeText(w.shape).c_str());
    const std::vector<int64_t> slice(w.shape.begin() + 1, w.shape.end());
    const uint64_t sliceBytes = w.bytes / static_cast<uint64_t>(w.shape[0]);
    for (int64_t e = 0; e < w.shape[0]; ++e) {
      const std::string name =
          w.name.substr(0, star) + std::to_string(e) + w.name.substr(star + 1);
      if (kiln_status_t s = loadTensor(fn, index, weightsPath, name, w.dtype, slice,
                                       base + w.offset + static_cast<uint64_t>(e) * sliceBytes,
                                       sliceBytes, host, scratch);
          s != KILN_OK)
        return s;
    }
  }
  return KILN_OK;
}

Sequence *findSequence(kiln_model *m, int32_t id, int32_t *slot = nullptr) {
  for (size_t i = 0; i < m->slots.size(); ++i)
    if (m->slots[i].live && m->slots[i].id == id) {
      if (slot)
        *slot = static_cast<int32_t>(i);
      return &m->slots[i];
    }
  return nullptr;
}

void releasePagesBeyond(kiln_model *m, Sequence &s, size_t keep) {
  while (s.pages.size() > keep) {
    m->freePages.push_back(s.pages.back());
    s.pages.pop_back();
  }
}

// Lengths and page counts of the sequences a call touches, restored if it fails.
struct Snapshot {
  std::vector<std::pair<int32_t, std::pair<int32_t, size_t>>> saved; // slot, (len, pages)

  void take(kiln_model *m, const std::vector<int32_t> &slots) {
    saved.clear();
    for (int32_t s : slots)
      saved.push_back({s, {m->slots[s].len, m->slots[s].pages.size()}});
  }
  // The sequences of a completed step keep it: its states (and speculative bookkeeping)
  // are on the device, whatever a later step of the same call does.
  void forget(const std::vector<Piece> &done) {
    for (const Piece &p : done)
      saved.erase(std::remove_if(saved.begin(), saved.end(),
                                 [&](const auto &entry) { return entry.first == p.slot; }),
                  saved.end());
  }
  void restore(kiln_model *m) {
    for (const auto &[slot, state] : saved) {
      Sequence &s = m->slots[slot];
      s.len = state.first;
      releasePagesBeyond(m, s, state.second);
    }
  }
};

// Resolves a pending speculative step of the sequence in `slot`: its accepted tokens
// (len - specBase of them) become the sequence's pending count, which the recurrent
// layers of its next step commit before anything else (rewind: a copy from the
// intermediates, replay: a fold of the kept inputs; docs/replay.md). No device work here:
// the count rides in the step's pending pairs.
kiln_status_t commitSpeculation(const char *fn, kiln_model *m, int32_t slot) {
  Sequence &s = m->slots[slot];
  if (s.specBase < 0)
    return KILN_OK;
  const int32_t accepted = s.len - s.specBase;
  const int32_t tokens = s.specTokens;
  if (accepted < 1 || accepted > tokens)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: sequence %d keeps %d of the %d tokens of its last speculative step; a "
                "recurrent state can only be rewound to 1..%d of them", fn, s.id, accepted,
                tokens, tokens);
  s.specBase = -1;
  s.pendingAccepted = accepted;
  return KILN_OK;
}

// Resolves ids to slots: live, distinct.
kiln_status_t resolve(const char *fn, kiln_model *m, const int32_t *ids, int32_t n,
                      std::vector<int32_t> &slots) {
  if (n < 1)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: n %d < 1", fn, n);
  if (!ids)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: seq_ids is null", fn);
  if (n > static_cast<int32_t>(m->slots.size()))
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %d sequences > max_batch %zu", fn, n,
                m->slots.size());
  slots.clear();
  for (int32_t i = 0; i < n; ++i) {
    int32_t slot = -1;
    if (!findSequence(m, ids[i], &slot))
      return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: sequence %d (seq_ids[%d]) is not live", fn,
                  ids[i], i);
    if (std::find(slots.begin(), slots.end(), slot) != slots.end())
      return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: sequence %d appears twice", fn, ids[i]);
    slots.push_back(slot);
  }
  return KILN_OK;
}

// One forward call. DECODE: every piece has q_len tokens and every token is a logit row
// (results row-major per piece); PREFILL/EXTEND: one logit row per piece, its last token.
// Results go to argmaxOut[piece.out * perPiece + i] / logitsOut rows likewise.
kiln_status_t runStep(const char *fn, kiln_model *m, int32_t phase,
                      const std::vector<Piece> &pieces, int32_t *argmaxOut, float *logitsOut) {
  const auto &mf = m->manifest;
  const int32_t page = static_cast<int32_t>(mf.pageSize);
  const int32_t P = m->pagesPerSeq;
  const int32_t n = static_cast<int32_t>(pieces.size());
  const bool decode = phase == KILN_RT_PHASE_DECODE;
  int32_t total = 0, numRows = 0;
  for (const Piece &p : pieces)
    if (kiln_status_t s = commitSpeculation(fn, m, p.slot); s != KILN_OK)
      return s;
  std::vector<int32_t> &oldLens = m->oldLens;
  oldLens.resize(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    const Piece &p = pieces[i];
    Sequence &s = m->slots[p.slot];
    oldLens[static_cast<size_t>(i)] = s.len;
    const int32_t newLen = s.len + p.count;
    if (newLen > mf.maxSeqLen)
      return fail(KILN_ERROR_INVALID_ARGUMENT,
                  "%s: sequence %d would reach %d tokens > max_seq_len %lld", fn, s.id, newLen,
                  static_cast<long long>(mf.maxSeqLen));
    // A model without paged KV (kv_pages 0) gives its sequences no pages.
    const size_t need = mf.kvPages > 0 ? static_cast<size_t>((newLen + page - 1) / page) : 0;
    if (need > s.pages.size() && need - s.pages.size() > m->freePages.size())
      return fail(KILN_ERROR_OUT_OF_MEMORY,
                  "%s: sequence %d needs %zu more KV page(s) to reach %d tokens, but only %zu "
                  "of %lld pages are free", fn, s.id, need - s.pages.size(), newLen,
                  m->freePages.size(), static_cast<long long>(mf.kvPages));
    while (s.pages.size() < need) {
      s.pages.push_back(m->freePages.back());
      m->freePages.pop_back();
    }
    m->qLens[i] = p.count;
    m->seqLens[i] = newLen;
    m->slotIds[i] = p.slot;
    m->pendingPairs[2 * static_cast<size_t>(i)] = s.pendingAccepted;
    m->pendingPairs[2 * static_cast<size_t>(i) + 1] = s.replayBuffer;
    std::copy(s.pages.begin(), s.pages.end(), m->table.begin() + static_cast<size_t>(i) * P);
    std::fill(m->table.begin() + static_cast<size_t>(i) * P + s.pages.size(),
              m->table.begin() + static_cast<size_t>(i + 1) * P, 0);
    std::copy(p.tokens, p.tokens + p.count, m->tokens.begin() + total);
    if (decode)
      for (int32_t t = 0; t < p.count; ++t)
        m->rows[numRows++] = total + t;
    else
      m->rows[numRows++] = total + p.count - 1;
    total += p.count;
  }
  kiln_rt_batch_t b{};
  b.phase = phase;
  b.batch = n;
  b.q_lens = m->qLens.data();
  b.seq_lens = m->seqLens.data();
  b.block_table = m->table.data();
  b.slots = m->slotIds.data();
  b.token_ids = m->tokens.data();
  b.logit_rows = m->rows.data();
  b.num_logit_rows = numRows;
  b.pending = m->pendingPairs.data();
  ++m->steps;
  // The upload is left to the forward: a replayed decode step's graph holds it.
  if (kiln_status_t s = kiln::rt::setBatch(m->ctx, &b, kiln::rt::Upload::WithForward);
      s != KILN_OK) {
    std::string message = kiln_last_error();
    return fail(s, "%s: %s step of %d sequence(s), %d token(s): %s", fn,
                kiln_rt_phase_name(phase), n, total, message.c_str());
  }
  // From here the layers have committed the pending tokens and a speculative step has
  // kept its own in the other replay buffer, whether or not the rest succeeds.
  const bool speculative = decode && pieces.front().count > 1;
  for (const Piece &p : pieces) {
    Sequence &seq = m->slots[p.slot];
    seq.pendingAccepted = 0;
    if (speculative)
      seq.replayBuffer ^= 1;
  }
  if (kiln_status_t s = kiln_rt_forward(m->ctx, m->forwardFn); s != KILN_OK) {
    std::string message = kiln_last_error();
    return fail(s, "%s: %s step of %d sequence(s), %d token(s): forward: %s", fn,
                kiln_rt_phase_name(phase), n, total, message.c_str());
  }
  if (kiln_status_t s = kiln_rt_read_argmax(m->ctx, m->argmax.data(), numRows); s != KILN_OK) {
    std::string message = kiln_last_error();
    return fail(s, "%s: %s step: %s", fn, kiln_rt_phase_name(phase), message.c_str());
  }
  const bool drafts = kiln_rt_has_draft_tokens(m->ctx) != 0;
  if (drafts) {
    m->stepDrafts.resize(static_cast<size_t>(numRows));
    if (kiln_status_t s = kiln_rt_read_draft_tokens(m->ctx, m->stepDrafts.data(), numRows);
        s != KILN_OK) {
      std::string message = kiln_last_error();
      return fail(s, "%s: %s step: %s", fn, kiln_rt_phase_name(phase), message.c_str());
    }
  }
  const int64_t vocab = mf.vocabSize;
  if (logitsOut) {
    m->logits.resize(static_cast<size_t>(numRows) * static_cast<size_t>(vocab));
    if (kiln_status_t s = kiln_rt_read_logits(m->ctx, m->logits.data(), numRows, vocab);
        s != KILN_OK) {
      std::string message = kiln_last_error();
      return fail(s, "%s: %s step: %s", fn, kiln_rt_phase_name(phase), message.c_str());
    }
  }
  // A multi-token decode step of a model with recurrent layers left rewind intermediates
  // or replay inputs, which the sequence's next step commits.
  const bool leftStates = speculative && m->ctx->recurrentLayers;
  int32_t row = 0;
  for (int32_t i = 0; i < n; ++i) {
    const Piece &p = pieces[i];
    Sequence &seq = m->slots[p.slot];
    seq.len = m->seqLens[i];
    if (leftStates) {
      seq.specBase = oldLens[static_cast<size_t>(i)];
      seq.specTokens = p.count;
    }
    const int32_t perPiece = decode ? p.count : 1;
    for (int32_t r = 0; r < perPiece; ++r, ++row) {
      if (p.out < 0)
        continue;
      const size_t dst = static_cast<size_t>(p.out) * perPiece + r;
      if (argmaxOut)
        argmaxOut[dst] = m->argmax[row];
      if (drafts && dst < m->lastDrafts.size())
        m->lastDrafts[dst] = m->stepDrafts[row];
      if (logitsOut)
        std::copy(m->logits.begin() + static_cast<size_t>(row) * vocab,
                  m->logits.begin() + static_cast<size_t>(row + 1) * vocab,
                  logitsOut + dst * static_cast<size_t>(vocab));
    }
  }
  return KILN_OK;
}

// Prefill / extend: each sequence's tokens in chunks of max_step_tokens, packed into
// steps; round 0 runs with `firstPhase`, later rounds (continuing chunks) with EXTEND.
kiln_status_t runChunked(const char *fn, kiln_model *m, int32_t firstPhase,
                         const std::vector<int32_t> &slots, const int32_t *const *tokens,
                         const int32_t *lens, int32_t *argmaxOut, float *logitsOut) {
  const auto &mf = m->manifest;
  const int32_t C = static_cast<int32_t>(mf.maxStepTokens);
  const int32_t maxSeqs = static_cast<int32_t>(std::min(mf.maxBatch, mf.maxLogitRows));
  const int32_t n = static_cast<int32_t>(slots.size());
  int32_t longest = 0;
  for (int32_t i = 0; i < n; ++i)
    longest = std::max(longest, lens[i]);
  for (int32_t round = 0; round * static_cast<int64_t>(C) < longest; ++round) {
    const int32_t phase = round == 0 ? firstPhase : KILN_RT_PHASE_EXTEND;
    std::vector<Piece> &step = m->pieces;
    step.clear();
    int32_t stepTokens = 0;
    for (int32_t i = 0; i <= n; ++i) {
      Piece p;
      if (i < n) {
        const int32_t start = round * C;
        if (lens[i] <= start)
          continue;
        p.slot = slots[i];
        p.tokens = tokens[i] + start;
        p.count = std::min(C, lens[i] - start);
        p.out = start + p.count == lens[i] ? i : -1;
      }
      if (!step.empty() && (i == n || stepTokens + p.count > C ||
                            static_cast<int32_t>(step.size()) >= maxSeqs)) {
        if (kiln_status_t s = runStep(fn, m, phase, step, argmaxOut, logitsOut); s != KILN_OK)
          return s;
        step.clear();
        stepTokens = 0;
      }
      if (i < n) {
        step.push_back(p);
        stepTokens += p.count;
      }
    }
  }
  return KILN_OK;
}

kiln_model *asModel(const kiln_model_t *m) { return const_cast<kiln_model *>(m); }

} // namespace

// ---- load --------------------------------------------------------------------------------

namespace {
// kiln_model_load and kiln_model_load_rank: `id` joins the context to a communicator of
// `ranks` (a one-rank one too); the manifest's tp_ranks must equal `ranks`.
kiln_status_t loadModel(const char *fn, const char *so_path, const char *weights_path,
                        int32_t device, int32_t rank, int32_t ranks, const kiln_rt_nccl_id_t *id,
                        kiln_model_t **out) {
  return guarded(fn, [&]() -> kiln_status_t {
    if (!out)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: out is null", fn);
    *out = nullptr;
    if (!weights_path || !*weights_path)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: weights_path is null or empty", fn);
    auto *m = new kiln_model();
    auto failed = [&](kiln_status_t s) {
      std::string message = kiln_last_error();
      destroy(m);
      return fail(s, "%s", message.c_str());
    };
    kiln_rt_config_t config;
    if (kiln_status_t s = openModel(fn, so_path, m, &config); s != KILN_OK)
      return failed(s);
    if (m->manifest.tpRanks != ranks)
      return failed(fail(KILN_ERROR_INVALID_ARGUMENT,
                         "%s: %s was compiled for %lld tensor-parallel rank(s) (its "
                         "manifest's tp_ranks) but is loaded as one of %d; %s",
                         fn, so_path, static_cast<long long>(m->manifest.tpRanks), ranks,
                         m->manifest.tpRanks > 1
                             ? "load it with kiln_model_load_rank on that many ranks"
                             : "a whole model loads with kiln_model_load"));
    if (kiln_status_t s = kiln_rt_create(device, &config, &m->ctx); s != KILN_OK) {
      std::string message = kiln_last_error();
      fail(s, "%s: %s: %s", fn, so_path, message.c_str());
      return failed(s);
    }
    m->ctx->argmaxWithStep = true; // every step reads its argmax (runStep)
    if (id) {
      if (kiln_status_t s = kiln_rt_set_tensor_parallel(m->ctx, rank, ranks, id); s != KILN_OK)
        return failed(s);
      // The communicator's memory is part of the plan: its reserve must hold it.
      const uint64_t taken = kiln_rt_collective_bytes(m->ctx);
      if (taken > m->manifest.collectiveBytes)
        return failed(fail(KILN_ERROR_OUT_OF_MEMORY,
                           "%s: the NCCL communicator of rank %d of %d took %llu bytes of "
                           "device memory, more than the %llu its plan reserves (the "
                           "manifest's collective_bytes); compile with kiln-compile "
                           "--collective-workspace-mib %llu or more",
                           fn, rank, ranks, static_cast<unsigned long long>(taken),
                           static_cast<unsigned long long>(m->manifest.collectiveBytes),
                           static_cast<unsigned long long>((taken + (1u << 20) - 1) >> 20)));
    }
    m->tpRank = rank;
    m->tpRanks = ranks;
    if (kiln_status_t s = applyGraphChoices(m); s != KILN_OK)
      return failed(s);
    if (kiln_status_t s = loadWeights(fn, m, weights_path); s != KILN_OK)
      return failed(s);
    m->usedBytes = kiln_rt_device_bytes_used(m->ctx);
    initSequences(m);
    *out = m;
    return kiln::kernels::ok();
  });
}
} // namespace

extern "C" kiln_status_t kiln_model_load(const char *so_path, const char *weights_path,
                                         int32_t device, kiln_model_t **out) {
  return loadModel("kiln_model_load", so_path, weights_path, device, 0, 1, nullptr, out);
}

extern "C" kiln_status_t kiln_model_load_rank(const char *so_path, const char *weights_path,
                                              int32_t device, int32_t rank, int32_t ranks,
                                              const kiln_rt_nccl_id_t *id, kiln_model_t **out) {
  const char *fn = "kiln_model_load_rank";
  if (ranks < 1 || rank < 0 || rank >= ranks)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: rank %d of %d ranks", fn, rank, ranks);
  if (!id)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: id is null (kiln_rt_nccl_unique_id on rank 0, shared with every rank)",
                fn);
  return loadModel(fn, so_path, weights_path, device, rank, ranks, id, out);
}

extern "C" kiln_status_t kiln_model_load_dry(const char *so_path, kiln_model_t **out) {
  const char *fn = "kiln_model_load_dry";
  return guarded(fn, [&]() -> kiln_status_t {
    if (!out)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: out is null", fn);
    *out = nullptr;
    auto *m = new kiln_model();
    m->dry = true;
    auto failed = [&](kiln_status_t s) {
      std::string message = kiln_last_error();
      destroy(m);
      return fail(s, "%s", message.c_str());
    };
    kiln_rt_config_t config;
    if (kiln_status_t s = openModel(fn, so_path, m, &config); s != KILN_OK)
      return failed(s);
    if (kiln_status_t s = kiln_rt_create_dry(&config, &m->ctx); s != KILN_OK) {
      std::string message = kiln_last_error();
      fail(s, "%s: %s: %s", fn, so_path, message.c_str());
      return failed(s);
    }
    // One rank's graph validates as rank 0 of its ranks (a dry context records them).
    if (m->manifest.tpRanks > 1)
      if (kiln_status_t s = kiln_rt_set_tensor_parallel(
              m->ctx, 0, static_cast<int32_t>(m->manifest.tpRanks), nullptr);
          s != KILN_OK)
        return failed(s);
    m->tpRanks = static_cast<int32_t>(m->manifest.tpRanks);
    if (kiln_status_t s = applyGraphChoices(m); s != KILN_OK)
      return failed(s);
    initSequences(m);
    *out = m;
    return kiln::kernels::ok();
  });
}

extern "C" void kiln_model_unload(kiln_model_t *model) { destroy(model); }

extern "C" kiln_status_t kiln_model_get_info(const kiln_model_t *model, kiln_model_info_t *info) {
  if (!model || !info)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_model_get_info: model or info is null");
  const auto &mf = model->manifest;
  *info = kiln_model_info_t{};
  info->vocab_size = mf.vocabSize;
  info->hidden_size = mf.hiddenSize;
  info->num_layers = mf.numLayers;
  info->max_batch = mf.maxBatch;
  info->max_seq_len = mf.maxSeqLen;
  info->page_size = mf.pageSize;
  info->kv_pages = mf.kvPages;
  info->max_step_tokens = mf.maxStepTokens;
  info->max_logit_rows = mf.maxLogitRows;
  info->max_draft_len = mf.maxDraftLen;
  info->weight_bytes = mf.weightBytes;
  info->cache_bytes = mf.cacheBytes;
  info->speculative_bytes = mf.speculativeBytes;
  info->activation_bytes = mf.activationBytes;
  info->workspace_bytes = mf.workspaceBytes;
  info->io_bytes = mf.ioBytes;
  info->dry = model->dry ? 1 : 0;
  return kiln::kernels::ok();
}

extern "C" const char *kiln_model_manifest_text(const kiln_model_t *model) {
  return model ? model->manifestText.c_str() : "";
}

extern "C" const char *kiln_model_name(const kiln_model_t *model) {
  return model ? model->manifest.name.c_str() : "";
}

extern "C" uint64_t kiln_model_planned_bytes(const kiln_model_t *model) {
  return model ? kiln_rt_planned_bytes(model->ctx) : 0;
}

extern "C" uint64_t kiln_model_planned_collective_bytes(const kiln_model_t *model) {
  return model ? model->manifest.collectiveBytes : 0;
}

extern "C" uint64_t kiln_model_device_bytes_used(const kiln_model_t *model) {
  return model ? model->usedBytes : 0;
}

extern "C" uint64_t kiln_model_device_bytes_now(const kiln_model_t *model) {
  return model ? kiln_rt_device_bytes_used(model->ctx) : 0;
}

extern "C" kiln_rt_context_t *kiln_model_context(kiln_model_t *model) {
  return model ? model->ctx : nullptr;
}

extern "C" kiln_status_t kiln_model_last_drafts(const kiln_model_t *model, int32_t *drafts,
                                                int32_t count) {
  const char *fn = "kiln_model_last_drafts";
  if (!model || !drafts)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: model or drafts is null", fn);
  if (count < 0 || static_cast<size_t>(count) != model->lastDrafts.size())
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: count %d, but the last prefill/decode/extend handed back %zu results", fn,
                count, model->lastDrafts.size());
  std::copy(model->lastDrafts.begin(), model->lastDrafts.end(), drafts);
  return kiln::kernels::ok();
}

extern "C" uint64_t kiln_model_steps(const kiln_model_t *model) {
  return model ? model->steps : 0;
}

// ---- sequences ---------------------------------------------------------------------------

extern "C" kiln_status_t kiln_model_add_sequence(kiln_model_t *model, int32_t *seq_id) {
  const char *fn = "kiln_model_add_sequence";
  if (!model || !seq_id)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: model or seq_id is null", fn);
  for (auto &s : model->slots)
    if (!s.live) {
      s.live = true;
      s.id = model->nextId++;
      s.len = 0;
      s.pages.clear();
      s.pendingAccepted = 0;
      s.replayBuffer = 0;
      *seq_id = s.id;
      return kiln::kernels::ok();
    }
  return fail(KILN_ERROR_OUT_OF_MEMORY, "%s: all %zu sequence slots are in use (max_batch)", fn,
              model->slots.size());
}

extern "C" kiln_status_t kiln_model_remove_sequence(kiln_model_t *model, int32_t seq_id) {
  const char *fn = "kiln_model_remove_sequence";
  if (!model)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: model is null", fn);
  Sequence *s = findSequence(model, seq_id);
  if (!s)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: sequence %d is not live", fn, seq_id);
  releasePagesBeyond(model, *s, 0);
  s->specBase = -1;
  s->live = false;
  s->id = -1;
  s->len = 0;
  return kiln::kernels::ok();
}

extern "C" kiln_status_t kiln_model_truncate(kiln_model_t *model, int32_t seq_id,
                                             int32_t new_len) {
  const char *fn = "kiln_model_truncate";
  if (!model)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: model is null", fn);
  Sequence *s = findSequence(model, seq_id);
  if (!s)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: sequence %d is not live", fn, seq_id);
  if (new_len < 0 || new_len > s->len)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: sequence %d: new_len %d outside [0, its length %d]", fn, seq_id, new_len,
                s->len);
  const int64_t page = model->manifest.pageSize;
  // Recurrent (Mamba2, Gated DeltaNet) states cannot be rewound beyond the last
  // speculative step.
  if (s->specBase < 0 && new_len < s->len && model->ctx->recurrentLayers)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: sequence %d: the model's recurrent layers (Mamba2, Gated DeltaNet) cannot "
                "rewind to %d "
                "of its %d tokens (only within its last speculative step)",
                fn, seq_id, new_len, s->len);
  const int32_t oldLen = s->len;
  s->len = new_len;
  int32_t slot = static_cast<int32_t>(s - model->slots.data());
  if (kiln_status_t st = commitSpeculation(fn, model, slot); st != KILN_OK) {
    s->len = oldLen;
    return st;
  }
  releasePagesBeyond(model, *s, static_cast<size_t>((new_len + page - 1) / page));
  return kiln::kernels::ok();
}

extern "C" int32_t kiln_model_seq_len(const kiln_model_t *model, int32_t seq_id) {
  if (!model)
    return -1;
  const Sequence *s = findSequence(asModel(model), seq_id);
  return s ? s->len : -1;
}

extern "C" int32_t kiln_model_seq_pages(const kiln_model_t *model, int32_t seq_id) {
  if (!model)
    return -1;
  const Sequence *s = findSequence(asModel(model), seq_id);
  return s ? static_cast<int32_t>(s->pages.size()) : -1;
}

extern "C" int32_t kiln_model_free_pages(const kiln_model_t *model) {
  return model ? static_cast<int32_t>(model->freePages.size()) : 0;
}

extern "C" int32_t kiln_model_live_sequences(const kiln_model_t *model) {
  if (!model)
    return 0;
  int32_t live = 0;
  for (const auto &s : model->slots)
    live += s.live ? 1 : 0;
  return live;
}

// ---- steps -------------------------------------------------------------------------------

extern "C" kiln_status_t kiln_model_prefill(kiln_model_t *model, const int32_t *seq_ids,
                                            int32_t n, const int32_t *const *prompts,
                                            const int32_t *prompt_lens, int32_t *next_tokens,
                                            float *logits_host) {
  const char *fn = "kiln_model_prefill";
  return guarded(fn, [&]() -> kiln_status_t {
    if (!model)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: model is null", fn);
    if (!prompts || !prompt_lens || !next_tokens)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: prompts, prompt_lens or next_tokens is null",
                  fn);
    std::vector<int32_t> slots;
    if (kiln_status_t s = resolve(fn, model, seq_ids, n, slots); s != KILN_OK)
      return s;
    for (int32_t i = 0; i < n; ++i) {
      const Sequence &s = model->slots[slots[i]];
      if (s.len != 0)
        return fail(KILN_ERROR_INVALID_ARGUMENT,
                    "%s: sequence %d already holds %d tokens (prefill starts empty sequences; "
                    "use kiln_model_extend to continue one)", fn, s.id, s.len);
      if (prompt_lens[i] < 1 || !prompts[i])
        return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: prompt %d (sequence %d) is empty or null",
                    fn, i, s.id);
      if (prompt_lens[i] > model->manifest.maxSeqLen)
        return fail(KILN_ERROR_INVALID_ARGUMENT,
                    "%s: prompt %d (sequence %d) has %d tokens > max_seq_len %lld", fn, i, s.id,
                    prompt_lens[i], static_cast<long long>(model->manifest.maxSeqLen));
    }
    Snapshot snapshot;
    snapshot.take(model, slots);
    model->lastDrafts.assign(static_cast<size_t>(n), -1);
    kiln_status_t s = runChunked(fn, model, KILN_RT_PHASE_PREFILL, slots, prompts, prompt_lens,
                                 next_tokens, logits_host);
    if (s != KILN_OK) {
      std::string message = kiln_last_error();
      snapshot.restore(model);
      return fail(s, "%s", message.c_str());
    }
    return kiln::kernels::ok();
  });
}

extern "C" kiln_status_t kiln_model_extend(kiln_model_t *model, const int32_t *seq_ids,
                                           int32_t n, const int32_t *const *tokens,
                                           const int32_t *lens, int32_t *last_argmax,
                                           float *logits_host) {
  const char *fn = "kiln_model_extend";
  return guarded(fn, [&]() -> kiln_status_t {
    if (!model)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: model is null", fn);
    if (!tokens || !lens || !last_argmax)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: tokens, lens or last_argmax is null", fn);
    std::vector<int32_t> slots;
    if (kiln_status_t s = resolve(fn, model, seq_ids, n, slots); s != KILN_OK)
      return s;
    for (int32_t i = 0; i < n; ++i)
      if (lens[i] < 1 || !tokens[i])
        return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: sequence %d: no tokens (lens[%d] = %d)",
                    fn, seq_ids[i], i, lens[i]);
    Snapshot snapshot;
    snapshot.take(model, slots);
    model->lastDrafts.assign(static_cast<size_t>(n), -1);
    kiln_status_t s = runChunked(fn, model, KILN_RT_PHASE_EXTEND, slots, tokens, lens,
                                 last_argmax, logits_host);
    if (s != KILN_OK) {
      std::string message = kiln_last_error();
      snapshot.restore(model);
      return fail(s, "%s", message.c_str());
    }
    return kiln::kernels::ok();
  });
}

extern "C" kiln_status_t kiln_model_decode(kiln_model_t *model, const int32_t *seq_ids, int32_t n,
                                           const int32_t *tokens, int32_t q_len, int32_t *argmax,
                                           float *logits_host) {
  const char *fn = "kiln_model_decode";
  return guarded(fn, [&]() -> kiln_status_t {
    if (!model)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: model is null", fn);
    if (!tokens || !argmax)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: tokens or argmax is null", fn);
    const auto &mf = model->manifest;
    if (q_len < 1)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: q_len %d < 1", fn, q_len);
    if (q_len > 1 + mf.maxDraftLen)
      return fail(KILN_ERROR_INVALID_ARGUMENT,
                  "%s: q_len %d verifies %d draft tokens, but the model was compiled with "
                  "max_draft_len %lld (compile it with drafts >= %d)", fn, q_len, q_len - 1,
                  static_cast<long long>(mf.maxDraftLen), q_len - 1);
    const int64_t perStep = std::min(mf.maxStepTokens, mf.maxLogitRows) / q_len;
    if (perStep < 1)
      return fail(KILN_ERROR_INVALID_ARGUMENT,
                  "%s: q_len %d exceeds max_step_tokens %lld or max_logit_rows %lld", fn, q_len,
                  static_cast<long long>(mf.maxStepTokens),
                  static_cast<long long>(mf.maxLogitRows));
    std::vector<int32_t> slots;
    if (kiln_status_t s = resolve(fn, model, seq_ids, n, slots); s != KILN_OK)
      return s;
    Snapshot snapshot;
    snapshot.take(model, slots);
    model->lastDrafts.assign(static_cast<size_t>(n) * q_len, -1);
    std::vector<Piece> &step = model->pieces;
    for (int32_t first = 0; first < n; first += static_cast<int32_t>(perStep)) {
      const int32_t last = static_cast<int32_t>(std::min<int64_t>(n, first + perStep));
      step.clear();
      for (int32_t i = first; i < last; ++i) {
        Piece p;
        p.slot = slots[i];
        p.tokens = tokens + static_cast<size_t>(i) * q_len;
        p.count = q_len;
        p.out = i;
        step.push_back(p);
      }
      if (kiln_status_t s = runStep(fn, model, KILN_RT_PHASE_DECODE, step, argmax, logits_host);
          s != KILN_OK) {
        std::string message = kiln_last_error();
        snapshot.restore(model);
        return fail(s, "%s", message.c_str());
      }
      snapshot.forget(step);
    }
    return kiln::kernels::ok();
  });
}
