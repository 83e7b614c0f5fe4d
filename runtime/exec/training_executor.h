// TrainingExecutor: a training plan made runnable, for one set of symbol values. Every plan
// runs through it: one on the cpu alone (its lane the calling thread) as one placed over
// the cpu and GPUs, with the forward executor's schedule (schedule.h), liveness
// (liveness.h) and copy rule (queue_copy in plan_devices.h). It reaches devices only
// through their backends (backends/backend.h), so simulated and real GPUs run the same code.
//
// Execution: every kernel runs on its device's compute lane and every copy on the lane
// queue_copy picks, ordered by events; the calling thread allocates and submits, and waits
// only where it needs a value (the loss, the end of forward and of backward). So copies
// overlap the kernels that do not depend on them, and the host's bookkeeping overlaps the
// kernels. Running ahead must not cost memory: a buffer the host has let go of returns to
// its pool only once its last reader has run, so the first forward-backward runs in
// lockstep (the host waits for every task) and measures how far each device's pool grew
// above what it held when the step began, and later ones wait for the lanes whenever an
// allocation would take the step past that growth. (Measured from the step's start, not as
// a level: what stays between steps, such as optimizer state made after the first step,
// would otherwise make every later allocation wait.)
//
// Forward: in training mode, each layer's output from its device's pool; each forward copy
// of the plan moves an activation into the destination's pool; a tensor no backward reads
// is let go of after its last forward reader, as PyTorch keeps only what autograd saved.
// The loss runs on the device of the tensor it scores (its backend's loss helper); the
// target is copied there. A parallel loss scores each replica's share where it lives.
// Backward: the steps in reverse. Input gradients are assigned by the first contribution
// and summed by the later ones (a tensor with several readers); after the backward of the
// step before which a forward copy ran (the first reader on the destination), the gradient
// of that value is complete there and goes back (the plan's backward copy) to be added on
// the source. Gradients of the float graph inputs end on the cpu.
//
// Parameters: a cpu layer reads and accumulates into the model's own tensors; a GPU layer
// the one copy of each parameter on that device (DeviceParameterCache, shared by every
// executor of the model). Where each gradient goes as backward completes it, and when
// data parallelism over processes hears of it: gradient_return.h.
//
// Note [the next batch ahead]: a placed training step leaves the cpu idle while a GPU runs
// its loss and backward. The step's executor is then busy, so another executor of the same
// model takes the next batch (look_ahead(), training_ahead.cpp): it submits what of that
// batch's forward depends on nothing this step's update changes, or on rows it can look up
// again: the uploads of the graph inputs (and views of them), and on the cpu the lookups of
// tables (kernels that looks_up_rows()) whose update changes only the rows their gradient
// lists (Optimizer::takes_row_gradients(): sgd without momentum and weight decay, adagrad
// without weight decay, rowwise_adagrad, sparse_adam). After the update, look_up_again()
// recomputes on the cpu's lane every looked-up entry or bag that reads a row the gradient
// lists, with forward's own code, so the outputs hold the bits a forward after the update
// writes. The next forward() of the same inputs takes the rest up from there. Copies of
// looked-up values wait for forward(): a copy would have to be redone. A table whose update
// moves every row (adam, momentum, weight decay), or that another layer reads, waits too.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backends/kernel.h"
#include "backends/loss_value.h"
#include "core/touched_rows.h"
#include "graph/graph.h"
#include "graph/symbolic.h"
#include "placement/plan.h"
#include "runtime/devices/device_report.h"
#include "runtime/exec/gradient_ready.h"
#include "runtime/exec/table_updates.h"
#include "runtime/params/device_parameter_cache.h"

namespace tandem {

class DeviceRegistry;
class GradientReturn;
class Schedule;
struct PipelineWindow;

/// Not thread-safe. Keeps references to the graph's nodes, the cache and the registry,
/// which must outlive it; it copies the plan.
class TrainingExecutor {
 public:
  /// With `input_grads`, backward also yields gradients of the float graph inputs.
  /// `kept`: tensors read between forward and backward (the loss's input). Without
  /// `hold_parameters`, no GPU holds a parameter: every gradient goes to the host's.
  TrainingExecutor(const Graph& graph, const Plan& plan, const Bindings& bindings, DeviceParameterCache& params,
                   DeviceRegistry& registry, bool input_grads, const std::vector<int>& kept, bool hold_parameters = true);
  ~TrainingExecutor();
  TrainingExecutor(const TrainingExecutor&) = delete;
  TrainingExecutor& operator=(const TrainingExecutor&) = delete;

  /// Inputs in graph-input order, on the cpu. In training mode dropout draws from `seed`;
  /// out of it (evaluation) it is the identity, and there is nothing to backward.
  void forward(const std::vector<Tensor>& inputs, uint64_t seed, uint64_t params_version, bool training = true);
  /// The loss of the last forward, computed on the device of spec.input (the host `target`
  /// is copied there); with `with_gradient`, writes the gradient seed for backward(). In a
  /// pipelined step (join_pipeline) an empty value: see last_loss().
  LossValue loss(const LossSpec& spec, const Tensor& target, bool with_gradient);
  /// The last loss() computed: what it returned, or in a pipelined step (join_pipeline) the
  /// value once the step has waited for the lanes.
  const LossValue& last_loss() const { return loss_value_; }
  /// An event reached once the lane that computes the last loss() has written last_loss()
  /// (already reached where the host has waited for it).
  DeviceEvent loss_written();
  /// The values loss() wrote gradient seeds for: the loss's input, or with a parallel loss
  /// each replica's share of it. What backward() starts from.
  const std::vector<int>& loss_seeds() const { return loss_seeds_; }
  /// Multiplies the gradient seeds loss() wrote by `factor` on their devices: fp16 loss
  /// scaling (runtime/optim/loss_scaler.h), as torch's backward of `loss * scale`.
  void scale_loss_gradients(float factor);
  /// Writes the host tensor `grad` as the gradient seed of `value` (copied to its device).
  void seed_gradient(int value, const Tensor& grad);
  /// The shape of a tensor under these bindings.
  const Shape& shape(int value) const { return shapes_[value]; }
  bool requires_grad(int value) const { return requires_grad_[value]; }
  /// Backward from the seeds of `seeded` (written by loss() or seed_gradient()); parameter
  /// gradients are added to the model's gradients. With `ready`, each trainable parameter
  /// is named once its gradient in the model (or, held by GPUs, among them) is complete,
  /// while backward goes on where the devices allow (gradient_return.h).
  /// With `tables`, each table it names is updated right after the backward that completes
  /// its gradient, in the same task on the cpu's lane (Note [a table updated in its
  /// backward] in table_updates.h).
  void backward(const std::vector<int>& seeded, const GradientReady* ready = nullptr,
                const TableUpdates* tables = nullptr);
  /// After backward: dLoss/dInput for graph input `index`, on the cpu (undefined if not requested).
  Tensor input_gradient(size_t index) const;

  /// Returns every buffer of the step under way (activations, their gradients, copies) to
  /// its device's pool, once the lanes have run what was submitted. Every member above
  /// does this itself when it throws; a caller that gives up between forward() and
  /// backward() calls it (through ReleaseOnError) so that nothing waits for the next step.
  void release_step_buffers() noexcept { clear(); }

  /// Releases the step's buffers when the scope it guards is left by an exception, wherever
  /// in the step that happened; a scope left normally keeps them (backward reads them).
  class ReleaseOnError {
   public:
    explicit ReleaseOnError(TrainingExecutor& training)
        : training_(training), exceptions_(std::uncaught_exceptions()) {}
    ~ReleaseOnError() {
      if (std::uncaught_exceptions() > exceptions_) training_.clear();
    }
    ReleaseOnError(const ReleaseOnError&) = delete;
    ReleaseOnError& operator=(const ReleaseOnError&) = delete;

   private:
    TrainingExecutor& training_;
    const int exceptions_;
  };

  /// One micro-batch of a pipelined step (pipeline.h) shares the devices with the step's
  /// other micro-batches: with a window, forward(), loss() and backward() leave the waiting
  /// for the lanes to the step (they wait only where the host must read a value: a buffer
  /// a GPU updated, a parallel loss's scalars), open no report of their own, and the memory
  /// they may take before the host waits is the step's (`window`). Null: passes alone.
  void join_pipeline(const PipelineWindow* window) { window_ = window; }
  /// Adds this executor's devices to a pipelined step's window: what each holds now (the
  /// first executor to name a device sets it) and how far this executor's first step, run
  /// in lockstep, grew its pool.
  void add_to_window(PipelineWindow& window) const;
  /// Waits until the lanes have run everything submitted to the plan's devices (rethrows a
  /// failed task's error).
  void wait_for_lanes();
  /// Opens the device report's window (forward() does, outside a pipelined step).
  void begin_report();
  /// Closes it: report() covers what the lanes ran since begin_report().
  void finish_report();

  /// Note [the next batch ahead]: submits the work of a forward of `inputs` that the
  /// update due before it cannot change, or whose changes look_up_again() redoes: uploads of
  /// the inputs, and on the cpu the lookups of tables whose parameters `tables` names.
  /// `params_version` is the weights' now. Whether anything was submitted (else nothing is
  /// held).
  bool look_ahead(const std::vector<Tensor>& inputs, const std::set<std::string>& tables, uint64_t params_version);
  /// After an update (the weights now at `params_version`): looks up again, in each table
  /// looked up ahead, the entries and bags that read a row `changed_rows(parameter)` lists
  /// (null: none changed; all(): every row).
  void look_up_again(const std::function<const TouchedRows*(const std::string&)>& changed_rows, uint64_t params_version);
  /// Whether a forward() of `inputs` at `params_version` takes up the work submitted ahead:
  /// the same tensors, and no update since that look_up_again() did not follow.
  bool ahead_for(const std::vector<Tensor>& inputs, uint64_t params_version) const;
  /// Whether work is held ahead (look_ahead() submitted some, forward() has not taken it up).
  bool holds_ahead() const { return ahead_.has_value(); }
  /// Lets go of the work submitted ahead, once the lanes have run it.
  void drop_ahead() noexcept;

  /// One entry per device the plan uses (the cpu first), from the last forward to now.
  const std::vector<DeviceReport>& report() const { return report_; }
  /// Of report(), what this executor counted itself (the host's side of copies, uploads):
  /// what another executor's report of the same window lacks.
  std::vector<DeviceReport> counted_by_host() const;
  const Plan& plan() const { return plan_; }

 private:
  /// What training adds to a schedule's op action: where its parameter gradients go.
  struct GradientTargets {
    std::vector<Tensor> param_grads;  // on the action's device (undefined: a buffer, a row gradient)
    // cpu layers: per parameter, the touched rows its kernel records (else null), and those
    // of the gradients it writes without recording (marked whole after its backward)
    std::vector<TouchedRows*> recorded_rows, unrecorded_rows;
    // cpu layers: the parameters whose gradient this backward completes (no earlier layer
    // uses them), which a table update may follow in the same task (table_updates.h)
    std::vector<std::string> completed_on_cpu;
    // of those, the one its kernel may step in backward (table_updates.h, Note [a table
    // stepped in its backward]): parameter 0, which no other step uses; else empty
    std::string steppable_table;
  };

  /// Submits the backward of op step `step`: its kernel's, then the sums of its inputs'
  /// gradients where an input already had one.
  void backward_step(int step, const TableUpdates* tables);
  /// The gradients of the forward copies before `step`, back to their sources.
  void return_copy_gradients(int step);
  Tensor copy_between(const Tensor& src, int from, int to, const std::string& context);
  LossValue parallel_loss(const LossSpec& spec, const Tensor& target, bool with_gradient);
  int loss_device_ = -1;  // the schedule's device of the last loss(), while a lane may write it
  /// In lockstep (the first step), waits for every device after each submission.
  void after_submit();
  /// Runs forward action `i` of the schedule: a copy, a view, or a kernel submitted on its
  /// device's compute lane (under `label`, with `seed`, in task group `group`) into an
  /// output allocated now. Returns a kernel's output; undefined for a copy or a view.
  Tensor run_forward_action(size_t i, const char* label, bool training, uint64_t seed, uint64_t params_version,
                            std::shared_ptr<TaskGroup> group);
  /// `from`'s gradient into slot `slot`: assigned when it has none yet, else added on `device`.
  void assign_or_add(int slot, int device, Tensor from);
  /// From `memory` when given (host memory a GPU copies with fastest), else the device's own;
  /// named "`context` `phase`" when it fails (joined only then: this runs per layer).
  Tensor allocate_on(int device, const Shape& shape, DType dtype, const std::string& context,
                     Allocator* memory = nullptr, const char* phase = nullptr);
  /// Waits for every lane, unless a pipelined step will.
  void synchronize_unless_pipelined();
  void clear() noexcept;

  /// What look_ahead() submitted (Note [the next batch ahead]).
  struct Ahead {
    std::vector<Tensor> inputs;  // the batch it is for
    std::vector<bool> done;      // per action: submitted ahead
    struct Lookup {
      int action = -1;
      std::vector<Tensor> inputs;  // the kernel's, as forward gave them
      Tensor out;
    };
    std::vector<Lookup> lookups;
    uint64_t params_version = 0;  // the weights the outputs hold
  };
  std::optional<Ahead> ahead_;

  const Plan plan_;
  const Graph& graph_;
  DeviceParameterCache& cache_;
  std::vector<Shape> shapes_;
  std::vector<bool> requires_grad_;  // per value
  std::unique_ptr<Schedule> schedule_;
  std::unique_ptr<GradientReturn> gradient_return_;
  std::vector<GradientTargets> targets_;                // per action (ops only)
  std::vector<std::vector<int>> copies_after_backward_; // op step -> copy actions whose gradient goes back after its backward
  // Per device: how far the step's own use of the pool (above what was in use when its
  // forward began: weights, optimizer state) may grow before the host waits for the lanes,
  // and where this step began.
  std::vector<size_t> budget_, step_start_;
  std::vector<std::vector<int>> release_after_forward_; // action -> slots nobody reads afterwards
  std::vector<std::pair<std::string, Device>> buffers_to_master_;  // GPU copies a training forward updates
  std::vector<Tensor> values_;     // per slot
  std::vector<Tensor> grads_;      // per slot
  std::vector<bool> grad_ready_;   // per slot
  uint64_t seed_ = 0;
  bool training_ = true;
  bool lockstep_ = true;  // until the first backward has measured the peaks
  std::vector<int> loss_seeds_;
  uint64_t params_version_ = kUnknownParamsVersion;  // the last forward's, for backward
  LossValue loss_value_;  // written by the lane that computes the loss
  const PipelineWindow* window_ = nullptr;
  std::vector<DeviceReport> report_;
};

}  // namespace tandem
