#include "runtime/devices/device_registry.h"

#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string_view>
#include <vector>

#include <dlfcn.h>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_compute_ops.h"
#include "backends/cuda_backend_module.h"
#include "backends/sim/sim_gpu.h"
#include "backends/device_spans.h"
#include "backends/trace.h"
#include "core/error.h"
#include "core/memory_size.h"

namespace tandem {
namespace {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("model name") && line.find(':') != std::string::npos) {
      std::string name = line.substr(line.find(':') + 1);
      return name.starts_with(' ') ? name.substr(1) : name;
    }
  return "cpu";
}

size_t host_memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page_size) : 0;
}

size_t sim_gpu_memory_from(const DeviceOptions& options) {
  size_t bytes = default_sim_gpu_memory;
  std::string source = "--sim-gpu-memory";
  if (options.sim_gpu_memory) {
    bytes = *options.sim_gpu_memory;
  } else if (const char* env = std::getenv("TANDEM_SIM_GPU_MEMORY"); env != nullptr && *env != '\0' &&
                                                                      std::strchr(env, ',') == nullptr) {
    source = "TANDEM_SIM_GPU_MEMORY";
    try {
      bytes = parse_device_memory_size(env);
    } catch (const UserError& e) {
      throw UserError("TANDEM_SIM_GPU_MEMORY: " + std::string(e.what()));
    }
  }
  if (bytes == 0) throw UserError(source + " is 0: a simulated GPU needs some memory, e.g. 2GiB");
  return bytes;
}

}  // namespace

std::vector<size_t> parse_sim_gpu_memory(const std::string& text, const std::string& source) {
  std::vector<size_t> sizes;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    try {
      sizes.push_back(parse_device_memory_size(item));
    } catch (const UserError& e) {
      throw UserError(source + ": " + std::string(e.what()) +
                      (comma == std::string::npos && start == 0 ? "" : " (in the list '" + text + "')"));
    }
    if (sizes.back() == 0) throw UserError(source + " gives a GPU 0 bytes: a simulated GPU needs some memory, e.g. 2GiB");
    if (comma == std::string::npos) return sizes;
    start = comma + 1;
  }
}

void set_sim_gpu_memory(DeviceOptions& options, const std::string& text, const std::string& source) {
  std::vector<size_t> sizes = parse_sim_gpu_memory(text, source);
  if (sizes.size() == 1) options.sim_gpu_memory = sizes[0];
  else options.sim_gpu_memories = std::move(sizes);
}

int sim_gpus_from_environment() { return count_from_environment("TANDEM_SIM_GPUS", max_sim_gpus); }

int count_from_environment(const char* variable, int most) {
  const char* env = std::getenv(variable);
  if (env == nullptr) return 0;
  std::string_view text(env);
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  if (text.empty()) return 0;
  int count = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), count);
  if (ec != std::errc() || end != text.data() + text.size() || count < 0 || count > most)
    throw UserError(std::string(variable) + "='" + std::string(env) + "' is not a number of " +
                    (std::string(variable) == "TANDEM_SIM_GPUS" ? "simulated" : "logical") +
                    " GPUs: set it to a whole number from 0 to " + std::to_string(most) + ", e.g. " + variable +
                    "=2, or unset it");
  return count;
}

namespace {

// The CUDA backend's module (backends/cuda_backend_module.h): TANDEM_CUDA_BACKEND names it;
// else the loader's search path (LD_LIBRARY_PATH: a bundle's lib/), then beside this
// program and in ../lib, then where the build put it, then where `cmake --install` put it.
constexpr bool cuda_backend_built() {
#ifdef TANDEM_CUDA_MODULE_PATH
  return true;
#else
  return false;
#endif
}

void* load_cuda_module() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("TANDEM_CUDA_BACKEND"); env && *env) {
    candidates.push_back(env);
  } else {
    candidates.push_back(kCudaBackendModule);
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
      std::string dir(exe, static_cast<size_t>(n));
      dir = dir.substr(0, dir.rfind('/'));
      candidates.push_back(dir + "/" + kCudaBackendModule);
      candidates.push_back(dir + "/../lib/" + kCudaBackendModule);
      candidates.push_back(dir + "/../" + kCudaBackendModule);
    }
#ifdef TANDEM_CUDA_MODULE_PATH
    candidates.push_back(TANDEM_CUDA_MODULE_PATH);
#endif
#ifdef TANDEM_CUDA_MODULE_INSTALLED_PATH
    candidates.push_back(TANDEM_CUDA_MODULE_INSTALLED_PATH);  // cmake --install's, for programs built against it
#endif
  }
  std::string errors;
  for (const std::string& path : candidates) {
    if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
    errors += "\n  " + path + ": " + dlerror();
  }
  throw UserError("this build of Tandem cannot load its CUDA backend (" + std::string(kCudaBackendModule) +
                  "; set TANDEM_CUDA_BACKEND to its path). Tried:" + errors);
}

std::unique_ptr<Backend> open_cuda_backend(const CudaGpuSpec& spec) {
  if (!cuda_backend_built())
    throw UserError("this build of Tandem has no CUDA backend (it was built without CUDA, or without cuDNN and NCCL "
                    "beside the toolkit: docs/cuda-backend.md); rebuild with -DTANDEM_CUDA=ON, or run on the cpu "
                    "with --place '*=cpu'");
  static void* module = load_cuda_module();  // loaded once, never unloaded: its objects live on
  auto interface = reinterpret_cast<CudaBackendInterfaceFn>(dlsym(module, kCudaBackendInterfaceSymbol));
  auto open = reinterpret_cast<OpenCudaBackendFn>(dlsym(module, kOpenCudaBackendSymbol));
  if (!interface || !open || std::string(interface()) != kBackendInterfaceVersion)
    throw UserError(std::string(kCudaBackendModule) + " is not this build's CUDA backend (interface " +
                    (interface ? interface() : "unknown") + ", this program's " + kBackendInterfaceVersion +
                    "); rebuild, or point TANDEM_CUDA_BACKEND at the right one");
  std::unique_ptr<Backend> backend;
  open(spec, backend);
  return backend;
}

}  // namespace

DeviceRegistry::DeviceRegistry(const DeviceOptions& options) : open_real_(open_cuda_backend) {
  std::string why;
  std::vector<CudaDeviceInfo> gpus = cuda_devices(&why);
  why_no_gpus_ = std::move(why);
  build(options, std::move(gpus));
}

DeviceRegistry::DeviceRegistry(const DeviceOptions& options, std::vector<CudaDeviceInfo> real_gpus, std::string why_no_gpus,
                               RealGpuOpener open_real)
    : open_real_(open_real ? std::move(open_real) : RealGpuOpener(open_cuda_backend)), why_no_gpus_(std::move(why_no_gpus)) {
  build(options, std::move(real_gpus));
}

DeviceRegistry::DeviceRegistry(CpuAloneTag) {
  inventory_.devices = {DeviceInfo{Device::cpu(), host_memory_bytes(), false, cpu_model_name()}};
  inventory_.no_gpu_reason = "the model runs on the cpu alone";
  backends_.push_back(std::make_unique<cpu::CpuBackend>(cpu::CpuLane::calling_thread));
}

std::shared_ptr<DeviceRegistry> DeviceRegistry::cpu_alone() {
  return std::shared_ptr<DeviceRegistry>(new DeviceRegistry(CpuAloneTag{}));
}

DeviceRegistry::~DeviceRegistry() {
  // Run every lane dry before any backend is destroyed: a queued copy may write into
  // another device's memory. The GPUs go first, the cpu (whose lane they may wait on) last.
  for (auto& backend : backends_) {
    if (!backend) continue;
    try {
      backend->synchronize();
    } catch (...) {
      // An error nobody synchronised for; a destructor has no one to tell.
    }
  }
  while (backends_.size() > 1) backends_.pop_back();
}

void DeviceRegistry::build(const DeviceOptions& options, std::vector<CudaDeviceInfo> real_gpus) {
  int sims = options.sim_gpus;
  if (sims < -1 || sims > max_sim_gpus)
    throw UserError("--sim-gpus " + std::to_string(sims) + " is out of range: ask for 0 to " +
                    std::to_string(max_sim_gpus) + " simulated GPUs, e.g. --sim-gpus 2");
  if (sims == -1) sims = sim_gpus_from_environment();
  if (options.logical_gpus < -1 || options.logical_gpus > max_sim_gpus)
    throw UserError("--logical-gpus " + std::to_string(options.logical_gpus) + " is out of range: ask for 0 to " +
                    std::to_string(max_sim_gpus) + " devices over the real GPUs, e.g. --logical-gpus 4");
  Trace::check_environment();
  sim_gpu_memory_ = sim_gpu_memory_from(options);

  inventory_.devices = {DeviceInfo{Device::cpu(), host_memory_bytes(), false, cpu_model_name()}};
  backends_.push_back(std::make_unique<cpu::CpuBackend>());
  std::vector<size_t> memories = options.sim_gpu_memories;  // one per GPU, when given
  if (memories.empty())
    if (const char* env = std::getenv("TANDEM_SIM_GPU_MEMORY"); !options.sim_gpu_memory && env && std::strchr(env, ','))
      memories = parse_sim_gpu_memory(env, "TANDEM_SIM_GPU_MEMORY");
  if (!memories.empty() && static_cast<int>(memories.size()) != sims)
    throw UserError("--sim-gpu-memory lists " + std::to_string(memories.size()) + " sizes, but " + std::to_string(sims) +
                    " simulated GPUs were asked for (--sim-gpus); give one size for every GPU, or one per GPU");
  if (sims > 0) {
    hidden_real_gpus_ = static_cast<int>(real_gpus.size());
    sim_gpu_count_ = sims;
    for (int i = 0; i < sims; ++i) {
      const size_t bytes = memories.empty() ? sim_gpu_memory_ : memories[static_cast<size_t>(i)];
      // each with the cpu's kernels and a context of its own, as each GPU has its own
      backends_.push_back(std::make_unique<SimGpu>(i, bytes, cpu::make_compute_ops()));
      inventory_.devices.push_back(DeviceInfo{Device::cuda(i), bytes, true, "simulated GPU"});
    }
    return;
  }
  real_gpus_ = std::move(real_gpus);
  if (real_gpus_.empty()) {
    inventory_.no_gpu_reason = why_no_gpus_;
    return;
  }
  int logical = options.logical_gpus >= 0 ? options.logical_gpus : count_from_environment("TANDEM_LOGICAL_GPUS", max_sim_gpus);
  const int physical = static_cast<int>(real_gpus_.size());
  if (logical == 0) logical = physical;
  for (int i = 0; i < logical; ++i) physical_of_logical_.push_back(i % physical);
  for (int i = 0; i < logical; ++i) {
    const CudaDeviceInfo& g = real_gpus_[static_cast<size_t>(physical_of_logical_[i])];
    const int sharing = logical / physical + (i % physical < logical % physical ? 1 : 0);
    std::string name = g.name;
    if (sharing > 1) name += " (1/" + std::to_string(sharing) + " of GPU " + std::to_string(g.index) + ")";
    inventory_.devices.push_back(DeviceInfo{Device::cuda(i), g.total_bytes / static_cast<size_t>(sharing), false, name});
    backends_.push_back(nullptr);  // opened on first use
  }
}

std::string DeviceRegistry::available() const {
  std::string list;
  for (const DeviceInfo& d : inventory_.devices) {
    if (!list.empty()) list += ", ";
    list += d.device.str();
    if (d.simulated) list += " (simulated)";
    else if (d.device.kind == DeviceKind::cuda) list += " (" + d.name + ")";
  }
  return list;
}

void DeviceRegistry::require(Device device) const {
  if (has(device)) return;
  throw UserError("device " + device.str() + " does not exist: this machine has " + available() +
                  "; use --sim-gpus N for more");
}

bool DeviceRegistry::simulated(Device device) const {
  const DeviceInfo* info = inventory_.find(device);
  return info != nullptr && info->simulated;
}

Backend& DeviceRegistry::backend(Device device) {
  require(device);
  const size_t i = static_cast<size_t>(inventory_.find(device) - inventory_.devices.data());
  std::lock_guard lock(mutex_);
  if (!backends_[i]) {
    CudaGpuSpec spec;
    spec.logical = device.index;
    spec.gpu = real_gpus_.at(static_cast<size_t>(physical_of_logical_.at(static_cast<size_t>(device.index))));
    for (int p : physical_of_logical_) spec.physical_of_logical.push_back(real_gpus_[static_cast<size_t>(p)].index);
    const bool shared = static_cast<int>(physical_of_logical_.size()) > static_cast<int>(real_gpus_.size());
    spec.capacity = shared ? inventory_.devices[i].memory_bytes : 0;
    try {
      backends_[i] = open_real_(spec);
    } catch (const UserError& e) {
      throw UserError(device.str() + " (" + spec.gpu.name + ") could not be opened: " + e.what());
    }
    // Its streams run work after the host enqueued it: the backend times it on the device.
    if (DeviceSpanSink* sink = Trace::device_span_sink()) backends_[i]->trace_device_work(sink);
  }
  return *backends_[i];
}

int64_t DeviceRegistry::preparations() const {
  std::lock_guard lock(mutex_);
  int64_t n = 0;
  for (const auto& backend : backends_)
    if (backend) n += backend->preparations();
  return n;
}

}  // namespace tandem
