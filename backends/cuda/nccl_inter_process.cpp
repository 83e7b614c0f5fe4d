#include "backends/cuda/nccl_inter_process.h"

#include <cstdio>
#include <cstring>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/device_guard.h"
#include "backends/trace.h"
#include "core/error.h"

namespace tandem::cuda {

namespace {

std::string seconds_text(std::chrono::milliseconds t) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", static_cast<double>(t.count()) / 1000.0);
  return text;
}

std::string nccl_text(ncclResult_t status) {
  const char* detail = ncclGetLastError(nullptr);
  return std::string(ncclGetErrorString(status)) + (detail && *detail ? std::string(": ") + detail : std::string());
}

}  // namespace

std::string NcclInterProcessCommunicator::make_id() {
  ncclUniqueId id;
  const ncclResult_t status = ncclGetUniqueId(&id);
  if (status != ncclSuccess) throw UserError("NCCL could not make a communicator id (ncclGetUniqueId): " + nccl_text(status));
  return std::string(id.internal, NCCL_UNIQUE_ID_BYTES);
}

NcclInterProcessCommunicator::NcclInterProcessCommunicator(CudaBackend& backend, const InterProcessSetup& setup)
    : backend_(backend),
      device_(backend.device()),
      cuda_device_(backend.context().cuda_device()),
      rank_(setup.rank),
      size_(setup.size),
      timeout_(setup.timeout) {
  const std::string where = device_.str() + " of rank " + std::to_string(rank_);
  if (setup.id.size() != NCCL_UNIQUE_ID_BYTES)
    throw UserError(where + ": the communicator id is not NCCL's (rank 0's devices are of another kind)");
  ncclUniqueId id;
  std::memcpy(id.internal, setup.id.data(), NCCL_UNIQUE_ID_BYTES);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every call returns; the state is polled with a deadline
  DeviceGuard guard(cuda_device_);
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  ncclResult_t status = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
  {
    std::lock_guard lock(mutex_);
    status = settle(status, deadline);
  }
  if (status != ncclSuccess) {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    throw UserError(where + ": NCCL could not join the communicator between processes (" +
                    (status == ncclInProgress ? "not every rank joined within " + seconds_text(timeout_) +
                                                    " s, the collective timeout, --collective-timeout"
                                              : nccl_text(status)) +
                    ")");
  }
  watchdog_ = std::thread([this] { watch(); });
}

NcclInterProcessCommunicator::~NcclInterProcessCommunicator() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  watchdog_.join();
  std::lock_guard lock(mutex_);
  if (!comm_) return;  // aborted already
  try {
    // flush what is queued, within the deadline; else give up on it
    DeviceGuard guard(cuda_device_);
    const ncclResult_t finalized = settle(ncclCommFinalize(comm_), std::chrono::steady_clock::now() + timeout_);
    if (finalized == ncclSuccess) {
      ncclCommDestroy(comm_);
      return;
    }
  } catch (...) {  // a CUDA error making the device current: a destructor has no one to tell
  }
  ncclCommAbort(comm_);
}

ncclResult_t NcclInterProcessCommunicator::settle(ncclResult_t status, std::chrono::steady_clock::time_point deadline) {
  while (status == ncclInProgress) {
    if (std::chrono::steady_clock::now() > deadline) return ncclInProgress;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (comm_ && ncclCommGetAsyncError(comm_, &status) != ncclSuccess) return ncclInternalError;
  }
  return status;
}

void NcclInterProcessCommunicator::queue(Lane& lane, const std::string& what, size_t bytes,
                                         const std::function<void(cudaStream_t)>& launch) {
  const cudaStream_t stream = backend_.stream_of(lane);
  lane.submit([&] {  // a stream lane runs it now, with the GPU current
    std::lock_guard lock(mutex_);
    if (aborted_) return;  // ends without its result: error() says why
    Queued q{what, bytes, Event(cuda_device_), Event(cuda_device_)};
    q.started.record(stream);
    ncclResult_t status = ncclGroupStart();
    if (status == ncclSuccess) launch(stream);
    if (status == ncclSuccess) status = ncclGroupEnd();
    status = settle(status, std::chrono::steady_clock::now() + timeout_);
    if (status != ncclSuccess) {
      fail(what + " on " + device_.str() + " could not be queued: " +
           (status == ncclInProgress ? "NCCL did not take it within the collective timeout" : nccl_text(status)));
      return;
    }
    q.finished.record(stream);
    queued_.push_back(std::move(q));
  });
  wake_.notify_all();
}

void NcclInterProcessCommunicator::all_reduce_sum(Lane& lane, std::span<const Tensor> tensors, const std::string& what) {
  size_t bytes = 0;
  for (const Tensor& t : tensors) {
    TANDEM_ASSERT(t.device() == device_ && t.dtype() == DType::float32,
                  what + ": a collective of " + device_.str() + " takes its float32 tensors");
    bytes += t.nbytes();
  }
  std::vector<Tensor> held(tensors.begin(), tensors.end());
  queue(lane, what, bytes, [this, &held](cudaStream_t stream) {
    for (const Tensor& t : held)  // in place; within the group, one launch
      ncclAllReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()), ncclFloat32, ncclSum, comm_, stream);
  });
}

void NcclInterProcessCommunicator::broadcast(Lane& lane, const Tensor& tensor, int root, const std::string& what) {
  TANDEM_ASSERT(tensor.device() == device_, what + ": a collective of " + device_.str() + " takes its tensors");
  TANDEM_ASSERT(root >= 0 && root < size_, what + ": no rank " + std::to_string(root));
  queue(lane, what, tensor.nbytes(), [this, &tensor, root](cudaStream_t stream) {
    ncclBroadcast(tensor.raw_data(), tensor.raw_data(), tensor.nbytes(), ncclUint8, root, comm_, stream);
  });
}

void NcclInterProcessCommunicator::fail(const std::string& message) {
  if (aborted_) return;
  aborted_ = true;
  if (error_.empty()) error_ = message;
  // NCCL's kernels waiting for the missing ranks return; the streams go on. The handle is
  // gone with it: nothing calls NCCL on it again.
  ncclCommAbort(comm_);
  comm_ = nullptr;
  queued_.clear();
}

void NcclInterProcessCommunicator::watch() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, std::chrono::milliseconds(1), [&] { return stopping_; });
    if (aborted_) continue;
    try {
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        fail((queued_.empty() ? std::string("a collective") : queued_.front().what) + " on " + device_.str() +
             " failed: NCCL: " + nccl_text(async));
        continue;
      }
      const auto now = std::chrono::steady_clock::now();
      while (!queued_.empty()) {
        Queued& q = queued_.front();
        if (!q.seen_reached && q.started.done()) {
          q.seen_reached = true;
          q.reached = now;
        }
        if (q.finished.done()) {
          ++counters_.collectives;
          counters_.bytes += q.bytes;
          if (Trace* trace = Trace::active())  // as the host saw it: from reached to finished
            trace->add("collectives (" + device_.str() + " between processes)", q.what, q.reached, now, 1,
                       "{\"bytes\": " + std::to_string(q.bytes) + "}");
          queued_.pop_front();
          continue;
        }
        if (q.seen_reached && now - q.reached > timeout_)
          fail(q.what + " on " + device_.str() + " did not finish within " + seconds_text(timeout_) +
               " s (the collective timeout, --collective-timeout)");
        break;  // in stream order: the next has not finished either
      }
    } catch (const std::exception& e) {  // a CUDA error polling an event
      fail("the communicator between processes of " + device_.str() + " failed: " + e.what());
    }
  }
}

std::string NcclInterProcessCommunicator::error() {
  std::lock_guard lock(mutex_);
  return error_;
}

void NcclInterProcessCommunicator::abort() {
  std::lock_guard lock(mutex_);
  fail("the communicator between processes of " + device_.str() + " was aborted");
}

NcclInterProcessCommunicator::Counters NcclInterProcessCommunicator::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

}  // namespace tandem::cuda
