#include "runtime/cli/bind_option.h"

#include <algorithm>
#include <charconv>

#include "core/error.h"

namespace tandem::cli {

namespace {

std::vector<std::string> symbols_of(const Graph& graph) {
  std::vector<std::string> names = graph.symbols();
  for (const GraphInput& target : graph.targets)
    for (const Dim& d : graph.values[target.value].type.shape)
      for (const std::string& s : d.symbols())
        if (std::find(names.begin(), names.end(), s) == names.end()) names.push_back(s);
  return names;
}

std::string listed(const std::vector<std::string>& names) {
  if (names.empty()) return "none";
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

Bindings parse_bind_options(const std::vector<std::string>& items, const Graph& graph) {
  Bindings bindings;
  const std::vector<std::string> symbols = symbols_of(graph);
  for (const std::string& item : items) {
    const size_t eq = item.find('=');
    const std::string name = item.substr(0, eq);
    int64_t value = 0;
    const char* first = eq == std::string::npos ? nullptr : item.data() + eq + 1;
    const char* last = item.data() + item.size();
    auto [end, ec] = first ? std::from_chars(first, last, value) : std::from_chars_result{nullptr, std::errc::invalid_argument};
    if (name.empty() || !first || ec != std::errc() || end != last || first == last)
      throw UserError("--bind '" + item + "' must be NAME=VALUE with a whole number VALUE, such as --bind seq=16");
    if (std::find(symbols.begin(), symbols.end(), name) == symbols.end())
      throw UserError("--bind " + name + ": model '" + graph.name + "' has no symbol '" + name +
                      "' in its input shapes (its symbols: " + listed(symbols) + ")");
    if (value < 1) throw UserError("--bind " + name + " must be at least 1, not " + std::to_string(value));
    bindings[name] = value;
  }
  return bindings;
}

}  // namespace tandem::cli
