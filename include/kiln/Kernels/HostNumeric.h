/* Host-side conversions between fp32 and the storage types the kernels use (bf16, f16,
 * and the FP8 e4m3 of KV caches), for CPU references, tests and benchmarks (round to
 * nearest even, like the device). */
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
/* As kiln_float_to_f16, but values beyond +-65504 and infinities saturate to +-65504 (the
 * largest finite f16) instead of becoming infinite; NaN stays NaN. How kv_append stores
 * bf16 K/V into an f16 pool. */
uint16_t kiln_float_to_f16_sat(float value);
/* OCP e4m3 ("fn"): bias 7, no infinities, 0x7f / 0xff NaN, largest finite 448. The
 * encoder saturates finite values beyond +-448 to +-448 (as kv_append does). */
float kiln_e4m3_to_float(uint8_t bits);
uint8_t kiln_float_to_e4m3(float value);

#ifdef __cplusplus
}
#endif
#endif
