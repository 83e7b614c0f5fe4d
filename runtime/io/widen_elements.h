// What the file readers share to bring a file's numbers to Tandem's dtypes: float16 to
// float32 (exactly: every half is a float), and any element type to another, element by
// element from unaligned bytes (safetensors.cpp, npy.cpp).
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tandem {

/// The float32 an IEEE half's bits stand for (subnormals, infinities and NaNs included).
inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  const uint32_t bits = exponent == 31 ? sign | 0x7f800000u | (mantissa << 13)  // inf / nan
                                       : sign | ((exponent + 112) << 23) | (mantissa << 13);
  return std::bit_cast<float>(bits);
}

/// dst[i] = convert(the i-th `From` at `src`), for `n` elements; `src` need not be aligned.
template <class From, class To, class Convert>
void convert_each(const std::byte* src, To* dst, int64_t n, Convert convert) {
  for (int64_t i = 0; i < n; ++i) {
    From v;
    std::memcpy(&v, src + i * static_cast<int64_t>(sizeof(From)), sizeof(From));
    dst[i] = convert(v);
  }
}

}  // namespace tandem
