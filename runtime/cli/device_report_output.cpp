#include "runtime/cli/device_report_output.h"

#include <fmt/format.h>

#include "core/memory_size.h"

namespace tandem {

nlohmann::json devices_json(const std::vector<DeviceReport>& report) {
  nlohmann::json j = nlohmann::json::array();
  for (const DeviceReport& r : report)
    j.push_back({{"device", r.device.str()},
                 {"peak_bytes", r.peak_bytes},
                 {"current_bytes", r.current_bytes},
                 {"busy_ms", r.busy_seconds * 1e3},
                 {"bytes_in", r.bytes_in},
                 {"bytes_out", r.bytes_out},
                 {"copies_in", r.copies_in},
                 {"copies_out", r.copies_out}});
  return j;
}

void print_device_report(const std::vector<DeviceReport>& report, std::string_view what) {
  fmt::print("\nper device ({}):\n", what);
  fmt::print("  {:<8} {:>12} {:>10} {:>12} {:>10} {:>12} {:>10}\n", "device", "peak", "busy ms", "bytes in", "copies in",
             "bytes out", "copies out");
  for (const DeviceReport& r : report)
    fmt::print("  {:<8} {:>12} {:>10.3f} {:>12} {:>10} {:>12} {:>10}\n", r.device.str(), format_bytes(r.peak_bytes),
               r.busy_seconds * 1e3, format_bytes(r.bytes_in), r.copies_in, format_bytes(r.bytes_out), r.copies_out);
}

}  // namespace tandem
