// Model's multi-device inference: forward() on a place() plan over the cpu and simulated
// GPUs (Model::use_devices). Apart from model.cpp so that the single-device path stays as
// it was.
#include "runtime/device_registry.h"
#include "runtime/model.h"
#include "runtime/multi_device_forward.h"

namespace tandem {

void Model::use_devices(std::shared_ptr<DeviceRegistry> registry, PlacementPolicy policy) {
  TANDEM_ASSERT(registry != nullptr, "use_devices without a registry");
  last_placed_ = nullptr;
  placed_.clear();  // compiled for the old devices: drain their queues while they exist
  registry_ = std::move(registry);
  policy_ = std::move(policy);
  policy_.training = false;
}

MultiDeviceForward& Model::placed_for(const Bindings& bindings) {
  auto it = placed_.find(bindings);
  if (it == placed_.end()) {
    PlacementPolicy policy = policy_;
    policy.bindings = bindings;
    if (auto batch = bindings.find("batch"); batch != bindings.end()) policy.batch = batch->second;
    Plan plan = place(*graph_, registry_->inventory(), policy);
    auto compiled = std::make_unique<MultiDeviceForward>(*graph_, plan, bindings, *cpu_, params_, *registry_, params_version_);
    it = placed_.emplace(bindings, std::move(compiled)).first;
  }
  last_placed_ = it->second.get();
  return *last_placed_;
}

std::vector<DeviceReport> Model::device_report() const {
  return last_placed_ ? last_placed_->report() : std::vector<DeviceReport>{};
}

const Plan& Model::last_plan() const { return last_placed_ ? last_placed_->plan() : plan_; }

int64_t Model::primitives_created() const {
  int64_t n = cpu_->primitives_created();
  for (const auto& [bindings, compiled] : placed_) n += compiled->primitives_created();
  return n;
}

}  // namespace tandem
