// DeviceCollectives: a rank's communicators between processes on its GPUs
// (backends/inter_process.h): for each GPU of the rank, in device order, one communicator
// joining it to the same GPU of every rank, so that gradients the GPUs hold are summed over
// the ranks on the GPUs themselves (NCCL, as DDP and Horovod do), while the host's keep
// MPI. How they are made: every rank says what it has (its GPUs, and whether MPI lets
// another thread use it); if every rank has the same, rank 0 makes an id per GPU through its
// backend, the ids travel to every rank over MPI, and every rank joins with them; if any
// rank's GPUs offer nothing, no rank uses any, and every gradient takes the host path.
//
// A backend without a network of its own (a simulated GPU) is handed a HostTransport: MPI on
// an MPI communicator of its own per GPU (ProcessGroup::Channel), used by the backend's proxy
// thread, so that a device's collectives never pair with the group's.
//
// Failures end the job as the group's own collectives do: wait_all() polls each
// communicator's error() until the collectives queued are reached, and ends the job naming
// the rank, the collective (with its step) and the ranks that did not reach it.
//
// Not thread-safe: the training thread calls it.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/inter_process.h"
#include "core/device.h"
#include "core/tensor.h"
#include "runtime/distributed/process_group.h"

namespace tandem {

class DeviceRegistry;

/// The HostTransport a backend without a network of its own is handed: MPI on a channel of
/// `group` of its own (ProcessGroup::open_channel: a collective of the group); null when MPI
/// lets no other thread in, or for a group of one.
std::shared_ptr<HostTransport> make_host_transport(ProcessGroup& group, const std::string& what);

class DeviceCollectives {
 public:
  /// The communicators of every GPU of `registry`, made with every rank of `group` (a
  /// collective of the group: every rank calls it at the same point, with its registry or
  /// null when its model runs on the cpu alone); null when not every rank has the same GPUs
  /// and they offer them (or there are none). UserError when joining fails.
  static std::unique_ptr<DeviceCollectives> open(ProcessGroup& group, DeviceRegistry* registry);
  ~DeviceCollectives();

  /// Whether `device` has a communicator.
  bool serves(Device device) const { return communicators_.count(device) != 0; }
  /// Queues on `grads`' device (its compute lane, behind the backward that wrote them) the
  /// sum of each over the ranks, then its division by the ranks: the mean, as DDP takes it.
  /// Every tensor is on one device that serves(). `what` names it in errors (the same on
  /// every rank).
  void all_reduce_mean(std::span<const Tensor> grads, const std::string& what);
  /// Waits until everything queued so far is reached, within the collective timeout (and a
  /// grace: each communicator keeps the deadline itself); a communicator that failed ends the
  /// job (ProcessGroup::abort_collective).
  void wait_all();

  /// What the communicators ran, from this rank's GPUs, all together.
  InterProcessCommunicator::Counters counters() const;

 private:
  DeviceCollectives(ProcessGroup& group, DeviceRegistry& registry) : group_(group), registry_(registry) {}
  /// Ends the job if a communicator failed, naming the collective `doing` waits in.
  void check(const std::string& doing);

  ProcessGroup& group_;
  DeviceRegistry& registry_;
  std::map<Device, std::unique_ptr<InterProcessCommunicator>> communicators_;
  struct Queued {
    Device device;
    DeviceEvent reached;
    std::string what;
    std::chrono::steady_clock::time_point since;
  };
  std::vector<Queued> queued_;  // since the last wait_all()
};

}  // namespace tandem
