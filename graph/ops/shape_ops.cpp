// cat (torch.cat), narrow (torch.narrow), flatten (torch.nn.Flatten), reshape
// (torch.reshape) and permute (torch.permute). flatten and reshape are views: the runtime
// gives their output the input's storage. narrow copies (its slice is contiguous only along
// the first dim); it is also how a data_parallel block scatters its inputs
// (placement/replicate.cpp). permute copies too: Tandem's tensors are contiguous, so the
// reordered elements are written out (torch's x.permute(...).contiguous()).
#include <algorithm>
#include <charconv>

#include "graph/ops/op_schemas.h"

namespace tandem {
namespace {

OpSchema cat() {
  OpSchema s;
  s.name = "cat";
  s.summary = "concatenate along dim (torch.cat)";
  s.attrs = {{"dim", AttrType::integer, int64_t{0}}};
  s.min_inputs = 2;
  s.max_inputs = -1;
  s.infer = [](const std::vector<TensorType>& in, const Attributes& a) {
    const TensorType& first = in[0];
    int64_t rank = static_cast<int64_t>(first.shape.size());
    if (rank == 0) throw SchemaError("cannot concatenate 0-D tensors");
    int64_t dim = normalize_dim(a.get_int("dim"), rank, "dim");
    TensorType out = first;
    for (size_t i = 1; i < in.size(); ++i) {
      const TensorType& t = in[i];
      std::string which = "input " + std::to_string(i + 1);
      if (t.dtype != first.dtype)
        throw SchemaError(which + " is " + std::string(dtype_name(t.dtype)) + " but input 1 is " +
                          std::string(dtype_name(first.dtype)));
      if (static_cast<int64_t>(t.shape.size()) != rank)
        throw SchemaError(which + " has shape " + sym_shape_str(t.shape) + " but input 1 has " + sym_shape_str(first.shape) +
                          " (same rank needed)");
      for (int64_t d = 0; d < rank; ++d) {
        if (d == dim) continue;
        if (!(t.shape[d] == first.shape[d]))
          throw SchemaError(which + " has shape " + sym_shape_str(t.shape) + " but input 1 has " +
                            sym_shape_str(first.shape) + ": they must agree outside dim " + std::to_string(dim));
      }
      out.shape[dim] = out.shape[dim] + t.shape[dim];
    }
    return out;
  };
  return s;
}

void check_narrow(int64_t extent, int64_t dim, int64_t start, int64_t length) {
  if (start + length > extent)
    throw SchemaError("start " + std::to_string(start) + " + length " + std::to_string(length) + " runs past dim " +
                      std::to_string(dim) + " of size " + std::to_string(extent));
}

OpSchema narrow() {
  OpSchema s;
  s.name = "narrow";
  s.summary = "elements start..start+length-1 along dim (torch.narrow)";
  s.attrs = {{"dim", AttrType::integer, {}, true},
             {"start", AttrType::integer, {}, true, false, {}, 0.0},
             {"length", AttrType::integer, {}, true, false, {}, 1.0}};
  s.infer = [](const std::vector<TensorType>& in, const Attributes& a) {
    const TensorType& x = in[0];
    int64_t rank = static_cast<int64_t>(x.shape.size());
    if (rank == 0) throw SchemaError("cannot narrow a 0-D tensor");
    int64_t dim = normalize_dim(a.get_int("dim"), rank, "dim");
    int64_t start = a.get_int("start"), length = a.get_int("length");
    // A fixed extent is checked now, a symbolic one when a run binds it (check_bound)
    if (x.shape[dim].is_constant()) check_narrow(x.shape[dim].constant(), dim, start, length);
    TensorType out = x;
    out.shape[dim] = Dim(length);
    return out;
  };
  s.check_bound = [](const std::vector<Shape>& in, const Attributes& a) {
    const int64_t rank = static_cast<int64_t>(in[0].size());
    const int64_t dim = normalize_dim(a.get_int("dim"), rank, "dim");
    check_narrow(in[0][dim], dim, a.get_int("start"), a.get_int("length"));
  };
  return s;
}

OpSchema flatten() {
  OpSchema s;
  s.name = "flatten";
  s.summary = "merge dimensions start_dim..end_dim into one (torch.nn.Flatten)";
  s.attrs = {{"start_dim", AttrType::integer, int64_t{1}}, {"end_dim", AttrType::integer, int64_t{-1}}};
  s.is_view = true;
  s.infer = [](const std::vector<TensorType>& in, const Attributes& a) {
    const TensorType& x = in[0];
    int64_t rank = std::max<int64_t>(1, static_cast<int64_t>(x.shape.size()));
    SymShape shape = x.shape.empty() ? SymShape{Dim(1)} : x.shape;
    int64_t start = normalize_dim(a.get_int("start_dim"), rank, "start_dim");
    int64_t end = normalize_dim(a.get_int("end_dim"), rank, "end_dim");
    if (start > end) throw SchemaError("start_dim " + std::to_string(start) + " comes after end_dim " + std::to_string(end));
    SymShape out(shape.begin(), shape.begin() + start);
    Dim merged(1);
    for (int64_t d = start; d <= end; ++d) merged = merged * shape[d];
    out.push_back(merged);
    out.insert(out.end(), shape.begin() + end + 1, shape.end());
    return TensorType{out, x.dtype};
  };
  return s;
}

bool is_identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

OpSchema reshape() {
  OpSchema s;
  s.name = "reshape";
  s.summary = "the same elements in another shape; one -1 is inferred, symbols allowed (torch.reshape)";
  s.attrs = {{"shape", AttrType::shape, {}, true}};
  s.is_view = true;
  s.validate = [](Attributes& a) {
    int inferred = 0;
    for (const std::string& item : std::get<std::vector<std::string>>(a.values().at("shape"))) {
      if (item == "-1") ++inferred;
      else if (!is_identifier(item)) {
        int64_t v = -2;
        auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
        if (ec != std::errc() || end != item.data() + item.size() || v < 0)
          throw SchemaError("shape entries must be sizes, -1 or symbol names; got '" + item + "'");
      }
    }
    if (inferred > 1) throw SchemaError("only one dimension of shape can be -1");
  };
  s.infer = [](const std::vector<TensorType>& in, const Attributes& a) {
    const TensorType& x = in[0];
    Dim total = sym_numel(x.shape);
    const auto& items = std::get<std::vector<std::string>>(a.values().at("shape"));
    std::vector<std::string> input_symbols = total.symbols();
    for (const std::string& item : items)
      if (is_identifier(item) && std::find(input_symbols.begin(), input_symbols.end(), item) == input_symbols.end())
        throw SchemaError("symbol '" + item + "' in shape is not a size of the input " + sym_shape_str(x.shape));
    SymShape out;
    Dim known(1);
    int inferred_at = -1;
    for (const std::string& item : items) {
      if (item == "-1") {
        inferred_at = static_cast<int>(out.size());
        out.push_back(Dim(1));
        continue;
      }
      Dim d = is_identifier(item) ? Dim::symbol(item) : Dim(std::stoll(item));
      known = known * d;
      out.push_back(d);
    }
    if (inferred_at >= 0) {
      std::optional<Dim> rest = known == Dim(0) ? std::nullopt : total.divided_by(known);
      if (!rest)
        throw SchemaError("cannot reshape " + sym_shape_str(x.shape) + " (" + total.str() + " elements) to " +
                          a.str() + ": " + known.str() + " does not divide it");
      out[inferred_at] = *rest;
    } else if (!(known == total)) {
      throw SchemaError("cannot reshape " + sym_shape_str(x.shape) + " (" + total.str() + " elements) into " +
                        sym_shape_str(out) + " (" + known.str() + " elements)");
    }
    return TensorType{out, x.dtype};
  };
  return s;
}

std::string dims_str(const std::vector<int64_t>& dims) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + "]";
}

OpSchema permute() {
  OpSchema s;
  s.name = "permute";
  s.summary = "reorder the dimensions: output dim k is input dim dims[k] (torch.permute)";
  s.attrs = {{"dims", AttrType::int_list, {}, true}};
  s.infer = [](const std::vector<TensorType>& in, const Attributes& a) {
    const TensorType& x = in[0];
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    const std::vector<int64_t> dims = a.get_ints("dims");
    if (static_cast<int64_t>(dims.size()) != rank)
      throw SchemaError("dims " + dims_str(dims) + " has " + std::to_string(dims.size()) + " entries but the input " +
                        sym_shape_str(x.shape) + " has " + std::to_string(rank) +
                        " dimensions: dims must name each dimension once");
    std::vector<bool> named(static_cast<size_t>(rank), false);
    TensorType out = x;
    for (int64_t k = 0; k < rank; ++k) {
      const int64_t d = normalize_dim(dims[k], rank, "dims entry");
      if (named[d])
        throw SchemaError("dims " + dims_str(dims) + " is not a permutation: it names dimension " + std::to_string(d) +
                          " twice");
      named[d] = true;
      out.shape[k] = x.shape[d];
    }
    return out;
  };
  return s;
}

}  // namespace

std::vector<OpSchema> shape_op_schemas() { return {cat(), narrow(), flatten(), reshape(), permute()}; }

}  // namespace tandem
