// Python arrays as Tandem tensors, sharing their memory: numpy arrays (the buffer
// protocol's layout, read through numpy's C API) and anything with __dlpack__ (torch
// tensors). Tandem's tensors are dense and row-major, float32 or int64; what is not is
// copied into that layout, or refused with a message that names it, never misread.
#pragma once

#include <pybind11/pybind11.h>

#include <optional>
#include <string>

#include "core/tensor.h"

namespace tandem::python {

namespace py = pybind11;

/// Whether `object` is a torch.Tensor (torch is not imported for the question).
bool is_torch_tensor(py::handle object);

/// A host tensor for `object`:
///  - a C-contiguous, aligned, native-order float32 or int64 numpy array or DLPack tensor
///    on the host: a tensor over its memory (no copy; the tensor keeps `object` alive);
///  - the same dtype in another layout (strided, transposed, misaligned, big-endian): a
///    contiguous copy, as Tandem's kernels read only row-major memory;
///  - a list or a Python number: numpy's conversion, floats as float32 where `expected` is;
///  - anything else (another dtype, a GPU tensor, a string): UserError naming `what`
///    ("input 'x' of model 'mlp'") and saying what to do.
/// `expected`: the dtype the caller needs (a mismatch is refused); nullopt: either.
/// Needs the GIL.
Tensor tensor_from_python(py::handle object, const std::string& what, std::optional<DType> expected);

}  // namespace tandem::python
