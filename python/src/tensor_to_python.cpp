#include "tensor_to_python.h"

#include <dlpack/dlpack.h>

#include <memory>
#include <vector>

namespace tandem::python {
namespace {

/// What a DLPack capsule hands torch: the tensor's shape and strides, and its storage,
/// kept alive until torch calls the deleter (from any thread: the storage's own deleter
/// copes with that, deferred_release.h).
struct DlpackExport {
  std::shared_ptr<Storage> storage;
  std::vector<int64_t> shape, strides;
  DLManagedTensor managed{};
};

void delete_export(DLManagedTensor* managed) { delete static_cast<DlpackExport*>(managed->manager_ctx); }

/// A capsule torch never consumed still owns its export.
void capsule_destructor(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;  // consumed: renamed "used_dltensor"
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  managed->deleter(managed);
}

}  // namespace

py::array numpy_view(const Tensor& tensor, bool writable) {
  auto* owner = new std::shared_ptr<Storage>(tensor.storage());
  py::capsule base(owner, [](void* p) { delete static_cast<std::shared_ptr<Storage>*>(p); });
  std::vector<py::ssize_t> strides(tensor.shape().size());
  py::ssize_t stride = static_cast<py::ssize_t>(dtype_size(tensor.dtype()));
  for (size_t d = strides.size(); d-- > 0;) strides[d] = stride, stride *= tensor.shape()[d];
  py::dtype dtype = tensor.dtype() == DType::float32 ? py::dtype::of<float>() : py::dtype::of<int64_t>();
  py::array array(dtype, tensor.shape(), strides, tensor.raw_data(), base);
  if (!writable) py::detail::array_proxy(array.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return array;
}

py::object torch_view(const Tensor& tensor) {
  static PyObject* from_dlpack = nullptr;  // torch._C._from_dlpack, looked up once (never released)
  if (from_dlpack == nullptr) {
    py::object function = py::module_::import("torch").attr("_C").attr("_from_dlpack");
    from_dlpack = function.release().ptr();
  }
  auto exported = std::make_unique<DlpackExport>();
  exported->storage = tensor.storage();
  exported->shape = tensor.shape();
  exported->strides.resize(tensor.shape().size());
  int64_t stride = 1;
  for (size_t d = exported->strides.size(); d-- > 0;) exported->strides[d] = stride, stride *= tensor.shape()[d];
  DLTensor& t = exported->managed.dl_tensor;
  // the first element itself, not the storage and a byte_offset: torch 1.13 ignores the offset
  t.data = tensor.raw_data();
  t.device = {kDLCPU, 0};
  t.ndim = static_cast<int32_t>(exported->shape.size());
  t.dtype = tensor.dtype() == DType::float32 ? DLDataType{kDLFloat, 32, 1} : DLDataType{kDLInt, 64, 1};
  t.shape = exported->shape.data();
  t.strides = exported->strides.data();
  t.byte_offset = 0;
  exported->managed.manager_ctx = exported.get();
  exported->managed.deleter = delete_export;
  PyObject* capsule = PyCapsule_New(&exported->managed, "dltensor", capsule_destructor);
  if (capsule == nullptr) throw py::error_already_set();
  exported.release();  // the capsule owns it now
  py::object owned_capsule = py::reinterpret_steal<py::object>(capsule);
  PyObject* result = PyObject_CallOneArg(from_dlpack, capsule);
  if (result == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(result);
}

}  // namespace tandem::python
