#include "runtime/optim/loss_scaler.h"

#include <cmath>

#include "core/error.h"

namespace tandem {

LossScaler::LossScaler(const LossScalingConfig& config)
    : config_(config), scale_(static_cast<float>(config.init_scale)) {
  TANDEM_ASSERT(scale_ > 0 && std::isfinite(scale_) && config.growth_factor > 1 && config.backoff_factor > 0 &&
                    config.backoff_factor < 1 && config.growth_interval > 0,
                "loss scaler: bad configuration");
}

bool LossScaler::unscale_and_check(std::span<Tensor> grads, std::span<TouchedRows* const> rows,
                                   ParameterDevices& devices) const {
  // GradScaler.unscale_: inv_scale = self._scale.double().reciprocal().float()
  const float inv_scale = static_cast<float>(1.0 / static_cast<double>(scale_));
  return scale_gradients_checking_finite(grads, inv_scale, rows, devices);
}

void LossScaler::update(bool found_inf) {
  // torch's amp_update_scale_cpu_kernel / amp_update_scale_cuda_kernel, with its double
  // factors applied to the float scale and rounded once
  if (found_inf) {
    scale_ = static_cast<float>(static_cast<double>(scale_) * config_.backoff_factor);
    growth_tracker_ = 0;
    return;
  }
  const int64_t successful = growth_tracker_ + 1;
  if (successful == config_.growth_interval) {
    const float grown = static_cast<float>(static_cast<double>(scale_) * config_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;  // never past fp32's range to inf
    growth_tracker_ = 0;
  } else {
    growth_tracker_ = successful;
  }
}

void LossScaler::restore(float scale, int64_t growth_tracker) {
  scale_ = scale;
  growth_tracker_ = growth_tracker;
}

}  // namespace tandem
