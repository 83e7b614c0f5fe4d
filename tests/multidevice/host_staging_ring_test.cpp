// The host staging ring: regions reused in order, a reused region waits for its last
// readers' event, batches lie in one piece, growing starts a fresh buffer.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "backends/host_lanes.h"
#include "runtime/params/host_staging_ring.h"

using namespace tandem;

namespace {

// An event that is reached only once `release` is set (on an engine of its own, since its
// task holds the engine's compute thread until then).
struct Gate {
  std::atomic<bool> release{false};
  HostLaneEngine engine;
  HostLane queue{"gate", HostLaneEngine::Lane::compute, engine};
  DeviceEvent event;
  Gate() {
    queue.submit([this] {
      while (!release.load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    });
    event = queue.record();
  }
  ~Gate() {
    release = true;
    queue.synchronize();
  }
  void open() {
    release = true;
    queue.synchronize();
  }
};

const char* base_of(const HostStagingRing::Region& r) { return static_cast<const char*>(r.tensor.storage()->data()); }

size_t offset_of(const HostStagingRing::Region& r) {
  return static_cast<size_t>(static_cast<const char*>(r.tensor.raw_data()) - base_of(r));
}

}  // namespace

TEST_CASE("the staging ring reuses its regions in order, each after its readers", "[multidevice][staging]") {
  HostStagingRing ring;
  ring.reserve(1024);
  const Shape quarter{64};  // 256 bytes
  REQUIRE(HostStagingRing::bytes_for(quarter) == 256);

  Gate first, second;
  ring.start(512);
  auto a = ring.take(quarter), b = ring.take(quarter);
  CHECK(offset_of(a) == 0);
  CHECK(offset_of(b) == 256);
  CHECK(a.free_after.empty());
  CHECK(b.free_after.empty());
  ring.release_after(first.event);

  ring.start(512);
  auto c = ring.take(Shape{128});  // 512 bytes, after a and b: nothing to wait for
  CHECK(offset_of(c) == 512);
  CHECK(c.free_after.empty());
  ring.release_after(second.event);

  // The next batch does not fit before the end: it starts over at 0, over a and b, whose
  // reader (first) has not run: it must wait for it.
  ring.start(256);
  auto d = ring.take(quarter);
  CHECK(offset_of(d) == 0);
  REQUIRE(d.free_after.size() == 1);
  CHECK_FALSE(d.free_after[0].done());
  CHECK(base_of(d) == base_of(a));  // the same buffer: the host holds no more
  first.open();
  CHECK(d.free_after[0].done());
  ring.release_after(DeviceEvent());  // read by nothing queued: free at once

  // b's region is next; its reader is done now, so nothing to wait for.
  ring.start(256);
  auto e = ring.take(quarter);
  CHECK(offset_of(e) == 256);
  CHECK(e.free_after.empty());
  ring.release_after(DeviceEvent());

  // c (512..1024) is still read until `second` opens.
  ring.start(512);
  auto f = ring.take(Shape{128});
  CHECK(offset_of(f) == 512);
  CHECK(f.free_after.size() == 1);
  ring.release_after(DeviceEvent());
  second.open();
}

TEST_CASE("a staging ring that grows starts a new buffer and waits for nothing", "[multidevice][staging]") {
  HostStagingRing ring;
  ring.reserve(256);
  Gate reader;
  ring.start(256);
  auto a = ring.take(Shape{64});
  ring.release_after(reader.event);
  ring.reserve(2048);
  CHECK(ring.capacity() == 2048);
  ring.start(2048);
  auto b = ring.take(Shape{512});
  CHECK(b.free_after.empty());  // a's old buffer lives on in a's tensor
  CHECK(base_of(b) != base_of(a));
  ring.release_after(DeviceEvent());
  ring.reserve(1024);  // never shrinks
  CHECK(ring.capacity() == 2048);
}
