#include "runtime/multi_device_training.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/error.h"
#include "runtime/device_registry.h"
#include "runtime/node_kernels.h"
#include "runtime/plan_devices.h"

namespace tandem {

struct MultiDeviceTraining::DeviceState : PlanDevice {
};

struct MultiDeviceTraining::Action {
  enum class Kind { op, copy } kind = Kind::op;
  int device = 0;       // op: where it runs; copy: the destination
  std::string context;  // "layer 'fc' (linear)": named in errors
  // op
  int step = -1;
  const Node* node = nullptr;
  std::unique_ptr<Kernel> kernel;  // null for views
  std::vector<Tensor> params, param_grads;  // on `device`
  std::vector<int> in_slots;
  int out_slot = -1;
  // copy
  int from_device = 0;
  int src_slot = -1;
  int dst_slot = -1;
};

namespace {

std::string layer_context(const Node& node) { return "layer '" + node.path + "' (" + node.op + ")"; }

size_t offset_of(const Tensor& t) {
  return static_cast<size_t>(static_cast<const char*>(t.raw_data()) - static_cast<const char*>(t.storage()->data()));
}

BufferRef buffer_of(const Tensor& t) { return BufferRef{t.storage(), offset_of(t)}; }

Tensor allocate(const Shape& shape, DType dtype, Allocator& allocator, const std::string& context) {
  try {
    return Tensor::empty(shape, dtype, allocator);
  } catch (const OutOfMemory& e) {
    throw e.in(context);
  }
}

void add_into(Tensor& into, const Tensor& from) {
  float* a = into.data<float>();
  const float* b = from.data<float>();
  const int64_t n = into.numel();
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}

}  // namespace

// ---- DeviceParameterCache ------------------------------------------------------------------

DeviceParameterCache::DeviceParameterCache(const TensorMap& params, const TensorMap& grads, DeviceRegistry& registry)
    : params_(params), grads_(grads), registry_(registry) {}

DeviceParameterCache::Entry& DeviceParameterCache::entry(const std::string& name, Device device,
                                                         const std::string& context) {
  auto [it, fresh] = entries_.try_emplace({name, device});
  Entry& e = it->second;
  if (fresh) {
    try {
      e.host = params_.at(name);
      if (auto g = grads_.find(name); g != grads_.end()) e.host_grad = g->second;  // a buffer has none
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
  if (device == Device::cpu()) return grads_.at(name);
  Entry& e = entry(name, device, context);
  if (!e.grad.defined())  // inference never asks: its devices hold no gradient buffers
    e.grad = allocate(e.host.shape(), DType::float32, registry_.allocator(device), context);
  return e.grad;
}

void DeviceParameterCache::refresh(uint64_t params_version) {
  std::vector<SimGpu*> used;
  for (auto& [key, e] : entries_) {
    if (e.version == params_version) continue;
    SimGpu& gpu = registry_.sim_gpu(key.second);
    gpu.copy_from_host(buffer_of(e.copy), buffer_of(e.host), e.host.nbytes());
    e.version = params_version;
    if (std::find(used.begin(), used.end(), &gpu) == used.end()) used.push_back(&gpu);
  }
  for (SimGpu* gpu : used) gpu->synchronize();
}

void DeviceParameterCache::zero_gradients(const std::vector<std::pair<std::string, Device>>& keys) {
  for (const auto& key : keys) {
    Tensor g = entries_.at(key).grad;
    registry_.sim_gpu(key.second).submit([g]() mutable { std::memset(g.raw_data(), 0, g.nbytes()); });
  }
  for (const auto& key : keys) registry_.sim_gpu(key.second).synchronize();
}

void DeviceParameterCache::add_gradients_to_host(const std::vector<std::pair<std::string, Device>>& keys) {
  for (const auto& key : keys) {
    Entry& e = entries_.at(key);
    Tensor host = Tensor::empty(e.grad.shape(), DType::float32);
    SimGpu& gpu = registry_.sim_gpu(key.second);
    gpu.copy_to_host(buffer_of(host), buffer_of(e.grad), e.grad.nbytes());
    gpu.synchronize();
    add_into(e.host_grad, host);
  }
}

// ---- MultiDeviceTraining -------------------------------------------------------------------

MultiDeviceTraining::MultiDeviceTraining(const Graph& graph, const Plan& plan, const Bindings& bindings,
                                         CpuContext& cpu, DeviceParameterCache& cache, DeviceRegistry& registry,
                                         bool input_grads, const std::vector<int>& kept)
    : plan_(plan), graph_(graph), cache_(cache), shapes_(concrete_shapes(graph, bindings)) {
  const size_t n_values = graph.values.size();
  devices_ = open_plan_devices<DeviceState>(plan_, registry, cpu);
  auto device_index = [&](Device d) { return plan_device_index(devices_, d); };

  requires_grad_.assign(n_values, false);
  if (input_grads)
    for (const GraphInput& in : graph.inputs) requires_grad_[in.value] = graph.values[in.value].type.dtype == DType::float32;
  home_slot_.assign(n_values, -1);

  std::map<std::pair<int, int>, int> slot_of;  // (value, device) -> slot
  auto new_slot = [&](int value, int device) {
    bool fresh = slot_of.emplace(std::make_pair(value, device), static_cast<int>(slot_keys_.size())).second;
    TANDEM_ASSERT(fresh, "value '" + graph.values[value].name + "' arrives twice on " + devices_[device]->device.str());
    slot_keys_.emplace_back(value, device);
    return static_cast<int>(slot_keys_.size()) - 1;
  };
  auto find_slot = [&](int value, int device, const std::string& reader) {
    auto it = slot_of.find({value, device});
    TANDEM_ASSERT(it != slot_of.end(), reader + " reads '" + graph.values[value].name + "' on " +
                                           devices_[device]->device.str() + ", where the plan never puts it");
    return it->second;
  };
  for (const GraphInput& in : graph.inputs) home_slot_[in.value] = new_slot(in.value, 0);

  const int end = static_cast<int>(plan_.steps.size());
  step_action_.assign(plan_.steps.size(), -1);
  copies_after_backward_.resize(plan_.steps.size());
  size_t next_copy = 0;
  for (int i = 0; i < end; ++i) {
    // forward copies before step i (those after the last step, outputs and the loss's target,
    // are not needed: backward reads nothing on the cpu, and loss() copies the target)
    for (; next_copy < plan_.copies.size() && plan_.copies[next_copy].forward && plan_.copies[next_copy].before_step == i;
         ++next_copy) {
      const CopyStep& c = plan_.copies[next_copy];
      Action a;
      a.kind = Action::Kind::copy;
      a.from_device = device_index(c.from);
      a.device = device_index(c.to);
      a.context = layer_context(graph.nodes[plan_.steps[i].node]);
      a.src_slot = find_slot(c.value, a.from_device, "the copy to " + c.to.str());
      a.dst_slot = new_slot(c.value, a.device);
      copies_after_backward_[i].push_back(static_cast<int>(actions_.size()));
      actions_.push_back(std::move(a));
    }
    const OpStep& s = plan_.steps[i];
    const Node& node = graph.nodes[s.node];
    Action a;
    a.step = i;
    a.node = &node;
    a.device = device_index(s.device);
    a.context = layer_context(node);
    bool needs = any_trainable(node.params);
    for (int v : node.inputs) needs = needs || requires_grad_[v];
    requires_grad_[node.output] = needs && graph.values[node.output].type.dtype == DType::float32;
    for (const ParamSpec& p : node.params) {
      // A training forward updates buffers in place; on a GPU that would be its copy, which
      // nothing brings back to the host yet: refuse rather than lose the update silently.
      if (!p.trainable && s.device != Device::cpu())
        throw UserError(a.context + ": its buffer '" + p.name + "' (running statistics) cannot be trained on " +
                        s.device.str() + " yet; place this layer on the cpu (device: cpu)");
      a.params.push_back(cache_.weight(p.name, s.device, a.context));
      a.param_grads.push_back(p.trainable ? cache_.gradient(p.name, s.device, a.context) : Tensor());
      if (s.device != Device::cpu() && p.trainable) {
        std::pair<std::string, Device> key{p.name, s.device};
        if (std::find(gpu_param_keys_.begin(), gpu_param_keys_.end(), key) == gpu_param_keys_.end())
          gpu_param_keys_.push_back(key);
      }
    }
    for (int v : node.inputs) a.in_slots.push_back(find_slot(v, a.device, a.context));
    a.out_slot = new_slot(node.output, a.device);
    home_slot_[node.output] = a.out_slot;
    if (!node.schema->is_view) a.kernel = make_cpu_kernel(*devices_[a.device]->context, graph, node, shapes_, a.params);
    step_action_[i] = static_cast<int>(actions_.size());
    actions_.push_back(std::move(a));
  }
  // the gradients go back in the reverse order of the copies
  for (auto& copies : copies_after_backward_) std::reverse(copies.begin(), copies.end());

  // Release after the last forward reader what no backward reads.
  const size_t n_slots = slot_keys_.size();
  std::vector<bool> read_in_backward(n_slots, false);
  for (int v : kept)
    if (home_slot_[v] >= 0) read_in_backward[home_slot_[v]] = true;
  for (const GraphOutput& out : graph.outputs)
    if (home_slot_[out.value] >= 0) read_in_backward[home_slot_[out.value]] = true;
  std::vector<int> last_reader(n_slots, -1);
  for (size_t i = 0; i < actions_.size(); ++i) {
    const Action& a = actions_[i];
    if (a.kind == Action::Kind::copy) {
      last_reader[a.src_slot] = static_cast<int>(i);
      last_reader[a.dst_slot] = static_cast<int>(i);
      continue;
    }
    last_reader[a.out_slot] = static_cast<int>(i);
    for (size_t k = 0; k < a.in_slots.size(); ++k) {
      last_reader[a.in_slots[k]] = static_cast<int>(i);
      if (a.kernel && a.kernel->backward_reads_input(k)) read_in_backward[a.in_slots[k]] = true;
    }
    if (a.kernel && a.kernel->backward_reads_output()) read_in_backward[a.out_slot] = true;
  }
  release_after_forward_.resize(actions_.size());
  for (size_t s = 0; s < n_slots; ++s)
    if (!read_in_backward[s] && last_reader[s] >= 0) release_after_forward_[last_reader[s]].push_back(static_cast<int>(s));

  values_.resize(n_slots);
  grads_.resize(n_slots);
  grad_ready_.assign(n_slots, false);
}

MultiDeviceTraining::~MultiDeviceTraining() { clear(); }

void MultiDeviceTraining::clear() noexcept {
  for (const auto& d : devices_) {
    if (!d->gpu) continue;
    try {
      d->gpu->synchronize();
    } catch (...) {  // already reported by the call that failed
    }
  }
  for (Tensor& t : values_) t = Tensor();
  for (Tensor& t : grads_) t = Tensor();
}

int64_t MultiDeviceTraining::primitives_created() const {
  int64_t n = 0;
  for (const auto& d : devices_)
    if (d->own_context) n += d->own_context->primitives_created();
  return n;
}

template <typename F>
void MultiDeviceTraining::on_device(int device, F&& work) {
  DeviceState& dev = *devices_[device];
  if (!dev.gpu) {
    auto start = std::chrono::steady_clock::now();
    work();
    dev.cpu_busy_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return;
  }
  dev.gpu->submit([&work] { work(); });
  dev.gpu->synchronize();  // rethrows the task's error
}

void MultiDeviceTraining::add_on_device(int device, Tensor& into, const Tensor& from) {
  on_device(device, [&] { add_into(into, from); });
}

Tensor MultiDeviceTraining::copy_between(const Tensor& src, int from, int to, const std::string& context) {
  DeviceState& f = *devices_[from];
  DeviceState& t = *devices_[to];
  Tensor dst = allocate(src.shape(), src.dtype(), *t.allocator, context);
  size_t bytes = src.nbytes();
  if (!f.gpu) {
    TANDEM_ASSERT(t.gpu, "a copy from the cpu to the cpu");
    t.gpu->copy_from_host(buffer_of(dst), buffer_of(src), bytes);
    t.gpu->synchronize();
    f.bytes_out += bytes;
    ++f.copies_out;
  } else if (!t.gpu) {
    f.gpu->copy_to_host(buffer_of(dst), buffer_of(src), bytes);
    f.gpu->synchronize();
    t.bytes_in += bytes;
    ++t.copies_in;
  } else {
    f.gpu->copy_peer(*t.gpu, buffer_of(dst), buffer_of(src), bytes);
    f.gpu->synchronize();
  }
  return dst;
}

void MultiDeviceTraining::forward(const std::vector<Tensor>& inputs, uint64_t seed, uint64_t params_version,
                                  bool training) {
  cache_.refresh(params_version);
  for (const auto& d : devices_) {
    d->allocator->reset_peak();
    d->before = d->gpu ? d->gpu->stats() : QueueStats{};
    d->cpu_busy_seconds = 0;
    d->bytes_in = d->bytes_out = 0;
    d->copies_in = d->copies_out = 0;
  }
  seed_ = seed;
  training_ = training;
  params_version_ = params_version;
  try {
    for (Tensor& t : values_) t = Tensor();
    for (size_t i = 0; i < graph_.inputs.size(); ++i) values_[home_slot_[graph_.inputs[i].value]] = inputs[i];
    std::vector<Tensor> args_in;
    for (size_t i = 0; i < actions_.size(); ++i) {
      Action& a = actions_[i];
      if (a.kind == Action::Kind::copy) {
        values_[a.dst_slot] = copy_between(values_[a.src_slot], a.from_device, a.device, a.context);
      } else if (!a.kernel) {
        values_[a.out_slot] = values_[a.in_slots[0]].view(shapes_[a.node->output]);
      } else {
        const Node& node = *a.node;
        args_in.clear();
        for (int s : a.in_slots) args_in.push_back(values_[s]);
        values_[a.out_slot] = allocate(shapes_[node.output], graph_.values[node.output].type.dtype,
                                       *devices_[a.device]->allocator, a.context);
        KernelArgs args{args_in, a.params, {&values_[a.out_slot], 1}, training,
                        seed * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(a.step), params_version};
        on_device(a.device, [&] {
          try {
            a.kernel->forward(args);
          } catch (const OutOfMemory& e) {
            throw e.in(a.context);
          } catch (const UserError& e) {
            throw UserError(a.context + ": " + e.what());
          }
        });
      }
      for (int s : release_after_forward_[i]) values_[s] = Tensor();
    }
  } catch (...) {
    clear();
    throw;
  }
  finish_report();
}

LossValue MultiDeviceTraining::loss(const LossSpec& spec, const Tensor& target, bool with_gradient) {
  const int slot = home_slot_[spec.input];
  TANDEM_ASSERT(slot >= 0, "the loss's input is not produced");
  const int device = slot_keys_[slot].second;
  const std::string context = "the loss (" + spec.op + ")";
  Tensor on_device_target = device == 0 ? target : copy_between(target, 0, device, context);
  Tensor* grad = nullptr;
  if (with_gradient) {
    TANDEM_ASSERT(requires_grad_[spec.input], "the loss's input has no gradient");
    grads_[slot] = allocate(shapes_[spec.input], DType::float32, *devices_[device]->allocator, context);
    grad = &grads_[slot];
  }
  LossValue value;
  on_device(device, [&] { value = compute_loss(spec, values_[slot], on_device_target, grad); });
  finish_report();
  return value;
}

void MultiDeviceTraining::seed_gradient(int value, const Tensor& grad) {
  const int slot = home_slot_[value];
  TANDEM_ASSERT(slot >= 0 && requires_grad_[value], "tensor '" + graph_.values[value].name + "' has no gradient");
  const int device = slot_keys_[slot].second;
  if (device == 0) {
    grads_[slot] = Tensor::empty(shapes_[value], DType::float32);
    std::memcpy(grads_[slot].raw_data(), grad.raw_data(), grads_[slot].nbytes());
  } else {
    grads_[slot] = copy_between(grad, 0, device, "the gradient of '" + graph_.values[value].name + "'");
  }
}

void MultiDeviceTraining::backward(const std::vector<int>& seeded) {
  std::fill(grad_ready_.begin(), grad_ready_.end(), false);
  for (int v : seeded) grad_ready_[home_slot_[v]] = true;
  for (size_t s = 0; s < grads_.size(); ++s)
    if (!grad_ready_[s]) grads_[s] = Tensor();
  try {
    cache_.zero_gradients(gpu_param_keys_);
    std::vector<Tensor> in_values, grad_inputs;
    for (size_t i = plan_.steps.size(); i-- > 0;) {
      Action& a = actions_[step_action_[i]];
      const Node& node = *a.node;
      const int out = a.out_slot;
      Allocator& allocator = *devices_[a.device]->allocator;
      if (!requires_grad_[node.output] || !grad_ready_[out]) {
        values_[out] = Tensor();
      } else if (!a.kernel) {  // a view: the gradient is the output's, reshaped
        int in = a.in_slots[0];
        if (requires_grad_[slot_keys_[in].first]) {
          Tensor g = grads_[out].view(shapes_[slot_keys_[in].first]);
          if (grad_ready_[in]) add_on_device(a.device, grads_[in], g);
          else grads_[in] = g;
          grad_ready_[in] = true;
        }
        grads_[out] = Tensor();
        values_[out] = Tensor();
      } else {
        in_values.clear();
        grad_inputs.assign(a.in_slots.size(), Tensor());
        std::vector<bool> written_now(a.in_slots.size(), false);
        for (size_t k = 0; k < a.in_slots.size(); ++k) {
          int s = a.in_slots[k];
          int v = slot_keys_[s].first;
          in_values.push_back(values_[s]);
          if (!requires_grad_[v]) continue;
          bool taken = grad_ready_[s];
          for (size_t j = 0; j < k; ++j) taken = taken || (written_now[j] && a.in_slots[j] == s);
          if (taken) {
            grad_inputs[k] = allocate(shapes_[v], DType::float32, allocator, a.context);
          } else {
            grads_[s] = allocate(shapes_[v], DType::float32, allocator, a.context);
            grad_inputs[k] = grads_[s];
            written_now[k] = true;
          }
        }
        BackwardArgs args{in_values, a.params, {&values_[out], 1}, {&grads_[out], 1}, grad_inputs, a.param_grads,
                          training_, seed_ * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(a.step),
                          params_version_};
        on_device(a.device, [&] {
          try {
            a.kernel->backward(args);
          } catch (const OutOfMemory& e) {
            throw e.in(a.context + " backward");
          } catch (const UserError& e) {
            throw UserError(a.context + " backward: " + e.what());
          }
          for (size_t k = 0; k < a.in_slots.size(); ++k)
            if (grad_inputs[k].defined() && !written_now[k]) add_into(grads_[a.in_slots[k]], grad_inputs[k]);
        });
        for (size_t k = 0; k < a.in_slots.size(); ++k)
          if (grad_inputs[k].defined()) grad_ready_[a.in_slots[k]] = true;
        grads_[out] = Tensor();
        values_[out] = Tensor();
      }
      // every reader of these copies has run its backward: their gradients go back
      for (int c : copies_after_backward_[i]) {
        const Action& copy = actions_[c];
        const int dst = copy.dst_slot, src = copy.src_slot;
        if (requires_grad_[slot_keys_[dst].first] && grad_ready_[dst]) {
          Tensor g = copy_between(grads_[dst], copy.device, copy.from_device,
                                  "the gradient of '" + graph_.values[slot_keys_[dst].first].name + "'");
          if (grad_ready_[src]) add_on_device(copy.from_device, grads_[src], g);
          else grads_[src] = std::move(g);
          grad_ready_[src] = true;
        }
        grads_[dst] = Tensor();
        values_[dst] = Tensor();
      }
    }
    cache_.add_gradients_to_host(gpu_param_keys_);
  } catch (...) {
    clear();
    throw;
  }
  for (Tensor& t : values_) t = Tensor();
  for (size_t s = 0; s < grads_.size(); ++s)  // keep the graph inputs' gradients only
    if (slot_keys_[s].second != 0 || graph_.values[slot_keys_[s].first].producer >= 0) grads_[s] = Tensor();
  finish_report();
}

Tensor MultiDeviceTraining::input_gradient(size_t index) const {
  int v = graph_.inputs.at(index).value;
  if (!requires_grad_[v]) return Tensor();
  int s = home_slot_[v];
  if (!grad_ready_[s]) return Tensor::zeros(shapes_[v], DType::float32);
  return grads_[s];
}

void MultiDeviceTraining::finish_report() {
  report_.clear();
  for (const auto& d : devices_) {
    DeviceReport r;
    r.device = d->device;
    r.peak_bytes = d->allocator->peak_bytes();
    r.current_bytes = d->allocator->current_bytes();
    if (d->gpu) {
      QueueStats now = d->gpu->stats();
      r.busy_seconds = now.busy_seconds - d->before.busy_seconds;
      r.bytes_in = now.bytes_in - d->before.bytes_in;
      r.bytes_out = now.bytes_out - d->before.bytes_out;
      r.copies_in = static_cast<int64_t>(now.copies_in - d->before.copies_in);
      r.copies_out = static_cast<int64_t>(now.copies_out - d->before.copies_out);
    } else {
      r.busy_seconds = d->cpu_busy_seconds;
      r.bytes_in = d->bytes_in;
      r.bytes_out = d->bytes_out;
      r.copies_in = d->copies_in;
      r.copies_out = d->copies_out;
    }
    report_.push_back(r);
  }
}

}  // namespace tandem
