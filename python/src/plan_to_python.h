// A Plan and device reports as plain Python data: the keys of `tandem plan --json` and of
// the "devices" of `tandem run --json`, which tandem.Plan and tandem.DeviceReport
// (python/tandem/display.py) show as tables.
#pragma once

#include <pybind11/pybind11.h>

#include <vector>

#include "placement/plan.h"
#include "runtime/devices/device_report.h"

namespace tandem::python {

pybind11::dict plan_to_python(const Plan& plan, const Graph& given);
pybind11::list reports_to_python(const std::vector<DeviceReport>& reports);

}  // namespace tandem::python
