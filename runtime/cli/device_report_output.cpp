#include "runtime/cli/device_report_output.h"

#include <fmt/format.h>

#include "core/memory_size.h"

namespace tandem {
namespace {

/// The plan's predicted peak for `device`, if it estimated one.
const DeviceEstimate* estimate_of(const Plan& plan, Device device) {
  for (const DeviceEstimate& e : plan.estimates)
    if (e.device == device) return &e;
  return nullptr;
}

}  // namespace

nlohmann::json devices_json(const std::vector<DeviceReport>& report, const Plan& predicted) {
  nlohmann::json j = nlohmann::json::array();
  for (const DeviceReport& r : report) {
    const DeviceEstimate* e = estimate_of(predicted, r.device);
    j.push_back({{"device", r.device.str()},
                 {"peak_bytes", r.peak_bytes},
                 {"predicted_peak_bytes", e ? nlohmann::json(e->peak_bytes) : nlohmann::json()},
                 {"current_bytes", r.current_bytes},
                 {"busy_ms", r.busy_seconds * 1e3},
                 {"bytes_in", r.bytes_in},
                 {"bytes_out", r.bytes_out},
                 {"copies_in", r.copies_in},
                 {"copies_out", r.copies_out}});
  }
  return j;
}

void print_device_report(const std::vector<DeviceReport>& report, const Plan& predicted, std::string_view what) {
  fmt::print("\nper device ({}):\n", what);
  fmt::print("  {:<8} {:>12} {:>12} {:>10} {:>12} {:>10} {:>12} {:>10}\n", "device", "peak", "predicted", "busy ms",
             "bytes in", "copies in", "bytes out", "copies out");
  for (const DeviceReport& r : report) {
    const DeviceEstimate* e = estimate_of(predicted, r.device);
    fmt::print("  {:<8} {:>12} {:>12} {:>10.3f} {:>12} {:>10} {:>12} {:>10}\n", r.device.str(), format_bytes(r.peak_bytes),
               e ? format_bytes(e->peak_bytes) : std::string("-"), r.busy_seconds * 1e3, format_bytes(r.bytes_in),
               r.copies_in, format_bytes(r.bytes_out), r.copies_out);
  }
}

}  // namespace tandem
