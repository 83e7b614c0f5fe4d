// Task groups on the simulation engine: the replicas of a layer run side by side, one core
// each; a late or missing member never stalls the others; errors stay on their queue.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include <omp.h>

#include "backends/host_lanes.h"

using namespace tandem;
using namespace std::chrono_literals;

namespace {

// An engine whose compute thread has `cores` OpenMP threads (it reads them when built).
std::unique_ptr<HostLaneEngine> engine_with_cores(int cores) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(cores);
  auto engine = std::make_unique<HostLaneEngine>();
  omp_set_num_threads(saved);
  return engine;
}

// Two devices' compute queues on an engine of `cores` cores: a layer's two replicas.
struct TwoQueues {
  std::unique_ptr<HostLaneEngine> engine;
  HostLane a, b;
  explicit TwoQueues(int cores)
      : engine(engine_with_cores(cores)),
        a("cuda:0", HostLaneEngine::Lane::compute, *engine),
        b("cuda:1", HostLaneEngine::Lane::compute, *engine) {}
  void synchronize() {
    a.synchronize();
    b.synchronize();
  }
};

// Holds the engine's compute thread until open(), so that tasks submitted meanwhile are
// all at their queues' heads when it lets go, however late the host got to them.
struct Hold {
  std::atomic<bool> release{false};
  HostLane queue;
  explicit Hold(HostLaneEngine& engine) : queue("hold", HostLaneEngine::Lane::compute, engine) {
    queue.submit([this] {
      while (!release.load()) std::this_thread::yield();
    });
  }
  void open() { release = true; }
  ~Hold() {
    release = true;
    queue.synchronize();
  }
};

// What a task saw of its surroundings.
struct Seen {
  std::atomic<bool> met_sibling{false};  // the sibling had started while this one ran
  std::atomic<int> team{0};              // omp_get_num_threads() inside the task
  std::atomic<bool> in_parallel{false};
};

// A task that tells `started` it runs, then waits up to `patience` for `expected` tasks to
// have started: only tasks that run at once can all see each other.
auto rendezvous(std::atomic<int>& started, int expected, Seen& seen, std::chrono::milliseconds patience) {
  return [&started, expected, &seen, patience] {
    seen.team = omp_get_num_threads();
    seen.in_parallel = omp_in_parallel();
    started.fetch_add(1);
    const auto give_up = std::chrono::steady_clock::now() + patience;
    while (started.load() < expected && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    seen.met_sibling = started.load() >= expected;
  };
}

// Ends the process, failed, if not disarmed within `deadline`: a test of something that may
// hang must fail, not wait for CI's clock. (The hung threads cannot be stopped, so the
// test cannot unwind; ctest runs each case in a process of its own.)
class Watchdog {
 public:
  Watchdog(std::chrono::seconds deadline, const char* what)
      : thread_([this, deadline, what] {
          std::unique_lock lock(mutex_);
          if (!disarmed_.wait_for(lock, deadline, [this] { return done_; })) {
            std::fprintf(stderr, "FAILED: %s did not finish within %lld s: hung\n", what,
                         static_cast<long long>(deadline.count()));
            std::fflush(stderr);
            std::_Exit(1);
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    disarmed_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable disarmed_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace

TEST_CASE("a task group's members run side by side, one core each", "[host_lanes]") {
  TwoQueues q(2);
  HostLane &a = q.a, &b = q.b;
  for (int round = 0; round < 5; ++round) {  // fresh groups, as each pass makes them
    std::atomic<int> started{0};
    Seen seen_a, seen_b;
    auto group = std::make_shared<TaskGroup>(2);
    Hold hold(*q.engine);
    a.submit(rendezvous(started, 2, seen_a, 2000ms), group);
    b.submit(rendezvous(started, 2, seen_b, 2000ms), group);
    hold.open();
    q.synchronize();
    CHECK(seen_a.met_sibling);
    CHECK(seen_b.met_sibling);
    // inside the engine's parallel region: a kernel's own regions are single-threaded, and
    // the innermost team is the member's own, of one thread
    CHECK(seen_a.in_parallel);
    CHECK(seen_b.in_parallel);
    CHECK(seen_a.team == 1);
    CHECK(seen_b.team == 1);
  }
  CHECK(a.work().tasks_run == 5);
  CHECK(b.work().tasks_run == 5);
}

TEST_CASE("a lone task runs with the whole team", "[host_lanes]") {
  auto engine = engine_with_cores(2);
  HostLane a("cuda:0", HostLaneEngine::Lane::compute, *engine);
  std::atomic<int> team{0};
  a.submit([&] {
#pragma omp parallel
    {
#pragma omp single
      team = omp_get_num_threads();
    }
  });
  a.synchronize();
  CHECK(team == 2);
}

TEST_CASE("a group member whose sibling never comes runs after a short wait", "[host_lanes]") {
  TwoQueues q(2);
  HostLane &a = q.a, &b = q.b;
  auto group = std::make_shared<TaskGroup>(2);
  std::atomic<bool> ran{false};
  auto start = std::chrono::steady_clock::now();
  a.submit([&] { ran = true; }, group);
  a.synchronize();  // must not hang for b's member
  CHECK(ran);
  CHECK(std::chrono::steady_clock::now() - start < 1s);
  // the late sibling runs as soon as it is there, and so does what follows it
  std::atomic<int> later{0};
  b.submit([&] { later.fetch_add(1); }, group);
  b.submit([&] { later.fetch_add(1); });
  b.synchronize();
  CHECK(later == 2);
}

TEST_CASE("replicas that fell out of step run side by side again", "[host_lanes]") {
  // Replica a's first layer ran alone (b's came late); from the next layer on, both are
  // at their queues' heads together again and must run at once.
  TwoQueues q(2);
  HostLane &a = q.a, &b = q.b;
  auto first = std::make_shared<TaskGroup>(2);
  a.submit([] {}, first);
  a.synchronize();
  std::atomic<int> started{0};
  Seen seen_a, seen_b;
  auto second = std::make_shared<TaskGroup>(2);
  {
    Hold hold(*q.engine);
    b.submit([] {}, first);  // the late sibling, then the next layer on both
    a.submit(rendezvous(started, 2, seen_a, 2000ms), second);
    b.submit(rendezvous(started, 2, seen_b, 2000ms), second);
    hold.open();
  }
  q.synchronize();
  CHECK(seen_a.met_sibling);
  CHECK(seen_b.met_sibling);
}

TEST_CASE("a failed group member fails its own queue only", "[host_lanes]") {
  TwoQueues q(2);
  HostLane &a = q.a, &b = q.b;
  auto group = std::make_shared<TaskGroup>(2);
  std::atomic<bool> b_ran{false}, a_after{false};
  a.submit([] { throw std::runtime_error("replica 0 failed"); }, group);
  a.submit([&] { a_after = true; });
  b.submit([&] { b_ran = true; }, group);
  CHECK_THROWS_WITH(a.synchronize(), "replica 0 failed");
  CHECK_NOTHROW(b.synchronize());
  CHECK(b_ran);
  CHECK_FALSE(a_after);  // skipped: its inputs may be garbage
}

TEST_CASE("with one core a group's members run one after the other", "[host_lanes]") {
  TwoQueues q(1);
  HostLane &a = q.a, &b = q.b;
  std::atomic<int> started{0};
  Seen seen_a, seen_b;
  auto group = std::make_shared<TaskGroup>(2);
  a.submit(rendezvous(started, 2, seen_a, 50ms), group);
  b.submit(rendezvous(started, 2, seen_b, 50ms), group);
  q.synchronize();
  CHECK(started == 2);
  // the first to run waited for the other in vain: they did not overlap
  CHECK_FALSE((seen_a.met_sibling && seen_b.met_sibling));
}

TEST_CASE("more members than cores: each member's OpenMP barriers are its own", "[host_lanes]") {
  // oneDNN's batch norm, run inside a parallel region, does its work on the calling thread
  // but still calls `#pragma omp barrier` between its passes. Such a barrier binds to the
  // innermost team: were that the engine's side-by-side team, 3 members on 2 threads would
  // meet different numbers of barriers per thread and wait for each other for ever.
  auto engine = engine_with_cores(2);
  std::vector<std::unique_ptr<HostLane>> queues;
  for (int i = 0; i < 3; ++i)
    queues.push_back(std::make_unique<HostLane>("cuda:" + std::to_string(i), HostLaneEngine::Lane::compute, *engine));
  Watchdog watchdog(std::chrono::seconds(30), "3 group members with OpenMP barriers on 2 threads");
  std::atomic<int> finished{0};
  for (int round = 0; round < 4; ++round) {
    auto group = std::make_shared<TaskGroup>(3);
    Hold hold(*engine);
    for (int i = 0; i < 3; ++i)
      queues[i]->submit(
          [&finished, barriers = 1 + i] {
            for (int b = 0; b < barriers; ++b) {
#pragma omp barrier
            }
            finished.fetch_add(1);
          },
          group);
    hold.open();
  }
  for (auto& q : queues) q->synchronize();
  CHECK(finished == 12);
}
