// Private to runtime/optim: the state bookkeeping SGD and Adam share, and their factories.
#pragma once

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <span>
#include <string>
#include <vector>

#include "backends/optimizer_update.h"
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

  /// Parameter i's update at optimizer step `step` (counted from 1), from its gradient
  /// `grad` or, undefined, its row gradient `rows`, through `devices`: the one update that
  /// step_each() makes of each parameter, and update_early() of a table's.
  virtual void update_parameter(size_t i, const Tensor& param, const Tensor& grad, TouchedRows* rows, double lr,
                                int64_t step, ParameterDevices& devices) {
    throw std::logic_error(kind_ + " does not update a table in its backward");
  }
  /// A step_rows() that is update_parameter() of each parameter but those update_early()
  /// updated.
  void step_each(std::span<Tensor> params, std::span<const Tensor> grads, std::span<TouchedRows* const> rows,
                 double lr);

  /// Note [a table updated in its backward] (optimizer.h), for an optimizer that takes row
  /// gradients.
  void prepare_early(std::span<Tensor> params) override;
  void update_early(std::span<Tensor> params, size_t i, TouchedRows& rows, double lr,
                    ParameterDevices& devices) override;
  void stepped_early(size_t i) override;
  /// Whether update_early() updated parameter i since the last step: step_rows() then
  /// leaves it, and calls end_early() when done.
  bool updated_early(size_t i) const { return i < early_.size() && early_[i] != 0; }
  void end_early() { std::fill(early_.begin(), early_.end(), char{0}); }

  /// The shape of buffer `b` of `param`: the parameter's own by default (rowwise_adagrad's
  /// holds one value per row).
  virtual Shape buffer_shape(size_t b, const Tensor& param) const { return param.shape(); }
  /// The value buffer `b` starts at: 0 by default (Adagrad's initial_accumulator_value).
  virtual float buffer_start(size_t b) const { return 0.0f; }
  /// The state stays in host memory whatever device a parameter is on: for the optimizers
  /// whose arithmetic runs on the host alone (they refuse a parameter a GPU holds).
  bool host_state_ = false;

  std::string kind_;
  std::vector<std::string> buffer_names_;
  std::vector<std::vector<Tensor>> buffers_;  // [buffer][param]; empty before the first step
  std::vector<char> early_;                   // [param]: update_early() updated it this step

 private:
  /// The buffers, zeroed (or at buffer_start()), once: by the first step or prepare_early().
  void allocate_state(std::span<Tensor> params);
};

/// Note [rows ahead]: the rows a batch looked up lie anywhere in a table of megabytes, so
/// each costs the update a trip to memory that the hardware's prefetcher cannot foresee.
/// Asking for the row kRowsAhead ahead of the one being updated (its parameter and its
/// gradient row) keeps that many trips under way at once.
inline constexpr int64_t kRowsAhead = 8;
inline void prefetch_row(float* param_row, const float* grad_row, int64_t width) {
  for (int64_t k = 0; k < width; k += 16) {  // a 64-byte line a time
    __builtin_prefetch(param_row + k, /*write=*/1);
    __builtin_prefetch(grad_row + k, /*write=*/0);
  }
}

/// The rows of parameter `p` that an update visits, each with its gradient: the rows a row
/// gradient holds (`rows->holds_values()`); with a dense gradient `g`, the rows `rows` lists
/// when `lazy` (the update leaves a row whose gradient is zero as it is) and it lists them,
/// else every row. A row is a slice along the first dimension (a 0-d tensor: one row).
/// Calls f(row, param row, gradient row, width) once a row, over the threads
/// `devices.host_threads()` names: each row's update must be its own (it writes that row of
/// the parameter and of its state only), so the bits do not depend on the threads. Host
/// float32 tensors only: UserError, naming `kind`, for a parameter a GPU holds.
template <class F>
void for_each_updated_row(const std::string& kind, ParameterDevices& devices, const Tensor& p, const Tensor& g,
                          TouchedRows* rows, bool lazy, F&& f) {
  if (devices.holds(p) || p.device() != Device::cpu())
    throw UserError("optimizer " + kind + " updates parameters in host memory only, and a parameter of shape " +
                    shape_str(p.shape()) + " is trained on a GPU; give the layers placed on GPUs sgd, adam or " +
                    "adamw in train: optimizer_groups (docs/training.md)");
  float* param = p.data<float>();
  const HostThreads threads = devices.host_threads();
  if (rows && rows->holds_values()) {
    // the held rows in the order of their values, which are then read front to back
    const int64_t width = rows->width();
    const std::span<const int64_t> held = rows->row_in_slot();
    const TouchedRows& values = *rows;
    for_rows_host(static_cast<int64_t>(held.size()), width, threads, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) {
        if (k + kRowsAhead < end)
          prefetch_row(param + held[static_cast<size_t>(k + kRowsAhead)] * width, values.values_in_slot(k + kRowsAhead),
                       width);
        const int64_t r = held[static_cast<size_t>(k)];
        f(r, param + r * width, values.values_in_slot(k), width);
      }
    });
    return;
  }
  const int64_t count = p.dim() >= 1 ? p.size(0) : 1;
  const int64_t width = count > 0 ? p.numel() / count : 0;
  const float* grad = g.data<float>();
  if (lazy && rows && !rows->all() && rows->rows() == count) {
    const std::span<const int64_t> listed = rows->list();
    for_rows_host(static_cast<int64_t>(listed.size()), width, threads, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) {
        const int64_t r = listed[static_cast<size_t>(k)];
        f(r, param + r * width, grad + r * width, width);
      }
    });
    return;
  }
  for_rows_host(count, width, threads, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) f(r, param + r * width, grad + r * width, width);
  });
}

std::unique_ptr<Optimizer> make_sgd(const OptimizerConfig& config);
/// Adam (`decoupled` false: weight decay as L2 on the gradient) or AdamW (`decoupled` true).
std::unique_ptr<Optimizer> make_adam(const OptimizerConfig& config, bool decoupled);
/// torch.optim.Adagrad (`rowwise` false) or torchrec's RowWiseAdagrad (`rowwise` true).
std::unique_ptr<Optimizer> make_adagrad(const OptimizerConfig& config, bool rowwise);
/// torch.optim.SparseAdam: lazy moments, only the rows a row gradient holds.
std::unique_ptr<Optimizer> make_sparse_adam(const OptimizerConfig& config);

}  // namespace tandem::optim_detail
