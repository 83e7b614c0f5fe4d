#include "backends/backend.h"

#include <cmath>
#include <exception>

namespace tandem {

void Backend::synchronize() {
  // Every distinct lane, even after one fails: the caller must not go on with another still
  // running work that reads what it is about to free.
  std::exception_ptr error;
  Lane* done[3] = {nullptr, nullptr, nullptr};
  int count = 0;
  for (LaneKind kind : {LaneKind::compute, LaneKind::copy_in, LaneKind::copy_out}) {
    Lane& l = lane(kind);
    bool seen = false;
    for (int i = 0; i < count; ++i) seen = seen || done[i] == &l;
    if (seen) continue;
    done[count++] = &l;
    try {
      l.synchronize();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

bool Backend::scale_checking_finite(Lane& lane, std::span<const Tensor> tensors, float factor) {
  bool finite = true;
  for (const Tensor& t : tensors) {
    double sum = 0;
    sum_of_squares(lane, t, &sum);
    lane.synchronize();
    // a sum of squares in double is finite exactly when every value is (a float's square
    // stays below 1.2e77)
    finite = finite && std::isfinite(sum);
    scale(lane, t, factor);
  }
  return finite;
}

}  // namespace tandem
