// Device faults (Runtime.h: kiln_rt_set_check_launches, kiln_rt_is_faulted).
//
// A kernel that faults (an illegal address from a corrupt block table, a launch
// failure) leaves a sticky error in the process's CUDA context: every later CUDA call
// fails. Kiln reports the first one with the step (and, with checked launches, the op
// and layer), and then refuses every further step of the context with that message
// instead of launching into a lost context.
#include "Context.h"

using namespace kiln::rt;

namespace {

bool isStickyFault(cudaError_t e) {
  switch (e) {
  case cudaErrorIllegalAddress:
  case cudaErrorLaunchFailure:
  case cudaErrorIllegalInstruction:
  case cudaErrorMisalignedAddress:
  case cudaErrorInvalidAddressSpace:
  case cudaErrorInvalidPc:
  case cudaErrorHardwareStackError:
  case cudaErrorAssert:
  case cudaErrorLaunchTimeout:
  case cudaErrorECCUncorrectable:
    return true;
  default:
    return false;
  }
}

} // namespace

kiln_status_t kiln::rt::noteCudaError(kiln_rt_context *ctx, cudaError_t e,
                                      kiln_status_t status) {
  if (ctx && !ctx->faulted && isStickyFault(e)) {
    ctx->faulted = true;
    ctx->faultMessage = kiln_last_error();
  }
  return status;
}

kiln_status_t kiln::rt::refuseIfFaulted(const kiln_rt_context *ctx, const char *fn) {
  if (!ctx || !ctx->faulted)
    return KILN_OK;
  return fail(KILN_ERROR_CUDA,
              "%s: the context is unusable after a device fault (%s); destroy it: the "
              "process's CUDA context is lost with it",
              fn, ctx->faultMessage.c_str());
}

kiln_status_t kiln::rt::checkLaunch(const Call &c, kiln_rt_context *ctx) {
  if (!ctx->checkEachLaunch || ctx->capturing || ctx->dry)
    return KILN_OK;
  const cudaError_t e = cudaStreamSynchronize(ctx->stream);
  if (e == cudaSuccess)
    return KILN_OK;
  return noteCudaError(ctx, e, c.cuda(e, "the launch faulted (cudaStreamSynchronize)"));
}

extern "C" kiln_status_t kiln_rt_set_check_launches(kiln_rt_context_t *ctx, int32_t on) {
  if (!ctx)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_rt_set_check_launches: context is null");
  ctx->checkEachLaunch = on != 0;
  return ok();
}

extern "C" int32_t kiln_rt_is_faulted(const kiln_rt_context_t *ctx) {
  return ctx && ctx->faulted ? 1 : 0;
}
