// Model's passes and the devices they run on: forward(), backward(), loss_and_backward()
// and evaluate_loss() written once, over a plan on the cpu alone (its kernels on the
// calling thread) or placed over the cpu and GPUs (use_devices, to(), a model file that
// names GPUs). Either way the same two executors run them (runtime/exec/).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "graph/batch_dim.h"
#include "graph/loss_reach.h"
#include "runtime/devices/backend_capabilities.h"
#include "runtime/devices/device_registry.h"
#include "runtime/exec/forward_executor.h"
#include "runtime/exec/pipeline.h"
#include "runtime/exec/training_executor.h"
#include "runtime/micro_batches.h"
#include "runtime/model.h"
#include "runtime/params/parameter_devices.h"

namespace tandem {

namespace {

/// Whether the model file asks for GPUs anywhere: a layer or block on one, a data_parallel
/// block, or a placement: policy that fills GPUs.
bool names_gpus(const Graph& g) {
  for (const Node& n : g.nodes)
    if (n.device && n.device->kind == DeviceKind::cuda) return true;
  for (const Block& b : g.blocks)
    if ((b.device && b.device->kind == DeviceKind::cuda) || b.data_parallel) return true;
  return g.placement && g.placement->policy != "annotations";
}

}  // namespace

// ---- the devices passes run on ------------------------------------------------------------

PlacementPolicy Model::policy_of_model_file() const {
  PlacementPolicy policy;
  if (graph_->placement) apply_placement_spec(*graph_->placement, policy);
  return policy;
}

bool Model::runs_placed() {
  if (!placed() && !on_cpu_only_ && names_gpus(*graph_))
    use_devices(std::make_shared<DeviceRegistry>(), policy_of_model_file());
  return placed();
}

DeviceRegistry& Model::pass_devices() {
  if (runs_placed()) return *registry_;
  if (!cpu_alone_) cpu_alone_ = DeviceRegistry::cpu_alone();
  if (!device_params_) device_params_ = std::make_unique<DeviceParameterCache>(params_, grads_, grad_rows_, *cpu_alone_);
  return *cpu_alone_;
}

Allocator& Model::batch_memory() {
  if (!runs_placed() || !registry_->has(Device::cuda(0))) return cpu_allocator();
  return registry_->backend(Device::cuda(0)).host_allocator();
}

void Model::leave_devices() {
  sync_parameters();  // masters on GPUs come home before the GPUs go
  if (parameter_devices_) parameter_devices_->sync_state_to_host();
  last_pass_ = nullptr;
  ahead_ = nullptr;
  step_pass_ = 0;
  passes_.clear();  // compiled for the old devices: drain their lanes while they exist
  parameter_devices_.reset();
  device_params_.reset();
  device_totals_.clear();
  registry_.reset();
}

void Model::sync_parameters() const {
  if (device_params_) device_params_->sync_to_host();
}

std::vector<Tensor> Model::held_gradients(const std::string& name) const {
  std::vector<Tensor> out;
  if (device_params_ && device_params_->held(name))
    for (const DeviceParameterCache::Replica& r : device_params_->replicas(name)) out.push_back(r.grad);
  return out;
}

void Model::parameters_changed() {
  ++params_version_;
  // the bf16 copies the update rewrote hold the new version (Note [a weight's bf16 copy])
  for (const auto& [name, p] : params_)
    if (Bf16Copy* copy = p.bf16_copy()) copy->version_bumped(params_version_);
  if (device_params_) device_params_->masters_updated();
}

ParameterDevices& Model::parameter_devices() {
  return parameter_devices_ ? *parameter_devices_ : host_parameter_devices();
}

void Model::to(Device device) {
  if (device == Device::cpu()) {
    leave_devices();
    on_cpu_only_ = true;
    return;
  }
  PlacementPolicy policy = policy_of_model_file();
  policy.place_overrides = {{"*", device}};
  use_devices(std::make_shared<DeviceRegistry>(), std::move(policy));
}

Plan Model::plan_for(const Bindings& bindings, bool training) {
  if (!runs_placed()) return plan_;
  PlacementPolicy policy = policy_;
  policy.training = training;
  policy.bindings = bindings;
  if (auto batch = bindings.find("batch"); batch != bindings.end()) policy.batch = batch->second;
  return place(*graph_, registry_->inventory(), policy);
}

void Model::use_devices(std::shared_ptr<DeviceRegistry> registry, PlacementPolicy policy) {
  TANDEM_ASSERT(registry != nullptr, "use_devices without a registry");
  on_cpu_only_ = false;
  leave_devices();
  registry_ = std::move(registry);
  device_params_ = std::make_unique<DeviceParameterCache>(params_, grads_, grad_rows_, *registry_);
  parameter_devices_ = std::make_unique<PlacedParameterDevices>(*registry_, *device_params_);
  policy_ = std::move(policy);
  policy_.training = false;
  ask_backends(policy_, *registry_);  // a layer a GPU cannot run is planned on the cpu
}

// ---- passes -------------------------------------------------------------------------------

Model::Pass& Model::pass_for(const PassKey& asked) {
  PassKey key = asked;
  key.regions = !key.training && inference_regions_ && !forward_hook_;
  DeviceRegistry& devices = pass_devices();
  auto it = passes_.find(key);
  if (it == passes_.end()) {
    Plan plan = plan_for(key.bindings, key.training);
    Pass pass;
    if (key.training) {
      allocate_gradients();  // the executor binds them
      std::vector<int> kept;
      if (graph_->loss) kept.push_back(graph_->loss->input);
      pass.training = std::make_unique<TrainingExecutor>(*graph_, plan, key.bindings, *device_params_, devices,
                                                         key.input_grads, kept, /*hold_parameters=*/!masters_on_host_);
    } else {
      pass.inference =
          std::make_unique<ForwardExecutor>(*graph_, plan, key.bindings, *device_params_, devices, params_version_,
                                            key.regions);
    }
    it = passes_.emplace(key, std::move(pass)).first;
  }
  last_pass_ = &it->second;
  pipelined_report_.clear();
  return it->second;
}

std::vector<Tensor> Model::ordered_inputs(const TensorMap& tensors) const {
  std::vector<Tensor> ordered;
  for (const GraphInput& in : graph_->inputs) ordered.push_back(tensors.at(in.name));
  return ordered;
}

TensorMap Model::forward(const TensorMap& inputs) {
  ForwardExecutor& pass = *pass_for({bind(inputs), false, false}).inference;
  std::vector<Tensor> outputs = pass.run(ordered_inputs(inputs), params_version_, &forward_hook_);
  add_to_totals(device_totals_, pass.report());
  TensorMap named;
  for (size_t i = 0; i < outputs.size(); ++i) named.emplace(graph_->outputs[i].name, std::move(outputs[i]));
  return named;
}

TensorMap Model::forward_batches(const TensorMap& inputs, int64_t batch_size) {
  if (batch_size < 1) throw UserError("the batch size must be at least 1, got " + std::to_string(batch_size));
  std::vector<int> dims;  // each output's batch dimension, where the batches join
  for (const GraphOutput& out : graph_->outputs) {
    const std::optional<int> dim = batch_dim_of(graph_->values[out.value].type.shape);
    if (!dim)
      throw UserError("output '" + out.name + "' of model '" + graph_->name +
                      "' has no batch dimension to join batches along: run the inputs as one batch");
    dims.push_back(*dim);
  }
  bind(inputs);  // names, dtypes and shapes checked on the whole before it is cut
  const std::vector<TensorMap> batches = split_batches(inputs, batch_size, *graph_);
  std::vector<std::vector<Tensor>> outputs(batches.size());
  std::vector<DeviceReport> report;
  // Placed, two executors take turns so that one can be submitted while the other runs; on
  // the cpu alone a pass runs as it is submitted (its lane is the calling thread).
  const bool overlap = placed();
  ForwardExecutor* in_flight = nullptr;
  size_t in_flight_index = 0;
  auto collect = [&] {
    ForwardExecutor* pass = std::exchange(in_flight, nullptr);
    outputs[in_flight_index] = pass->collect();
    add_to_totals(report, pass->report());
  };
  try {
    for (size_t k = 0; k < batches.size(); ++k) {
      ForwardExecutor& pass = *pass_for({bind(batches[k]), false, false, overlap ? static_cast<int>(k % 2) : 0}).inference;
      pass.submit(ordered_inputs(batches[k]), params_version_, &forward_hook_);
      if (in_flight) {
        collect();
        pass.restart_report();  // the reports tile the stream: this one counts from here
      }
      in_flight = &pass;
      in_flight_index = k;
      if (!overlap) collect();
    }
    if (in_flight) collect();
  } catch (...) {
    if (in_flight) try {
        in_flight->collect();  // nothing of it stays (a failed submit drained every lane)
      } catch (...) {
      }
    throw;
  }
  add_to_totals(device_totals_, report);
  TensorMap named;
  for (size_t i = 0; i < graph_->outputs.size(); ++i) {
    std::vector<Tensor> parts;
    for (std::vector<Tensor>& batch : outputs) parts.push_back(std::move(batch[i]));
    named.emplace(graph_->outputs[i].name, join_batches(parts, dims[i]));
  }
  pipelined_report_ = std::move(report);
  return named;
}

TensorMap Model::backward(const TensorMap& inputs, const TensorMap& grad_outputs, bool training, uint64_t seed) {
  Bindings bindings = bind(inputs);
  for (const auto& [name, g] : grad_outputs)
    if (std::none_of(graph_->outputs.begin(), graph_->outputs.end(), [&n = name](const GraphOutput& o) { return o.name == n; }))
      throw UserError("model '" + graph_->name + "' has no output '" + name + "'");
  TrainingExecutor& t = *pass_for({bindings, true, true}).training;
  TrainingExecutor::ReleaseOnError release(t);  // a gradient refused below: the activations go back
  t.forward(ordered_inputs(inputs), seed, params_version_, training);
  std::vector<int> seeded;
  for (const GraphOutput& out : graph_->outputs) {
    auto it = grad_outputs.find(out.name);
    if (it == grad_outputs.end()) continue;
    if (graph_->values[out.value].type.dtype != DType::float32)
      throw UserError("output '" + out.name + "' is int64 and has no gradient");
    const Shape& shape = t.shape(out.value);
    if (it->second.shape() != shape || it->second.dtype() != DType::float32 || it->second.device() != Device::cpu())
      throw UserError("the gradient of output '" + out.name + "' must be float32 " + shape_str(shape) + " on the cpu, got " +
                      shape_str(it->second.shape()));
    TANDEM_ASSERT(t.requires_grad(out.value), "tensor '" + out.name + "' has no gradient");
    t.seed_gradient(out.value, it->second);
    seeded.push_back(out.value);
  }
  t.backward(seeded);
  add_to_totals(device_totals_, t.report());
  TensorMap input_grads;
  for (size_t i = 0; i < graph_->inputs.size(); ++i)
    if (Tensor g = t.input_gradient(i); g.defined()) input_grads.emplace(graph_->inputs[i].name, std::move(g));
  return input_grads;
}

LossValue Model::loss_and_backward(const TensorMap& batch, uint64_t seed, const GradientReady* ready, float loss_scale,
                                   const NextBatch& next, const TableUpdates* tables) {
  if (runs_placed()) {
    // Several devices: submitted as a pipelined step of one micro-batch, so that the host
    // waits for the lanes once, at the end, not after forward and again after the loss
    // (each wait leaves a GPU idle while the host submits what comes next). The same
    // kernels on the same values: the same bits.
    // It makes the checks and binds the batch itself.
    std::vector<MicroBatch> whole{MicroBatch{batch, 1.0}};
    return pipelined_loss_and_backward(whole, {seed}, ready, loss_scale, next, tables);
  }
  if (!graph_->loss) throw UserError("model '" + graph_->name + "' has no loss: add a loss: section to train it");
  check_loss_reaches_parameters(*graph_);  // else the loss's input has no gradient to seed
  Bindings bindings = bind_batch(batch);
  const LossSpec& loss = *graph_->loss;
  if (graph_->values[loss.input].producer < 0)
    throw UserError("the loss scores graph input '" + graph_->values[loss.input].name + "': nothing to train");
  TrainingExecutor& t = *pass_for({bindings, true, false}).training;
  TrainingExecutor::ReleaseOnError release(t);  // out of memory anywhere in the step: nothing stays
  t.forward(ordered_inputs(batch), seed, params_version_);
  LossValue value = t.loss(loss, batch.at(graph_->values[loss.target].name), /*with_gradient=*/true);
  if (loss_scale != 1.0f) t.scale_loss_gradients(loss_scale);
  // names each gradient as backward completes it; a loss that is not finite updates nothing
  t.backward(t.loss_seeds(), ready, std::isfinite(value.loss) ? tables : nullptr);
  add_to_totals(device_totals_, t.report());
  return value;
}

LossValue Model::pipelined_loss_and_backward(const std::vector<MicroBatch>& parts, const std::vector<uint64_t>& seeds,
                                             const GradientReady* ready, float loss_scale, const NextBatch& next,
                                             const TableUpdates* tables) {
  if (!graph_->loss) throw UserError("model '" + graph_->name + "' has no loss: add a loss: section to train it");
  check_loss_reaches_parameters(*graph_);
  TANDEM_ASSERT(!parts.empty() && seeds.size() == parts.size(), "a pipelined step without micro-batches");
  const LossSpec& loss = *graph_->loss;
  if (graph_->values[loss.input].producer < 0)
    throw UserError("the loss scores graph input '" + graph_->values[loss.input].name + "': nothing to train");
  // A whole batch runs on pass step_pass_, where the last step may have submitted its work
  // ahead (the executor takes it up if it is this batch's); micro-batch k on pass k.
  const bool whole = parts.size() == 1;
  if (!whole) drop_ahead();
  const int first_pass = whole ? step_pass_ : 0;
  std::vector<PipelinedMicroBatch> micro;
  for (size_t k = 0; k < parts.size(); ++k) {
    const TensorMap& batch = parts[k].batch;
    PipelinedMicroBatch& m = micro.emplace_back();
    m.executor = pass_for({bind_batch(batch), true, false, first_pass + static_cast<int>(k)}).training.get();
    m.inputs = ordered_inputs(batch);
    m.target = batch.at(graph_->values[loss.target].name);
    m.seed = seeds[k];
    m.weight = parts[k].weight;
  }
  if (ahead_) {
    if (ahead_ == micro.front().executor && ahead_->ahead_for(micro.front().inputs, params_version_))
      ++steps_looked_ahead_;  // this forward takes it up
    else
      ahead_->drop_ahead();  // another batch, or changes since that were not looked up again
    ahead_ = nullptr;
  }
  // the next batch on the other pass, while this step's backward runs
  const int next_pass = 1 - first_pass;
  std::function<void()> meanwhile;
  if (whole && next.batch && next.tables && placed())  // on the cpu alone nothing runs meanwhile
    meanwhile = [this, &next, next_pass] {
      if (look_ahead(next, next_pass)) step_pass_ = next_pass;
    };
  const Pass* this_pass = last_pass_;
  std::vector<DeviceReport> report;
  LossValue value;
  try {
    value = run_pipelined_step(micro, loss, params_version_, ready, loss_scale, report, meanwhile, tables);
  } catch (...) {
    drop_ahead();
    throw;
  }
  add_to_totals(device_totals_, report);
  pipelined_report_ = std::move(report);
  last_pass_ = this_pass;  // not the next batch's
  return value;
}

bool Model::look_ahead(const NextBatch& next, int pass) {
  Bindings bindings;
  try {
    bindings = bind_batch(*next.batch);  // a batch that does not fit is refused at its own step
  } catch (const UserError&) {
    return false;
  }
  TrainingExecutor& t = *pass_for({bindings, true, false, pass}).training;
  if (!t.look_ahead(ordered_inputs(*next.batch), *next.tables, params_version_)) return false;
  ahead_ = &t;
  ahead_version_ = params_version_;
  return true;
}

void Model::look_up_changed_rows() {
  if (!ahead_) return;
  if (params_version_ != ahead_version_ + 1) {  // not one update since: what changed is unknown
    drop_ahead();
    return;
  }
  ahead_->look_up_again(
      [this](const std::string& name) -> const TouchedRows* {
        auto it = grad_rows_.find(name);
        return it == grad_rows_.end() ? nullptr : &it->second;
      },
      params_version_);
}

void Model::drop_ahead() noexcept {
  if (ahead_) ahead_->drop_ahead();
  ahead_ = nullptr;
}

LossValue Model::evaluate_loss(const TensorMap& batch) {
  if (!graph_->loss) throw UserError("model '" + graph_->name + "' has no loss");
  bind_batch(batch);
  TensorMap inputs;  // the bindings the inputs alone imply: those of the training executor
  for (const GraphInput& in : graph_->inputs) inputs.emplace(in.name, batch.at(in.name));
  TrainingExecutor& t = *pass_for({bind(inputs), true, false}).training;
  t.forward(ordered_inputs(inputs), 0, params_version_, /*training=*/false);
  LossValue value = t.loss(*graph_->loss, batch.at(graph_->values[graph_->loss->target].name), /*with_gradient=*/false);
  add_to_totals(device_totals_, t.report());
  return value;
}

// ---- what the passes did ------------------------------------------------------------------

std::vector<DeviceReport> Model::device_report() const {
  if (!last_pass_) return {};
  if (!pipelined_report_.empty()) return pipelined_report_;
  return last_pass_->training ? last_pass_->training->report() : last_pass_->inference->report();
}

const Plan& Model::last_plan() const {
  if (!last_pass_) return plan_;
  return last_pass_->training ? last_pass_->training->plan() : last_pass_->inference->plan();
}

int64_t Model::primitives_created() const {
  return (cpu_alone_ ? cpu_alone_->preparations() : 0) + (registry_ ? registry_->preparations() : 0);
}

}  // namespace tandem
