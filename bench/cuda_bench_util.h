// What the CUDA benchmarks share: the "no GPU" exit (77, as the GPU tests), and timing
// a piece of work queued on a stream with events: best of several runs, or two pieces
// of work compared in alternating runs.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

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

/// Seconds per call of `first` and of `second` (each queues work on the stream), timed in
/// alternating runs of at least `min_seconds` each (enough calls that launch gaps and the
/// clock's ramp do not decide), median of `trials` runs each. Alternating runs give both
/// the same clocks and the same heat; one after the other would favour the second.
template <class First, class Second>
std::pair<double, double> median_seconds_alternating(cuda::Stream& stream, int trials, double min_seconds,
                                                     First&& first, Second&& second) {
  auto run = [&](auto&& queue, int reps) {
    cuda::Event start(stream.device(), true), stop(stream.device(), true);
    start.record(stream.get());
    for (int r = 0; r < reps; ++r) queue(stream.get());
    stop.record(stream.get());
    stop.synchronize();
    return stop.milliseconds_since(start) / 1e3;
  };
  run(first, 1), run(second, 1);  // warm-up: heuristics, workspaces
  const double one = std::max(run(first, 3) / 3, 1e-7);
  const int reps = std::clamp(static_cast<int>(min_seconds / one) + 1, 3, 100000);
  std::vector<double> a, b;
  for (int t = 0; t < trials; ++t) {
    a.push_back(run(first, reps) / reps);
    b.push_back(run(second, reps) / reps);
  }
  auto median = [](std::vector<double>& v) {
    std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  return {median(a), median(b)};
}

}  // namespace tandem::bench
