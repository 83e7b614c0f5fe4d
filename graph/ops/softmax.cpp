// softmax (torch.nn.Softmax), log_softmax (torch.nn.LogSoftmax) and normalize
// (torch.nn.functional.normalize, p = 2) along `dim`: the output has the input's type.
#include "graph/ops/op_schemas.h"

namespace tandem {
namespace {

OpSchema softmax_like(std::string name, std::string summary) {
  OpSchema s;
  s.name = std::move(name);
  s.summary = std::move(summary);
  s.attrs = {{"dim", AttrType::integer, {}, true}};
  s.infer = [](const std::vector<TensorType>& in, const Attributes& a) {
    require_dtype(in[0], DType::float32, "the input");
    normalize_dim(a.get_int("dim"), static_cast<int64_t>(in[0].shape.size()), "dim");
    return in[0];
  };
  return s;
}

/// normalize: x / max(||x||_2, eps) along dim (F.normalize; swin v2's cosine attention).
OpSchema normalize() {
  OpSchema s = softmax_like("normalize", "x / max(||x||_p, eps) along dim, p = 2 (torch.nn.functional.normalize)");
  s.attrs = {{"p", AttrType::number, 2.0, false, false, {}, 2.0, 2.0},
             {"dim", AttrType::integer, int64_t{1}},
             {"eps", AttrType::number, 1e-12, false, false, {}, 0.0}};
  return s;
}

}  // namespace

std::vector<OpSchema> softmax_schemas() {
  return {
      softmax_like("softmax", "softmax along dim (torch.nn.Softmax)"),
      softmax_like("log_softmax", "log of softmax along dim (torch.nn.LogSoftmax)"),
      normalize(),
  };
}

}  // namespace tandem
