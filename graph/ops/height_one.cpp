// conv1d (torch.nn.Conv1d), max_pool1d, avg_pool1d (torch.nn.MaxPool1d, AvgPool1d) and
// batch_norm1d (torch.nn.BatchNorm1d): each its 2-D op's schema over a height of 1
// (height_one.h), with the 1-D shapes and windows checked here, in 1-D words.
#include "graph/ops/height_one.h"

#include <array>

#include "graph/ops/op_schemas.h"
#include "graph/ops/window2d.h"

namespace tandem {
namespace {

constexpr std::array<const char*, 4> kWindowAttrs{"kernel_size", "stride", "padding", "dilation"};

bool is_batch_norm(std::string_view op) { return op == "batch_norm1d"; }

/// A window attribute given as one int or a list of one; 'same' / 'valid' (padding) and a
/// null stride pass as they are.
void require_single(const Attributes& a, const char* name) {
  if (!a.has(name) || a.is_null(name)) return;
  if (std::holds_alternative<std::string>(a.values().at(name))) return;
  const std::vector<int64_t> v = a.get_ints(name);
  if (v.size() != 1) throw SchemaError(std::string(name) + " must be an int or a list of one int, got " + shape_str(v));
}

/// The input of a 1-D op, checked in its own words: [N, C, L] or [C, L] (batch_norm1d:
/// [N, C] or [N, C, L]), float32, with `channels` channels (when >= 0).
void check_input(std::string_view op, const TensorType& x, int64_t channels, const char* channels_attr) {
  require_dtype(x, DType::float32, "the input");
  const size_t rank = x.shape.size();
  if (rank != 2 && rank != 3)
    throw SchemaError(std::string("the input must be ") + (is_batch_norm(op) ? "[N, C] or [N, C, L]" : "[N, C, L] (or unbatched [C, L])") +
                      ", got shape " + sym_shape_str(x.shape));
  const size_t c_dim = is_batch_norm(op) ? 1 : rank - 2;
  if (channels >= 0 && !(x.shape[c_dim] == Dim(channels)))
    throw SchemaError("the input has " + x.shape[c_dim].str() + " channels (dimension " + std::to_string(c_dim) +
                      " of " + sym_shape_str(x.shape) + ") but " + channels_attr + " is " + std::to_string(channels));
  if (is_batch_norm(op)) return;
  const Dim& length = x.shape[rank - 1];
  if (!length.is_constant())
    throw SchemaError("the input's length is the symbol " + length.str() + " (shape " + sym_shape_str(x.shape) +
                      "); give it as an integer: the output size depends on it");
}

/// The window along L larger than the padded input: said in 1-D words before the 2-D
/// geometry would say it of a width.
void check_window(const Window2d& w, int64_t length) {
  const int64_t span = w.dilation[1] * (w.kernel[1] - 1) + 1, padded = length + w.pad_l[1] + w.pad_r[1];
  if (span > padded)
    throw SchemaError("the input's length is " + std::to_string(length) + " (" + std::to_string(padded) +
                      " padded) but the window spans " + std::to_string(span) + " (kernel " +
                      std::to_string(w.kernel[1]) + ", dilation " + std::to_string(w.dilation[1]) +
                      "): the output would be empty");
}

/// [.., C, L] as [.., C, 1, L] (batch_norm1d's [N, C] as [N, C, 1, 1]): for Shape and
/// SymShape alike, `one` being that shape's 1.
template <class AnyShape, class Size>
AnyShape with_height(std::string_view op, AnyShape s, Size one) {
  if (is_batch_norm(op) && s.size() == 2) {
    s.insert(s.end(), {one, one});
    return s;
  }
  s.insert(s.end() - 1, one);
  return s;
}

SymShape one_d_sym_shape(std::string_view op, SymShape s, size_t input_rank) {
  if (is_batch_norm(op) && input_rank == 2) {
    s.resize(2);
    return s;
  }
  s.erase(s.end() - 2);
  return s;
}

/// The 1-D op `name` from its 2-D op's schema `two_d`.
OpSchema one_d(OpSchema two_d, std::string name, std::string summary) {
  OpSchema s = two_d;
  s.name = name;
  s.summary = std::move(summary);
  s.validate = [validate = two_d.validate](Attributes& a) {
    for (const char* attr : kWindowAttrs) require_single(a, attr);
    Attributes b = two_d_attributes(a);
    if (validate) validate(b);
  };
  if (two_d.params)
    s.params = [params = two_d.params, name](const Attributes& a) {
      std::vector<ParamSpec> p = params(two_d_attributes(a));
      if (name == "conv1d") p[0].shape.erase(p[0].shape.begin() + 2);  // [O, C/g, 1, k]: the init's fan-in is the same
      return p;
    };
  s.infer = [infer = two_d.infer, name](const std::vector<TensorType>& in, const Attributes& a) {
    const TensorType& x = only_input(in);
    const Attributes b = two_d_attributes(a);
    if (name == "conv1d") {
      check_input(name, x, a.get_int("in_channels"), "in_channels");
      check_window(conv2d_window(b), x.shape.back().constant());
    } else if (name == "batch_norm1d") {
      check_input(name, x, a.get_int("num_features"), "num_features");
    } else {
      check_input(name, x, -1, "");
      check_window(pool2d_window(b), x.shape.back().constant());
    }
    TensorType x2 = x;
    x2.shape = with_height(name, x.shape, Dim(1));
    TensorType y = infer({x2}, b);
    y.shape = one_d_sym_shape(name, y.shape, x.shape.size());
    return y;
  };
  return s;
}

const OpSchema& find_in(const std::vector<OpSchema>& family, const std::string& name) {
  for (const OpSchema& s : family)
    if (s.name == name) return s;
  throw std::logic_error("no schema " + name);
}

}  // namespace

std::string two_d_op(std::string_view op) {
  if (op == "conv1d") return "conv2d";
  if (op == "max_pool1d") return "max_pool2d";
  if (op == "avg_pool1d") return "avg_pool2d";
  if (op == "batch_norm1d") return "batch_norm2d";
  return {};
}

Attributes two_d_attributes(const Attributes& one_d) {
  Attributes b = one_d;
  for (const char* name : kWindowAttrs) {
    if (!one_d.has(name) || one_d.is_null(name)) continue;
    if (std::holds_alternative<std::string>(one_d.values().at(name))) continue;
    const int64_t height = std::string_view(name) == "padding" ? 0 : 1;
    b.set(name, std::vector<int64_t>{height, one_d.get_ints(name).at(0)});
  }
  return b;
}

Shape two_d_shape(std::string_view op, const Shape& one_d) { return with_height(op, one_d, int64_t{1}); }

Shape two_d_param_shape(std::string_view op, size_t index, const Shape& one_d) {
  Shape s = one_d;
  if (op == "conv1d" && index == 0) s.insert(s.begin() + 2, 1);
  return s;
}

std::vector<OpSchema> height_one_schemas() {
  return {
      one_d(conv2d_schemas().front(), "conv1d",
            "1-D cross-correlation over [N, C, L] with stride, padding, dilation and groups (torch.nn.Conv1d)"),
      one_d(find_in(pooling_schemas(), "max_pool2d"), "max_pool1d",
            "maximum over each kernel_size window of [N, C, L] (torch.nn.MaxPool1d)"),
      one_d(find_in(pooling_schemas(), "avg_pool2d"), "avg_pool1d",
            "mean over each kernel_size window of [N, C, L] (torch.nn.AvgPool1d)"),
      one_d(batch_norm_schemas().front(), "batch_norm1d",
            "normalise each channel of [N, C] or [N, C, L] over N (and L); running statistics for eval "
            "(torch.nn.BatchNorm1d)"),
  };
}

}  // namespace tandem
