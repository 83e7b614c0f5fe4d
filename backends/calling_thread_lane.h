// CallingThreadLane: a lane (lane.h) that runs each piece of work at once, on the thread
// that submits it. The cpu's lane when a plan runs on the cpu alone: there is no other
// device to overlap with, so handing every layer to another thread would only add a
// hand-off per layer, and the caller's own OpenMP team does the computing (the same team,
// and so the same bits, as every other way the cpu's kernels run).
//
// It keeps lane.h's contract trivially: work runs in submission order, every event it
// records is already reached, and an error comes out of submit() itself, as from a stream
// lane. Waiting for another lane's event blocks the calling thread (there is no queue to
// park the wait in). Under a trace, each task becomes a slice of the lane's track, named by
// its TraceLabel, as a host lane's tasks are.
#pragma once

#include <atomic>
#include <string>

#include "backends/lane.h"

namespace tandem {

/// Thread-safe only in the sense that work from two threads runs on those two threads: the
/// executors submit from one.
class CallingThreadLane final : public Lane {
 public:
  explicit CallingThreadLane(std::string name) : name_(std::move(name)) {}

  const std::string& name() const override { return name_; }
  /// Runs `work` now; its exception propagates. `side_by_side` is ignored: there is one thread.
  void submit(std::function<void()> work, std::shared_ptr<TaskGroup> side_by_side = nullptr) override;
  /// Already reached: everything submitted has run.
  DeviceEvent record() override { return DeviceEvent(); }
  /// Blocks until `event` is reached (another device's work this lane's next work reads).
  void wait(const DeviceEvent& event) override { event.wait(); }
  /// Nothing is ever pending.
  void synchronize() override {}
  /// The time spent running work, for the report.
  double busy_seconds() const { return static_cast<double>(busy_ns_.load(std::memory_order_relaxed)) * 1e-9; }

 private:
  const std::string name_;
  std::atomic<int64_t> busy_ns_{0};
};

}  // namespace tandem
