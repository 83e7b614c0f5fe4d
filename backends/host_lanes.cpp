#include "backends/host_lanes.h"

#include <algorithm>
#include <chrono>

#include <omp.h>

#include "backends/trace.h"
#include "core/error.h"

namespace tandem {

namespace {

/// Polls `done` for up to 50 µs, yielding the core in between; whether it became true.
/// Cheaper than a futex sleep and wake-up (a context switch, very dear on a virtual machine)
/// when the answer comes within microseconds. It yields rather than pauses: on a machine
/// with as many busy threads as cores, the thread it waits for may need this core (measured
/// on 2 cores: yielding 0.096 ms a forward, pausing 0.117, sleeping at once 0.17).
template <typename F>
bool spin_until(F&& done) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
  for (int i = 0;; ++i) {
    if (done()) return true;
    if ((i & 15) == 15 && std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::yield();
  }
}

}  // namespace

// ---- HostLaneEvent ---------------------------------------------------------------------------

void HostLaneEvent::wait() const {
  if (!spin_until([&] { return done(); })) {
    std::unique_lock lock(mutex);
    reached_cv.wait(lock, [&] { return done(); });
  }
  if (error) std::rethrow_exception(error);
}

// ---- HostLaneEngine -------------------------------------------------------------------------------

namespace {

// set_threads()'s count; 0: the lane threads keep OpenMP's default (OMP_NUM_THREADS or the
// cores)
std::atomic<int> wanted_threads{0};

/// On a lane's thread, before its items run: the team size set_threads() asked for.
void adopt_wanted_threads() {
  const int wanted = wanted_threads.load(std::memory_order_relaxed);
  if (wanted > 0 && wanted != omp_get_max_threads()) omp_set_num_threads(wanted);
}

/// The team size set_threads() asked for, else OpenMP's process-wide one (OMP_NUM_THREADS,
/// or the cores), which a thread that never set its own sees. Not the calling thread's:
/// another library in the process may have set that thread's team smaller (torch does, when
/// it is imported), and the shared engine serves every thread.
int process_team_size() {
  if (const int wanted = wanted_threads.load(std::memory_order_relaxed); wanted > 0) return wanted;
  int team = 1;
  std::thread([&] { team = omp_get_max_threads(); }).join();
  return team;
}

}  // namespace

void HostLaneEngine::set_threads(int threads) { wanted_threads.store(threads, std::memory_order_relaxed); }

HostLaneEngine& HostLaneEngine::shared() {
  static HostLaneEngine engine(process_team_size());
  return engine;
}

HostLaneEngine::HostLaneEngine() : HostLaneEngine(omp_get_max_threads()) {}

HostLaneEngine::HostLaneEngine(int cores)
    : cores_(std::max(1, cores)),
      compute_thread_([this] { run_lane(Lane::compute); }),
      copy_thread_([this] { run_lane(Lane::copy); }) {}

HostLaneEngine::~HostLaneEngine() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  compute_work_.notify_all();
  copy_work_.notify_all();
  compute_thread_.join();
  copy_thread_.join();
}

void HostLaneEngine::attach(HostLane* queue) {
  std::lock_guard lock(mutex_);
  queues_.push_back(queue);
}

void HostLaneEngine::detach(HostLane* queue) {
  std::lock_guard lock(mutex_);
  queues_.erase(std::remove(queues_.begin(), queues_.end(), queue), queues_.end());
}

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::vector<HostLane*> HostLaneEngine::ready_members(const TaskGroup* group) const {
  std::vector<HostLane*> members;
  for (HostLane* q : queues_)
    if (q->lane_ == Lane::compute && !q->running_ && !q->items_.empty() && q->items_.front().group.get() == group)
      members.push_back(q);
  return members;
}

bool HostLaneEngine::missing_members(const TaskGroup* group) const {
  return group->scheduler.taken == 0 && static_cast<int>(ready_members(group).size()) < group->size();
}

HostLane* HostLaneEngine::next_ready(Lane lane, size_t& cursor, bool skip_waiting_groups) {
  // Round robin from where this lane last took an item, so no queue starves another.
  const size_t n = queues_.size();
  for (size_t k = 0; k < n; ++k) {
    HostLane* q = queues_[(cursor + k) % n];
    if (q->lane_ != lane || q->running_ || q->items_.empty()) continue;
    const HostLane::Item& head = q->items_.front();
    if (head.kind == HostLane::ItemKind::wait && !head.event->done()) continue;
    const TaskGroup* group = head.group.get();
    if (skip_waiting_groups && group && missing_members(group)) continue;
    cursor = (cursor + k + 1) % n;
    return q;
  }
  return nullptr;
}

bool HostLaneEngine::wait_for_group(TaskGroup& group) {
  const int64_t now = now_ns();
  if (group.scheduler.first_ready_ns == 0) group.scheduler.first_ready_ns = now;
  return now - group.scheduler.first_ready_ns < group_wait_ns;
}

struct HostLaneEngine::Taken {
  HostLane* queue = nullptr;
  HostLane::Item item;
  std::exception_ptr failed;  // the queue's error before this item
  std::exception_ptr error;   // from this item: a failed task, or an upstream event's error
  bool reached_event = false;
};

void HostLaneEngine::run_items(std::vector<Taken>& taken) {
  const int side_by_side = static_cast<int>(taken.size());
  auto run_one = [side_by_side](Taken& t) {
    HostLane& q = *t.queue;
    switch (t.item.kind) {
      case HostLane::ItemKind::task:
        if (t.failed) break;  // after a failure, later tasks are skipped: their inputs may be garbage
        {
          auto start = std::chrono::steady_clock::now();
          try {
            t.item.task();
          } catch (...) {
            t.error = std::current_exception();
          }
          auto stop = std::chrono::steady_clock::now();
          if (Trace* trace = Trace::active()) trace->add(q.name_, t.item.label, start, stop, side_by_side, t.item.args);
          auto elapsed = stop - start;
          q.busy_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count());
          q.tasks_run_.fetch_add(1);
        }
        break;
      case HostLane::ItemKind::record: {
        std::lock_guard event_lock(t.item.event->mutex);
        t.item.event->error = t.failed;
        t.item.event->reached.store(true, std::memory_order_release);
        t.item.event->reached_cv.notify_all();
        t.reached_event = true;
        break;
      }
      case HostLane::ItemKind::wait:
        t.error = t.item.event->error;  // reached (next_ready checked), so no longer written
        break;
    }
    // Drop the task now: the buffers it holds go back to their pools before the queue
    // counts the item as finished, so synchronize() sees them returned.
    t.item = HostLane::Item{};
  };
  const int n = static_cast<int>(taken.size());
  if (n == 1) {
    run_one(taken[0]);  // with the whole team, for its kernels' own parallel regions
    return;
  }
  // One core each: inside this region a kernel's own parallel regions are single-threaded
  // (nested parallelism is off), and oneDNN's primitives run single-threaded too.
  //
  // Each member runs in a team of its own, of one thread. Why: a oneDNN primitive that
  // finds itself inside a parallel region runs its work on the calling thread, but its
  // OpenMP barriers (batch norm has them between its passes) still bind to the innermost
  // enclosing team. Without a team of its own, that is the side-by-side team: a member's
  // barrier then waits for the other team threads, which are running other members or
  // waiting at the loop's end. With as many members as threads every thread happens to
  // meet as many barriers and they pass in lockstep; with more members than threads (3
  // on 2), or a team smaller than asked for, the counts differ and the lane hangs for ever.
  // A team of one meets its own barriers alone, whatever the others do.
#pragma omp parallel for schedule(dynamic, 1) num_threads(std::min(n, cores_))
  for (int i = 0; i < n; ++i) {
#pragma omp parallel num_threads(1)
    run_one(taken[i]);
  }
}

void HostLaneEngine::reach(HostLaneEvent& event, std::exception_ptr error) {
  {
    std::lock_guard event_lock(event.mutex);
    event.error = std::move(error);
    event.reached.store(true, std::memory_order_release);
    event.reached_cv.notify_all();
  }
  {
    // under the engine's lock: a lane that looked and found nothing is then asleep or will
    // see the new generation, never in between
    std::lock_guard lock(mutex_);
    generation_.fetch_add(1);
  }
  compute_work_.notify_all();
  copy_work_.notify_all();
}

void HostLaneEngine::run_lane(Lane lane) {
  if (lane == Lane::compute) omp_set_max_active_levels(1);  // side by side tasks' kernels: one thread each
  size_t cursor = 0;
  std::vector<Taken> taken;
  std::unique_lock lock(mutex_);
  for (;;) {
    std::vector<HostLane*> run;
    if (HostLane* q = next_ready(lane, cursor)) {
      TaskGroup* group = q->items_.front().group.get();
      if (lane != Lane::compute || !group || cores_ < 2) {
        run = {q};
      } else {
        run = ready_members(group);
        if (missing_members(group)) {
          if (HostLane* other = next_ready(lane, cursor, /*skip_waiting_groups=*/true)) {
            run = {other};  // something else can run meanwhile
          } else if (wait_for_group(*group)) {
            const uint64_t seen = generation_.load();
            lock.unlock();
            spin_until([&] { return generation_.load() != seen; });
            lock.lock();
            continue;
          }  // else: waited long enough; what is ready runs together
        }
      }
    }
    if (run.empty()) {
      if (stopping_) return;  // queues are destroyed (drained) before the engine
      const uint64_t seen = generation_.load();
      lock.unlock();
      spin_until([&] { return generation_.load() != seen; });
      lock.lock();
      if (generation_.load() == seen && !stopping_) wakeup(lane).wait(lock);
      continue;
    }
    taken.clear();
    for (HostLane* q : run) {
      Taken t;
      t.queue = q;
      t.item = std::move(q->items_.front());
      q->items_.pop_front();
      q->running_ = true;
      if (t.item.group) ++t.item.group->scheduler.taken;
      t.failed = q->error_;
      taken.push_back(std::move(t));
    }
    lock.unlock();
    adopt_wanted_threads();
    run_items(taken);
    lock.lock();
    bool reached_event = false;
    for (Taken& t : taken) {
      HostLane* q = t.queue;
      if (t.error && !q->error_) q->error_ = t.error;
      q->running_ = false;
      if (--q->unfinished_ == 0) q->idle_.notify_all();
      reached_event = reached_event || t.reached_event;
    }
    // A reached event may free a wait on the other lane; this lane looks again anyway.
    if (reached_event) generation_.fetch_add(1);
    if (reached_event) wakeup(lane == Lane::compute ? Lane::copy : Lane::compute).notify_one();
  }
}

// ---- HostLane --------------------------------------------------------------------------------

HostLane::HostLane(std::string name, HostLaneEngine::Lane lane, HostLaneEngine& engine)
    : name_(std::move(name)), lane_(lane), engine_(engine) {
  engine_.attach(this);
}

HostLane::~HostLane() {
  {
    std::unique_lock lock(engine_.mutex_);
    idle_.wait(lock, [&] { return unfinished_ == 0; });
  }
  engine_.detach(this);
}

void HostLane::enqueue(Item item) {
  {
    std::lock_guard lock(engine_.mutex_);
    TANDEM_ASSERT(!engine_.stopping_, name_ + ": the simulation engine is shutting down");
    items_.push_back(std::move(item));
    ++unfinished_;
    engine_.generation_.fetch_add(1);
  }
  engine_.wakeup(lane_).notify_one();
}

void HostLane::submit(std::function<void()> task, std::shared_ptr<TaskGroup> group) {
  if (group && group->size() < 2) group.reset();
  const bool traced = Trace::active() != nullptr;
  enqueue({ItemKind::task, std::move(task), nullptr, std::move(group), traced ? TraceLabel::current() : std::string(),
           traced ? TraceArgs::current() : std::string()});
}

DeviceEvent HostLane::record() {
  auto state = std::make_shared<HostLaneEvent>();
  enqueue({ItemKind::record, nullptr, state, nullptr, {}, {}});
  return DeviceEvent(std::move(state));
}

void HostLane::wait(const DeviceEvent& event) {
  // Reached without an error: nothing to wait for. With one, the wait item carries it into
  // this queue at its place in the order, after the tasks submitted before.
  const auto& impl = event.impl();
  if (!impl) return;
  if (auto state = std::dynamic_pointer_cast<const HostLaneEvent>(impl)) {
    if (state->done() && !state->error) return;
    enqueue({ItemKind::wait, nullptr, std::const_pointer_cast<HostLaneEvent>(state), nullptr, {}, {}});
    return;
  }
  if (event.done()) return;
  submit([event] { event.wait(); });  // another backend's event: this queue's thread waits
}

void HostLane::synchronize() {
  spin_until([&] { return unfinished_.load() == 0; });  // as a lane does, before sleeping
  std::exception_ptr error;
  {
    std::unique_lock lock(engine_.mutex_);
    idle_.wait(lock, [&] { return unfinished_ == 0; });
    error.swap(error_);
  }
  if (error) std::rethrow_exception(error);
}

QueueWork HostLane::work() const {
  return QueueWork{tasks_run_.load(), static_cast<double>(busy_ns_.load()) * 1e-9};
}

}  // namespace tandem
