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
