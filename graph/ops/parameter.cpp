// parameter: a learned tensor that belongs to no layer of torch.nn (a torch module's bare
// nn.Parameter: vit's class token and position embedding, convnext's layer scale).
//
// A layer reads a tensor, so this one reads one too (by default the previous layer's
// output, as any layer): it runs where and when that tensor is there, and ignores its
// values (its gradient is zero). The output is the parameter itself, the same for every
// sample; add, mul and expand broadcast it over the batch.
#include "graph/ops/op_schemas.h"

namespace tandem {
namespace {

// buffer: a tensor that is not learned, named by the layer's path, whose values come with
// the weights (a module's registered buffer: swin's and maxvit's relative_position_index;
// a constant from_torch computes: swin's shifted-window attention mask). It reads a tensor
// as parameter does, for the same reason, and has no gradient.
OpSchema buffer_schema() {
  OpSchema s;
  s.name = "buffer";
  s.summary = "a tensor that is not learned, of the given shape and dtype, named by the layer's path; its values "
              "come with the weights (a module's registered buffer)";
  s.attrs = {{"shape", AttrType::int_list, {}, true, false, {}, 1.0},
             {"dtype", AttrType::string, std::string("float32"), false, false, {"float32", "int64"}}};
  s.validate = [](Attributes& a) {
    std::vector<int64_t> shape = a.get_ints("shape");
    if (shape.empty()) throw SchemaError("shape must not be empty: give the tensor's sizes, such as [2401]");
    a.set("shape", shape);
  };
  s.params = [](const Attributes& a) {
    const DType dtype = a.get_string("dtype") == "int64" ? DType::int64 : DType::float32;
    return std::vector<ParamSpec>{{"", a.get_ints("shape"), {ParamInit::Kind::zeros}, false, dtype}};
  };
  s.infer = [](const std::vector<TensorType>&, const Attributes& a) {
    SymShape out;
    for (int64_t d : a.get_ints("shape")) out.push_back(Dim(d));
    return TensorType{out, a.get_string("dtype") == "int64" ? DType::int64 : DType::float32};
  };
  return s;
}

}  // namespace

std::vector<OpSchema> parameter_schemas() {
  OpSchema s;
  s.name = "parameter";
  s.summary = "a learned tensor of the given shape, named by the layer's path (a module's bare nn.Parameter)";
  s.attrs = {{"shape", AttrType::int_list, {}, true, false, {}, 1.0}};
  s.validate = [](Attributes& a) {
    std::vector<int64_t> shape = a.get_ints("shape");
    if (shape.empty()) throw SchemaError("shape must not be empty: give the tensor's sizes, such as [1, 1, 768]");
    a.set("shape", shape);  // always a list from here on
  };
  // Named by the layer's path alone (an empty local name): `class_token`, as torch's
  // state_dict names the attribute. Drawn as torch.randn draws, the usual nn.Parameter.
  s.params = [](const Attributes& a) {
    return std::vector<ParamSpec>{{"", a.get_ints("shape"), {ParamInit::Kind::normal, 0.0, 1.0}}};
  };
  s.infer = [](const std::vector<TensorType>&, const Attributes& a) {
    SymShape out;
    for (int64_t d : a.get_ints("shape")) out.push_back(Dim(d));
    return TensorType{out, DType::float32};
  };
  return {s, buffer_schema()};
}

}  // namespace tandem
