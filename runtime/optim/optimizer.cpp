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
  if (name != "sgd" && name != "adam" && name != "adamw" && name != "adagrad" && name != "rowwise_adagrad" &&
      name != "sparse_adam")
    throw UserError("unknown optimizer '" + name +
                    "' (expected sgd, adam, adamw, adagrad, rowwise_adagrad or sparse_adam)");
  require_non_negative(name, "lr", c.lr);
  require_non_negative(name, "weight_decay", c.weight_decay);
  if (name == "adagrad" || name == "rowwise_adagrad") {
    require_non_negative(name, "lr_decay", c.lr_decay);
    require_non_negative(name, "initial_accumulator_value", c.initial_accumulator_value);
    require_non_negative(name, "eps", c.eps);
    if (name == "rowwise_adagrad" && c.weight_decay != 0)
      throw UserError("optimizer rowwise_adagrad: weight_decay is not supported (it would move every row)");
    return optim_detail::make_adagrad(c, name == "rowwise_adagrad");
  }
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
  if (name == "sparse_adam") {
    if (c.weight_decay != 0)
      throw UserError("optimizer sparse_adam: weight_decay is not supported (torch.optim.SparseAdam has none)");
    return optim_detail::make_sparse_adam(c);
  }
  return optim_detail::make_adam(c, name == "adamw");
}

}  // namespace tandem
