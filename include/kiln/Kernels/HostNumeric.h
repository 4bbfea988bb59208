/* Host-side conversions between fp32 and the 16-bit storage types the kernels use,
 * for CPU references, tests and benchmarks (round to nearest even, like the device). */
#ifndef KILN_KERNELS_HOSTNUMERIC_H
#define KILN_KERNELS_HOSTNUMERIC_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

float kiln_bf16_to_float(uint16_t bits);
uint16_t kiln_float_to_bf16(float value);
float kiln_f16_to_float(uint16_t bits);
uint16_t kiln_float_to_f16(float value);

#ifdef __cplusplus
}
#endif
#endif
