// Argument validation of the C ABI launchers (plain C++: runs before any CUDA call, on
// machines without a GPU too). Each check records a message naming the launcher and the
// argument and returns false, so a launcher reads as a chain of checks:
//   ArgChecker c{"kiln_rms_norm_bf16"};
//   if (!c.notNull(x, "x") || !c.positive(rows, "rows"))
//     return c.status;
#ifndef KILN_LIB_KERNELS_ARGCHECKER_H
#define KILN_LIB_KERNELS_ARGCHECKER_H

#include "StatusInternal.h"

#include <cmath>
#include <cstdint>
#include <limits>

namespace kiln::kernels {

struct ArgChecker {
  const char *kernel;
  kiln_status_t status = KILN_OK;

  explicit ArgChecker(const char *kernel) : kernel(kernel) {}

  bool notNull(const void *p, const char *arg) {
    if (p)
      return true;
    status = fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s is null", kernel, arg);
    return false;
  }
  // Device data of `bytes`-byte elements must be aligned to its element size.
  bool elementAligned(const void *p, unsigned bytes, const char *arg) {
    if ((reinterpret_cast<uintptr_t>(p) % bytes) == 0)
      return true;
    status = fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s is not %u-byte aligned", kernel, arg,
                  bytes);
    return false;
  }
  // Data read with 16-byte vector accesses.
  bool aligned16(const void *p, const char *arg) {
    if ((reinterpret_cast<uintptr_t>(p) & 15u) == 0)
      return true;
    status = fail(KILN_ERROR_UNSUPPORTED, "%s: %s is not 16-byte aligned", kernel, arg);
    return false;
  }
  bool nonNegative(int64_t v, const char *arg) {
    if (v >= 0)
      return true;
    status = fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s is negative (%lld)", kernel, arg,
                  static_cast<long long>(v));
    return false;
  }
  bool positive(int64_t v, const char *arg) {
    if (v > 0)
      return true;
    status = fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s must be > 0 (got %lld)", kernel, arg,
                  static_cast<long long>(v));
    return false;
  }
  bool atMost(int64_t v, int64_t limit, const char *arg) {
    if (v <= limit)
      return true;
    status = fail(KILN_ERROR_UNSUPPORTED, "%s: %s = %lld exceeds the supported maximum %lld",
                  kernel, arg, static_cast<long long>(v), static_cast<long long>(limit));
    return false;
  }
  // a * b elements of 2 bytes must be addressable with int64 byte offsets.
  bool sizeFits(int64_t a, int64_t b, const char *what) {
    int64_t elements;
    if (!__builtin_mul_overflow(a, b, &elements) &&
        elements <= std::numeric_limits<int64_t>::max() / 2)
      return true;
    status = fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s (%lld x %lld) is too large", kernel,
                  what, static_cast<long long>(a), static_cast<long long>(b));
    return false;
  }
  bool finite(float v, const char *arg) {
    if (std::isfinite(v))
      return true;
    status = fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s is not finite", kernel, arg);
    return false;
  }
  bool positiveFloat(float v, const char *arg) {
    if (std::isfinite(v) && v > 0.0f)
      return true;
    status = fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s must be finite and > 0 (got %g)", kernel,
                  arg, static_cast<double>(v));
    return false;
  }
  // Resolves a stride: negative is an error, 0 becomes the packed default.
  bool stride(int64_t &v, int64_t packed, const char *arg) {
    if (!nonNegative(v, arg))
      return false;
    if (v == 0)
      v = packed;
    return true;
  }
  // A stride used for 16-byte vector accesses: its byte size must be a multiple of 16.
  bool vecStride(int64_t &v, int64_t packed, int elem, const char *arg) {
    if (!stride(v, packed, arg))
      return false;
    if ((v * elem) % 16 == 0)
      return true;
    status = fail(KILN_ERROR_UNSUPPORTED,
                  "%s: %s = %lld elements is not a multiple of 16 bytes (16-byte accesses)",
                  kernel, arg, static_cast<long long>(v));
    return false;
  }
};

} // namespace kiln::kernels

#endif
