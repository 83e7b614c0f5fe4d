#include "runtime/input_file.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "core/readable_file.h"
#include "runtime/data/dataset.h"
#include "runtime/io/file_kind.h"
#include "runtime/io/npy.h"
#include "runtime/io/safetensors.h"
#include "runtime/trainer.h"

namespace tandem {
namespace {

constexpr const char* kReadableKinds = "inputs are read from safetensors, NumPy .npy or .npz, or CSV";

/// An input's name for an example in a message.
std::string example_input(const Graph& graph) { return graph.inputs.empty() ? "x" : graph.inputs.front().name; }

std::string input_names(const Graph& graph) {
  std::string names;
  for (const GraphInput& in : graph.inputs) names += (names.empty() ? "" : ", ") + in.name;
  return names;
}

/// numpy.savez(path, array) names its arrays arr_0, arr_1, ...: the model cannot know
/// which is which, so the message says to name them.
void check_npz_names(const TensorMap& arrays, const std::string& path, const Graph& graph) {
  for (const auto& entry : arrays) {
    const std::string& name = entry.first;  // a plain name: clang 14 lambdas cannot capture a structured binding
    bool known = std::any_of(graph.inputs.begin(), graph.inputs.end(),
                             [&](const GraphInput& in) { return in.name == name; });
    if (!known)
      throw UserError(path + ": array '" + name + "' is not an input of model '" + graph.name + "' (its inputs: " +
                      input_names(graph) + "); name the arrays as the inputs, e.g. numpy.savez('" + path + "', " +
                      example_input(graph) + "=...)");
  }
}

/// Whether the first line of a plain CSV file holds a cell that is not a number: a header
/// line, as pandas' to_csv and spreadsheets write, which training data declares with
/// `header: true` but a file of inputs is read without a model file's say.
bool has_header_line(const std::string& path) {
  ReadableFile file(path);
  std::string start(std::min<uint64_t>(file.size(), 1 << 16), '\0');
  start.resize(file.read_some_at(0, start.size(), start.data()));
  std::string_view line(start);
  line = line.substr(0, line.find('\n'));
  while (!line.empty()) {
    size_t comma = line.find(',');
    std::string cell(line.substr(0, comma));
    std::erase_if(cell, [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
    char* end = nullptr;
    std::strtod(cell.c_str(), &end);
    if (!cell.empty() && end != cell.c_str() + cell.size()) return true;  // an empty cell is the reader's to refuse
    if (comma == std::string_view::npos) break;
    line.remove_prefix(comma + 1);
  }
  return false;
}

TensorMap read_csv_inputs(const std::string& path, const Graph& graph) {
  DataSpec spec;
  spec.path = path;
  spec.format = "csv";
  spec.header = !path.ends_with(".gz") && has_header_line(path);
  if (graph.training && graph.training->data && !graph.training->data->columns.empty()) {
    const DataSpec& data = *graph.training->data;
    spec.header = spec.header || data.header;
    for (const GraphInput& in : graph.inputs)
      if (auto it = data.columns.find(in.name); it != data.columns.end()) spec.columns.insert(*it);
  } else if (graph.training && graph.training->data) {
    spec.header = spec.header || graph.training->data->header;
  }
  std::vector<ColumnSpec> columns;
  for (ColumnSpec& c : data_columns(graph))
    if (std::any_of(graph.inputs.begin(), graph.inputs.end(), [&](const GraphInput& in) { return in.name == c.name; }))
      columns.push_back(std::move(c));
  // a header is read by name when it names the inputs (a labelled file's extra columns are
  // left out); one that names none of them is skipped and the columns taken in order
  Dataset data = load_dataset(spec, columns, CsvHeader::may_name_columns);
  return to_model_layout(data.tensors(), columns);
}

}  // namespace

TensorMap read_input_file(const std::string& path, const Graph& graph) {
  FileKind kind;
  {
    ReadableFile file(path);
    kind = kind_of_file(file);
    if (kind == FileKind::gzip && !path.ends_with(".gz"))
      throw UserError(path + " is a gzip file; " + kReadableKinds + ", and a gzip-compressed CSV is read by its "
                      "name ending in .gz: rename it");
    std::vector<std::byte> start(std::min<uint64_t>(file.size(), kFileKindProbeBytes));
    start.resize(file.read_some_at(0, start.size(), start.data()));
    const std::string described = describe_file_kind(kind, path, start);
    // Text that is not CSV by name or content is still tried as CSV (one column of numbers
    // has no comma), unless its name says it is a binary format. A file of no kind known is
    // read as safetensors, whose reader says what is wrong with it (a truncated file, say).
    const bool binary_name = path.ends_with(".safetensors") || path.ends_with(".npy") || path.ends_with(".npz");
    const bool readable = kind == FileKind::safetensors || kind == FileKind::npy || kind == FileKind::npz ||
                          kind == FileKind::gzip || kind == FileKind::unknown ||
                          (kind == FileKind::text && !binary_name && (described == "CSV" || described == "text"));
    if (!readable) throw UserError(path + " is " + described + ", not inputs Tandem reads; " + kReadableKinds);
  }
  switch (kind) {
    case FileKind::npy: {
      if (graph.inputs.size() != 1)
        throw UserError(path + " holds one array, but model '" + graph.name + "' has " +
                        std::to_string(graph.inputs.size()) + " inputs (" + input_names(graph) +
                        "); save them by name in an .npz: numpy.savez('inputs.npz', " + example_input(graph) + "=...)");
      return {{graph.inputs.front().name, read_npy(path)}};
    }
    case FileKind::npz: {
      TensorMap arrays = read_npz(path);
      check_npz_names(arrays, path, graph);
      return arrays;
    }
    case FileKind::text:
    case FileKind::gzip: return read_csv_inputs(path, graph);
    default: return read_safetensors(path);
  }
}

}  // namespace tandem
