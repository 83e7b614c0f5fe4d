#include "backends/cuda/stream.h"

#include <utility>

#include "backends/cuda/device_guard.h"

namespace tandem::cuda {

Event::Event(int device, bool timing) : device_(device) {
  DeviceGuard guard(device);
  TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

Event::~Event() {
  if (event_) cudaEventDestroy(event_);
}

Event::Event(Event&& other) noexcept
    : device_(other.device_), event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_) cudaEventDestroy(event_);
    device_ = other.device_;
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void Event::record(cudaStream_t stream) { TANDEM_CUDA_CHECK(cudaEventRecord(event_, stream)); }

bool Event::done() const {
  cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) return false;
  TANDEM_CUDA_CHECK(status);
  return true;
}

void Event::synchronize() const { TANDEM_CUDA_CHECK(cudaEventSynchronize(event_)); }

float Event::milliseconds_since(const Event& start) const {
  float ms = 0;
  TANDEM_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
  return ms;
}

Stream::Stream(int device, int priority) : device_(device) {
  DeviceGuard guard(device);
  TANDEM_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, priority));
}

Stream::~Stream() {
  if (stream_) cudaStreamDestroy(stream_);  // returns at once; queued work still runs
}

Stream::Stream(Stream&& other) noexcept
    : device_(other.device_), stream_(std::exchange(other.stream_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_) cudaStreamDestroy(stream_);
    device_ = other.device_;
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

void Stream::wait(const Event& event) { TANDEM_CUDA_CHECK(cudaStreamWaitEvent(stream_, event.get(), 0)); }

void Stream::wait(const Stream& other) { wait(other.record()); }

Event Stream::record() const {
  Event event(device_);
  event.record(stream_);
  return event;
}

void Stream::synchronize() const { TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

}  // namespace tandem::cuda
