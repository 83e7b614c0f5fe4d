// make_optimizer: checks a configuration the way torch.optim's constructors do.
#include <cmath>
#include <sstream>

#include "runtime/optim/optimizer_impl.h"

namespace tandem {

namespace {

std::string number(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

// The comparisons are written so that NaN fails them.
void require_non_negative(const std::string& optimizer, const char* field, double x) {
  if (!(x >= 0))
    throw UserError("optimizer " + optimizer + ": " + field + " must be >= 0, got " + number(x));
}

void require_beta(const std::string& optimizer, const char* field, double x) {
  if (!(x >= 0 && x < 1))
    throw UserError("optimizer " + optimizer + ": " + field + " must be in [0, 1), got " + number(x));
}

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& c) {
  const std::string& name = c.name;
  if (name != "sgd" && name != "adam" && name != "adamw")
    throw UserError("unknown optimizer '" + name + "' (expected sgd, adam or adamw)");
  require_non_negative(name, "lr", c.lr);
  require_non_negative(name, "weight_decay", c.weight_decay);
  if (name == "sgd") {
    require_non_negative(name, "momentum", c.momentum);
    if (!std::isfinite(c.dampening))
      throw UserError("optimizer sgd: dampening must be a finite number, got " + number(c.dampening));
    if (c.nesterov && (c.momentum <= 0 || c.dampening != 0))
      throw UserError("optimizer sgd: nesterov requires momentum > 0 and dampening 0 (got momentum " +
                      number(c.momentum) + ", dampening " + number(c.dampening) + ")");
    return optim_detail::make_sgd(c);
  }
  require_beta(name, "beta1", c.beta1);
  require_beta(name, "beta2", c.beta2);
  require_non_negative(name, "eps", c.eps);
  return optim_detail::make_adam(c, name == "adamw");
}

}  // namespace tandem
