// Giving Python references back from any thread. A tensor over a numpy array's memory holds
// a reference to the array; its last owner may be a device's queue thread that never holds
// the GIL, while the thread that does waits for that queue (a forward, a model's
// destruction). So a reference is given back at once only where the GIL is held, and
// otherwise later, on the interpreter's own thread: never by waiting for the GIL.
#pragma once

#include <Python.h>

namespace tandem::python {

/// Py_DECREF(object) now if this thread holds the GIL, else soon on the interpreter's main
/// thread (Py_AddPendingCall) or at the next call into the extension. After the interpreter
/// has shut down, nothing: the process is ending. Callable from any thread.
void release_reference(PyObject* object);

/// Gives back the references released on other threads. Needs the GIL; cheap (one atomic
/// load) when none wait.
void release_deferred_references();

}  // namespace tandem::python
