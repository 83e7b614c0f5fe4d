// The contract between the runtime and a backend's op kernels.
//
// A Kernel is made once for one layer at one set of concrete shapes (a "compile"), and
// then run many times: everything that depends only on shapes and attributes (oneDNN
// primitives, reordered weights' layouts, scratch sizes) is prepared in the factory, so
// that a repeated forward creates nothing. Outputs are allocated by the caller with the
// shapes of the spec; a kernel writes every element of them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/touched_rows.h"
#include "graph/attributes.h"
#include "graph/precision.h"
#include "graph/precision_choice.h"

namespace tandem {

struct TensorDesc {
  Shape shape;
  DType dtype = DType::float32;
};

/// What a kernel is made for: the op, its attributes (defaults filled in), and the
/// concrete shapes of its inputs, parameters (in the op's parameter order) and outputs.
struct KernelSpec {
  std::string op;
  const Attributes* attrs = nullptr;
  std::vector<TensorDesc> inputs;
  std::vector<TensorDesc> params;
  std::vector<TensorDesc> outputs;
  /// What the layer's matrix work runs in (graph/precision.h): inputs, outputs and
  /// parameters stay float32 either way; a kernel that has no reduced-precision path, or a
  /// device that lacks one, runs fp32.
  Precision precision = Precision::fp32;
};

/// A params_version that matches no other: the caller does not track parameter changes,
/// so a kernel must derive nothing across calls from it.
inline constexpr uint64_t kUnknownParamsVersion = ~uint64_t{0};

/// The tensors of one call. Shapes equal the spec's. params holds the layer's buffers
/// too (ParamSpec::trainable false, such as batch_norm2d's running statistics): a forward
/// with `training` may update those in place; nothing else writes a parameter.
struct KernelArgs {
  std::span<const Tensor> inputs;
  std::span<const Tensor> params;
  std::span<Tensor> outputs;
  bool training = false;
  /// For ops that draw random numbers (dropout): differs per call, fixed by the run's seed.
  uint64_t seed = 0;
  /// Changes whenever any parameter's values change (weights loaded, optimizer step):
  /// a kernel may keep a derived form of its parameters (a reordered weight) while it holds.
  uint64_t params_version = 0;
  /// Kernel::workspace_bytes() of scratch memory from the device's allocator (64-byte
  /// aligned), for this call only; null when the kernel asks for none.
  void* workspace = nullptr;
};

/// The tensors of one backward call, for a kernel made by the same spec.
///
/// Gradient convention: input gradients are ASSIGNED (the kernel writes every element of
/// each defined grad_inputs[i]); parameter gradients ACCUMULATE (+=), so that a weight
/// used twice, or over several micro-batches, sums its gradients. Where a tensor has
/// several readers (two layers, or one layer's two inputs), the executor gives each
/// reader's backward after the first a buffer of its own and adds that to the gradient.
/// llm.c, whose forward/backward pairs these follow, accumulates input gradients as well
/// (its backward functions add into activation gradients zeroed before the pass);
/// assigning them spares that zeroing.
/// grad_inputs[i] is undefined (Tensor()) when input i needs no gradient (int64 indices,
/// graph inputs): skip it.
struct BackwardArgs {
  std::span<const Tensor> inputs;        // as given to forward
  std::span<const Tensor> params;        // as given to forward
  std::span<const Tensor> outputs;       // what forward wrote
  std::span<const Tensor> grad_outputs;  // dLoss/dOutput, shapes of the outputs
  std::span<Tensor> grad_inputs;         // dLoss/dInput: assigned
  std::span<Tensor> grad_params;         // dLoss/dParam: accumulated
  bool training = true;
  uint64_t seed = 0;  // the forward call's seed: dropout rebuilds the same mask from it
  /// The forward call's params_version: a kernel may reuse what that forward derived from
  /// the parameters (packed, reordered weights). Unknown by default: derive afresh.
  uint64_t params_version = kUnknownParamsVersion;
  /// Per parameter, where a kernel that records_touched_rows(i) adds the rows of
  /// grad_params[i] it wrote; empty, or a null entry, when the caller does not track them
  /// (core/touched_rows.h).
  std::span<TouchedRows* const> grad_param_rows = {};
  /// Note [a table stepped in its backward] (runtime/exec/table_updates.h): when set, a
  /// kernel that steps_table_in_backward() writes no gradient of parameter 0: it adds
  /// `table_step` times each entry's gradient row into that row of params[0] itself (plain
  /// SGD's -lr), and records the rows it changed in grad_param_rows[0]
  /// (TouchedRows::mark_stepped()).
  std::optional<float> table_step = std::nullopt;
};

/// One layer's compiled computation on one device. Not thread-safe: one caller at a time.
class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual void forward(const KernelArgs& args) = 0;
  /// Gradients of the inputs and parameters; see BackwardArgs for the convention.
  virtual void backward(const BackwardArgs& args);
  /// What backward reads besides the gradients and parameters (after llm.c: what
  /// backward needs is stated, not assumed). The executor frees the rest right after
  /// forward, and passes it to backward as an undefined Tensor. Default: all of it.
  virtual bool backward_reads_input(size_t index) const { return true; }
  virtual bool backward_reads_output() const { return true; }
  /// (optional) Whether backward writes only some rows of parameter `index`'s gradient and
  /// records them in args.grad_param_rows[index] (embedding tables). Default: no, and the
  /// caller counts every row of that gradient as written.
  virtual bool records_touched_rows(size_t index) const { return false; }
  /// (optional) Whether backward can step parameter 0 by BackwardArgs::table_step instead
  /// of writing its gradient. Default: no.
  virtual bool steps_table_in_backward() const { return false; }
  /// (optional) Scratch memory a forward needs (KernelArgs::workspace), counted in the
  /// device's memory as the tensors are: an inference region's tensors between its
  /// layers. Default: none.
  virtual size_t workspace_bytes() const { return 0; }
  /// (optional) Whether the kernel is a lookup of its parameter 0's rows (an embedding
  /// table) that look_up_again() can redo for some rows. Default: no.
  virtual bool looks_up_rows() const { return false; }
  /// (optional, where looks_up_rows()) Rewrites every output element that forward(args)
  /// computed from a row `rows` lists (ascending, within the table), as forward(args)
  /// writes it now, to the same bits; the others stay as they are. For a batch looked up
  /// before an optimizer update changed those rows (Note [the next batch ahead] in
  /// runtime/exec/training_executor.h). Default: a bug to call.
  virtual void look_up_again(const KernelArgs& args, std::span<const int64_t> rows);
};

}  // namespace tandem
