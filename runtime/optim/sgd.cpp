// SGD with momentum, dampening, Nesterov and L2 weight decay: torch.optim.SGD's
// single-tensor update (torch 1.13), operation for operation (backends/optimizer_update.h).
#include "backends/optimizer_update.h"
#include "runtime/optim/optimizer_impl.h"

namespace tandem::optim_detail {

namespace {

class Sgd final : public BufferedOptimizer {
 public:
  explicit Sgd(const OptimizerConfig& config)
      : BufferedOptimizer("sgd", config.momentum != 0 ? std::vector<std::string>{"momentum_buffer"}
                                                      : std::vector<std::string>{}),
        config_(config) {}

  void step(std::span<Tensor> params, std::span<const Tensor> grads, double lr) override {
    for (const Tensor& g : grads) TANDEM_ASSERT(g.defined(), "sgd step: a row gradient goes to step_rows()");
    bool first = begin_step(params, grads);
    const SgdScalars s = sgd_scalars(config_, lr);
    for (size_t i = 0; i < params.size(); ++i) {
      devices_->sgd(s, params[i], grads[i], buffers_.empty() ? Tensor() : buffers_[0][i], first);
    }
  }

  // Without momentum and weight decay, p = fma(g, -lr, p) is p itself where g is +0 (as
  // zeroing writes it), so the rows nobody touched can be skipped: the bits of step().
  bool takes_row_gradients() const override { return config_.momentum == 0 && config_.weight_decay == 0; }

  void step_rows(std::span<Tensor> params, std::span<const Tensor> grads, std::span<TouchedRows* const> rows,
                 double lr) override {
    if (!takes_row_gradients()) return step(params, grads, lr);
    TANDEM_ASSERT(rows.size() == params.size(), "sgd: one touched-rows entry per parameter");
    bool first = begin_step(params, grads);
    const SgdScalars s = sgd_scalars(config_, lr);
    for (size_t i = 0; i < params.size(); ++i) {
      if (updated_early(i)) continue;
      TouchedRows* touched = rows[i];
      if (devices_->holds(params[i]) || params[i].device() != Device::cpu() || !touched || touched->all() ||
          touched->rows() <= 0) {
        if (grads[i].defined()) {  // whole (GPUs hold a parameter whole: its rows are not the host's)
          devices_->sgd(s, params[i], grads[i], Tensor(), first);
          continue;
        }
      }
      // the listed rows (a row gradient's, or those a dense gradient may hold non-zero)
      for_each_updated_row(kind_, *devices_, params[i], grads[i], touched, /*lazy=*/true,
                           [&](int64_t, float* p, const float* g, int64_t width) {
                             plain_sgd_row(s.neg_lr, p, g, width);
                           });
    }
    end_early();
  }

  // p = fma(g, -lr, p), a row's update, is that of each entry in turn where one entry
  // touched the row (Note [a table stepped in its backward])
  std::optional<float> table_step(double lr) const override {
    if (!takes_row_gradients()) return std::nullopt;
    return sgd_scalars(config_, lr).neg_lr;
  }

  // a table's row gradient only (update_early()): step_rows() above makes the other updates
  void update_parameter(size_t, const Tensor& param, const Tensor& grad, TouchedRows* rows, double lr, int64_t,
                        ParameterDevices& devices) override {
    TANDEM_ASSERT(!grad.defined() && rows && rows->holds_values(), "sgd: update_parameter() of a row gradient only");
    const float neg_lr = sgd_scalars(config_, lr).neg_lr;
    for_each_updated_row(kind_, devices, param, Tensor(), rows, /*lazy=*/true,
                         [&](int64_t, float* p, const float* g, int64_t width) { plain_sgd_row(neg_lr, p, g, width); });
  }

 private:
  OptimizerConfig config_;
};

}  // namespace

std::unique_ptr<Optimizer> make_sgd(const OptimizerConfig& config) { return std::make_unique<Sgd>(config); }

}  // namespace tandem::optim_detail
