// Model: the C++ API. Load a YAML model, set or initialise its weights, run forward on
// named tensors.
//
//   tandem::Model model = tandem::Model::load("configs/seed_mlp.yaml");
//   model.init_parameters(/*seed=*/0);           // or model.load_weights("w.safetensors")
//   tandem::TensorMap out = model.forward({{"x", x}});
//
// Errors a user can cause (bad file, wrong input shapes, bad weights) throw UserError.
// Not thread-safe: use one Model per thread.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>

#include "backends/compute_ops.h"
#include "backends/loss_value.h"
#include "core/touched_rows.h"
#include "graph/graph.h"
#include "graph/symbolic.h"
#include "placement/place.h"
#include "placement/plan.h"
#include "runtime/devices/device_report.h"
#include "runtime/forward_hook.h"
#include "runtime/exec/gradient_ready.h"
#include "runtime/exec/table_updates.h"

namespace tandem {

class DeviceParameterCache;
class DeviceRegistry;
class ForwardExecutor;
class ParameterDevices;
class PlacedParameterDevices;
class TrainingExecutor;
struct MicroBatch;

/// The next step's batch, which a placed step starts on while its own backward runs
/// (Note [the next batch ahead] in runtime/exec/training_executor.h): its uploads, and the
/// lookups on the cpu of the tables whose parameters `tables` names, those whose update
/// changes only the rows their gradient lists. After the update between the two steps,
/// Model::look_up_changed_rows() must follow parameters_changed() for them to be used.
struct NextBatch {
  const TensorMap* batch = nullptr;
  const std::set<std::string>* tables = nullptr;
};

class Model {
 public:
  /// What the parameters hold once a model is made: PyTorch's draws from seed 0, or
  /// nothing yet, for a caller that calls load_weights() or init_parameters() next (drawing
  /// a 2 GiB table only to overwrite it took seconds of a load).
  enum class Start { seeded, weights_follow };
  /// Loads and validates a YAML model; parameters are initialised from seed 0 unless
  /// `start` says weights follow.
  static Model load(const std::string& yaml_path, Start start = Start::seeded);
  explicit Model(Graph graph, Start start = Start::seeded);
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  const Graph& graph() const { return *graph_; }

  /// The model's precision (graph/precision.h), in place of its file's `precision:`:
  /// what `--precision` sets. Layers and blocks that declare their own keep it. Call it
  /// before the first pass: UserError afterwards, as compiled kernels would not follow.
  void set_precision(Precision precision);
  const Plan& plan() const { return plan_; }

  /// Parameters and buffers by state_dict name ("encoder.0.fc.weight", "bn.running_mean"),
  /// brought up to date first where placed training keeps a master on a GPU.
  const TensorMap& parameters() const;
  /// A buffer (running statistics: not trainable, so never held by GPUs) as the host has it,
  /// without bringing the parameters GPUs hold up to date as parameters() does: a placed
  /// training step leaves the host's buffers current.
  const Tensor& buffer(const std::string& name) const { return params_.at(name); }
  /// Draws every parameter from the distribution PyTorch uses for its module.
  void init_parameters(uint64_t seed);
  /// Copies `weights` into the parameters. Every parameter must be there with its shape
  /// and dtype; the UserError lists every missing, unknown, mis-shaped and mis-typed
  /// tensor (the first 20 of each, then a count).
  void set_weights(const TensorMap& weights, const std::string& source = "weights");
  /// set_weights from a safetensors file, memory-mapped. Names that all begin with
  /// nn.DataParallel's "module." are loaded without it when the model's names lack it;
  /// returns notes on such changes, for the user to see.
  std::vector<std::string> load_weights(const std::string& safetensors_path);
  void save_weights(const std::string& safetensors_path) const;

  /// The symbol values these inputs imply, after checking names, dtypes and shapes.
  Bindings bind(const TensorMap& inputs) const;
  /// Random inputs for `bindings` (float: N(0, 1); indices within the consuming table;
  /// offsets sorted from 0).
  TensorMap random_inputs(const Bindings& bindings, uint64_t seed) const;
  /// Inference: outputs by output name.
  TensorMap forward(const TensorMap& inputs);
  /// forward() over `inputs` cut into batches of `batch_size` samples (the last one
  /// shorter), the outputs concatenated along their batch dimension: the bits forward()
  /// gives batch by batch. Placed over devices, the next batch is submitted before this one
  /// is collected (two executors take turns), so the cpu's layers and uploads of batch k+1
  /// overlap a GPU's work on batch k. device_report() then covers every batch. UserError
  /// for a batch size under 1 or an output without a batch dimension.
  TensorMap forward_batches(const TensorMap& inputs, int64_t batch_size);

  // ---- training -------------------------------------------------------------------
  /// Gradients by parameter name (trainable ones only: buffers have none): zero until a
  /// backward, then accumulated by each one. Only backward writes them: the touched rows
  /// below must cover every non-zero row.
  /// A `sparse: true` table's gradient is not among them: it is kept as rows, in
  /// gradient_rows() (Note [row gradient]); gradient() gives any one dense. Allocated
  /// (zero) by the first call here or the first training pass: inference holds none.
  const TensorMap& gradients() const;
  /// The gradient of trainable parameter `name` as a dense tensor: a row gradient's rows
  /// spread into a new tensor the table's size (torch's to_dense()), else gradients()'s.
  Tensor gradient(const std::string& name) const;
  /// Per gradient, the rows a backward may have written since the last zero_gradients():
  /// an embedding table's lookups, or all of them (core/touched_rows.h). The trainer reads
  /// them to clip and update only those rows where that is exact.
  TouchedRowsMap& gradient_rows() {
    sync_parameters();  // a gradient GPUs hold comes to the host whole
    return grad_rows_;
  }
  /// Zeroes the touched rows of each gradient (all of a dense one), so that the cost of a
  /// step on a huge embedding table follows its lookups, not its size.
  void zero_gradients();
  /// Like torch's `outputs.backward(grad_outputs)`: a forward on `inputs` (in training
  /// mode unless `training` is false: then dropout is the identity, as after
  /// module.eval()), then gradients of every parameter (accumulated into gradients());
  /// returns the gradients of the float inputs by name.
  TensorMap backward(const TensorMap& inputs, const TensorMap& grad_outputs, bool training = true, uint64_t seed = 0);
  /// Forward in training mode, the model's loss against the batch's targets, backward:
  /// parameter gradients accumulate into gradients(). `batch` holds inputs and targets.
  /// With `ready`, each trainable parameter is named once its gradient in gradients() is
  /// complete (or, held by GPUs, among them): while backward goes on where the devices allow
  /// (runtime/exec/gradient_return.h).
  /// `loss_scale` multiplies the loss's gradient before backward, as torch's
  /// `(loss * scale).backward()`: fp16 loss scaling (runtime/optim/loss_scaler.h). The
  /// returned loss is unscaled.
  /// With `next` (NextBatch), the placed step starts on the next batch meanwhile. With
  /// `tables`, backward updates those tables as it completes their gradients (Note [a
  /// table updated in its backward] in runtime/exec/table_updates.h): none when the loss
  /// is not finite.
  LossValue loss_and_backward(const TensorMap& batch, uint64_t seed, const GradientReady* ready = nullptr,
                              float loss_scale = 1.0f, const NextBatch& next = {},
                              const TableUpdates* tables = nullptr);
  /// After the one update (parameters_changed()) that followed a loss_and_backward() given a
  /// next batch, made by an optimizer that changed only the rows each table's gradient lists
  /// (touched rows, still as backward left them): the next batch's lookups read those rows
  /// again, so the next step computes what it would have without looking ahead. Without
  /// it, or after other changes, that step looks its batch up anew.
  void look_up_changed_rows();
  /// How many steps took up work submitted ahead (NextBatch), since the model was placed.
  int64_t steps_looked_ahead() const { return steps_looked_ahead_; }
  /// loss_and_backward() of a batch cut into micro-batches (`parts`, each with its share of
  /// the batch's loss and its dropout seed in `seeds`), pipelined through the devices: every
  /// forward, then every loss, then every backward submitted before the host waits once
  /// (runtime/exec/pipeline.h). The gradients are the whole batch's, up to the order of the
  /// sums; the returned loss is the batch's. `ready` hears of the gradients during the last
  /// micro-batch's backward.
  LossValue pipelined_loss_and_backward(const std::vector<MicroBatch>& parts, const std::vector<uint64_t>& seeds,
                                        const GradientReady* ready = nullptr, float loss_scale = 1.0f,
                                        const NextBatch& next = {}, const TableUpdates* tables = nullptr);
  /// The loss of the batch in inference mode (no gradients).
  LossValue evaluate_loss(const TensorMap& batch);
  /// Parameters were updated in place (an optimizer step, through parameter_devices()):
  /// cached derived forms and copies on other devices go stale, except the bf16 copies the
  /// update itself rewrote (Note [a weight's bf16 copy] in core/bf16_copy.h), so call it
  /// right after the update. To write the host's tensors otherwise, use set_weights().
  void parameters_changed();
  /// What runs an optimizer's arithmetic for the parameters: the host, or, in placed
  /// training, the GPUs that hold a parameter only they run (Note [where a master lives]
  /// in runtime/params/device_parameter_cache.h). The optimizer is handed the host's tensors
  /// either way.
  ParameterDevices& parameter_devices();
  /// Checks `batch` against the inputs and targets; the symbol values it implies.
  Bindings bind_batch(const TensorMap& batch) const;
  /// Random targets for `bindings` (classes within the loss's range).
  TensorMap random_targets(const Bindings& bindings, uint64_t seed) const;

  /// How many oneDNN primitives were built so far (a repeated forward builds none).
  int64_t primitives_created() const;

  // ---- devices: where the layers run -------------------------------------------------
  // One rule: the layers run where the plan says. Without a call below, the plan is the
  // model file's: a model that names no GPU runs on the cpu (on the calling thread); one
  // that does (device:, data_parallel:, a placement: policy) is placed at its first pass on
  // this machine's devices, as use_devices(std::make_shared<DeviceRegistry>(), the file's
  // policy) would: real GPUs, or simulated ones when TANDEM_SIM_GPUS says so. A model that
  // names a device the machine lacks is refused (UserError naming the layer and the
  // device, offering simulated GPUs or the cpu).

  /// From now on forward() places the model with place(graph, registry's inventory,
  /// `policy`) (its batch and bindings those of each call) and runs the plan on the
  /// registry's devices; backward(), loss_and_backward() and evaluate_loss() run a training
  /// plan (policy.training) the same way. The executors are those of the cpu alone
  /// (runtime/exec/): only the plan and the devices differ.
  /// A layer a GPU's backend cannot run is planned on the cpu, with the reason in the plan.
  void use_devices(std::shared_ptr<DeviceRegistry> registry, PlacementPolicy policy);
  /// Every layer on `device`, whatever the model file declares, as torch's module.to():
  /// Device::cpu() is `--place '*=cpu'` and runs on the calling thread; a GPU is this
  /// machine's (or TANDEM_SIM_GPUS's simulated) cuda:N.
  void to(Device device);
  /// Placed training keeps every master on the host, its gradients summed there after each
  /// backward, rather than letting GPUs hold what only they run (Note [where a master
  /// lives]): what data parallelism over processes reduces. Before the first training step.
  void keep_masters_on_host() { masters_on_host_ = true; }
  /// The devices placed passes run on, placing the model first if its file names GPUs;
  /// null when it runs on the cpu alone.
  DeviceRegistry* device_registry() { return runs_placed() ? registry_.get() : nullptr; }
  /// The gradients of trainable parameter `name` on the GPUs that hold it (Note [where a
  /// master lives]), one per replica, the first accumulating; empty when its master is on
  /// the host.
  std::vector<Tensor> held_gradients(const std::string& name) const;
  /// Whether passes run placed (use_devices, to() a GPU, or a model that names GPUs once
  /// it has run).
  bool placed() const { return registry_ != nullptr; }
  /// Host memory that batches for this model are best gathered into: pinned memory when it
  /// runs on real GPUs (cuda:0's backend's host_allocator(); pinned memory serves every GPU),
  /// so that a batch goes up in one asynchronous transfer with no staging copy on the step's
  /// path, as torch's DataLoader(pin_memory=True) does when asked; the host's otherwise.
  Allocator& batch_memory();
  /// The plan a pass with `bindings` runs (training or inference), placing the model first
  /// if its file names GPUs: what a caller checks before work starts. UserError when the
  /// model names a device this machine lacks.
  Plan plan_for(const Bindings& bindings, bool training = false);
  /// Called after each layer of every forward() (inference) until replaced; an empty
  /// function removes it. See forward_hook.h.
  void set_forward_hook(ForwardHook hook) { forward_hook_ = std::move(hook); }
  /// Whether inference runs layers that a device fuses (a convolution with the batch norm,
  /// activation and residual add after it; runtime/exec/inference_regions.h) as one
  /// kernel: on by default. A forward with a hook runs layer by layer either way.
  void set_inference_regions(bool on) { inference_regions_ = on; }
  bool inference_regions() const { return inference_regions_; }
  /// Per device, what the last forward (or training step) did; empty before one.
  std::vector<DeviceReport> device_report() const;
  /// Per device, what every pass since use_devices() or the last reset did together
  /// (add_to_totals): what `tandem train --report` prints.
  const std::vector<DeviceReport>& device_totals() const { return device_totals_; }
  void reset_device_totals() { device_totals_.clear(); }
  /// The plan of the last forward or training step; plan() (all on the cpu) before one.
  const Plan& last_plan() const;

 private:
  /// What a pass needs: the symbol values, and a training executor (backward, losses) or an
  /// inference one; with input_grads, backward yields the float inputs' gradients too.
  struct PassKey {
    Bindings bindings;
    bool training = false;
    bool input_grads = false;
    /// A pipelined step's micro-batch k runs on executor k: each keeps its own activations.
    int micro_batch = 0;
    /// Inference: compiled with regions (pass_for sets it).
    bool regions = false;
    auto operator<=>(const PassKey&) const = default;
  };
  /// The executor of one PassKey: one of the two.
  struct Pass {
    std::unique_ptr<ForwardExecutor> inference;
    std::unique_ptr<TrainingExecutor> training;
  };
  /// The executor for `key`, compiled on first need for the devices passes run on.
  Pass& pass_for(const PassKey& key);
  /// The devices passes run on: the registry the model is placed on (runs_placed()), else
  /// the cpu alone, its kernels on the calling thread. Makes the parameter cache for them.
  DeviceRegistry& pass_devices();
  Bindings bind_declared(const TensorMap& tensors, const std::vector<GraphInput>& declared, bool allow_extra) const;
  /// The graph inputs of `tensors`, in graph-input order.
  std::vector<Tensor> ordered_inputs(const TensorMap& tensors) const;
  /// Places the model as its file declares if it names GPUs and nothing else was asked
  /// for (see above); whether passes run placed.
  bool runs_placed();
  PlacementPolicy policy_of_model_file() const;
  /// The host's tensors brought up to date from masters on GPUs, before the host reads them.
  void sync_parameters() const;
  /// Moves every master back to the host and forgets the executors before the devices
  /// passes run on change.
  void leave_devices();
  void allocate_gradients() const;

  // On the heap so that its address survives moving the Model: executors refer to it.
  std::unique_ptr<const Graph> graph_;
  Plan plan_;
  TensorMap params_;
  uint64_t params_version_ = 0;
  // Dense gradients, made on first need (allocate_gradients): mutable, as gradients()
  // hands out zeros it may have to make.
  mutable TensorMap grads_;
  mutable bool gradients_allocated_ = false;
  TouchedRowsMap grad_rows_;  // every trainable parameter: its touched rows (a row gradient's values)
  // where passes run (model_devices.cpp)
  bool on_cpu_only_ = false;  // to(cpu): annotations overridden
  std::shared_ptr<DeviceRegistry> registry_;   // placed: use_devices(), to() a GPU, the file's GPUs
  std::shared_ptr<DeviceRegistry> cpu_alone_;  // otherwise: the cpu on the calling thread
  PlacementPolicy policy_;
  std::unique_ptr<DeviceParameterCache> device_params_;  // for the devices passes run on: before the executors
  std::unique_ptr<PlacedParameterDevices> parameter_devices_;  // the devices' optimizer arithmetic, when placed
  bool masters_on_host_ = false;
  std::map<PassKey, Pass> passes_;
  const Pass* last_pass_ = nullptr;
  /// What the devices did in the last pass when it was a pipelined step (its micro-batches'
  /// executors together); empty otherwise.
  /// The report of the last call that ran several executors (a pipelined step, batches).
  std::vector<DeviceReport> pipelined_report_;
  std::vector<DeviceReport> device_totals_;
  ForwardHook forward_hook_;
  bool inference_regions_ = true;
  // The next batch ahead (NextBatch): whole-batch steps alternate between two executors,
  // passes 0 and 1, so that one takes the next batch while the other's step runs.
  int step_pass_ = 0;                          // the pass the next whole-batch step runs on
  TrainingExecutor* ahead_ = nullptr;          // the executor holding the next batch's work, if any
  uint64_t ahead_version_ = 0;                 // params_version_ when it was submitted
  int64_t steps_looked_ahead_ = 0;
  /// Submits `next`'s work ahead on the executor of pass `pass`; whether it did.
  bool look_ahead(const NextBatch& next, int pass);
  void drop_ahead() noexcept;
};

}  // namespace tandem
