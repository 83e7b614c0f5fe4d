#include "runtime/optim/loss_scaler.h"

#include <bit>
#include <cmath>
#include <cstdint>

#include "core/error.h"

namespace tandem {
namespace {

/// x[0, n) *= factor; whether every x was finite before. An inf or NaN is a float whose
/// exponent bits are all ones; testing them with integer operations and no branch keeps
/// the loop vectorized.
bool unscale_host(float* x, int64_t n, float factor) {
  constexpr uint32_t kExponent = 0x7f800000u;
  uint32_t not_finite = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    not_finite |= static_cast<uint32_t>((std::bit_cast<uint32_t>(v) & kExponent) == kExponent);
    x[i] = v * factor;
  }
  return not_finite == 0;
}

}  // namespace

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
  bool finite = true;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) {  // a row gradient: its rows hold every value it has
      for (int64_t r : rows[i]->list()) finite &= unscale_host(rows[i]->values_of(r), rows[i]->width(), inv_scale);
      continue;
    }
    if (grads[i].device() != Device::cpu() || devices.holds(grads[i])) {
      // a sum of squares in double is finite exactly when every value is (a float's
      // square stays below 1.2e77)
      finite &= std::isfinite(devices.sum_of_squares(grads[i]));
      devices.scale(grads[i], inv_scale);
      continue;
    }
    float* g = grads[i].data<float>();
    const TouchedRows* touched = rows.empty() ? nullptr : rows[i];
    if (touched && !touched->all() && touched->rows() > 0) {  // zero outside its rows, and zero stays zero
      const int64_t width = grads[i].numel() / touched->rows();
      for (int64_t r : touched->list()) finite &= unscale_host(g + r * width, width, inv_scale);
    } else {
      finite &= unscale_host(g, grads[i].numel(), inv_scale);
    }
  }
  return finite;
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
