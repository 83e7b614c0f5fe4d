// tandem.devices(): this process's devices, as `tandem devices` lists them; tandem.set_threads()
// and tandem.threads(): the cpu's threads (runtime/threads.h).
#include <pybind11/stl.h>

#include "placement_arguments.h"
#include "runtime/threads.h"

namespace tandem::python {

namespace py = pybind11;
using namespace pybind11::literals;

void register_devices(py::module_& module) {
  module.def(
      "devices",
      [](std::optional<int> sim_gpus, std::optional<int> logical_gpus) {
        DeviceOptions options;
        if (sim_gpus) options.sim_gpus = *sim_gpus;
        if (logical_gpus) options.logical_gpus = *logical_gpus;
        std::shared_ptr<DeviceRegistry> registry = shared_registry(options);
        py::list out;
        for (const DeviceInfo& d : registry->inventory().devices)
          out.append(py::dict("device"_a = d.device.str(), "name"_a = d.name, "memory_bytes"_a = d.memory_bytes,
                              "simulated"_a = d.simulated));
        return out;
      },
      py::kw_only(), "sim_gpus"_a = py::none(), "logical_gpus"_a = py::none(),
      "The cpu, then cuda:0, cuda:1, ...: real GPUs, or simulated ones (sim_gpus, else TANDEM_SIM_GPUS), each "
      "with its memory. What model.place() with the same options places over.");
  module.def(
      "set_threads", [](int threads) { set_threads(threads); }, "threads"_a,
      "The threads the cpu computes with from now on (the CLI's --threads; default: the cores this process may run "
      "on, or OMP_NUM_THREADS). Call it before the first model runs.");
  module.def(
      "threads",
      [] {
        return py::dict("threads"_a = compute_threads(), "chosen_by"_a = compute_threads_reason(),
                        "usable_cores"_a = usable_cores(), "wait_policy"_a = thread_wait_policy());
      },
      "How many threads the cpu computes with, who chose that, and how they wait (as `tandem devices` says).");
}

}  // namespace tandem::python
