// max_pool2d (torch.nn.MaxPool2d) and avg_pool2d (torch.nn.AvgPool2d).
#include "graph/ops/op_schemas.h"
#include "graph/ops/window2d.h"

namespace tandem {
namespace {

TensorType pooled(const std::vector<TensorType>& in, const Attributes& a) {
  const TensorType& x = only_input(in);
  std::array<int64_t, 2> out = pool2d_window(a).output_size(image_size(x, -1, ""));
  TensorType y = x;
  y.shape[x.shape.size() - 2] = Dim(out[0]);
  y.shape[x.shape.size() - 1] = Dim(out[1]);
  return y;
}

OpSchema pool(std::string name, std::string summary, std::vector<AttrSpec> extra) {
  OpSchema s;
  s.name = std::move(name);
  s.summary = std::move(summary);
  s.attrs = {{"kernel_size", AttrType::int_list, {}, true, false, {}, 1.0},
             {"stride", AttrType::int_list, {}, false, true, {}, 1.0},  // null: kernel_size
             {"padding", AttrType::int_list, int64_t{0}, false, false, {}, 0.0}};
  s.attrs.insert(s.attrs.end(), extra.begin(), extra.end());
  s.validate = [](Attributes& a) {
    if (a.has("return_indices") && a.get_bool("return_indices"))
      throw SchemaError("return_indices: true is not supported (a layer has one output)");
    pool2d_window(a);
  };
  s.infer = pooled;
  return s;
}

}  // namespace

std::vector<OpSchema> pooling_schemas() {
  return {
      pool("max_pool2d", "maximum over each kernel_size window of [N, C, H, W] (torch.nn.MaxPool2d)",
           {{"dilation", AttrType::int_list, int64_t{1}, false, false, {}, 1.0},
            {"return_indices", AttrType::boolean, false},
            {"ceil_mode", AttrType::boolean, false}}),
      pool("avg_pool2d", "mean over each kernel_size window of [N, C, H, W] (torch.nn.AvgPool2d)",
           {{"ceil_mode", AttrType::boolean, false},
            {"count_include_pad", AttrType::boolean, true}}),
  };
}

}  // namespace tandem
