#include "backends/cuda/cuda_limits.h"

#include <cudnn.h>

#include <array>

#include "backends/broadcast_plan.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/kernels/binary.cuh"
#include "backends/height_one_kernel.h"
#include "graph/ops/height_one.h"
#include "graph/ops/window2d.h"

namespace tandem::cuda {
namespace {

std::string empty_input(const KernelSpec& spec) {
  const Shape& x = spec.inputs.at(0).shape;
  for (int64_t d : x)
    if (d == 0) return spec.op + ": an empty input " + shape_str(x) + " (cuDNN takes no zero-sized tensor)";
  return {};
}

}  // namespace

std::string conv2d_limit(const KernelSpec& spec) {
  if (std::string why = empty_input(spec); !why.empty()) return why;
  const Window2d win = conv2d_window(*spec.attrs);
  if (win.pad_l != win.pad_r)
    return "conv2d: padding that differs before and after (padding='same' with an even kernel); cuDNN pads "
           "symmetrically";
  return {};
}

std::string pool2d_limit(const KernelSpec& spec) {
  if (std::string why = empty_input(spec); !why.empty()) return why;
  const Shape& x = spec.inputs.at(0).shape;
  const Window2d win = pool2d_window(*spec.attrs);
  const std::array<int64_t, 2> in{x.end()[-2], x.end()[-1]};
  if (win.pad_l != win.pad_r || win.effective_pad_r(in) != win.pad_r)
    return spec.op + ": a window past the right edge (ceil_mode); cuDNN pads symmetrically";
  if (win.dilation != std::array<int64_t, 2>{1, 1}) return spec.op + ": dilation (cuDNN pools without)";
  return {};
}

std::string batch_norm2d_limit(const KernelSpec& spec) {
  if (std::string why = empty_input(spec); !why.empty()) return why;
  if (spec.attrs->get_float("eps") < CUDNN_BN_MIN_EPSILON)
    return "batch_norm2d: eps below cuDNN's minimum of " + std::to_string(CUDNN_BN_MIN_EPSILON);
  return {};
}

std::string binary_limit(const KernelSpec& spec) {
  const Shape& b = spec.op == "expand" ? spec.inputs.at(0).shape : spec.inputs.at(1).shape;  // expand's b is a
  const BroadcastPlan plan = plan_broadcast(spec.inputs.at(0).shape, b, spec.outputs.at(0).shape);
  if (plan.dims.size() > static_cast<size_t>(kMaxBroadcastDims))
    return spec.op + ": a broadcast of " + std::to_string(plan.dims.size()) + " merged dims (the GPU kernel takes " +
           std::to_string(kMaxBroadcastDims) + ")";
  return {};
}

std::string cuda_cannot_run(const KernelSpec& spec) {
  if (!cuda_has_op(spec.op)) return "the CUDA backend has no kernel for op '" + spec.op + "'";
  if (std::string why = cuda_dtype_mismatch(spec); !why.empty()) return why;
  if (const std::string two_d = two_d_op(spec.op); !two_d.empty()) {  // the 2-D kernel's limits
    const Attributes attrs = two_d_attributes(*spec.attrs);
    const std::string why = cuda_cannot_run(two_d_spec(spec, attrs));
    return why.empty() ? why : spec.op + " (run as " + two_d + "): " + why;
  }
  if (spec.op == "conv2d") return conv2d_limit(spec);
  if (spec.op == "max_pool2d" || spec.op == "avg_pool2d") return pool2d_limit(spec);
  if (spec.op == "batch_norm2d") return batch_norm2d_limit(spec);
  if (spec.op == "add" || spec.op == "mul" || spec.op == "expand") return binary_limit(spec);
  return {};
}

}  // namespace tandem::cuda
