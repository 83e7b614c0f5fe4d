#include "forward_hooks.h"

#include <pybind11/stl.h>

#include <cstring>
#include <vector>

#include "core/error.h"
#include "tensor_to_python.h"

namespace tandem::python {
namespace {

using namespace pybind11::literals;

/// What a hook is told about the layer that ran (torch passes the module).
struct PyLayerCall {
  std::string path;  // as in the model file: "model.fc", for each of its replicas
  std::string op;
  std::string device;
  std::optional<int> replica;  // which replica of a data_parallel block; none outside one
  int replicas = 1;
};

/// The handle register_forward_hook returns: remove() takes the hook off, as torch's
/// RemovableHandle; a no-op once the model is gone or the hook removed.
struct HookHandle {
  std::weak_ptr<PyForwardHooks> hooks;
  int id = -1;
  void remove() {
    std::shared_ptr<PyForwardHooks> h = hooks.lock();
    if (!h || !h->entries.erase(id) || !h->entries.empty()) return;
    h->model->set_forward_hook({});  // no hook left: forwards copy nothing for one
  }
};

bool under(const std::string& path, const std::string& prefix) {
  return path == prefix || (path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0 &&
                            path[prefix.size()] == '.');
}

/// A host copy of `t`: the call's tensors may be buffers a later layer reuses.
py::object to_python(const Tensor& t, bool as_torch) {
  Tensor copy = Tensor::empty(t.shape(), t.dtype());
  if (t.nbytes() > 0) std::memcpy(copy.raw_data(), t.raw_data(), t.nbytes());
  return as_torch ? torch_view(copy) : py::object(numpy_view(copy));
}

/// Runs the matching Python hooks for one layer call (on the cpu's lane, see forward_hook.h).
void call_python_hooks(const std::weak_ptr<PyForwardHooks>& weak, const LayerCall& call) {
  const Node& node = *call.node;
  // Tandem's scatter and gather steps are no layer of the model: torch's hooks never see them
  if (node.replica && node.replica->kind != ReplicaRole::Kind::replica) return;
  py::gil_scoped_acquire gil;
  std::shared_ptr<PyForwardHooks> hooks = weak.lock();
  if (!hooks || hooks->error) return;
  PyLayerCall layer{node.path, node.op, call.device.str(), std::nullopt, 1};
  if (node.replica) {
    layer.path = node.path.substr(0, node.path.rfind('@'));
    layer.replica = node.replica->replica;
    layer.replicas = node.replica->replicas;
  }
  py::object layer_object, inputs, output;
  try {
    for (const auto& [id, entry] : std::map<int, PyForwardHooks::Entry>(hooks->entries)) {  // a hook may remove one
      if (entry.layer && !under(layer.path, *entry.layer)) continue;
      if (!layer_object) {
        layer_object = py::cast(layer);
        py::tuple in(call.inputs.size());
        for (size_t i = 0; i < call.inputs.size(); ++i) in[i] = to_python(call.inputs[i], hooks->as_torch);
        inputs = in;
        output = to_python(call.output, hooks->as_torch);
      }
      entry.fn(layer_object, inputs, output);
    }
  } catch (py::error_already_set& e) {
    hooks->error = std::make_shared<py::error_already_set>(std::move(e));
  }
}

}  // namespace

void PyForwardHooks::raise_pending() {
  if (!error) return;
  std::shared_ptr<py::error_already_set> e = std::move(error);
  error.reset();
  e->restore();
  throw py::error_already_set();
}

void register_forward_hook_types(py::module_& module) {
  py::class_<PyLayerCall>(module, "LayerCall",
                          "The layer a forward hook is called for: its path as in the model file, its op, the "
                          "device it ran on, and which replica of a data_parallel block (None outside one).")
      .def_readonly("path", &PyLayerCall::path)
      .def_readonly("op", &PyLayerCall::op)
      .def_readonly("device", &PyLayerCall::device)
      .def_readonly("replica", &PyLayerCall::replica)
      .def_readonly("replicas", &PyLayerCall::replicas)
      .def("__repr__", [](const PyLayerCall& c) {
        return "LayerCall('" + c.path + "', " + c.op + " on " + c.device +
               (c.replica ? ", replica " + std::to_string(*c.replica) + " of " + std::to_string(c.replicas) : "") + ")";
      });
  py::class_<HookHandle>(module, "RemovableHandle", "What register_forward_hook returns: remove() takes the hook off.")
      .def("remove", &HookHandle::remove)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](HookHandle& self, py::args) { self.remove(); });
}

py::object register_forward_hook(const std::shared_ptr<PyForwardHooks>& hooks, py::function fn,
                                 const std::optional<std::string>& layer) {
  const Graph& graph = hooks->model->graph();
  if (layer) {
    bool found = false;
    for (const Node& n : graph.nodes) found = found || under(n.path, *layer);
    if (!found)
      throw UserError("register_forward_hook(layer='" + *layer + "'): model '" + graph.name +
                      "' has no layer or block of that path (give a path as `tandem check` lists them, or "
                      "layer=None for every layer)");
  }
  const int id = hooks->next_id++;
  if (hooks->entries.empty())
    hooks->model->set_forward_hook(
        [weak = std::weak_ptr<PyForwardHooks>(hooks)](const LayerCall& call) { call_python_hooks(weak, call); });
  hooks->entries.emplace(id, PyForwardHooks::Entry{std::move(fn), layer});
  return py::cast(HookHandle{hooks, id});
}

void copy_forward_hooks(const std::shared_ptr<PyForwardHooks>& from, const std::shared_ptr<PyForwardHooks>& to) {
  for (const auto& [id, entry] : from->entries) register_forward_hook(to, py::function(entry.fn), entry.layer);
}

}  // namespace tandem::python
