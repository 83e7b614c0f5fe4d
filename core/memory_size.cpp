#include "core/memory_size.h"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "core/error.h"

namespace tandem {
namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

[[noreturn]] void bad_size(std::string_view text, const std::string& why) {
  throw UserError("memory size '" + std::string(text) + "' " + why +
                  ": write a number with an optional unit, e.g. 16GiB, 512MiB, 1.5GB or 4096 (bytes); "
                  "K, M, G, T and KiB, MiB, GiB, TiB are powers of 1024, KB, MB, GB, TB powers of 1000");
}

// The multiplier of a unit (already lower-cased), or 0 when it is not one.
double unit_multiplier(const std::string& unit) {
  static const std::array<std::pair<const char*, double>, 14> units{{
      {"", 1.0},
      {"b", 1.0},
      {"k", 0x1p10},
      {"kib", 0x1p10},
      {"m", 0x1p20},
      {"mib", 0x1p20},
      {"g", 0x1p30},
      {"gib", 0x1p30},
      {"t", 0x1p40},
      {"tib", 0x1p40},
      {"kb", 1e3},
      {"mb", 1e6},
      {"gb", 1e9},
      {"tb", 1e12},
  }};
  for (const auto& [name, multiplier] : units)
    if (unit == name) return multiplier;
  return 0.0;
}

}  // namespace

size_t parse_memory_size(std::string_view text) {
  std::string_view body = trim(text);
  if (body.empty()) bad_size(text, "is empty");
  size_t number_end = 0;
  while (number_end < body.size() && (std::isdigit(static_cast<unsigned char>(body[number_end])) || body[number_end] == '.'))
    ++number_end;
  if (number_end == 0) bad_size(text, body.front() == '-' ? "is negative" : "does not start with a number");
  double number = 0;
  auto [end, ec] = std::from_chars(body.data(), body.data() + number_end, number);
  if (ec != std::errc() || end != body.data() + number_end) bad_size(text, "does not start with a number");
  double multiplier = unit_multiplier(lower(trim(body.substr(number_end))));
  if (multiplier == 0.0) bad_size(text, "has an unknown unit");
  double bytes = std::round(number * multiplier);
  // 2^64 is exactly representable; anything at or above it does not fit in size_t.
  if (!(bytes < 0x1p64)) bad_size(text, "is too large");
  return static_cast<size_t>(bytes);
}

size_t parse_device_memory_size(std::string_view text) {
  const std::string_view body = trim(text);
  if (!body.empty() && body.find_first_not_of("0123456789.") == std::string_view::npos)
    throw UserError("memory size '" + std::string(text) + "' has no unit: write " + std::string(body) + "GiB, " +
                    std::string(body) + "MiB or " + std::string(body) + "GB (" + std::string(body) +
                    "B if you mean bytes)");
  return parse_memory_size(text);
}

std::string format_bytes(size_t bytes) {
  static const std::array<const char*, 6> units{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  // Move up a unit once the value would print as 1024.0 or more.
  while (value >= 1023.95 && unit + 1 < units.size()) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.1f %s", value, units[unit]);
  return text;
}

}  // namespace tandem
