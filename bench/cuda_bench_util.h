// What the CUDA benchmarks share: the "no GPU" exit (77, as the GPU tests), and timing
// a piece of work queued on a stream with events, best of several runs.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "backends/cuda_devices.h"
#include "backends/cuda/cuda_error.h"
#include "backends/cuda/stream.h"

namespace tandem::bench {

/// Exits 77 with a clear line when there is no GPU to measure.
inline void require_gpu(const char* program) {
  std::string why;
  if (tandem::cuda_devices(&why).empty()) {
    std::printf("%s: no GPU (%s); nothing measured\n", program, why.c_str());
    std::exit(77);
  }
}

/// Seconds per call of `queue(stream)` (which queues work on `stream`): `reps` calls
/// between two events, best of `trials`, after one warm-up call.
template <class Queue>
double seconds_per_call(cuda::Stream& stream, int reps, int trials, Queue&& queue) {
  queue(stream.get());
  stream.synchronize();
  double best = 1e30;
  for (int t = 0; t < trials; ++t) {
    cuda::Event start(stream.device(), true), stop(stream.device(), true);
    start.record(stream.get());
    for (int r = 0; r < reps; ++r) queue(stream.get());
    stop.record(stream.get());
    stop.synchronize();
    best = std::min(best, stop.milliseconds_since(start) / 1e3 / reps);
  }
  return best;
}

}  // namespace tandem::bench
