#include "StatusInternal.h"

#include <cstdarg>
#include <cstdio>
#include <string>

namespace {
thread_local std::string lastError;
} // namespace

namespace kiln::kernels {

kiln_status_t fail(kiln_status_t status, const char *format, ...) {
  char buffer[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  lastError = buffer;
  return status;
}

kiln_status_t ok() {
  lastError.clear();
  return KILN_OK;
}

kiln_status_t checkCacheDtype(const char *kernel, kiln_dtype_t dtype, kiln_dtype_t cacheDtype,
                              const float *kScale, const float *vScale) {
  if (cacheDtype == KILN_DTYPE_FP8_E4M3)
    return dtype == KILN_DTYPE_BF16
               ? KILN_OK
               : fail(KILN_ERROR_UNSUPPORTED,
                      "%s: an FP8 e4m3 pool needs BF16 activations (dtype %d)", kernel,
                      static_cast<int>(dtype));
  // An f16 pool next to bf16 activations: the kernels read it with fp16 operands.
  const bool f16NextToBf16 = cacheDtype == KILN_DTYPE_F16 && dtype == KILN_DTYPE_BF16;
  if (cacheDtype != dtype && !f16NextToBf16)
    return fail(KILN_ERROR_UNSUPPORTED,
                "%s: kv_dtype %d unsupported with dtype %d (the pool holds dtype, FP8 e4m3 = "
                "%d next to BF16, or F16 = %d next to BF16)",
                kernel, static_cast<int>(cacheDtype), static_cast<int>(dtype),
                static_cast<int>(KILN_DTYPE_FP8_E4M3), static_cast<int>(KILN_DTYPE_F16));
  if (kScale || vScale)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "%s: k_scale / v_scale are for FP8 pools only",
                kernel);
  return KILN_OK;
}

} // namespace kiln::kernels

extern "C" const char *kiln_last_error(void) { return lastError.c_str(); }

extern "C" const char *kiln_status_name(kiln_status_t status) {
  switch (status) {
  case KILN_OK:
    return "KILN_OK";
  case KILN_ERROR_INVALID_ARGUMENT:
    return "KILN_ERROR_INVALID_ARGUMENT";
  case KILN_ERROR_UNSUPPORTED:
    return "KILN_ERROR_UNSUPPORTED";
  case KILN_ERROR_CUDA:
    return "KILN_ERROR_CUDA";
  case KILN_ERROR_NO_DEVICE:
    return "KILN_ERROR_NO_DEVICE";
  case KILN_ERROR_OUT_OF_MEMORY:
    return "KILN_ERROR_OUT_OF_MEMORY";
  }
  return "KILN_ERROR_UNKNOWN";
}
