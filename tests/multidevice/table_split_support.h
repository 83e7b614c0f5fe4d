// What the tests of a split recommender share (tables on the cpu, the rest on a simulated
// GPU or the cpu): its model, its batches, and bit-for-bit comparisons of weights.
#pragma once

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/model.h"

namespace tandem::testing {

/// Writes `text` to a file of this process in the temp directory; its path.
inline std::string write_temp_file(const std::string& name, const std::string& text) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("tandem_tables_" + std::to_string(getpid()) + "_" + name)).string();
  std::ofstream(path) << text;
  return path;
}

/// The inputs and targets of the model below: dense features, fixed bags of item ids, flat
/// tag ids with offsets, a user id; a class label.
inline constexpr const char* kTableInputs = R"(inputs:
  dense: {shape: [batch, 6]}
  item_ids: {shape: [batch, 4], dtype: int64}
  tag_ids: {shape: [tags], dtype: int64}
  tag_offsets: {shape: [batch], dtype: int64}
  user: {shape: [batch], dtype: int64}
targets:
  label: {shape: [batch], dtype: int64}
)";

/// A recommender's shape, written to `name`.yaml: four small tables on the cpu
/// (embedding_bags of sum, mean with offsets and max, an embedding with a padding_idx: 25 to
/// 40 rows, so a batch repeats ids and consecutive batches share rows), each with
/// `table_options` (", sparse: true"), the dense layers on `mlp_device`; `train:` as given.
inline std::string table_split_yaml(const std::string& name, const std::string& table_options,
                                    const std::string& mlp_device, const std::string& train) {
  const std::string on = "device: \"" + mlp_device + "\"}\n";
  return write_temp_file(
      name + ".yaml",
      "name: " + name + "\n" + kTableInputs + "layers:\n" +
          "  - {name: items, op: embedding_bag, inputs: item_ids, num_embeddings: 40, embedding_dim: 8, mode: sum, "
          "device: cpu" + table_options + "}\n" +
          "  - {name: tags, op: embedding_bag, inputs: [tag_ids, tag_offsets], num_embeddings: 30, embedding_dim: 8, "
          "mode: mean, device: cpu" + table_options + "}\n" +
          "  - {name: users, op: embedding, inputs: user, num_embeddings: 25, embedding_dim: 8, padding_idx: 0, "
          "device: cpu" + table_options + "}\n" +
          "  - {name: shops, op: embedding_bag, inputs: item_ids, num_embeddings: 40, embedding_dim: 8, mode: max, "
          "device: cpu" + table_options + "}\n" +
          "  - {name: bottom, op: linear, inputs: dense, in_features: 6, out_features: 8, " + on +
          "  - {name: features, op: cat, inputs: [bottom, items, tags, users, shops], dim: 1, " + on +
          "  - {name: fc1, op: linear, in_features: 40, out_features: 16, " + on +  //
          "  - {name: act, op: relu, " + on +                                        //
          "  - {name: fc2, op: linear, in_features: 16, out_features: 3, " + on +
          "loss: {op: cross_entropy, input: fc2, target: label}\ntrain:\n" + train);
}

/// A batch of 24 samples (60 tag ids) drawn from `seed`, with targets.
inline TensorMap table_split_batch(Model& model, uint64_t seed) {
  Bindings b{{"batch", 24}, {"tags", 60}};
  TensorMap data = model.random_inputs(b, seed);
  data.merge(model.random_targets(b, seed));
  return data;
}

/// Copies of `tensors`' bits.
inline TensorMap bit_copy(const TensorMap& tensors) {
  TensorMap out;
  for (const auto& [name, t] : tensors) out.emplace(name, t.clone());
  return out;
}

/// Whether `a` and `b` hold the same tensors with the same bits.
inline void check_same_bits(const TensorMap& a, const TensorMap& b) {
  REQUIRE(a.size() == b.size());
  for (const auto& [name, t] : a) {
    INFO("tensor " << name);
    const Tensor& u = b.at(name);
    REQUIRE(t.shape() == u.shape());
    CHECK(std::memcmp(t.raw_data(), u.raw_data(), t.nbytes()) == 0);
  }
}

}  // namespace tandem::testing
