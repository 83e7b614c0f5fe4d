// ROC AUC (runtime/roc_auc.h): sklearn's documented values, ties counted one half, an
// undefined AUC said, not crashed on; random sets against the pairwise definition.
// training_test.cpp checks `tandem train` reporting it.
#include <catch2/catch.hpp>

#include <cmath>
#include <iostream>
#include <random>

#include "runtime/roc_auc.h"

using namespace tandem;

namespace {

double auc_of(const std::vector<float>& scores, const std::vector<float>& labels) {
  RocAuc r = roc_auc(scores, labels);
  INFO(r.undefined);
  REQUIRE(r.value.has_value());
  return *r.value;
}

/// The definition: over every (positive, negative) pair, 1 if the positive scores higher,
/// 1/2 on a tie.
double pairwise_auc(const std::vector<float>& scores, const std::vector<float>& labels) {
  double wins = 0, pairs = 0;
  for (size_t i = 0; i < scores.size(); ++i)
    for (size_t j = 0; j < scores.size(); ++j)
      if (labels[i] == 1 && labels[j] == 0) {
        pairs += 1;
        wins += scores[i] > scores[j] ? 1.0 : scores[i] == scores[j] ? 0.5 : 0.0;
      }
  return wins / pairs;
}

}  // namespace

TEST_CASE("roc_auc gives sklearn's values, ties counting one half", "[metrics][auc]") {
  // sklearn.metrics.roc_auc_score's docstring example: 0.75
  CHECK(auc_of({0.1f, 0.4f, 0.35f, 0.8f}, {0, 0, 1, 1}) == 0.75);
  CHECK(auc_of({1, 2, 3, 4}, {0, 0, 1, 1}) == 1.0);
  CHECK(auc_of({4, 3, 2, 1}, {0, 0, 1, 1}) == 0.0);
  // every score tied: no ranking, 0.5; a positive tied with one of two negatives: (1 + 0.5) / 2
  CHECK(auc_of({0.5f, 0.5f, 0.5f, 0.5f}, {0, 1, 0, 1}) == 0.5);
  CHECK(auc_of({0.2f, 0.7f, 0.7f}, {0, 0, 1}) == 0.75);
  // logits work as well as probabilities: only the order counts
  CHECK(auc_of({-3.0f, 2.5f, -0.1f, 7.0f, -INFINITY}, {0, 1, 1, 0, 0}) == Approx(4.0 / 6.0));
}

TEST_CASE("roc_auc says why it is undefined instead of failing", "[metrics][auc]") {
  RocAuc ones = roc_auc(std::vector<float>{0.1f, 0.9f}, std::vector<float>{1, 1});
  CHECK_FALSE(ones.value);
  CHECK_THAT(ones.undefined, Catch::Contains("every target is 1"));
  RocAuc zeros = roc_auc(std::vector<float>{0.1f, 0.9f, 0.3f}, std::vector<float>{0, 0, 0});
  CHECK_FALSE(zeros.value);
  CHECK_THAT(zeros.undefined, Catch::Contains("every target is 0"));
  CHECK_THAT(roc_auc(std::vector<float>{}, std::vector<float>{}).undefined, Catch::Contains("no samples"));
  CHECK_THAT(roc_auc(std::vector<float>{0.1f, 0.9f}, std::vector<float>{0, 0.3f}).undefined,
             Catch::Contains("not all 0 or 1"));
  CHECK_THAT(roc_auc(std::vector<float>{NAN, 0.9f}, std::vector<float>{0, 1}).undefined, Catch::Contains("NaN"));
}

TEST_CASE("roc_auc of random sets equals the pairwise definition", "[metrics][auc]") {
  const uint64_t seed = std::random_device{}();
  std::cout << "roc_auc random sets: seed " << seed << "\n";
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 20; ++round) {
    const size_t n = 2 + rng() % 400;
    // coarse scores so that many tie, and a signal so that the AUC is not just 0.5
    std::vector<float> scores(n), labels(n);
    for (size_t i = 0; i < n; ++i) {
      labels[i] = static_cast<float>(rng() % 3 == 0);
      scores[i] = static_cast<float>(static_cast<int>(rng() % 8) + (labels[i] == 1 ? 2 : 0));
    }
    labels[0] = 0;
    labels[1] = 1;
    INFO("round " << round << ", " << n << " samples");
    CHECK(auc_of(scores, labels) == Approx(pairwise_auc(scores, labels)).epsilon(1e-12));
  }
}
