// What executes the work of the devices that compute with the host's cores, the cpu and
// the simulated GPUs: in-order queues (HostLane, after CUDA streams) and events between them
// (HostLaneEvent, after cudaEvent_t), served by one process-wide HostLaneEngine. Its queues
// are the host lanes (backends/lane.h). Every backend of the host may use it; it knows none
// of them (they hand it tasks).
//
// Why one engine and not a thread per queue: simulated GPUs compute with the host's cores.
// Each host thread that runs a oneDNN kernel gets an OpenMP team of its own, and a team
// keeps spinning on every core for a while after its last kernel; with a thread per device,
// the devices' teams fought for the same cores at every hand-off between devices (a split
// model ran up to 3x slower than the same model on one device). So every queue's kernels
// run on ONE compute thread, in one OpenMP team that uses every core, and the devices are
// concurrent in order and dependency, not in wall time, exactly as the cores allow. Copies
// run on a second thread, the copy engine, so that a copy overlaps the kernels that do not
// depend on it, as a GPU's copy engines overlap its SMs.
//
// A thread ("lane") takes, from the queues of its lane, the head item of any queue whose
// previous item has finished and, for a wait, whose event has been reached; so a queue
// waiting on an event never holds up the others. A task that blocks its thread blocks its
// lane: tasks must not wait on other queues themselves (use submit_wait).
//
// Side by side: tasks submitted with one TaskGroup (the replicas of one layer of a
// data-parallel block, each on its own device) run together when they are all at the head
// of their queues, each on one core of the compute thread's OpenMP team, their kernels
// single-threaded inside it, each member in a nested team of its own (of one thread), so
// that the OpenMP barriers a kernel calls never bind to its siblings' threads. Why side by
// side: real GPUs run replicas at once, and on the host's cores N small kernels side by
// side, one core each, beat the same N run one after the other with every core on each
// (measured on 2 cores: a training step of four 1024-wide layers at batch 128 takes 13.1
// ms on one thread, 8.4 on two, so two replicas take 13.1 ms side by side against 16.8 in
// turn). A group waits for its last member only while nothing else can run, and never more
// than group_wait: then what is ready runs.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/lane.h"

namespace tandem {

/// A host lane's event (lane.h's DeviceEvent::Impl): reached when its record item runs.
struct HostLaneEvent final : DeviceEvent::Impl {
  bool done() const override { return reached.load(std::memory_order_acquire); }
  void wait() const override;

  std::atomic<bool> reached{false};
  mutable std::mutex mutex;
  mutable std::condition_variable reached_cv;
  std::exception_ptr error;  // written before `reached`
};

class HostLane;

/// The threads that run every HostLane's items: one per lane. Queues attach themselves.
class HostLaneEngine {
 public:
  enum class Lane { compute, copy };

  /// The process-wide engine every queue uses unless told otherwise.
  static HostLaneEngine& shared();

  /// How long the compute lane, with nothing else to run, waits for a group's members.
  static constexpr int64_t group_wait_ns = 100'000;

  /// Side by side tasks run on at most `cores` threads (a TaskGroup's members); by default
  /// the calling thread's OpenMP team size.
  HostLaneEngine();
  explicit HostLaneEngine(int cores);
  /// Joins the threads; every queue must have been destroyed first.
  ~HostLaneEngine();
  HostLaneEngine(const HostLaneEngine&) = delete;
  HostLaneEngine& operator=(const HostLaneEngine&) = delete;

  /// Reaches `event` from outside the lanes: work that a backend's own thread finished (a
  /// simulated GPU's transfer between processes, backends/sim/sim_inter_process.h), made
  /// with std::make_shared<HostLaneEvent>() and waited for by queues (HostLane::wait)
  /// without holding up the others. With `error`, the queues that wait for it take it on.
  void reach(HostLaneEvent& event, std::exception_ptr error = nullptr);

  /// The OpenMP team size the lanes' kernels use from their next item on, in every engine:
  /// what tandem's set_threads() gives its calling thread (omp_set_num_threads), which a
  /// lane's thread, started before or after, does not inherit. Thread-safe.
  static void set_threads(int threads);

 private:
  friend class HostLane;
  void attach(HostLane* queue);
  void detach(HostLane* queue);
  void run_lane(Lane lane);
  /// A queue of `lane` whose head item can run now, or null; with `skip_waiting_groups`,
  /// not one whose head is a task of a group still waiting for members. Called with mutex_
  /// held.
  HostLane* next_ready(Lane lane, size_t& cursor, bool skip_waiting_groups = false);
  /// The queues whose head is a ready task of `group`. Called with mutex_ held.
  std::vector<HostLane*> ready_members(const TaskGroup* group) const;
  /// Whether `group` has members neither ready nor taken: if it has not begun yet, it waits
  /// for them. Once a member ran without the others (they were late), the others run as
  /// soon as they are ready, so that the replicas fall back into step. Called with mutex_
  /// held.
  bool missing_members(const TaskGroup* group) const;
  /// Runs `queues`' head items (taken off their queues by the caller) side by side; called
  /// with the lock released.
  struct Taken;
  void run_items(std::vector<Taken>& taken);
  /// Whether the compute lane should wait for the rest of `group` (nothing else to run).
  bool wait_for_group(TaskGroup& group);

  std::condition_variable& wakeup(Lane lane) { return lane == Lane::compute ? compute_work_ : copy_work_; }

  std::mutex mutex_;                // guards every attached queue's items and counters
  // an item was queued on the lane, or an event was reached
  std::condition_variable compute_work_, copy_work_;
  std::vector<HostLane*> queues_;
  bool stopping_ = false;
  // Bumped whenever an item is queued or an event reached: a lane that found nothing to do
  // spins on it for a moment before sleeping, because the host submits a forward pass item
  // by item, a few µs apart, and a thread wake-up costs far more than that.
  std::atomic<uint64_t> generation_{0};
  int cores_ = 1;  // the compute thread's OpenMP team: how many tasks may run side by side
  std::thread compute_thread_, copy_thread_;  // last: start once everything above exists
};

/// What a queue did, for the report: items that ran (not waits or records, not skipped
/// ones) and the sum of their run times.
struct QueueWork {
  size_t tasks_run = 0;
  double busy_seconds = 0.0;
};

/// One in-order queue: a host lane (lane.h). Every member function may be called from any
/// thread.
///
/// Errors: an exception thrown by a task is kept. The tasks after it on this queue are
/// skipped (their inputs may be garbage), but events still complete, so no other queue
/// hangs. The error is rethrown on the host by the next synchronize() (which then clears it,
/// so the queue can be used again) and by wait() on any event recorded after it; a queue
/// that waits on such an event takes the error on as its own.
class HostLane final : public Lane {
 public:
  /// `name` is for errors ("cuda:0", "cuda:0 copies").
  HostLane(std::string name, HostLaneEngine::Lane lane, HostLaneEngine& engine = HostLaneEngine::shared());
  /// Runs what is still queued; an error still unreported then is dropped (a destructor
  /// cannot throw: synchronize() first).
  ~HostLane() override;
  HostLane(const HostLane&) = delete;
  HostLane& operator=(const HostLane&) = delete;

  const std::string& name() const override { return name_; }
  HostLaneEngine::Lane lane() const { return lane_; }

  /// Queues `task` behind everything submitted before; returns at once. With a `group`,
  /// on a compute queue, it runs beside the group's other tasks (see HostLaneEngine).
  void submit(std::function<void()> task, std::shared_ptr<TaskGroup> group = nullptr) override;
  /// An event that completes once everything submitted so far has run.
  DeviceEvent record() override;
  /// Makes this queue wait for `event` before it runs what is submitted after; the host
  /// does not wait. Another backend's event (a CUDA event, for the cpu's queue beside real
  /// GPUs) is waited for by a task that blocks this queue's thread until it is reached.
  void wait(const DeviceEvent& event) override;
  /// Blocks the host until everything submitted has run; rethrows and clears the error of a
  /// failed task.
  void synchronize() override;
  QueueWork work() const;

 private:
  friend class HostLaneEngine;
  enum class ItemKind { task, record, wait };
  struct Item {
    ItemKind kind;
    std::function<void()> task;             // kind task
    std::shared_ptr<HostLaneEvent> event;   // kind record or wait
    std::shared_ptr<TaskGroup> group;       // kind task: run it beside these (may be null)
    std::string label;                      // kind task, under a trace: its TraceLabel
    std::string args;                       // and its TraceArgs
  };
  void enqueue(Item item);

  const std::string name_;
  const HostLaneEngine::Lane lane_;
  HostLaneEngine& engine_;
  // guarded by engine_.mutex_
  std::deque<Item> items_;
  bool running_ = false;   // its head item is being run by its lane
  std::atomic<size_t> unfinished_{0};  // queued or running; written under the mutex
  std::exception_ptr error_;
  std::condition_variable idle_;

  std::atomic<size_t> tasks_run_{0};
  std::atomic<int64_t> busy_ns_{0};
};

}  // namespace tandem
