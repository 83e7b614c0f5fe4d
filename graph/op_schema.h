// What the graph knows about an op, independent of any device: its attributes (with
// torch's names and defaults), how many inputs it takes, its parameters, and how the
// output's shape and dtype follow from the inputs'. One schema per op; the table is in
// op_registry.cpp, the schemas in graph/ops/.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "graph/attributes.h"
#include "graph/symbolic.h"

namespace tandem {

enum class AttrType {
  integer,
  number,     // float; an int is accepted
  boolean,
  string,     // one of `choices` when given
  int_list,   // an int or a list of ints (normalized_shape); or a word of `choices` (padding: same)
  shape,      // a list of ints and symbol names (reshape's shape)
};

struct AttrSpec {
  std::string name;
  AttrType type;
  AttrValue default_value;  // monostate: no default; see `required`
  bool required = false;
  bool nullable = false;     // null accepted (padding_idx)
  std::vector<std::string> choices = {};
  std::optional<double> min = std::nullopt;  // inclusive bound for integer/number
  std::optional<double> max = std::nullopt;
};

/// The symbolic type of a tensor in the graph.
struct TensorType {
  SymShape shape;
  DType dtype = DType::float32;
};

/// How a parameter is initialised, after PyTorch's reset_parameters for the module.
struct ParamInit {
  enum class Kind { uniform, normal, ones, zeros } kind = Kind::zeros;
  double a = 0;  // uniform: low; normal: mean
  double b = 0;  // uniform: high; normal: std
  std::optional<int64_t> zero_row = std::nullopt;  // embedding padding_idx
};

/// A parameter, or a buffer: state that is not trained (batch_norm2d's running
/// statistics). Both are held, saved and loaded together under their state_dict names and
/// reach kernels in the same list, in the schema's order. A buffer never has a gradient
/// (its grad_params entry is an undefined Tensor), no optimizer or clip_grad_norm sees it,
/// and only a kernel's training forward changes it, in place. See docs/yaml-format.md.
struct ParamSpec {
  std::string name;  // local: "weight"; the graph prefixes the layer path
  Shape shape;
  ParamInit init;
  bool trainable = true;          // false: a buffer
  DType dtype = DType::float32;   // int64 for a counter buffer (num_batches_tracked, as torch)
};

/// Whether `params` holds a trainable parameter (a layer with only buffers trains nothing).
bool any_trainable(const std::vector<ParamSpec>& params);

/// Bad shapes, dtypes or attribute combinations found by a schema: the loader adds the
/// file, line, column and layer path.
class SchemaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct OpSchema {
  std::string name;
  std::string summary;  // one line, for docs and `tandem ops`
  std::vector<AttrSpec> attrs;
  int min_inputs = 1;
  int max_inputs = 1;  // -1: any number
  /// Checks attribute values together and normalises them (negative padding_idx);
  /// throws SchemaError. Optional.
  std::function<void(Attributes&)> validate;
  /// Parameters for these attributes, in the order kernels receive them. Optional.
  std::function<std::vector<ParamSpec>(const Attributes&)> params;
  /// Output type from input types; throws SchemaError with a message naming the input.
  std::function<TensorType(const std::vector<TensorType>&, const Attributes&)> infer;
  /// Checks that need the symbols' values, on the input shapes once a run binds them (a
  /// narrow of a dimension `batch` long can only be checked then); throws SchemaError.
  /// Optional.
  std::function<void(const std::vector<Shape>&, const Attributes&)> check_bound;
  /// The output is the input with another shape (flatten, reshape): no kernel runs.
  bool is_view = false;
  /// For an int64 input at `slot`, the exclusive upper bound of valid indices (for
  /// random inputs); nullopt when the op has none. `is_offsets` marks embedding_bag's
  /// offsets input. Optional.
  std::function<std::optional<int64_t>(int slot, const Attributes&, bool* is_offsets)> index_bound;
};

/// The schema of `op`, or nullptr.
const OpSchema* find_op_schema(const std::string& op);
/// All ops, sorted by name.
std::vector<const OpSchema*> all_op_schemas();

/// Helpers for schemas: normalise a possibly negative dim against `rank`, or throw.
int64_t normalize_dim(int64_t dim, int64_t rank, const std::string& what);
/// Torch broadcasting of two symbolic shapes; throws SchemaError.
SymShape broadcast_shapes(const SymShape& a, const SymShape& b);

}  // namespace tandem
