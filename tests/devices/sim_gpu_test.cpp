// Simulated GPUs: queue order, events between devices, errors from tasks, copies.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backends/sim/sim_gpu.h"
#include "core/error.h"

using namespace tandem;
using namespace std::chrono_literals;

namespace {
constexpr size_t MiB = size_t{1} << 20;

// Events in the order they happened, from any thread.
struct Log {
  std::mutex mutex;
  std::vector<std::string> entries;
  void add(std::string entry) {
    std::lock_guard lock(mutex);
    entries.push_back(std::move(entry));
  }
  std::vector<std::string> get() {
    std::lock_guard lock(mutex);
    return entries;
  }
};
}  // namespace

TEST_CASE("a queue runs its tasks in order, and submit does not block the host", "[sim_gpu]") {
  SimGpu gpu(0, MiB);
  std::vector<int> order;  // touched only by the worker until synchronize()
  std::atomic<bool> release{false};
  gpu.compute_queue().submit([&] {
    while (!release.load()) std::this_thread::sleep_for(1ms);
    order.push_back(0);
  });
  for (int i = 1; i < 100; ++i) gpu.compute_queue().submit([&order, i] { order.push_back(i); });
  DeviceEvent done = gpu.compute_queue().record();
  CHECK_FALSE(done.done());  // the first task still blocks the queue, and the host got here
  release.store(true);
  gpu.synchronize();
  CHECK(done.done());
  std::vector<int> expected(100);
  std::iota(expected.begin(), expected.end(), 0);
  CHECK(order == expected);
  CHECK(gpu.compute_queue().work().tasks_run == 100);
  CHECK(gpu.counters().busy_seconds > 0.0);
}

TEST_CASE("a queue waits on another device's event without blocking the host", "[sim_gpu]") {
  SimGpu a(0, MiB), b(1, MiB);
  Log log;
  std::atomic<bool> release{false};
  // a is held up by its copy engine (a task that blocks the compute lane would hold up
  // every device's kernels: they share the host's cores, see host_lanes.h).
  a.copy_queue().submit([&] {
    while (!release.load()) std::this_thread::sleep_for(1ms);
  });
  a.compute_queue().wait(a.copy_queue().record());
  a.compute_queue().submit([&] { log.add("a1"); });
  a.compute_queue().submit([&] { log.add("a2"); });
  DeviceEvent a_done = a.compute_queue().record();
  a.compute_queue().submit([&] {
    std::this_thread::sleep_for(20ms);
    log.add("a3");  // after the event: b need not wait for it
  });
  b.compute_queue().submit([&] { log.add("b1"); });
  b.compute_queue().wait(a_done);
  b.compute_queue().submit([&] { log.add("b2"); });
  DeviceEvent b_done = b.compute_queue().record();
  // b1 runs at once, though a waits; b2 cannot run before a2, however long a takes.
  for (int i = 0; i < 5000 && log.get().empty(); ++i) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(20ms);  // time enough for b2 to run, were b not waiting
  CHECK(log.get() == std::vector<std::string>{"b1"});
  CHECK_FALSE(b_done.done());
  release.store(true);
  b_done.wait();
  std::vector<std::string> seen = log.get();
  REQUIRE(seen.size() >= 4);
  CHECK(std::vector<std::string>(seen.begin(), seen.begin() + 3) == std::vector<std::string>{"b1", "a1", "a2"});
  CHECK(std::find(seen.begin(), seen.end(), "b2") > std::find(seen.begin(), seen.end(), "a2"));
  a.synchronize();
  b.synchronize();
  CHECK(log.get().size() == 5);
}

TEST_CASE("an exception in a task is rethrown by synchronize, later tasks are skipped", "[sim_gpu]") {
  SimGpu gpu(0, MiB);
  std::atomic<int> ran{0};
  gpu.compute_queue().submit([&] { ran.fetch_add(1); });
  gpu.compute_queue().submit([] { throw UserError("kernel failed"); });
  gpu.compute_queue().submit([&] { ran.fetch_add(10); });  // skipped: its inputs may be garbage
  DeviceEvent after = gpu.compute_queue().record();
  CHECK_THROWS_WITH(after.wait(), "kernel failed");
  CHECK_THROWS_AS(gpu.synchronize(), UserError);
  CHECK(ran.load() == 1);
  // Reported once by synchronize; the queue works again afterwards.
  gpu.compute_queue().submit([&] { ran.fetch_add(100); });
  CHECK_NOTHROW(gpu.synchronize());
  CHECK(ran.load() == 101);
}

TEST_CASE("an error travels to a queue that waits on the failed queue's event", "[sim_gpu]") {
  SimGpu a(0, MiB), b(1, MiB);
  a.compute_queue().submit([] { throw std::runtime_error("out of range in gather"); });
  b.compute_queue().wait(a.compute_queue().record());
  std::atomic<bool> b_ran{false};
  b.compute_queue().submit([&] { b_ran.store(true); });
  CHECK_THROWS_WITH(b.synchronize(), "out of range in gather");
  CHECK_FALSE(b_ran.load());
  CHECK_THROWS_WITH(a.synchronize(), "out of range in gather");
}

TEST_CASE("a destroyed queue has run everything submitted to it", "[sim_gpu]") {
  std::atomic<int> ran{0};
  {
    SimGpu gpu(0, MiB);
    for (int i = 0; i < 50; ++i)
      gpu.compute_queue().submit([&] {
        std::this_thread::sleep_for(100us);
        ran.fetch_add(1);
      });
    gpu.compute_queue().submit([] { throw std::runtime_error("never synchronised"); });  // dropped, not a crash
  }
  CHECK(ran.load() == 50);
}

TEST_CASE("copies move the right bytes between host and devices and are counted", "[sim_gpu]") {
  SimGpu a(0, 16 * MiB), b(1, 16 * MiB);
  CpuAllocator host(1 << 24);
  const size_t n = 1000;
  auto src = host.allocate(n * sizeof(float));
  float* s = static_cast<float*>(src->data());
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<float>(i) * 0.5f;

  auto on_a = a.allocator().allocate(n * sizeof(float));
  auto on_b = b.allocator().allocate(n * sizeof(float));
  auto back = host.allocate(n * sizeof(float));
  std::memset(back->data(), 0, back->bytes());

  a.copy(a.lane(LaneKind::copy_in), {on_a}, {src}, n * sizeof(float));
  // Double the copy in place on a, as a kernel would.
  a.compute_queue().submit([p = static_cast<float*>(on_a->data()), n] {
    for (size_t i = 0; i < n; ++i) p[i] *= 2;
  });
  a.copy(a.compute_queue(), {on_b}, {on_a}, n * sizeof(float));  // a peer copy, run by the source
  b.compute_queue().wait(a.compute_queue().record());
  // The second half only, at an offset: offsets are honoured at both ends.
  size_t half = n / 2 * sizeof(float);
  b.copy(b.compute_queue(), {back, half}, {on_b, half}, half);  // behind what b waited for
  b.synchronize();

  const float* r = static_cast<const float*>(back->data());
  CHECK(r[0] == 0.0f);
  CHECK(r[n / 2 - 1] == 0.0f);
  CHECK(r[n / 2] == static_cast<float>(n / 2));
  CHECK(r[n - 1] == static_cast<float>(n - 1));

  // Each device counts its own end of the copies it ran: b's end of the peer copy is for
  // whoever ran it to count on b's behalf (the runtime does, Backend::copy).
  DeviceCounters sa = a.counters(), sb = b.counters();
  CHECK(sa.bytes_in == n * sizeof(float));
  CHECK(sa.copies_in == 1);
  CHECK(sa.bytes_out == n * sizeof(float));
  CHECK(sa.copies_out == 1);
  CHECK(sb.bytes_in == 0);
  CHECK(sb.copies_in == 0);
  CHECK(sb.bytes_out == half);
  CHECK(sb.copies_out == 1);
}

TEST_CASE("a copy between the wrong devices or past the end is a bug caught on the host", "[sim_gpu]") {
  SimGpu a(0, MiB), b(1, MiB);
  CpuAllocator host(1 << 20);
  auto h = host.allocate(256);
  auto on_a = a.allocator().allocate(256);
  auto on_b = b.allocator().allocate(256);
  CHECK_THROWS_AS(a.copy(a.compute_queue(), {on_b}, {h}, 256), InternalError);  // neither end on a
  CHECK_THROWS_AS(a.copy(a.copy_queue(), {h}, {on_a}, 512), InternalError);     // past the end
  CHECK_THROWS_AS(a.copy(b.compute_queue(), {on_a}, {h}, 64), InternalError);   // on another device's lane
  CHECK_NOTHROW(a.synchronize());
}

TEST_CASE("a copy on the copy engine overlaps a kernel and events order its reader", "[sim_gpu]") {
  SimGpu gpu(0, 16 * MiB);
  CpuAllocator host(1 << 24);
  const size_t n = 4096;
  auto src = host.allocate(n * sizeof(float));
  for (size_t i = 0; i < n; ++i) static_cast<float*>(src->data())[i] = static_cast<float>(i) + 0.25f;
  auto on_gpu = gpu.allocator().allocate(n * sizeof(float));

  std::atomic<bool> kernel_running{false}, copy_seen_during_kernel{false}, release{false};
  gpu.compute_queue().submit([&] {  // a long kernel that does not read the copy
    kernel_running.store(true);
    while (!release.load()) std::this_thread::sleep_for(1ms);
    kernel_running.store(false);
  });
  gpu.copy(gpu.copy_queue(), {on_gpu}, {src}, n * sizeof(float));
  gpu.copy_queue().submit([&] {  // the lanes start in any order: see the kernel start first
    for (int i = 0; i < 5000 && !kernel_running.load(); ++i) std::this_thread::sleep_for(1ms);
    copy_seen_during_kernel.store(kernel_running.load());
  });
  DeviceEvent copied = gpu.copy_queue().record();
  float sum = 0;
  gpu.compute_queue().wait(copied);
  gpu.compute_queue().submit([&, p = static_cast<const float*>(on_gpu->data())] {
    for (size_t i = 0; i < n; ++i) sum += p[i];
  });
  copied.wait();  // the copy finishes while the kernel still runs
  CHECK(copy_seen_during_kernel.load());
  release.store(true);
  gpu.synchronize();
  float expected = 0;
  for (size_t i = 0; i < n; ++i) expected += static_cast<float>(i) + 0.25f;
  CHECK(sum == expected);
  CHECK(gpu.counters().copies_in == 1);
}
