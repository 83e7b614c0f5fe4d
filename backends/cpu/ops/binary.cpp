// add (out = a + alpha * b) and mul (out = a * b) with numpy/torch broadcasting; the
// ranks may differ, the output shape is the spec's. expand (out = a, broadcast to the
// output's shape) is the same walk with one input: b is a itself, and never read.
//
// The factory reduces the broadcast to a minimal form (backends/broadcast_plan.h).
// forward() then walks "rows" of the last merged dim, where each input either advances
// (stride 1) or repeats one value (stride 0).
//
// Backward, dy [out] -> da [a], db [b] (assigned), summed over the dims each input was
// broadcast along:
//   add: da = reduce(dy),      db = alpha reduce(dy)
//   mul: da = reduce(dy * b),  db = reduce(dy * a)
//   expand: da = reduce(dy)
// It needs the inputs for mul only. An input of the output's size is written row by row
// in parallel; a broadcast one is summed in double (Note [broadcast sums in double]) and
// rounded once, threads splitting the inner dim when the input advances along it (so no
// two write one element), else on one thread.
//
// scale: out = x * factor + shift (numbers; torch.mul(x, 0.125) and x + 1 compute in float32
// the same), dx = dy * factor (assigned). No broadcast: a loop of its own.
#include <algorithm>
#include <vector>

#include "backends/broadcast_plan.h"
#include "backends/cpu/ops/op_factories.h"
#include "backends/cpu/ops/op_util.h"

namespace tandem {
namespace {

enum class BinOp { add, mul, expand };

template <BinOp Op>
class BinaryKernel final : public Kernel {
 public:
  explicit BinaryKernel(const KernelSpec& spec) {
    const Shape& b_shape = Op == BinOp::expand ? spec.inputs.at(0).shape : spec.inputs.at(1).shape;
    plan_ = plan_broadcast(spec.inputs.at(0).shape, b_shape, spec.outputs.at(0).shape);
    if constexpr (Op == BinOp::add) alpha_ = static_cast<float>(spec.attrs->get_float("alpha"));
    a_numel_ = shape_numel(spec.inputs[0].shape);
    b_numel_ = shape_numel(b_shape);
  }

  // add's gradients are the output's; mul's need the other factor
  bool backward_reads_input(size_t) const override { return Op == BinOp::mul; }
  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    const float* a = args.inputs[0].data<float>();
    const float* b = args.inputs[Op == BinOp::expand ? 0 : 1].data<float>();
    const float* g = args.grad_outputs[0].data<float>();
    const bool mul = Op == BinOp::mul;
    if (args.grad_inputs[0].defined())
      grad_input(g, mul ? b : nullptr, plan_.stride_a, plan_.stride_b, 1.f, a_numel_,
                 args.grad_inputs[0].data<float>());
    if (Op != BinOp::expand && args.grad_inputs[1].defined())
      grad_input(g, mul ? a : nullptr, plan_.stride_b, plan_.stride_a, mul ? 1.f : alpha_, b_numel_,
                 args.grad_inputs[1].data<float>());
  }

  void forward(const KernelArgs& args) override {
    const float* a = args.inputs[0].data<float>();
    const float* b = args.inputs[Op == BinOp::expand ? 0 : 1].data<float>();
    float* y = args.outputs[0].data<float>();
    if (plan_.numel == 0) return;
    const int64_t inner = plan_.dims.back();
    const int64_t ia = plan_.stride_a.back(), ib = plan_.stride_b.back();
    const int64_t rows = plan_.numel / inner;
    const size_t outer_rank = plan_.dims.size() - 1;
    cpu::parallel_for(rows, inner, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        int64_t oa = 0, ob = 0, rest = r;
        for (size_t d = outer_rank; d-- > 0;) {
          int64_t coord = rest % plan_.dims[d];
          rest /= plan_.dims[d];
          oa += coord * plan_.stride_a[d];
          ob += coord * plan_.stride_b[d];
        }
        row(a + oa, ia, b + ob, ib, y + r * inner, inner);
      }
    });
  }

 private:
  /// Offsets into a and b (strides `sa`, `sb`) of the start of output row r.
  void row_offsets(int64_t r, const std::vector<int64_t>& sa, const std::vector<int64_t>& sb, int64_t& oa,
                   int64_t& ob) const {
    oa = 0, ob = 0;
    for (size_t d = plan_.dims.size() - 1; d-- > 0;) {
      int64_t coord = r % plan_.dims[d];
      r /= plan_.dims[d];
      oa += coord * sa[d];
      ob += coord * sb[d];
    }
  }

  /// dx = scale * reduce_to_x(dy * other), `other` null for add (a factor of 1);
  /// `sx`, `so`: the plan strides of x and of the other input.
  void grad_input(const float* g, const float* other, const std::vector<int64_t>& sx,
                  const std::vector<int64_t>& so, float scale, int64_t x_numel, float* dx) const {
    if (plan_.numel == 0) {
      std::fill(dx, dx + x_numel, 0.f);
      return;
    }
    const int64_t inner = plan_.dims.back(), rows = plan_.numel / inner;
    const int64_t ix = sx.back(), io = so.back();
    if (x_numel == plan_.numel) {  // not broadcast: each element written once
      cpu::parallel_for(rows, inner, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          int64_t ox = 0, oo = 0;
          row_offsets(r, sx, so, ox, oo);
          product_row(g + r * inner, other ? other + oo : nullptr, io, scale, dx + ox, inner);
        }
      });
      return;
    }
    // Note [broadcast sums in double]: a broadcast input's gradient sums many products, and
    // often they cancel (swin v2's logit scale multiplies attention logits whose softmax
    // gradient sums to zero per row): summed in float one after another, the result lost
    // digits torch's cascaded sum keeps (7e-4 of the gradient against torch's 8e-5). The
    // sums run in double, then round once.
    std::vector<double> sum(static_cast<size_t>(x_numel), 0.0);
    if (ix == 0) {  // x repeats one value along each row: the row sums into it
      for (int64_t r = 0; r < rows; ++r) {
        int64_t ox = 0, oo = 0;
        row_offsets(r, sx, so, ox, oo);
        const float* gr = g + r * inner;
        double acc = 0;
        if (!other) {
#pragma omp simd reduction(+ : acc)
          for (int64_t i = 0; i < inner; ++i) acc += gr[i];
        } else {
          const float* orow = other + oo;
#pragma omp simd reduction(+ : acc)
          for (int64_t i = 0; i < inner; ++i) acc += static_cast<double>(gr[i]) * orow[i * io];
        }
        sum[static_cast<size_t>(ox)] += acc;
      }
    } else {  // x advances along the rows: threads split the columns, so no two write one sum
      cpu::parallel_for(inner, rows, [&](int64_t begin, int64_t end) {
        for (int64_t r = 0; r < rows; ++r) {
          int64_t ox = 0, oo = 0;
          row_offsets(r, sx, so, ox, oo);
          const float* gr = g + r * inner;
          double* to = sum.data() + ox;
          if (!other) {
#pragma omp simd
            for (int64_t i = begin; i < end; ++i) to[i] += gr[i];
          } else if (io == 0) {
            const double ov = other[oo];
#pragma omp simd
            for (int64_t i = begin; i < end; ++i) to[i] += ov * gr[i];
          } else {
            const float* orow = other + oo;
#pragma omp simd
            for (int64_t i = begin; i < end; ++i) to[i] += static_cast<double>(gr[i]) * orow[i];
          }
        }
      });
    }
    for (int64_t i = 0; i < x_numel; ++i) dx[i] = static_cast<float>(scale * sum[static_cast<size_t>(i)]);
  }

  /// dx = scale * dy * other over a row of n, `other` advancing by `io` (0: one value, null: 1).
  static void product_row(const float* gr, const float* other, int64_t io, float scale, float* xr, int64_t n) {
    if (!other) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) xr[i] = scale * gr[i];
    } else if (io == 0) {
      const float ov = scale * other[0];
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) xr[i] = ov * gr[i];
    } else {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) xr[i] = scale * gr[i] * other[i];
    }
  }

  float combine(float x, float z) const {
    if constexpr (Op == BinOp::add) return x + alpha_ * z;
    else if constexpr (Op == BinOp::mul) return x * z;
    else return x;
  }

  void row(const float* a, int64_t ia, const float* b, int64_t ib, float* y, int64_t n) const {
    if (ia == 1 && ib == 1) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) y[i] = combine(a[i], b[i]);
    } else if (ia == 1) {
      const float bv = b[0];
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) y[i] = combine(a[i], bv);
    } else if (ib == 1) {
      const float av = a[0];
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) y[i] = combine(av, b[i]);
    } else {
      const float v = combine(a[0], b[0]);
      for (int64_t i = 0; i < n; ++i) y[i] = v;
    }
  }

  BroadcastPlan plan_;
  float alpha_ = 1.f;
  int64_t a_numel_ = 0, b_numel_ = 0;
};

class ScaleKernel final : public Kernel {
 public:
  explicit ScaleKernel(const KernelSpec& spec)
      : factor_(static_cast<float>(spec.attrs->get_float("factor"))),
        shift_(static_cast<float>(spec.attrs->get_float("shift"))) {}

  void forward(const KernelArgs& args) override {
    multiply(args.inputs[0].data<float>(), args.outputs[0].data<float>(), args.outputs[0].numel(), shift_);
  }

  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    if (!args.grad_inputs[0].defined()) return;
    multiply(args.grad_outputs[0].data<float>(), args.grad_inputs[0].data<float>(), args.grad_inputs[0].numel(), 0.f);
  }

 private:
  void multiply(const float* x, float* y, int64_t n, float shift) const {
    const float factor = factor_;
    cpu::parallel_for(n, 1, [&](int64_t begin, int64_t end) {
      if (shift == 0.f) {  // the product alone: -0 stays -0, as torch's x * factor
#pragma omp simd
        for (int64_t i = begin; i < end; ++i) y[i] = x[i] * factor;
      } else {
#pragma omp simd
        for (int64_t i = begin; i < end; ++i) y[i] = x[i] * factor + shift;
      }
    });
  }

  float factor_, shift_;
};

}  // namespace

std::unique_ptr<Kernel> make_scale_kernel(CpuContext&, const KernelSpec& spec) {
  return std::make_unique<ScaleKernel>(spec);
}

std::unique_ptr<Kernel> make_add_kernel(CpuContext&, const KernelSpec& spec) {
  return std::make_unique<BinaryKernel<BinOp::add>>(spec);
}
std::unique_ptr<Kernel> make_mul_kernel(CpuContext&, const KernelSpec& spec) {
  return std::make_unique<BinaryKernel<BinOp::mul>>(spec);
}
std::unique_ptr<Kernel> make_expand_kernel(CpuContext&, const KernelSpec& spec) {
  return std::make_unique<BinaryKernel<BinOp::expand>>(spec);
}

}  // namespace tandem
