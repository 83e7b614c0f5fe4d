// DeviceParameterCache: the GPU copies of a model's parameters and the GPU buffers their
// gradients accumulate in, shared by every placed executor of a model (inference and
// training), and how those gradients come back to the master on the host: in buckets, on
// each GPU's copy_out lane, through a staging ring (host_staging_ring.h) in memory its
// backend copies into fastest, added on the cpu's lane. See multi_device_training.h for
// where they fit in a training step. Devices are reached through their backends only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "core/touched_rows.h"
#include "core/device.h"
#include "runtime/host_staging_ring.h"

namespace tandem {

class DeviceRegistry;

/// The device copies of a model's parameters and their gradient buffers: at most one of
/// each per (parameter, device). The cpu's are the model's host tensors themselves. Holds
/// references to the host maps and the registry, which must outlive it. Not thread-safe.
class DeviceParameterCache {
 public:
  /// `grad_rows`: the touched rows of each host gradient (core/touched_rows.h).
  DeviceParameterCache(const TensorMap& params, const TensorMap& grads, TouchedRowsMap& grad_rows,
                       DeviceRegistry& registry);
  /// The weight `name` on `device`; a GPU's copy is allocated on first use (naming `context`
  /// when its pool is full) and filled by the next refresh().
  Tensor weight(const std::string& name, Device device, const std::string& context);
  /// Where a kernel on `device` accumulates the gradient of `name`: the model's gradient on
  /// the cpu, else a buffer in the device's pool (allocated on first use: training only).
  Tensor gradient(const std::string& name, Device device, const std::string& context);
  /// The touched rows of the model's gradient `name`, for a cpu kernel that accumulates
  /// into it; null on a GPU (its gradient reaches the host whole, every row marked).
  TouchedRows* gradient_rows(const std::string& name, Device device);
  /// Bytes and copies moved between the host and the GPUs, for the report.
  struct Traffic {
    size_t bytes = 0;
    int64_t copies = 0;
  };
  /// Queues a copy of every weight whose device copy predates `params_version`, on its
  /// GPU's copy_in lane, ahead of the kernels that read it (the compute lane waits for
  /// it); what it queued.
  Traffic refresh(uint64_t params_version);
  /// The model's (host) tensor `name`: the master copy.
  Tensor master(const std::string& name) const;
  /// Marks every device copy of `name` stale: the next refresh() uploads it again.
  void invalidate(const std::string& name);
  /// Zeroes the device gradient buffers of `keys`.
  void zero_gradients(const std::vector<std::pair<std::string, Device>>& keys);
  /// Queues, for each device gradient of `keys`, its copy to the host and its addition to
  /// the model's gradient (on the cpu's lane); what it copied. The copies land in a staging
  /// ring of one device's gradients (host_staging_ring.h): data_parallel replicas would
  /// otherwise pile N copies of the gradients up on the host.
  Traffic add_gradients_to_host(const std::vector<std::pair<std::string, Device>>& keys);

 private:
  struct Entry {
    Tensor host, copy, host_grad, grad;  // host_grad: set with grad, when training asks
    uint64_t version = ~uint64_t{0};
    bool grad_zeroed = false;  // zeroed since the last backward wrote it
  };
  Entry& entry(const std::string& name, Device device, const std::string& context);

  const TensorMap& params_;
  const TensorMap& grads_;
  TouchedRowsMap& grad_rows_;
  DeviceRegistry& registry_;
  std::map<std::pair<std::string, Device>, Entry> entries_;
  std::map<Device, size_t> gradient_bytes_;  // per GPU: its gradient buffers, as the ring counts them
  HostStagingRing staging_;  // where the GPUs' gradients land on the host
  bool staging_allocator_set_ = false;
};

}  // namespace tandem
