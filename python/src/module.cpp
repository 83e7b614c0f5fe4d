// The extension module tandem._tandem; python/tandem/__init__.py is the package's face.
#include <pybind11/pybind11.h>

#include "errors.h"
#include "py_model.h"

namespace tandem::python {
void register_trainer(pybind11::module_& module);  // training_binding.cpp
void register_devices(pybind11::module_& module);  // devices_binding.cpp
}

PYBIND11_MODULE(_tandem, module) {
  module.doc() = "Tandem's C++ runtime: models, training, devices (docs/python.md)";
  tandem::python::register_errors(module);
  tandem::python::register_model(module);
  tandem::python::register_trainer(module);
  tandem::python::register_devices(module);
}
