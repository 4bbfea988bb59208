// Shared helpers for GPU tests: every GPU test starts with KILN_REQUIRE_GPU(), which
// skips it with a visible message on machines without a CUDA device (CI).
#ifndef KILN_TEST_KERNELS_GPUTEST_H
#define KILN_TEST_KERNELS_GPUTEST_H

#include <cuda_runtime.h>
#include <gtest/gtest.h>

namespace kiln::test {
inline bool hasCudaDevice() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}
} // namespace kiln::test

#define KILN_REQUIRE_GPU()                                                     \
  do {                                                                         \
    if (!::kiln::test::hasCudaDevice())                                        \
      GTEST_SKIP() << "skipped: no CUDA device";                               \
  } while (0)

#endif
