// BatchLoader: coverage per epoch, order per (seed, epoch) whatever the worker count,
// skipping, restarting epochs while workers run, and destruction mid-epoch.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <numeric>
#include <thread>

#include "runtime/data/dataset.h"
#include "tests/data/data_test_util.h"

using namespace tandem;
using namespace data_test;

namespace {

/// Sample i holds id i and x = [i, i + 0.5].
std::shared_ptr<const Dataset> ids(int64_t n) {
  std::vector<int64_t> id(static_cast<size_t>(n));
  std::iota(id.begin(), id.end(), int64_t{0});
  std::vector<float> x;
  for (int64_t i : id) {
    x.push_back(static_cast<float>(i));
    x.push_back(static_cast<float>(i) + 0.5f);
  }
  return std::make_shared<const Dataset>(
      TensorMap{{"id", Tensor::from_vector({n}, id)}, {"x", Tensor::from_vector({n, 2}, x)}});
}

/// The batches of one epoch as lists of ids, checking each batch's x against its ids.
std::vector<std::vector<int64_t>> epoch_ids(BatchLoader& loader, int64_t epoch, int64_t skip = 0) {
  loader.start_epoch(epoch, skip);
  std::vector<std::vector<int64_t>> out;
  while (auto batch = loader.next()) {
    std::vector<int64_t> id = batch->at("id").to_vector<int64_t>();
    std::vector<float> x = batch->at("x").to_vector<float>();
    REQUIRE(batch->at("x").shape() == Shape{static_cast<int64_t>(id.size()), 2});
    for (size_t i = 0; i < id.size(); ++i) {
      REQUIRE(x[2 * i] == static_cast<float>(id[i]));
      REQUIRE(x[2 * i + 1] == static_cast<float>(id[i]) + 0.5f);
    }
    out.push_back(std::move(id));
  }
  CHECK_FALSE(loader.next().has_value());  // stays at the end
  return out;
}

std::vector<int64_t> flatten(const std::vector<std::vector<int64_t>>& batches) {
  std::vector<int64_t> all;
  for (const auto& b : batches) all.insert(all.end(), b.begin(), b.end());
  return all;
}

}  // namespace

TEST_CASE("each epoch covers every sample once", "[loader]") {
  uint64_t seed = run_seed();
  INFO("seed " << seed);
  for (int64_t n : {1, 7, 100, 1797}) {
    for (int64_t batch : {1, 3, 32, 64, 2000}) {
      for (bool drop_last : {false, true}) {
        for (bool shuffle : {false, true}) {
          INFO("n " << n << " batch " << batch << " drop_last " << drop_last << " shuffle " << shuffle);
          BatchLoader loader(ids(n), batch, shuffle, drop_last, seed, 2);
          int64_t full = n / batch, rest = n % batch;
          int64_t expected_batches = drop_last ? full : full + (rest > 0);
          CHECK(loader.batches_per_epoch() == expected_batches);
          for (int64_t epoch : {0, 1}) {
            auto batches = epoch_ids(loader, epoch);
            REQUIRE(static_cast<int64_t>(batches.size()) == expected_batches);
            for (size_t b = 0; b < batches.size(); ++b) {
              bool last_partial = !drop_last && rest > 0 && b + 1 == batches.size();
              CHECK(static_cast<int64_t>(batches[b].size()) == (last_partial ? rest : batch));
            }
            std::vector<int64_t> all = flatten(batches);
            std::sort(all.begin(), all.end());
            CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());  // no sample twice
            if (!drop_last) CHECK(static_cast<int64_t>(all.size()) == n);
            if (drop_last) CHECK(static_cast<int64_t>(all.size()) == full * batch);
            if (!shuffle) {
              std::vector<int64_t> in_order = flatten(batches);
              CHECK(std::is_sorted(in_order.begin(), in_order.end()));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("order depends only on seed and epoch", "[loader]") {
  uint64_t seed = run_seed();
  INFO("seed " << seed);
  const int64_t n = 1000, batch = 37;
  auto data = ids(n);
  BatchLoader reference(data, batch, true, false, seed, 1);
  auto e0 = epoch_ids(reference, 0);
  auto e1 = epoch_ids(reference, 1);
  auto e5 = epoch_ids(reference, 5);
  CHECK(flatten(e0) != flatten(e1));
  CHECK(flatten(e1) != flatten(e5));
  for (int workers : {1, 2, 3}) {
    for (int prefetch : {1, 2, 4}) {
      INFO("workers " << workers << " prefetch " << prefetch);
      BatchLoader other(data, batch, true, false, seed, workers, prefetch);
      CHECK(epoch_ids(other, 5) == e5);  // straight to a later epoch, as a resumed run does
      CHECK(epoch_ids(other, 0) == e0);
      CHECK(epoch_ids(other, 1) == e1);
      CHECK(epoch_ids(other, 0) == e0);
    }
  }
  BatchLoader other_seed(data, batch, true, false, seed + 1, 2);
  CHECK(flatten(epoch_ids(other_seed, 0)) != flatten(e0));
}

TEST_CASE("skip_batches skips exactly the first batches", "[loader]") {
  uint64_t seed = run_seed();
  INFO("seed " << seed);
  auto data = ids(103);
  for (int workers : {1, 3}) {
    BatchLoader loader(data, 10, true, false, seed, workers);
    auto full = epoch_ids(loader, 2);
    REQUIRE(full.size() == 11);
    for (int64_t skip : {0, 1, 5, 10, 11, 50}) {
      INFO("workers " << workers << " skip " << skip);
      auto rest = epoch_ids(loader, 2, skip);
      std::vector<std::vector<int64_t>> expected(full.begin() + std::min<int64_t>(skip, 11), full.end());
      CHECK(rest == expected);
    }
  }
  BatchLoader loader(data, 10, true, false, seed);
  CHECK_THROWS_AS(loader.start_epoch(0, -1), UserError);
  CHECK_THROWS_AS(loader.start_epoch(-1), UserError);
}

TEST_CASE("start_epoch while workers are gathering restarts cleanly", "[loader]") {
  uint64_t seed = run_seed();
  INFO("seed " << seed);
  auto data = ids(5000);
  BatchLoader reference(data, 16, true, false, seed, 1);
  auto e3 = epoch_ids(reference, 3);
  for (int workers : {1, 2, 3}) {
    INFO("workers " << workers);
    BatchLoader loader(data, 16, true, false, seed, workers, 3);
    for (int round = 0; round < 50; ++round) {
      loader.start_epoch(round % 7);
      for (int k = 0; k < round % 4; ++k) REQUIRE(loader.next().has_value());
    }
    CHECK(epoch_ids(loader, 3) == e3);
  }
}

TEST_CASE("destroying a loader mid-epoch does not hang", "[loader]") {
  uint64_t seed = run_seed();
  auto data = ids(200000);
  for (int workers : {1, 2, 3}) {
    INFO("workers " << workers);
    std::promise<void> done;
    std::future<void> finished = done.get_future();
    auto start = std::chrono::steady_clock::now();
    // Detached so that a hang fails this test instead of blocking the whole run.
    std::thread([data, seed, workers, done = std::move(done)]() mutable {
      {
        BatchLoader loader(data, 20000, true, false, seed, workers, 4);
        loader.start_epoch(0);
        (void)loader.next();
        loader.start_epoch(1);  // and with workers mid-gather for the restarted epoch
      }
      {
        BatchLoader never_started(data, 100, true, false, seed, workers);
      }
      done.set_value();
    }).detach();
    bool ok = finished.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    INFO("took " << s << " s");
    REQUIRE(ok);
  }
}

TEST_CASE("loader arguments are checked", "[loader]") {
  auto data = ids(10);
  CHECK_THROWS_AS(BatchLoader(data, 0, true, false, 1), UserError);
  CHECK_THROWS_AS(BatchLoader(data, 4, true, false, 1, 0), UserError);
  CHECK_THROWS_AS(BatchLoader(data, 4, true, false, 1, 1, 0), UserError);
  CHECK_THROWS_AS(BatchLoader(nullptr, 4, true, false, 1), UserError);
  BatchLoader empty(std::make_shared<const Dataset>(), 4, true, false, 1);
  CHECK(empty.batches_per_epoch() == 0);
  empty.start_epoch(0);
  CHECK_FALSE(empty.next().has_value());
}
