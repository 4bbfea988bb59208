// The f16-pool check the decode and prefill GPU tests share: an f16 KV pool holding bf16
// values must give the bf16 pool's attention output within the bound derived in
// docs/kernels-decode.md ("F16 KV cache"): fp16 rounding of the probabilities and of P·V
// (2^-8 + 2^-11 of the mean |V| a row), bf16 rounding of either output (2^-8 of each),
// 1% slack and an absolute floor.
#ifndef KILN_TEST_KERNELS_F16POOLBOUND_H
#define KILN_TEST_KERNELS_F16POOLBOUND_H

#include "kiln/Kernels/HostNumeric.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace kiln::test {

// Fails the test for each output element of `fromF16` beyond the bound around
// `fromBf16` (the first five named; `pool` names the store in messages: "pool",
// "cache"); returns the worst difference as a fraction of its bound.
inline double expectF16PoolWithinBound(const std::vector<uint16_t> &fromBf16,
                                       const std::vector<uint16_t> &fromF16,
                                       const std::vector<double> &meanAbsV, const char *pool) {
  size_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < fromF16.size(); ++i) {
    const double vb = kiln_bf16_to_float(fromBf16[i]), vh = kiln_bf16_to_float(fromF16[i]);
    const double bound = 1.01 * ((std::ldexp(1.0, -8) + std::ldexp(1.0, -11)) * meanAbsV[i] +
                                 std::ldexp(1.0, -8) * (std::fabs(vb) + std::fabs(vh))) +
                         1e-5;
    const double diff = std::fabs(vb - vh);
    worst = std::max(worst, diff / bound);
    if (!(diff <= bound) && bad++ < 5)
      ADD_FAILURE() << "element " << i << ": bf16 " << pool << " " << vb << ", f16 " << pool << " "
                    << vh << ", bound " << bound;
  }
  EXPECT_EQ(bad, 0u) << bad << " of " << fromF16.size() << " beyond the bound";
  return worst;
}

} // namespace kiln::test

#endif
