// tandem._Trainer: runtime/trainer.h for Python, under tandem.Trainer (python/tandem/training.py).
// Its settings are `tandem train`'s flags, applied over the model's train: section the same
// way, so that a run from Python and one from the CLI are the same run, bit for bit.
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>

#include "dataset_from_python.h"
#include "compute_scope.h"
#include "deferred_release.h"
#include "graph/text_similarity.h"
#include "py_model.h"
#include "runtime/trainer.h"
#include "tensor_from_python.h"

namespace tandem::python {
namespace {

using namespace pybind11::literals;

const std::vector<std::string> kSettings = {"epochs",   "batch",        "seed",          "optimizer",  "lr",
                                            "momentum", "dampening",    "nesterov",      "weight_decay", "betas",
                                            "eps",      "shuffle",      "drop_last",     "validation_split",
                                            "clip_grad_norm", "schedule", "loss_scaling", "accumulate",
                                            "micro_batches"};

/// Trainer(loss_scaling={...}): train: loss_scaling's keys over the file's, checked as the
/// YAML reader checks them (GradScaler's constructor's rules).
LossScalingConfig loss_scaling_from(const py::handle& value, LossScalingConfig c) {
  const std::vector<std::string> keys = {"enabled", "init_scale", "growth_factor", "backoff_factor", "growth_interval"};
  if (!py::isinstance<py::dict>(value))
    throw UserError("Trainer(loss_scaling=...): a dict such as {'init_scale': 65536, 'growth_interval': 2000}");
  for (auto [key, v] : value.cast<py::dict>()) {
    const std::string k = py::str(key);
    if (k == "enabled") c.enabled = v.cast<bool>();
    else if (k == "init_scale") c.init_scale = v.cast<double>();
    else if (k == "growth_factor") c.growth_factor = v.cast<double>();
    else if (k == "backoff_factor") c.backoff_factor = v.cast<double>();
    else if (k == "growth_interval") c.growth_interval = v.cast<int64_t>();
    else throw UserError("Trainer(loss_scaling=...): unknown key '" + k + "'" + did_you_mean(k, keys));
  }
  if (!(c.init_scale > 0) || c.init_scale > 3.4e38)
    throw UserError("Trainer(loss_scaling=...): init_scale must be a positive number that a float32 holds");
  if (!(c.growth_factor > 1) || c.growth_factor > 3.4e38)
    throw UserError("Trainer(loss_scaling=...): growth_factor must be greater than 1");
  if (!(c.backoff_factor > 0 && c.backoff_factor < 1))
    throw UserError("Trainer(loss_scaling=...): backoff_factor must lie strictly between 0 and 1");
  if (c.growth_interval < 1 || c.growth_interval > 2147483647)
    throw UserError("Trainer(loss_scaling=...): growth_interval must be a whole number from 1 to 2147483647");
  return c;
}

ScheduleConfig schedule_from(const py::handle& value) {
  ScheduleConfig s;
  if (py::isinstance<py::str>(value)) {
    s.name = py::str(value);
  } else {
    py::dict d = value.cast<py::dict>();
    for (auto [key, v] : d) {
      std::string k = py::str(key);
      if (k == "name") s.name = py::str(v);
      else if (k == "step_size") s.step_size = v.cast<int64_t>();
      else if (k == "gamma") s.gamma = v.cast<double>();
      else if (k == "warmup_steps") s.warmup_steps = v.cast<int64_t>();
      else if (k == "total_steps") s.total_steps = v.cast<int64_t>();
      else if (k == "min_lr") s.min_lr = v.cast<double>();
      else
        throw UserError("Trainer(schedule=...): unknown key '" + k + "'" +
                        did_you_mean(k, {"name", "step_size", "gamma", "warmup_steps", "total_steps", "min_lr"}));
    }
  }
  if (s.name != "constant" && s.name != "step" && s.name != "cosine")
    throw UserError("Trainer(schedule='" + s.name + "'): unknown schedule" +
                    did_you_mean(s.name, {"constant", "step", "cosine"}) + "; write constant, step or cosine");
  return s;
}

/// The model's train: section with `settings` over it, as train_command.cpp applies its
/// flags: another optimizer starts from its own defaults, not the file's.
TrainingSpec training_spec(const Graph& graph, const py::dict& settings) {
  TrainingSpec spec = graph.training.value_or(TrainingSpec{});
  for (auto [key, value] : settings) {
    std::string k = py::str(key);
    if (std::find(kSettings.begin(), kSettings.end(), k) == kSettings.end())
      throw UserError("Trainer(): no setting '" + k + "'" + did_you_mean(k, kSettings));
  }
  auto get = [&](const char* key) -> py::object {
    return settings.contains(key) && !settings[key].is_none() ? py::reinterpret_borrow<py::object>(settings[key])
                                                               : py::object();
  };
  if (auto v = get("epochs")) spec.epochs = v.cast<int64_t>();
  if (auto v = get("batch")) spec.batch = v.cast<int64_t>();
  if (auto v = get("seed")) spec.seed = v.cast<uint64_t>();
  if (auto v = get("optimizer")) {
    std::string name = py::str(v);
    if (std::find(optimizer_names().begin(), optimizer_names().end(), name) == optimizer_names().end())
      throw UserError("Trainer(optimizer='" + name + "'): unknown optimizer" + did_you_mean(name, optimizer_names()) +
                      "; write sgd, adam, adamw, adagrad, rowwise_adagrad or sparse_adam");
    if (name != spec.optimizer.name) spec.optimizer = optimizer_defaults(name);
  }
  OptimizerConfig& o = spec.optimizer;
  if (auto v = get("lr")) o.lr = v.cast<double>();
  if (auto v = get("momentum")) o.momentum = v.cast<double>();
  if (auto v = get("dampening")) o.dampening = v.cast<double>();
  if (auto v = get("nesterov")) o.nesterov = v.cast<bool>();
  if (auto v = get("weight_decay")) o.weight_decay = v.cast<double>();
  if (auto v = get("eps")) o.eps = v.cast<double>();
  if (auto v = get("betas")) {
    auto betas = v.cast<std::pair<double, double>>();
    o.beta1 = betas.first;
    o.beta2 = betas.second;
  }
  if (auto v = get("shuffle")) spec.shuffle = v.cast<bool>();
  if (auto v = get("drop_last")) spec.drop_last = v.cast<bool>();
  if (auto v = get("validation_split")) spec.validation_split = v.cast<double>();
  if (auto v = get("clip_grad_norm")) spec.clip_grad_norm = v.cast<double>();
  if (auto v = get("schedule")) spec.schedule = schedule_from(v);
  if (auto v = get("loss_scaling")) spec.loss_scaling = loss_scaling_from(v, spec.loss_scaling);
  if (auto v = get("accumulate")) spec.accumulate = v.cast<int64_t>();
  if (auto v = get("micro_batches")) spec.micro_batches = v.cast<int64_t>();  // Trainer refuses what cannot be cut
  if (spec.epochs < 1 || spec.batch < 1) throw UserError("Trainer(): epochs and batch must be at least 1");
  if (spec.accumulate < 1 || spec.micro_batches < 1)
    throw UserError("Trainer(): accumulate and micro_batches must be at least 1");
  if (spec.validation_split < 0 || spec.validation_split >= 1)
    throw UserError("Trainer(validation_split=" + std::to_string(spec.validation_split) + "): must be within [0, 1)");
  if (o.lr < 0) throw UserError("Trainer(lr=" + std::to_string(o.lr) + "): the learning rate must not be negative");
  return spec;
}

py::dict spec_to_python(const TrainingSpec& s) {
  const OptimizerConfig& o = s.optimizer;
  py::dict optimizer("name"_a = o.name, "lr"_a = o.lr);
  if (o.name == "sgd") {
    optimizer["momentum"] = o.momentum;
    optimizer["dampening"] = o.dampening;
    optimizer["nesterov"] = o.nesterov;
  } else {
    optimizer["betas"] = py::make_tuple(o.beta1, o.beta2);
    optimizer["eps"] = o.eps;
  }
  optimizer["weight_decay"] = o.weight_decay;
  py::dict schedule("name"_a = s.schedule.name);
  if (s.schedule.name == "step") schedule["step_size"] = s.schedule.step_size, schedule["gamma"] = s.schedule.gamma;
  if (s.schedule.name == "cosine") {
    schedule["warmup_steps"] = s.schedule.warmup_steps;
    schedule["total_steps"] = s.schedule.total_steps;
    schedule["min_lr"] = s.schedule.min_lr;
  }
  return py::dict("epochs"_a = s.epochs, "batch"_a = s.batch, "accumulate"_a = s.accumulate,
                  "micro_batches"_a = s.micro_batches, "seed"_a = s.seed, "shuffle"_a = s.shuffle,
                  "keep_best"_a = s.keep_best.empty() ? py::none() : py::cast(s.keep_best),
                  "early_stop"_a = s.early_stop > 0 ? py::cast(s.early_stop) : py::none(),
                  "drop_last"_a = s.drop_last, "validation_split"_a = s.validation_split, "optimizer"_a = optimizer,
                  "schedule"_a = schedule,
                  "clip_grad_norm"_a = s.clip_grad_norm ? py::cast(*s.clip_grad_norm) : py::none(),
                  "loss_scaling"_a = py::dict("enabled"_a = s.loss_scaling.enabled, "init_scale"_a = s.loss_scaling.init_scale,
                                              "growth_factor"_a = s.loss_scaling.growth_factor,
                                              "backoff_factor"_a = s.loss_scaling.backoff_factor,
                                              "growth_interval"_a = s.loss_scaling.growth_interval),
                  "data"_a = s.data ? py::cast(s.data->path) : py::none());
}

void add_evaluation(py::dict& out, const EvalResult& r, const std::string& prefix) {
  out[py::str(prefix + "loss")] = r.loss;
  if (r.accuracy) out[py::str(prefix + "accuracy")] = *r.accuracy;
  if (r.auc) {  // a binary loss: null, and why, when undefined
    out[py::str(prefix + "auc")] = r.auc->value ? py::cast(*r.auc->value) : py::none();
    if (!r.auc->value) out[py::str(prefix + "auc_undefined")] = r.auc->undefined;
  }
}

/// An epoch as `tandem train --json` writes it.
py::dict epoch_to_python(const EpochReport& r) {
  py::dict out("epoch"_a = r.epoch + 1, "train_loss"_a = r.train_loss, "seconds"_a = r.seconds,
               "samples_per_second"_a = r.samples_per_second, "step_losses"_a = r.step_losses);
  if (r.validation) add_evaluation(out, *r.validation, "validation_");
  return out;
}

/// A Trainer over a tandem.Model, which it keeps alive.
struct PyTrainer {
  PyTrainer(PyModel& m, TrainingSpec spec) : model(m), trainer(*m.model, std::move(spec)) {}
  PyModel& model;
  Trainer trainer;
  double next_lr = 0;  // the learning rate of the step a progress callback reports
};

TensorMap batch_from_python(const PyModel& self, const py::dict& batch) {
  const Graph& graph = self.model->graph();
  TensorMap out;
  for (auto [key, value] : batch) {
    std::string name = py::str(key);
    std::optional<DType> dtype;
    std::string what = "batch['" + name + "']";
    for (const std::vector<GraphInput>* declared : {&graph.inputs, &graph.targets})
      for (const GraphInput& in : *declared)
        if (in.name == name) dtype = graph.values[in.value].type.dtype;
    out.emplace(name, tensor_from_python(value, what, dtype));
  }
  return out;
}

py::list fit(PyTrainer& self, const py::object& data, const py::object& validation, const std::string& checkpoint,
             const py::object& on_step, const py::object& on_epoch) {
  release_deferred_references();
  Model& model = *self.model.model;
  const TrainingSpec& spec = self.trainer.spec();
  Dataset train, held_out;
  {
    Dataset all = dataset_from_python(data, model.graph(), spec);
    if (validation.is_none()) {
      std::tie(train, held_out) = split_dataset(all, spec.validation_split, spec.seed);  // as `tandem train`
    } else {
      train = std::move(all);
      held_out = dataset_from_python(validation, model.graph(), spec);
    }
  }
  py::list epochs;
  {
    ComputeScope compute;
    model.plan_for({{"batch", spec.batch}}, /*training=*/true);  // a device the machine lacks: refused now
    self.next_lr = self.trainer.current_lr();
    auto epoch_done = [&](const EpochReport& r) {
      py::gil_scoped_acquire gil;
      py::dict e = epoch_to_python(r);
      epochs.append(e);
      if (!on_epoch.is_none()) on_epoch(e);
    };
    auto step_done = [&](int64_t done, int64_t total, double running_loss) {
      py::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();  // Ctrl-C stops training
      double lr = self.next_lr;
      self.next_lr = self.trainer.current_lr();
      if (on_step.is_none()) return;
      on_step(py::dict("step"_a = self.trainer.steps_done(), "epoch"_a = self.trainer.epochs_done() + 1,
                       "batch"_a = done, "batches"_a = total, "loss"_a = self.trainer.last_loss(),
                       "running_loss"_a = running_loss, "lr"_a = lr,
                       "samples"_a = self.trainer.last_samples()));
    };
    self.trainer.fit(train, &held_out, checkpoint, epoch_done, step_done);
  }
  return epochs;
}

}  // namespace

void register_trainer(py::module_& module) {
  py::class_<PyTrainer>(module, "_Trainer")
      .def(py::init([](PyModel& model, const py::dict& settings) {
             TrainingSpec spec = training_spec(model.model->graph(), settings);
             return std::make_unique<PyTrainer>(model, std::move(spec));
           }),
           "model"_a, "settings"_a, py::keep_alive<1, 2>())
      .def("step",
           [](PyTrainer& self, const py::dict& batch) {
             release_deferred_references();
             TensorMap tensors = batch_from_python(self.model, batch);
             ComputeScope compute;
             return self.trainer.step(tensors);
           })
      .def("fit", &fit, "data"_a, "validation"_a, "checkpoint"_a, "on_step"_a, "on_epoch"_a)
      .def("evaluate",
           [](PyTrainer& self, const py::object& data) {
             Dataset dataset = dataset_from_python(data, self.model.model->graph(), self.trainer.spec());
             EvalResult r;
             {
               ComputeScope compute;
               r = self.trainer.evaluate(dataset);
             }
             py::dict out("samples"_a = r.samples);
             add_evaluation(out, r, "");
             return out;
           })
      .def("save",
           [](PyTrainer& self, const std::string& path) {
             py::gil_scoped_release nogil;
             self.trainer.save_checkpoint(path);
           })
      .def("resume",
           [](PyTrainer& self, const std::string& path) {
             py::gil_scoped_release nogil;
             self.trainer.load_checkpoint(path);
           })
      .def("set_total_steps", [](PyTrainer& self, int64_t steps) { self.trainer.set_total_steps(steps); })
      .def_property_readonly("steps_done", [](const PyTrainer& self) { return self.trainer.steps_done(); })
      .def_property_readonly("epochs_done", [](const PyTrainer& self) { return self.trainer.epochs_done(); })
      .def_property_readonly("current_lr", [](const PyTrainer& self) { return self.trainer.current_lr(); })
      .def_property_readonly("skipped_steps", [](const PyTrainer& self) { return self.trainer.skipped_steps(); })
      .def_property_readonly("loss_scale", [](const PyTrainer& self) -> py::object {
        return self.trainer.scales_loss() ? py::cast(self.trainer.loss_scale()) : py::none();
      })
      .def_property_readonly("spec", [](const PyTrainer& self) { return spec_to_python(self.trainer.spec()); });
}

}  // namespace tandem::python
