// Attributes of a layer: the op's constructor arguments, with defaults filled in by
// the op's schema at load time, so a kernel can read any attribute of its op.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace tandem {

/// null (YAML `null` / `~`), bool, int, float, string, list of ints, list of names
/// (a shape with symbols, such as reshape's `[batch, -1]`, as written).
using AttrValue =
    std::variant<std::monostate, bool, int64_t, double, std::string, std::vector<int64_t>, std::vector<std::string>>;

/// Immutable after loading; safe to read from several threads.
class Attributes {
 public:
  void set(std::string name, AttrValue value) { values_[std::move(name)] = std::move(value); }
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  bool is_null(const std::string& name) const;
  int64_t get_int(const std::string& name) const;
  /// A float attribute; an int value is converted.
  double get_float(const std::string& name) const;
  bool get_bool(const std::string& name) const;
  const std::string& get_string(const std::string& name) const;
  /// A list of ints; a single int is returned as a list of one.
  std::vector<int64_t> get_ints(const std::string& name) const;
  const std::map<std::string, AttrValue>& values() const { return values_; }
  /// "in_features=10, bias=true": stable, for cache keys and printing.
  std::string str() const;

 private:
  const AttrValue& at(const std::string& name) const;
  std::map<std::string, AttrValue> values_;
};

}  // namespace tandem
