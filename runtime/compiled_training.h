// CompiledTraining: a plan made runnable for training at one set of symbol values.
// Forward runs in training mode and keeps every tensor for backward; backward walks the
// steps in reverse, calling each kernel's backward. A tensor read by several layers sums
// their gradients; parameter gradients accumulate across calls until zeroed.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_context.h"
#include "backends/kernel.h"
#include "graph/graph.h"
#include "graph/symbolic.h"
#include "placement/plan.h"

namespace tandem {

/// Not thread-safe. Holds references to the graph, parameters and gradients, which must
/// outlive it; their storage must not change (values may).
class CompiledTraining {
 public:
  /// `param_grads` by parameter name, shaped like the parameters. With `input_grads`,
  /// backward also yields gradients of the float graph inputs. `seedable`: the tensors
  /// whose gradient the caller may write before backward (outputs, the loss's input).
  CompiledTraining(const Graph& graph, const Plan& plan, const Bindings& bindings, CpuContext& cpu,
                   const TensorMap& params, const TensorMap& param_grads, bool input_grads,
                   const std::vector<int>& seedable);

  /// Inputs in graph-input order. In training mode dropout draws from `seed`; out of it
  /// (evaluation) it is the identity, and there is nothing to backward.
  void forward(const std::vector<Tensor>& inputs, uint64_t seed, uint64_t params_version, bool training = true);
  /// A tensor of the last forward (valid until the next one).
  const Tensor& value(int value_id) const { return values_[value_id]; }
  /// The gradient buffer of a tensor, for the caller to write a seed into (loss).
  Tensor& gradient_buffer(int value_id);
  /// Backward from the seeds written into gradient_buffer() of `seeded` values.
  void backward(const std::vector<int>& seeded);
  /// After backward: dLoss/dInput for graph input `index` (undefined if not requested).
  Tensor input_gradient(size_t index) const;

 private:
  struct Step {
    const Node* node = nullptr;
    std::unique_ptr<Kernel> kernel;  // null for views
    std::vector<Tensor> params, param_grads;
    std::vector<Tensor> scratch;     // per input: where a second contribution is written before it is summed
  };

  // Gradient buffers live from the first backward step that writes them to their
  // producer's backward step; buffers are shared between gradients whose lives do not
  // overlap, as in the forward plan.
  void plan_gradients(const std::vector<int>& seedable);

  const Graph& graph_;
  std::vector<Shape> shapes_;
  std::vector<bool> requires_grad_;
  std::vector<Step> steps_;
  std::vector<Tensor> values_;     // owned buffers for every layer output (views alias)
  std::vector<Tensor> grads_;      // per value that requires a gradient: a view of a shared buffer
  std::vector<Tensor> grad_buffers_;
  std::vector<bool> grad_ready_;   // written during the current backward
  uint64_t seed_ = 0;
  bool training_ = true;
};

}  // namespace tandem
