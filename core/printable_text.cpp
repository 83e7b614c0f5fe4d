#include "core/printable_text.h"

#include <cmath>
#include <cstdint>
#include <cstdio>

namespace tandem {

size_t utf8_sequence_length(std::string_view text) {
  if (text.empty()) return 0;
  auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(0);
  if (lead < 0x80) return 1;
  // The ranges of RFC 3629's table: the second byte's range excludes overlong forms,
  // surrogates (U+D800..U+DFFF) and code points past U+10FFFF.
  size_t length = 0;
  uint8_t low = 0x80, high = 0xbf;
  if (lead >= 0xc2 && lead <= 0xdf) length = 2;
  else if (lead == 0xe0) length = 3, low = 0xa0;
  else if (lead == 0xed) length = 3, high = 0x9f;
  else if (lead >= 0xe1 && lead <= 0xef) length = 3;
  else if (lead == 0xf0) length = 4, low = 0x90;
  else if (lead >= 0xf1 && lead <= 0xf3) length = 4;
  else if (lead == 0xf4) length = 4, high = 0x8f;
  else return 0;
  if (text.size() < length) return 0;
  if (byte(1) < low || byte(1) > high) return 0;
  for (size_t i = 2; i < length; ++i)
    if (byte(i) < 0x80 || byte(i) > 0xbf) return 0;
  return length;
}

std::string printable_text(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  auto escape_byte = [&](uint8_t b) {
    out += "\\x";
    out += kHex[b >> 4];
    out += kHex[b & 0xf];
  };
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<uint8_t>(text[i]);
    if (b == '\n') out += "\\n";
    else if (b == '\r') out += "\\r";
    else if (b == '\t') out += "\\t";
    else if (b < 0x20 || b == 0x7f) escape_byte(b);
    if (b < 0x20 || b == 0x7f) {
      ++i;
      continue;
    }
    size_t length = utf8_sequence_length(text.substr(i));
    // C1 controls (U+0080..U+009F, written C2 80..C2 9F) include CSI, which terminals obey.
    bool c1 = length == 2 && b == 0xc2 && static_cast<uint8_t>(text[i + 1]) <= 0x9f;
    if (length == 0 || c1) {
      for (size_t k = 0; k < (c1 ? 2 : 1); ++k) escape_byte(static_cast<uint8_t>(text[i + k]));
      i += c1 ? 2 : 1;
      continue;
    }
    out.append(text.substr(i, length));
    i += length;
  }
  return out;
}

std::string short_number(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "+inf" : "-inf";
  char text[32];
  std::snprintf(text, sizeof text, "%g", x);
  return text;
}

}  // namespace tandem
