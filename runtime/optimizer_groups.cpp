#include "runtime/optimizer_groups.h"

#include <algorithm>
#include <set>

#include "placement/place.h"

namespace tandem {
namespace {

/// The layer path of parameter `name`: "tables.user" of "tables.user.weight".
std::string layer_of(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(0, dot);
}

std::string where(const OptimizerGroup& g, size_t pattern) {
  return pattern < g.params_at.size() && !g.params_at[pattern].empty() ? g.params_at[pattern] + ": " : "";
}

bool takes_only_row_gradients(const std::string& optimizer) { return optimizer == "sparse_adam"; }

}  // namespace

OptimizerGroups::OptimizerGroups(const TrainingSpec& spec, std::span<const std::string> names,
                                 std::span<const Tensor> params, std::span<const Tensor> grads,
                                 std::span<TouchedRows* const> rows, bool check_patterns) {
  const std::vector<OptimizerGroup>& declared = spec.optimizer_groups;
  groups_.resize(declared.size() + 1);
  groups_[0].config = spec.optimizer;
  for (size_t g = 0; g < declared.size(); ++g) groups_[g + 1].config = declared[g].optimizer;
  std::vector<std::vector<bool>> used(declared.size());
  for (size_t g = 0; g < declared.size(); ++g) used[g].assign(declared[g].params.size(), false);
  for (size_t i = 0; i < names.size(); ++i) {
    size_t chosen = 0;
    for (size_t g = 0; g < declared.size() && chosen == 0; ++g)
      for (size_t k = 0; k < declared[g].params.size(); ++k)
        if (glob_match(declared[g].params[k], names[i]) || glob_match(declared[g].params[k], layer_of(names[i]))) {
          used[g][k] = true;
          chosen = g + 1;
        }
    Group& group = groups_[chosen];
    group.names.push_back(names[i]);
    group.params.push_back(params[i]);
    group.grads.push_back(grads[i]);
    group.rows.push_back(rows[i]);
  }
  if (check_patterns)
    for (size_t g = 0; g < declared.size(); ++g)
      for (size_t k = 0; k < declared[g].params.size(); ++k)
        if (!used[g][k]) {
          std::string known;
          for (size_t i = 0; i < names.size() && i < 8; ++i) known += (i ? ", " : "") + names[i];
          if (names.size() > 8) known += ", ...";
          throw UserError(where(declared[g], k) + "train: optimizer_groups: params pattern '" + declared[g].params[k] +
                          "' matches no trained parameter (patterns match parameter names or layer paths; the " +
                          "trained parameters are " + known + ")");
        }
  for (Group& group : groups_) {
    if (group.names.empty()) continue;
    group.optimizer = make_optimizer(group.config);
    for (size_t i = 0; i < group.names.size(); ++i) {
      const bool row_gradient = group.rows[i] && group.rows[i]->holds_values();
      const std::string& o = group.config.name;
      if (row_gradient && !group.optimizer->takes_row_gradients())
        throw UserError("parameter '" + group.names[i] + "' belongs to a table declared sparse: true, whose gradient " +
                        "is kept as the rows its batches looked up; only sgd without momentum and weight_decay, " +
                        "adagrad without weight_decay, rowwise_adagrad and sparse_adam can update such a gradient, " +
                        "and this model trains with " + o +
                        (o == "sgd" ? " with momentum or weight_decay" : o == "adagrad" ? " with weight_decay" : "") +
                        ". Give the table one of those in train: optimizer_groups (docs/training.md). " +
                        "Drop sparse: true to give the table a dense gradient (torch's optimizers refuse sparse gradients likewise)");
      if (!row_gradient && takes_only_row_gradients(o))
        throw UserError("parameter '" + group.names[i] + "' has a dense gradient, and sparse_adam updates the row " +
                        "gradients of tables declared sparse: true only (torch.optim.SparseAdam refuses dense " +
                        "gradients); give the other parameters another optimizer (train: optimizer:, or a group " +
                        "of train: optimizer_groups)");
    }
  }
}

void OptimizerGroups::step(ParameterDevices& devices, const ScheduleConfig& schedule, int64_t step,
                           int64_t total_steps) {
  for (Group& g : groups_) {
    if (!g.optimizer) continue;
    g.optimizer->set_devices(devices);
    g.optimizer->step_rows(g.params, g.grads, g.rows, scheduled_lr(schedule, g.config.lr, step, total_steps));
  }
}

TableUpdates OptimizerGroups::prepare_table_updates(const ScheduleConfig& schedule, int64_t step,
                                                   int64_t total_steps) {
  TableUpdates tables;
  step_lr_.assign(groups_.size(), 0.0);
  for (size_t g = 0; g < groups_.size(); ++g) {
    Group& group = groups_[g];
    if (!group.optimizer || !group.optimizer->takes_row_gradients()) continue;
    bool any = false;
    for (size_t i = 0; i < group.names.size(); ++i)
      if (group.rows[i] && group.rows[i]->holds_values()) {
        tables.params.insert(group.names[i]);
        any = true;
      }
    if (!any) continue;
    group.optimizer->prepare_early(group.params);
    step_lr_[g] = scheduled_lr(schedule, group.config.lr, step, total_steps);
    if (const std::optional<float> factor = group.optimizer->table_step(step_lr_[g]))
      for (size_t i = 0; i < group.names.size(); ++i)
        if (tables.params.count(group.names[i])) tables.steps.emplace(group.names[i], *factor);
  }
  if (!tables.params.empty()) {
    tables.update = [this](const std::string& name) { update_table(name); };
    tables.stepped = [this](const std::string& name) { table_stepped(name); };
  }
  return tables;
}

void OptimizerGroups::table_stepped(const std::string& name) {
  for (Group& group : groups_) {
    const auto it = std::find(group.names.begin(), group.names.end(), name);
    if (it == group.names.end()) continue;
    group.optimizer->stepped_early(static_cast<size_t>(it - group.names.begin()));
    ++updated_in_backward_;
    return;
  }
}

void OptimizerGroups::update_table(const std::string& name) {
  for (size_t g = 0; g < groups_.size(); ++g) {
    Group& group = groups_[g];
    const auto it = std::find(group.names.begin(), group.names.end(), name);
    if (it == group.names.end()) continue;
    const size_t i = static_cast<size_t>(it - group.names.begin());
    TouchedRows& rows = *group.rows[i];
    // this runs on the cpu's lane, whose thread's team is the cpu kernels' own
    group.optimizer->update_early(group.params, i, rows, step_lr_[g], host_parameter_devices(HostThreads::team));
    ++updated_in_backward_;
    return;
  }
}

TensorMap OptimizerGroups::state() const {
  TensorMap out;
  for (const Group& g : groups_)
    if (g.optimizer)
      for (auto& [name, t] : g.optimizer->state(g.names)) out.emplace(name, t);  // "step": the same in each
  return out;
}

void OptimizerGroups::load_state(const TensorMap& state) {
  std::set<std::string> kept{"step"};
  for (Group& g : groups_) {
    if (!g.optimizer) continue;
    const std::set<std::string> mine(g.names.begin(), g.names.end());
    TensorMap part;
    for (const auto& [name, t] : state) {
      if (name == "step" || mine.count(name.substr(0, name.rfind('.')))) {
        part.emplace(name, t);
        kept.insert(name);
      }
    }
    g.optimizer->load_state(part, g.names, g.params);
  }
  for (const auto& [name, t] : state)
    if (!kept.count(name))
      throw UserError("optimizer state: unexpected tensor '" + name + "' (no parameter this run trains keeps it)");
}

bool OptimizerGroups::updates_listed_rows_only(const std::string& name) const {
  for (const Group& group : groups_)
    if (std::find(group.names.begin(), group.names.end(), name) != group.names.end())
      return group.optimizer && group.optimizer->takes_row_gradients();
  return false;
}

}  // namespace tandem
