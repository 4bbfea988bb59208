// The runtime context (internal): regions, step state, sticky status, and the helpers
// every entry point uses to validate and to report errors. Shared by the runtime's
// translation units (Context.cpp, GraphOps.cpp, Attention.cpp, Legacy*.cpp, Model.cpp).
#ifndef KILN_LIB_RUNTIME_CONTEXT_H
#define KILN_LIB_RUNTIME_CONTEXT_H

#include "kiln/Runtime/Layout.h"
#include "kiln/Runtime/Runtime.h"

#include "StatusInternal.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <new>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

typedef struct kiln_gemm kiln_gemm_t;

namespace kiln::rt {

using kiln::kernels::fail;
using kiln::kernels::ok;

// The regions of the one allocation, in allocation order.
enum Region : int { kWeights = 0, kCaches, kActivations, kWorkspace, kIo, kNumRegions };
const char *regionName(int region);

constexpr uint64_t kBf16 = 2;

struct Buffer {
  void *ptr = nullptr;
  size_t bytes = 0;
};

struct Resource {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// A layer whose last decode step wrote intermediate states (legacy rewind mode).
struct CommitEntry {
  uint64_t stateOffset = 0;
  uint64_t interOffset = 0;
  uint64_t slotBytes = 0;
  int32_t tokens = 0; // the step's q_len: its intermediates hold that many a slot
};

// What the legacy bind-based calls (MLA, SSM, conv) read of the current step (device
// pointers into the io region).
struct LegacyBatch {
  int32_t batch = 0;
  int32_t q_len = 1;
  const int32_t *seq_lens = nullptr;
  const int32_t *block_table = nullptr;
  int32_t max_pages = 0;
  int32_t num_pages = 0;
  const int32_t *slot_indices = nullptr;
  int32_t num_slots = 0;
  const int32_t *cu_seqlens_q = nullptr;
  int32_t total_tokens = 0;
  int32_t max_q_len = 0;
  float softmax_scale = 0;
};

// A decode step's CUDA graph is keyed by everything its launches take from the host:
// the batch, the tokens per sequence, the logit rows and the decode kernels' key bound
// (the split-KV grid).
struct GraphKey {
  int32_t batch = 0, qLen = 0, numLogitRows = 0, keyBound = 0;
  bool operator<(const GraphKey &o) const {
    return std::tie(batch, qLen, numLogitRows, keyBound) <
           std::tie(o.batch, o.qLen, o.numLogitRows, o.keyBound);
  }
};

// One key's graph: eager the first time it is seen (kernel attributes, GEMM plans and
// lazy modules are set up outside capture), captured the second, replayed after that.
// `eagerOnly` when the capture failed (a call that cannot be captured, e.g. the legacy
// SSM/MLA calls) or the graph limit was reached.
struct StepGraph {
  bool eagerOnly = false;
  cudaGraphExec_t exec = nullptr;
  // The forward's host-side effects, restored on replay.
  const void *logits = nullptr;
  const void *draftTokens = nullptr;
  int64_t logitRows = 0, logitCols = 0, opIndex = 0;
  int32_t lastAttention = -1;
  uint64_t launches = 0;
  bool argmax = false; // holds the argmax and its copy to the host
  // KILN_GRAPH_LAUNCH_PROBE's summary of the captured nodes (Graphs.cpp, nodeProfile).
  std::string nodeProfile;
};

} // namespace kiln::rt

struct kiln_rt_context {
  bool dry = false;
  int device = 0;
  int smemOptin = 0;
  cudaStream_t stream = nullptr;
  kiln_gemm_t *gemm = nullptr;
  // The skinny GEMM's form asked for (kiln_rt_set_skinny_gemm; at creation the tensor
  // cores for max_batch 1, else off). A dry context keeps it for kiln_rt_skinny_gemm.
  kiln_gemm_skinny_t skinnyGemm = KILN_GEMM_SKINNY_OFF;
  cudaEvent_t uploaded = nullptr; // after an eager step upload (staging reusable)
  // The step's upload: the staging's bytes to copy, and whether kiln_rt_set_batch left
  // the copy to kiln_rt_forward (kiln_model's steps). Every decode graph holds its
  // upload, so a replay costs one cudaGraphLaunch and no copy call.
  size_t uploadBytes = 0;
  bool uploadPending = false;
  // An upload was issued and the stream not synchronized since; `uploadEvented` when
  // `uploaded` follows it (eager uploads; a graph's upload has no event: the stream is
  // waited for instead).
  bool uploadInFlight = false;
  bool uploadEvented = false;
  std::vector<uint8_t> slotSeen; // set_batch's distinct-slots check, [max_batch]
  // kiln_model's steps: the forward also issues the argmax of the logits and its copy to
  // argmaxHost (inside the step's graph), so reading it is one stream synchronization.
  bool argmaxWithStep = false;
  uint64_t argmaxGeneration = ~0ull; // the step whose argmax is issued

  kiln_rt_config_t config{};
  int32_t maxPagesPerSeq = 0;
  int32_t ringPages = 0; // kiln_rt_ring_pages of the config's kv_ring_window (0: none)
  kiln_rt_io_layout_t io{};
  uint64_t splitOffset = 0; // split-KV partials inside the workspace
  uint64_t splitBytes = 0;
  // gqa_decode's fused-combine arrival counters: the split-KV region's last bytes
  // (Layout.h, kiln_rt_split_counter_bytes), zeroed with the allocation and left at 0 by
  // every launch. 0 bytes: the separate combine kernel runs.
  uint64_t counterOffset = 0;
  uint64_t counterBytes = 0;

  void *allocation = nullptr; // the one device allocation
  uint64_t allocationBytes = 0;
  char *base[kiln::rt::kNumRegions] = {};
  uint64_t size[kiln::rt::kNumRegions] = {};
  size_t freeBefore = 0; // cudaMemGetInfo before the allocation

  // Pinned host staging: io arrays (mirror of the io region), argmax, logits. The first
  // two are mapped into the device (their device addresses below): the step's kernels
  // read the inputs from, and write the argmax to, host memory, so a decode graph holds
  // kernels only.
  char *ioHost = nullptr;
  int32_t *argmaxHost = nullptr;
  const uint32_t *ioHostDevice = nullptr;
  int32_t *argmaxHostDevice = nullptr;
  uint16_t *logitsHost = nullptr;
  size_t logitsHostElems = 0;

  // The step.
  bool hasBatch = false;
  int32_t phase = 0;
  int32_t batch = 0;
  int32_t qLen = 0;     // DECODE: tokens per sequence
  int32_t tokens = 0;   // sum of q_lens
  int32_t maxQLen = 0;  // max q_lens
  int32_t maxSeqLen = 0; // max seq_lens
  int32_t keyBound = 0;  // maxSeqLen rounded up to a split-KV chunk, <= max_seq_len
  int32_t numLogitRows = 0;
  std::vector<int32_t> cuHost; // [batch + 1]
  uint64_t generation = 0;
  int64_t opIndex = 0;        // compiled-code calls since set_batch
  int32_t lastAttention = -1; // layer of the last kiln_rt_attention of the step

  // Logits handed back by the step.
  const void *logits = nullptr;
  int64_t logitRows = 0, logitCols = 0;
  uint64_t logitsGeneration = ~0ull;
  // An MTP module's draft token at each logit row ([rows, 1] i32), when the step has one.
  const void *draftTokens = nullptr;
  uint64_t draftTokensGeneration = ~0ull;

  // Sticky status of the step.
  kiln_status_t status = KILN_OK;
  std::string message;

  uint64_t launches = 0;

  // Tensor parallelism (Collectives.cpp): this context's rank, and its NCCL communicator
  // (ncclComm_t; null for one rank or on a dry context).
  int32_t tpRank = 0, tpRanks = 1;
  bool tpJoined = false;
  void *nccl = nullptr;
  uint64_t collectiveBytes = 0; // device memory the communicator took

  // Device faults (Faults.cpp): a sticky CUDA error leaves the context unusable.
  bool checkEachLaunch = false; // synchronize after every launch, naming the faulting op
  bool faulted = false;
  std::string faultMessage;

  // Activation trace (Trace.cpp): every op's output written under traceDir ("" = off).
  std::string traceDir;
  uint64_t tracedOps = 0;

  // CUDA graphs of decode steps (Graphs.cpp).
  int32_t maxGraphs = KILN_RT_DEFAULT_MAX_GRAPHS; // 0: every step launches eagerly
  // kiln_model's contexts take these from the manifest (the plan's reserve): only
  // decode steps of these batches are captured (empty: every batch), and no capture
  // once the graphs took more than graphByteLimit bytes.
  std::vector<int32_t> graphBatches;
  uint64_t graphByteLimit = UINT64_MAX;
  bool graphBytesExhausted = false;
  bool capturing = false;
  std::map<kiln::rt::GraphKey, kiln::rt::StepGraph> graphs;
  int32_t capturedGraphs = 0;
  uint64_t graphBytes = 0; // device memory the instantiated graphs took
  uint64_t graphReplays = 0; // launches of a graph captured by an earlier step
  uint64_t decodeSteps = 0;
  double decodeHostSeconds = 0; // kiln_rt_forward of every decode step
  double replayHostSeconds = 0; // kiln_rt_forward of the replayed ones alone
  double captureHostSeconds = 0; // kiln_rt_forward of the steps that captured a graph
  double graphLaunchSeconds = 0; // the cudaGraphLaunch calls within them
  uint64_t decodeBatches = 0;   // kiln_rt_set_batch of decode steps
  double decodeSetBatchSeconds = 0;
  double lastSetBatchSeconds = 0; // the current step's kiln_rt_set_batch
  // Host microseconds of the last kReplaySamples replayed steps (set_batch + forward),
  // a ring: the stats' percentiles.
  static constexpr size_t kReplaySamples = 4096;
  float replayMicros[kReplaySamples] = {};
  uint64_t replaySamples = 0;

  // Legacy bind-based families.
  kiln::rt::LegacyBatch legacy;
  std::map<std::pair<int32_t, std::string>, void *> bindings;
  std::map<std::pair<int32_t, std::string>, kiln::rt::Resource> resources;
  std::map<std::pair<int32_t, std::string>, kiln::rt::CommitEntry> commits;
  // A compiled recurrent layer (causal_conv, mamba_ssm) ran: a speculative step's
  // accepted prefix is committed by the next step's layers from the batch's pending
  // pairs (docs/replay.md), and a sequence cannot be truncated further back.
  bool recurrentLayers = false;
  kiln::rt::Buffer split;    // legacy MLA split-KV partials
  kiln::rt::Buffer index;    // legacy token index (MLA expanded tables)
  kiln::rt::Buffer accepted; // legacy commit counts
  uint64_t indexGeneration = ~0ull;
  int indexPhase = -1;
  bool indexExpanded = false;
  int32_t *tokenBatch = nullptr, *tokenPos = nullptr, *tokenLen = nullptr;
  int32_t *expandedTable = nullptr, *cuExtend = nullptr;
};

namespace kiln::rt {

// Called first by entry points whose launches depend on per-step host work (the legacy
// SSM, conv and MLA calls): while a step is being captured they fail the step with
// KILN_ERROR_UNSUPPORTED, and kiln_rt_forward runs it eagerly instead.
kiln_status_t refuseCapture(kiln_rt_context *ctx, const char *fn);
// Clears what a step's forward calls set on the host (sticky status, op index, last
// attention, logits): at kiln_rt_set_batch, and before an eager rerun of a step whose
// capture failed.
void restartForward(kiln_rt_context *ctx);
// Chains the small kernels on the context's stream where its GEMMs take the skinny form
// (the marks behind kiln_graph_chain_launches), unchains them elsewhere. A stream that cannot be marked
// stays unchained: the launches are the same, only not overlapped.
void chainByGemmForm(kiln_rt_context *ctx);
// Destroys every captured graph (the context's teardown).
void destroyGraphs(kiln_rt_context *ctx);
// KILN_GRAPH_LAUNCH_PROBE=1: prints each captured graph's bare cudaGraphLaunch host time
// (Graphs.cpp); called once, before the context releases its device memory.
void probeGraphLaunches(kiln_rt_context *ctx);

// How kiln_rt_set_batch hands the step's inputs to the device: at once (the public
// entry point: any compiled-code call may follow), or left to kiln_rt_forward, which
// copies them eagerly or as the first node of the step's CUDA graph.
enum class Upload { Now, WithForward };
kiln_status_t setBatch(kiln_rt_context *ctx, const kiln_rt_batch_t *batch, Upload upload);
// Issues the pending upload on the stream (inside a capture: as graph nodes).
kiln_status_t uploadStep(kiln_rt_context *ctx);
// The step's upload was put on the stream (a copy, or a graph holding one).
inline void noteUploadIssued(kiln_rt_context *ctx, bool evented) {
  ctx->uploadPending = false;
  ctx->uploadInFlight = true;
  ctx->uploadEvented = evented;
}
// With argmaxWithStep, after the forward: the argmax of the step's logits and its copy
// to the pinned argmaxHost, on the stream (inside a capture: as graph nodes).
kiln_status_t issueArgmax(kiln_rt_context *ctx);
// The stream was synchronized: every upload issued so far has left the staging.
inline void noteStreamIdle(kiln_rt_context *ctx) { ctx->uploadInFlight = false; }

// A CUDA error of the step: a sticky fault (illegal address, launch failure, ...) marks
// the context unusable with `message` (kiln_last_error() of the failing call) before
// the status is returned. Returns `status`.
kiln_status_t noteCudaError(kiln_rt_context *ctx, cudaError_t e, kiln_status_t status);
// KILN_OK, or (once a fault was seen) an error naming the fault; `fn` is the entry point.
kiln_status_t refuseIfFaulted(const kiln_rt_context *ctx, const char *fn);
// After a launch of call `c`: with checkEachLaunch (and outside a capture), waits for it
// and turns a device fault into an error naming the op or layer.
kiln_status_t checkLaunch(const struct Call &c, kiln_rt_context *ctx);

// With a trace directory set (kiln_rt_set_trace, outside a capture): waits for call
// `c`'s launch and writes its output, `rows` x `cols` bf16 at `out`, to the directory.
// `part` names a second output of one op (its file and trace.tsv row get the suffix).
kiln_status_t traceOutput(const struct Call &c, kiln_rt_context *ctx, const void *out,
                          int64_t rows, int64_t cols, const char *part = nullptr);

// Formats errors of one entry-point call. Attention/legacy calls: "<fn> (<kernel>):
// layer <n>: ..."; graph ops (no layer argument): "<fn>: op <i> of the step (after
// layer <n>'s attention): ...".
struct Call {
  const char *fn;
  const char *kernel = nullptr; // attention / legacy
  int32_t layer = -1;           // attention / legacy
  const kiln_rt_context *ctx = nullptr; // graph ops: position in the step

  kiln_status_t error(kiln_status_t status, const char *format, ...) const
      __attribute__((format(printf, 3, 4)));
  // A kernel launcher returned `status`; its own message is kept.
  kiln_status_t launcher(kiln_status_t status, const char *name) const;
  kiln_status_t cuda(cudaError_t e, const char *what) const;
};

// The sticky protocol of the compiled-code calls: `enter` returns the recorded failure
// (restoring its message) or KILN_OK; `record` keeps the first failure.
kiln_status_t replay(kiln_rt_context *ctx);
int32_t record(kiln_rt_context *ctx, kiln_status_t status);

// [p, p + bytes) must lie inside one region (any of weights, caches, activations, io
// unless `outputOnly`: then activations or caches only) and be `align`-byte aligned.
kiln_status_t checkRange(const Call &c, const kiln_rt_context *ctx, const char *what,
                         const void *p, uint64_t bytes, uint64_t align, bool output);

// Bytes count `n * elemBytes` with overflow / negative checks.
bool product(uint64_t *out, std::initializer_list<int64_t> factors);

kiln_status_t selectDevice(const Call &c, const kiln_rt_context *ctx);
// Destroys the context's NCCL communicator, if any (Collectives.cpp).
void releaseCommunicator(kiln_rt_context *ctx);
// Checks a cache resource against the cache region and the other layers', records it.
kiln_status_t useResource(const Call &c, kiln_rt_context *ctx, const char *kind,
                          uint64_t offset, uint64_t bytes);
// Grows a legacy scratch buffer (synchronizing the stream before freeing the old one).
kiln_status_t ensureBuffer(const Call &c, kiln_rt_context *ctx, Buffer &buffer, size_t bytes);

// Runs `f` (returning a status) so that no C++ exception leaves a C entry point: an
// allocation failure becomes KILN_ERROR_OUT_OF_MEMORY naming `fn`.
template <typename F> kiln_status_t guarded(const char *fn, F &&f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc &) {
    return fail(KILN_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  } catch (...) {
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: unexpected C++ exception", fn);
  }
}

inline char *at(void *base, uint64_t offset) { return static_cast<char *>(base) + offset; }

template <typename T> T *ioPtr(const kiln_rt_context *ctx, uint64_t offset) {
  return reinterpret_cast<T *>(ctx->base[kIo] + offset);
}

} // namespace kiln::rt

#endif
