#include "backends/sim/sim_engine.h"

#include <algorithm>
#include <chrono>

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

// ---- Event -----------------------------------------------------------------------------------

bool Event::done() const { return !state_ || state_->done.load(std::memory_order_acquire); }

void Event::wait() const {
  if (!state_) return;
  if (!spin_until([&] { return state_->done.load(std::memory_order_acquire); })) {
    std::unique_lock lock(state_->mutex);
    state_->reached.wait(lock, [&] { return state_->done.load(std::memory_order_acquire); });
  }
  if (state_->error) std::rethrow_exception(state_->error);
}

// ---- SimEngine -------------------------------------------------------------------------------

SimEngine& SimEngine::shared() {
  static SimEngine engine;
  return engine;
}

SimEngine::SimEngine()
    : compute_thread_([this] { run_lane(Lane::compute); }), copy_thread_([this] { run_lane(Lane::copy); }) {}

SimEngine::~SimEngine() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  compute_work_.notify_all();
  copy_work_.notify_all();
  compute_thread_.join();
  copy_thread_.join();
}

void SimEngine::attach(SimQueue* queue) {
  std::lock_guard lock(mutex_);
  queues_.push_back(queue);
}

void SimEngine::detach(SimQueue* queue) {
  std::lock_guard lock(mutex_);
  queues_.erase(std::remove(queues_.begin(), queues_.end(), queue), queues_.end());
}

SimQueue* SimEngine::next_ready(Lane lane, size_t& cursor) {
  // Round robin from where this lane last took an item, so no queue starves another.
  const size_t n = queues_.size();
  for (size_t k = 0; k < n; ++k) {
    SimQueue* q = queues_[(cursor + k) % n];
    if (q->lane_ != lane || q->running_ || q->items_.empty()) continue;
    const SimQueue::Item& head = q->items_.front();
    if (head.kind == SimQueue::ItemKind::wait && !head.event->done.load(std::memory_order_acquire)) continue;
    cursor = (cursor + k + 1) % n;
    return q;
  }
  return nullptr;
}

void SimEngine::run_lane(Lane lane) {
  size_t cursor = 0;
  std::unique_lock lock(mutex_);
  for (;;) {
    SimQueue* q = next_ready(lane, cursor);
    if (!q) {
      if (stopping_) return;  // queues are destroyed (drained) before the engine
      const uint64_t seen = generation_.load();
      lock.unlock();
      spin_until([&] { return generation_.load() != seen; });
      lock.lock();
      if (generation_.load() == seen && !stopping_) wakeup(lane).wait(lock);
      continue;
    }
    SimQueue::Item item = std::move(q->items_.front());
    q->items_.pop_front();
    q->running_ = true;
    const std::exception_ptr failed = q->error_;
    lock.unlock();

    std::exception_ptr error;  // from this item: a failed task, or an upstream event's error
    bool reached_event = false;
    switch (item.kind) {
      case SimQueue::ItemKind::task:
        if (failed) break;  // after a failure, later tasks are skipped: their inputs may be garbage
        {
          auto start = std::chrono::steady_clock::now();
          try {
            item.task();
          } catch (...) {
            error = std::current_exception();
          }
          auto elapsed = std::chrono::steady_clock::now() - start;
          q->busy_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count());
          q->tasks_run_.fetch_add(1);
        }
        break;
      case SimQueue::ItemKind::record: {
        std::lock_guard event_lock(item.event->mutex);
        item.event->error = failed;
        item.event->done.store(true, std::memory_order_release);
        item.event->reached.notify_all();
        reached_event = true;
        break;
      }
      case SimQueue::ItemKind::wait:
        error = item.event->error;  // reached (next_ready checked), so no longer written
        break;
    }
    // Drop the task now, on this thread: the buffers it holds go back to their pools before
    // the queue counts the item as finished, so synchronize() sees them returned.
    item = SimQueue::Item{};

    lock.lock();
    if (error && !q->error_) q->error_ = error;
    q->running_ = false;
    if (--q->unfinished_ == 0) q->idle_.notify_all();
    // A reached event may free a wait on the other lane; this lane looks again anyway.
    if (reached_event) generation_.fetch_add(1);
    if (reached_event) wakeup(lane == Lane::compute ? Lane::copy : Lane::compute).notify_one();
  }
}

// ---- SimQueue --------------------------------------------------------------------------------

SimQueue::SimQueue(std::string name, SimEngine::Lane lane, SimEngine& engine)
    : name_(std::move(name)), lane_(lane), engine_(engine) {
  engine_.attach(this);
}

SimQueue::~SimQueue() {
  {
    std::unique_lock lock(engine_.mutex_);
    idle_.wait(lock, [&] { return unfinished_ == 0; });
  }
  engine_.detach(this);
}

void SimQueue::enqueue(Item item) {
  {
    std::lock_guard lock(engine_.mutex_);
    TANDEM_ASSERT(!engine_.stopping_, name_ + ": the simulation engine is shutting down");
    items_.push_back(std::move(item));
    ++unfinished_;
    engine_.generation_.fetch_add(1);
  }
  engine_.wakeup(lane_).notify_one();
}

void SimQueue::submit(std::function<void()> task) { enqueue({ItemKind::task, std::move(task), nullptr}); }

Event SimQueue::record() {
  Event event;
  event.state_ = std::make_shared<Event::State>();
  enqueue({ItemKind::record, nullptr, event.state_});
  return event;
}

void SimQueue::submit_wait(const Event& event) {
  // Reached without an error: nothing to wait for. With one, the wait item carries it into
  // this queue at its place in the order, after the tasks submitted before.
  if (!event.state_ || (event.done() && !event.state_->error)) return;
  enqueue({ItemKind::wait, nullptr, event.state_});
}

void SimQueue::synchronize() {
  spin_until([&] { return unfinished_.load() == 0; });  // as a lane does, before sleeping
  std::exception_ptr error;
  {
    std::unique_lock lock(engine_.mutex_);
    idle_.wait(lock, [&] { return unfinished_ == 0; });
    error.swap(error_);
  }
  if (error) std::rethrow_exception(error);
}

QueueWork SimQueue::work() const {
  return QueueWork{tasks_run_.load(), static_cast<double>(busy_ns_.load()) * 1e-9};
}

}  // namespace tandem
