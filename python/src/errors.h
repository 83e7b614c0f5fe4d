// Tandem's two error channels as Python exceptions (docs/python.md, "Errors"):
// tandem.ModelError (a ValueError) for a UserError, with the message the CLI prints after
// "error: "; tandem.InternalError (a RuntimeError) for a broken invariant, a bug in Tandem.
#pragma once

#include <pybind11/pybind11.h>

namespace tandem::python {

void register_errors(pybind11::module_& module);

}  // namespace tandem::python
