// model.register_forward_hook(fn, layer=None): torch's forward hooks for a tandem.Model.
// fn(layer, inputs, output) runs after each layer of every inference forward, once per
// replica in a data_parallel block (as torch calls a hook on each replica nn.DataParallel
// makes), with the layer's path, op and device, its inputs as a tuple and its output: numpy
// arrays, or torch tensors when the forward was given torch tensors. It returns a handle
// whose remove() takes the hook off. Built on Model::set_forward_hook (runtime/forward_hook.h).
#pragma once

#include <pybind11/pybind11.h>

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "runtime/model.h"

namespace tandem::python {

namespace py = pybind11;

/// The Python hooks of one model, owned by its PyModel. Read and changed with the GIL held.
struct PyForwardHooks {
  struct Entry {
    py::object fn;
    std::optional<std::string> layer;  // a layer's or block's path; none: every layer
  };
  std::map<int, Entry> entries;  // by handle id, in registration order
  int next_id = 0;
  Model* model = nullptr;        // the model the hooks are set on
  bool as_torch = false;         // the forward running was given torch tensors
  /// A hook's exception, raised by the forward once it returns (the hook runs on a device's
  /// lane, where Python's exception cannot travel).
  std::shared_ptr<py::error_already_set> error;

  /// Raises (with the GIL held) what a hook raised during the forward that just ended.
  void raise_pending();
};

/// Registers tandem.LayerCall and tandem.RemovableHandle.
void register_forward_hook_types(py::module_& module);

/// model.register_forward_hook: adds `fn` to `hooks` (setting the model's C++ hook the first
/// time) and returns its handle. ValueError for a `layer` the model has no layer under.
py::object register_forward_hook(const std::shared_ptr<PyForwardHooks>& hooks, py::function fn,
                                 const std::optional<std::string>& layer);

/// Registers every hook of `from` on `to` too (parallel.replicate: torch's replicas call
/// the module's hooks, whose dict they share).
void copy_forward_hooks(const std::shared_ptr<PyForwardHooks>& from, const std::shared_ptr<PyForwardHooks>& to);

}  // namespace tandem::python
