// The training losses on a GPU: the CPU's losses (backends/cpu/loss.h) for tensors in a GPU's
// memory (kernels/loss.cu). The gradient is queued on the context's stream; the loss
// value is read back, so the call waits for the stream.
#pragma once

#include "backends/cuda/cuda_context.h"
#include "backends/loss_value.h"
#include "core/tensor.h"
#include "graph/training_spec.h"

namespace tandem::cuda {

/// The loss of `input` against `target`, both on ctx's device; when `grad_input` is
/// defined (input's shape, on the device), also writes dLoss/dInput into it (assigned).
/// Throws UserError for a class index outside [0, C) that is not ignore_index.
LossValue compute_loss(CudaContext& ctx, const LossSpec& spec, const Tensor& input, const Tensor& target,
                       Tensor* grad_input);

}  // namespace tandem::cuda
