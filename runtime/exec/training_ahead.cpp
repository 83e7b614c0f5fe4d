// The next batch ahead (training_executor.h, Note [the next batch ahead]): what of a
// forward can be submitted before the update that precedes it, and the lookups redone
// after that update for the rows it changed.
#include <algorithm>
#include <cstdint>

#include "backends/trace.h"
#include "core/error.h"
#include "runtime/exec/node_kernels.h"
#include "runtime/exec/schedule.h"
#include "runtime/exec/training_executor.h"

namespace tandem {

namespace {

/// What a slot holds when submitted ahead: nothing yet, a value the inputs alone fix (an
/// input, a view of one, its upload), or a lookup an update may change (or a view of one).
enum class AheadValue : uint8_t { none, input, lookup };

/// Whether every trainable parameter of `node` is in `tables`, and it has no buffers (a
/// table's lookup has one parameter, its weight).
bool updates_listed_rows_only(const Node& node, const std::set<std::string>& tables) {
  if (node.params.empty()) return false;
  return std::all_of(node.params.begin(), node.params.end(),
                     [&](const ParamSpec& p) { return p.trainable && tables.count(p.name); });
}

}  // namespace

bool TrainingExecutor::look_ahead(const std::vector<Tensor>& inputs, const std::set<std::string>& tables,
                                  uint64_t params_version) {
  drop_ahead();
  Schedule& s = *schedule_;
  std::vector<AheadValue> held(s.slot_keys.size(), AheadValue::none);
  for (int slot : s.input_slots) held[slot] = AheadValue::input;
  Ahead ahead;
  ahead.inputs = inputs;
  ahead.done.assign(s.actions.size(), false);
  ahead.params_version = params_version;
  bool any = false;
  for (size_t i = 0; i < s.actions.size(); ++i) {
    const ScheduleAction& a = s.actions[i];
    if (a.kind == ScheduleAction::Kind::copy) {
      // an upload of a looked-up value would have to go again after the update: forward's
      if (held[a.src_slot] != AheadValue::input) continue;
      held[a.dst_slot] = AheadValue::input;
    } else if (!a.kernel) {
      if (held[a.in_slots[0]] == AheadValue::none) continue;
      held[a.out_slot] = held[a.in_slots[0]];
    } else {
      const bool lookup = a.device == 0 && a.kernel->looks_up_rows() && updates_listed_rows_only(*a.node, tables) &&
                          std::all_of(a.in_slots.begin(), a.in_slots.end(),
                                      [&](int slot) { return held[slot] == AheadValue::input; });
      if (!lookup) continue;
      held[a.out_slot] = AheadValue::lookup;
    }
    ahead.done[i] = true;
    any = true;
  }
  if (!any) return false;
  // A value whose last reader runs ahead may still have a reader that does not (an upload
  // of a lookup, beside a view of it that runs ahead): it stays for forward to read.
  std::vector<bool> read_in_forward(s.slot_keys.size(), false);
  for (size_t i = 0; i < s.actions.size(); ++i) {
    if (ahead.done[i]) continue;
    const ScheduleAction& a = s.actions[i];
    if (a.kind == ScheduleAction::Kind::copy) read_in_forward[a.src_slot] = true;
    else
      for (int slot : a.in_slots) read_in_forward[slot] = true;
  }

  {  // on an error, every buffer of the step goes back to its pool
    ReleaseOnError release(*this);
    // what this executor takes from here on is measured from now: the step under way holds
    // its own buffers beside
    for (size_t d = 0; d < s.devices.size(); ++d) step_start_[d] = s.devices[d]->backend->allocator().current_bytes();
    for (Tensor& t : values_) t = Tensor();
    for (size_t i = 0; i < graph_.inputs.size(); ++i) values_[s.input_slots[i]] = inputs[i];
    for (size_t i = 0; i < s.actions.size(); ++i) {
      if (!ahead.done[i]) continue;
      // a lookup draws nothing at random: no seed
      const Tensor out = run_forward_action(i, "forward ahead", /*training=*/true, 0, params_version, nullptr);
      if (out.defined()) {  // a lookup: kept, with what it read, to look up again after the update
        std::vector<Tensor> in;
        for (int slot : s.actions[i].in_slots) in.push_back(values_[slot]);
        ahead.lookups.push_back({static_cast<int>(i), std::move(in), out});
      }
      for (int slot : release_after_forward_[i])
        if (!read_in_forward[slot]) values_[slot] = Tensor();
    }
  }
  ahead_ = std::move(ahead);
  return true;
}

void TrainingExecutor::look_up_again(const std::function<const TouchedRows*(const std::string&)>& changed_rows,
                                     uint64_t params_version) {
  if (!ahead_) return;
  Schedule& s = *schedule_;
  ReleaseOnError release(*this);
  for (const Ahead::Lookup& lookup : ahead_->lookups) {
    const ScheduleAction& a = s.actions[lookup.action];
    const TouchedRows* rows = changed_rows(a.node->params[0].name);  // a lookup's one parameter, its table
    if (!rows || rows->count() == 0) continue;
    Tensor out = lookup.out;
    std::vector<Tensor> in = lookup.inputs;
    if (rows->all()) {  // every row may have changed: the lookup again, whole
      TraceLabel label(a.context, "looked up again");
      s.compute_lane(a).submit([&a, in = std::move(in), out, params_version]() mutable {
        forward_naming_layer(*a.kernel, KernelArgs{in, a.params, {&out, 1}, true, 0, params_version}, a.context);
      });
    } else {
      const std::span<const int64_t> listed = rows->list();
      std::vector<int64_t> changed(listed.begin(), listed.end());  // the gradient's rows are cleared next step
      TraceLabel label(a.context, "looked up again");
      s.compute_lane(a).submit([&a, in = std::move(in), out, changed = std::move(changed), params_version]() mutable {
        a.kernel->look_up_again(KernelArgs{in, a.params, {&out, 1}, true, 0, params_version}, changed);
      });
    }
    after_submit();
  }
  ahead_->params_version = params_version;
}

bool TrainingExecutor::ahead_for(const std::vector<Tensor>& inputs, uint64_t params_version) const {
  if (!ahead_ || ahead_->params_version != params_version || inputs.size() != ahead_->inputs.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& a = inputs[i];
    const Tensor& b = ahead_->inputs[i];
    if (a.raw_data() != b.raw_data() || a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  }
  return true;
}

void TrainingExecutor::drop_ahead() noexcept {
  if (!ahead_) return;
  ahead_.reset();
  // the lanes' tasks hold what they still read; their buffers return to the pools after them
  for (Tensor& t : values_) t = Tensor();
}

}  // namespace tandem
