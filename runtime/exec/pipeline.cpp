#include "runtime/exec/pipeline.h"

#include <algorithm>

#include "backends/trace.h"
#include "runtime/exec/training_executor.h"

namespace tandem {

void PipelineWindow::add(Device device, size_t start, size_t budget) {
  for (Entry& e : devices)
    if (e.device == device) {
      e.budget += budget;
      return;
    }
  devices.push_back({device, start, budget});
}

const PipelineWindow::Entry* PipelineWindow::find(Device device) const {
  for (const Entry& e : devices)
    if (e.device == device) return &e;
  return nullptr;
}

namespace {

/// Every micro-batch's executor reported on the same window (the whole step): the devices'
/// own counters are the same in each, and each counted on the host's side the copies it
/// made (uploads, gradients brought down). One report of the step: the first executor's,
/// plus what each other one counted.
std::vector<DeviceReport> merge_reports(const std::vector<PipelinedMicroBatch>& parts) {
  std::vector<DeviceReport> merged = parts.front().executor->report();
  for (size_t k = 1; k < parts.size(); ++k) {
    const std::vector<DeviceReport> full = parts[k].executor->report();
    for (const DeviceReport& counted : parts[k].executor->counted_by_host()) {
      auto it = std::find_if(merged.begin(), merged.end(), [&](const DeviceReport& m) { return m.device == counted.device; });
      if (it == merged.end()) {  // a device the first micro-batch's plan did not use: this report's whole
        merged.push_back(*std::find_if(full.begin(), full.end(), [&](const DeviceReport& r) { return r.device == counted.device; }));
        continue;
      }
      it->bytes_in += counted.bytes_in;
      it->bytes_out += counted.bytes_out;
      it->copies_in += counted.copies_in;
      it->copies_out += counted.copies_out;
    }
  }
  return merged;
}

/// The step's loss from its micro-batches': each weighted by its share.
LossValue combine_losses(const std::vector<PipelinedMicroBatch>& parts) {
  LossValue total;
  for (const PipelinedMicroBatch& p : parts) {
    const LossValue& v = p.executor->last_loss();
    total.loss += p.weight * v.loss;
    total.counted += v.counted;
    total.correct += v.correct;
    total.scores.insert(total.scores.end(), v.scores.begin(), v.scores.end());
    total.labels.insert(total.labels.end(), v.labels.begin(), v.labels.end());
  }
  return total;
}

/// The micro-batches' executors are in the step while it runs, and alone again however it ends.
class StepMembership {
 public:
  StepMembership(std::vector<PipelinedMicroBatch>& parts, const PipelineWindow& window) : parts_(parts) {
    for (PipelinedMicroBatch& p : parts_) p.executor->join_pipeline(&window);
  }
  ~StepMembership() {
    for (PipelinedMicroBatch& p : parts_) p.executor->join_pipeline(nullptr);
  }
  StepMembership(const StepMembership&) = delete;
  StepMembership& operator=(const StepMembership&) = delete;

 private:
  std::vector<PipelinedMicroBatch>& parts_;
};

}  // namespace

LossValue run_pipelined_step(std::vector<PipelinedMicroBatch>& parts, const LossSpec& loss, uint64_t params_version,
                             const GradientReady* ready, float loss_scale, std::vector<DeviceReport>& report,
                             const std::function<void()>& meanwhile, const TableUpdates* tables) {
  PipelineWindow window;
  for (const PipelinedMicroBatch& p : parts) p.executor->add_to_window(window);
  StepMembership membership(parts, window);
  try {
    for (PipelinedMicroBatch& p : parts) p.executor->begin_report();
    auto forward = [&](size_t k) {
      HostSpan span("micro-batch forward submitted");
      parts[k].executor->forward(parts[k].inputs, parts[k].seed, params_version);
    };
    auto loss_and_backward = [&](size_t k) {
      TrainingExecutor& t = *parts[k].executor;
      t.loss(loss, parts[k].target, /*with_gradient=*/true);
      // the micro-batch's gradient as its share of the step's: the sum is the whole batch's
      const float factor = static_cast<float>(parts[k].weight) * loss_scale;
      if (factor != 1.0f) t.scale_loss_gradients(factor);
      if (meanwhile && k + 1 == parts.size()) {
        HostSpan span("submitted meanwhile");
        meanwhile();
      }
      HostSpan span("micro-batch backward submitted");
      // every earlier micro-batch's contribution is ahead of the last one's on each lane
      // (so the last one's backward completes each gradient, and may update its table)
      const bool last = k + 1 == parts.size();
      if (!last || !tables) return t.backward(t.loss_seeds(), last ? ready : nullptr);
      // the tables' updates read every micro-batch's loss, written on the loss's lane
      TableUpdates step_tables = *tables;
      step_tables.steps.clear();  // the earlier micro-batches wrote row gradients: updated after backward
      for (PipelinedMicroBatch& part : parts) {
        step_tables.losses.push_back(&part.executor->last_loss());
        step_tables.loss_written.push_back(part.executor->loss_written());
      }
      t.backward(t.loss_seeds(), ready, &step_tables);
    };
    // 1F1B: as many micro-batches in flight as the plan has segments, then each backward
    // submitted makes room for the next forward
    const size_t in_flight = std::clamp<size_t>(parts.front().executor->plan().segments.size(), 1, parts.size());
    for (size_t k = 0; k < in_flight; ++k) forward(k);
    for (size_t k = 0; k < parts.size(); ++k) {
      loss_and_backward(k);
      if (k + in_flight < parts.size()) forward(k + in_flight);
    }
    for (PipelinedMicroBatch& p : parts) p.executor->wait_for_lanes();  // the optimizer reads the gradients
  } catch (...) {
    for (PipelinedMicroBatch& p : parts) p.executor->release_step_buffers();  // nothing of the step stays
    throw;
  }
  for (PipelinedMicroBatch& p : parts) p.executor->finish_report();
  report = merge_reports(parts);
  return combine_losses(parts);
}

}  // namespace tandem
