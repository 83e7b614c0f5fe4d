// Collectives among the ranks of a job, run by ctest under `mpirun --oversubscribe -np N`:
// every rank runs these tests in the same order (they call collectives together).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/distributed/gradient_reducer.h"
#include "runtime/distributed/process_group.h"

using namespace tandem;

namespace {

ProcessGroup& group() {
  static std::shared_ptr<ProcessGroup> g = ProcessGroup::from_environment(std::chrono::seconds(60));
  return *g;
}

}  // namespace

TEST_CASE("the job's ranks come from mpirun", "[distributed]") {
  REQUIRE(launched_by_mpirun());
  const int size = group().size();
  CHECK(size >= 2);
  CHECK(group().rank() >= 0);
  CHECK(group().rank() < size);
  std::vector<std::string> ranks = group().all_gather(std::to_string(group().rank()), "the ranks");
  REQUIRE(ranks.size() == static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) CHECK(ranks[static_cast<size_t>(r)] == std::to_string(r));
}

TEST_CASE("all-reduce sums every rank's values, broadcast copies the root's", "[distributed]") {
  const int rank = group().rank(), size = group().size();
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(rank + 1) * 0.5f + static_cast<float>(i);
  group().all_reduce_sum(x.data(), static_cast<int64_t>(x.size()), "a test all-reduce");
  const float ranks_sum = static_cast<float>(size * (size + 1)) * 0.25f;  // sum of (r + 1) / 2
  for (size_t i = 0; i < x.size(); ++i) CHECK(x[i] == Approx(ranks_sum + static_cast<float>(size) * static_cast<float>(i)));
  double d[2] = {static_cast<double>(rank), 1.0};
  group().all_reduce_sum(d, 2, "a double all-reduce");
  CHECK(d[0] == size * (size - 1) / 2.0);
  CHECK(d[1] == size);
  std::vector<int64_t> word{rank == 1 ? 42 : -1, rank == 1 ? 7 : -1};
  group().broadcast(word.data(), word.size() * sizeof(int64_t), 1, "a test broadcast");
  CHECK(word == std::vector<int64_t>{42, 7});
}

TEST_CASE("the gradient reducer averages every gradient over the ranks, in buckets", "[distributed]") {
  const int rank = group().rank(), size = group().size();
  // reverse layer order: the head's gradients complete first
  std::vector<std::pair<std::string, Tensor>> grads;
  for (const auto& [name, n] : std::vector<std::pair<std::string, int64_t>>{
           {"head.bias", 10}, {"head.weight", 300000}, {"body.bias", 64}, {"body.weight", 200000}})
    grads.emplace_back(name, Tensor::empty({n}, DType::float32));
  GradientReducerOptions options;
  options.first_bucket_bytes = 1 << 20;
  options.bucket_cap_bytes = 1 << 20;
  GradientReducer reducer(group(), grads, options);
  // a bucket closes when the next gradient would pass its cap
  CHECK(reducer.buckets() == std::vector<std::vector<std::string>>{{"head.bias"}, {"head.weight"},
                                                                    {"body.bias", "body.weight"}});
  for (int backward = 0; backward < 3; ++backward) {
    reducer.start();
    for (auto& [name, g] : grads) {
      float* p = g.data<float>();
      for (int64_t i = 0; i < g.numel(); ++i) p[i] = static_cast<float>((rank + 1) * (i % 13) + backward);
      reducer.ready(name);
      reducer.progress();
    }
    reducer.finish();
    const float mean_rank = static_cast<float>(size + 1) / 2.0f;
    for (auto& [name, g] : grads) {
      const float* p = g.data<float>();
      for (int64_t i = 0; i < g.numel(); i += 997) {
        INFO(name << "[" << i << "] after backward " << backward);
        CHECK(p[i] == Approx(mean_rank * static_cast<float>(i % 13) + static_cast<float>(backward)));
      }
    }
  }
  // a gradient nobody completed is named
  reducer.start();
  for (size_t k = 0; k + 1 < grads.size(); ++k) reducer.ready(grads[k].first);
  CHECK_THROWS_WITH(reducer.finish(), Catch::Contains("'body.weight'") && Catch::Contains("find_unused_parameters"));
  // and with find_unused_parameters counts as zero on that rank
  options.find_unused_parameters = true;
  GradientReducer lenient(group(), grads, options);
  lenient.start();
  for (size_t k = 0; k < grads.size(); ++k)
    if (rank != 0 || k + 1 < grads.size()) {
      float* p = grads[k].second.data<float>();
      for (int64_t i = 0; i < grads[k].second.numel(); ++i) p[i] = 1.0f;
      lenient.ready(grads[k].first);
    }
  lenient.finish();
  CHECK(grads.back().second.data<float>()[5] == Approx(static_cast<float>(size - 1) / static_cast<float>(size)));
}

TEST_CASE("bf16-compressed buckets give every rank the same mean, within bf16's rounding", "[distributed]") {
  const int rank = group().rank(), size = group().size();
  uint64_t seed = std::random_device{}() % 100000;
  group().broadcast(&seed, sizeof seed, 0, "the test's seed");
  INFO("seed " << seed);
  // every rank's gradient, drawn from its own seed, so that each can compute the exact mean
  auto drawn = [&](int r, int64_t n) {
    std::mt19937_64 rng(seed * 31 + static_cast<uint64_t>(r));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = normal(rng) * (r % 2 ? 3.0f : 0.01f);  // ranks of other scales
    return v;
  };
  std::vector<std::pair<std::string, Tensor>> grads;
  for (const auto& [name, n] : std::vector<std::pair<std::string, int64_t>>{{"head.bias", 7}, {"head.weight", 5000}})
    grads.emplace_back(name, Tensor::empty({n}, DType::float32));
  GradientReducerOptions options;
  options.compress_bf16 = true;
  options.first_bucket_bytes = 64;  // two buckets
  GradientReducer reducer(group(), grads, options);
  reducer.start();
  for (auto& [name, g] : grads) {
    const std::vector<float> mine = drawn(rank, g.numel());
    std::copy(mine.begin(), mine.end(), g.data<float>());
    reducer.ready(name);
  }
  reducer.finish();
  std::string bits;
  for (auto& [name, g] : grads) {
    std::vector<double> mean(static_cast<size_t>(g.numel())), magnitude(mean.size());
    for (int r = 0; r < size; ++r) {
      const std::vector<float> theirs = drawn(r, g.numel());
      for (size_t i = 0; i < mean.size(); ++i) {
        mean[i] += theirs[i] / static_cast<double>(size);
        magnitude[i] += std::fabs(theirs[i]) / static_cast<double>(size);
      }
    }
    const float* got = g.data<float>();
    for (size_t i = 0; i < mean.size(); ++i) {
      INFO(name << "[" << i << "]");
      // each share rounded once and each of the N - 1 partial sums once, each by at most
      // 2^-8 of what it rounds (bf16 keeps 8 significant bits): within 2^-8 N of the
      // shares' magnitudes
      CHECK(std::fabs(got[i] - mean[i]) <= std::ldexp(1.0, -8) * size * magnitude[i] + 1e-30);
      uint32_t word;
      std::memcpy(&word, &got[i], sizeof word);
      CHECK((word & 0xffffu) == 0);  // a bf16 value, widened
    }
    bits.append(reinterpret_cast<const char*>(got), static_cast<size_t>(g.nbytes()));
  }
  // the one result everywhere, or the ranks' weights would drift apart
  const std::vector<std::string> all = group().all_gather(bits, "the compressed means");
  for (int r = 1; r < size; ++r) CHECK(all[static_cast<size_t>(r)] == all[0]);
}
