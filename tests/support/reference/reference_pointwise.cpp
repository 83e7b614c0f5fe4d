// Reference activations, softmax, layer_norm, dropout, add/mul, cat and copies (see
// reference_ops.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/dropout_mask.h"
#include "tests/support/reference/reference_ops.h"

namespace tandem::reference {

bool is_activation(const std::string& op) {
  for (const char* name : {"relu", "gelu", "tanh", "sigmoid", "relu6", "hardswish", "hardsigmoid", "silu", "mish", "exp", "clamp"})
    if (op == name) return true;
  return false;
}

void activation(const KernelSpec& spec, const KernelArgs& args) {
  auto x = args.inputs[0].span<float>();
  auto y = args.outputs[0].span<float>();
  for (size_t i = 0; i < x.size(); ++i) {
    double v = x[i], r = 0.0;
    if (spec.op == "relu") r = v > 0 ? v : 0.0;
    else if (spec.op == "tanh") r = std::tanh(v);
    else if (spec.op == "sigmoid") r = 1.0 / (1.0 + std::exp(-v));
    else if (spec.op == "gelu" && spec.attrs->get_string("approximate") == "tanh")
      r = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    else if (spec.op == "gelu") r = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    else if (spec.op == "relu6") r = std::min(std::max(v, 0.0), 6.0);
    else if (spec.op == "hardswish") r = v * std::min(std::max(v + 3.0, 0.0), 6.0) / 6.0;
    else if (spec.op == "hardsigmoid") r = std::min(std::max(v + 3.0, 0.0), 6.0) / 6.0;
    else if (spec.op == "silu") r = v / (1.0 + std::exp(-v));
    else if (spec.op == "mish") r = v * std::tanh(std::log1p(std::exp(v)));
    else if (spec.op == "exp") r = std::exp(v);
    else if (spec.op == "clamp") {
      r = spec.attrs->is_null("min") ? v : std::max(v, spec.attrs->get_float("min"));
      r = spec.attrs->is_null("max") ? r : std::min(r, spec.attrs->get_float("max"));
    } else TANDEM_ASSERT(false, "reference::activation: unknown op " + spec.op);
    y[i] = static_cast<float>(r);
  }
}

AroundDim around_dim(const KernelSpec& spec, const Shape& shape) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  int64_t dim = spec.attrs->get_int("dim");
  if (dim < 0) dim += std::max<int64_t>(rank, 1);
  AroundDim out;
  if (rank > 0) out.axis = shape[dim];
  for (int64_t i = 0; i < dim; ++i) out.outer *= shape[i];
  for (int64_t i = dim + 1; i < rank; ++i) out.inner *= shape[i];
  return out;
}

void softmax(const KernelSpec& spec, const KernelArgs& args) {
  const AroundDim around = around_dim(spec, args.inputs[0].shape());
  const int64_t outer = around.outer, axis = around.axis, inner = around.inner;
  const float* x = args.inputs[0].data<float>();
  float* y = args.outputs[0].data<float>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t a) { return (o * axis + a) * inner + in; };
      double mx = -INFINITY, sum = 0.0;
      for (int64_t a = 0; a < axis; ++a) mx = std::max(mx, double(x[at(a)]));
      for (int64_t a = 0; a < axis; ++a) sum += std::exp(double(x[at(a)]) - mx);
      for (int64_t a = 0; a < axis; ++a) {
        double v = double(x[at(a)]) - mx;
        y[at(a)] = static_cast<float>(spec.op == "log_softmax" ? v - std::log(sum) : std::exp(v) / sum);
      }
    }
}

void normalize(const KernelSpec& spec, const KernelArgs& args) {
  const AroundDim around = around_dim(spec, args.inputs[0].shape());
  const int64_t outer = around.outer, axis = around.axis, inner = around.inner;
  const double eps = spec.attrs->get_float("eps");
  const float* x = args.inputs[0].data<float>();
  float* y = args.outputs[0].data<float>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t a) { return (o * axis + a) * inner + in; };
      double sum = 0.0;
      for (int64_t a = 0; a < axis; ++a) sum += double(x[at(a)]) * x[at(a)];
      const double d = std::max(std::sqrt(sum), eps);
      for (int64_t a = 0; a < axis; ++a) y[at(a)] = static_cast<float>(x[at(a)] / d);
    }
}

void layer_norm(const KernelSpec& spec, const KernelArgs& args) {
  int64_t cols = 1;
  for (int64_t d : spec.attrs->get_ints("normalized_shape")) cols *= d;
  double eps = spec.attrs->get_float("eps");
  const float* w = args.params.size() > 0 ? args.params[0].data<float>() : nullptr;
  const float* b = args.params.size() > 1 ? args.params[1].data<float>() : nullptr;
  const float* x = args.inputs[0].data<float>();
  float* y = args.outputs[0].data<float>();
  int64_t rows = cols == 0 ? 0 : args.inputs[0].numel() / cols;
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0.0, var = 0.0;
    for (int64_t c = 0; c < cols; ++c) mean += x[r * cols + c];
    mean /= double(cols);
    for (int64_t c = 0; c < cols; ++c) var += (x[r * cols + c] - mean) * (x[r * cols + c] - mean);
    var /= double(cols);
    for (int64_t c = 0; c < cols; ++c) {
      double v = (x[r * cols + c] - mean) / std::sqrt(var + eps);
      if (w) v *= w[c];
      if (b) v += b[c];
      y[r * cols + c] = static_cast<float>(v);
    }
  }
}

void dropout(const KernelSpec& spec, const KernelArgs& args) {
  double p = spec.attrs->get_float("p");
  auto x = args.inputs[0].span<float>();
  auto y = args.outputs[0].span<float>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (!args.training || p == 0.0) y[i] = x[i];
    else if (p == 1.0) y[i] = 0.f;
    else y[i] = dropout_keep(args.seed, i, static_cast<float>(p)) ? static_cast<float>(x[i] / (1.0 - p)) : 0.f;
  }
}

void binary(const KernelSpec& spec, const KernelArgs& args) {
  const Shape& out = args.outputs[0].shape();
  const Shape& as = args.inputs[0].shape();
  const Shape& bs = args.inputs[1].shape();
  // Offset in an input of the output element with coordinates `coord` (right-aligned).
  auto offset = [&](const Shape& s, const std::vector<int64_t>& coord) {
    int64_t off = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t c = coord[out.size() - s.size() + i];
      off = off * s[i] + (s[i] == 1 ? 0 : c);
    }
    return off;
  };
  double alpha = spec.op == "add" ? spec.attrs->get_float("alpha") : 1.0;
  const float* a = args.inputs[0].data<float>();
  const float* b = args.inputs[1].data<float>();
  float* y = args.outputs[0].data<float>();
  std::vector<int64_t> coord(out.size());
  for (int64_t e = 0; e < args.outputs[0].numel(); ++e) {
    int64_t rest = e;
    for (size_t d = out.size(); d-- > 0;) {
      coord[d] = rest % out[d];
      rest /= out[d];
    }
    double va = a[offset(as, coord)], vb = b[offset(bs, coord)];
    y[e] = static_cast<float>(spec.op == "add" ? va + alpha * vb : va * vb);
  }
}

void expand(const KernelSpec&, const KernelArgs& args) {
  const Shape& out = args.outputs[0].shape();
  const Shape& in = args.inputs[0].shape();
  const float* x = args.inputs[0].data<float>();
  float* y = args.outputs[0].data<float>();
  for (int64_t e = 0; e < args.outputs[0].numel(); ++e) {
    int64_t rest = e, off = 0, scale = 1;
    for (size_t d = out.size(); d-- > 0;) {  // innermost first; the input's dims right-aligned
      const int64_t c = rest % out[d];
      rest /= out[d];
      const size_t lead = out.size() - in.size();
      if (d < lead) continue;
      const int64_t size = in[d - lead];
      off += (size == 1 ? 0 : c) * scale;
      scale *= size;
    }
    y[e] = x[off];
  }
}

void parameter(const KernelSpec&, const KernelArgs& args) {
  const auto* w = static_cast<const unsigned char*>(args.params[0].raw_data());
  auto* y = static_cast<unsigned char*>(args.outputs[0].raw_data());
  for (size_t b = 0; b < args.outputs[0].nbytes(); ++b) y[b] = w[b];
}

void scale(const KernelSpec& spec, const KernelArgs& args) {
  const float factor = static_cast<float>(spec.attrs->get_float("factor"));
  const float* x = args.inputs[0].data<float>();
  float* y = args.outputs[0].data<float>();
  for (int64_t e = 0; e < args.outputs[0].numel(); ++e) y[e] = x[e] * factor;
}

void index_select(const KernelSpec& spec, const KernelArgs& args) {
  const Shape& in = args.inputs[0].shape();
  const Shape& out = args.outputs[0].shape();
  const int64_t rank = static_cast<int64_t>(in.size());
  const int64_t dim = (spec.attrs->get_int("dim") + rank) % rank;
  const int64_t* idx = args.inputs[1].data<int64_t>();
  const float* x = args.inputs[0].data<float>();
  float* y = args.outputs[0].data<float>();
  for (int64_t e = 0; e < args.outputs[0].numel(); ++e) {
    int64_t rest = e, off = 0, stride = 1;
    for (int64_t d = rank - 1; d >= 0; --d) {  // innermost first
      const int64_t c = rest % out[static_cast<size_t>(d)];
      rest /= out[static_cast<size_t>(d)];
      off += (d == dim ? idx[c] : c) * stride;
      stride *= in[static_cast<size_t>(d)];
    }
    y[e] = x[off];
  }
}

void cat(const KernelSpec& spec, const KernelArgs& args) {
  const Shape& out = args.outputs[0].shape();
  int64_t dim = spec.attrs->get_int("dim");
  if (dim < 0) dim += static_cast<int64_t>(out.size());
  size_t elem = dtype_size(args.outputs[0].dtype());
  char* y = static_cast<char*>(args.outputs[0].raw_data());
  std::vector<int64_t> coord(out.size());
  for (int64_t e = 0; e < args.outputs[0].numel(); ++e) {
    int64_t rest = e;
    for (size_t d = out.size(); d-- > 0;) {
      coord[d] = rest % out[d];
      rest /= out[d];
    }
    // Find the input holding coord[dim], then its flat offset.
    int64_t c = coord[dim];
    size_t which = 0;
    while (c >= args.inputs[which].shape()[dim]) c -= args.inputs[which++].shape()[dim];
    const Tensor& in = args.inputs[which];
    int64_t off = 0;
    for (size_t d = 0; d < out.size(); ++d) off = off * in.shape()[d] + (static_cast<int64_t>(d) == dim ? c : coord[d]);
    std::memcpy(y + e * elem, static_cast<const char*>(in.raw_data()) + off * elem, elem);
  }
}

void copy(const KernelSpec& spec, const KernelArgs& args) {
  size_t elem = dtype_size(args.inputs[0].dtype());
  for (int64_t e = 0; e < args.inputs[0].numel(); ++e)
    std::memcpy(static_cast<char*>(args.outputs[0].raw_data()) + e * elem,
                static_cast<const char*>(args.inputs[0].raw_data()) + e * elem, elem);
}

void permute(const KernelSpec& spec, const KernelArgs& args) {
  const Shape& in = args.inputs[0].shape();
  const Shape& out = args.outputs[0].shape();
  std::vector<int64_t> dims = spec.attrs->get_ints("dims");
  for (int64_t& d : dims)
    if (d < 0) d += static_cast<int64_t>(in.size());
  const size_t elem = dtype_size(args.inputs[0].dtype());
  std::vector<int64_t> coord(out.size()), in_coord(in.size());
  for (int64_t e = 0; e < args.outputs[0].numel(); ++e) {
    int64_t rest = e;
    for (size_t d = out.size(); d-- > 0;) {
      coord[d] = rest % out[d];
      rest /= out[d];
    }
    for (size_t k = 0; k < out.size(); ++k) in_coord[dims[k]] = coord[k];  // output dim k is input dim dims[k]
    int64_t off = 0;
    for (size_t d = 0; d < in.size(); ++d) off = off * in[d] + in_coord[d];
    std::memcpy(static_cast<char*>(args.outputs[0].raw_data()) + e * elem,
                static_cast<const char*>(args.inputs[0].raw_data()) + off * elem, elem);
  }
}

}  // namespace tandem::reference
