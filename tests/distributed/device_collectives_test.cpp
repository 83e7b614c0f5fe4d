// A simulated GPU's communicator between processes (backends/sim/sim_inter_process.h) on its
// own, under mpirun: what NCCL's is to a real GPU, with the runtime's MPI transport handed in.
// Training through it is distributed_training_test.cpp's; its deadline ending a job,
// test_distributed_cli.py's.
#include <catch2/catch.hpp>

#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "backends/sim/sim_gpu.h"
#include "core/error.h"
#include "runtime/distributed/device_collectives.h"
#include "runtime/distributed/process_group.h"

using namespace tandem;

namespace {

std::shared_ptr<ProcessGroup> group() {
  static std::shared_ptr<ProcessGroup> g = ProcessGroup::from_environment(std::chrono::seconds(60));
  return g;
}

/// Every rank's copy of `mine`'s bytes, in rank order.
std::vector<std::vector<float>> every_ranks(const Tensor& mine, const std::string& what) {
  std::string bytes(mine.nbytes(), '\0');
  std::memcpy(bytes.data(), mine.raw_data(), bytes.size());
  std::vector<std::vector<float>> out;
  for (const std::string& theirs : group()->all_gather(bytes, what)) {
    out.emplace_back(theirs.size() / sizeof(float));
    std::memcpy(out.back().data(), theirs.data(), theirs.size());
  }
  return out;
}

/// A communicator of `gpu` joined with `id` (rank 0's unless told otherwise).
std::unique_ptr<InterProcessCommunicator> join(SimGpu& gpu, const std::string& id) {
  InterProcessSetup setup;
  setup.rank = group()->rank();
  setup.size = group()->size();
  setup.id = id;
  setup.timeout = std::chrono::seconds(30);
  setup.transport = make_host_transport(*group(), "the test's channel");
  REQUIRE(setup.transport);
  return gpu.join_inter_process(setup);
}

}  // namespace

TEST_CASE("a simulated GPU's communicator sums a bucket and broadcasts between the processes",
          "[distributed][device]") {
  ProcessGroup& g = *group();
  uint64_t seed = std::random_device{}() % 100000;
  g.broadcast(&seed, sizeof seed, 0, "the test's seed");
  if (g.rank() == 0) std::cout << "sim communicator: seed " << seed << "\n";
  SimGpu gpu(0, size_t{1} << 20);
  std::string id = g.rank() == 0 ? gpu.make_inter_process_id() : std::string();
  g.broadcast(id, 0, "the test's communicator id");
  std::unique_ptr<InterProcessCommunicator> communicator = join(gpu, id);
  REQUIRE(communicator);
  CHECK(communicator->rank() == g.rank());
  CHECK(communicator->size() == g.size());

  // a bucket of two tensors and one to broadcast, each rank's own values
  std::mt19937 random(static_cast<uint32_t>(seed) + static_cast<uint32_t>(g.rank()));
  std::normal_distribution<float> normal;
  std::vector<Tensor> bucket{Tensor::empty({5}, DType::float32, gpu.allocator()),
                             Tensor::empty({3, 4}, DType::float32, gpu.allocator())};
  Tensor sent = Tensor::empty({7}, DType::float32, gpu.allocator());
  for (const Tensor& t : {bucket[0], bucket[1], sent})
    for (float& v : t.span<float>()) v = normal(random);
  std::vector<std::vector<std::vector<float>>> before;
  for (const Tensor& t : bucket) before.push_back(every_ranks(t, "the test's bucket values"));
  const std::vector<std::vector<float>> sent_before = every_ranks(sent, "the test's broadcast values");

  Lane& lane = gpu.lane(LaneKind::compute);
  communicator->all_reduce_sum(lane, bucket, "the test's all-reduce");
  const int root = g.size() - 1;
  communicator->broadcast(lane, sent, root, "the test's broadcast");
  gpu.synchronize();
  CHECK(communicator->error().empty());

  for (size_t k = 0; k < bucket.size(); ++k) {
    auto got = bucket[k].span<float>();
    for (size_t e = 0; e < got.size(); ++e) {
      double sum = 0;
      for (const std::vector<float>& rank_values : before[k]) sum += rank_values[e];
      CHECK(got[e] == Approx(sum).epsilon(1e-6).margin(1e-6));
    }
    // every rank holds the same bits
    for (const std::vector<float>& theirs : every_ranks(bucket[k], "the test's sums"))
      CHECK(std::memcmp(theirs.data(), got.data(), got.size_bytes()) == 0);
  }
  auto received = sent.span<float>();
  CHECK(std::memcmp(received.data(), sent_before[static_cast<size_t>(root)].data(), received.size_bytes()) == 0);
  const InterProcessCommunicator::Counters counters = communicator->counters();
  CHECK(counters.collectives == 2);
  CHECK(counters.bytes == (5 + 12 + 7) * sizeof(float));
}

TEST_CASE("a rank that joins with another id than rank 0 made is refused, naming its device and rank",
          "[distributed][device]") {
  ProcessGroup& g = *group();
  SimGpu gpu(0, size_t{1} << 20);
  // every rank makes its own id: rank 0's is the one that counts
  const std::string mine = gpu.make_inter_process_id();
  if (g.rank() == 0) {
    CHECK(join(gpu, mine) != nullptr);
  } else {
    try {
      join(gpu, mine);
      FAIL("joined with another id than rank 0's");
    } catch (const UserError& e) {
      const std::string message = e.what();
      CHECK(message.find("cuda:0 of rank " + std::to_string(g.rank())) != std::string::npos);
      CHECK(message.find("joined with another communicator id than rank 0 made") != std::string::npos);
    }
  }
  // an id that is no simulated GPU's (NCCL's 128 bytes) is refused by every rank alike
  try {
    join(gpu, std::string(128, '\x07'));
    FAIL("joined with an id of another kind");
  } catch (const UserError& e) {
    CHECK(std::string(e.what()).find("is not a simulated GPU's") != std::string::npos);
  }
  g.barrier("the end of the test");
}
