// The device report as the CLI shows it: a table for --report, an array for --json.
#pragma once

#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "placement/plan.h"
#include "runtime/devices/device_report.h"

namespace tandem {

/// [{"device", "peak_bytes", "predicted_peak_bytes", "current_bytes", "busy_ms", "bytes_in",
///   "bytes_out", "copies_in", "copies_out"}, ...], one entry per device; the predicted peak is
/// `predicted`'s estimate for the device (null where the plan has none).
nlohmann::json devices_json(const std::vector<DeviceReport>& report, const Plan& predicted);
/// A table headed "per device (`what`):", the measured peak beside the plan's prediction.
void print_device_report(const std::vector<DeviceReport>& report, const Plan& predicted, std::string_view what);

}  // namespace tandem
