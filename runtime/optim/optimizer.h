// Optimizers with torch.optim's update formulas, learning-rate schedules and gradient
// clipping. See docs/training.md for the exact formulas.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/touched_rows.h"
#include "graph/training_spec.h"

namespace tandem {

// OptimizerConfig and ScheduleConfig are plain settings read from a model file's
// `train:` section: they live with the graph.

/// Holds per-parameter state (momentum buffers, moments). Not thread-safe.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  /// One update of every parameter from its gradient with learning rate `lr`.
  /// params[i] and grads[i] have the same shape; the order must not change between calls.
  virtual void step(std::span<Tensor> params, std::span<const Tensor> grads, double lr) = 0;
  /// (optional) The same update, told that grads[i] is zero outside the rows rows[i] lists
  /// (a null entry, or one with all(): anywhere; core/touched_rows.h). An optimizer whose
  /// update leaves a parameter with a zero gradient unchanged updates only those rows, to
  /// the bits of step(): SGD without momentum and weight decay, torch's sparse tables.
  /// Default: step(), exact all the same (momentum and moments move every row).
  virtual void step_rows(std::span<Tensor> params, std::span<const Tensor> grads, std::span<TouchedRows* const> rows,
                         double lr) {
    step(params, grads, lr);
  }
  /// Whether step_rows() takes row gradients (core/touched_rows.h, Note [row gradient]):
  /// grads[i] undefined, and rows[i] holding the gradient's rows. Only an update that is
  /// the identity where the gradient is zero can: SGD without momentum and weight decay.
  /// (torch's SGD refuses weight decay on sparse gradients, its Adam refuses them all.)
  virtual bool takes_row_gradients() const { return false; }
  /// The state as tensors named "<names[i]>.<buffer>" (momentum_buffer, exp_avg,
  /// exp_avg_sq) plus "step" (int64 [1]); empty before the first step.
  virtual TensorMap state(std::span<const std::string> names) const = 0;
  /// Restores what state() returned; UserError naming a missing or mis-shaped tensor.
  virtual void load_state(const TensorMap& state, std::span<const std::string> names,
                          std::span<const Tensor> params) = 0;
  int64_t steps_taken() const { return steps_; }

 protected:
  int64_t steps_ = 0;
};

/// UserError for an unknown name or a bad value (negative lr, betas outside [0, 1)).
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config);

/// The learning rate at optimizer step `step` (from 0) of a run of `total_steps`.
double scheduled_lr(const ScheduleConfig& schedule, double base_lr, int64_t step, int64_t total_steps);

/// torch.nn.utils.clip_grad_norm_: scales all gradients by max_norm / (norm + 1e-6) when
/// that is below 1. Returns the global L2 norm before clipping. With `rows` (one entry per
/// gradient, as Optimizer::step_rows), a gradient zero outside its rows is read and scaled
/// only where they are, and the norm is the dense one to the bit.
double clip_grad_norm(std::span<Tensor> grads, double max_norm, std::span<TouchedRows* const> rows = {});

}  // namespace tandem
