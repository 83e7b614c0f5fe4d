// Reading a model file's YAML with positions: each error names FILE:LINE:COLUMN and,
// inside a layer, its path. The loader of each part of the file (layers, training,
// placement) reads through this, so that they all report alike. Private to graph/.
#pragma once

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "core/device.h"
#include "graph/graph.h"
#include "graph/load_graph.h"
#include "graph/text_similarity.h"

namespace tandem {

/// "null", "'text'", "a list", "a mapping": how a node is named in messages.
std::string kind_of(const YAML::Node& n);
/// Letters, digits and _ only, at most 128 characters.
bool is_identifier(const std::string& s);

class YamlReader {
 public:
  explicit YamlReader(std::string file) : file_(std::move(file)) {}
  const std::string& file() const { return file_; }

  SourceLocation where(const YAML::Node& at) const {
    SourceLocation loc{file_, 1, 1};
    if (at.IsDefined() && at.Mark().line >= 0) {
      loc.line = at.Mark().line + 1;
      loc.column = at.Mark().column + 1;
    }
    return loc;
  }

  [[noreturn]] void fail(const YAML::Node& at, const std::string& layer, const std::string& message) const {
    SourceLocation loc = where(at);
    std::string text = loc.str() + ": " + (layer.empty() ? "" : "layer '" + layer + "': ") + message;
    throw ModelError(text, loc);
  }

  const YAML::Node require(const YAML::Node& map, const std::string& key, const std::string& layer) const {
    const YAML::Node n = map[key];
    if (!n.IsDefined() || n.IsNull()) fail(map, layer, "missing required key '" + key + "'");
    return n;
  }

  void check_keys(const YAML::Node& map, const std::set<std::string>& allowed, const std::string& layer,
                  const std::string& what) const {
    std::set<std::string> seen;
    for (auto it = map.begin(); it != map.end(); ++it) {
      if (!it->first.IsScalar()) fail(it->first, layer, what + "s must be plain names");
      const std::string& key = it->first.Scalar();
      if (!seen.insert(key).second) fail(it->first, layer, "duplicate key '" + key + "'");
      if (!allowed.count(key))
        fail(it->first, layer,
             "unknown " + what + " '" + key + "'" +
                 did_you_mean(key, std::vector<std::string>(allowed.begin(), allowed.end())));
    }
  }

  // ---- scalars ------------------------------------------------------------------
  std::string scalar_string(const YAML::Node& n, const std::string& layer, const std::string& what) const {
    if (!n.IsScalar()) fail(n, layer, what + " must be a string; got " + kind_of(n));
    return n.Scalar();
  }

  static bool quoted(const YAML::Node& n) { return n.Tag() == "!"; }

  std::optional<int64_t> try_int(const YAML::Node& n) const {
    if (!n.IsScalar() || quoted(n)) return std::nullopt;
    const std::string& s = n.Scalar();
    const char* begin = s.data() + (s.starts_with("+") ? 1 : 0);
    int64_t v = 0;
    auto [end, ec] = std::from_chars(begin, s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
    return v;
  }

  int64_t scalar_int(const YAML::Node& n, const std::string& layer, const std::string& what) const {
    if (auto v = try_int(n)) return *v;
    std::string got = kind_of(n);
    if (n.IsScalar() && !quoted(n)) {
      const std::string& s = n.Scalar();
      int64_t ignored;
      auto [end, ec] = std::from_chars(s.data() + (s.starts_with("-") ? 1 : 0), s.data() + s.size(), ignored);
      if (ec == std::errc::result_out_of_range) fail(n, layer, what + " " + s + " is too large for a 64-bit integer");
    }
    fail(n, layer, what + " must be an integer; got " + (quoted(n) ? "the string " : "") + got);
  }

  double scalar_number(const YAML::Node& n, const std::string& layer, const std::string& what) const {
    if (n.IsScalar() && !quoted(n)) {
      const std::string& s = n.Scalar();
      double v = 0;
      const char* begin = s.data() + (s.starts_with("+") ? 1 : 0);
      auto [end, ec] = std::from_chars(begin, s.data() + s.size(), v);
      if (ec == std::errc() && end == s.data() + s.size() && std::isfinite(v)) return v;
    }
    fail(n, layer, what + " must be a finite number; got " + kind_of(n));
  }

  bool scalar_bool(const YAML::Node& n, const std::string& layer, const std::string& what) const {
    static const std::set<std::string> yes = {"true", "True", "TRUE", "yes", "Yes", "on", "On"};
    static const std::set<std::string> no = {"false", "False", "FALSE", "no", "No", "off", "Off"};
    if (n.IsScalar() && !quoted(n)) {
      if (yes.count(n.Scalar())) return true;
      if (no.count(n.Scalar())) return false;
    }
    fail(n, layer, what + " must be true or false; got " + kind_of(n));
  }

  Device parse_device(const YAML::Node& n, const std::string& layer, const std::string& what) const {
    std::string text = scalar_string(n, layer, what);
    auto device = Device::parse(text);
    if (!device) fail(n, layer, what + " '" + text + "' is not a device; write cpu, cuda or cuda:N (N = 0, 1, ...)");
    return *device;
  }


 private:
  std::string file_;
};

}  // namespace tandem
