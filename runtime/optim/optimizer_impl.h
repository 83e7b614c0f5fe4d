// Private to runtime/optim: the state bookkeeping SGD and Adam share, and their factories.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/optim/optimizer.h"

namespace tandem::optim_detail {

/// An optimizer whose state is a step count plus buffers shaped like the parameters
/// (buffer b of parameter i is buffers_[b][i]). Implements state() and load_state().
class BufferedOptimizer : public Optimizer {
 public:
  TensorMap state(std::span<const std::string> names) const override;
  void load_state(const TensorMap& state, std::span<const std::string> names,
                  std::span<const Tensor> params) override;

 protected:
  /// `kind` names the optimizer in messages; `buffer_names` are the state suffixes.
  BufferedOptimizer(std::string kind, std::vector<std::string> buffer_names);

  /// Checks the arguments of step() (host float32, equal shapes, same parameter count as
  /// before) and, on the first step, allocates the buffers (zeroed). Returns true on the
  /// first step, when the buffers hold no history yet.
  bool begin_step(std::span<Tensor> params, std::span<const Tensor> grads);

  std::string kind_;
  std::vector<std::string> buffer_names_;
  std::vector<std::vector<Tensor>> buffers_;  // [buffer][param]; empty before the first step
};

std::unique_ptr<Optimizer> make_sgd(const OptimizerConfig& config);
/// Adam (`decoupled` false: weight decay as L2 on the gradient) or AdamW (`decoupled` true).
std::unique_ptr<Optimizer> make_adam(const OptimizerConfig& config, bool decoupled);

}  // namespace tandem::optim_detail
