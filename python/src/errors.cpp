#include "errors.h"

#include "core/error.h"

namespace tandem::python {

void register_errors(pybind11::module_& module) {
  pybind11::register_exception<UserError>(module, "ModelError", PyExc_ValueError);
  pybind11::register_exception<InternalError>(module, "InternalError", PyExc_RuntimeError);
}

}  // namespace tandem::python
