// sum, mean, amax, amin over `dim` (graph/ops/reduce.h): x [*] -> y, keepdim or not (the
// same memory either way).
//
// Forward: oneDNN's reduction primitive, x plain and y as x's shape with each reduced
// dimension 1. Where nothing is reduced (only dimensions of 1) it is a copy; over an empty
// dimension, sum is 0 and mean NaN, as torch's, and amax and amin refuse, as torch's do.
//
// Backward, each input element from its output element's gradient dy (our loop,
// backends/reduce_geometry.h):
//   sum:        dx = dy
//   mean:       dx = dy / count
//   amax, amin: dx = dy / ties where x equals y, else 0: torch's, which shares the
//               gradient evenly among equal extrema (ties: how many there are)
#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

#include "backends/cpu/ops/op_factories.h"
#include "backends/cpu/ops/op_util.h"
#include "backends/reduce_geometry.h"
#include "core/error.h"
#include "graph/ops/reduce.h"

namespace tandem {
namespace {

using dnnl::memory;

enum class Reduction { sum, mean, amax, amin };

Reduction reduction_of(const std::string& op) {
  if (op == "sum") return Reduction::sum;
  if (op == "mean") return Reduction::mean;
  if (op == "amax") return Reduction::amax;
  return Reduction::amin;
}

memory::dims row_major_strides(const memory::dims& dims) {
  memory::dims strides(dims.size(), 1);
  for (size_t d = dims.size(); d-- > 1;) strides[d - 1] = strides[d] * std::max<int64_t>(dims[d], 1);
  return strides;
}

class ReduceKernel final : public Kernel {
 public:
  ReduceKernel(CpuContext& ctx, const KernelSpec& spec) : ctx_(ctx), op_(spec.op), reduction_(reduction_of(spec.op)) {
    const Shape& x = spec.inputs.at(0).shape;
    geometry_ = reduce_geometry(x, reduced_dims(*spec.attrs, static_cast<int64_t>(x.size())));
    if (geometry_.count <= 1 || geometry_.y_numel == 0) return;  // a copy, or nothing (or an empty reduction)
    memory::dims src_dims(x.begin(), x.end()), dst_dims(geometry_.y_keepdim.begin(), geometry_.y_keepdim.end());
    if (src_dims.empty()) src_dims = dst_dims = {1};
    const auto f32 = memory::data_type::f32;
    memory::desc src_md(src_dims, f32, row_major_strides(src_dims)), dst_md(dst_dims, f32, row_major_strides(dst_dims));
    const dnnl::algorithm alg = reduction_ == Reduction::sum    ? dnnl::algorithm::reduction_sum
                                : reduction_ == Reduction::mean ? dnnl::algorithm::reduction_mean
                                : reduction_ == Reduction::amax ? dnnl::algorithm::reduction_max
                                                                : dnnl::algorithm::reduction_min;
    std::optional<cpu::ScopedMaxThreads> one_thread;
    if (geometry_.x_numel < cpu::kParallelThreshold) one_thread.emplace(1);
    dnnl::primitive prim = ctx_.cached_primitive(cpu::spec_key(spec), [&] {
      return dnnl::reduction(dnnl::reduction::primitive_desc(dnnl::reduction::desc(alg, src_md, dst_md, 0.f, 0.f),
                                                             user_scratchpad_attr(), ctx_.engine()));
    });
    call_ = cpu::DnnlCall(prim);
    src_ = call_.bind(DNNL_ARG_SRC, src_md, ctx_.engine());
    dst_ = call_.bind(DNNL_ARG_DST, dst_md, ctx_.engine());
  }

  void forward(const KernelArgs& args) override {
    const float* x = args.inputs[0].data<float>();
    float* y = args.outputs[0].data<float>();
    if (geometry_.y_numel == 0) return;
    if (geometry_.count == 0) {
      if (reduction_ == Reduction::amax || reduction_ == Reduction::amin)
        throw UserError(op_ + ": the input " + shape_str(args.inputs[0].shape()) +
                        " is empty along a reduced dimension, which has no " +
                        (reduction_ == Reduction::amax ? "maximum" : "minimum") + " (as torch." + op_ + ")");
      const float fill = reduction_ == Reduction::sum ? 0.f : std::numeric_limits<float>::quiet_NaN();
      std::fill(y, y + geometry_.y_numel, fill);
      return;
    }
    if (geometry_.count == 1) {
      std::memcpy(y, x, static_cast<size_t>(geometry_.y_numel) * sizeof(float));
      return;
    }
    call_.set(src_, x);
    call_.set(dst_, y);
    call_.run(ctx_);
  }

  bool backward_reads_input(size_t) const override { return picks_extremum(); }
  bool backward_reads_output() const override { return picks_extremum(); }

  void backward(const BackwardArgs& args) override {
    if (!args.grad_inputs[0].defined()) return;
    float* dx = args.grad_inputs[0].data<float>();
    const float* dy = args.grad_outputs[0].data<float>();
    const ReduceGeometry& g = geometry_;
    if (!picks_extremum()) {
      const float count = static_cast<float>(g.count);
      const bool mean = reduction_ == Reduction::mean;
      cpu::parallel_for(g.x_numel, 1, [&](int64_t begin, int64_t end) {
        for_each_reduced(g, begin, end, [&](int64_t i, int64_t p) { dx[i] = mean ? dy[p] / count : dy[p]; });
      });
      return;
    }
    const float* x = args.inputs[0].data<float>();
    const float* y = args.outputs[0].data<float>();
    // the ties, on one thread: several input elements add into each count
    ties_.assign(static_cast<size_t>(g.y_numel), 0.f);
    for_each_reduced(g, 0, g.x_numel, [&](int64_t i, int64_t p) { ties_[p] += x[i] == y[p] ? 1.f : 0.f; });
    cpu::parallel_for(g.x_numel, 1, [&](int64_t begin, int64_t end) {
      for_each_reduced(g, begin, end, [&](int64_t i, int64_t p) { dx[i] = x[i] == y[p] ? dy[p] / ties_[p] : 0.f; });
    });
  }

 private:
  bool picks_extremum() const { return reduction_ == Reduction::amax || reduction_ == Reduction::amin; }

  CpuContext& ctx_;
  std::string op_;
  Reduction reduction_;
  ReduceGeometry geometry_;
  cpu::DnnlCall call_;
  size_t src_ = 0, dst_ = 0;
  std::vector<float> ties_;
};

}  // namespace

std::unique_ptr<Kernel> make_reduce_kernel(CpuContext& ctx, const KernelSpec& spec) {
  return std::make_unique<ReduceKernel>(ctx, spec);
}

}  // namespace tandem
