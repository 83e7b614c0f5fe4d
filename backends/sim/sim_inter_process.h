// A simulated GPU's communicator between processes (backends/inter_process.h): what NCCL is
// to a real GPU. A simulated GPU has no network, so the bytes travel through the
// HostTransport the runtime hands in (MPI on a communicator of its own), moved by a proxy
// thread of the communicator, as NCCL's proxy thread moves a real GPU's over the network.
//
// Why a thread of its own: every host lane runs on one compute thread (host_lanes.h). A
// collective that blocked that thread while it waited for the other processes would stall
// every simulated GPU and the cpu, and two communicators of one process could each wait for
// the other's peer (GPU 1's collective holding the thread that GPU 0's needs). So a
// collective is two items on its lane: a task that hands the tensors to the proxy, and a
// wait for an event the proxy reaches when they are summed (HostLaneEngine::reach); the
// lane waits, the others run.
//
// Deadline: the proxy gives the transport until the job's collective timeout after it
// started the collective; past it the communicator aborts: error() names the collective,
// the transport's blocked call is cancelled, and every collective queued or to come is
// reached at once, without its result, so no lane waits for ever.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/host_lanes.h"
#include "backends/inter_process.h"
#include "core/device.h"

namespace tandem {

class SimInterProcessCommunicator final : public InterProcessCommunicator {
 public:
  /// `device`'s end of the communicator `setup.id` names; checks, over the transport, that
  /// every process has rank 0's id (UserError naming the device and the rank otherwise, or
  /// past the deadline). `engine` runs the lanes the collectives are queued on.
  SimInterProcessCommunicator(Device device, HostLaneEngine& engine, const InterProcessSetup& setup);
  /// Cancels what is still queued and joins the proxy.
  ~SimInterProcessCommunicator() override;
  SimInterProcessCommunicator(const SimInterProcessCommunicator&) = delete;
  SimInterProcessCommunicator& operator=(const SimInterProcessCommunicator&) = delete;

  /// A fresh id: random bytes behind a tag that says whose it is.
  static std::string make_id();

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(Lane& lane, std::span<const Tensor> tensors, const std::string& what) override;
  void broadcast(Lane& lane, const Tensor& tensor, int root, const std::string& what) override;
  std::string error() override;
  void abort() override;
  Counters counters() const override;

 private:
  struct Collective {
    bool sum = true;  // else a broadcast from `root`
    int root = 0;
    std::vector<Tensor> tensors;
    std::string what;
    std::shared_ptr<HostLaneEvent> done;
  };
  /// Queues the two items on `lane` (see above).
  void queue(Lane& lane, std::shared_ptr<Collective> c);
  /// The proxy: runs the collectives handed to it, in order.
  void serve();
  /// One collective over the transport; false past the deadline.
  bool run(Collective& c);

  const Device device_;
  HostLaneEngine& engine_;
  const int rank_, size_;
  const std::chrono::milliseconds timeout_;
  const std::shared_ptr<HostTransport> transport_;

  mutable std::mutex mutex_;  // guards what follows
  std::condition_variable handed_;
  std::deque<std::shared_ptr<Collective>> handed_over_;
  bool stopping_ = false;
  std::string error_;
  Counters counters_;
  std::atomic<bool> aborted_{false};
  std::thread proxy_;  // last: starts once everything above exists
};

}  // namespace tandem
