// OptimizerGroups: the optimizers of one training run, a group of parameters each, as
// torch.optim's param_groups and TorchRec's fused table optimizer beside a dense one
// (`train: optimizer_groups:`, docs/training.md). Each parameter is updated by the first
// group whose `params` patterns match its name or its layer's path, else by `train:
// optimizer:`. Each group's learning rate follows the run's schedule from its own `lr`, as
// a torch scheduler moves every param group's.
#pragma once

#include <atomic>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/touched_rows.h"
#include "graph/training_spec.h"
#include "runtime/exec/table_updates.h"
#include "runtime/optim/optimizer.h"

namespace tandem {

class OptimizerGroups {
 public:
  /// Parameter i is names[i], params[i], grads[i] (undefined for a row gradient), rows[i].
  /// UserError, naming the file and line where the spec says so: a pattern that matches no
  /// trained parameter (when `check_patterns`), a `sparse: true` table whose optimizer
  /// cannot take its row gradient, sparse_adam for a parameter without row gradients.
  OptimizerGroups(const TrainingSpec& spec, std::span<const std::string> names, std::span<const Tensor> params,
                  std::span<const Tensor> grads, std::span<TouchedRows* const> rows, bool check_patterns = true);

  /// One update of every parameter; group g's learning rate is the schedule's at `step` from
  /// its own base lr.
  void step(ParameterDevices& devices, const ScheduleConfig& schedule, int64_t step, int64_t total_steps);
  /// Whether the update of parameter `name` changes only the rows its gradient lists
  /// (core/touched_rows.h): its optimizer is the identity where the gradient is zero
  /// (Optimizer::takes_row_gradients()). False for a parameter no group updates.
  bool updates_listed_rows_only(const std::string& name) const;
  /// Note [a table updated in its backward] (runtime/exec/table_updates.h): readies, for
  /// the step at `step`, the update in backward of each parameter with a row gradient whose
  /// optimizer takes it, and returns them with the update to run; the next step() leaves
  /// each one that update reached as it is. Empty when none can.
  TableUpdates prepare_table_updates(const ScheduleConfig& schedule, int64_t step, int64_t total_steps);
  /// How many table updates ran in backward (the test's and the report's count).
  int64_t tables_updated_in_backward() const { return updated_in_backward_.load(); }
  /// Every group's state: "<param>.<buffer>" and one "step" (the groups step together).
  TensorMap state() const;
  /// Restores what state() returned; UserError for a tensor no group keeps.
  void load_state(const TensorMap& state);

 private:
  struct Group {
    OptimizerConfig config;
    std::unique_ptr<Optimizer> optimizer;
    std::vector<std::string> names;
    std::vector<Tensor> params, grads;
    std::vector<TouchedRows*> rows;
  };
  std::vector<Group> groups_;  // [0]: train: optimizer:; then optimizer_groups in order
  // prepare_table_updates(): each group's learning rate for the step, and the count
  std::vector<double> step_lr_;
  std::atomic<int64_t> updated_in_backward_{0};
  /// Updates table `name` now (on the cpu's lane): TableUpdates::update.
  void update_table(const std::string& name);
  /// Table `name`'s backward stepped it (TableUpdates::stepped).
  void table_stepped(const std::string& name);
};

}  // namespace tandem
