// A producer kernel for the chained-launch tests: it lets its dependents launch at once
// (griddepcontrol.launch_dependents) and writes its output only after spinning, so a
// chained consumer that read before it waited would see the old contents.
#ifndef KILN_TEST_KERNELS_GRAPH_SLOWPRODUCER_H
#define KILN_TEST_KERNELS_GRAPH_SLOWPRODUCER_H

#include <cuda_runtime.h>

#include <cstdint>

// Copies n 16-bit values from `values` to `out` after ~`spinCycles` clock cycles.
cudaError_t launchSlowProducer(const uint16_t *values, uint16_t *out, int64_t n,
                               long long spinCycles, cudaStream_t stream);

#endif // KILN_TEST_KERNELS_GRAPH_SLOWPRODUCER_H
