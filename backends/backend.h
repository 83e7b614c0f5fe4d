// Backend: one device, as the runtime sees it. The runtime reaches every device (the cpu,
// a simulated GPU, a CUDA GPU) through this interface and nothing else, so the path that
// the simulated GPUs exercise in every test run is the path real GPUs take. After ggml's
// backend interface: optional abilities are marked "(optional)" and default to
// "unsupported", and a caller falls back (collectives go through the host).
//
// What a device offers, in order of the chain below:
//   memory       allocator() for tensors on the device; host_allocator() for host memory
//                its copies are fastest from and into (pinned memory for CUDA)
//   lanes        lane(LaneKind): ordered work (lane.h: one contract for a thread's queue
//                and a CUDA stream), events and waits between lanes of any devices
//   copies       copy(): host <-> device and device <-> device, queued on one of its lanes
//   kernels      make_kernel(): a Kernel (backends/kernel.h) per layer and shape, or why
//                not (placement asks cannot_run() first and runs the layer elsewhere)
//   helpers      what executors need besides kernels: zero, accumulate, scale, a loss,
//                the optimizers' updates, a gradient's sum of squares; each queued on a lane
//   collectives  (optional) all-reduce and broadcast among devices of the same backend
//   between processes (optional) a communicator joining this device to one device of every
//                process of a job (inter_process.h): NCCL between the ranks' GPUs
//   counters     what the device did, for the report
//   trace        (optional) work timed on the device, resolved into the trace's spans
//
// Thread-safety: every member may be called from any thread; a kernel it made is used by
// one caller at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "backends/compute_ops.h"
#include "backends/inter_process.h"
#include "backends/kernel.h"
#include "backends/lane.h"
#include "backends/loss_value.h"
#include "core/device.h"
#include "core/storage.h"
#include "core/tensor.h"
#include "graph/training_spec.h"

namespace tandem {

/// Which of a device's lanes. A backend may serve several kinds with one lane (the cpu has
/// one for everything; a simulated GPU copies in on its compute queue, see sim_gpu.h).
enum class LaneKind { compute, copy_in, copy_out };

/// A byte position in a storage. Queued work keeps the storage alive until it has run.
struct BufferRef {
  std::shared_ptr<Storage> storage;
  size_t offset = 0;
};

/// Where `t`'s elements start in its storage.
inline BufferRef buffer_of(const Tensor& t) {
  return BufferRef{t.storage(), static_cast<size_t>(static_cast<const char*>(t.raw_data()) -
                                                    static_cast<const char*>(t.storage()->data()))};
}

/// What a device did since it was opened; a report subtracts two readings. Bytes and
/// copies "in" arrived on the device (from the host or a peer); "out" left it.
struct DeviceCounters {
  size_t bytes_in = 0;
  size_t bytes_out = 0;
  int64_t copies_in = 0;
  int64_t copies_out = 0;
  /// Time its compute lane spent running work: measured on the device where it can be
  /// (CUDA events), else the host's time running the lane's tasks.
  double busy_seconds = 0.0;
};

class Backend;
class DeviceSpanSink;

/// One participant of a collective: a float32 tensor on `backend`'s device.
struct CollectiveMember {
  Backend* backend = nullptr;
  Tensor tensor;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;

  // ---- memory -------------------------------------------------------------------------
  /// Tensors on this device. Its OutOfMemory says which device.
  virtual Allocator& allocator() = 0;
  /// (optional) Host memory that copies to and from this device are fastest with, and
  /// asynchronous (pinned memory for CUDA). Default: the host's allocator.
  virtual Allocator& host_allocator() { return cpu_allocator(); }

  // ---- lanes --------------------------------------------------------------------------
  virtual Lane& lane(LaneKind kind) = 0;
  /// Blocks until every lane has run everything; rethrows the first error after draining
  /// all of them.
  virtual void synchronize();

  // ---- copies -------------------------------------------------------------------------
  /// Queues on `lane` (one of this device's) a copy of `bytes` from `src` into `dst`. One
  /// end is on this device; the other is host memory, or (peer) on another device of
  /// this backend. Ordering against other lanes is the caller's (events). `side_by_side`
  /// as Lane::submit. A bad copy (wrong devices, past the end) is a bug: an assertion.
  /// Its counters() count this device's end of the copy only; the other end is the other
  /// device's (or, for host memory, the cpu's) to count.
  virtual void copy(Lane& lane, const BufferRef& dst, const BufferRef& src, size_t bytes,
                    std::shared_ptr<TaskGroup> side_by_side = nullptr) = 0;

  // ---- kernels ------------------------------------------------------------------------
  /// The kernel for `spec` on this device: its forward and backward queue on the compute
  /// lane when called from work submitted there (lane.h).
  virtual KernelChoice make_kernel(const KernelSpec& spec) = 0;
  /// (optional) Why make_kernel would say unsupported for `spec`, without making it;
  /// empty: it can run it. Pure: placement calls it. Default: every op.
  virtual std::string cannot_run(const KernelSpec& spec) const { return {}; }
  /// (optional) The precision make_kernel's kernel for `spec` does its matrix work in, and
  /// why when not the one asked for. Pure: `tandem plan` shows it. Default: the asked one.
  virtual PrecisionChoice runs_in(const KernelSpec& spec) const { return {spec.precision, {}}; }
  /// (optional) Inference regions (backends/region_spec.h): whether the layer of `spec`
  /// may join one (pure), and the kernel of a region of such layers, or null to run them
  /// one by one. Default: no regions.
  virtual bool fusable(const KernelSpec& spec) const { return false; }
  virtual std::unique_ptr<Kernel> make_region_kernel(const RegionSpec& region) { return nullptr; }
  /// (optional) One-off preparation its kernels did so far (ComputeOps::preparations).
  virtual int64_t preparations() const { return 0; }

  // ---- helpers, queued on `lane` -----------------------------------------------------
  /// As ComputeOps' of the same names, on this device's tensors.
  virtual void zero(Lane& lane, const Tensor& t) = 0;
  virtual void accumulate(Lane& lane, const Tensor& into, const Tensor& from) = 0;
  virtual void scale(Lane& lane, const Tensor& t, float factor) = 0;
  /// `*result` is written once an event recorded after this on `lane` is reached (it must
  /// live until then); `grad_input` may be undefined (no gradient).
  virtual void loss(Lane& lane, const LossSpec& spec, const Tensor& input, const Tensor& target,
                    const Tensor& grad_input, LossValue* result) = 0;
  /// A parameter held here updated by an optimizer: as ComputeOps' (the same bits as the
  /// host's optimizer on every backend that computes with the cpu's loops; CUDA's fused
  /// kernels match them too). The tensors must live until the update has run.
  virtual void sgd_update(Lane& lane, const optim_detail::SgdScalars& s, const Tensor& p, const Tensor& g,
                          const Tensor& buf, bool first) = 0;
  virtual void adam_update(Lane& lane, const optim_detail::AdamScalars& s, const Tensor& p, const Tensor& g,
                           const Tensor& m, const Tensor& v) = 0;
  /// `*result` = the sum of squares of `t` in double, once an event recorded after this is
  /// reached (clip_grad_norm over gradients held here).
  virtual void sum_of_squares(Lane& lane, const Tensor& t, double* result) = 0;
  /// fp16 loss scaling's step over gradients held here (torch's
  /// _amp_foreach_non_finite_check_and_unscale_): each tensor *= factor, and whether every
  /// value was finite before. Waits for the answer: one wait for all of them. Default:
  /// sum_of_squares then scale, tensor by tensor, a wait each.
  virtual bool scale_checking_finite(Lane& lane, std::span<const Tensor> tensors, float factor);

  // ---- collectives (optional) --------------------------------------------------------
  /// Every member's tensor becomes the elementwise sum of all of them, queued on each
  /// member's compute lane (no host wait). Called on members[0].backend; every member is
  /// of this backend. False: not offered for these members, and the runtime sums through
  /// the host instead (DeviceParameterCache::all_reduce_gradients: each member's tensor
  /// copied down on its copy_out lane, added on the cpu's compute lane in member order,
  /// the sum copied back up on each member's copy_in lane).
  virtual bool all_reduce_sum(std::span<const CollectiveMember> members) { return false; }
  /// Every member's tensor becomes a copy of members[root]'s, queued on each member's
  /// compute lane as all_reduce_sum. False: not offered. (The runtime does not call it
  /// today; the GPU tests do.)
  virtual bool broadcast(std::span<const CollectiveMember> members, size_t root) { return false; }

  // ---- between processes (optional) --------------------------------------------------
  // Called by the runtime's data parallelism over processes (runtime/distributed/
  // device_collectives.h), on the training thread: rank 0 calls make_inter_process_id()
  // on its device, the id travels to every rank over MPI, and every rank calls
  // join_inter_process() on its own device with it, in the same order of devices on every
  // rank. Default: not offered, and the runtime reduces this device's gradients through the
  // host over MPI as before.
  /// A fresh id for one communicator (opaque bytes: NCCL's ncclUniqueId), or empty: this
  /// backend offers no collectives between processes.
  virtual std::string make_inter_process_id() { return {}; }
  /// This device's end of the communicator `setup.id` names; null when not offered. Blocks
  /// until every process joined, or throws UserError past `setup.timeout` (naming the
  /// device and the rank) or when the id is not one of this backend's.
  virtual std::unique_ptr<InterProcessCommunicator> join_inter_process(const InterProcessSetup& setup) {
    return nullptr;
  }

  // ---- counters -----------------------------------------------------------------------
  virtual DeviceCounters counters() const = 0;

  // ---- trace (optional) ----------------------------------------------------------------
  // A lane whose work runs after its submission (a CUDA stream) cannot be traced by the
  // host timing the submission; such a backend times its work on the device instead
  // (device_spans.h). Host lanes trace their tasks as they run (host_lanes.h), so the
  // defaults do nothing.
  /// From now on, time every piece of work queued on this device's lanes and send it to
  /// `sink` (the process's trace; it outlives the backend); null: stop timing. Called by the
  /// device registry when it opens the device under a trace.
  virtual void trace_device_work(DeviceSpanSink* sink) {}
  /// Sends the spans of timed work that has finished since the last call to the sink, each
  /// on its lane's track. Does not wait for work still queued. Called by the runtime after
  /// it synchronised the devices (the end of a step's passes), and by the backend itself
  /// before it goes.
  virtual void collect_trace_spans() {}
};

}  // namespace tandem
