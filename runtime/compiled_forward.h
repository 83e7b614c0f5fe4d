// CompiledForward: a plan made runnable for one set of symbol values (one batch size).
// Compiling makes every kernel (oneDNN primitives included) and lays out the
// intermediate tensors in a few reused buffers: a tensor's buffer is handed to a later
// tensor once its last reader has run. Running then allocates only the graph outputs.
#pragma once

#include <memory>
#include <vector>

#include "backends/compute_ops.h"
#include "backends/kernel.h"
#include "graph/graph.h"
#include "graph/symbolic.h"
#include "placement/plan.h"
#include "runtime/forward_hook.h"

namespace tandem {

/// Not thread-safe: one run at a time. Holds references to the graph and parameters,
/// which must outlive it; parameter values may change between runs in place.
class CompiledForward {
 public:
  CompiledForward(const Graph& graph, const Plan& plan, const Bindings& bindings, ComputeOps& ops,
                  const TensorMap& params);

  /// Inputs in graph-input order, checked by the caller; outputs in graph-output order.
  /// `hook`, when given, is called after each layer.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, uint64_t params_version, bool training = false,
                          uint64_t seed = 0, const ForwardHook* hook = nullptr);

  /// Bytes of the reused intermediate buffers.
  size_t arena_bytes() const { return arena_bytes_; }
  const std::vector<Shape>& value_shapes() const { return value_shapes_; }

 private:
  struct Step {
    const Node* node = nullptr;
    std::unique_ptr<Kernel> kernel;  // null for views
    std::vector<Tensor> params;
    int buffer = -1;                 // arena buffer of the output; -1: fresh (escapes) or a view
  };

  void plan_buffers(const Graph& graph);

  const Graph& graph_;
  std::vector<Shape> value_shapes_;
  std::vector<Step> steps_;
  std::vector<Tensor> arena_;  // flat byte buffers
  size_t arena_bytes_ = 0;
  std::vector<Tensor> values_;
};

}  // namespace tandem
