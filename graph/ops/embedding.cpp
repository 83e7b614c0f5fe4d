// embedding (torch.nn.Embedding) and embedding_bag (torch.nn.EmbeddingBag), and
// index_select (torch.index_select), the same row gather from a table that is another
// layer's output (swin's and maxvit's relative position bias table read at a fixed index).
#include "graph/ops/op_schemas.h"

namespace tandem {
namespace {

std::vector<AttrSpec> table_attrs() {
  return {{"num_embeddings", AttrType::integer, {}, true, false, {}, 1.0},
          {"embedding_dim", AttrType::integer, {}, true, false, {}, 1.0},
          {"padding_idx", AttrType::integer, {}, false, true},
          {"max_norm", AttrType::number, {}, false, true},
          {"norm_type", AttrType::number, 2.0},
          {"scale_grad_by_freq", AttrType::boolean, false},
          {"sparse", AttrType::boolean, false}};
}

// torch accepts padding_idx in [-num, num) and stores it as a non-negative index.
void validate_table(Attributes& a) {
  int64_t num = a.get_int("num_embeddings");
  if (!a.is_null("padding_idx")) {
    int64_t p = a.get_int("padding_idx");
    if (p < -num || p >= num)
      throw SchemaError("padding_idx " + std::to_string(p) + " must be within num_embeddings (" +
                        std::to_string(-num) + " to " + std::to_string(num - 1) + ")");
    if (p < 0) a.set("padding_idx", num + p);
  }
  if (!a.is_null("max_norm"))
    throw SchemaError("max_norm is not supported (it renormalises the table in place during forward); use null");
  // torch refuses it for max bags too (F.embedding_bag: "max mode does not support scaling
  // the gradient by the frequency")
  if (a.get_bool("scale_grad_by_freq") && a.has("mode") && a.get_string("mode") == "max")
    throw SchemaError("scale_grad_by_freq: true does not apply to mode max (as in torch); use mode sum or mean");
}

std::vector<ParamSpec> table_params(const Attributes& a) {
  ParamInit init{ParamInit::Kind::normal, 0.0, 1.0};
  if (!a.is_null("padding_idx")) init.zero_row = a.get_int("padding_idx");
  return {{"weight", {a.get_int("num_embeddings"), a.get_int("embedding_dim")}, init}};
}

OpSchema embedding() {
  OpSchema s;
  s.name = "embedding";
  s.summary = "rows of a table by int64 index (torch.nn.Embedding)";
  s.attrs = table_attrs();
  s.validate = validate_table;
  s.params = table_params;
  s.infer = [](const std::vector<TensorType>& in, const Attributes& a) {
    require_dtype(in[0], DType::int64, "the input (indices)");
    TensorType y{in[0].shape, DType::float32};
    y.shape.push_back(Dim(a.get_int("embedding_dim")));
    return y;
  };
  s.index_bound = [](int, const Attributes& a, bool* is_offsets) {
    *is_offsets = false;
    return std::optional<int64_t>(a.get_int("num_embeddings"));
  };
  return s;
}

OpSchema embedding_bag() {
  OpSchema s;
  s.name = "embedding_bag";
  s.summary = "sums, means or maxima of bags of table rows (torch.nn.EmbeddingBag)";
  s.attrs = table_attrs();
  s.attrs.push_back({"mode", AttrType::string, std::string("mean"), false, false, {"sum", "mean", "max"}});
  s.attrs.push_back({"include_last_offset", AttrType::boolean, false});
  s.min_inputs = 1;
  s.max_inputs = 2;
  s.validate = validate_table;
  s.params = table_params;
  s.infer = [](const std::vector<TensorType>& in, const Attributes& a) {
    require_dtype(in[0], DType::int64, "the input (indices)");
    Dim bags;
    if (in.size() == 1) {
      if (in[0].shape.size() != 2)
        throw SchemaError("without offsets the input must be 2-D [bags, bag_size], got " + sym_shape_str(in[0].shape) +
                          "; give offsets as a second input for 1-D indices");
      if (a.get_bool("include_last_offset")) throw SchemaError("include_last_offset needs an offsets input");
      bags = in[0].shape[0];
    } else {
      require_dtype(in[1], DType::int64, "the offsets (second input)");
      if (in[0].shape.size() != 1)
        throw SchemaError("with offsets the indices must be 1-D, got " + sym_shape_str(in[0].shape));
      if (in[1].shape.size() != 1) throw SchemaError("offsets must be 1-D, got " + sym_shape_str(in[1].shape));
      bags = in[1].shape[0];
      if (a.get_bool("include_last_offset")) bags = bags + Dim(-1);
    }
    return TensorType{{bags, Dim(a.get_int("embedding_dim"))}, DType::float32};
  };
  s.index_bound = [](int slot, const Attributes& a, bool* is_offsets) {
    *is_offsets = slot == 1;
    return std::optional<int64_t>(a.get_int("num_embeddings"));
  };
  return s;
}

OpSchema index_select() {
  OpSchema s;
  s.name = "index_select";
  s.summary = "the entries of the first input at the int64 indices of the second along dim (torch.index_select)";
  s.attrs = {{"dim", AttrType::integer, {}, true}};
  s.min_inputs = s.max_inputs = 2;
  s.infer = [](const std::vector<TensorType>& in, const Attributes& a) {
    require_dtype(in[0], DType::float32, "the first input (the source)");
    require_dtype(in[1], DType::int64, "the second input (the indices)");
    if (in[0].shape.empty()) throw SchemaError("the source must have at least one dimension");
    if (in[1].shape.size() != 1)
      throw SchemaError("the indices must be 1-D, got " + sym_shape_str(in[1].shape) +
                        "; reshape them to [-1] first (what from_torch writes for table[index])");
    const int64_t dim = normalize_dim(a.get_int("dim"), static_cast<int64_t>(in[0].shape.size()), "dim");
    TensorType y = in[0];
    y.shape[static_cast<size_t>(dim)] = in[1].shape[0];
    return y;
  };
  return s;
}

}  // namespace

std::vector<OpSchema> embedding_schemas() { return {embedding(), embedding_bag(), index_select()}; }

}  // namespace tandem
