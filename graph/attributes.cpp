#include "graph/attributes.h"

#include <sstream>

#include "core/error.h"

namespace tandem {

const AttrValue& Attributes::at(const std::string& name) const {
  auto it = values_.find(name);
  TANDEM_ASSERT(it != values_.end(), "attribute '" + name + "' is not set (missing from the op schema?)");
  return it->second;
}

bool Attributes::is_null(const std::string& name) const {
  return std::holds_alternative<std::monostate>(at(name));
}

int64_t Attributes::get_int(const std::string& name) const {
  const AttrValue& v = at(name);
  TANDEM_ASSERT(std::holds_alternative<int64_t>(v), "attribute '" + name + "' is not an int");
  return std::get<int64_t>(v);
}

double Attributes::get_float(const std::string& name) const {
  const AttrValue& v = at(name);
  if (auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  TANDEM_ASSERT(std::holds_alternative<double>(v), "attribute '" + name + "' is not a float");
  return std::get<double>(v);
}

bool Attributes::get_bool(const std::string& name) const {
  const AttrValue& v = at(name);
  TANDEM_ASSERT(std::holds_alternative<bool>(v), "attribute '" + name + "' is not a bool");
  return std::get<bool>(v);
}

const std::string& Attributes::get_string(const std::string& name) const {
  const AttrValue& v = at(name);
  TANDEM_ASSERT(std::holds_alternative<std::string>(v), "attribute '" + name + "' is not a string");
  return std::get<std::string>(v);
}

std::vector<int64_t> Attributes::get_ints(const std::string& name) const {
  const AttrValue& v = at(name);
  if (auto* i = std::get_if<int64_t>(&v)) return {*i};
  TANDEM_ASSERT(std::holds_alternative<std::vector<int64_t>>(v), "attribute '" + name + "' is not a list");
  return std::get<std::vector<int64_t>>(v);
}

std::string Attributes::str() const {
  std::ostringstream out;
  bool first = true;
  for (const auto& [name, value] : values_) {
    out << (first ? "" : ", ") << name << "=";
    first = false;
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::monostate>) out << "null";
          else if constexpr (std::is_same_v<T, bool>) out << (v ? "true" : "false");
          else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
            out << "[";
            for (size_t i = 0; i < v.size(); ++i) out << (i ? ", " : "") << v[i];
            out << "]";
          } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            out << "[";
            for (size_t i = 0; i < v.size(); ++i) out << (i ? ", " : "") << v[i];
            out << "]";
          } else out << v;
        },
        value);
  }
  return out.str();
}

}  // namespace tandem
