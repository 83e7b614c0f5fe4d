#include "graph/yaml_reader.h"

namespace tandem {

std::string kind_of(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null: return "null";
    case YAML::NodeType::Scalar: {
      // cut short: a stray quote can make a scalar of the rest of the file
      constexpr size_t kMax = 80;
      const std::string& s = n.Scalar();
      return "'" + s.substr(0, kMax) + (s.size() > kMax ? "...'" : "'");
    }
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    default: return "nothing";
  }
}

bool is_identifier(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

}  // namespace tandem
