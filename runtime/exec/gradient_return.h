// GradientReturn: where a backward's parameter gradients go as it completes them, and when
// whoever waits for one (data parallelism over processes: GradientReady) is told, on every
// kind of plan (Note [where a master lives] in runtime/params/device_parameter_cache.h):
//
//   - a gradient a cpu layer accumulates is the model's own: complete once the backward of
//     the first step that uses it has run on the cpu's lane;
//   - a parameter that GPUs hold: once every replica's gradient is complete, the replicas
//     are all-reduced among the GPUs (queued, no host wait), and it is announced;
//   - any other GPU gradient joins its device's bucket; a full bucket is copied to the host
//     and added to the model's gradient on the cpu's lane while the rest of backward runs.
//
// A parameter's host gradient is complete when its last contribution is (its cpu layers'
// backward, the buckets that carry its GPU gradients): then an event is recorded on the
// cpu's lane, and the parameter is announced once the host sees it reached. The host looks
// after every step it submits, and at the end waits for each in turn, so a bucket of the
// processes' all-reduce starts while the lanes still run the rest of backward. On the cpu
// alone (its lane the calling thread) every event is reached at once: each gradient is
// announced right after the step that completes it.
#pragma once

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "backends/lane.h"
#include "placement/plan.h"
#include "runtime/exec/gradient_ready.h"
#include "runtime/exec/liveness.h"
#include "runtime/exec/schedule.h"
#include "runtime/params/device_parameter_cache.h"

namespace tandem {

/// Not thread-safe; one backward at a time. Keeps references to the schedule and the cache.
class GradientReturn {
 public:
  /// Without `hold_parameters`, no GPU holds a parameter: every gradient goes to the host's.
  GradientReturn(const Schedule& schedule, DeviceParameterCache& cache, bool hold_parameters);

  /// Trainable parameters that only GPUs run, and how many GPUs hold each: what a training
  /// forward asks the cache to hold.
  const std::map<std::string, int>& held_replicas() const { return replica_count_; }

  /// Before a backward: the GPUs' gradient buffers zeroed; who to tell (may be null).
  void begin(const GradientReady* ready);
  /// After the backward of op step `step` was submitted: what it completed goes on.
  void step_done(int step);
  /// Waits for, and announces in order, every gradient whose last contribution was
  /// submitted: what the host does before it waits for the lanes for another reason (memory),
  /// so that no announcement waits behind work that does not produce it.
  void announce_submitted();
  /// After the last step: the buckets left are sent, and every parameter not yet announced
  /// is, in order, as its gradient is reached. What went to the host, for the report.
  DeviceParameterCache::Traffic finish();
  /// A backward that failed: nothing more is announced, nor kept.
  void abandon() noexcept;

 private:
  void send(std::vector<ParameterKey>& bucket);
  /// One contribution to `name`'s host gradient is submitted; announce when it was the last.
  void contributed(const std::string& name);
  void announce_reached();

  /// A bucket is sent once it holds this much (PyTorch's DDP uses 25 MiB; smaller buckets
  /// start the copies earlier, and a copy here costs no launch).
  static constexpr size_t bucket_bytes = size_t{4} << 20;

  const Schedule& schedule_;
  DeviceParameterCache& cache_;
  Lane& cpu_lane_;
  std::vector<ParameterKey> gpu_keys_;                   // GPU gradient buffers, zeroed before backward
  std::map<std::string, int> replica_count_;              // held: how many GPUs hold it
  std::map<std::string, int> contributions_;              // keys that add to it (held: its replicas)
  std::vector<std::vector<ParameterKey>> complete_after_; // op step -> keys complete after its backward
  // during a backward
  const GradientReady* ready_ = nullptr;
  std::map<std::string, int> remaining_;                  // contributions not yet submitted
  std::map<std::string, int> replicas_done_;
  std::map<Device, std::vector<ParameterKey>> buckets_;
  std::map<Device, size_t> bucket_fill_;
  std::deque<std::pair<std::string, DeviceEvent>> unannounced_;
  DeviceParameterCache::Traffic sent_;
};

}  // namespace tandem
