// Learning-rate schedules, per optimizer step (docs/training.md).
#include <algorithm>
#include <cmath>
#include <numbers>

#include "runtime/optim/optimizer.h"

namespace tandem {

namespace {

void check_schedule(const ScheduleConfig& s) {
  if (s.name == "constant") return;
  if (s.name == "step") {
    if (s.step_size < 1)
      throw UserError("schedule step: step_size must be >= 1, got " + std::to_string(s.step_size));
    if (!(s.gamma >= 0)) throw UserError("schedule step: gamma must be >= 0, got " + std::to_string(s.gamma));
    return;
  }
  if (s.name == "cosine") {
    if (s.warmup_steps < 0)
      throw UserError("schedule cosine: warmup_steps must be >= 0, got " + std::to_string(s.warmup_steps));
    if (s.total_steps < 0)
      throw UserError("schedule cosine: total_steps must be >= 0 (0: the run's total), got " +
                      std::to_string(s.total_steps));
    if (!(s.min_lr >= 0)) throw UserError("schedule cosine: min_lr must be >= 0, got " + std::to_string(s.min_lr));
    return;
  }
  throw UserError("unknown schedule '" + s.name + "' (expected constant, step or cosine)");
}

}  // namespace

double scheduled_lr(const ScheduleConfig& s, double base_lr, int64_t step, int64_t total_steps) {
  check_schedule(s);
  TANDEM_ASSERT(step >= 0, "scheduled_lr: step " + std::to_string(step));
  if (s.name == "step") return base_lr * std::pow(s.gamma, static_cast<double>(step / s.step_size));
  if (s.name == "cosine") {
    if (step < s.warmup_steps) return base_lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
    int64_t total = s.total_steps > 0 ? s.total_steps : total_steps;
    double progress = static_cast<double>(step - s.warmup_steps) /
                      static_cast<double>(std::max<int64_t>(1, total - s.warmup_steps));
    return s.min_lr + (base_lr - s.min_lr) * (1 + std::cos(std::numbers::pi * std::min(1.0, progress))) / 2;
  }
  return base_lr;
}

}  // namespace tandem
