#include "kiln/Kernels/HostNumeric.h"
#include "kiln/Kernels/Decode.h" // the FP8 MLA token layout

#include <algorithm>

#include <cmath>
#include <cstring>

extern "C" float kiln_bf16_to_float(uint16_t bits) {
  uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof(value));
  return value;
}

extern "C" uint16_t kiln_float_to_bf16(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof(word));
  if (std::isnan(value))
    return static_cast<uint16_t>((word >> 16) | 0x40);
  uint32_t roundingBias = 0x7fff + ((word >> 16) & 1);
  return static_cast<uint16_t>((word + roundingBias) >> 16);
}

extern "C" float kiln_f16_to_float(uint16_t bits) {
  uint32_t sign = (bits >> 15) & 1, exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  float magnitude;
  if (exponent == 0)
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  else if (exponent == 31)
    magnitude = mantissa ? NAN : INFINITY;
  else
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400), static_cast<int>(exponent) - 25);
  return sign ? -magnitude : magnitude;
}

extern "C" uint16_t kiln_float_to_f16(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof(word));
  uint16_t sign = static_cast<uint16_t>((word >> 16) & 0x8000);
  if (std::isnan(value))
    return sign | 0x7e00;
  float magnitude = std::fabs(value);
  if (magnitude >= 65520.0f)
    return sign | 0x7c00;
  if (magnitude < std::ldexp(1.0f, -14)) {
    // Subnormal: units of 2^-24, rounded to nearest even by nearbyint.
    return sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(magnitude, 24)));
  }
  int exponent;
  float fraction = std::frexp(magnitude, &exponent); // magnitude = fraction * 2^exponent
  float scaled = std::nearbyint(std::ldexp(fraction, 11)); // 11 significant bits
  if (scaled >= 2048.0f) {
    scaled /= 2.0f;
    ++exponent;
  }
  uint16_t biased = static_cast<uint16_t>(exponent - 1 + 15);
  return sign | static_cast<uint16_t>(biased << 10) |
         static_cast<uint16_t>(static_cast<uint32_t>(scaled) & 0x3ff);
}

extern "C" uint16_t kiln_float_to_f16_sat(float value) {
  if (!std::isnan(value) && std::fabs(value) > 65504.0f)
    value = std::copysign(65504.0f, value);
  return kiln_float_to_f16(value);
}

extern "C" float kiln_e4m3_to_float(uint8_t bits) {
  const uint32_t sign = bits >> 7, exponent = (bits >> 3) & 0xf, mantissa = bits & 7;
  float magnitude;
  if (exponent == 15 && mantissa == 7)
    magnitude = NAN;
  else if (exponent == 0)
    magnitude = std::ldexp(static_cast<float>(mantissa), -9);
  else
    magnitude = std::ldexp(static_cast<float>(mantissa | 8), static_cast<int>(exponent) - 10);
  return sign ? -magnitude : magnitude;
}

extern "C" uint8_t kiln_float_to_e4m3(float value) {
  const uint8_t sign = std::signbit(value) ? 0x80 : 0;
  if (std::isnan(value))
    return sign | 0x7f;
  const float magnitude = std::fabs(value);
  constexpr uint8_t kLargest = 0x7e; // 448 = 1.75 * 2^8
  if (magnitude >= 448.0f)
    return sign | kLargest;
  if (magnitude < std::ldexp(1.0f, -6)) // subnormal: units of 2^-9 (8 units = 2^-6)
    return sign | static_cast<uint8_t>(std::nearbyint(std::ldexp(magnitude, 9)));
  int exponent;
  const float fraction = std::frexp(magnitude, &exponent); // magnitude = fraction * 2^exponent
  float scaled = std::nearbyint(std::ldexp(fraction, 4));   // 4 significant bits
  if (scaled >= 16.0f) {
    scaled /= 2.0f;
    ++exponent;
  }
  const int biased = exponent - 1 + 7;
  const uint8_t bits = static_cast<uint8_t>((biased << 3) | (static_cast<int>(scaled) & 7));
  return sign | (bits > kLargest ? kLargest : bits);
}

extern "C" float kiln_mla_fp8_scale(float amax) {
  if (!(amax > 0.0f) || std::isinf(amax))
    return 1.0f;
  int exponent;
  const float fraction = std::frexp(amax / 448.0f, &exponent);
  return std::ldexp(1.0f, std::max(fraction == 0.5f ? exponent - 1 : exponent, -126));
}

extern "C" void kiln_mla_fp8_encode_token(const uint16_t *latent, const uint16_t *rope,
                                          uint8_t *token) {
  for (int g = 0; g < KILN_MLA_KV_LORA_RANK / KILN_MLA_FP8_GROUP; ++g) {
    float amax = 0.0f;
    for (int i = 0; i < KILN_MLA_FP8_GROUP; ++i)
      amax = std::fmax(amax, std::fabs(kiln_bf16_to_float(latent[g * KILN_MLA_FP8_GROUP + i])));
    const float scale = kiln_mla_fp8_scale(amax), inv = 1.0f / scale;
    for (int i = 0; i < KILN_MLA_FP8_GROUP; ++i)
      token[g * KILN_MLA_FP8_GROUP + i] =
          kiln_float_to_e4m3(kiln_bf16_to_float(latent[g * KILN_MLA_FP8_GROUP + i]) * inv);
    std::memcpy(token + KILN_MLA_FP8_SCALE_OFFSET + 4 * g, &scale, 4);
  }
  std::memcpy(token + KILN_MLA_FP8_ROPE_OFFSET, rope, 2 * KILN_MLA_ROPE_DIM);
}

extern "C" void kiln_mla_fp8_decode_token(const uint8_t *token, uint16_t *values) {
  for (int i = 0; i < KILN_MLA_KV_LORA_RANK; ++i) {
    float scale;
    std::memcpy(&scale, token + KILN_MLA_FP8_SCALE_OFFSET + 4 * (i / KILN_MLA_FP8_GROUP), 4);
    values[i] = kiln_float_to_bf16(kiln_e4m3_to_float(token[i]) * scale);
  }
  std::memcpy(values + KILN_MLA_KV_LORA_RANK, token + KILN_MLA_FP8_ROPE_OFFSET,
              2 * KILN_MLA_ROPE_DIM);
}
