// Reference backward of every CPU op (see reference_ops.h): plain loops over output
// elements that scatter into double accumulators, written out at the end. Formulas are
// the textbook derivatives of the reference forwards, computed from the inputs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/dropout_mask.h"
#include "tests/support/reference/reference_ops.h"

namespace tandem::reference {
namespace {

using Acc = std::vector<double>;

Acc zeros_like(const Tensor& t) { return Acc(static_cast<size_t>(t.numel()), 0.0); }

/// Input gradient i := acc (when defined).
void assign_input(const BackwardArgs& args, size_t i, const Acc& acc) {
  if (i >= args.grad_inputs.size() || !args.grad_inputs[i].defined()) return;
  float* g = args.grad_inputs[i].data<float>();
  for (size_t e = 0; e < acc.size(); ++e) g[e] = static_cast<float>(acc[e]);
}

/// Parameter gradient i += acc (when defined).
void accumulate_param(const BackwardArgs& args, size_t i, const Acc& acc) {
  if (i >= args.grad_params.size() || !args.grad_params[i].defined()) return;
  float* g = args.grad_params[i].data<float>();
  for (size_t e = 0; e < acc.size(); ++e) g[e] = static_cast<float>(g[e] + acc[e]);
}

/// Coordinates of flat element e of `shape`.
std::vector<int64_t> coords_of(const Shape& shape, int64_t e) {
  std::vector<int64_t> c(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    c[d] = e % shape[d];
    e /= shape[d];
  }
  return c;
}

/// Flat offset in an input of `s` (right-aligned, broadcast) of output coordinates `coord`.
int64_t broadcast_offset(const Shape& s, const std::vector<int64_t>& coord) {
  int64_t off = 0;
  for (size_t i = 0; i < s.size(); ++i) off = off * s[i] + (s[i] == 1 ? 0 : coord[coord.size() - s.size() + i]);
  return off;
}

int64_t padding_of(const Attributes& attrs, int64_t num) {
  if (!attrs.has("padding_idx") || attrs.is_null("padding_idx")) return -1;
  return (attrs.get_int("padding_idx") + num) % num;
}

void linear_backward(const BackwardArgs& args) {
  const Tensor& x = args.inputs[0];
  const float* w = args.params[0].data<float>();
  const float* dy = args.grad_outputs[0].data<float>();
  int64_t in = x.shape().back(), out = args.params[0].shape()[0];
  int64_t rows = in == 0 ? (out == 0 ? 0 : args.grad_outputs[0].numel() / out) : x.numel() / in;
  Acc dx = zeros_like(x), dw = zeros_like(args.params[0]), db(static_cast<size_t>(out), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double g = dy[r * out + o];
      db[o] += g;
      for (int64_t i = 0; i < in; ++i) {
        dx[r * in + i] += g * w[o * in + i];
        dw[o * in + i] += g * x.data<float>()[r * in + i];
      }
    }
  assign_input(args, 0, dx);
  accumulate_param(args, 0, dw);
  if (args.params.size() > 1) accumulate_param(args, 1, db);
}

void matmul_backward(const BackwardArgs& args) {
  Shape as = args.inputs[0].shape(), bs = args.inputs[1].shape();
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  size_t batch_rank = std::max(as.size(), bs.size()) - 2;
  Shape batch(batch_rank, 1);
  for (size_t i = 0; i < batch_rank; ++i) {
    int64_t da = i + as.size() >= batch_rank + 2 ? as[i + as.size() - 2 - batch_rank] : 1;
    int64_t db = i + bs.size() >= batch_rank + 2 ? bs[i + bs.size() - 2 - batch_rank] : 1;
    batch[i] = da == 1 ? db : da;  // a 1 broadcasts to the other, 0 included
  }
  const float* a = args.inputs[0].data<float>();
  const float* b = args.inputs[1].data<float>();
  const float* dy = args.grad_outputs[0].data<float>();
  Acc da = zeros_like(args.inputs[0]), db = zeros_like(args.inputs[1]);
  int64_t batches = 1;
  for (int64_t d : batch) batches *= d;
  for (int64_t bi = 0; bi < batches; ++bi) {
    std::vector<int64_t> coord = coords_of(batch, bi);
    coord.push_back(0);
    coord.push_back(0);  // matrix coords, ignored by the batch offset
    auto input_offset = [&](const Shape& s) {
      Shape bshape(s.begin(), s.end() - 2);
      std::vector<int64_t> c(coord.begin(), coord.end() - 2);
      return broadcast_offset(bshape, c) * s[s.size() - 2] * s.back();
    };
    int64_t oa = input_offset(as), ob = input_offset(bs);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double g = dy[(bi * m + i) * n + j];
        for (int64_t kk = 0; kk < k; ++kk) {
          da[oa + i * k + kk] += g * b[ob + kk * n + j];
          db[ob + kk * n + j] += g * a[oa + i * k + kk];
        }
      }
  }
  assign_input(args, 0, da);
  assign_input(args, 1, db);
}

void embedding_backward(const KernelSpec& spec, const BackwardArgs& args) {
  const Tensor& w = args.params[0];
  int64_t num = w.shape()[0], dim = w.shape()[1], padding = padding_of(*spec.attrs, num);
  auto idx = args.inputs[0].span<int64_t>();
  const float* dy = args.grad_outputs[0].data<float>();
  Acc dw = zeros_like(w);
  for (size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] == padding) continue;
    for (int64_t d = 0; d < dim; ++d) dw[idx[i] * dim + d] += dy[i * dim + d];
  }
  accumulate_param(args, 0, dw);
}

void embedding_bag_backward(const KernelSpec& spec, const BackwardArgs& args) {
  const Tensor& w = args.params[0];
  int64_t num = w.shape()[0], dim = w.shape()[1], padding = padding_of(*spec.attrs, num);
  const std::string& mode = spec.attrs->get_string("mode");
  auto idx = args.inputs[0].span<int64_t>();
  int64_t bags = args.grad_outputs[0].shape()[0];
  std::vector<int64_t> begin(bags), end(bags);
  if (args.inputs.size() == 1) {
    int64_t len = args.inputs[0].shape()[1];
    for (int64_t b = 0; b < bags; ++b) begin[b] = b * len, end[b] = (b + 1) * len;
  } else {
    auto offsets = args.inputs[1].span<int64_t>();
    for (int64_t b = 0; b < bags; ++b) {
      begin[b] = offsets[b];
      end[b] = b + 1 < static_cast<int64_t>(offsets.size()) ? offsets[b + 1] : static_cast<int64_t>(idx.size());
    }
  }
  const float* dy = args.grad_outputs[0].data<float>();
  const float* wv = w.data<float>();
  Acc dw = zeros_like(w);
  for (int64_t b = 0; b < bags; ++b) {
    int64_t count = 0;
    for (int64_t i = begin[b]; i < end[b]; ++i) count += idx[i] != padding;
    if (count == 0) continue;
    for (int64_t d = 0; d < dim; ++d) {
      double g = dy[b * dim + d];
      if (mode == "max") {
        int64_t best = -1;  // the first entry holding the maximum
        for (int64_t i = begin[b]; i < end[b]; ++i)
          if (idx[i] != padding && (best < 0 || wv[idx[i] * dim + d] > wv[best * dim + d])) best = idx[i];
        dw[best * dim + d] += g;
        continue;
      }
      for (int64_t i = begin[b]; i < end[b]; ++i)
        if (idx[i] != padding) dw[idx[i] * dim + d] += mode == "mean" ? g / double(count) : g;
    }
  }
  accumulate_param(args, 0, dw);
}

void activation_backward(const KernelSpec& spec, const BackwardArgs& args) {
  auto x = args.inputs[0].span<float>();
  auto dy = args.grad_outputs[0].span<float>();
  const bool gelu_tanh = spec.op == "gelu" && spec.attrs->get_string("approximate") == "tanh";
  Acc dx(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double v = x[i], d = 0.0;
    if (spec.op == "relu") d = v > 0 ? 1.0 : 0.0;
    else if (spec.op == "tanh") d = 1.0 - std::tanh(v) * std::tanh(v);
    else if (spec.op == "sigmoid") d = std::exp(-v) / ((1.0 + std::exp(-v)) * (1.0 + std::exp(-v)));
    else if (gelu_tanh) {
      double c = std::sqrt(2.0 / M_PI), u = c * (v + 0.044715 * v * v * v), t = std::tanh(u);
      d = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * v * v);
    } else if (spec.op == "gelu") {
      d = 0.5 * (1.0 + std::erf(v / std::sqrt(2.0))) + v * std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI);
    } else if (spec.op == "relu6") d = v > 0 && v < 6 ? 1.0 : 0.0;
    else if (spec.op == "hardswish") d = v < -3 ? 0.0 : (v <= 3 ? v / 3.0 + 0.5 : 1.0);
    else if (spec.op == "hardsigmoid") d = v > -3 && v < 3 ? 1.0 / 6.0 : 0.0;
    else if (spec.op == "silu") {
      const double s = 1.0 / (1.0 + std::exp(-v));
      d = s * (1.0 + v * (1.0 - s));
    } else if (spec.op == "mish") {
      const double t = std::tanh(std::log1p(std::exp(v))), s = 1.0 / (1.0 + std::exp(-v));
      d = t + v * s * (1.0 - t * t);
    } else if (spec.op == "exp") d = std::exp(v);
    else if (spec.op == "clamp") {
      d = (spec.attrs->is_null("min") || v >= spec.attrs->get_float("min")) &&
                  (spec.attrs->is_null("max") || v <= spec.attrs->get_float("max"))
              ? 1.0
              : 0.0;
    } else TANDEM_ASSERT(false, "reference::backward: unknown activation " + spec.op);
    dx[i] = dy[i] * d;
  }
  assign_input(args, 0, dx);
}

void softmax_backward(const KernelSpec& spec, const BackwardArgs& args) {
  const AroundDim around = around_dim(spec, args.inputs[0].shape());
  const int64_t outer = around.outer, axis = around.axis, inner = around.inner;
  const float* x = args.inputs[0].data<float>();
  const float* dy = args.grad_outputs[0].data<float>();
  Acc dx = zeros_like(args.inputs[0]);
  std::vector<double> p(static_cast<size_t>(axis));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t a) { return (o * axis + a) * inner + in; };
      double mx = -INFINITY, sum = 0.0;
      for (int64_t a = 0; a < axis; ++a) mx = std::max(mx, double(x[at(a)]));
      for (int64_t a = 0; a < axis; ++a) sum += std::exp(double(x[at(a)]) - mx);
      for (int64_t a = 0; a < axis; ++a) p[a] = std::exp(double(x[at(a)]) - mx) / sum;
      // d out_a / d x_c = p_a (delta_ac - p_c) for softmax, delta_ac - p_c for log_softmax.
      for (int64_t c = 0; c < axis; ++c) {
        double acc = 0.0;
        for (int64_t a = 0; a < axis; ++a) {
          double delta = a == c ? 1.0 : 0.0;
          double jac = spec.op == "log_softmax" ? delta - p[c] : p[a] * (delta - p[c]);
          acc += dy[at(a)] * jac;
        }
        dx[at(c)] = acc;
      }
    }
  assign_input(args, 0, dx);
}

/// normalize: y_a = x_a / n (n = ||x|| >= eps): dy_a/dx_c = (delta_ac - y_a y_c) / n; below
/// eps the divisor is the constant eps.
void normalize_backward(const KernelSpec& spec, const BackwardArgs& args) {
  const AroundDim around = around_dim(spec, args.inputs[0].shape());
  const int64_t outer = around.outer, axis = around.axis, inner = around.inner;
  const double eps = spec.attrs->get_float("eps");
  const float* x = args.inputs[0].data<float>();
  const float* dy = args.grad_outputs[0].data<float>();
  Acc dx = zeros_like(args.inputs[0]);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t a) { return (o * axis + a) * inner + in; };
      double sum = 0.0;
      for (int64_t a = 0; a < axis; ++a) sum += double(x[at(a)]) * x[at(a)];
      const double n = std::sqrt(sum);
      for (int64_t c = 0; c < axis; ++c) {
        double acc = 0.0;
        for (int64_t a = 0; a < axis; ++a) {
          const double delta = a == c ? 1.0 : 0.0;
          acc += dy[at(a)] * (n >= eps ? (delta - x[at(a)] * x[at(c)] / sum) / n : delta / eps);
        }
        dx[at(c)] = acc;
      }
    }
  assign_input(args, 0, dx);
}

void layer_norm_backward(const KernelSpec& spec, const BackwardArgs& args) {
  int64_t cols = 1;
  for (int64_t d : spec.attrs->get_ints("normalized_shape")) cols *= d;
  double eps = spec.attrs->get_float("eps");
  const float* w = args.params.size() > 0 ? args.params[0].data<float>() : nullptr;
  const float* x = args.inputs[0].data<float>();
  const float* dy = args.grad_outputs[0].data<float>();
  int64_t rows = cols == 0 ? 0 : args.inputs[0].numel() / cols;
  Acc dx = zeros_like(args.inputs[0]), dw(static_cast<size_t>(cols), 0.0), db(static_cast<size_t>(cols), 0.0);
  std::vector<double> xhat(static_cast<size_t>(cols)), g(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0.0, var = 0.0;
    for (int64_t c = 0; c < cols; ++c) mean += x[r * cols + c];
    mean /= double(cols);
    for (int64_t c = 0; c < cols; ++c) var += (x[r * cols + c] - mean) * (x[r * cols + c] - mean);
    var /= double(cols);
    double rstd = 1.0 / std::sqrt(var + eps), mean_g = 0.0, mean_gx = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      xhat[c] = (x[r * cols + c] - mean) * rstd;
      g[c] = double(dy[r * cols + c]) * (w ? w[c] : 1.0);
      mean_g += g[c] / double(cols);
      mean_gx += g[c] * xhat[c] / double(cols);
      dw[c] += dy[r * cols + c] * xhat[c];
      db[c] += dy[r * cols + c];
    }
    for (int64_t c = 0; c < cols; ++c) dx[r * cols + c] = rstd * (g[c] - mean_g - xhat[c] * mean_gx);
  }
  assign_input(args, 0, dx);
  if (args.params.size() > 0) accumulate_param(args, 0, dw);
  if (args.params.size() > 1) accumulate_param(args, 1, db);
}

void dropout_backward(const KernelSpec& spec, const BackwardArgs& args) {
  double p = spec.attrs->get_float("p");
  auto dy = args.grad_outputs[0].span<float>();
  Acc dx(dy.size());
  for (size_t i = 0; i < dy.size(); ++i) {
    if (!args.training || p == 0.0) dx[i] = dy[i];
    else if (p == 1.0) dx[i] = 0.0;
    else dx[i] = dropout_keep(args.seed, i, static_cast<float>(p)) ? dy[i] / (1.0 - p) : 0.0;
  }
  assign_input(args, 0, dx);
}

void binary_backward(const KernelSpec& spec, const BackwardArgs& args) {
  const Shape& out = args.grad_outputs[0].shape();
  const Shape& as = args.inputs[0].shape();
  const Shape& bs = args.inputs[1].shape();
  const bool add = spec.op == "add";
  double alpha = add ? spec.attrs->get_float("alpha") : 1.0;
  const float* a = args.inputs[0].data<float>();
  const float* b = args.inputs[1].data<float>();
  const float* dy = args.grad_outputs[0].data<float>();
  Acc da = zeros_like(args.inputs[0]), db = zeros_like(args.inputs[1]);
  for (int64_t e = 0; e < args.grad_outputs[0].numel(); ++e) {
    std::vector<int64_t> coord = coords_of(out, e);
    int64_t oa = broadcast_offset(as, coord), ob = broadcast_offset(bs, coord);
    da[oa] += add ? double(dy[e]) : double(dy[e]) * b[ob];
    db[ob] += add ? alpha * dy[e] : double(dy[e]) * a[oa];
  }
  assign_input(args, 0, da);
  assign_input(args, 1, db);
}

/// expand: dx sums dy over the dims the input was repeated along.
void expand_backward(const BackwardArgs& args) {
  const Shape& out = args.grad_outputs[0].shape();
  const Shape& in = args.inputs[0].shape();
  const float* dy = args.grad_outputs[0].data<float>();
  Acc dx = zeros_like(args.inputs[0]);
  for (int64_t e = 0; e < args.grad_outputs[0].numel(); ++e) dx[broadcast_offset(in, coords_of(out, e))] += dy[e];
  assign_input(args, 0, dx);
}

/// parameter: dw += dy; the input, unread, gets zeros.
void parameter_backward(const BackwardArgs& args) {
  auto dy = args.grad_outputs[0].span<float>();
  accumulate_param(args, 0, Acc(dy.begin(), dy.end()));
  if (args.grad_inputs[0].defined() && args.grad_inputs[0].dtype() == DType::float32)
    assign_input(args, 0, zeros_like(args.inputs[0]));
}

/// scale: dx = dy * factor.
void scale_backward(const KernelSpec& spec, const BackwardArgs& args) {
  const double factor = static_cast<float>(spec.attrs->get_float("factor"));
  auto dy = args.grad_outputs[0].span<float>();
  Acc dx(dy.size());
  for (size_t e = 0; e < dy.size(); ++e) dx[e] = dy[e] * factor;
  assign_input(args, 0, dx);
}

/// index_select: dsource[.., idx[i], ..] += dy[.., i, ..]; the indices get none.
void index_select_backward(const KernelSpec& spec, const BackwardArgs& args) {
  const Shape& in = args.inputs[0].shape();
  const Shape& out = args.grad_outputs[0].shape();
  const int64_t rank = static_cast<int64_t>(in.size());
  const int64_t dim = (spec.attrs->get_int("dim") + rank) % rank;
  const int64_t* idx = args.inputs[1].data<int64_t>();
  const float* dy = args.grad_outputs[0].data<float>();
  Acc dx = zeros_like(args.inputs[0]);
  for (int64_t e = 0; e < args.grad_outputs[0].numel(); ++e) {
    std::vector<int64_t> c = coords_of(out, e);
    c[static_cast<size_t>(dim)] = idx[c[static_cast<size_t>(dim)]];
    int64_t off = 0;
    for (int64_t d = 0; d < rank; ++d) off = off * in[static_cast<size_t>(d)] + c[static_cast<size_t>(d)];
    dx[static_cast<size_t>(off)] += dy[e];
  }
  assign_input(args, 0, dx);
}

void cat_backward(const KernelSpec& spec, const BackwardArgs& args) {
  const Shape& out = args.grad_outputs[0].shape();
  int64_t dim = spec.attrs->get_int("dim");
  if (dim < 0) dim += static_cast<int64_t>(out.size());
  std::vector<Acc> dx;
  for (const Tensor& in : args.inputs) dx.push_back(zeros_like(in));
  const float* dy = args.grad_outputs[0].data<float>();
  for (int64_t e = 0; e < args.grad_outputs[0].numel(); ++e) {
    std::vector<int64_t> coord = coords_of(out, e);
    int64_t c = coord[dim];
    size_t which = 0;
    while (c >= args.inputs[which].shape()[dim]) c -= args.inputs[which++].shape()[dim];
    const Shape& s = args.inputs[which].shape();
    int64_t off = 0;
    for (size_t d = 0; d < out.size(); ++d) off = off * s[d] + (static_cast<int64_t>(d) == dim ? c : coord[d]);
    dx[which][off] = dy[e];
  }
  for (size_t i = 0; i < dx.size(); ++i) assign_input(args, i, dx[i]);
}

void copy_backward(const BackwardArgs& args) {
  auto dy = args.grad_outputs[0].span<float>();
  assign_input(args, 0, Acc(dy.begin(), dy.end()));
}

/// permute: dx at the input coordinates of each output element is that element's dy.
void permute_backward(const KernelSpec& spec, const BackwardArgs& args) {
  const Shape& out = args.grad_outputs[0].shape();
  const Shape& in = args.inputs[0].shape();
  std::vector<int64_t> dims = spec.attrs->get_ints("dims");
  for (int64_t& d : dims)
    if (d < 0) d += static_cast<int64_t>(in.size());
  Acc dx = zeros_like(args.inputs[0]);
  const float* dy = args.grad_outputs[0].data<float>();
  std::vector<int64_t> in_coord(in.size());
  for (int64_t e = 0; e < args.grad_outputs[0].numel(); ++e) {
    std::vector<int64_t> coord = coords_of(out, e);
    for (size_t k = 0; k < out.size(); ++k) in_coord[dims[k]] = coord[k];
    int64_t off = 0;
    for (size_t d = 0; d < in.size(); ++d) off = off * in[d] + in_coord[d];
    dx[off] = dy[e];
  }
  assign_input(args, 0, dx);
}

}  // namespace

void backward(const KernelSpec& spec, const BackwardArgs& args) {
  const std::string& op = spec.op;
  if (op == "linear") return linear_backward(args);
  if (op == "matmul") return matmul_backward(args);
  if (op == "embedding") return embedding_backward(spec, args);
  if (op == "embedding_bag") return embedding_bag_backward(spec, args);
  if (is_activation(op)) return activation_backward(spec, args);
  if (op == "softmax" || op == "log_softmax") return softmax_backward(spec, args);
  if (op == "normalize") return normalize_backward(spec, args);
  if (op == "layer_norm") return layer_norm_backward(spec, args);
  if (op == "dropout") return dropout_backward(spec, args);
  if (op == "add" || op == "mul") return binary_backward(spec, args);
  if (op == "cat") return cat_backward(spec, args);
  if (op == "flatten" || op == "reshape") return copy_backward(args);
  if (op == "permute") return permute_backward(spec, args);
  if (op == "pad" || op == "roll" || op == "interpolate") return resample_backward(spec, args);
  if (op == "expand") return expand_backward(args);
  if (op == "parameter" || op == "buffer") return parameter_backward(args);
  if (op == "scale") return scale_backward(spec, args);
  if (op == "index_select") return index_select_backward(spec, args);
  TANDEM_ASSERT(false, "reference::backward: no reference for op " + op);
}

}  // namespace tandem::reference
