// Tensor parallelism's collectives (Runtime.h "tensor parallelism", docs/tensor-parallel.md):
// the communicator of a context, kiln_rt_all_reduce and kiln_rt_all_gather, on NCCL loaded
// at run time.
//
// NCCL is opened with dlopen rather than linked so that a build machine without it
// builds, and a one-rank model runs where it is absent. Only the handful of entry points
// below are declared here, with the types of NCCL's stable C ABI (nccl.h, 2.x); Kiln
// issues every collective through them and implements none of its own.
#include "Context.h"
#include "GraphOpCommon.h"

#include "kiln/Kernels/Graph.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace {

// NCCL's C ABI, as much of it as Kiln calls.
using NcclComm = struct NcclCommOpaque *;
struct NcclUniqueId {
  char internal[128];
};
static_assert(sizeof(NcclUniqueId) == sizeof(kiln_rt_nccl_id_t), "ncclUniqueId is 128 bytes");
using NcclResult = int;                // ncclResult_t: 0 is ncclSuccess
constexpr int kNcclBfloat16 = 9;       // ncclDataType_t (NCCL >= 2.10)
constexpr int kNcclSum = 0;            // ncclRedOp_t
constexpr int kMinNcclVersion = 21000; // ncclBfloat16

struct Nccl {
  void *handle = nullptr;
  std::string error; // why it could not be loaded ("" once loaded)
  NcclResult (*getVersion)(int *) = nullptr;
  NcclResult (*getUniqueId)(NcclUniqueId *) = nullptr;
  NcclResult (*commInitRank)(NcclComm *, int, NcclUniqueId, int) = nullptr;
  NcclResult (*commDestroy)(NcclComm) = nullptr;
  NcclResult (*allReduce)(const void *, void *, size_t, int, int, NcclComm, cudaStream_t) = nullptr;
  NcclResult (*allGather)(const void *, void *, size_t, int, NcclComm, cudaStream_t) = nullptr;
  const char *(*errorString)(NcclResult) = nullptr;
};

template <typename Fn> bool resolve(Nccl &nccl, Fn &fn, const char *symbol, const char *path) {
  fn = reinterpret_cast<Fn>(dlsym(nccl.handle, symbol));
  if (!fn)
    nccl.error = std::string(path) + " has no " + symbol;
  return fn != nullptr;
}

Nccl openNccl() {
  Nccl nccl;
  const char *env = std::getenv("KILN_NCCL_LIBRARY");
  const char *path = env && *env ? env : "libnccl.so.2";
  nccl.handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!nccl.handle) {
    const char *why = dlerror();
    nccl.error = std::string("NCCL could not be loaded from ") + path + " (" +
                 (why ? why : "unknown error") +
                 "); set KILN_NCCL_LIBRARY to libnccl.so.2's path (PyTorch's nvidia-nccl wheel "
                 "ships it under site-packages/nvidia/nccl/lib)";
    return nccl;
  }
  bool all = resolve(nccl, nccl.getVersion, "ncclGetVersion", path) &&
             resolve(nccl, nccl.getUniqueId, "ncclGetUniqueId", path) &&
             resolve(nccl, nccl.commInitRank, "ncclCommInitRank", path) &&
             resolve(nccl, nccl.commDestroy, "ncclCommDestroy", path) &&
             resolve(nccl, nccl.allReduce, "ncclAllReduce", path) &&
             resolve(nccl, nccl.allGather, "ncclAllGather", path) &&
             resolve(nccl, nccl.errorString, "ncclGetErrorString", path);
  int version = 0;
  if (all && nccl.getVersion(&version) == 0 && version < kMinNcclVersion) {
    nccl.error = std::string(path) + " is NCCL " + std::to_string(version) +
                 "; bf16 collectives need NCCL 2.10 or newer";
    all = false;
  }
  if (!all) {
    dlclose(nccl.handle);
    nccl.handle = nullptr;
  }
  return nccl;
}

// Loaded once per process; the handle stays open (communicators of live contexts use it).
const Nccl &nccl() {
  static Nccl loaded = openNccl();
  return loaded;
}

kiln_status_t ncclFailed(const char *fn, const char *what, NcclResult r) {
  return kiln::rt::fail(KILN_ERROR_CUDA, "%s: %s failed: %s (ncclResult_t %d)", fn, what,
                        nccl().errorString(r), r);
}

size_t freeDeviceBytes() {
  size_t freeNow = 0, total = 0;
  if (cudaMemGetInfo(&freeNow, &total) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return freeNow;
}

} // namespace

namespace kiln::rt {
void releaseCommunicator(kiln_rt_context *ctx) {
  if (ctx->nccl && nccl().handle)
    nccl().commDestroy(static_cast<NcclComm>(ctx->nccl));
  ctx->nccl = nullptr;
}
} // namespace kiln::rt

using namespace kiln::rt;

extern "C" kiln_status_t kiln_rt_nccl_unique_id(kiln_rt_nccl_id_t *out) {
  constexpr const char *fn = "kiln_rt_nccl_unique_id";
  if (!out)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: out is null", fn);
  if (!nccl().handle)
    return fail(KILN_ERROR_UNSUPPORTED, "%s: %s", fn, nccl().error.c_str());
  NcclUniqueId id;
  if (NcclResult r = nccl().getUniqueId(&id); r != 0)
    return ncclFailed(fn, "ncclGetUniqueId", r);
  std::memcpy(out->bytes, id.internal, sizeof(id.internal));
  return ok();
}

extern "C" kiln_status_t kiln_rt_set_tensor_parallel(kiln_rt_context_t *ctx, int32_t rank,
                                                     int32_t ranks, const kiln_rt_nccl_id_t *id) {
  constexpr const char *fn = "kiln_rt_set_tensor_parallel";
  if (!ctx)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: context is null", fn);
  if (ranks < 1 || ranks > 1024 || rank < 0 || rank >= ranks)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: rank %d of %d ranks (need 0 <= rank < ranks <= 1024)", fn, rank, ranks);
  if (ctx->tpJoined)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "%s: the context already is rank %d of %d (one communicator a context)", fn,
                ctx->tpRank, ctx->tpRanks);
  if (ctx->dry) {
    ctx->tpRank = rank;
    ctx->tpRanks = ranks;
    ctx->tpJoined = true;
    return ok();
  }
  if (!id)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: id is null", fn);
  if (!nccl().handle)
    return fail(KILN_ERROR_UNSUPPORTED, "%s: %s", fn, nccl().error.c_str());
  if (cudaError_t e = cudaSetDevice(ctx->device); e != cudaSuccess)
    return fail(KILN_ERROR_CUDA, "%s: cudaSetDevice(%d): %s", fn, ctx->device,
                cudaGetErrorString(e));
  NcclUniqueId unique;
  std::memcpy(unique.internal, id->bytes, sizeof(unique.internal));
  const size_t freeBefore = freeDeviceBytes();
  NcclComm comm = nullptr;
  if (NcclResult r = nccl().commInitRank(&comm, ranks, unique, rank); r != 0)
    return ncclFailed(fn, "ncclCommInitRank", r);
  const size_t freeAfter = freeDeviceBytes();
  ctx->nccl = comm;
  ctx->collectiveBytes = freeBefore > freeAfter ? freeBefore - freeAfter : 0;
  ctx->tpRank = rank;
  ctx->tpRanks = ranks;
  ctx->tpJoined = true;
  return ok();
}

extern "C" int32_t kiln_rt_tp_rank(const kiln_rt_context_t *ctx) { return ctx ? ctx->tpRank : 0; }
extern "C" int32_t kiln_rt_tp_ranks(const kiln_rt_context_t *ctx) { return ctx ? ctx->tpRanks : 1; }
extern "C" uint64_t kiln_rt_collective_bytes(const kiln_rt_context_t *ctx) {
  return ctx ? ctx->collectiveBytes : 0;
}

extern "C" int32_t kiln_rt_all_reduce(kiln_rt_context_t *ctx, const void *x, void *out, int64_t n) {
  KILN_RT_GRAPH_ENTER("kiln_rt_all_reduce")
  auto run = [&]() -> kiln_status_t {
    if (kiln_status_t s = positive(c, {{"n", n}}); s != KILN_OK)
      return s;
    if (kiln_status_t s = checkRanges(c, ctx, {bf16("x", x, 1, n), bf16("out", out, 1, n, true)});
        s != KILN_OK)
      return s;
    if (ctx->dry)
      return KILN_OK;
    if (kiln_status_t s = selectDevice(c, ctx); s != KILN_OK)
      return s;
    if (!ctx->nccl) { // one rank: the sum is x itself
      if (x == out)
        return KILN_OK;
      if (cudaError_t e = cudaMemcpyAsync(out, x, static_cast<size_t>(n) * 2,
                                          cudaMemcpyDeviceToDevice, ctx->stream);
          e != cudaSuccess)
        return c.cuda(e, "cudaMemcpyAsync");
      return checkLaunch(c, ctx);
    }
    ++ctx->launches;
    if (NcclResult r = nccl().allReduce(x, out, static_cast<size_t>(n), kNcclBfloat16, kNcclSum,
                                        static_cast<NcclComm>(ctx->nccl), ctx->stream);
        r != 0)
      return c.error(KILN_ERROR_CUDA, "ncclAllReduce of %lld elements failed: %s (ncclResult_t %d)",
                     static_cast<long long>(n), nccl().errorString(r), r);
    if (kiln_status_t s = checkLaunch(c, ctx); s != KILN_OK)
      return s;
    return traceOutput(c, ctx, out, 1, n);
  };
  return record(ctx, run());
}

extern "C" int32_t kiln_rt_all_gather(kiln_rt_context_t *ctx, const void *x, void *blocks,
                                      void *out, int64_t rows, int64_t cols, int64_t ranks) {
  KILN_RT_GRAPH_ENTER("kiln_rt_all_gather")
  auto run = [&]() -> kiln_status_t {
    if (kiln_status_t s = positive(c, {{"rows", rows}, {"cols", cols}, {"ranks", ranks}});
        s != KILN_OK)
      return s;
    if (ranks != ctx->tpRanks)
      return c.error(KILN_ERROR_INVALID_ARGUMENT,
                     "the graph gathers over %lld tensor-parallel rank(s), the context is rank "
                     "%d of %d (kiln_rt_set_tensor_parallel)",
                     static_cast<long long>(ranks), ctx->tpRank, ctx->tpRanks);
    uint64_t whole = 0;
    if (!product(&whole, {ranks, cols}))
      return c.error(KILN_ERROR_INVALID_ARGUMENT, "ranks %lld times cols %lld overflow",
                     static_cast<long long>(ranks), static_cast<long long>(cols));
    const auto wide = static_cast<int64_t>(whole);
    if (kiln_status_t s =
            checkRanges(c, ctx,
                        {bf16("x", x, rows, cols), bf16("blocks", blocks, ranks * rows, cols, true),
                         bf16("out", out, rows, wide, true)});
        s != KILN_OK)
      return s;
    if (ctx->dry)
      return KILN_OK;
    if (kiln_status_t s = selectDevice(c, ctx); s != KILN_OK)
      return s;
    if (!ctx->nccl) { // one rank: x is every column
      ++ctx->launches;
      if (cudaError_t e = cudaMemcpyAsync(out, x, static_cast<size_t>(rows * cols) * 2,
                                          cudaMemcpyDeviceToDevice, ctx->stream);
          e != cudaSuccess)
        return c.cuda(e, "cudaMemcpyAsync");
      if (kiln_status_t s = checkLaunch(c, ctx); s != KILN_OK)
        return s;
      return traceOutput(c, ctx, out, rows, wide);
    }
    // NCCL gathers each rank's buffer as one contiguous block: [ranks, rows, cols].
    ++ctx->launches;
    if (NcclResult r = nccl().allGather(x, blocks, static_cast<size_t>(rows * cols), kNcclBfloat16,
                                        static_cast<NcclComm>(ctx->nccl), ctx->stream);
        r != 0)
      return c.error(KILN_ERROR_CUDA,
                     "ncclAllGather of %lld elements a rank failed: %s (ncclResult_t %d)",
                     static_cast<long long>(rows * cols), nccl().errorString(r), r);
    if (kiln_status_t s = checkLaunch(c, ctx); s != KILN_OK)
      return s;
    // Block k is rank k's [rows, cols]: its columns of out.
    ctx->launches += static_cast<uint64_t>(ranks);
    if (kiln_status_t s = kiln_blocks_to_columns_bf16(blocks, out, ranks, rows, cols, ctx->stream);
        s != KILN_OK)
      return c.launcher(s, "kiln_blocks_to_columns_bf16");
    if (kiln_status_t s = checkLaunch(c, ctx); s != KILN_OK)
      return s;
    return traceOutput(c, ctx, out, rows, wide);
  };
  return record(ctx, run());
}
