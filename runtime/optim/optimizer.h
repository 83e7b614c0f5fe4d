// Optimizers with torch.optim's update formulas, learning-rate schedules and gradient
// clipping. See docs/training.md for the exact formulas.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/touched_rows.h"
#include "backends/optimizer_update.h"
#include "backends/update_scalars.h"
#include "graph/training_spec.h"

namespace tandem {

// OptimizerConfig and ScheduleConfig are plain settings read from a model file's
// `train:` section: they live with the graph.

/// Where an optimizer's arithmetic runs for each parameter: on the host by default; placed
/// training keeps a GPU-only parameter's master copy, its gradient and its optimizer state
/// on that GPU, and updates it there (runtime/params/parameter_devices.h). Each call takes the
/// tensors where they are; a tensor's device says which device does the work.
class ParameterDevices {
 public:
  virtual ~ParameterDevices() = default;
  /// A zeroed float32 tensor shaped like `param`, on its device (optimizer state).
  virtual Tensor zeros_like(const Tensor& param) = 0;
  /// The updates of backends/optimizer_update.h on `p`'s device (`buf` may be undefined).
  virtual void sgd(const optim_detail::SgdScalars& s, const Tensor& p, const Tensor& g, const Tensor& buf,
                   bool first) = 0;
  virtual void adam(const optim_detail::AdamScalars& s, const Tensor& p, const Tensor& g, const Tensor& m,
                    const Tensor& v) = 0;
  /// The sum of squares of `g` in double (the host's bits on every device).
  virtual double sum_of_squares(const Tensor& g) = 0;
  /// g *= factor.
  virtual void scale(const Tensor& g, float factor) = 0;
  /// Each g *= factor, and whether every value was finite before (fp16 loss scaling's
  /// check). Default: sum_of_squares, then scale, for each.
  virtual bool scale_checking_finite(std::span<const Tensor> grads, float factor);
  /// A host copy of `t` as the work queued so far leaves it.
  virtual Tensor to_host(const Tensor& t) = 0;
  /// `t` (on any device) takes the values of host tensor `from`.
  virtual void from_host(const Tensor& t, const Tensor& from) = 0;
  /// Whether the host tensor `t` (a parameter or its gradient) only stands for copies on
  /// devices that do its arithmetic: then it is updated, summed and scaled whole through
  /// these calls, never by rows on the host. Default: no.
  virtual bool holds(const Tensor& t) { return false; }
  /// Who runs an update of host rows (an optimizer's own loops over a table's rows):
  /// the calling thread alone by default (Note [which threads update] in
  /// backends/optimizer_update.h).
  virtual HostThreads host_threads() const { return HostThreads::one; }
};

/// The host's: every tensor in host memory; the loops of backends/optimizer_update.h, run
/// by `threads` (Note [which threads update] there). The default, the calling thread's
/// team, is for the thread that runs the cpu's kernels: the model on the cpu alone.
ParameterDevices& host_parameter_devices(HostThreads threads = HostThreads::team);

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
  /// Note [a table updated in its backward]: a row gradient is its table's alone, so its
  /// update needs nothing else of the step and can run as soon as the table's backward has
  /// written it, on the lane that ran that backward, while the rest of backward goes on.
  /// prepare_early() readies the state (the first step allocates it) on the host before
  /// that backward is submitted; update_early() then updates params[i] from its row
  /// gradient `rows` as the next step_rows() would at `lr` (the same arithmetic on the
  /// same values: the same bits), through `devices`, and that step_rows() leaves it as it
  /// is. Only where takes_row_gradients() and `rows` holds values. update_early() may run
  /// on a lane's thread: it writes params[i], its state and its own mark only, and the host
  /// waits for the lane before the step.
  virtual void prepare_early(std::span<Tensor> params) {
    throw std::logic_error("this optimizer does not update a table in its backward");
  }
  virtual void update_early(std::span<Tensor> params, size_t i, TouchedRows& rows, double lr,
                            ParameterDevices& devices) {
    throw std::logic_error("this optimizer does not update a table in its backward");
  }
  /// Note [a table stepped in its backward] (runtime/exec/table_updates.h): the factor by
  /// which a table's backward can add each entry's gradient row straight into the table at
  /// `lr`, where the update is that linear and stateless (plain SGD: -lr); else none. After
  /// prepare_early(), stepped_early(i) records that params[i]'s backward did so: the next
  /// step_rows() leaves it as it is.
  virtual std::optional<float> table_step(double lr) const { return std::nullopt; }
  virtual void stepped_early(size_t i) {
    throw std::logic_error("this optimizer does not step a table in its backward");
  }
  /// The state as tensors named "<names[i]>.<buffer>" (momentum_buffer, exp_avg,
  /// exp_avg_sq) plus "step" (int64 [1]); empty before the first step.
  virtual TensorMap state(std::span<const std::string> names) const = 0;
  /// Restores what state() returned; UserError naming a missing or mis-shaped tensor.
  virtual void load_state(const TensorMap& state, std::span<const std::string> names,
                          std::span<const Tensor> params) = 0;
  int64_t steps_taken() const { return steps_; }
  /// Where the next steps run their arithmetic (see ParameterDevices); the host's until
  /// set. Must outlive the optimizer's use of it.
  void set_devices(ParameterDevices& devices) { devices_ = &devices; }

 protected:
  int64_t steps_ = 0;
  ParameterDevices* devices_ = &host_parameter_devices();
};

/// UserError for an unknown name or a bad value (negative lr, betas outside [0, 1)).
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config);

/// The learning rate at optimizer step `step` (from 0) of a run of `total_steps`.
double scheduled_lr(const ScheduleConfig& schedule, double base_lr, int64_t step, int64_t total_steps);

/// torch.nn.utils.clip_grad_norm_: scales all gradients by max_norm / (norm + 1e-6) when
/// that is below 1. Returns the global L2 norm before clipping. With `rows` (one entry per
/// gradient, as Optimizer::step_rows), a gradient zero outside its rows is read and scaled
/// only where they are, and the norm is the dense one to the bit. A gradient on a device
/// is summed and scaled there, through `devices`.
double clip_grad_norm(std::span<Tensor> grads, double max_norm, std::span<TouchedRows* const> rows = {},
                      ParameterDevices& devices = host_parameter_devices());

/// grads[i] *= factor: the scaling of clip_grad_norm, and of gradient accumulation's
/// micro-batches. `rows` as there; a gradient on a device is scaled there.
void scale_gradients(std::span<Tensor> grads, float factor, std::span<TouchedRows* const> rows = {},
                     ParameterDevices& devices = host_parameter_devices());
/// scale_gradients, and whether every value was finite before it (the check of fp16 loss
/// scaling's unscale: torch._amp_foreach_non_finite_check_and_unscale_).
bool scale_gradients_checking_finite(std::span<Tensor> grads, float factor, std::span<TouchedRows* const> rows,
                                     ParameterDevices& devices);

}  // namespace tandem
