// DeviceParameterCache: the GPU copies of a model's parameters and the GPU buffers their
// gradients accumulate in, shared by every executor of a model (inference and
// training), and where each parameter's master copy is.
//
// Note [where a master lives]: a parameter starts with its master copy on the host (the
// model's tensor). Its GPU copies are refreshed from the host when the host changes, and
// their gradients come back to the host's in buckets, on each GPU's copy_out lane, through
// a staging ring (host_staging_ring.h) in memory its backend copies into fastest, added on
// the cpu's lane; the host's optimizer updates it.
//
// A parameter that every layer of a training plan runs on GPUs is held by those GPUs
// instead (hold), as PyTorch's DistributedDataParallel holds a module: each GPU that has a
// copy keeps it as a master, with its own gradient and optimizer state; after backward the
// replicas' gradients are all-reduced among the GPUs (all_reduce_gradients: NCCL, or the
// backend's own device-local sum), and every replica applies the same update to the same
// values (ParameterDevices), so they stay equal bit for bit. Nothing of it crosses to the
// host in a step, and every GPU carries the same memory. The host's tensors catch up only
// when someone reads them (sync_to_host); a write to the host's tensors (host_written)
// makes the host the master again until the next training step holds them.
//
// A parameter that a layer reads on the cpu keeps its master on the host. See
// runtime/exec/training_executor.h for where this fits in a training step. Devices are reached
// through their backends only.
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
#include "runtime/params/host_staging_ring.h"

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
    Traffic& operator+=(const Traffic& other) {
      bytes += other.bytes;
      copies += other.copies;
      return *this;
    }
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

  // ---- parameters held by GPUs (Note [where a master lives]) ----------------------
  /// Makes every GPU that has a copy of trainable parameter `name` hold it, bringing the
  /// copies up to date with the host (of `params_version`) and the gradient so far onto the
  /// first of them; what went up. Nothing when they hold it already, or when a layer reads
  /// `name` on the cpu (its master stays on the host).
  Traffic hold(const std::string& name, uint64_t params_version);
  bool held(const std::string& name) const;
  /// The replicas of a held parameter: (device, weight, gradient), the first being the one
  /// whose gradient accumulates across backward calls (the others start each from zero).
  struct Replica {
    Device device;
    Tensor weight, grad;
  };
  std::vector<Replica> replicas(const std::string& name) const;
  /// The name of the parameter whose host tensor is `host` (the same storage), when GPUs
  /// hold it; empty otherwise.
  std::string held_name_of(const Tensor& host) const;
  /// Queues the all-reduce of a held parameter's gradients, once every replica's backward
  /// is complete: each replica then holds the sum.
  void all_reduce_gradients(const std::string& name);
  /// The held parameters were updated on their GPUs (an optimizer step): the host's copies
  /// are stale.
  void masters_updated();
  /// Zeroes every held parameter's gradient on every replica (Model::zero_gradients).
  void zero_held_gradients();
  /// Brings the host's tensors (values and gradients) of every held parameter up to date
  /// from its first replica, and waits: the host reads them next.
  void sync_to_host();
  /// The host's tensors were written (weights loaded or initialised): every parameter's
  /// master goes back to the host and every device copy is stale.
  void host_written();

 private:
  struct Entry {
    Tensor host, copy, host_grad, grad;  // host_grad: set with grad, when training asks
    uint64_t version = ~uint64_t{0};     // the host's params_version it was uploaded at
    bool grad_zeroed = false;  // zeroed since the last backward wrote it
  };
  /// How GPUs hold one parameter (Note [where a master lives]).
  struct Holding {
    std::vector<Device> devices;  // the replicas, the first accumulating; empty: the host's
    bool host_fresh = true;       // the host's values are the replicas'
    bool read_on_cpu = false;     // a layer reads it on the cpu: its master stays on the host
  };
  Entry& entry(const std::string& name, Device device, const std::string& context);
  /// The master of `name` back on the host, its values and gradient copied there (waits).
  void release(const std::string& name);
  /// Queues the copy of a replica's value or gradient into `host`; the caller waits.
  void queue_download(Device device, const Tensor& from, const Tensor& host);
  const TensorMap& params_;
  const TensorMap& grads_;
  TouchedRowsMap& grad_rows_;
  DeviceRegistry& registry_;
  std::map<std::pair<std::string, Device>, Entry> entries_;
  std::map<std::string, Holding> holdings_;
  std::map<Device, size_t> gradient_bytes_;  // per GPU: its gradient buffers, as the ring counts them
  HostStagingRing staging_;  // where the GPUs' gradients land on the host
  bool staging_allocator_set_ = false;
};

}  // namespace tandem
