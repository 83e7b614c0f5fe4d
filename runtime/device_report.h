// DeviceReport: what one device did during a placed forward pass (the last one run).
#pragma once

#include <cstddef>
#include <cstdint>

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

}  // namespace tandem
