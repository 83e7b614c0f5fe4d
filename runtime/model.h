// Model: the C++ API. Load a YAML model, set or initialise its weights, run forward on
// named tensors.
//
//   tandem::Model model = tandem::Model::load("configs/seed_mlp.yaml");
//   model.init_parameters(/*seed=*/0);           // or model.load_weights("w.safetensors")
//   tandem::TensorMap out = model.forward({{"x", x}});
//
// Errors a user can cause (bad file, wrong input shapes, bad weights) throw UserError.
// Not thread-safe: use one Model per thread.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "backends/cpu/cpu_context.h"
#include "graph/graph.h"
#include "graph/symbolic.h"
#include "placement/plan.h"

namespace tandem {

class CompiledForward;

class Model {
 public:
  /// Loads and validates a YAML model; parameters are initialised from seed 0.
  static Model load(const std::string& yaml_path);
  explicit Model(Graph graph);
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  const Graph& graph() const { return graph_; }
  const Plan& plan() const { return plan_; }

  /// Parameters by state_dict name ("encoder.0.fc.weight").
  const TensorMap& parameters() const { return params_; }
  /// Draws every parameter from the distribution PyTorch uses for its module.
  void init_parameters(uint64_t seed);
  /// Copies `weights` into the parameters. Every parameter must be there with its shape;
  /// a missing, extra or mis-shaped tensor is named in the UserError.
  void set_weights(const TensorMap& weights, const std::string& source = "weights");
  void load_weights(const std::string& safetensors_path);
  void save_weights(const std::string& safetensors_path) const;

  /// The symbol values these inputs imply, after checking names, dtypes and shapes.
  Bindings bind(const TensorMap& inputs) const;
  /// Random inputs for `bindings` (float: N(0, 1); indices within the consuming table;
  /// offsets sorted from 0).
  TensorMap random_inputs(const Bindings& bindings, uint64_t seed) const;
  /// Inference: outputs by output name.
  TensorMap forward(const TensorMap& inputs);

  /// How many oneDNN primitives were built so far (a repeated forward builds none).
  int64_t primitives_created() const { return cpu_->primitives_created(); }

 private:
  CompiledForward& compiled_for(const Bindings& bindings);

  Graph graph_;
  Plan plan_;
  TensorMap params_;
  uint64_t params_version_ = 0;
  std::unique_ptr<CpuContext> cpu_;
  std::map<Bindings, std::unique_ptr<CompiledForward>> compiled_;
};

}  // namespace tandem
