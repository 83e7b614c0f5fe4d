// bfloat16 as bits: float32's sign, exponent and top 7 mantissa bits. The conversions give
// the bits torch's float -> bfloat16 conversion gives (round to nearest even, a NaN stays a
// quiet NaN), so that whatever Tandem rounds to bf16 (a bf16 kernel's inputs, a compressed
// gradient) rounds as PyTorch would.
#pragma once

#include <cstdint>
#include <cstring>

namespace tandem {

/// The bf16 bits of `f`, rounded to nearest even (a NaN stays a quiet NaN).
inline uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

/// The float32 that bf16 bits `b` stand for (exact: every bf16 is a float32).
inline float bf16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace tandem
