#include "tensor_from_python.h"

#include <dlpack/dlpack.h>
#include <pybind11/numpy.h>

#include <cstring>

#include "deferred_release.h"

namespace tandem::python {
namespace {

using namespace pybind11::literals;

/// Storage over `bytes` bytes at `data` that `owner` keeps alive: it holds a reference to
/// `owner` until the last tensor over it goes (deferred_release.h: from any thread).
std::shared_ptr<Storage> storage_owned_by(py::handle owner, void* data, size_t bytes) {
  PyObject* reference = owner.inc_ref().ptr();
  return std::make_shared<Storage>(data, bytes, Device::cpu(),
                                   [reference](void*, size_t) { release_reference(reference); });
}

std::string conversion_hint(DType dtype) {
  return dtype == DType::float32 ? "numpy: a.astype(numpy.float32); torch: t.float()"
                                 : "numpy: a.astype(numpy.int64); torch: t.long()";
}

void check_dtype(DType given, std::optional<DType> expected, const std::string& what) {
  if (expected && given != *expected)
    throw UserError(what + " is " + std::string(dtype_name(given)) + ", but the model takes " +
                    std::string(dtype_name(*expected)) + " there; convert it first (" + conversion_hint(*expected) + ")");
}

[[noreturn]] void refuse_dtype(const std::string& dtype, std::optional<DType> expected, const std::string& what) {
  std::string want = expected ? std::string(dtype_name(*expected)) : "float32 or int64";
  throw UserError(what + " is " + dtype + ", but the model takes " + want + " there; convert it first (" +
                  (expected ? conversion_hint(*expected) : "numpy: a.astype(...); torch: t.float() or t.long()") + ")");
}

/// A dense row-major copy of the elements at `data` laid out by `strides` (in bytes).
Tensor contiguous_copy(const char* data, const Shape& shape, const std::vector<int64_t>& strides, DType dtype) {
  Tensor out = Tensor::empty(shape, dtype);
  const size_t item = dtype_size(dtype);
  char* dst = static_cast<char*>(out.raw_data());
  const size_t rank = shape.size();
  if (out.numel() == 0) return out;
  if (rank == 0) {
    std::memcpy(dst, data, item);
    return out;
  }
  // an odometer over every dimension but the last, whose run is copied element by element
  std::vector<int64_t> index(rank, 0);
  const int64_t inner = shape[rank - 1], inner_stride = strides[rank - 1];
  for (int64_t done = 0; done < out.numel(); done += inner) {
    const char* row = data;
    for (size_t d = 0; d + 1 < rank; ++d) row += index[d] * strides[d];
    for (int64_t i = 0; i < inner; ++i, dst += item) std::memcpy(dst, row + i * inner_stride, item);
    for (size_t d = rank - 1; d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

bool row_major(const Shape& shape, const std::vector<int64_t>& strides, size_t item) {
  int64_t expected = static_cast<int64_t>(item);
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1 && strides[d] != expected) return false;  // a dimension of 1 may have any stride
    expected *= shape[d];
  }
  return true;
}

/// A tensor over memory that `owner` keeps alive, or a copy where the layout is not Tandem's.
Tensor tensor_over(py::handle owner, char* data, const Shape& shape, const std::vector<int64_t>& strides, DType dtype) {
  const size_t item = dtype_size(dtype);
  int64_t numel = shape_numel(shape);
  bool aligned = reinterpret_cast<uintptr_t>(data) % item == 0;
  if (numel > 0 && (!aligned || !row_major(shape, strides, item))) return contiguous_copy(data, shape, strides, dtype);
  size_t bytes = static_cast<size_t>(numel) * item;
  return Tensor::from_storage(storage_owned_by(owner, data, bytes), shape, dtype);
}

std::optional<DType> numpy_dtype(const py::dtype& dtype) {
  if (dtype.kind() == 'f' && dtype.itemsize() == 4) return DType::float32;
  if (dtype.kind() == 'i' && dtype.itemsize() == 8) return DType::int64;
  return std::nullopt;
}

Tensor from_numpy(py::array array, const std::string& what, std::optional<DType> expected) {
  py::dtype dtype = array.dtype();
  std::optional<DType> ours = numpy_dtype(dtype);
  if (!ours) refuse_dtype("a " + std::string(py::str(dtype)) + " array", expected, what);
  check_dtype(*ours, expected, what);
  if (dtype.attr("byteorder").cast<std::string>() == ">")  // a big-endian file's array: native order first
    array = array.attr("astype")(dtype.attr("newbyteorder")("="));
  Shape shape(array.shape(), array.shape() + array.ndim());
  std::vector<int64_t> strides(array.strides(), array.strides() + array.ndim());
  return tensor_over(array, static_cast<char*>(const_cast<void*>(array.data())), shape, strides, *ours);
}

std::string dlpack_dtype_name(DLDataType t) {
  const char* kind = t.code == kDLInt ? "int" : t.code == kDLUInt ? "uint" : t.code == kDLFloat ? "float"
                     : t.code == kDLBfloat ? "bfloat" : "code" ;
  std::string name = std::string(kind) + std::to_string(t.bits);
  if (t.code == kDLUInt && t.bits == 8) name += " (or bool)";
  return name;
}

Tensor from_dlpack(py::handle object, const std::string& what, std::optional<DType> expected) {
  py::object owner = py::reinterpret_borrow<py::object>(object);
  // torch refuses to export a tensor that requires grad: Tandem only reads its values
  if (is_torch_tensor(owner)) {
    // torch exports no bool tensors through DLPack: name the dtype before asking
    std::string dtype = py::str(owner.attr("dtype"));
    if (dtype != "torch.float32" && dtype != "torch.int64")
      refuse_dtype("a " + dtype.substr(dtype.find('.') + 1) + " tensor", expected, what);
    if (owner.attr("requires_grad").cast<bool>()) owner = owner.attr("detach")();
  }
  py::object capsule = owner.attr("__dlpack__")();
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (managed == nullptr) throw py::error_already_set();
  // The capsule stays unconsumed: its producer frees its own bookkeeping when it goes, and
  // the memory stays alive through `owner`, which the tensor holds.
  const DLTensor& t = managed->dl_tensor;
  if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost) {
    std::string where = t.device.device_type == kDLCUDA ? "cuda:" + std::to_string(t.device.device_id)
                                                          : "device type " + std::to_string(t.device.device_type);
    throw UserError(what + " lies on " + where + "; Tandem takes host memory and moves it to the devices itself: " +
                    "give t.cpu()");
  }
  std::optional<DType> ours;
  if (t.dtype.lanes == 1 && t.dtype.code == kDLFloat && t.dtype.bits == 32) ours = DType::float32;
  if (t.dtype.lanes == 1 && t.dtype.code == kDLInt && t.dtype.bits == 64) ours = DType::int64;
  if (!ours) refuse_dtype("a " + dlpack_dtype_name(t.dtype) + " tensor", expected, what);
  check_dtype(*ours, expected, what);
  Shape shape(t.shape, t.shape + t.ndim);
  std::vector<int64_t> strides(static_cast<size_t>(t.ndim));
  const int64_t item = static_cast<int64_t>(dtype_size(*ours));
  if (t.strides == nullptr) {  // compact row-major
    int64_t s = item;
    for (int d = t.ndim; d-- > 0;) strides[d] = s, s *= shape[d];
  } else {
    for (int d = 0; d < t.ndim; ++d) strides[d] = t.strides[d] * item;  // DLPack counts elements
  }
  return tensor_over(owner, static_cast<char*>(t.data) + t.byte_offset, shape, strides, *ours);
}

}  // namespace

bool is_torch_tensor(py::handle object) {
  static PyObject* tensor_type = nullptr;  // torch.Tensor, once torch is imported (never released)
  if (tensor_type == nullptr) {
    PyObject* modules = PyImport_GetModuleDict();
    PyObject* torch = PyDict_GetItemString(modules, "torch");
    if (torch == nullptr) return false;
    tensor_type = PyObject_GetAttrString(torch, "Tensor");
    if (tensor_type == nullptr) {
      PyErr_Clear();
      return false;
    }
  }
  return PyObject_IsInstance(object.ptr(), tensor_type) == 1;
}

Tensor tensor_from_python(py::handle object, const std::string& what, std::optional<DType> expected) {
  if (py::isinstance<py::array>(object)) return from_numpy(py::reinterpret_borrow<py::array>(object), what, expected);
  if (py::hasattr(object, "__dlpack__")) return from_dlpack(object, what, expected);
  // Lists and numbers carry no dtype of their own: numpy's reading of them, floats made
  // float32 where that is what the model takes.
  if (PyList_Check(object.ptr()) || PyTuple_Check(object.ptr()) || PyFloat_Check(object.ptr()) ||
      PyLong_Check(object.ptr())) {
    py::module_ numpy = py::module_::import("numpy");
    py::array array = numpy.attr("asarray")(object);
    std::string kind(1, array.dtype().kind());
    if (expected == DType::float32 && (kind == "f" || kind == "i"))
      array = numpy.attr("asarray")(object, "dtype"_a = numpy.attr("float32"));
    else if (expected == DType::int64 && kind == "i")
      array = numpy.attr("asarray")(object, "dtype"_a = numpy.attr("int64"));
    return from_numpy(array, what, expected);
  }
  throw UserError(what + " is a " + std::string(py::str(object.get_type().attr("__name__"))) +
                  ", not an array; give a numpy array, a torch tensor or a list of numbers");
}

}  // namespace tandem::python
