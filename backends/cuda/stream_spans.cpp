#include "backends/cuda/stream_spans.h"

#include "backends/cuda/device_guard.h"

namespace tandem::cuda {

void StreamSpans::trace_to(DeviceSpanSink* sink) {
  std::lock_guard lock(mutex_);
  sink_ = sink;
}

void StreamSpans::anchor(cudaStream_t stream) {
  reference_.emplace(device_, /*timing=*/true);
  reference_->record(stream);
  reference_->synchronize();
  reference_host_ = Trace::Clock::now();
}

StreamSpans::Scope::Scope(StreamSpans& spans, cudaStream_t stream, const std::string& track)
    : spans_(spans), stream_(stream), track_(track) {
  std::lock_guard lock(spans_.mutex_);
  if (!spans_.sink_) return;
  DeviceGuard guard(spans_.device_);
  if (!spans_.reference_) spans_.anchor(stream_);
  if (spans_.free_.empty()) {  // the pool grows only while more work is in flight than ever before
    spans_.pool_.emplace_back(Event(spans_.device_, /*timing=*/true), Event(spans_.device_, /*timing=*/true));
    spans_.free_.push_back(spans_.pool_.size() - 1);
  }
  pair_ = spans_.free_.back();
  spans_.free_.pop_back();
  spans_.pool_[*pair_].first.record(stream_);
}

StreamSpans::Scope::~Scope() {
  if (!pair_) return;
  std::lock_guard lock(spans_.mutex_);
  try {
    DeviceGuard guard(spans_.device_);
    spans_.pool_[*pair_].second.record(stream_);
    DeviceSpanSink* sink = spans_.sink_;
    spans_.pending_.push_back(Pending{*pair_, track_, sink ? sink->label() : "task", sink ? sink->args() : ""});
  } catch (...) {
    // the stream failed (its next synchronize() says how): the span goes, its pair is free
    spans_.free_.push_back(*pair_);
  }
}

void StreamSpans::collect() {
  std::lock_guard lock(mutex_);
  if (!sink_ || !reference_) return;
  DeviceGuard guard(device_);
  std::deque<Pending> still;
  for (Pending& p : pending_) {
    auto& [start, stop] = pool_[p.pair];
    if (!stop.done()) {  // later work of the same stream has not run either
      still.push_back(std::move(p));
      continue;
    }
    const double from = start.milliseconds_since(*reference_), to = stop.milliseconds_since(*reference_);
    sink_->add(p.track, p.name, after_reference(reference_host_, from), after_reference(reference_host_, to), p.args);
    free_.push_back(p.pair);
  }
  pending_ = std::move(still);
}

}  // namespace tandem::cuda
