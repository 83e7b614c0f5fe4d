#include "plan_to_python.h"

namespace tandem::python {

namespace py = pybind11;
using namespace pybind11::literals;

py::dict plan_to_python(const Plan& plan, const Graph& given) {
  const Graph& g = executed_graph(plan, given);  // with data_parallel replicas
  py::list layers, segments, copies, devices, notes;
  for (const OpStep& s : plan.steps)
    layers.append(py::dict("path"_a = g.nodes[s.node].path, "op"_a = g.nodes[s.node].op, "device"_a = s.device.str(),
                           "precision"_a = std::string(precision_name(s.precision.precision)),
                           "precision_reason"_a = s.precision.why, "reason"_a = s.reason,
                           "parameter_bytes"_a = s.parameter_bytes, "activation_bytes"_a = s.activation_bytes));
  for (const Segment& s : plan.segments)
    segments.append(py::dict("device"_a = s.device.str(), "first_layer"_a = g.nodes[plan.steps[s.first_step].node].path,
                             "last_layer"_a = g.nodes[plan.steps[s.end_step - 1].node].path,
                             "layers"_a = s.end_step - s.first_step));
  for (const CopyStep& c : plan.copies)
    copies.append(py::dict("value"_a = g.values[c.value].name, "from"_a = c.from.str(), "to"_a = c.to.str(),
                           "bytes"_a = c.bytes, "direction"_a = c.forward ? "forward" : "backward",
                           "before_step"_a = c.before_step, "reason"_a = c.reason));
  for (const DeviceEstimate& e : plan.estimates)
    devices.append(py::dict("device"_a = e.device.str(), "parameter_bytes"_a = e.parameter_bytes,
                            "activation_bytes"_a = e.activation_bytes, "gradient_bytes"_a = e.gradient_bytes,
                            "optimizer_bytes"_a = e.optimizer_bytes, "peak_bytes"_a = e.peak_bytes,
                            "capacity_bytes"_a = e.capacity_bytes));
  for (const std::string& note : plan.notes) notes.append(note);
  return py::dict("model"_a = g.name, "policy"_a = plan.policy, "training"_a = plan.training, "batch"_a = plan.batch,
                  "layers"_a = layers, "segments"_a = segments, "copies"_a = copies, "devices"_a = devices,
                  "notes"_a = notes);
}

py::list reports_to_python(const std::vector<DeviceReport>& reports) {
  py::list out;
  for (const DeviceReport& r : reports)
    out.append(py::dict("device"_a = r.device.str(), "peak_bytes"_a = r.peak_bytes, "current_bytes"_a = r.current_bytes,
                        "busy_ms"_a = r.busy_seconds * 1e3, "bytes_in"_a = r.bytes_in, "bytes_out"_a = r.bytes_out,
                        "copies_in"_a = r.copies_in, "copies_out"_a = r.copies_out));
  return out;
}

}  // namespace tandem::python
