// CUDA graphs of decode steps (kiln_rt_forward, Runtime.h).
//
// A decode step of a given shape issues the same launches with the same arguments every
// time: the per-step data (token ids, positions, seq_lens, block tables, ...) is read
// from the io region, which kiln_rt_set_batch uploads before the forward runs, and the
// only host values the launches take are the batch, q_len, the logit rows and the
// split-KV key bound, which make the key. So a step captured once replays bit for bit.
// The first step of a shape runs eagerly, so that one-time host work (cuBLASLt plans,
// kernel attributes, module loading) is never captured; the second is captured and
// launched; later ones are replayed.
#include "Context.h"
#include "RuntimeKernels.h"

#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

using namespace kiln::rt;

namespace {

const char *kForward = "kiln_rt_forward";

GraphKey keyOf(const kiln_rt_context *ctx) {
  return GraphKey{ctx->batch, ctx->qLen, ctx->numLogitRows, ctx->keyBound};
}

// Restores the host-side effects the captured forward had, as if it had run again.
void replayHostEffects(kiln_rt_context *ctx, const StepGraph &graph) {
  ctx->logits = graph.logits;
  ctx->logitRows = graph.logitRows;
  ctx->logitCols = graph.logitCols;
  ctx->logitsGeneration = ctx->logits ? ctx->generation : ~0ull;
  ctx->draftTokens = graph.draftTokens;
  ctx->draftTokensGeneration = ctx->draftTokens ? ctx->generation : ~0ull;
  ctx->opIndex = graph.opIndex;
  ctx->lastAttention = graph.lastAttention;
  ctx->launches += graph.launches;
  if (graph.argmax)
    ctx->argmaxGeneration = ctx->generation;
}

// kiln_model's steps end with their argmax (Context.h, argmaxWithStep).
void issueStepArgmax(kiln_rt_context *ctx) {
  if (ctx->argmaxWithStep && ctx->status == KILN_OK && ctx->logits &&
      ctx->logitsGeneration == ctx->generation)
    record(ctx, issueArgmax(ctx));
}

size_t freeDeviceBytes() {
  size_t freeBytes = 0, total = 0;
  if (cudaMemGetInfo(&freeBytes, &total) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return freeBytes;
}

// The graph holds the step's upload (capture), so the launch issues it.
kiln_status_t launchGraph(kiln_rt_context *ctx, StepGraph &graph, bool replay) {
  replayHostEffects(ctx, graph);
  const auto start = std::chrono::steady_clock::now();
  cudaError_t e = cudaGraphLaunch(graph.exec, ctx->stream);
  if (replay)
    ctx->graphLaunchSeconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (e != cudaSuccess) {
    cudaGetLastError();
    fail(KILN_ERROR_CUDA, "%s: cudaGraphLaunch of the decode step (batch %d, q_len %d): %s",
         kForward, ctx->batch, ctx->qLen, cudaGetErrorString(e));
    return noteCudaError(ctx, e, static_cast<kiln_status_t>(record(ctx, KILN_ERROR_CUDA)));
  }
  noteUploadIssued(ctx, /*evented=*/false);
  if (replay)
    ++ctx->graphReplays;
  return KILN_OK;
}

// Runs the forward's launches one by one, after the step's upload if still pending.
kiln_status_t runEagerly(kiln_rt_context *ctx, kiln_rt_forward_fn forward) {
  if (ctx->status == KILN_OK)
    if (kiln_status_t s = uploadStep(ctx); s != KILN_OK)
      return static_cast<kiln_status_t>(record(ctx, s));
  forward(ctx);
  issueStepArgmax(ctx);
  return kiln_rt_status(ctx);
}

void sampleReplay(kiln_rt_context *ctx, double micros) {
  ctx->replayMicros[ctx->replaySamples++ % kiln_rt_context::kReplaySamples] =
      static_cast<float>(micros);
}

// The q-quantile (0..1) of the samples, nearest rank; 0 without samples.
double quantile(std::vector<float> samples, double q) {
  if (samples.empty())
    return 0.0;
  const size_t rank = static_cast<size_t>(q * static_cast<double>(samples.size() - 1) + 0.5);
  std::nth_element(samples.begin(), samples.begin() + rank, samples.end());
  return samples[rank];
}

// KILN_GRAPH_DOT=PREFIX (a debugging aid, docs/runtime.md): each captured step graph is
// written as Graphviz to PREFIX<n>.dot, with its nodes' types and parameters.
void dumpGraph(const kiln_rt_context *ctx, cudaGraph_t graph) {
  const char *prefix = std::getenv("KILN_GRAPH_DOT");
  if (!prefix || !*prefix)
    return;
  const std::string path = prefix + std::to_string(ctx->capturedGraphs) + ".dot";
  if (cudaGraphDebugDotPrint(graph, path.c_str(), cudaGraphDebugDotFlagsVerbose) != cudaSuccess)
    cudaGetLastError();
}

bool launchProbeRequested() {
  const char *probe = std::getenv("KILN_GRAPH_LAUNCH_PROBE");
  return probe && std::string(probe) == "1";
}

// Driver entry points for the kernel nodes' functions: cuBLASLt's kernels come from its
// own modules, which the runtime API's function queries do not know.
template <typename Fn> Fn driverEntry(const char *name, int version) {
  void *fn = nullptr;
  cudaDriverEntryPointQueryResult found;
  if (cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<Fn>(fn);
}

// What the probe prints beside a graph's launch time, to tell what a slow launch holds:
// its nodes by type, and the kernels that need per-thread local memory (a launch whose
// kernel needs more than the context's local memory reservation resizes it, and waits)
// or that launch in clusters.
std::string nodeProfile(cudaGraph_t graph) {
  using GetParams = CUresult (*)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS *);
  using GetAttr = CUresult (*)(int *, CUfunction_attribute, CUfunction);
  using GetName = CUresult (*)(const char **, CUfunction);
  using GetLaunchAttr = CUresult (*)(CUgraphNode, CUlaunchAttributeID, CUlaunchAttributeValue *);
  static const auto getParams = driverEntry<GetParams>("cuGraphKernelNodeGetParams", 12000);
  static const auto getAttr = driverEntry<GetAttr>("cuFuncGetAttribute", 12000);
  static const auto getName = driverEntry<GetName>("cuFuncGetName", 12030);
  static const auto getLaunchAttr =
      driverEntry<GetLaunchAttr>("cuGraphKernelNodeGetAttribute", 12000);
  size_t count = 0;
  if (cudaGraphGetNodes(graph, nullptr, &count) != cudaSuccess)
    return "nodes unknown";
  std::vector<cudaGraphNode_t> nodes(count);
  if (cudaGraphGetNodes(graph, nodes.data(), &count) != cudaSuccess)
    return "nodes unknown";
  std::map<int, int> byType;
  std::map<std::string, int> localBytes, clustered;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    if (cudaGraphNodeGetType(node, &type) != cudaSuccess)
      continue;
    ++byType[static_cast<int>(type)];
    CUDA_KERNEL_NODE_PARAMS params{};
    if (type != cudaGraphNodeTypeKernel || !getParams || getParams(node, &params) != CUDA_SUCCESS ||
        !params.func)
      continue;
    const char *name = nullptr;
    if (!getName || getName(&name, params.func) != CUDA_SUCCESS || !name)
      name = "?";
    int local = 0;
    if (getAttr && getAttr(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, params.func) == CUDA_SUCCESS &&
        local > 0)
      localBytes[std::string(name).substr(0, 60)] = local;
    CUlaunchAttributeValue cluster{};
    if (getLaunchAttr &&
        getLaunchAttr(node, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &cluster) == CUDA_SUCCESS &&
        cluster.clusterDim.x * cluster.clusterDim.y * cluster.clusterDim.z > 1)
      ++clustered[std::string(name).substr(0, 60)];
  }
  cudaGetLastError();
  std::string out = std::to_string(count) + " nodes (type:count";
  for (auto [type, n] : byType)
    out += " " + std::to_string(type) + ":" + std::to_string(n);
  out += "); kernels with local memory:";
  for (const auto &[name, bytes] : localBytes)
    out += " " + name + "=" + std::to_string(bytes) + "B";
  out += "; clustered kernels:";
  for (const auto &[name, n] : clustered)
    out += " " + name + "x" + std::to_string(n);
  return out;
}

// KILN_GRAPH_KEEP_MEMSETS=1 (a debugging aid, docs/runtime.md): the captured memset nodes
// stay memsets, to measure what rewriting them as kernels gains.
bool keepMemsetNodes() {
  const char *keep = std::getenv("KILN_GRAPH_KEEP_MEMSETS");
  return keep && std::string(keep) == "1";
}

// The captured graph with its memset nodes as kernels (replaceMemsetNodes: kernels only
// keep the launch on the driver's fast path). The rewrite works on a copy: one that fails
// leaves the graph as captured, memsets and all, which still replays correctly.
void memsetsAsKernels(cudaGraph_t &graph, size_t &replaced) {
  replaced = 0;
  if (keepMemsetNodes())
    return;
  cudaGraph_t copy = nullptr;
  if (cudaGraphClone(&copy, graph) != cudaSuccess)
    return;
  if (kiln::runtime::replaceMemsetNodes(copy, &replaced) != cudaSuccess) {
    replaced = 0;
    cudaGraphDestroy(copy);
    return;
  }
  cudaGraphDestroy(graph);
  graph = copy;
}

// Captures the forward into `graph`. False when the capture failed: the step's host
// state is then reset so that it can run eagerly.
bool capture(kiln_rt_context *ctx, kiln_rt_forward_fn forward, StepGraph &graph) {
  const uint64_t launchesBefore = ctx->launches;
  if (cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  ctx->capturing = true;
  if (uploadStep(ctx) == KILN_OK) {
    forward(ctx);
    issueStepArgmax(ctx);
  }
  ctx->capturing = false;
  cudaGraph_t captured = nullptr;
  cudaError_t e = cudaStreamEndCapture(ctx->stream, &captured);
  size_t memsets = 0;
  bool usable = e == cudaSuccess && captured && ctx->status == KILN_OK;
  if (usable) {
    memsetsAsKernels(captured, memsets);
    dumpGraph(ctx, captured);
    if (launchProbeRequested())
      graph.nodeProfile =
          nodeProfile(captured) + "; memsets rewritten as kernels: " + std::to_string(memsets);
    const size_t freeBefore = freeDeviceBytes();
    // The upload is stream-ordered and its memory may be taken when it runs, not when
    // it is issued: wait for it (a capture is rare), so the measure is the graph's whole
    // footprint every time rather than a race with the driver.
    usable = cudaGraphInstantiate(&graph.exec, captured, 0) == cudaSuccess &&
             cudaGraphUpload(graph.exec, ctx->stream) == cudaSuccess &&
             cudaStreamSynchronize(ctx->stream) == cudaSuccess;
    const size_t freeAfter = freeDeviceBytes();
    if (freeBefore > freeAfter)
      ctx->graphBytes += freeBefore - freeAfter;
    // Over the plan's reserve: this graph is not kept, and no other shape is captured.
    if (ctx->graphBytes > ctx->graphByteLimit) {
      ctx->graphBytesExhausted = true;
      usable = false;
    }
  }
  if (captured)
    cudaGraphDestroy(captured);
  if (!usable) {
    cudaGetLastError();
    if (graph.exec)
      cudaGraphExecDestroy(graph.exec);
    graph.exec = nullptr;
    ctx->launches = launchesBefore;
    restartForward(ctx); // the step runs again, eagerly
    return false;
  }
  graph.logits = ctx->logitsGeneration == ctx->generation ? ctx->logits : nullptr;
  graph.logitRows = ctx->logitRows;
  graph.logitCols = ctx->logitCols;
  graph.draftTokens =
      ctx->draftTokensGeneration == ctx->generation ? ctx->draftTokens : nullptr;
  graph.opIndex = ctx->opIndex;
  graph.lastAttention = ctx->lastAttention;
  graph.argmax = ctx->argmaxGeneration == ctx->generation;
  graph.launches = ctx->launches - launchesBefore;
  ctx->launches = launchesBefore; // launchGraph counts them
  ++ctx->capturedGraphs;
  return true;
}

} // namespace

// KILN_GRAPH_LAUNCH_PROBE=1 (a debugging aid, docs/runtime.md): before the graphs are
// destroyed, each is launched 20 more times, the stream drained before each, and the
// host time of cudaGraphLaunch printed to stderr as min / median: the launch alone,
// with the GPU idle and the host thread just back from a short wait, apart from what a
// serving loop adds around it. The replays rewrite the last step's KV entries with the
// same values.
void kiln::rt::probeGraphLaunches(kiln_rt_context *ctx) {
  if (!launchProbeRequested())
    return;
  for (auto &[key, graph] : ctx->graphs) {
    if (!graph.exec)
      continue;
    std::vector<float> samples;
    for (int i = 0; i < 20; ++i) {
      if (cudaStreamSynchronize(ctx->stream) != cudaSuccess)
        break;
      const auto start = std::chrono::steady_clock::now();
      if (cudaGraphLaunch(graph.exec, ctx->stream) != cudaSuccess)
        break;
      samples.push_back(static_cast<float>(
          1e6 * std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()));
    }
    cudaStreamSynchronize(ctx->stream);
    cudaGetLastError();
    if (samples.empty())
      continue;
    std::fprintf(stderr,
                 "kiln graph probe: batch %d q_len %d: cudaGraphLaunch min %.2f us, median "
                 "%.2f us over %zu launches (%llu launches captured); %s\n",
                 key.batch, key.qLen, *std::min_element(samples.begin(), samples.end()),
                 quantile(samples, 0.5), samples.size(),
                 static_cast<unsigned long long>(graph.launches), graph.nodeProfile.c_str());
  }
}

void kiln::rt::destroyGraphs(kiln_rt_context *ctx) {
  for (auto &entry : ctx->graphs)
    if (entry.second.exec)
      cudaGraphExecDestroy(entry.second.exec);
  ctx->graphs.clear();
  ctx->capturedGraphs = 0;
  ctx->graphBytes = 0; // freed with the executables
  ctx->graphBytesExhausted = false;
}

kiln_status_t kiln::rt::refuseCapture(kiln_rt_context *ctx, const char *fn) {
  if (!ctx || !ctx->capturing)
    return KILN_OK;
  fail(KILN_ERROR_UNSUPPORTED, "%s cannot be captured in a CUDA graph", fn);
  return static_cast<kiln_status_t>(record(ctx, KILN_ERROR_UNSUPPORTED));
}

namespace {

kiln_status_t runForward(kiln_rt_context_t *ctx, kiln_rt_forward_fn forward);

} // namespace

extern "C" kiln_status_t kiln_rt_forward(kiln_rt_context_t *ctx, kiln_rt_forward_fn forward) {
  if (!ctx)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: context is null", kForward);
  if (!forward)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: forward is null", kForward);
  if (kiln_status_t s = refuseIfFaulted(ctx, kForward); s != KILN_OK)
    return s;
  if (!ctx->hasBatch || ctx->phase != KILN_RT_PHASE_DECODE)
    return runForward(ctx, forward);
  const auto start = std::chrono::steady_clock::now();
  const uint64_t replaysBefore = ctx->graphReplays;
  const int32_t capturesBefore = ctx->capturedGraphs;
  const kiln_status_t status = runForward(ctx, forward);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ctx->decodeHostSeconds += seconds;
  if (ctx->graphReplays != replaysBefore) {
    ctx->replayHostSeconds += seconds;
    sampleReplay(ctx, 1e6 * (seconds + ctx->lastSetBatchSeconds));
  } else if (ctx->capturedGraphs != capturesBefore)
    ctx->captureHostSeconds += seconds;
  ++ctx->decodeSteps;
  return status;
}

namespace {

// Whether the current decode step's shape may get a graph: within the shape count, the
// memory reserve and the captured batches.
bool mayCapture(const kiln_rt_context *ctx) {
  if (ctx->capturedGraphs >= ctx->maxGraphs || ctx->graphBytesExhausted ||
      ctx->graphByteLimit == 0)
    return false;
  const std::vector<int32_t> &batches = ctx->graphBatches;
  return batches.empty() || std::binary_search(batches.begin(), batches.end(), ctx->batch);
}

kiln_status_t runForward(kiln_rt_context_t *ctx, kiln_rt_forward_fn forward) {
  const bool graphable = !ctx->dry && ctx->hasBatch && ctx->status == KILN_OK &&
                         ctx->phase == KILN_RT_PHASE_DECODE && ctx->maxGraphs > 0 &&
                         !ctx->checkEachLaunch && ctx->traceDir.empty();
  if (!graphable)
    return runEagerly(ctx, forward);
  auto [it, firstTime] = ctx->graphs.try_emplace(keyOf(ctx));
  StepGraph &graph = it->second;
  if (graph.exec)
    return launchGraph(ctx, graph, /*replay=*/true);
  if (firstTime || graph.eagerOnly)
    return runEagerly(ctx, forward);
  if (!mayCapture(ctx) || cudaSetDevice(ctx->device) != cudaSuccess ||
      !capture(ctx, forward, graph)) {
    cudaGetLastError();
    graph.eagerOnly = true;
    return runEagerly(ctx, forward);
  }
  return launchGraph(ctx, graph, /*replay=*/false);
}

} // namespace

extern "C" kiln_status_t kiln_rt_set_max_graphs(kiln_rt_context_t *ctx, int32_t max_graphs) {
  if (!ctx)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_set_max_graphs: context is null");
  if (max_graphs < 0)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_set_max_graphs: max_graphs %d < 0",
                max_graphs);
  if (max_graphs < ctx->maxGraphs && !ctx->dry) {
    cudaSetDevice(ctx->device);
    cudaStreamSynchronize(ctx->stream);
    destroyGraphs(ctx);
    cudaGetLastError();
  }
  ctx->maxGraphs = max_graphs;
  return ok();
}

extern "C" kiln_status_t kiln_rt_set_graph_limits(kiln_rt_context_t *ctx,
                                                  const int32_t *batches, int32_t num_batches,
                                                  uint64_t max_bytes) {
  const char *fn = "kiln_rt_set_graph_limits";
  if (!ctx)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: context is null", fn);
  if (num_batches < 0 || (num_batches > 0 && !batches))
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %d batches at %p", fn, num_batches,
                static_cast<const void *>(batches));
  for (int32_t i = 0; i < num_batches; ++i) {
    if (batches[i] < 1 || batches[i] > ctx->config.max_batch)
      return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: batches[%d] = %d outside [1, max_batch %lld]",
                  fn, i, batches[i], static_cast<long long>(ctx->config.max_batch));
    if (i > 0 && batches[i] <= batches[i - 1])
      return fail(KILN_ERROR_INVALID_ARGUMENT,
                  "%s: batches must be ascending without repeats (%d then %d)", fn,
                  batches[i - 1], batches[i]);
  }
  return guarded(fn, [&] {
    if (!ctx->dry) {
      cudaSetDevice(ctx->device);
      cudaStreamSynchronize(ctx->stream);
      destroyGraphs(ctx);
      cudaGetLastError();
    }
    ctx->graphBatches.assign(batches, batches + num_batches);
    ctx->graphByteLimit = max_bytes;
    return ok();
  });
}

namespace {
// A change of the context's GEMM choice (`change`, a kiln_gemm_set_* call): the steps in
// flight finish first and the captured graphs, which hold the previous kernels, go. A dry
// context runs no GEMM: nothing to change.
template <typename Change>
kiln_status_t changeGemm(kiln_rt_context_t *ctx, const char *fn, Change change) {
  if (ctx->dry || !ctx->gemm)
    return ok();
  cudaSetDevice(ctx->device);
  cudaStreamSynchronize(ctx->stream);
  destroyGraphs(ctx);
  cudaGetLastError();
  if (kiln_status_t s = change(); s != KILN_OK) {
    std::string message = kiln_last_error();
    return fail(s, "%s: %s", fn, message.c_str());
  }
  return ok();
}
} // namespace

extern "C" kiln_status_t kiln_rt_set_gemm_policy(kiln_rt_context_t *ctx,
                                                 kiln_gemm_policy_t policy) {
  const char *fn = "kiln_rt_set_gemm_policy";
  if (!ctx)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: context is null", fn);
  if (policy != KILN_GEMM_ROW_INVARIANT && policy != KILN_GEMM_HEURISTIC)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: policy %d is neither ROW_INVARIANT (%d) nor "
                "HEURISTIC (%d)", fn, static_cast<int>(policy), KILN_GEMM_ROW_INVARIANT,
                KILN_GEMM_HEURISTIC);
  if (policy == KILN_GEMM_HEURISTIC && ctx->config.max_draft_len > 0)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: the model verifies up to %lld draft tokens a step; its GEMM rows must stay "
                "invariant for speculation to be lossless (HEURISTIC refused)",
                fn, static_cast<long long>(ctx->config.max_draft_len));
  return changeGemm(ctx, fn, [&] { return kiln_gemm_set_policy(ctx->gemm, policy); });
}

extern "C" kiln_status_t kiln_rt_set_skinny_gemm(kiln_rt_context_t *ctx,
                                                 kiln_gemm_skinny_t form) {
  const char *fn = "kiln_rt_set_skinny_gemm";
  if (!ctx)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: context is null", fn);
  if (form != KILN_GEMM_SKINNY_OFF && form != KILN_GEMM_SKINNY_TENSOR_CORES &&
      form != KILN_GEMM_SKINNY_CUDA_CORES)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: form %d unknown (off 0, tensor cores 1, CUDA cores 2)", fn,
                static_cast<int>(form));
  ctx->skinnyGemm = form;
  const kiln_status_t s =
      changeGemm(ctx, fn, [&] { return kiln_gemm_set_skinny(ctx->gemm, form); });
  if (s == KILN_OK)
    chainByGemmForm(ctx); // a dry context has no stream: nothing to mark
  return s;
}

extern "C" kiln_gemm_skinny_t kiln_rt_skinny_gemm(const kiln_rt_context_t *ctx) {
  if (!ctx)
    return KILN_GEMM_SKINNY_OFF;
  return ctx->gemm ? kiln_gemm_skinny_form(ctx->gemm) : ctx->skinnyGemm;
}

extern "C" kiln_status_t kiln_rt_graph_stats(const kiln_rt_context_t *ctx,
                                             kiln_rt_graph_stats_t *out) {
  if (!ctx || !out)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_graph_stats: %s is null",
                ctx ? "out" : "context");
  out->max_graphs = ctx->maxGraphs;
  out->graphs = ctx->capturedGraphs;
  out->shapes_seen = ctx->graphs.size();
  out->replays = ctx->graphReplays;
  out->graph_bytes = ctx->graphBytes;
  out->graph_byte_limit = ctx->graphByteLimit;
  out->decode_steps = ctx->decodeSteps;
  out->decode_host_seconds = ctx->decodeHostSeconds;
  out->replay_host_seconds = ctx->replayHostSeconds;
  out->capture_host_seconds = ctx->captureHostSeconds;
  out->graph_launch_seconds = ctx->graphLaunchSeconds;
  out->decode_batches = ctx->decodeBatches;
  out->decode_set_batch_seconds = ctx->decodeSetBatchSeconds;
  return guarded("kiln_rt_graph_stats", [&] {
    const size_t n = static_cast<size_t>(
        std::min<uint64_t>(ctx->replaySamples, kiln_rt_context::kReplaySamples));
    const std::vector<float> samples(ctx->replayMicros, ctx->replayMicros + n);
    out->replay_step_us_p50 = quantile(samples, 0.5);
    out->replay_step_us_p99 = quantile(samples, 0.99);
    return ok();
  });
}
