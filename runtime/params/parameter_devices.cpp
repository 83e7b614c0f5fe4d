#include "runtime/params/parameter_devices.h"

#include <algorithm>
#include <cstring>

#include "backends/trace.h"

namespace tandem {

void PlacedParameterDevices::on_cpu_lane(const std::function<void(ParameterDevices& host)>& work) {
  Lane& lane = registry_.backend(Device::cpu()).lane(LaneKind::compute);
  TraceLabel label("the host's parameters", "optimizer arithmetic");
  lane.submit([&work] { work(host_parameter_devices(HostThreads::team)); });
  lane.synchronize();  // `work` refers to the caller's values; the caller reads what it wrote
}

void PlacedParameterDevices::download(Device device, const Tensor& from, const Tensor& host) {
  TraceLabel label("optimizer state", "to the host");
  Backend& b = registry_.backend(device);
  Lane& out = b.lane(LaneKind::copy_out);
  out.wait(b.lane(LaneKind::compute).record());
  b.copy(out, buffer_of(host), buffer_of(from), from.nbytes());
  out.synchronize();
}

std::vector<Tensor>& PlacedParameterDevices::state_on(const Tensor& state, const Replicas& held) {
  auto [it, fresh] = state_.try_emplace(state.storage().get());
  std::vector<Tensor>& replicas = it->second.second;
  if (fresh || replicas.size() != held.size()) {
    it->second.first = state;
    replicas.clear();
    TraceLabel label("optimizer state", "upload");
    for (const DeviceParameterCache::Replica& r : held) {  // the host's values go up
      Backend& b = registry_.backend(r.device);
      Tensor t = Tensor::empty(state.shape(), DType::float32, b.allocator());
      Lane& in = b.lane(LaneKind::copy_in);
      b.copy(in, buffer_of(t), buffer_of(state), state.nbytes());
      in.synchronize();  // the host's tensor may change once this returns
      Lane& compute = b.lane(LaneKind::compute);
      if (&in != &compute) compute.wait(in.record());
      replicas.push_back(t);
    }
  }
  return replicas;
}

void PlacedParameterDevices::pull(const Tensor& state) {
  if (!state.defined()) return;
  auto it = state_.find(state.storage().get());
  if (it == state_.end()) return;
  if (!it->second.second.empty()) download(it->second.second.front().device(), it->second.second.front(), state);
  state_.erase(it);
}

Tensor PlacedParameterDevices::zeros_like(const Tensor& param) {
  return host_parameter_devices().zeros_like(param);  // replicas on the GPUs come with the first update
}

void PlacedParameterDevices::sgd(const optim_detail::SgdScalars& s, const Tensor& p, const Tensor& g,
                                 const Tensor& buf, bool first) {
  const std::string name = cache_.held_name_of(p);
  if (name.empty()) {
    pull(buf);
    return on_cpu_lane([&](ParameterDevices& host) { host.sgd(s, p, g, buf, first); });
  }
  const Replicas held = cache_.replicas(name);
  std::vector<Tensor> bufs = buf.defined() ? state_on(buf, held) : std::vector<Tensor>(held.size());
  TraceLabel label(name, "optimizer step");
  for (size_t k = 0; k < held.size(); ++k) {
    Backend& b = registry_.backend(held[k].device);
    b.sgd_update(b.lane(LaneKind::compute), s, held[k].weight, held[k].grad, bufs[k], first);
  }
}

void PlacedParameterDevices::adam(const optim_detail::AdamScalars& s, const Tensor& p, const Tensor& g, const Tensor& m,
                                  const Tensor& v) {
  const std::string name = cache_.held_name_of(p);
  if (name.empty()) {
    pull(m);
    pull(v);
    return on_cpu_lane([&](ParameterDevices& host) { host.adam(s, p, g, m, v); });
  }
  const Replicas held = cache_.replicas(name);
  const std::vector<Tensor>& ms = state_on(m, held);
  const std::vector<Tensor>& vs = state_on(v, held);
  TraceLabel label(name, "optimizer step");
  for (size_t k = 0; k < held.size(); ++k) {
    Backend& b = registry_.backend(held[k].device);
    b.adam_update(b.lane(LaneKind::compute), s, held[k].weight, held[k].grad, ms[k], vs[k]);
  }
}

double PlacedParameterDevices::sum_of_squares(const Tensor& g) {
  const std::string name = cache_.held_name_of(g);
  if (name.empty()) {
    double sum = 0;
    on_cpu_lane([&](ParameterDevices& host) { sum = host.sum_of_squares(g); });
    return sum;
  }
  const DeviceParameterCache::Replica first = cache_.replicas(name).front();  // every replica holds the sum
  Backend& b = registry_.backend(first.device);
  Lane& compute = b.lane(LaneKind::compute);
  TraceLabel label(name, "gradient norm");
  double sum = 0;
  b.sum_of_squares(compute, first.grad, &sum);
  compute.synchronize();
  return sum;
}

void PlacedParameterDevices::scale(const Tensor& g, float factor) {
  const std::string name = cache_.held_name_of(g);
  if (name.empty()) return on_cpu_lane([&](ParameterDevices& host) { host.scale(g, factor); });
  TraceLabel label(name, "gradient clipped");
  for (const DeviceParameterCache::Replica& r : cache_.replicas(name)) {
    Backend& b = registry_.backend(r.device);
    b.scale(b.lane(LaneKind::compute), r.grad, factor);
  }
}

bool PlacedParameterDevices::scale_checking_finite(std::span<const Tensor> grads, float factor) {
  std::vector<Tensor> on_host;
  std::vector<std::pair<Device, std::vector<Tensor>>> by_device;  // every replica's gradient, where it is
  for (const Tensor& g : grads) {
    const std::string name = cache_.held_name_of(g);
    if (name.empty()) {
      on_host.push_back(g);
      continue;
    }
    for (const DeviceParameterCache::Replica& r : cache_.replicas(name)) {
      auto it = std::find_if(by_device.begin(), by_device.end(), [&](const auto& d) { return d.first == r.device; });
      if (it == by_device.end()) it = by_device.insert(by_device.end(), {r.device, {}});
      it->second.push_back(r.grad);
    }
  }
  bool finite = true;
  if (!on_host.empty()) on_cpu_lane([&](ParameterDevices& host) { finite = host.scale_checking_finite(on_host, factor); });
  TraceLabel label("gradients unscaled and checked");
  for (auto& [device, tensors] : by_device) {
    Backend& b = registry_.backend(device);
    finite = b.scale_checking_finite(b.lane(LaneKind::compute), tensors, factor) && finite;
  }
  return finite;
}

Tensor PlacedParameterDevices::to_host(const Tensor& t) {
  if (auto it = state_.find(t.storage().get()); it != state_.end() && !it->second.second.empty())
    download(it->second.second.front().device(), it->second.second.front(), t);
  else if (!cache_.held_name_of(t).empty())
    cache_.sync_to_host();
  return t.clone();
}

void PlacedParameterDevices::from_host(const Tensor& t, const Tensor& from) {
  std::memcpy(t.raw_data(), from.raw_data(), t.nbytes());
  auto it = state_.find(t.storage().get());
  if (it == state_.end()) return;
  TraceLabel label("optimizer state", "upload");
  for (const Tensor& replica : it->second.second) {
    Backend& b = registry_.backend(replica.device());
    Lane& in = b.lane(LaneKind::copy_in);
    b.copy(in, buffer_of(replica), buffer_of(t), t.nbytes());
    in.synchronize();
    Lane& compute = b.lane(LaneKind::compute);
    if (&in != &compute) compute.wait(in.record());
  }
}

void PlacedParameterDevices::sync_state_to_host() {
  for (auto& [storage, entry] : state_)
    if (!entry.second.empty()) download(entry.second.front().device(), entry.second.front(), entry.first);
  state_.clear();
}

}  // namespace tandem
