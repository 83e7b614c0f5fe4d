// A weight's bf16 copy (Note [a weight's bf16 copy] in core/bf16_copy.h): the host's
// optimizer writes each updated weight's bf16 rounding beside it, and a bf16 layer on the
// cpu (linear, multi_head_attention) reads that copy instead of casting the weight again. Training that way gives the
// bits of casting at every step, and a weight changed any other way is cast again.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include "backends/cpu/cpu_precision.h"
#include "core/bfloat16.h"
#include "graph/load_graph.h"
#include "runtime/trainer.h"
#include "unit_test_support.h"

using namespace tandem;
using tandem::testing::seeded_rng;

namespace {

std::string model_yaml(const std::string& optimizer) {
  return "name: copied\n"
         "precision: bf16\n"
         "inputs:\n"
         "  x: {shape: [batch, 4, 48]}\n"
         "targets:\n"
         "  y: {shape: [batch, 4, 8]}\n"
         "layers:\n"
         "  - {name: att, op: multi_head_attention, embed_dim: 48, num_heads: 4, batch_first: true}\n"
         "  - {name: fc1, op: linear, in_features: 48, out_features: 64}\n"
         "  - {name: act, op: relu}\n"
         "  - {name: fc2, op: linear, in_features: 64, out_features: 8}\n"
         "loss: {op: mse_loss, input: fc2, target: y}\n"
         "train:\n"
         "  batch: 16\n"
         "  optimizer: " + optimizer + "\n";
}

Model load_model(const std::string& optimizer, uint64_t seed) {
  Model m(load_graph_from_string(model_yaml(optimizer), "copied.yaml"));
  m.init_parameters(seed);
  return m;
}

TensorMap random_batch(std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Tensor x = Tensor::empty({16, 4, 48}, DType::float32), y = Tensor::empty({16, 4, 8}, DType::float32);
  for (float& v : x.span<float>()) v = normal(rng);
  for (float& v : y.span<float>()) v = normal(rng);
  return {{"x", x}, {"y", y}};
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

/// The copies `m`'s weights keep, each checked to hold its weight's bf16 rounding.
int checked_copies(const Model& m) {
  int copies = 0;
  for (const auto& [name, p] : m.parameters()) {
    const Bf16Copy* copy = p.bf16_copy();
    if (copy == nullptr) continue;
    ++copies;
    INFO(name);
    REQUIRE(copy->size() == static_cast<size_t>(p.numel()));
    size_t wrong = 0;
    for (int64_t i = 0; i < p.numel(); ++i) wrong += copy->data()[i] != float_to_bf16(p.data<float>()[i]);
    CHECK(wrong == 0);
  }
  return copies;
}

}  // namespace

TEST_CASE("bf16 training reads the copies its optimizer writes, with the bits of casting each step", "[precision][bf16]") {
  if (!cpu::cpu_has_bf16()) {
    WARN("this CPU lacks avx512_bf16: bf16 layers run fp32 and keep no copies");
    return;
  }
  std::mt19937_64 rng = seeded_rng("bf16 copies");
  const uint64_t seed = rng() % 1000;
  for (const std::string optimizer : {"{name: adam, lr: 0.01}", "{name: sgd, lr: 0.05, momentum: 0.9}"}) {
    INFO(optimizer);
    Model copied = load_model(optimizer, seed), cast = load_model(optimizer, seed);
    Trainer with_copies(copied, copied.graph().training.value()), casting(cast, cast.graph().training.value());
    for (int step = 0; step < 6; ++step) {
      INFO("step " << step + 1);
      const TensorMap batch = random_batch(rng);
      CHECK(with_copies.step(batch) == casting.step(batch));
      // written in place, not by the optimizer: every layer of `cast` casts its weight again
      TensorMap same;
      for (const auto& [name, p] : cast.parameters()) same.emplace(name, p.clone());
      cast.set_weights(same);
    }
    for (const auto& [name, p] : copied.parameters()) {
      INFO(name);
      CHECK(same_bits(p, cast.parameters().at(name)));
    }
    // the attention's two projections, fc1's and fc2's weights (the biases stay fp32)
    CHECK(checked_copies(copied) == 4);
  }
}

TEST_CASE("a weight changed other than by the optimizer is cast again, not read from its old copy", "[precision][bf16]") {
  if (!cpu::cpu_has_bf16()) {
    WARN("this CPU lacks avx512_bf16: bf16 layers run fp32 and keep no copies");
    return;
  }
  std::mt19937_64 rng = seeded_rng("bf16 copies, other writes");
  const std::string sgd = "{name: sgd, lr: 0.05}";  // no state: a step depends on the weights alone
  Model m = load_model(sgd, rng() % 1000);
  Trainer trainer(m, m.graph().training.value());
  const TensorMap batch = random_batch(rng);
  trainer.step(batch);
  trainer.step(batch);  // the copies now hold what the optimizer wrote
  // new weights, loaded: what follows must read them, as a model that never trained does
  Model fresh = load_model(sgd, rng() % 1000 + 1000);
  Trainer fresh_trainer(fresh, fresh.graph().training.value());
  m.set_weights(fresh.parameters());
  const TensorMap inputs{{"x", batch.at("x")}};
  CHECK(same_bits(m.forward(inputs).at("fc2"), fresh.forward(inputs).at("fc2")));
  const TensorMap next = random_batch(rng);
  CHECK(trainer.step(next) == fresh_trainer.step(next));
  for (const auto& [name, p] : m.parameters()) {
    INFO(name);
    CHECK(same_bits(p, fresh.parameters().at(name)));
  }
  CHECK(checked_copies(m) == 4);
}

TEST_CASE("a bf16 copy holds a version only once stamped: by a cast, or by the bump that follows its rewrite", "[precision][bf16]") {
  Tensor w = Tensor::empty({3, 5}, DType::float32);
  REQUIRE(w.bf16_copy() == nullptr);  // none until a kernel asks
  Bf16Copy* copy = w.bf16_copy(/*make=*/true);
  REQUIRE(copy != nullptr);
  CHECK(w.bf16_copy() == copy);
  CHECK(copy->size() == 15);
  CHECK_FALSE(copy->current(0));
  copy->made_at(4);
  CHECK(copy->current(4));
  CHECK_FALSE(copy->current(5));
  copy->version_bumped(5);  // a change it was not told of: it stays at 4
  CHECK_FALSE(copy->current(5));
  copy->rewritten();  // the optimizer wrote the update's values: no version until the bump
  CHECK_FALSE(copy->current(4));
  CHECK_FALSE(copy->current(5));
  copy->version_bumped(6);
  CHECK(copy->current(6));
  // a view, a part or a non-float tensor has no copy of its own
  CHECK(w.view({15}).bf16_copy() == copy);
  CHECK(Tensor::from_storage(w.storage(), {5}, DType::float32, 20).bf16_copy() == nullptr);
  CHECK(Tensor::from_storage(w.storage(), {2, 5}, DType::float32).bf16_copy() == nullptr);
  CHECK(Tensor::empty({4}, DType::int64).bf16_copy(true) == nullptr);
}
