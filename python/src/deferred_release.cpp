#include "deferred_release.h"

#include <atomic>
#include <mutex>
#include <vector>

namespace tandem::python {
namespace {

std::mutex deferred_mutex;
std::vector<PyObject*> deferred;  // guarded by deferred_mutex
std::atomic<bool> any_deferred{false};
std::atomic<bool> drain_scheduled{false};

int drain_from_pending_call(void*) {
  drain_scheduled.store(false);
  release_deferred_references();
  return 0;
}

}  // namespace

void release_reference(PyObject* object) {
  if (!Py_IsInitialized()) return;  // finalising: the interpreter frees nothing more
  if (PyGILState_Check()) {
    Py_DECREF(object);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(deferred_mutex);
    deferred.push_back(object);
  }
  any_deferred.store(true, std::memory_order_release);
  // Py_AddPendingCall needs no GIL; its queue is small, and when it is full the next call
  // into the extension drains instead.
  if (!drain_scheduled.exchange(true) && Py_AddPendingCall(drain_from_pending_call, nullptr) != 0)
    drain_scheduled.store(false);
}

void release_deferred_references() {
  if (!any_deferred.load(std::memory_order_acquire)) return;
  std::vector<PyObject*> objects;
  {
    std::lock_guard<std::mutex> lock(deferred_mutex);
    objects.swap(deferred);
    any_deferred.store(false, std::memory_order_relaxed);
  }
  for (PyObject* object : objects) Py_DECREF(object);
}

}  // namespace tandem::python
