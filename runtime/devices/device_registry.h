// DeviceRegistry: the devices this process runs on, found once: the cpu, then cuda:0,
// cuda:1, ... (real GPUs, or simulated ones), each with its allocator, and the placement's
// view of them (DeviceInventory).
//
// Real or simulated GPUs, never both. With no simulated GPUs asked for, cuda:N are the
// GPUs the CUDA runtime reports (CUDA_VISIBLE_DEVICES honoured; no driver: none). Asked for
// (--sim-gpus N or TANDEM_SIM_GPUS=N), N simulated GPUs are cuda:0..N-1, and real GPUs, if
// any, are set aside for the run (hidden_real_gpus() counts them; `tandem devices` says so).
// Why replace rather than refuse: so the multi-device tests, which ask for simulated GPUs,
// pass on GPU machines too, and a machine with one GPU can rehearse a plan for four.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/cuda_backend_module.h"
#include "backends/cuda_devices.h"
#include "core/device.h"
#include "core/storage.h"
#include "placement/plan.h"

namespace tandem {

/// The memory of a simulated GPU when neither option nor environment says.
inline constexpr size_t default_sim_gpu_memory = size_t{16} << 30;

/// How to find the devices.
struct DeviceOptions {
  /// Simulated GPUs. -1: from TANDEM_SIM_GPUS (a whole number), or 0 when it is unset or empty.
  int sim_gpus = -1;
  /// Capacity of each simulated GPU in bytes. Unset: from TANDEM_SIM_GPU_MEMORY (a size such
  /// as "2GiB", see parse_memory_size), or default_sim_gpu_memory.
  std::optional<size_t> sim_gpu_memory;
  /// Real GPUs: 0 makes each physical GPU one device cuda:N; N > 0 makes N logical devices
  /// cuda:0..N-1 over the physical GPUs in turn (cuda:k on GPU k % count), each with its own
  /// streams and an equal share of its GPU's memory, so that a plan that names more GPUs
  /// than the machine has runs on real ones (collectives among devices that share a GPU stay
  /// on it). From TANDEM_LOGICAL_GPUS when -1.
  int logical_gpus = -1;
  /// Capacities of the simulated GPUs one by one (--sim-gpu-memory 4GiB,2GiB,2GiB), one per
  /// GPU: GPUs of different sizes, which chunking: memory follows. Empty: sim_gpu_memory
  /// for each.
  std::vector<size_t> sim_gpu_memories;
};

/// --sim-gpu-memory's text: one size for every simulated GPU ("4GiB") or one per GPU
/// separated by commas ("4GiB,2GiB,2GiB"). UserError naming `source` and the item that is
/// not a size.
std::vector<size_t> parse_sim_gpu_memory(const std::string& text, const std::string& source);
/// `options` with `text` (parse_sim_gpu_memory) in sim_gpu_memory or sim_gpu_memories.
void set_sim_gpu_memory(DeviceOptions& options, const std::string& text, const std::string& source);

/// Opens the backend of one logical real GPU: the CUDA backend, when this build has it.
/// Tests hand the registry their own.
using RealGpuOpener = std::function<std::unique_ptr<Backend>(const CudaGpuSpec&)>;

/// Owns every device's Backend: the cpu's, and the GPUs' (simulated, or real ones opened on
/// first use, when their CUDA context is made). Not copyable. Thread-safe. Destroying it
/// first runs every lane dry.
///
/// This class's .cpp is the one file of the runtime that names concrete backends; the rest
/// of the runtime speaks to devices through backends/backend.h only.
class DeviceRegistry {
 public:
  /// Finds the devices. Throws UserError for a bad option or environment value.
  explicit DeviceRegistry(const DeviceOptions& options = {});
  /// The same, with `real_gpus` standing in for what the CUDA runtime reports and
  /// `open_real` (when given) for the CUDA backend (for tests).
  DeviceRegistry(const DeviceOptions& options, std::vector<CudaDeviceInfo> real_gpus, std::string why_no_gpus = {},
                 RealGpuOpener open_real = {});
  /// The cpu alone, its work run on the calling thread (backends/calling_thread_lane.h):
  /// where a model that names no GPU runs. Looks for no GPU.
  static std::shared_ptr<DeviceRegistry> cpu_alone();
  ~DeviceRegistry();
  DeviceRegistry(const DeviceRegistry&) = delete;
  DeviceRegistry& operator=(const DeviceRegistry&) = delete;

  /// cpu first, then cuda:0, cuda:1, ...: what placement plans against.
  const DeviceInventory& inventory() const { return inventory_; }
  bool has(Device device) const { return inventory_.has(device); }
  /// Throws UserError naming the devices there are, unless `device` is one of them.
  void require(Device device) const;
  /// Whether `device` is a simulated GPU.
  bool simulated(Device device) const;

  /// The backend of `device`, opened now if it was not. UserError for a device that does
  /// not exist, or a real GPU that cannot be opened (saying why).
  Backend& backend(Device device);
  /// backend(device).allocator().
  Allocator& allocator(Device device) { return backend(device).allocator(); }
  int sim_gpu_count() const { return sim_gpu_count_; }
  /// Backend::preparations() summed over the devices opened so far.
  int64_t preparations() const;
  /// Capacity of each simulated GPU (also when there are none).
  size_t sim_gpu_memory() const { return sim_gpu_memory_; }

  /// The physical GPUs in use (empty when simulated GPUs replace them); with logical GPUs,
  /// fewer than the devices cuda:N.
  const std::vector<CudaDeviceInfo>& real_gpus() const { return real_gpus_; }
  /// The physical GPU (an index of real_gpus()) that real cuda:`logical` runs on.
  int physical_gpu(int logical) const { return physical_of_logical_.at(static_cast<size_t>(logical)); }
  /// Real GPUs set aside because simulated ones were asked for.
  int hidden_real_gpus() const { return hidden_real_gpus_; }
  /// Why the CUDA runtime reported no GPU, when it reported none.
  const std::string& why_no_gpus() const { return why_no_gpus_; }

 private:
  struct CpuAloneTag {};
  explicit DeviceRegistry(CpuAloneTag);
  void build(const DeviceOptions& options, std::vector<CudaDeviceInfo> real_gpus);
  std::string available() const;

  DeviceInventory inventory_;
  mutable std::mutex mutex_;                     // guards opening backends_
  std::vector<std::unique_ptr<Backend>> backends_;  // inventory order; a real GPU's null until opened
  RealGpuOpener open_real_;
  int sim_gpu_count_ = 0;
  std::vector<CudaDeviceInfo> real_gpus_;
  std::vector<int> physical_of_logical_;  // real cuda:N -> its entry of real_gpus_
  size_t sim_gpu_memory_ = default_sim_gpu_memory;
  int hidden_real_gpus_ = 0;
  std::string why_no_gpus_;
};

/// The number of simulated GPUs TANDEM_SIM_GPUS asks for: 0 when unset or empty. Throws
/// UserError for anything but a whole number from 0 to max_sim_gpus.
int sim_gpus_from_environment();
/// The whole number from 0 to `most` that environment variable `variable` holds: 0 when
/// unset or empty. UserError for anything else, naming the variable.
int count_from_environment(const char* variable, int most);
/// A sanity bound: each simulated GPU is two queues and a pool.
inline constexpr int max_sim_gpus = 1024;

}  // namespace tandem
