#include "runtime/cli/strict_values.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

namespace tandem::cli {
namespace {

/// Checks `text` and rewrites it as CLI11 will read it right: "010" as "10", not octal 8.
template <class T>
std::string check_whole_number(std::string& text) {
  const std::string what = std::is_unsigned_v<T> ? "a whole number >= 0" : "a whole number";
  const bool negative = !text.empty() && text[0] == '-';
  const size_t first_digit = negative ? 1 : 0;
  const bool digits = text.size() > first_digit && text.find_first_not_of("0123456789", first_digit) == std::string::npos;
  if (!digits || (negative && std::is_unsigned_v<T>)) return "'" + text + "' is not " + what;
  T value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range)
    return "'" + text + "' is too large (at most " + std::to_string(std::numeric_limits<T>::max()) + ")";
  if (ec != std::errc() || end != text.data() + text.size()) return "'" + text + "' is not " + what;
  text = std::to_string(value);
  return "";
}

/// Checks `text` and rewrites it as the shortest decimal that reads back to the same double.
std::string check_finite_number(std::string& text) {
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  // from_chars reads "inf" and "nan" too, and no hex in its general format
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value))
    return "'" + text + "' is not a finite number";
  char buffer[32];
  auto [last, error] = std::to_chars(buffer, buffer + sizeof buffer, value);
  if (error == std::errc()) text.assign(buffer, last);
  return "";
}

CLI::Validator strict_validator(const std::string& type) {
  if (type == "INT")
    return CLI::Validator([](std::string& s) { return check_whole_number<int64_t>(s); }, "", "whole number");
  if (type == "UINT")
    return CLI::Validator([](std::string& s) { return check_whole_number<uint64_t>(s); }, "", "non-negative whole number");
  if (type == "FLOAT")
    return CLI::Validator([](std::string& s) { return check_finite_number(s); }, "", "finite number");
  return CLI::Validator([](std::string& s) { return s.empty() ? std::string("an empty value is not allowed") : ""; },
                        "", "not empty");
}

}  // namespace

void require_strict_values(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    if (option->get_items_expected_min() == 0) continue;  // a flag
    std::string type = option->get_type_name();  // "INT", or "INT:INT in [0 - 10]" with a check
    type = type.substr(0, type.find(':'));
    if (type == "INT" || type == "UINT" || type == "FLOAT" || type == "TEXT") option->transform(strict_validator(type));  // first, before the option's own checks
  }
  for (CLI::App* sub : app.get_subcommands({})) require_strict_values(*sub);
}

}  // namespace tandem::cli
