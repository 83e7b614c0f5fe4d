#include "backends/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <utility>

#include "backends/cuda/copies.h"
#include "backends/cuda/cuda_error.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/cuda_limits.h"
#include "backends/cuda/device_guard.h"
#include "backends/cuda/kernels/sum_of_squares.cuh"
#include "backends/cuda/kernels/optimizer.cuh"
#include "backends/cuda/kernels/pointwise.cuh"
#include "backends/cuda/loss.h"
#include "backends/cuda/loss_scaler.h"
#include "backends/cuda/nccl_comms.h"
#include "backends/cuda/nccl_inter_process.h"
#include "backends/cuda/pinned_pool.h"
#include "backends/cuda/stream.h"
#include "backends/cuda/stream_spans.h"
#include "core/error.h"

namespace tandem::cuda {

// ---- events and lanes ------------------------------------------------------------------

namespace {

/// A CUDA event as a DeviceEvent.
class CudaEventImpl final : public DeviceEvent::Impl {
 public:
  explicit CudaEventImpl(int device) : event(device) {}
  bool done() const override { return event.done(); }
  void wait() const override { event.synchronize(); }
  Event event;
};

/// Page-locked host memory as core's Allocator: what copies to and from a GPU use without
/// staging. Buffers come from the process-wide PinnedPool and go back to it when the last
/// tensor on them goes (a copy still queued holds its storage: CudaBackend::hold_until_done).
class PinnedAllocator final : public Allocator {
 public:
  Device device() const override { return Device::cpu(); }
  std::shared_ptr<Storage> allocate(size_t bytes) override {
    auto buffer = std::make_shared<PinnedBuffer>(PinnedPool::shared().acquire(std::max<size_t>(bytes, 1)));
    void* data = buffer->data();
    return std::make_shared<Storage>(data, bytes, Device::cpu(), [buffer](void*, size_t) mutable { buffer.reset(); });
  }
};

char* at(const BufferRef& b) { return static_cast<char*>(b.storage->data()) + b.offset; }

}  // namespace

/// One of a GPU's streams as a Lane (lane.h): work runs at submit, with the device current.
/// The compute lane times each piece of work with a pair of CUDA events, for busy time.
/// Under a trace, each piece of work is a span on the lane's track (stream_spans.h).
class StreamLane final : public Lane {
 public:
  StreamLane(std::string name, std::string track, Stream& stream, StreamSpans& spans, bool timed)
      : name_(std::move(name)), track_(std::move(track)), stream_(stream), spans_(spans), timed_(timed) {}

  const std::string& name() const override { return name_; }
  cudaStream_t stream() const { return stream_.get(); }
  int cuda_device() const { return stream_.device(); }
  /// A span of the trace around what is enqueued on this lane while it lives.
  StreamSpans::Scope traced() { return StreamSpans::Scope(spans_, stream_.get(), track_); }

  void submit(std::function<void()> work, std::shared_ptr<TaskGroup>) override {
    DeviceGuard guard(stream_.device());
    StreamSpans::Scope traced(spans_, stream_.get(), track_);
    if (!timed_) {
      work();
      return;
    }
    Timing t{Event(stream_.device(), /*timing=*/true), Event(stream_.device(), /*timing=*/true)};
    t.start.record(stream_.get());
    work();
    t.stop.record(stream_.get());
    std::lock_guard lock(mutex_);
    timings_.push_back(std::move(t));
    add_finished_timings();
  }

  DeviceEvent record() override {
    auto impl = std::make_shared<CudaEventImpl>(stream_.device());
    impl->event.record(stream_.get());
    return DeviceEvent(std::move(impl));
  }

  void wait(const DeviceEvent& event) override {
    if (!event.impl() || event.done()) return;
    if (auto cuda = std::dynamic_pointer_cast<const CudaEventImpl>(event.impl())) {
      stream_.wait(cuda->event);  // on the device: the host goes on
      return;
    }
    event.wait();  // another backend's (the cpu's lane): the host waits before enqueuing more
  }

  void synchronize() override { stream_.synchronize(); }

  /// Device time of the work submitted so far that has finished.
  double busy_seconds() {
    std::lock_guard lock(mutex_);
    add_finished_timings();
    return busy_ms_ * 1e-3;
  }

 private:
  struct Timing {
    Event start, stop;
  };
  void add_finished_timings() {  // with mutex_ held
    while (!timings_.empty() && timings_.front().stop.done()) {
      busy_ms_ += timings_.front().stop.milliseconds_since(timings_.front().start);
      timings_.pop_front();
    }
  }

  const std::string name_;
  const std::string track_;  // in the trace: "cuda:0 compute"
  Stream& stream_;
  StreamSpans& spans_;
  const bool timed_;
  std::mutex mutex_;
  std::deque<Timing> timings_;  // work not known to have finished
  double busy_ms_ = 0;
};

// ---- CudaBackend -----------------------------------------------------------------------

struct CudaBackend::Held {
  DeviceEvent done;
  std::vector<std::shared_ptr<Storage>> storages;
};

CudaBackend::CudaBackend(const CudaGpuSpec& spec)
    : physical_of_logical_(spec.physical_of_logical),
      context_(std::make_unique<CudaContext>(Device::cuda(spec.logical), spec.gpu.index, spec.capacity)),
      spans_(std::make_unique<StreamSpans>(context_->cuda_device())),
      compute_(std::make_unique<StreamLane>(device().str(), device().str() + " compute", context_->stream(), *spans_,
                                            /*timed=*/true)),
      copy_in_(std::make_unique<StreamLane>(device().str() + " copies in", device().str() + " copies in",
                                            context_->copy_in_stream(), *spans_, false)),
      copy_out_(std::make_unique<StreamLane>(device().str() + " copies out", device().str() + " copies out",
                                             context_->copy_out_stream(), *spans_, false)),
      pinned_(std::make_unique<PinnedAllocator>()) {}

CudaBackend::~CudaBackend() {
  try {
    synchronize();
  } catch (...) {
    // an error nobody synchronised for; a destructor has no one to tell
  }
  collect_trace_spans();  // the last steps' work, which no step's end collected
  std::lock_guard lock(held_mutex_);
  held_.clear();
}

Allocator& CudaBackend::allocator() { return context_->allocator(); }

Allocator& CudaBackend::host_allocator() { return *pinned_; }

Lane& CudaBackend::lane(LaneKind kind) {
  switch (kind) {
    case LaneKind::compute: return *compute_;
    case LaneKind::copy_in: return *copy_in_;
    case LaneKind::copy_out: return *copy_out_;
  }
  return *compute_;
}

StreamLane& CudaBackend::own(Lane& lane) {
  TANDEM_ASSERT(&lane == compute_.get() || &lane == copy_in_.get() || &lane == copy_out_.get(),
                "work for " + device().str() + " on a lane of another device");
  return static_cast<StreamLane&>(lane);
}

void CudaBackend::release_finished() {
  std::lock_guard lock(held_mutex_);
  while (!held_.empty() && held_.front().done.done()) held_.pop_front();
}

void CudaBackend::hold_until_done(StreamLane& lane, std::vector<std::shared_ptr<Storage>> storages) {
  DeviceEvent done = lane.record();
  release_finished();
  std::lock_guard lock(held_mutex_);
  held_.push_back(Held{std::move(done), std::move(storages)});
}

void CudaBackend::copy(Lane& given, const BufferRef& dst, const BufferRef& src, size_t bytes,
                       std::shared_ptr<TaskGroup>) {
  StreamLane& lane = own(given);
  TANDEM_ASSERT(dst.storage && src.storage, "copy on " + device().str() + " without storage");
  const Device to = dst.storage->device(), from = src.storage->device();
  TANDEM_ASSERT(to == device() || from == device(),
                "copy on " + device().str() + " from " + from.str() + " to " + to.str() + ": neither end is this device");
  TANDEM_ASSERT(dst.offset <= dst.storage->bytes() && bytes <= dst.storage->bytes() - dst.offset,
                "copy of " + std::to_string(bytes) + " bytes runs past its destination");
  TANDEM_ASSERT(src.offset <= src.storage->bytes() && bytes <= src.storage->bytes() - src.offset,
                "copy of " + std::to_string(bytes) + " bytes runs past its source");
  if (bytes == 0) return;
  DeviceGuard guard(lane.cuda_device());
  auto traced = lane.traced();
  const cudaStream_t stream = lane.stream();
  if (from == Device::cpu()) {
    if (is_pinned(at(src))) {
      copy_to_device_async(at(dst), at(src), bytes, stream);
      hold_until_done(lane, {dst.storage, src.storage});
    } else {  // staged: the source is free on return
      copy_to_device(at(dst), at(src), bytes, stream);
      hold_until_done(lane, {dst.storage});
    }
  } else if (to == Device::cpu()) {
    if (is_pinned(at(dst))) {
      copy_to_host_async(at(dst), at(src), bytes, stream);
      hold_until_done(lane, {dst.storage, src.storage});
    } else {  // staged: returns once the bytes are there, in stream order
      copy_to_host(at(dst), at(src), bytes, stream);
    }
  } else {  // between logical GPUs: the same physical one, or a peer
    const int to_gpu = physical_of_logical_.at(static_cast<size_t>(to.index));
    const int from_gpu = physical_of_logical_.at(static_cast<size_t>(from.index));
    copy_peer(at(dst), to_gpu, at(src), from_gpu, bytes, stream);
    hold_until_done(lane, {dst.storage, src.storage});
  }
  if (to == device() && from != device()) bytes_in_.fetch_add(bytes), copies_in_.fetch_add(1);
  if (from == device() && to != device()) bytes_out_.fetch_add(bytes), copies_out_.fetch_add(1);
}

KernelChoice CudaBackend::make_kernel(const KernelSpec& spec) {
  DeviceGuard guard(context_->cuda_device());
  CudaKernelChoice choice = make_cuda_kernel(*context_, spec);
  return {std::move(choice.kernel), std::move(choice.unsupported)};
}

std::string CudaBackend::cannot_run(const KernelSpec& spec) const { return cuda_cannot_run(spec); }

void CudaBackend::zero(Lane& given, const Tensor& t) {
  StreamLane& lane = own(given);
  if (t.nbytes() == 0) return;
  DeviceGuard guard(lane.cuda_device());
  auto traced = lane.traced();
  TANDEM_CUDA_CHECK(cudaMemsetAsync(t.raw_data(), 0, t.nbytes(), lane.stream()));
  if (&lane != compute_.get()) hold_until_done(lane, {t.storage()});
}

void CudaBackend::accumulate(Lane& given, const Tensor& into, const Tensor& from) {
  StreamLane& lane = own(given);
  TANDEM_ASSERT(into.numel() == from.numel(), "accumulate of tensors of different sizes");
  DeviceGuard guard(lane.cuda_device());
  auto traced = lane.traced();
  cuda::accumulate(into.data<float>(), from.data<float>(), 1.f, into.numel(), lane.stream());
  if (&lane != compute_.get()) hold_until_done(lane, {into.storage(), from.storage()});
}

void CudaBackend::scale(Lane& given, const Tensor& t, float factor) {
  StreamLane& lane = own(given);
  DeviceGuard guard(lane.cuda_device());
  auto traced = lane.traced();
  cuda::scale(t.data<float>(), factor, t.numel(), lane.stream());
  if (&lane != compute_.get()) hold_until_done(lane, {t.storage()});
}

void CudaBackend::loss(Lane& given, const LossSpec& spec, const Tensor& input, const Tensor& target,
                       const Tensor& grad_input, LossValue* result) {
  StreamLane& lane = own(given);
  TANDEM_ASSERT(&lane == compute_.get(), "the loss runs on " + device().str() + "'s compute lane");
  DeviceGuard guard(lane.cuda_device());
  auto traced = lane.traced();
  Tensor grad = grad_input;
  *result = compute_loss(*context_, spec, input, target, grad.defined() ? &grad : nullptr);  // reads the value back
}

void CudaBackend::sgd_update(Lane& given, const optim_detail::SgdScalars& s, const Tensor& p, const Tensor& g,
                             const Tensor& buf, bool first) {
  StreamLane& lane = own(given);
  DeviceGuard guard(lane.cuda_device());
  auto traced = lane.traced();
  cuda::sgd_update(s, p.data<float>(), g.data<float>(), buf.defined() ? buf.data<float>() : nullptr, p.numel(), first,
                   lane.stream());
  if (&lane != compute_.get()) hold_until_done(lane, {p.storage(), g.storage(), buf.defined() ? buf.storage() : nullptr});
}

void CudaBackend::adam_update(Lane& given, const optim_detail::AdamScalars& s, const Tensor& p, const Tensor& g,
                              const Tensor& m, const Tensor& v) {
  StreamLane& lane = own(given);
  DeviceGuard guard(lane.cuda_device());
  auto traced = lane.traced();
  cuda::adam_update(s, p.data<float>(), g.data<float>(), m.data<float>(), v.data<float>(), p.numel(), lane.stream());
  if (&lane != compute_.get()) hold_until_done(lane, {p.storage(), g.storage(), m.storage(), v.storage()});
}

void CudaBackend::sum_of_squares(Lane& given, const Tensor& t, double* result) {
  StreamLane& lane = own(given);
  DeviceGuard guard(lane.cuda_device());
  auto traced = lane.traced();
  const int64_t blocks = norm_blocks(t.numel());
  *result = 0;
  if (blocks == 0) return;
  // the blocks' sums, one double each (a float32 tensor of twice the elements holds them)
  Tensor partial = Tensor::empty({2 * blocks}, DType::float32, context_->allocator());
  block_sums_of_squares(t.data<float>(), t.numel(), static_cast<double*>(partial.raw_data()), lane.stream());
  std::vector<double> host(static_cast<size_t>(blocks));
  copy_to_host(host.data(), partial.raw_data(), host.size() * sizeof(double), lane.stream());
  for (double s : host) *result += s;  // in block order, as the host adds them
}

bool CudaBackend::scale_checking_finite(Lane& given, std::span<const Tensor> tensors, float factor) {
  StreamLane& lane = own(given);
  DeviceGuard guard(lane.cuda_device());
  auto traced = lane.traced();
  if (tensors.empty()) return true;
  Tensor flag = Tensor::empty({1}, DType::float32, context_->allocator());  // an int's 4 bytes
  return cuda::scale_checking_finite(tensors, factor, static_cast<int*>(flag.raw_data()), lane.stream());
}

namespace {

/// The members as NCCL's buffers, on their compute streams; empty when one is not a GPU of
/// this backend or not float32.
std::vector<CollectiveBuffer> collective_buffers(std::span<const CollectiveMember> members) {
  std::vector<CollectiveBuffer> buffers;
  for (const CollectiveMember& m : members) {
    auto* gpu = dynamic_cast<CudaBackend*>(m.backend);
    if (!gpu || m.tensor.dtype() != DType::float32 || m.tensor.numel() != members[0].tensor.numel()) return {};
    buffers.push_back(CollectiveBuffer{&gpu->context(), m.tensor.data<float>(), nullptr});
  }
  return buffers;
}

}  // namespace

bool CudaBackend::all_reduce_sum(std::span<const CollectiveMember> members) {
  std::vector<CollectiveBuffer> buffers = collective_buffers(members);
  if (buffers.empty()) return false;
  cuda::all_reduce_sum(buffers, members[0].tensor.numel());
  return true;
}

bool CudaBackend::broadcast(std::span<const CollectiveMember> members, size_t root) {
  std::vector<CollectiveBuffer> buffers = collective_buffers(members);
  if (buffers.empty()) return false;
  cuda::broadcast(buffers, members[0].tensor.numel(), root);
  return true;
}

std::string CudaBackend::make_inter_process_id() { return NcclInterProcessCommunicator::make_id(); }

std::unique_ptr<InterProcessCommunicator> CudaBackend::join_inter_process(const InterProcessSetup& setup) {
  return std::make_unique<NcclInterProcessCommunicator>(*this, setup);
}

cudaStream_t CudaBackend::stream_of(Lane& lane) { return own(lane).stream(); }

void CudaBackend::trace_device_work(DeviceSpanSink* sink) { spans_->trace_to(sink); }

void CudaBackend::collect_trace_spans() {
  try {
    spans_->collect();
  } catch (...) {
    // a failed query of an event: the error is the work's, and its lane's next
    // synchronize() reports it; the trace goes without these spans
  }
}

DeviceCounters CudaBackend::counters() const {
  DeviceCounters c;
  c.bytes_in = bytes_in_.load();
  c.bytes_out = bytes_out_.load();
  c.copies_in = copies_in_.load();
  c.copies_out = copies_out_.load();
  c.busy_seconds = compute_->busy_seconds();
  return c;
}

}  // namespace tandem::cuda
