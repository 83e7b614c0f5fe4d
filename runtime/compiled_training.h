// CompiledTraining: a plan made runnable for training at one set of symbol values.
// Forward runs in training mode and keeps every tensor for backward; backward walks the
// steps in reverse, calling each kernel's backward. A tensor read by several layers sums
// their gradients; parameter gradients accumulate across calls until zeroed.
//
// Activations and gradients are taken from the caching host allocator when they are
// first written and given back as soon as nothing reads them: an activation that no
// backward reads (each kernel says what its backward needs) right after its last
// reader's forward, the rest after their producer's backward. As in PyTorch, only the
// tensors backward needs are held, and the optimizer step runs with none of them; a
// cache hit costs about 100 ns.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "backends/compute_ops.h"
#include "backends/kernel.h"
#include "graph/graph.h"
#include "graph/symbolic.h"
#include "placement/plan.h"
#include "runtime/gradient_ready.h"

namespace tandem {

/// Not thread-safe. Holds references to the graph, parameters and gradients, which must
/// outlive it; their storage must not change (values may).
class CompiledTraining {
 public:
  /// `param_grads` by parameter name, shaped like the parameters; `param_rows`, their
  /// touched rows, which backward adds to (core/touched_rows.h). With `input_grads`,
  /// backward also yields gradients of the float graph inputs. `kept`: tensors the
  /// caller reads between forward and backward (the loss's input).
  CompiledTraining(const Graph& graph, const Plan& plan, const Bindings& bindings, ComputeOps& ops,
                   const TensorMap& params, const TensorMap& param_grads, TouchedRowsMap& param_rows,
                   bool input_grads, const std::vector<int>& kept);

  /// Inputs in graph-input order. In training mode dropout draws from `seed`; out of it
  /// (evaluation) it is the identity, and there is nothing to backward.
  void forward(const std::vector<Tensor>& inputs, uint64_t seed, uint64_t params_version, bool training = true);
  /// A tensor of the last forward (valid until backward releases it).
  const Tensor& value(int value_id) const { return values_[value_id]; }
  /// The gradient buffer of a tensor, for the caller to write a seed into before backward.
  Tensor& gradient_buffer(int value_id);
  /// Backward from the seeds written into gradient_buffer() of `seeded` values. With
  /// `ready`, each trainable parameter is named as soon as its gradient is complete: after
  /// the backward of the first layer that uses it.
  void backward(const std::vector<int>& seeded, const GradientReady* ready = nullptr);
  /// After backward: dLoss/dInput for graph input `index` (undefined if not requested).
  Tensor input_gradient(size_t index) const;

 private:
  struct Step {
    const Node* node = nullptr;
    std::unique_ptr<Kernel> kernel;  // null for views
    std::vector<Tensor> params, param_grads;
    // per parameter, the touched rows its kernel records (else null), and those of the
    // gradients it writes without recording (marked whole after its backward)
    std::vector<TouchedRows*> recorded_rows, unrecorded_rows;
  };

  const Graph& graph_;
  ComputeOps& ops_;  // gradients summed where a tensor has several readers
  std::vector<Shape> shapes_;
  std::vector<bool> requires_grad_;
  std::vector<Step> steps_;
  std::vector<std::vector<int>> release_after_forward_;  // per step: values no one reads after it
  std::vector<std::vector<std::string>> complete_after_;  // per step: parameters it is the first to use
  std::vector<Tensor> values_;     // every tensor of the current forward (views alias)
  std::vector<Tensor> grads_;      // gradients held during backward
  std::vector<bool> grad_ready_;   // written during the current backward
  uint64_t seed_ = 0;
  bool training_ = true;
  uint64_t params_version_ = kUnknownParamsVersion;  // the last forward's, for backward
};

}  // namespace tandem
