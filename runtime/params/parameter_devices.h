// The ParameterDevices of placed training (runtime/optim/optimizer.h). The optimizer keeps
// working on the host's tensors; for a parameter that GPUs hold (Note [where a master
// lives] in device_parameter_cache.h), its arithmetic runs on every replica instead,
// through that GPU's backend, each replica with its own copy of the optimizer state: a
// state tensor the optimizer allocates for such a parameter is a host tensor standing for
// replicas on the GPUs (zeros_like), brought to the host when read (to_host). A GPU's
// update is queued on its compute lane: the host does not wait for it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "runtime/params/device_parameter_cache.h"
#include "runtime/devices/device_registry.h"
#include "runtime/optim/optimizer.h"

namespace tandem {

class PlacedParameterDevices final : public ParameterDevices {
 public:
  /// `registry` and `cache` must outlive this.
  PlacedParameterDevices(DeviceRegistry& registry, DeviceParameterCache& cache) : registry_(registry), cache_(cache) {}

  Tensor zeros_like(const Tensor& param) override;
  void sgd(const optim_detail::SgdScalars& s, const Tensor& p, const Tensor& g, const Tensor& buf, bool first) override;
  void adam(const optim_detail::AdamScalars& s, const Tensor& p, const Tensor& g, const Tensor& m,
            const Tensor& v) override;
  /// Waits for a GPU's sum.
  double sum_of_squares(const Tensor& g) override;
  void scale(const Tensor& g, float factor) override;
  /// Each device checks the replicas it holds in one call (Backend::scale_checking_finite).
  bool scale_checking_finite(std::span<const Tensor> grads, float factor) override;
  /// Waits for a GPU's copy.
  Tensor to_host(const Tensor& t) override;
  void from_host(const Tensor& t, const Tensor& from) override;
  bool holds(const Tensor& t) override { return !cache_.held_name_of(t).empty(); }

  /// Brings every state tensor's host copy up to date from its first replica (before the
  /// GPUs go away), and forgets the replicas.
  void sync_state_to_host();

 private:
  using Replicas = std::vector<DeviceParameterCache::Replica>;
  /// The replicas of state tensor `state` for a parameter held as `held`: made (from the
  /// host's values) when the parameter came to the GPUs after the state was.
  std::vector<Tensor>& state_on(const Tensor& state, const Replicas& held);
  /// A state tensor's replicas brought back to the host's tensor, for a parameter the GPUs
  /// no longer hold.
  void pull(const Tensor& state);
  void download(Device device, const Tensor& from, const Tensor& host);
  /// Runs `work` (the host's arithmetic, for the parameters no GPU holds) on the cpu's
  /// compute lane, whose thread's OpenMP team spans the cores, and waits for it: the team
  /// where the cpu's kernels run, not a second one beside it (Note [which threads update] in
  /// backends/optimizer_update.h).
  void on_cpu_lane(const std::function<void(ParameterDevices& host)>& work);

  DeviceRegistry& registry_;
  DeviceParameterCache& cache_;
  std::map<const Storage*, std::pair<Tensor, std::vector<Tensor>>> state_;  // host tensor -> (it, replicas)
};

}  // namespace tandem
