#include "backends/calling_thread_lane.h"

#include <chrono>

#include "backends/trace.h"

namespace tandem {

void CallingThreadLane::submit(std::function<void()> work, std::shared_ptr<TaskGroup>) {
  const auto start = Trace::Clock::now();
  struct Account {  // counted and traced when `work` throws, too
    CallingThreadLane& lane;
    Trace::Clock::time_point start;
    ~Account() {
      const auto stop = Trace::Clock::now();
      lane.busy_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(stop - start).count(),
                              std::memory_order_relaxed);
      if (Trace* trace = Trace::active()) trace->add(lane.name_, TraceLabel::current(), start, stop, 1, TraceArgs::current());
    }
  } account{*this, start};
  work();
}

}  // namespace tandem
