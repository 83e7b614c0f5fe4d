// The device report as the CLI shows it: a table for --report, an array for --json.
#pragma once

#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/device_report.h"

namespace tandem {

/// [{"device", "peak_bytes", "current_bytes", "busy_ms", "bytes_in", "bytes_out",
///   "copies_in", "copies_out"}, ...], one entry per device.
nlohmann::json devices_json(const std::vector<DeviceReport>& report);
/// A table headed "per device (`what`):".
void print_device_report(const std::vector<DeviceReport>& report, std::string_view what);

}  // namespace tandem
