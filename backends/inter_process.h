// Collectives between processes, on a device: what carries the gradients that GPUs hold
// from one rank of an mpirun job to the others without a detour through host memory (NCCL
// between the ranks' GPUs, as DDP and Horovod use it). A backend offers it optionally
// (Backend::make_inter_process_id, Backend::join_inter_process); the runtime
// (runtime/distributed/device_collectives.h) makes one communicator per GPU of a rank,
// joining that GPU of every rank: rank 0 makes an id, sends it to every rank over MPI, and
// every rank joins with it.
//
// Nothing waits for ever. Every collective has a deadline, the job's collective timeout,
// counted from when its device reaches it; past it, or on any other failure, the
// communicator aborts: its collectives queued and to come end without their result, so a
// lane never waits on them for ever, and error() says what failed. The runtime polls
// error() where it waits, and ends the job naming the rank, the step and the collective,
// as it does for MPI's collectives (runtime/distributed/process_group.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "backends/lane.h"
#include "core/tensor.h"

namespace tandem {

/// How a backend that has no network of its own (a simulated GPU) moves bytes between the
/// processes: handed in by the runtime, which implements it over MPI on a communicator of
/// its own. Its calls block the calling thread (a backend's own thread, never a lane's:
/// that would stall every host lane) until done, or until `deadline`; false then, and the
/// bytes are garbage. Thread-safe against the runtime's own collectives; one call at a time.
class HostTransport {
 public:
  virtual ~HostTransport() = default;
  /// This process's rank and the number of processes.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Every process's `count` floats at `data` become their elementwise sum, added in rank
  /// order (every process gets the same bits).
  virtual bool all_reduce_sum(float* data, int64_t count, std::chrono::steady_clock::time_point deadline) = 0;
  /// Every process's `bytes` at `data` become process `root`'s.
  virtual bool broadcast(void* data, size_t bytes, int root, std::chrono::steady_clock::time_point deadline) = 0;
  /// A call blocked now, or made later, returns false at once: the communicator gave up.
  virtual void cancel() = 0;
};

/// What a process needs to join a communicator: its rank, how many join, the id rank 0 made
/// (Backend::make_inter_process_id) and every rank received, each collective's deadline,
/// and for a backend without a network of its own, the runtime's transport.
struct InterProcessSetup {
  int rank = 0;
  int size = 1;
  std::string id;
  std::chrono::milliseconds timeout{300'000};
  std::shared_ptr<HostTransport> transport;  // ignored by a backend that moves bytes itself (NCCL)
};

/// One device's end of a communicator joining one device of every process. Its collectives
/// are queued on a lane of its device, in the order called, which must be the same on every
/// process; they are asynchronous (no host wait) and in place. Members may be called from
/// any thread, one at a time; error() from any thread at any time.
class InterProcessCommunicator {
 public:
  virtual ~InterProcessCommunicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Queues on `lane` (of this device) one collective that makes each float32 tensor of
  /// `tensors` (on this device) the elementwise sum of its counterparts on every process
  /// (a gradient bucket: NCCL fuses them in one group launch). `what` names it in errors.
  virtual void all_reduce_sum(Lane& lane, std::span<const Tensor> tensors, const std::string& what) = 0;
  /// Queues on `lane` the copy of process `root`'s `tensor` into every process's.
  virtual void broadcast(Lane& lane, const Tensor& tensor, int root, const std::string& what) = 0;
  /// Empty while every collective finished or is within its deadline; else what failed
  /// (which collective, and why: past its deadline, or the transport's error), after which
  /// the communicator has aborted (see above). Polls (NCCL: ncclCommGetAsyncError).
  virtual std::string error() = 0;
  /// Gives up now (NCCL: ncclCommAbort): what is queued ends without its result.
  virtual void abort() = 0;
  /// How many collectives it ran and how many bytes they summed or sent, from this device.
  struct Counters {
    int64_t collectives = 0;
    size_t bytes = 0;
  };
  virtual Counters counters() const = 0;
};

}  // namespace tandem
