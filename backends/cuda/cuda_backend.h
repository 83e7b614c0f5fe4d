// The CUDA backend as the runtime sees it: one GPU as a Backend (backends/backend.h).
//
// Lanes are its CudaContext's three streams (compute, copy in, copy out). A lane calls the
// work it is handed at once, on the submitting thread, with the GPU current: the work
// enqueues on the lane's stream (the kernels of make_kernel enqueue on the compute stream,
// so work that runs a kernel belongs on the compute lane). Events are CUDA events; a lane
// waits for another CUDA lane's event on the device (cudaStreamWaitEvent), and for another
// backend's event (the cpu's lane) on the host, before it enqueues what follows.
//
// Memory. Tensors come from the context's caching allocator. Work on a stream may still
// read a block after the host has let go of it: the allocator hands a block freed on the
// host to the next request of the same stream only, behind that work; a block that a copy
// lane read or wrote is held by this backend until an event after that copy is reached
// (what torch's record_stream does). host_allocator() is pinned memory, which copies use
// asynchronously; copies from or into pageable host memory go through pinned staging.
//
// Counters: bytes and copies at this device's end; busy time from CUDA events around each
// piece of work submitted to the compute lane (device time, not host time).
//
// Trace: under a trace (trace_device_work), every piece of work enqueued on a lane (a
// submission, a copy, a helper) is timed by a pair of pooled CUDA events and becomes a span
// on the lane's track ("cuda:0 compute", "cuda:0 copies in", "cuda:0 copies out") once
// collect_trace_spans finds it run (stream_spans.h).
//
// Thread-safety: as Backend. Not copyable.
#pragma once

#include <atomic>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/cuda/cuda_context.h"
#include "backends/cuda_backend_module.h"

namespace tandem::cuda {

class StreamLane;
class StreamSpans;

class CudaBackend final : public Backend {
 public:
  /// cuda:spec.logical on GPU spec.gpu.index (CUDA_VISIBLE_DEVICES numbering). UserError
  /// when the GPU cannot be used (no driver, out of memory for a context).
  explicit CudaBackend(const CudaGpuSpec& spec);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Device device() const override { return context_->device(); }
  CudaContext& context() { return *context_; }

  Allocator& allocator() override;
  Allocator& host_allocator() override;
  Lane& lane(LaneKind kind) override;

  void copy(Lane& lane, const BufferRef& dst, const BufferRef& src, size_t bytes,
            std::shared_ptr<TaskGroup> side_by_side) override;

  KernelChoice make_kernel(const KernelSpec& spec) override;
  std::string cannot_run(const KernelSpec& spec) const override;

  void zero(Lane& lane, const Tensor& t) override;
  void accumulate(Lane& lane, const Tensor& into, const Tensor& from) override;
  void scale(Lane& lane, const Tensor& t, float factor) override;
  void loss(Lane& lane, const LossSpec& spec, const Tensor& input, const Tensor& target, const Tensor& grad_input,
            LossValue* result) override;
  void sgd_update(Lane& lane, const optim_detail::SgdScalars& s, const Tensor& p, const Tensor& g, const Tensor& buf,
                  bool first) override;
  void adam_update(Lane& lane, const optim_detail::AdamScalars& s, const Tensor& p, const Tensor& g, const Tensor& m,
                   const Tensor& v) override;
  /// Blocks' sums on the device, added on the host in order: the host's bits. Waits.
  void sum_of_squares(Lane& lane, const Tensor& t, double* result) override;
  /// One fused kernel per tensor into one flag on the GPU, then one wait for the flag.
  bool scale_checking_finite(Lane& lane, std::span<const Tensor> tensors, float factor) override;

  /// NCCL among distinct GPUs; device-local copies and adds when several logical devices
  /// share one (nccl_comms.h). Every member must be a CudaBackend.
  bool all_reduce_sum(std::span<const CollectiveMember> members) override;
  bool broadcast(std::span<const CollectiveMember> members, size_t root) override;

  /// Between processes: NCCL with a watchdog (nccl_inter_process.h).
  std::string make_inter_process_id() override;
  std::unique_ptr<InterProcessCommunicator> join_inter_process(const InterProcessSetup& setup) override;

  DeviceCounters counters() const override;
  void trace_device_work(DeviceSpanSink* sink) override;
  void collect_trace_spans() override;
  /// The stream of one of this device's lanes.
  cudaStream_t stream_of(Lane& lane);

 private:
  StreamLane& own(Lane& lane);
  /// Keeps `storages` alive until `lane`'s work so far has run, then lets them go; also
  /// lets go of what earlier calls held whose events are reached.
  void hold_until_done(StreamLane& lane, std::vector<std::shared_ptr<Storage>> storages);
  void release_finished();

  std::vector<int> physical_of_logical_;  // for peer copies: each logical device's GPU
  std::unique_ptr<CudaContext> context_;
  std::unique_ptr<StreamSpans> spans_;  // before the lanes, which use it
  std::unique_ptr<StreamLane> compute_, copy_in_, copy_out_;
  std::unique_ptr<Allocator> pinned_;
  std::atomic<size_t> bytes_in_{0}, bytes_out_{0};
  std::atomic<int64_t> copies_in_{0}, copies_out_{0};
  struct Held;
  std::mutex held_mutex_;
  std::deque<Held> held_;  // storages in use by queued copies, oldest first
};

}  // namespace tandem::cuda
