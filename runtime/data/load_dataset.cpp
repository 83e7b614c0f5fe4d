#include "runtime/data/dataset.h"

#include <cmath>
#include <set>
#include <string_view>

#include "core/readable_file.h"
#include "runtime/data/csv_reader.h"
#include "runtime/io/npy.h"
#include "runtime/io/safetensors.h"

namespace tandem {

namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string data_format(const DataSpec& spec) {
  if (!spec.format.empty()) {
    if (spec.format != "csv" && spec.format != "safetensors" && spec.format != "npz")
      throw UserError(spec.path + ": unknown data format '" + spec.format + "' (expected csv, safetensors or npz)");
    return spec.format;
  }
  if (ends_with(spec.path, ".csv") || ends_with(spec.path, ".csv.gz")) return "csv";
  if (ends_with(spec.path, ".safetensors")) return "safetensors";
  if (ends_with(spec.path, ".npz")) return "npz";
  if (ends_with(spec.path, ".npy"))
    throw UserError(spec.path + ": a .npy file holds one array, and training data needs the inputs and the targets; "
                    "save them together by name: numpy.savez('data.npz', x=..., label=...)");
  throw UserError(spec.path + ": cannot tell the data format from the extension (expected .csv, .csv.gz, "
                  ".safetensors or .npz)");
}

void check_columns(const DataSpec& spec, const std::vector<ColumnSpec>& columns) {
  if (columns.empty()) throw UserError(spec.path + ": no columns to load");
  std::set<std::string> seen;
  for (const ColumnSpec& c : columns) {
    if (c.name.empty()) throw UserError(spec.path + ": a column has no name");
    if (!seen.insert(c.name).second) throw UserError(spec.path + ": column '" + c.name + "' is named twice");
    for (int64_t d : c.sample_shape)
      if (d < 0)
        throw UserError(spec.path + ": column '" + c.name + "' has a negative dimension in sample shape " +
                        shape_str(c.sample_shape));
    if (shape_numel(c.sample_shape) == 0)
      throw UserError(spec.path + ": column '" + c.name + "' has sample shape " + shape_str(c.sample_shape) +
                      ", which holds no values");
    if (c.high && *c.high <= 0)
      throw UserError(spec.path + ": column '" + c.name + "': high must be positive, got " +
                      std::to_string(*c.high));
  }
}

/// Each column is a tensor (an .npz's array) of the same name, [N, *sample_shape], of the
/// column's dtype (an .npz's float64 and narrower integers are widened as it is read).
TensorMap read_named_columns(const DataSpec& spec, const std::vector<ColumnSpec>& columns, bool npz) {
  const std::string& file = spec.path;
  if (!spec.columns.empty())
    throw UserError(file + ": columns: " + (npz ? "an .npz file names its arrays" : "a safetensors file names its tensors") +
                    "; the mapping is for CSV only");
  TensorMap all = npz ? read_npz(file) : read_safetensors(file);
  TensorMap out;
  const ColumnSpec* first = nullptr;
  int64_t n = 0;
  for (const ColumnSpec& c : columns) {
    auto it = all.find(c.name);
    if (it == all.end()) {
      std::string names;
      for (const auto& [name, t] : all) names += (names.empty() ? "" : ", ") + name;
      throw UserError(file + (npz ? ": no array '" : ": no tensor '") + c.name + "' (the file holds: " + (names.empty() ? "none" : names) +
                      ")");
    }
    const Tensor& t = it->second;
    std::string what = file + ": tensor '" + c.name + "'";
    if (t.dtype() != c.dtype)
      throw UserError(what + " is " + std::string(dtype_name(t.dtype())) + ", expected " +
                      std::string(dtype_name(c.dtype)));
    Shape expected{t.dim() > 0 ? t.size(0) : -1};
    expected.insert(expected.end(), c.sample_shape.begin(), c.sample_shape.end());
    if (t.shape() != expected) {
      Shape want = c.sample_shape;
      std::string want_str = shape_str(want);
      want_str = "[N" + std::string(want.empty() ? "" : ", ") + want_str.substr(1);
      throw UserError(what + " has shape " + shape_str(t.shape()) + ", expected " + want_str);
    }
    if (first == nullptr) {
      first = &c;
      n = t.size(0);
    } else if (t.size(0) != n) {
      throw UserError(what + " has " + std::to_string(t.size(0)) + " samples, '" + first->name + "' has " +
                      std::to_string(n));
    }
    if (c.dtype == DType::float32) {  // a NaN or an infinity would train to a NaN loss
      auto values = t.span<float>();
      int64_t row = t.size(0) == 0 ? 1 : t.numel() / t.size(0);
      for (size_t i = 0; i < values.size(); ++i)
        if (!std::isfinite(values[i]))
          throw UserError(what + ": sample " + std::to_string(static_cast<int64_t>(i) / row) + ", element " +
                          std::to_string(static_cast<int64_t>(i) % row) + " is " + (std::isnan(values[i]) ? "nan" : values[i] < 0 ? "-inf" : "inf") +
                          "; training data must hold finite values (drop or fill in that sample)");
    }
    if (c.dtype == DType::int64 && c.high) {
      auto values = t.span<int64_t>();
      int64_t row = t.size(0) == 0 ? 1 : t.numel() / t.size(0);
      for (size_t i = 0; i < values.size(); ++i)
        if ((values[i] < 0 || values[i] >= *c.high) && values[i] != c.ignored)
          throw UserError(what + ": sample " + std::to_string(static_cast<int64_t>(i) / row) +
                          (row > 1 ? ", element " + std::to_string(static_cast<int64_t>(i) % row) : "") + ": " +
                          out_of_range_text(c, values[i]));
    }
    out.emplace(c.name, t);
  }
  if (n == 0) throw UserError(file + ": no samples");
  return out;
}

}  // namespace

std::string out_of_range_text(const ColumnSpec& c, int64_t value) {
  const std::string range = "[0, " + std::to_string(c.high.value_or(0)) + ")";
  if (c.bound_by.empty()) return c.name + " " + std::to_string(value) + " is outside " + range;
  return "input '" + c.name + "' id " + std::to_string(value) + " is outside " + range + ", the rows of " +
         c.bound_by + "; fix the data, or give the table more rows";
}

Dataset load_dataset(const DataSpec& spec, const std::vector<ColumnSpec>& columns) {
  return load_dataset(spec, columns, CsvHeader::names_columns);
}

Dataset load_dataset(const DataSpec& spec, const std::vector<ColumnSpec>& columns, CsvHeader header) {
  // a model file's path is reported where the file names it, resolved as it was read
  if (!spec.named_at.empty()) try {
      ReadableFile probe(spec.path);
    } catch (const UserError& e) {
      throw UserError(spec.named_at + ": train: data: path names a file that cannot be read (a relative path is " +
                      "resolved next to the model file): " + e.what());
    }
  std::string format = data_format(spec);
  check_columns(spec, columns);
  if (format == "csv") return Dataset(read_csv(spec, columns, header == CsvHeader::may_name_columns));
  return Dataset(read_named_columns(spec, columns, format == "npz"));
}

}  // namespace tandem
