// A real GPU's communicator between processes (backends/inter_process.h): NCCL, joining this
// GPU to one GPU of every rank of the job (one communicator per GPU of a rank, as DDP makes
// one per device). Rank 0's ncclGetUniqueId is the id the runtime sends to every rank.
//
// Nothing waits for ever (torch's ProcessGroupNCCL does the same): the communicator is
// non-blocking (ncclConfig_t::blocking = 0), so joining, enqueuing and finalising return
// ncclInProgress and are polled with a deadline; a watchdog thread follows every collective
// queued (CUDA events before and after it, and ncclCommGetAsyncError), and one that has
// run past the collective timeout since its stream reached it, or an asynchronous NCCL
// error, aborts the communicator (ncclCommAbort): NCCL's kernels then return, so the
// streams, and whoever synchronises them, go on, and error() says what failed.
//
// Awaits a machine with several GPUs to run on: the CI machines have none (the simulated
// GPUs' communicator, backends/sim/sim_inter_process.h, runs the runtime's side of it).
#pragma once

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "backends/cuda/stream.h"
#include "backends/inter_process.h"
#include "core/device.h"

namespace tandem::cuda {

class CudaBackend;

class NcclInterProcessCommunicator final : public InterProcessCommunicator {
 public:
  /// Rank 0's id: ncclGetUniqueId's bytes.
  static std::string make_id();
  /// `backend`'s GPU joins the communicator `setup.id` names; returns once every rank
  /// joined. UserError naming the device and the rank when NCCL fails or past the deadline.
  NcclInterProcessCommunicator(CudaBackend& backend, const InterProcessSetup& setup);
  /// Finalises (or, after a failure, has aborted) the communicator and stops the watchdog.
  ~NcclInterProcessCommunicator() override;
  NcclInterProcessCommunicator(const NcclInterProcessCommunicator&) = delete;
  NcclInterProcessCommunicator& operator=(const NcclInterProcessCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  /// One group launch (ncclGroupStart/End) of an in-place ncclAllReduce per tensor, on
  /// `lane`'s stream.
  void all_reduce_sum(Lane& lane, std::span<const Tensor> tensors, const std::string& what) override;
  void broadcast(Lane& lane, const Tensor& tensor, int root, const std::string& what) override;
  std::string error() override;
  void abort() override;
  Counters counters() const override;

 private:
  /// One collective followed by the watchdog.
  struct Queued {
    std::string what;
    size_t bytes = 0;
    Event started, finished;  // recorded on the stream before and after it
    std::chrono::steady_clock::time_point reached{};  // when `started` was seen reached
    bool seen_reached = false;
  };
  /// Queues `launch` (the NCCL calls) on `lane`'s stream between two events, for the watchdog.
  void queue(Lane& lane, const std::string& what, size_t bytes, const std::function<void(cudaStream_t)>& launch);
  /// Polls until a non-blocking call's work is enqueued (ncclInProgress no more), within the
  /// deadline; the state it ended in.
  ncclResult_t settle(ncclResult_t status, std::chrono::steady_clock::time_point deadline);
  /// Aborts with `message` as the error, once. Called with mutex_ held.
  void fail(const std::string& message);
  void watch();

  CudaBackend& backend_;
  const Device device_;
  const int cuda_device_;
  const int rank_, size_;
  const std::chrono::milliseconds timeout_;
  ncclComm_t comm_ = nullptr;

  mutable std::mutex mutex_;  // guards what follows and every NCCL call on comm_
  std::condition_variable wake_;
  std::deque<Queued> queued_;
  std::string error_;
  bool aborted_ = false;
  bool stopping_ = false;
  Counters counters_;
  std::thread watchdog_;  // last: starts once everything above exists
};

}  // namespace tandem::cuda
