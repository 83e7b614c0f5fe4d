// Helpers for the CPU backward tests: run a kernel's backward and the reference's on the
// same tensors and compare; check that parameter gradients accumulate and input
// gradients are assigned; check that backward builds no oneDNN primitive; and a
// central-difference check of the gradients against the reference forward.
#pragma once

#include "kernel_test_util.h"

namespace tandem::test {

/// Gradient buffers of one backward call.
struct Grads {
  std::vector<Tensor> inputs;  // undefined for int64 inputs (they get no gradient)
  std::vector<Tensor> params;
};

inline Tensor filled(const Tensor& like, float value) {
  Tensor t = Tensor::empty(like.shape(), DType::float32);
  for (float& v : t.span<float>()) v = value;
  return t;
}

/// Input gradients filled with `input_fill` (NaN shows an unwritten element); parameter
/// gradients with copies of `param_start` (what they accumulate onto), or zeros.
inline Grads make_grads(const OpCase& c, float input_fill, const std::vector<Tensor>* param_start = nullptr) {
  Grads g;
  for (const Tensor& in : c.inputs) g.inputs.push_back(in.dtype() == DType::float32 ? filled(in, input_fill) : Tensor());
  for (size_t i = 0; i < c.params.size(); ++i)
    g.params.push_back(param_start ? (*param_start)[i].clone() : Tensor::zeros(c.params[i].shape(), DType::float32));
  return g;
}

inline void run_backward(const OpCase& c, Kernel& kernel, const Tensor& out, const Tensor& grad_out, Grads& g) {
  std::vector<Tensor> outs{out}, grad_outs{grad_out};
  BackwardArgs args{c.inputs, c.params, outs, grad_outs, g.inputs, g.params, c.training, c.seed};
  kernel.backward(args);
}

inline void run_reference_backward(const OpCase& c, const Tensor& out, const Tensor& grad_out, Grads& g) {
  std::vector<Tensor> outs{out}, grad_outs{grad_out};
  BackwardArgs args{c.inputs, c.params, outs, grad_outs, g.inputs, g.params, c.training, c.seed};
  reference::backward(c.spec(), args);
}

inline Tensor scaled(const Tensor& t, float s) {
  Tensor r = t.clone();
  for (float& v : r.span<float>()) v *= s;
  return r;
}

/// Kernel backward vs the reference, on random output gradients and parameter
/// gradients that start from random values; then, from zeros, two backward calls must
/// give twice one call's parameter gradients and the same input gradients; and no call
/// may build a oneDNN primitive (they are made in the factory).
inline void check_backward(const OpCase& c, std::mt19937& gen, double rel = 1e-5) {
  INFO("op " << c.op << " [" << c.attrs.str() << "] out " << shape_str(c.out_shape));
  auto kernel = make_kernel(c);
  Tensor out = run_kernel(c, *kernel);
  Tensor grad_out = random_tensor(c.out_shape, gen);
  std::vector<Tensor> start;
  for (const Tensor& p : c.params) start.push_back(random_tensor(p.shape(), gen));
  const int64_t created = cpu_context().primitives_created();

  Grads got = make_grads(c, NAN, &start);
  run_backward(c, *kernel, out, grad_out, got);
  Grads want = make_grads(c, 0.f, &start);
  run_reference_backward(c, run_reference(c), grad_out, want);
  for (size_t i = 0; i < got.inputs.size(); ++i) {
    INFO("grad of input " << i);
    if (got.inputs[i].defined()) require_close(got.inputs[i], want.inputs[i], rel);
  }
  for (size_t i = 0; i < got.params.size(); ++i) {
    INFO("grad of param " << i);
    require_close(got.params[i], want.params[i], rel);
  }

  Grads once = make_grads(c, NAN);
  run_backward(c, *kernel, out, grad_out, once);
  Grads twice = make_grads(c, NAN);
  run_backward(c, *kernel, out, grad_out, twice);
  Grads single = twice;  // twice's input grads after one call, param grads copied
  for (Tensor& t : single.inputs) t = t.defined() ? t.clone() : t;
  for (Tensor& t : single.params) t = t.clone();
  for (Tensor& t : twice.inputs) t = t.defined() ? filled(t, NAN) : t;
  run_backward(c, *kernel, out, grad_out, twice);
  for (size_t i = 0; i < twice.inputs.size(); ++i) {
    INFO("input " << i << " grad is assigned, not accumulated");
    if (twice.inputs[i].defined()) require_close(twice.inputs[i], single.inputs[i], 0.0);
  }
  for (size_t i = 0; i < twice.params.size(); ++i) {
    INFO("param " << i << " grad accumulates");
    require_close(twice.params[i], scaled(once.params[i], 2.f), 1e-5);
  }
  REQUIRE(cpu_context().primitives_created() == created);
}

/// sum(reference_forward(c) * grad_out) in double.
inline double weighted_loss(const OpCase& c, const Tensor& grad_out) {
  Tensor out = run_reference(c);
  double loss = 0.0;
  auto o = out.span<float>();
  auto g = grad_out.span<float>();
  for (size_t i = 0; i < o.size(); ++i) loss += double(o[i]) * g[i];
  return loss;
}

/// The kernel's gradients against central differences of the reference forward, step
/// `eps`, for every element of every float input and parameter:
/// |fd - grad| <= tol * max(1, max|grad|) per tensor.
inline void check_finite_differences(OpCase c, std::mt19937& gen, double eps = 1e-2, double tol = 2e-2) {
  INFO("finite differences: op " << c.op << " [" << c.attrs.str() << "] out " << shape_str(c.out_shape));
  auto kernel = make_kernel(c);
  Tensor out = run_kernel(c, *kernel);
  Tensor grad_out = random_tensor(c.out_shape, gen);
  Grads got = make_grads(c, NAN);
  run_backward(c, *kernel, out, grad_out, got);
  auto check = [&](Tensor& t, const Tensor& grad, const char* what, size_t which) {
    INFO(what << " " << which);
    auto values = t.span<float>();
    auto analytic = grad.span<float>();
    double max_grad = 0.0, max_err = 0.0;
    for (float v : analytic) max_grad = std::max(max_grad, std::abs(double(v)));
    for (size_t e = 0; e < values.size(); ++e) {
      const float saved = values[e];
      values[e] = static_cast<float>(saved + eps);
      double up = weighted_loss(c, grad_out);
      values[e] = static_cast<float>(saved - eps);
      double down = weighted_loss(c, grad_out);
      values[e] = saved;
      double fd = (up - down) / (2 * eps);
      max_err = std::max(max_err, std::abs(fd - analytic[e]));
    }
    INFO("max error " << max_err << ", max |grad| " << max_grad);
    REQUIRE(max_err <= tol * std::max(1.0, max_grad));
  };
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (got.inputs[i].defined()) check(c.inputs[i], got.inputs[i], "input", i);
  for (size_t i = 0; i < c.params.size(); ++i) check(c.params[i], got.params[i], "param", i);
}

}  // namespace tandem::test
