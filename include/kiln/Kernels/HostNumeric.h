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
/* The FP8 MLA latent token (kiln/Kernels/Decode.h, KILN_MLA_FP8_TOKEN_BYTES): the scale
 * kiln_mla_kv_append gives a 128-value group of largest magnitude amax (the smallest
 * power of two with amax / scale <= 448, at least 2^-126; 1 for 0 or non-finite amax),
 * the whole token as kiln_mla_kv_append writes it from 512 bf16 latent and 64 bf16 rope
 * values, and its 576 values widened back to bf16 as mla_decode reads them. */
float kiln_mla_fp8_scale(float amax);
void kiln_mla_fp8_encode_token(const uint16_t *latent, const uint16_t *rope, uint8_t *token);
void kiln_mla_fp8_decode_token(const uint8_t *token, uint16_t *values);

#ifdef __cplusplus
}
#endif
#endif
