// tandem.Model: runtime/model.h for Python. Tensors cross without copies (tensor_from_python.h,
// tensor_to_python.h); the GIL is released while Tandem computes.
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>

#include "compute_scope.h"
#include "deferred_release.h"
#include "graph/load_graph.h"
#include "graph/text_similarity.h"
#include "placement_arguments.h"
#include "plan_to_python.h"
#include "py_model.h"
#include "tensor_from_python.h"
#include "tensor_to_python.h"

namespace tandem::python {
namespace {

using namespace pybind11::literals;

std::string read_text(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

py::list shape_to_python(const SymShape& shape) {
  py::list out;
  for (const Dim& d : shape) {
    if (d.is_constant()) out.append(d.constant());
    else out.append(d.str());
  }
  return out;
}

py::list declared_to_python(const Graph& graph, const std::vector<GraphInput>& declared) {
  py::list out;
  for (const GraphInput& in : declared) {
    const TensorType& type = graph.values[in.value].type;
    out.append(py::dict("name"_a = in.name, "shape"_a = shape_to_python(type.shape), "dtype"_a = dtype_name(type.dtype)));
  }
  return out;
}

/// Outputs in the model's order, as torch tensors when an input was one, else numpy arrays.
py::dict outputs_to_python(const Graph& graph, const TensorMap& outputs, bool as_torch) {
  py::dict result;
  for (const GraphOutput& o : graph.outputs) {
    const Tensor& t = outputs.at(o.name);
    result[py::str(o.name)] = as_torch ? torch_view(t) : numpy_view(t);
  }
  return result;
}

/// The tensors of `values` (a dict by name) for the inputs of `self`, each checked against
/// its input's dtype; `as_torch` set when one is a torch tensor.
TensorMap inputs_from_dict(const PyModel& self, const py::dict& values, bool& as_torch) {
  TensorMap inputs;
  for (auto [key, value] : values) {
    std::string name = py::str(key);
    std::optional<size_t> index = self.input_index(name);
    if (!index)
      throw UserError("model '" + self.model->graph().name + "' has no input '" + name + "'" +
                      did_you_mean(name, self.input_names));
    as_torch = as_torch || is_torch_tensor(value);
    inputs.emplace(name, tensor_from_python(value, self.input_descriptions[*index], self.input_dtypes[*index]));
  }
  return inputs;
}

/// forward(), or with `batch_size` forward_batches(): inputs by position or by name.
py::dict run_forward(PyModel& self, const py::args& args, const py::kwargs& kwargs, std::optional<int64_t> batch_size) {
  release_deferred_references();
  const Graph& graph = self.model->graph();
  if (args.size() > self.input_names.size())
    throw UserError("model '" + graph.name + "' takes " + std::to_string(self.input_names.size()) + " input(s), got " +
                    std::to_string(args.size()) + " positional argument(s)");
  bool as_torch = false;
  TensorMap inputs;
  for (size_t i = 0; i < args.size(); ++i) {
    as_torch = as_torch || is_torch_tensor(args[i]);
    inputs.emplace(self.input_names[i], tensor_from_python(args[i], self.input_descriptions[i], self.input_dtypes[i]));
  }
  for (auto [key, value] : kwargs) {
    std::string name = py::str(key);
    std::optional<size_t> index = self.input_index(name);
    if (!index)
      throw UserError("model '" + graph.name + "' has no input '" + name + "'" + did_you_mean(name, self.input_names));
    if (*index < args.size()) throw UserError("input '" + name + "' of model '" + graph.name + "' is given twice");
    as_torch = as_torch || is_torch_tensor(value);
    inputs.emplace(name, tensor_from_python(value, self.input_descriptions[*index], self.input_dtypes[*index]));
  }
  TensorMap outputs;
  self.hooks->as_torch = as_torch;  // what the forward hooks are given
  try {
    ComputeScope compute;
    outputs = batch_size ? self.model->forward_batches(inputs, *batch_size) : self.model->forward(inputs);
  } catch (...) {
    self.hooks->error.reset();  // the forward's own error wins
    throw;
  }
  self.hooks->raise_pending();
  // `inputs` goes after this, with the GIL: the arrays it shares are given back at once
  return outputs_to_python(graph, outputs, as_torch);
}

py::dict forward(PyModel& self, const py::args& args, const py::kwargs& kwargs) {
  return run_forward(self, args, kwargs, std::nullopt);
}

/// Keras's predict(x, batch_size=): the inputs a batch at a time, the next one submitted
/// while the devices work on this one; batch_size is the one keyword that is not an input.
py::dict predict(PyModel& self, const py::args& args, py::kwargs kwargs) {
  if (!kwargs.contains("batch_size"))
    throw UserError("predict() needs batch_size=N (the samples a batch); forward() runs the inputs as one batch");
  const py::object size = kwargs["batch_size"];
  if (!py::isinstance<py::int_>(size) || py::isinstance<py::bool_>(size))
    throw UserError("predict(): batch_size must be an int, got " + std::string(py::str(py::type::of(size).attr("__name__"))));
  const int64_t batch_size = size.cast<int64_t>();
  py::kwargs inputs;
  for (auto [key, value] : kwargs)
    if (std::string(py::str(key)) != "batch_size") inputs[key] = value;
  return run_forward(self, args, inputs, batch_size);
}

/// A state_dict's keys as the model names its parameters: torch's nn.DataParallel saves
/// them under "module." (a model wrapped whole), which the model may or may not have.
std::string parameter_name(const std::string& key, bool strip_module, bool add_module) {
  if (strip_module && key.starts_with("module.")) return key.substr(7);
  if (add_module) return "module." + key;
  return key;
}

py::object load_state_dict(PyModel& self, const py::dict& state, bool strict) {
  release_deferred_references();
  Model& model = *self.model;
  const TensorMap& params = model.parameters();
  // Which way round the "module." prefix goes, judged by whether the keys match better
  size_t as_is = 0, stripped = 0, added = 0;
  for (auto [key, value] : state) {
    std::string name = py::str(key);
    as_is += params.count(name);
    stripped += name.starts_with("module.") && params.count(name.substr(7));
    added += params.count("module." + name);
  }
  const bool strip = stripped > as_is && stripped >= added;
  const bool add = !strip && added > as_is;
  TensorMap given;
  std::vector<std::string> unexpected, missing;
  for (auto [key, value] : state) {
    std::string key_text = py::str(key);
    std::string name = parameter_name(key_text, strip, add);
    auto param = params.find(name);
    if (param == params.end()) {
      unexpected.push_back(key_text);
      if (!strict) continue;
    }
    std::optional<DType> dtype;
    if (param != params.end()) dtype = param->second.dtype();
    given.emplace(name, tensor_from_python(value, "state_dict['" + key_text + "']", dtype));
  }
  if (!strict) {  // torch's strict=False: what is there loads, the rest stays
    for (const auto& [name, t] : params)
      if (!given.count(name)) {
        missing.push_back(name);
        given.emplace(name, t.clone());
      }
  }
  model.set_weights(given, "state_dict");
  return py::make_tuple(missing, unexpected);
}

py::dict state_dict(const PyModel& self) {
  py::dict out;
  const TensorMap& params = self.model->parameters();
  for (const ParamSpec& p : self.model->graph().parameters()) out[py::str(p.name)] = numpy_view(params.at(p.name), false);
  return out;
}

py::dict gradients(const PyModel& self) {
  py::dict out;
  const TensorMap& dense = self.model->gradients();
  for (const ParamSpec& p : self.model->graph().parameters()) {
    if (!p.trainable) continue;
    auto it = dense.find(p.name);
    // a sparse: true table's gradient is rows: a dense copy of it, as torch's to_dense()
    out[py::str(p.name)] = it != dense.end() ? numpy_view(it->second, false) : numpy_view(self.model->gradient(p.name));
  }
  return out;
}

py::dict backward(PyModel& self, const py::dict& inputs, const py::dict& grad_outputs, bool training, uint64_t seed) {
  release_deferred_references();
  const Graph& graph = self.model->graph();
  bool as_torch = false;
  TensorMap in = inputs_from_dict(self, inputs, as_torch);
  TensorMap grads;
  for (auto [key, value] : grad_outputs) {
    std::string name = py::str(key);
    bool known = false;
    for (const GraphOutput& o : graph.outputs) known = known || o.name == name;
    if (!known) {
      std::vector<std::string> names;
      for (const GraphOutput& o : graph.outputs) names.push_back(o.name);
      throw UserError("model '" + graph.name + "' has no output '" + name + "'" + did_you_mean(name, names));
    }
    grads.emplace(name, tensor_from_python(value, "grad_outputs['" + name + "']", DType::float32));
  }
  TensorMap input_grads;
  {
    ComputeScope compute;
    input_grads = self.model->backward(in, grads, training, seed);
  }
  py::dict out;
  for (const auto& [name, t] : input_grads) out[py::str(name)] = as_torch ? torch_view(t) : numpy_view(t);
  return out;
}

Bindings bindings_from(int64_t batch, const py::dict& others) {
  Bindings b{{"batch", batch}};
  for (auto [key, value] : others) b[py::str(key)] = value.cast<int64_t>();
  return b;
}

/// model.place(place=...): a dict {pattern: device} (ordered: later ones win), or a list of
/// "PATTERN=DEVICE" strings or (pattern, device) pairs.
std::vector<std::pair<std::string, std::string>> place_patterns(const py::object& place) {
  std::vector<std::pair<std::string, std::string>> out;
  if (place.is_none()) return out;
  if (py::isinstance<py::dict>(place)) {
    for (auto [pattern, device] : place.cast<py::dict>()) out.emplace_back(py::str(pattern), py::str(device));
    return out;
  }
  if (py::isinstance<py::str>(place)) return place_patterns(py::make_tuple(place));
  for (py::handle item : place) {
    if (py::isinstance<py::str>(item)) {
      std::string text = py::str(item);
      size_t eq = text.rfind('=');
      if (eq == std::string::npos || eq == 0)
        throw UserError("place(place=['" + text + "']): write PATTERN=DEVICE, such as 'encoder.*=cuda:1' or 'emb=cpu'");
      out.emplace_back(text.substr(0, eq), text.substr(eq + 1));
    } else {
      auto pair = item.cast<std::pair<std::string, std::string>>();
      out.push_back(pair);
    }
  }
  return out;
}

/// A model that runs on the cpu alone (on the calling thread) has a plan without sizes;
/// `tandem plan` places it over the cpu for its memory estimate, and so does this. One
/// moved to the cpu whose file names GPUs keeps the plan it runs.
Plan estimated_cpu_plan(const Model& model, Plan plan, const Bindings& bindings, int64_t batch, bool training) {
  PlacementPolicy policy;
  if (model.graph().placement) apply_placement_spec(*model.graph().placement, policy);
  policy.training = training;
  policy.batch = batch;
  policy.bindings = bindings;
  try {
    return place(model.graph(), DeviceInventory{}, policy);
  } catch (const UserError&) {
    return plan;
  }
}

std::string model_repr(const PyModel& self) {
  const Graph& g = self.model->graph();
  std::string s = "tandem.Model('" + g.name + "', inputs:";
  for (const GraphInput& in : g.inputs)
    s += " " + in.name + " " + std::string(dtype_name(g.values[in.value].type.dtype)) + " " +
         sym_shape_str(g.values[in.value].type.shape);
  s += "; outputs:";
  for (const GraphOutput& o : g.outputs) s += " " + o.name + " " + sym_shape_str(g.values[o.value].type.shape);
  s += "; " + std::to_string(g.parameter_count()) + " parameters";
  if (self.model->placed()) s += "; placed";
  return s + ")";
}

}  // namespace

PyModel::PyModel(Model m, std::string yaml_text, std::string source_name)
    : model(std::make_unique<Model>(std::move(m))), yaml(std::move(yaml_text)), source(std::move(source_name)) {
  hooks->model = model.get();
  const Graph& g = model->graph();
  for (const GraphInput& in : g.inputs) {
    input_names.push_back(in.name);
    input_dtypes.push_back(g.values[in.value].type.dtype);
    input_descriptions.push_back("input '" + in.name + "' of model '" + g.name + "'");
  }
}

PyModel::~PyModel() {
  if (Py_IsInitialized() && PyGILState_Check()) {
    py::gil_scoped_release nogil;
    model.reset();
  }
}

std::optional<size_t> PyModel::input_index(const std::string& name) const {
  for (size_t i = 0; i < input_names.size(); ++i)
    if (input_names[i] == name) return i;
  return std::nullopt;
}

void register_model(py::module_& module) {
  register_forward_hook_types(module);
  py::class_<PyModel>(module, "Model", py::dynamic_attr(), R"doc(
A Tandem model: a layer graph loaded from YAML (docs/yaml-format.md), its parameters, and
where its layers run. Inputs and outputs are numpy arrays or torch tensors, shared without
copies; errors a user can cause raise tandem.ModelError with the CLI's message.)doc")
      .def_static(
          "load",
          [](const std::filesystem::path& path) {
            Model model = Model::load(path.string());
            return std::make_unique<PyModel>(std::move(model), read_text(path.string()), path.string());
          },
          "path"_a, "Loads and validates a YAML model file; parameters are initialised from seed 0.")
      .def_static(
          "from_yaml",
          [](const std::string& text, const std::string& name, bool weights_follow) {
            Model::Start start = weights_follow ? Model::Start::weights_follow : Model::Start::seeded;
            return std::make_unique<PyModel>(Model(load_graph_from_string(text, name), start), text, name);
          },
          "text"_a, "name"_a = "<yaml>", py::kw_only(), "weights_follow"_a = false,
          "A model from YAML text; `name` stands for the file in messages. weights_follow=True leaves the "
          "parameters undrawn (their memory unset) for a caller that loads every one next with "
          "load_state_dict(strict=True) or load_weights: drawing vgg's 132M values took a second.")
      .def("forward", &forward,
           "Inference: inputs by position (declared order) or by name; a dict of outputs by name, numpy "
           "arrays, or torch tensors when an input was one.")
      .def("__call__", &forward)
      .def("predict", &predict,
           "Inference over many samples a batch at a time: the inputs as forward() takes them, and "
           "batch_size=N. On a placed model the next batch's cpu layers and uploads overlap this batch's GPU "
           "work; the outputs are forward()'s batch by batch, joined along the batch dimension.")
      .def(
          "place",
          [](PyModel& self, std::optional<std::string> policy, const py::object& place, std::optional<int> sim_gpus,
             std::optional<std::string> sim_gpu_memory, std::optional<int> logical_gpus,
             std::optional<std::string> max_memory) -> PyModel& {
            PlaceArguments arguments{std::move(policy), place_patterns(place), sim_gpus, std::move(sim_gpu_memory),
                                     logical_gpus, std::move(max_memory)};
            ComputeScope compute;  // replaces the executors: their queues drain first
            place_model(*self.model, arguments);
            return self;
          },
          py::kw_only(), "policy"_a = py::none(), "place"_a = py::none(), "sim_gpus"_a = py::none(),
          "sim_gpu_memory"_a = py::none(), "logical_gpus"_a = py::none(), "max_memory"_a = py::none(),
          py::return_value_policy::reference,
          "Places the layers as the CLI's flags do: policy (--placement), place {pattern: device} (--place), "
          "sim_gpus, sim_gpu_memory, logical_gpus, max_memory. Returns the model.")
      .def(
          "to",
          [](PyModel& self, const std::string& device) -> PyModel& {
            ComputeScope compute;
            move_model(*self.model, device);
            return self;
          },
          "device"_a, py::return_value_policy::reference,
          "Every layer on `device` ('cpu', 'cuda:1'), as torch's module.to(). Returns the model.")
      .def(
          "_to_devices_of",
          [](PyModel& self, PyModel& other, const std::string& device) -> PyModel& {
            ComputeScope compute;
            move_model(*self.model, device, other.model.get());
            return self;
          },
          "other"_a, "device"_a, py::return_value_policy::reference,
          "to(device) on the devices `other` was placed on (parallel.replicate's replicas).")
      .def(
          "register_forward_hook",
          [](PyModel& self, py::function hook, std::optional<std::string> layer) {
            return register_forward_hook(self.hooks, std::move(hook), layer);
          },
          "hook"_a, "layer"_a = py::none(),
          "torch's register_forward_hook: hook(layer, inputs, output) after each layer of every forward, once per "
          "replica in a data_parallel block; `layer` (a layer's or block's path) limits it to the layers under it. "
          "inputs is a tuple and output an array (torch tensors when the forward was given torch tensors): copies "
          "on the host. Returns a handle whose remove() takes the hook off (docs/python.md).")
      .def(
          "_copy_forward_hooks_of", [](PyModel& self, PyModel& other) { copy_forward_hooks(other.hooks, self.hooks); },
          "other"_a, "Registers other's forward hooks on this model too (parallel.replicate's replicas).")
      .def("state_dict", &state_dict,
           "Parameters and buffers by PyTorch's names, in layer order: read-only numpy arrays over the model's "
           "own memory (change them with load_state_dict).")
      .def("load_state_dict", &load_state_dict, "state_dict"_a, "strict"_a = true,
           "Copies a state dict (numpy arrays or torch tensors) into the parameters; a 'module.' prefix "
           "(nn.DataParallel's) is matched either way. strict=False loads what is there. Returns "
           "(missing_keys, unexpected_keys).")
      .def(
          "init_parameters", [](PyModel& self, uint64_t seed) { self.model->init_parameters(seed); }, "seed"_a = 0,
          "Draws every parameter from PyTorch's distribution for its module.")
      .def(
          "load_weights",
          [](PyModel& self, const std::filesystem::path& path) {
            std::vector<std::string> notes;
            {
              py::gil_scoped_release nogil;
              notes = self.model->load_weights(path.string());
            }
            // e.g. nn.DataParallel's "module." taken off: a Python user sees it as a warning
            for (const std::string& note : notes)
              if (PyErr_WarnEx(PyExc_UserWarning, note.c_str(), 1) != 0) throw py::error_already_set();
          },
          "path"_a, "Loads a safetensors file of weights (or a checkpoint's); names saved through "
          "nn.DataParallel ('module.') load with a warning.")
      .def(
          "save_weights",
          [](const PyModel& self, const std::filesystem::path& path) {
            py::gil_scoped_release nogil;
            self.model->save_weights(path.string());
          },
          "path"_a, "Writes the weights as safetensors, by state_dict names.")
      .def(
          "_plan",
          [](PyModel& self, int64_t batch, bool training, const py::dict& bindings) {
            Plan plan;
            {
              Bindings b = bindings_from(batch, bindings);
              py::gil_scoped_release nogil;
              plan = self.model->plan_for(b, training);
              if (!self.model->placed()) plan = estimated_cpu_plan(*self.model, std::move(plan), b, batch, training);
            }
            return plan_to_python(plan, self.model->graph());
          },
          "batch"_a, "training"_a, "bindings"_a)
      .def("_last_plan", [](const PyModel& self) { return plan_to_python(self.model->last_plan(), self.model->graph()); })
      .def(
          "_report",
          [](const PyModel& self, bool totals) {
            return reports_to_python(totals ? self.model->device_totals() : self.model->device_report());
          },
          "totals"_a)
      .def("backward", &backward, "inputs"_a, "grad_outputs"_a, "training"_a = true, "seed"_a = 0,
           "torch's outputs.backward(grad_outputs) after a forward on `inputs` (dropout off when training is "
           "False): parameter gradients accumulate into gradients(); returns the float inputs' gradients.")
      .def("gradients", &gradients,
           "Gradients by parameter name (trainable ones), read-only numpy arrays; zero before a backward.")
      .def(
          "zero_grad", [](PyModel& self) { self.model->zero_gradients(); }, "Zeroes the gradients.")
      .def(
          "random_inputs",
          [](PyModel& self, int64_t batch, uint64_t seed, const py::kwargs& bindings) {
            TensorMap inputs = self.model->random_inputs(bindings_from(batch, bindings), seed);
            py::dict out;
            for (const std::string& name : self.input_names) out[py::str(name)] = numpy_view(inputs.at(name));
            return out;
          },
          "batch"_a = 1, "seed"_a = 0,
          "Random inputs as `tandem run` draws them; other symbols by keyword (seq=12).")
      .def(
          "_time_forward",
          [](PyModel& self, const py::dict& inputs, int repeat) {
            // What `tandem run --repeat` times (Model::forward alone, after three warm-up
            // calls), in this process: bench/bench_python.py tells the binding's cost from
            // the process's by it.
            bool as_torch = false;
            TensorMap in = inputs_from_dict(self, inputs, as_torch);
            std::vector<double> us;
            {
              ComputeScope compute;
              for (int i = 0; i < 3; ++i) self.model->forward(in);
              for (int i = 0; i < repeat; ++i) {
                auto start = std::chrono::steady_clock::now();
                TensorMap out = self.model->forward(in);
                us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
              }
            }
            std::sort(us.begin(), us.end());
            return us.empty() ? 0.0 : us[us.size() / 2];
          },
          "inputs"_a, "repeat"_a)
      .def_property_readonly("name", [](const PyModel& self) { return self.model->graph().name; })
      .def_property(
          "precision", [](const PyModel& self) { return std::string(precision_name(self.model->graph().precision)); },
          [](PyModel& self, const std::string& text) {
            const std::optional<Precision> precision = parse_precision(text);
            if (!precision)
              throw UserError("precision '" + text + "' is not a precision; use " + std::string(kPrecisionChoices));
            self.model->set_precision(*precision);
          },
          "The model's precision, 'fp32', 'bf16' or 'fp16' (the CLI's --precision): what its matrix work runs "
          "in where a layer or block does not say otherwise (docs/precision.md). Set it before the first pass.")
      .def_property(
          "fuse", [](const PyModel& self) { return self.model->inference_regions(); },
          [](PyModel& self, bool on) { self.model->set_inference_regions(on); },
          "Whether inference runs layers the device can fuse as one kernel (a convolution with the batch norm, "
          "activations and residual add after it, in oneDNN's own layouts on the cpu; docs/architecture.md): True "
          "by default. A forward with a hook registered runs layer by layer either way.")
      .def_property_readonly("inputs",
                             [](const PyModel& self) { return declared_to_python(self.model->graph(), self.model->graph().inputs); },
                             "The inputs: name, shape (symbols as strings), dtype, in declared order.")
      .def_property_readonly("targets",
                             [](const PyModel& self) { return declared_to_python(self.model->graph(), self.model->graph().targets); })
      .def_property_readonly("outputs",
                             [](const PyModel& self) {
                               std::vector<std::string> names;
                               for (const GraphOutput& o : self.model->graph().outputs) names.push_back(o.name);
                               return names;
                             })
      .def_property_readonly("parameter_count", [](const PyModel& self) { return self.model->graph().parameter_count(); })
      .def_property_readonly("has_loss", [](const PyModel& self) { return self.model->graph().loss.has_value(); })
      .def_property_readonly("placed", [](const PyModel& self) { return self.model->placed(); })
      .def_property_readonly(
          "data_parallel_blocks",
          [](const PyModel& self) {
            py::list blocks;
            for (const Block& b : self.model->graph().blocks) {
              if (!b.data_parallel) continue;
              std::vector<std::string> devices;
              for (Device d : b.data_parallel->devices) devices.push_back(d.str());
              blocks.append(py::dict("path"_a = b.path, "devices"_a = b.data_parallel->all_devices
                                                                     ? py::object(py::str("all"))
                                                                     : py::object(py::cast(devices))));
            }
            return blocks;
          },
          "The model's data_parallel blocks: [{'path': 'encoder', 'devices': ['cuda:0', 'cuda:1']}] ('all' for "
          "devices: all).")
      .def_property_readonly("yaml", [](const PyModel& self) { return self.yaml; }, "The model's YAML text.")
      .def_property_readonly("source", [](const PyModel& self) { return self.source; })
      .def("__repr__", &model_repr);
}

}  // namespace tandem::python
