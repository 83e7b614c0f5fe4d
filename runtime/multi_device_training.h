// MultiDeviceTraining: a training place() plan made runnable on the cpu and GPUs, for one
// set of symbol values. The placed twin of CompiledTraining. It reaches devices only
// through their backends (backends/backend.h), so simulated and real GPUs run the same code,
// and it shares its schedule (placed_schedule.h) and copy rule (queue_copy) with
// MultiDeviceForward.
//
// Execution: every kernel runs on its device's compute lane and every copy on the lane
// queue_copy picks (gradients to the host on a GPU's copy_out lane), ordered by events; the
// calling thread allocates and submits, and waits only where it needs a value (the loss,
// the end of forward and of backward). So copies overlap the kernels that do
// not depend on them, and the host's bookkeeping overlaps the kernels. Running ahead must
// not cost memory: a buffer the host has let go of returns to its pool only once its last
// reader has run, so the first forward-backward runs in lockstep (the host waits for every
// task) and measures each device's peak, and later ones wait for the queues whenever an
// allocation would pass it. Each layer's activations and gradients are allocated from its
// device's pool (DeviceRegistry::allocator).
//
// Forward: each forward CopyStep of the plan copies the activation into the destination's
// pool through the SimGpu copy calls (counted in the report); a tensor that no backward
// reads is released after its last forward reader, as in CompiledTraining. The loss runs on
// the device of the tensor it scores (its backend's loss helper); the target is copied there.
// Backward: the steps in reverse; after the backward of the step before which a forward
// copy ran (the first reader on the destination), the gradient of that value is complete on
// the destination and is copied back (the plan's backward CopyStep) and added to the
// gradient on the source. Gradients of the float graph inputs end on the cpu.
//
// Parameters (Note [where a master lives] in device_parameter_cache.h): a GPU layer reads
// the one copy of each of its parameters on that device, shared by every placed executor
// of the model, inference (MultiDeviceForward) and training alike (DeviceParameterCache).
// Its kernel accumulates its parameter gradients into a gradient buffer in the device's
// pool. As soon as the backward of the first step that uses a parameter has been
// submitted, its gradient on that device is complete.
//   - A parameter that only GPUs run is held by them, each replica a master with its
//     own gradient and optimizer state (as DistributedDataParallel holds a module): when
//     every replica's gradient is complete, they are all-reduced among the GPUs while the
//     rest of backward runs, and the optimizer applies the same update on every GPU.
//     Nothing of it crosses to the host in a step.
//   - Any other keeps its master on the host: its GPU copies are refreshed when
//     params_version changes, and a GPU's gradient joins its device's bucket; a full
//     bucket (gradient_bucket_bytes) is copied to the host on the copy_out lane and added
//     to the model's gradient on the cpu's lane while the rest of backward runs.
// Either way gradients() accumulate across calls exactly as on the cpu, and the replicas
// of a data_parallel block sum theirs into the one master gradient.
#pragma once

#include <exception>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/kernel.h"
#include "backends/loss_value.h"
#include "core/touched_rows.h"
#include "graph/graph.h"
#include "graph/symbolic.h"
#include "placement/plan.h"
#include "runtime/device_parameter_cache.h"
#include "runtime/device_report.h"
#include "runtime/gradient_ready.h"

namespace tandem {

class DeviceRegistry;
class PlacedSchedule;

/// Not thread-safe. Keeps references to the graph's nodes, the cache and the registry,
/// which must outlive it; it copies the plan (a training plan).
class MultiDeviceTraining {
 public:
  /// With `input_grads`, backward also yields gradients of the float graph inputs.
  /// `kept`: tensors read between forward and backward (the loss's input). Without
  /// `hold_parameters`, no GPU holds a parameter: every gradient goes to the host's.
  MultiDeviceTraining(const Graph& graph, const Plan& plan, const Bindings& bindings, DeviceParameterCache& params,
                      DeviceRegistry& registry, bool input_grads, const std::vector<int>& kept,
                      bool hold_parameters = true);
  ~MultiDeviceTraining();
  MultiDeviceTraining(const MultiDeviceTraining&) = delete;
  MultiDeviceTraining& operator=(const MultiDeviceTraining&) = delete;

  /// Inputs in graph-input order, on the cpu. Seeds and modes as CompiledTraining::forward.
  void forward(const std::vector<Tensor>& inputs, uint64_t seed, uint64_t params_version, bool training = true);
  /// The loss of the last forward, computed on the device of spec.input (the host `target`
  /// is copied there); with `with_gradient`, writes the gradient seed for backward().
  LossValue loss(const LossSpec& spec, const Tensor& target, bool with_gradient);
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
  /// gradients are added to the model's gradients. With `ready`, each parameter that GPUs
  /// hold is named as soon as its replicas' gradients are complete (and their all-reduce
  /// among the GPUs queued), while backward goes on; the others are not named here.
  void backward(const std::vector<int>& seeded, const GradientReady* ready = nullptr);
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
    explicit ReleaseOnError(MultiDeviceTraining& training)
        : training_(training), exceptions_(std::uncaught_exceptions()) {}
    ~ReleaseOnError() {
      if (std::uncaught_exceptions() > exceptions_) training_.clear();
    }
    ReleaseOnError(const ReleaseOnError&) = delete;
    ReleaseOnError& operator=(const ReleaseOnError&) = delete;

   private:
    MultiDeviceTraining& training_;
    const int exceptions_;
  };

  /// One entry per device the plan uses (the cpu first), from the last forward to now.
  const std::vector<DeviceReport>& report() const { return report_; }
  const Plan& plan() const { return plan_; }

 private:
  /// What training adds to a schedule's op action: where its parameter gradients go.
  struct GradientTargets {
    std::vector<Tensor> param_grads;  // on the action's device (undefined: a buffer)
    // cpu layers: per parameter, the touched rows its kernel records (else null), and those
    // of the gradients it writes without recording (marked whole after its backward)
    std::vector<TouchedRows*> recorded_rows, unrecorded_rows;
  };

  Tensor copy_between(const Tensor& src, int from, int to, const std::string& context);
  LossValue parallel_loss(const LossSpec& spec, const Tensor& target, bool with_gradient);
  /// In lockstep (the first step), waits for every device after each submission.
  void after_submit();
  void add_on_device(int device, const Tensor& into, const Tensor& from);
  /// From `memory` when given (host memory a GPU copies with fastest), else the device's own.
  Tensor allocate_on(int device, const Shape& shape, DType dtype, const std::string& context,
                     Allocator* memory = nullptr);
  void finish_report();
  void clear() noexcept;

  const Plan plan_;
  const Graph& graph_;
  DeviceParameterCache& cache_;
  std::vector<Shape> shapes_;
  std::vector<bool> requires_grad_;  // per value
  std::unique_ptr<PlacedSchedule> schedule_;
  std::vector<GradientTargets> targets_;                // per action (ops only)
  std::vector<std::vector<int>> copies_after_backward_; // op step -> copy actions whose gradient goes back after its backward
  std::vector<int> home_slot_;                          // value -> slot where it is produced (-1: none)
  std::vector<size_t> budget_;                          // per device: pool bytes the host may have in use before it waits
  std::vector<std::vector<int>> release_after_forward_; // action -> slots nobody reads afterwards
  std::vector<std::pair<std::string, Device>> gpu_param_keys_;
  std::map<std::string, int> replica_count_;  // trainable parameters only GPUs run -> how many GPUs hold them
  std::vector<std::pair<std::string, Device>> buffers_to_master_;  // GPU copies a training forward updates
  std::vector<std::vector<std::pair<std::string, Device>>> gradients_done_after_;  // op step -> keys
  /// Parameter gradients bound for the master, on one device, not yet sent.
  struct GradientBucket {
    std::vector<std::pair<std::string, Device>> keys;
    size_t bytes = 0;
  };
  /// A bucket is sent once it holds this much (PyTorch's DDP uses 25 MiB; smaller buckets
  /// start the copies earlier, and a copy here costs no launch).
  static constexpr size_t gradient_bucket_bytes = size_t{4} << 20;
  std::vector<Tensor> values_;     // per slot
  std::vector<Tensor> grads_;      // per slot
  std::vector<bool> grad_ready_;   // per slot
  uint64_t seed_ = 0;
  bool training_ = true;
  bool lockstep_ = true;  // until the first backward has measured the peaks
  std::vector<int> loss_seeds_;
  uint64_t params_version_ = kUnknownParamsVersion;  // the last forward's, for backward
  std::vector<DeviceReport> report_;
};

}  // namespace tandem
