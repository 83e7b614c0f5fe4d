// Tandem tensors as numpy arrays and torch tensors over the same memory: the array keeps
// the tensor's storage alive (a capsule holding a reference to it), so nothing is copied.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "core/tensor.h"

namespace tandem::python {

namespace py = pybind11;

/// A numpy array over `tensor`'s memory. `writable` false marks it read-only: views of a
/// model's parameters, which change only through the model (its devices' copies follow a
/// version that writes through an array would not move). Needs the GIL.
py::array numpy_view(const Tensor& tensor, bool writable = true);

/// A torch tensor over `tensor`'s memory, through a DLPack capsule (torch must be imported).
py::object torch_view(const Tensor& tensor);

}  // namespace tandem::python
