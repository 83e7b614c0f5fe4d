// DeviceReport: what one device did during a placed forward pass or training step, and
// over a whole run (add_to_totals).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/device.h"

namespace tandem {

/// One device's memory, time and traffic. Memory is its allocator's (parameters held there
/// included); busy time, bytes and copies count the last forward pass only.
struct DeviceReport {
  Device device;
  size_t peak_bytes = 0;     // the most in use at once during the pass (cpu: the whole process's host pool)
  size_t current_bytes = 0;  // in use after the pass
  double busy_seconds = 0;   // time its kernels and copies ran
  size_t bytes_in = 0;       // arrived on this device (from the host or a peer)
  size_t bytes_out = 0;      // left this device
  int64_t copies_in = 0;
  int64_t copies_out = 0;
};

/// Adds one pass's reports to `totals` (device by device, in order of first appearance):
/// the highest peak, the latest current bytes, the sums of busy time, bytes and copies.
inline void add_to_totals(std::vector<DeviceReport>& totals, const std::vector<DeviceReport>& pass) {
  for (const DeviceReport& r : pass) {
    DeviceReport* t = nullptr;
    for (DeviceReport& candidate : totals)
      if (candidate.device == r.device) t = &candidate;
    if (!t) {
      totals.push_back(r);
      continue;
    }
    t->peak_bytes = t->peak_bytes > r.peak_bytes ? t->peak_bytes : r.peak_bytes;
    t->current_bytes = r.current_bytes;
    t->busy_seconds += r.busy_seconds;
    t->bytes_in += r.bytes_in;
    t->bytes_out += r.bytes_out;
    t->copies_in += r.copies_in;
    t->copies_out += r.copies_out;
  }
}

}  // namespace tandem
