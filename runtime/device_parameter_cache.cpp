#include "runtime/device_parameter_cache.h"

#include <algorithm>
#include <cstring>

#include "backends/trace.h"
#include "runtime/device_registry.h"
#include "runtime/plan_devices.h"

namespace tandem {

DeviceParameterCache::DeviceParameterCache(const TensorMap& params, const TensorMap& grads, TouchedRowsMap& grad_rows,
                                           DeviceRegistry& registry)
    : params_(params), grads_(grads), grad_rows_(grad_rows), registry_(registry) {}

DeviceParameterCache::Entry& DeviceParameterCache::entry(const std::string& name, Device device,
                                                         const std::string& context) {
  auto [it, fresh] = entries_.try_emplace({name, device});
  Entry& e = it->second;
  if (fresh) {
    try {
      e.host = params_.at(name);
      Allocator& allocator = registry_.allocator(device);
      e.copy = allocate(e.host.shape(), e.host.dtype(), allocator, context);
    } catch (...) {
      entries_.erase(it);
      throw;
    }
  }
  return e;
}

Tensor DeviceParameterCache::weight(const std::string& name, Device device, const std::string& context) {
  if (device == Device::cpu()) return params_.at(name);
  return entry(name, device, context).copy;  // filled by the next refresh()
}

Tensor DeviceParameterCache::gradient(const std::string& name, Device device, const std::string& context) {
  if (device == Device::cpu()) {
    auto it = grads_.find(name);
    return it == grads_.end() ? Tensor() : it->second;  // a row gradient has no dense tensor
  }
  if (auto rows = grad_rows_.find(name); rows != grad_rows_.end() && rows->second.holds_values())
    throw UserError(context + ": '" + name + "' belongs to a table declared sparse: true, whose gradient is kept " +
                    "as rows on the cpu; training places it on " + device.str() + ". Keep the table on the cpu " +
                    "(device: cpu), or drop sparse: true to give it a dense gradient");
  Entry& e = entry(name, device, context);
  if (!e.grad.defined()) {
    // the model's gradient, looked up now: made when training first needed it, after any
    // weight copies that inference made
    e.host_grad = grads_.at(name);  // inference never asks: its devices hold no gradient buffers
    Backend& backend = registry_.backend(device);
    e.grad = allocate(e.host.shape(), DType::float32, backend.allocator(), context);
    if (!staging_allocator_set_) {  // pinned memory for CUDA: the GPUs' copies land there fastest
      staging_.use_allocator(backend.host_allocator());
      staging_allocator_set_ = true;
    }
    // the staging ring holds one device's gradients: the largest device's
    staging_.reserve(gradient_bytes_[device] += HostStagingRing::bytes_for(e.grad.shape()));
  }
  return e.grad;
}

TouchedRows* DeviceParameterCache::gradient_rows(const std::string& name, Device device) {
  if (device != Device::cpu()) return nullptr;
  auto it = grad_rows_.find(name);
  return it == grad_rows_.end() ? nullptr : &it->second;
}

DeviceParameterCache::Traffic DeviceParameterCache::refresh(uint64_t params_version) {
  // On each GPU's copy_in lane, then its compute lane waits for them before the kernels
  // that read the weights: the host does not wait. A weight going up to several GPUs (a
  // data_parallel block's replicas) goes to all of them side by side (a TaskGroup).
  Traffic uploaded;
  std::vector<Backend*> waiting;  // devices whose compute lane must wait for their uploads
  // entries_ is ordered by (name, device): one weight's copies are neighbours
  for (auto first = entries_.begin(); first != entries_.end();) {
    auto last = first;
    int stale = 0;
    for (; last != entries_.end() && last->first.first == first->first.first; ++last)
      stale += last->second.version != params_version;
    auto group = stale > 1 ? std::make_shared<TaskGroup>(stale) : nullptr;
    for (; first != last; ++first) {
      Entry& e = first->second;
      if (e.version == params_version) continue;
      TraceLabel label(first->first.first, "upload");
      Backend& backend = registry_.backend(first->first.second);
      backend.copy(backend.lane(LaneKind::copy_in), buffer_of(e.copy), buffer_of(e.host), e.host.nbytes(), group);
      if (std::find(waiting.begin(), waiting.end(), &backend) == waiting.end()) waiting.push_back(&backend);
      e.version = params_version;
      uploaded.bytes += e.host.nbytes();
      ++uploaded.copies;
    }
  }
  for (Backend* backend : waiting) {
    Lane& copies = backend->lane(LaneKind::copy_in);
    Lane& compute = backend->lane(LaneKind::compute);
    if (&copies != &compute) compute.wait(copies.record());
  }
  return uploaded;
}

Tensor DeviceParameterCache::master(const std::string& name) const { return params_.at(name); }

void DeviceParameterCache::invalidate(const std::string& name) {
  for (auto& [key, e] : entries_)
    if (key.first == name) e.version = ~uint64_t{0};
}

void DeviceParameterCache::zero_gradients(const std::vector<std::pair<std::string, Device>>& keys) {
  // On each device's compute lane, before the backward kernels that accumulate into them;
  // only those not already zeroed on the copy_out lane after their last trip to the host.
  for (const auto& key : keys) {
    Entry& e = entries_.at(key);
    if (e.grad_zeroed) continue;
    TraceLabel label(key.first, "gradient zeroed");
    Backend& backend = registry_.backend(key.second);
    backend.zero(backend.lane(LaneKind::compute), e.grad);
  }
  for (const auto& key : keys) entries_.at(key).grad_zeroed = false;  // the backward writes them
}

DeviceParameterCache::Traffic DeviceParameterCache::add_gradients_to_host(
    const std::vector<std::pair<std::string, Device>>& keys) {
  // Per device, as one bucket: the copy_out lane waits for the device's backward kernels so
  // far (one event), copies every gradient of the bucket out, and the cpu's lane, where the
  // cpu layers' kernels accumulate theirs, adds them to the model's gradients after one
  // event more. Nothing waits on the host until the caller synchronises.
  Backend& cpu = registry_.backend(Device::cpu());
  Lane& cpu_lane = cpu.lane(LaneKind::compute);
  Traffic downloaded;
  std::vector<Device> devices;
  for (const auto& key : keys)
    if (std::find(devices.begin(), devices.end(), key.second) == devices.end()) devices.push_back(key.second);
  for (Device device : devices) {
    size_t bytes = 0;
    for (const auto& key : keys)
      if (key.second == device) bytes += HostStagingRing::bytes_for(entries_.at(key).grad.shape());
    staging_.start(bytes);
    Backend& gpu = registry_.backend(device);
    Lane& copies = gpu.lane(LaneKind::copy_out);
    copies.wait(gpu.lane(LaneKind::compute).record());
    std::vector<std::pair<Tensor, Tensor>> adds;  // (model's gradient, copy on the host)
    std::vector<TouchedRows*> whole;               // their touched rows: all of them now
    for (const auto& key : keys) {
      if (key.second != device) continue;
      Entry& e = entries_.at(key);
      if (auto rows = grad_rows_.find(key.first); rows != grad_rows_.end()) whole.push_back(&rows->second);
      HostStagingRing::Region host = staging_.take(e.grad.shape());
      TraceLabel label(key.first, "gradient to the host");
      for (const DeviceEvent& reader_done : host.free_after) copies.wait(reader_done);
      gpu.copy(copies, buffer_of(host.tensor), buffer_of(e.grad), e.grad.nbytes());
      adds.emplace_back(e.host_grad, host.tensor);
      downloaded.bytes += e.grad.nbytes();
      ++downloaded.copies;
    }
    // Zeroed for the next backward right behind the copies, off the kernels' path.
    {
      TraceLabel zero_label("gradients sent: zeroed");
      for (const auto& key : keys)
        if (key.second == device) {
          gpu.zero(copies, entries_.at(key).grad);
          entries_.at(key).grad_zeroed = true;
        }
    }
    cpu_lane.wait(copies.record());
    // On the cpu's lane, after the cpu kernels that record rows of the same gradients (a
    // table replicated on the cpu and a GPU): one writer of the touched rows at a time.
    TraceLabel add_label("gradients added into the master's");
    for (auto& [into, from] : adds) cpu.accumulate(cpu_lane, into, from);
    if (!whole.empty())
      cpu_lane.submit([whole = std::move(whole)] {  // the cpu's lane runs on the host
        for (TouchedRows* rows : whole) rows->mark_all();
      });
    staging_.release_after(cpu_lane.record());
  }
  return downloaded;
}

}  // namespace tandem
