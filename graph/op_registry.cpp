// The op table, and helpers every schema uses.
#include <algorithm>
#include <map>

#include "graph/ops/op_schemas.h"

namespace tandem {
namespace {

const std::map<std::string, OpSchema>& registry() {
  static const std::map<std::string, OpSchema> table = [] {
    std::map<std::string, OpSchema> t;
    for (auto family : {linear_schemas, matmul_schemas, embedding_schemas, activation_schemas, softmax_schemas, reduce_schemas,
                        dropout_schemas, layer_norm_schemas, batch_norm_schemas, binary_schemas, shape_op_schemas,
                        conv2d_schemas, pooling_schemas, height_one_schemas, pad_roll_schemas, interpolate_schemas, rnn_schemas,
                        attention_schemas, parameter_schemas})
      for (OpSchema& s : family()) t.emplace(s.name, std::move(s));
    return t;
  }();
  return table;
}

}  // namespace

const OpSchema* find_op_schema(const std::string& op) {
  auto it = registry().find(op);
  return it == registry().end() ? nullptr : &it->second;
}

std::vector<const OpSchema*> all_op_schemas() {
  std::vector<const OpSchema*> all;
  for (const auto& [name, schema] : registry()) all.push_back(&schema);
  return all;
}

int64_t normalize_dim(int64_t dim, int64_t rank, const std::string& what) {
  if (dim < -rank || dim >= rank)
    throw SchemaError(what + " " + std::to_string(dim) + " is out of range for a tensor of rank " +
                      std::to_string(rank) + " (expected " + std::to_string(-rank) + " to " +
                      std::to_string(rank - 1) + ")");
  return dim < 0 ? dim + rank : dim;
}

SymShape broadcast_shapes(const SymShape& a, const SymShape& b) {
  size_t rank = std::max(a.size(), b.size());
  SymShape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    Dim da = i < rank - a.size() ? Dim(1) : a[i - (rank - a.size())];
    Dim db = i < rank - b.size() ? Dim(1) : b[i - (rank - b.size())];
    if (da == db || db == Dim(1)) out[i] = da;
    else if (da == Dim(1)) out[i] = db;
    else
      throw SchemaError("shapes " + sym_shape_str(a) + " and " + sym_shape_str(b) +
                        " do not broadcast (dimension " + std::to_string(i) + ": " + da.str() + " vs " + db.str() +
                        ")");
  }
  return out;
}

bool any_trainable(const std::vector<ParamSpec>& params) {
  return std::any_of(params.begin(), params.end(), [](const ParamSpec& p) { return p.trainable; });
}

const TensorType& only_input(const std::vector<TensorType>& in) { return in.at(0); }

void require_dtype(const TensorType& t, DType dtype, const std::string& what) {
  if (t.dtype != dtype)
    throw SchemaError(what + " must be " + std::string(dtype_name(dtype)) + ", got " +
                      std::string(dtype_name(t.dtype)));
}

void require_rank_at_least(const TensorType& t, size_t rank, const std::string& what) {
  if (t.shape.size() < rank)
    throw SchemaError(what + " must have at least " + std::to_string(rank) + " dimension(s), got shape " +
                      sym_shape_str(t.shape));
}

}  // namespace tandem
