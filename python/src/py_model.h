// The object behind tandem.Model: a Model and what Python needs beside it.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "forward_hooks.h"
#include "runtime/model.h"

namespace tandem::python {

namespace py = pybind11;

struct PyModel {
  /// `yaml`: the model's text, kept for to_torch and repr; `source`: its file, or a name.
  PyModel(Model model, std::string yaml, std::string source);
  /// Drops the model without the GIL: its devices' queues finish their work first, and
  /// that work may give back Python-owned memory (deferred_release.h).
  ~PyModel();
  PyModel(const PyModel&) = delete;
  PyModel& operator=(const PyModel&) = delete;

  std::unique_ptr<Model> model;
  std::string yaml;
  std::string source;
  // the graph's inputs in declared order, for positional arguments and dtype checks
  std::vector<std::string> input_names;
  std::vector<DType> input_dtypes;
  // "input 'x' of model 'mlp'", made once
  std::vector<std::string> input_descriptions;
  /// register_forward_hook's hooks (forward_hooks.h).
  std::shared_ptr<PyForwardHooks> hooks = std::make_shared<PyForwardHooks>();
  /// Index of input `name`, or nullopt.
  std::optional<size_t> input_index(const std::string& name) const;
};

/// Registers tandem.Model (model_binding.cpp).
void register_model(py::module_& module);

}  // namespace tandem::python
