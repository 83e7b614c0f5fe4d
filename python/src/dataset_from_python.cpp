#include "dataset_from_python.h"

#include "graph/text_similarity.h"
#include "runtime/trainer.h"
#include "tensor_from_python.h"

namespace tandem::python {
namespace {

namespace py = pybind11;

Dataset dataset_from_arrays(const py::dict& data, const Graph& graph) {
  std::vector<ColumnSpec> columns = data_columns(graph);
  std::vector<std::string> names;
  for (const ColumnSpec& c : columns) names.push_back(c.name);
  // the names the dict lacks: a key the model does not read is most likely one of them
  std::vector<std::string> missing;
  for (const std::string& n : names)
    if (!data.contains(n)) missing.push_back(n);
  std::string inputs, targets;
  for (const GraphInput& in : graph.inputs) inputs += (inputs.empty() ? "" : ", ") + in.name;
  for (const GraphInput& t : graph.targets) targets += (targets.empty() ? "" : ", ") + t.name;
  for (auto [key, value] : data) {
    std::string name = py::str(key);
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      std::string hint = missing.size() == 1 ? " (did you mean '" + missing.front() + "'?)" : did_you_mean(name, missing);
      throw UserError("data: '" + name + "' is neither an input nor a target of model '" + graph.name + "'" + hint +
                      "; its inputs: " + inputs + (targets.empty() ? "" : "; its targets: " + targets));
    }
  }
  TensorMap tensors;
  for (const ColumnSpec& c : columns) {
    if (!data.contains(c.name))
      throw UserError("data: no '" + c.name + "' (model '" + graph.name + "' reads every input and target from the data)");
    std::string what = "data['" + c.name + "']";
    Tensor t = tensor_from_python(data[py::str(c.name)], what, c.dtype);
    Shape expected{t.dim() > 0 ? t.size(0) : -1};
    expected.insert(expected.end(), c.sample_shape.begin(), c.sample_shape.end());
    if (t.shape() != expected) {
      std::string want = shape_str(c.sample_shape);
      throw UserError(what + " has shape " + shape_str(t.shape()) + ", expected [N" + (c.sample_shape.empty() ? "" : ", ") +
                      want.substr(1) + " (samples first, as in a data file)");
    }
    if (c.dtype == DType::int64 && c.high) {
      auto values = t.span<int64_t>();
      int64_t row = t.size(0) == 0 ? 1 : t.numel() / t.size(0);
      for (size_t i = 0; i < values.size(); ++i)
        if ((values[i] < 0 || values[i] >= *c.high) && values[i] != c.ignored)
          throw UserError(what + ": sample " + std::to_string(static_cast<int64_t>(i) / row) + ": " + c.name + " " +
                          std::to_string(values[i]) + " is outside [0, " + std::to_string(*c.high) + ")");
    }
    tensors.emplace(c.name, std::move(t));
  }
  Dataset dataset(std::move(tensors));
  if (dataset.size() == 0) throw UserError("data: no samples");
  return dataset;
}

}  // namespace

Dataset dataset_from_python(const py::handle& data, const Graph& graph, const TrainingSpec& spec) {
  if (py::isinstance<py::dict>(data)) return dataset_from_arrays(data.cast<py::dict>(), graph);
  DataSpec source = spec.data.value_or(DataSpec{});
  if (!data.is_none()) {
    if (!py::isinstance<py::str>(data) && !py::hasattr(data, "__fspath__"))
      throw UserError("data: give a dict of arrays by input and target name, a path (CSV or safetensors), or None "
                      "for the model's train: data:, not a " + std::string(py::str(data.get_type().attr("__name__"))));
    source.path = py::str(py::module_::import("os").attr("fspath")(data));
    source.format = "";
    source.named_at = "";  // the caller's path, relative to the working directory
  } else if (!spec.data) {
    throw UserError("no training data: give data= (arrays or a file) or a data: entry in the model's train: section");
  }
  py::gil_scoped_release nogil;
  return load_dataset(source, data_columns(graph));
}

}  // namespace tandem::python
