#include "runtime/params/device_parameter_cache.h"

#include <algorithm>
#include <cstring>

#include "backends/trace.h"
#include "runtime/devices/device_registry.h"
#include "runtime/exec/plan_devices.h"

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
  if (device == Device::cpu()) {
    // A layer reads it on the cpu: its master stays on the host from now on.
    Holding& h = holdings_[name];
    h.read_on_cpu = true;
    release(name);
    return params_.at(name);
  }
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
  // data_parallel block's replicas) goes to all of them side by side (a TaskGroup). A
  // weight the GPUs hold is theirs: nothing goes up.
  Traffic uploaded;
  std::vector<Backend*> waiting;  // devices whose compute lane must wait for their copies
  auto note = [&](Backend& b) {
    if (std::find(waiting.begin(), waiting.end(), &b) == waiting.end()) waiting.push_back(&b);
  };
  // entries_ is ordered by (name, device): one weight's copies are neighbours
  for (auto first = entries_.begin(); first != entries_.end();) {
    auto last = first;
    for (; last != entries_.end() && last->first.first == first->first.first; ++last) {
    }
    if (held(first->first.first)) {  // each GPU's copy is a master: nothing to refresh
      first = last;
      continue;
    }
    int stale = 0;
    for (auto it = first; it != last; ++it) stale += it->second.version != params_version;
    auto group = stale > 1 ? std::make_shared<TaskGroup>(stale) : nullptr;
    for (; first != last; ++first) {
      Entry& e = first->second;
      if (e.version == params_version) continue;
      TraceLabel label(first->first.first, "upload");
      Backend& backend = registry_.backend(first->first.second);
      backend.copy(backend.lane(LaneKind::copy_in), buffer_of(e.copy), buffer_of(e.host), e.host.nbytes(), group);
      note(backend);
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
  // only those not already zeroed on the copy_out lane after their last trip to the host,
  // and not the first replica's of a held parameter (it accumulates across calls, until
  // zero_held_gradients).
  std::vector<Device> zeroed_behind_copies;
  for (const auto& key : keys) {
    Entry& e = entries_.at(key);
    if (e.grad_zeroed) {
      // zeroed on the copy_out lane: the backward's kernels wait for it (the host may not
      // have: a pipelined step's micro-batches follow each other without waiting)
      if (std::find(zeroed_behind_copies.begin(), zeroed_behind_copies.end(), key.second) == zeroed_behind_copies.end()) {
        Backend& backend = registry_.backend(key.second);
        backend.lane(LaneKind::compute).wait(backend.lane(LaneKind::copy_out).record());
        zeroed_behind_copies.push_back(key.second);
      }
      continue;
    }
    if (auto h = holdings_.find(key.first); h != holdings_.end() && !h->second.devices.empty() &&
                                             h->second.devices.front() == key.second)
      continue;
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

// ---- parameters held by GPUs ---------------------------------------------------------------

DeviceParameterCache::Traffic DeviceParameterCache::hold(const std::string& name, uint64_t params_version) {
  Traffic uploaded;
  Holding& holding = holdings_[name];
  if (!holding.devices.empty() || holding.read_on_cpu) return uploaded;
  std::vector<Device> devices;
  for (auto& [key, e] : entries_)
    if (key.first == name && e.grad.defined()) devices.push_back(key.second);
  if (devices.empty()) return uploaded;
  std::vector<Backend*> backends;
  for (size_t i = 0; i < devices.size(); ++i) {
    Entry& e = entries_.at({name, devices[i]});
    Backend& b = registry_.backend(devices[i]);
    Lane& in = b.lane(LaneKind::copy_in);
    TraceLabel label(name, "upload");
    if (e.version != params_version) {  // the host's values first
      b.copy(in, buffer_of(e.copy), buffer_of(e.host), e.host.nbytes());
      e.version = params_version;
      uploaded.bytes += e.host.nbytes();
      ++uploaded.copies;
    }
    // The gradient so far is the host's: it goes onto the first replica, which accumulates;
    // the others start from zero, and the host's is left at zero, so nothing counts twice.
    if (i == 0) {
      b.copy(in, buffer_of(e.grad), buffer_of(e.host_grad), e.grad.nbytes());
      uploaded.bytes += e.grad.nbytes();
      ++uploaded.copies;
    } else {
      TraceLabel zero_label(name, "gradient zeroed");
      b.zero(in, e.grad);
    }
    e.grad_zeroed = false;
    if (&in != &b.lane(LaneKind::compute)) b.lane(LaneKind::compute).wait(in.record());
    backends.push_back(&b);
  }
  for (Backend* b : backends) b->synchronize();  // the host's gradient is read before it is zeroed
  const Tensor& host_grad = entries_.at({name, devices.front()}).host_grad;
  std::memset(host_grad.raw_data(), 0, host_grad.nbytes());
  holding.devices = std::move(devices);
  holding.host_fresh = true;  // the same values, until the first update on the GPUs
  return uploaded;
}

bool DeviceParameterCache::held(const std::string& name) const {
  auto it = holdings_.find(name);
  return it != holdings_.end() && !it->second.devices.empty();
}

std::vector<DeviceParameterCache::Replica> DeviceParameterCache::replicas(const std::string& name) const {
  std::vector<Replica> out;
  auto it = holdings_.find(name);
  if (it == holdings_.end()) return out;
  for (Device d : it->second.devices) {
    const Entry& e = entries_.at({name, d});
    out.push_back({d, e.copy, e.grad});
  }
  return out;
}

std::string DeviceParameterCache::held_name_of(const Tensor& host) const {
  for (const auto& [name, holding] : holdings_) {
    if (holding.devices.empty()) continue;
    const Tensor& t = params_.at(name);
    if (t.storage() == host.storage()) return name;
    if (auto g = grads_.find(name); g != grads_.end() && g->second.storage() == host.storage()) return name;
  }
  return {};
}

void DeviceParameterCache::all_reduce_gradients(const std::string& name) {
  std::vector<Replica> rs = replicas(name);
  if (rs.size() < 2) return;
  TraceLabel label(name, "gradients all-reduced");
  std::vector<CollectiveMember> members;
  for (const Replica& r : rs) members.push_back({&registry_.backend(r.device), r.grad});
  Backend& first = *members.front().backend;
  if (first.all_reduce_sum(members)) return;
  // A backend that offers none: through the host. Each replica's gradient goes down, the
  // cpu's lane sums them in replica order, and the sum goes back up to every replica.
  Backend& cpu = registry_.backend(Device::cpu());
  Lane& cpu_lane = cpu.lane(LaneKind::compute);
  std::vector<Tensor> down;
  for (const CollectiveMember& m : members) {
    Tensor host = Tensor::empty(m.tensor.shape(), DType::float32, m.backend->host_allocator());
    queue_download(m.tensor.device(), m.tensor, host);
    cpu_lane.wait(m.backend->lane(LaneKind::copy_out).record());
    down.push_back(host);
  }
  for (size_t k = 1; k < down.size(); ++k) cpu.accumulate(cpu_lane, down[0], down[k]);
  const DeviceEvent summed = cpu_lane.record();
  for (const CollectiveMember& m : members) {
    Lane& in = m.backend->lane(LaneKind::copy_in);
    in.wait(summed);
    m.backend->copy(in, buffer_of(m.tensor), buffer_of(down[0]), m.tensor.nbytes());
    Lane& compute = m.backend->lane(LaneKind::compute);
    if (&in != &compute) compute.wait(in.record());
  }
}

void DeviceParameterCache::masters_updated() {
  for (auto& [name, holding] : holdings_)
    if (!holding.devices.empty()) holding.host_fresh = false;
}

void DeviceParameterCache::zero_held_gradients() {
  for (const auto& [name, holding] : holdings_)
    for (const Replica& r : replicas(name)) {
      TraceLabel label(name, "gradient zeroed");
      Backend& b = registry_.backend(r.device);
      b.zero(b.lane(LaneKind::compute), r.grad);
    }
}

void DeviceParameterCache::queue_download(Device device, const Tensor& from, const Tensor& host) {
  Backend& b = registry_.backend(device);
  Lane& out = b.lane(LaneKind::copy_out);
  out.wait(b.lane(LaneKind::compute).record());
  b.copy(out, buffer_of(host), buffer_of(from), from.nbytes());
}

void DeviceParameterCache::sync_to_host() {
  std::vector<Device> used;
  for (auto& [name, holding] : holdings_) {
    if (holding.devices.empty()) continue;
    const Device first = holding.devices.front();
    const Entry& e = entries_.at({name, first});
    if (!holding.host_fresh) queue_download(first, e.copy, e.host);
    queue_download(first, e.grad, e.host_grad);  // the gradient accumulates there: always
    if (auto rows = grad_rows_.find(name); rows != grad_rows_.end()) rows->second.mark_all();
    holding.host_fresh = true;
    if (std::find(used.begin(), used.end(), first) == used.end()) used.push_back(first);
  }
  for (Device d : used) registry_.backend(d).synchronize();
}

void DeviceParameterCache::release(const std::string& name) {
  Holding& holding = holdings_[name];
  if (holding.devices.empty()) return;
  const Device first = holding.devices.front();
  const Entry& e = entries_.at({name, first});
  if (!holding.host_fresh) queue_download(first, e.copy, e.host);
  queue_download(first, e.grad, e.host_grad);
  if (auto rows = grad_rows_.find(name); rows != grad_rows_.end()) rows->second.mark_all();
  registry_.backend(first).synchronize();
  holding.devices.clear();
  holding.host_fresh = true;
  for (auto& [key, entry] : entries_)
    if (key.first == name) entry.version = ~uint64_t{0};  // refreshed from the host again
}

void DeviceParameterCache::host_written() {
  for (auto& [name, holding] : holdings_) {
    holding.devices.clear();
    holding.host_fresh = true;
  }
  for (auto& [key, e] : entries_) e.version = ~uint64_t{0};
}

}  // namespace tandem
