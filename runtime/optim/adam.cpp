// Adam (L2 weight decay on the gradient) and AdamW (decoupled weight decay):
// torch.optim.Adam's and AdamW's single-tensor updates (torch 1.13, amsgrad off),
// operation for operation (backends/optimizer_update.h).
#include "runtime/optim/optimizer_impl.h"

namespace tandem::optim_detail {

namespace {

class Adam final : public BufferedOptimizer {
 public:
  Adam(const OptimizerConfig& config, bool decoupled)
      : BufferedOptimizer(decoupled ? "adamw" : "adam", {"exp_avg", "exp_avg_sq"}),
        config_(config),
        decoupled_(decoupled) {}

  void step(std::span<Tensor> params, std::span<const Tensor> grads, double lr) override {
    begin_step(params, grads);  // the zeroed moments need no first-step case
    AdamScalars s = adam_scalars(config_, decoupled_, lr, steps_);
    for (size_t i = 0; i < params.size(); ++i)
      devices_->adam(s, params[i], grads[i], buffers_[0][i], buffers_[1][i]);
  }

 private:
  OptimizerConfig config_;
  bool decoupled_;
};

}  // namespace

std::unique_ptr<Optimizer> make_adam(const OptimizerConfig& config, bool decoupled) {
  return std::make_unique<Adam>(config, decoupled);
}

}  // namespace tandem::optim_detail
