// Where a Python call runs Tandem's work: without the GIL, so that other Python threads run
// meanwhile, and with the calling thread's OpenMP team at Tandem's own thread count
// (runtime/threads.h), put back as it was after.
//
// libgomp's team size is a per-thread setting shared by every library in the process, and
// torch sets it when it is imported (to what it counts as physical cores: one on a 2-vCPU
// VM). Without this, `import torch` beside `import tandem` silently halved Tandem there:
// resnet18's training step took 2.0 s instead of 1.25. Putting the calling thread's setting
// back afterwards leaves torch's own calls on the team torch chose.
#pragma once

#include <omp.h>
#include <pybind11/pybind11.h>

#include "runtime/threads.h"

namespace tandem::python {

class ComputeScope {
 public:
  ComputeScope() : previous_threads_(omp_get_max_threads()) {
    if (const int threads = compute_threads(); threads != previous_threads_) omp_set_num_threads(threads);
  }
  ~ComputeScope() {
    if (omp_get_max_threads() != previous_threads_) omp_set_num_threads(previous_threads_);
  }
  ComputeScope(const ComputeScope&) = delete;
  ComputeScope& operator=(const ComputeScope&) = delete;

 private:
  int previous_threads_;
  pybind11::gil_scoped_release nogil_;
};

}  // namespace tandem::python
