#include "runtime/exec/gradient_return.h"

#include <algorithm>

namespace tandem {

GradientReturn::GradientReturn(const Schedule& schedule, DeviceParameterCache& cache, bool hold_parameters)
    : schedule_(schedule), cache_(cache), cpu_lane_(*schedule.devices[0]->compute) {
  std::vector<ParameterKey> keys;
  std::map<std::string, bool> on_cpu;
  for (int index : schedule.step_action) {
    const ScheduleAction& a = schedule.actions[index];
    const Device device = schedule.devices[a.device]->device;
    for (const ParamSpec& p : a.node->params) {
      if (!p.trainable) continue;
      ParameterKey key{p.name, device};
      if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
      keys.push_back(key);
      if (device != Device::cpu()) gpu_keys_.push_back(key);
      on_cpu[p.name] = on_cpu[p.name] || device == Device::cpu();
    }
  }
  // A trainable parameter that every layer using it runs on GPUs is held by them.
  if (hold_parameters)
    for (const ParameterKey& key : gpu_keys_)
      if (!on_cpu[key.first]) ++replica_count_[key.first];
  for (const ParameterKey& key : keys) ++contributions_[key.first];
  complete_after_ = gradients_complete_after(schedule, keys);
}

void GradientReturn::begin(const GradientReady* ready) {
  ready_ = ready && *ready ? ready : nullptr;
  remaining_ = contributions_;
  std::erase_if(remaining_, [&](const auto& entry) { return cache_.held(entry.first); });
  replicas_done_.clear();
  buckets_.clear();
  bucket_fill_.clear();
  unannounced_.clear();
  sent_ = {};
  cache_.zero_gradients(gpu_keys_);
}

void GradientReturn::contributed(const std::string& name) {
  if (--remaining_.at(name) > 0 || !ready_) return;
  unannounced_.emplace_back(name, cpu_lane_.record());  // behind the cpu lane's additions
}

void GradientReturn::send(std::vector<ParameterKey>& bucket) {
  if (bucket.empty()) return;
  sent_ += cache_.add_gradients_to_host(bucket);
  for (const ParameterKey& key : bucket) contributed(key.first);
  bucket.clear();
}

void GradientReturn::announce_reached() {
  while (!unannounced_.empty() && unannounced_.front().second.done()) {
    (*ready_)(unannounced_.front().first);
    unannounced_.pop_front();
  }
}

void GradientReturn::step_done(int step) {
  for (const ParameterKey& key : complete_after_[step]) {
    const auto& [name, device] = key;
    if (cache_.held(name)) {  // all-reduced among the GPUs that hold it, then announced
      if (++replicas_done_[name] == contributions_.at(name)) {  // every replica's
        cache_.all_reduce_gradients(name);
        if (ready_) unannounced_.emplace_back(name, DeviceEvent());  // over processes: queued behind the sum
      }
      continue;
    }
    if (device == Device::cpu()) {
      contributed(name);
      continue;
    }
    std::vector<ParameterKey>& bucket = buckets_[device];
    bucket.push_back(key);
    bucket_fill_[device] += cache_.gradient(name, device, "").nbytes();
    if (bucket_fill_[device] >= bucket_bytes) {
      send(bucket);
      bucket_fill_[device] = 0;
    }
  }
  if (ready_) announce_reached();
}

void GradientReturn::announce_submitted() {
  if (!ready_) return;
  for (; !unannounced_.empty(); unannounced_.pop_front()) {
    unannounced_.front().second.wait();  // rethrows a failed lane's error
    (*ready_)(unannounced_.front().first);
  }
}

void GradientReturn::abandon() noexcept {
  ready_ = nullptr;
  unannounced_.clear();
  buckets_.clear();
}

DeviceParameterCache::Traffic GradientReturn::finish() {
  for (auto& [device, bucket] : buckets_) send(bucket);
  announce_submitted();
  ready_ = nullptr;  // the caller's, valid during this backward only
  return sent_;
}

}  // namespace tandem
