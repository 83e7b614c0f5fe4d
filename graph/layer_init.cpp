#include "graph/layer_init.h"

#include <algorithm>

namespace tandem {

namespace {

const char* kForms = "zeros, ones, {uniform: [low, high]} or {normal: [mean, std]}";

/// The two numbers of {uniform: [a, b]} or {normal: [mean, std]}.
std::pair<double, double> two_numbers(const YamlReader& yaml, const YAML::Node& n, const std::string& layer,
                                      const std::string& what) {
  if (!n.IsSequence() || n.size() != 2) yaml.fail(n, layer, what + " takes two numbers, as [a, b]; got " + kind_of(n));
  return {yaml.scalar_number(n[0], layer, what), yaml.scalar_number(n[1], layer, what)};
}

ParamInit read_distribution(const YamlReader& yaml, const YAML::Node& n, const std::string& layer,
                            const std::string& param) {
  const std::string what = "init of '" + param + "'";
  ParamInit init;
  if (n.IsScalar() && (n.Scalar() == "zeros" || n.Scalar() == "ones")) {
    init.kind = n.Scalar() == "zeros" ? ParamInit::Kind::zeros : ParamInit::Kind::ones;
    return init;
  }
  if (!n.IsMap() || n.size() != 1) yaml.fail(n, layer, what + " must be " + kForms + "; got " + kind_of(n));
  const std::string kind = n.begin()->first.Scalar();
  const YAML::Node args = n.begin()->second;
  if (kind == "uniform") {
    auto [low, high] = two_numbers(yaml, args, layer, what + ": uniform");
    if (!(low <= high)) yaml.fail(args, layer, what + ": uniform needs low <= high");
    return ParamInit{ParamInit::Kind::uniform, low, high};
  }
  if (kind == "normal") {
    auto [mean, std] = two_numbers(yaml, args, layer, what + ": normal");
    if (!(std >= 0)) yaml.fail(args, layer, what + ": normal needs std >= 0");
    return ParamInit{ParamInit::Kind::normal, mean, std};
  }
  yaml.fail(n.begin()->first, layer,
            what + ": unknown distribution '" + kind + "'" +
                did_you_mean(kind, std::vector<std::string>{"uniform", "normal", "zeros", "ones"}) + "; write " + kForms);
}

}  // namespace

void read_layer_init(const YamlReader& yaml, const YAML::Node& init, const std::string& layer,
                     std::vector<ParamSpec>& params) {
  std::vector<std::string> names;  // local: weight, bias
  for (const ParamSpec& p : params) names.push_back(p.name.substr(layer.size() + 1));
  if (!init.IsMap() || init.size() == 0)
    yaml.fail(init, layer, "init must map parameter names to distributions, as {weight: {uniform: [-0.01, 0.01]}}; got " +
                               kind_of(init));
  if (params.empty()) yaml.fail(init, layer, "init: this layer has no parameters");
  for (auto it = init.begin(); it != init.end(); ++it) {
    const std::string name = yaml.scalar_string(it->first, layer, "init key");
    auto p = std::find(names.begin(), names.end(), name);
    if (p == names.end()) {
      std::string listed;
      for (const std::string& n : names) listed += (listed.empty() ? "" : ", ") + n;
      yaml.fail(it->first, layer, "init: no parameter '" + name + "'" + did_you_mean(name, names) +
                                      "; this layer has " + listed);
    }
    ParamSpec& param = params[static_cast<size_t>(p - names.begin())];
    if (param.dtype != DType::float32) yaml.fail(it->first, layer, "init: '" + name + "' is an int64 counter, not drawn");
    param.init = read_distribution(yaml, it->second, layer, name);  // the whole tensor: no zero row
  }
}

}  // namespace tandem
