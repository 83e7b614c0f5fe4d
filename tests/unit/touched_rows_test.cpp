// Row-sparse training of embedding tables (core/touched_rows.h): a step zeroes and updates
// only the rows its batch looked up, which the tests see through the mechanism (the rows a
// backward records, a NaN planted in a row nobody looks up that nothing may read or clear),
// never through timing; and the result is the dense step's, bit for bit, for every
// optimizer.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <set>

#include "graph/load_graph.h"
#include "unit_test_support.h"
#include "runtime/trainer.h"

using namespace tandem;
using tandem::testing::seeded_rng;

namespace {

/// Two tables (a bag table with padding row 0, a plain embedding) and a dense branch, as a
/// small recommender: bag [batch, 3] ids, word [batch] ids, dense [batch, 5] -> a click logit.
/// The tables feed the head linearly, so every row looked up gets a non-zero gradient.
std::string recommender_yaml(int64_t table_rows) {
  return "name: sparse_tables\n"
         "inputs:\n"
         "  dense: {shape: [batch, 5]}\n"
         "  ids: {shape: [batch, 3], dtype: int64}\n"
         "  word: {shape: [batch], dtype: int64}\n"
         "targets:\n"
         "  y: {shape: [batch, 1]}\n"
         "layers:\n"
         "  - {name: bag, op: embedding_bag, inputs: ids, num_embeddings: " + std::to_string(table_rows) +
         ", embedding_dim: 8, mode: sum, padding_idx: 0}\n"
         "  - {name: emb, op: embedding, inputs: word, num_embeddings: 50, embedding_dim: 8}\n"
         "  - {name: fc_in, op: linear, in_features: 5, out_features: 8, inputs: dense}\n"
         "  - {name: act, op: relu}\n"
         "  - {name: both, op: cat, inputs: [bag, emb, act], dim: 1}\n"
         "  - {name: head, op: linear, in_features: 24, out_features: 1}\n"
         "loss: {op: binary_cross_entropy_with_logits, input: head, target: y}\n";
}

TensorMap random_batch(int64_t batch, int64_t table_rows, std::mt19937_64& rng) {
  Tensor dense = Tensor::empty({batch, 5}, DType::float32), ids = Tensor::empty({batch, 3}, DType::int64);
  Tensor word = Tensor::empty({batch}, DType::int64), y = Tensor::empty({batch, 1}, DType::float32);
  std::normal_distribution<float> normal(0, 1);
  for (float& x : dense.span<float>()) x = normal(rng);
  // a few padding entries (row 0), the rest anywhere in the table
  for (int64_t& i : ids.span<int64_t>()) i = rng() % 5 == 0 ? 0 : static_cast<int64_t>(rng() % table_rows);
  for (int64_t& i : word.span<int64_t>()) i = static_cast<int64_t>(rng() % 50);
  for (float& x : y.span<float>()) x = static_cast<float>(rng() % 2);
  return {{"dense", dense}, {"ids", ids}, {"word", word}, {"y", y}};
}

std::set<int64_t> distinct(const Tensor& ids, int64_t skip = -1) {
  std::set<int64_t> out;
  for (int64_t i : ids.span<int64_t>())
    if (i != skip) out.insert(i);
  return out;
}

float* row(const Tensor& t, int64_t r) { return t.data<float>() + r * t.size(1); }

}  // namespace

TEST_CASE("a step on a million-row table zeroes and updates only the rows its batch looked up",
          "[train][touched_rows]") {
  auto rng = seeded_rng("million-row table");
  const int64_t rows = 1'000'000, batch = 16;
  Model model(load_graph_from_string(recommender_yaml(rows), "sparse_tables.yaml"));
  model.init_parameters(rng() % 1000);
  TrainingSpec spec;
  spec.batch = batch;
  spec.optimizer.lr = 0.5;
  spec.clip_grad_norm = 0.1;  // clips: the norm and the scaling run over the touched rows too
  Trainer trainer(model, spec);
  TensorMap first = random_batch(batch, rows, rng);
  std::set<int64_t> looked_up = distinct(first.at("ids"), /*padding*/ 0);

  // A NaN in the gradient of a row no batch looks up: zeroing the whole gradient would clear
  // it, a dense update would spread it into the weight. Neither may happen. (Clipping may
  // read it, when a looked-up row shares its kNormBlock-element block of the exact norm's sum:
  // then it does not clip, which the checks below do not depend on.)
  int64_t untouched = 1 + static_cast<int64_t>(rng() % (rows - 1));
  while (looked_up.count(untouched)) untouched = 1 + (untouched % (rows - 1));
  const Tensor& grad = model.gradients().at("bag.weight");
  const Tensor& weight = model.parameters().at("bag.weight");
  row(grad, untouched)[3] = std::nanf("");
  const std::vector<float> untouched_before(row(weight, untouched), row(weight, untouched) + 8);
  Tensor before = weight.clone();

  trainer.step(first);

  TouchedRows& bag_rows = model.gradient_rows().at("bag.weight");
  CHECK_FALSE(bag_rows.all());
  CHECK(bag_rows.count() == static_cast<int64_t>(looked_up.size()));  // padding row 0 gets nothing
  CHECK(std::set<int64_t>(bag_rows.list().begin(), bag_rows.list().end()) == looked_up);
  CHECK(model.gradient_rows().at("emb.weight").count() == static_cast<int64_t>(distinct(first.at("word")).size()));
  CHECK(model.gradient_rows().at("fc_in.weight").all());  // a linear layer writes all of its gradient
  CHECK(std::isnan(row(grad, untouched)[3]));
  CHECK(std::vector<float>(row(weight, untouched), row(weight, untouched) + 8) == untouched_before);
  CHECK(std::memcmp(row(weight, 0), row(before, 0), 8 * sizeof(float)) == 0);  // padding: unchanged
  for (int64_t r : looked_up) {
    INFO("row " << r);
    CHECK(std::memcmp(row(weight, r), row(before, r), 8 * sizeof(float)) != 0);
  }

  // the next step's zeroing clears the first batch's rows, and those alone
  model.zero_gradients();
  CHECK(bag_rows.count() == 0);
  for (int64_t r : looked_up)
    for (int64_t d = 0; d < 8; ++d) CHECK(row(grad, r)[d] == 0.0f);
  CHECK(std::isnan(row(grad, untouched)[3]));
  row(grad, untouched)[3] = 0.0f;
}

TEST_CASE("row-sparse training steps end with the dense steps' weights bit for bit", "[train][touched_rows]") {
  auto rng = seeded_rng("sparse equals dense");
  const int64_t rows = 3000;
  OptimizerConfig sgd;
  sgd.lr = 0.3;
  OptimizerConfig momentum = sgd;
  momentum.momentum = 0.9;
  momentum.weight_decay = 1e-3;
  OptimizerConfig adam;
  adam.name = "adam";
  adam.lr = 1e-2;
  struct Case {
    OptimizerConfig optimizer;
    std::optional<double> clip;
  } cases[] = {{sgd, std::nullopt}, {sgd, 0.05}, {momentum, 0.05}, {adam, std::nullopt}};
  for (const Case& c : cases) {
    INFO(c.optimizer.name << " momentum " << c.optimizer.momentum << (c.clip ? " clipped" : ""));
    const uint64_t seed = rng() % 1000;
    Model sparse(load_graph_from_string(recommender_yaml(rows), "sparse_tables.yaml"));
    Model dense(load_graph_from_string(recommender_yaml(rows), "sparse_tables.yaml"));
    sparse.init_parameters(seed);
    dense.init_parameters(seed);
    TrainingSpec spec;
    spec.optimizer = c.optimizer;
    spec.clip_grad_norm = c.clip;
    Trainer trainer(sparse, spec);
    // the dense reference: torch's zero_grad / backward / clip / step over whole tensors
    auto optimizer = make_optimizer(c.optimizer);
    std::vector<Tensor> params, grads;
    for (const auto& [name, g] : dense.gradients()) {
      params.push_back(dense.parameters().at(name));
      grads.push_back(g);
    }
    for (int step = 0; step < 6; ++step) {
      TensorMap batch = random_batch(4 + static_cast<int64_t>(rng() % 20), rows, rng);
      trainer.step(batch);
      for (Tensor& g : grads) std::memset(g.raw_data(), 0, g.nbytes());
      dense.loss_and_backward(batch, 0);
      if (c.clip) clip_grad_norm(grads, *c.clip);
      optimizer->step(params, grads, c.optimizer.lr);
      dense.parameters_changed();
    }
    for (const auto& [name, p] : dense.parameters()) {
      INFO(name);
      const Tensor& q = sparse.parameters().at(name);
      CHECK(std::memcmp(p.raw_data(), q.raw_data(), p.nbytes()) == 0);
    }
  }
}
