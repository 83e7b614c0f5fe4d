#include "graph/model_sections.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <vector>

#include "graph/pipeline_check.h"
#include "graph/text_similarity.h"

namespace tandem {
namespace {

// Reads the sections with the reader's helpers; `graph_` is the graph read so far.
class SectionReader : public YamlReader {
 public:
  SectionReader(const YamlReader& yaml, const Graph& graph) : YamlReader(yaml), graph_(graph) {}

  // `placement: balanced` or `placement: {policy: balanced, max_memory: 8GiB}`. The size is
  // kept as text with its location; placement/ parses it and reports errors there.
  PlacementSpec load_placement(const YAML::Node& n) const {
    static const std::vector<std::string> policies = {"annotations", "embeddings-on-cpu", "balanced"};
    PlacementSpec spec;
    spec.location = where(n);
    YAML::Node policy = n;  // yaml-cpp: assigning a Node writes through it; reset() rebinds
    if (n.IsMap()) {
      check_keys(n, {"policy", "max_memory"}, "", "key of placement");
      policy.reset(require(n, "policy", ""));
      if (const YAML::Node m = n["max_memory"]) {
        spec.max_memory = scalar_string(m, "", "placement max_memory");
        spec.location = where(m);
      }
    } else if (!n.IsScalar()) {
      fail(n, "", "placement must be a policy name or {policy: ..., max_memory: ...}; got " + kind_of(n));
    }
    spec.policy = scalar_string(policy, "", "placement policy");
    if (std::find(policies.begin(), policies.end(), spec.policy) == policies.end())
      fail(policy, "", "unknown placement policy '" + spec.policy + "'; write annotations, embeddings-on-cpu or balanced" +
                           did_you_mean(spec.policy, policies));
    return spec;
  }

  TrainingSpec load_training(const YAML::Node& n) {
    if (!n.IsMap()) fail(n, "", "train must be a mapping such as {epochs: 10, batch: 32, optimizer: {name: adam}}");
    check_keys(n, {"epochs", "batch", "accumulate", "shuffle", "drop_last", "seed", "validation_split", "optimizer",
                   "optimizer_groups", "schedule", "clip_grad_norm", "loss_scaling", "data", "keep_best",
                   "early_stop", "pipeline", "update_tables_in_backward"},
               "", "key of train");
    TrainingSpec t;
    auto positive = [&](const char* key, int64_t& out) {
      if (const YAML::Node v = n[key]) {
        out = scalar_int(v, "", std::string("train ") + key);
        if (out < 1) fail(v, "", std::string("train ") + key + " must be at least 1");
      }
    };
    positive("epochs", t.epochs);
    positive("batch", t.batch);
    positive("accumulate", t.accumulate);
    positive("early_stop", t.early_stop);
    if (const YAML::Node v = n["keep_best"]) {
      t.keep_best = scalar_string(v, "", "train keep_best");
      const std::vector<std::string> metrics = {"val_loss", "val_accuracy", "val_auc"};
      if (std::find(metrics.begin(), metrics.end(), t.keep_best) == metrics.end())
        fail(v, "", "train keep_best '" + t.keep_best + "' is not a validation metric; use val_loss, val_accuracy or "
                    "val_auc" + did_you_mean(t.keep_best, metrics));
    }
    if (n["shuffle"]) t.shuffle = scalar_bool(n["shuffle"], "", "shuffle");
    if (n["drop_last"]) t.drop_last = scalar_bool(n["drop_last"], "", "drop_last");
    if (const YAML::Node u = n["update_tables_in_backward"])
      t.update_tables_in_backward = scalar_bool(u, "", "train update_tables_in_backward");
    if (n["seed"]) {
      int64_t seed = scalar_int(n["seed"], "", "seed");
      if (seed < 0) fail(n["seed"], "", "seed must not be negative");
      t.seed = static_cast<uint64_t>(seed);
    }
    if (const YAML::Node v = n["validation_split"]) {
      t.validation_split = scalar_number(v, "", "validation_split");
      if (t.validation_split < 0 || t.validation_split >= 1) fail(v, "", "validation_split must be within [0, 1)");
    }
    if (const YAML::Node v = n["clip_grad_norm"]; v && !v.IsNull()) {
      t.clip_grad_norm = scalar_number(v, "", "clip_grad_norm");
      if (*t.clip_grad_norm <= 0) fail(v, "", "clip_grad_norm must be positive");
    }
    if (n["optimizer"]) t.optimizer = load_optimizer(n["optimizer"]);
    if (n["optimizer_groups"]) t.optimizer_groups = load_optimizer_groups(n["optimizer_groups"], t.optimizer);
    if (n["schedule"]) t.schedule = load_schedule(n["schedule"]);
    if (n["loss_scaling"]) t.loss_scaling = load_loss_scaling(n["loss_scaling"]);
    if (n["data"]) t.data = load_data_spec(n["data"]);
    if (const YAML::Node p = n["pipeline"]) load_pipeline(p, t);
    return t;
  }

  // `pipeline: {micro_batches: M, overlap_next_batch: B}` (runtime/exec/pipeline.h): micro
  // batches are refused where they would train another model (graph/pipeline_check.h).
  void load_pipeline(const YAML::Node& n, TrainingSpec& t) {
    if (!n.IsMap()) fail(n, "", "pipeline must be a mapping such as {micro_batches: 4}; got " + kind_of(n));
    check_keys(n, {"micro_batches", "overlap_next_batch"}, "", "key of pipeline");
    if (const YAML::Node o = n["overlap_next_batch"]) t.overlap_next_batch = scalar_bool(o, "", "pipeline overlap_next_batch");
    const YAML::Node m = n["micro_batches"];
    if (!m) return;
    const int64_t micro_batches = scalar_int(m, "", "pipeline micro_batches");
    if (micro_batches < 1) fail(m, "", "pipeline micro_batches must be at least 1");
    if (micro_batches > 1)
      if (const Node* node = layer_refusing_micro_batches(graph_)) fail(n, "", micro_batch_refusal(*node, "train: pipeline"));
    t.micro_batches = micro_batches;
  }

  // `optimizer:`, or with `group` an entry of `optimizer_groups:`, whose hyperparameters
  // start from `base` (train: optimizer:) when it names no other optimizer, as torch's
  // param_groups take the optimizer's defaults.
  OptimizerConfig load_optimizer(const YAML::Node& n, const OptimizerConfig* base = nullptr) {
    if (!n.IsMap())
      fail(n, "", base ? "each entry of optimizer_groups must be a mapping such as {params: [tables.*], name: "
                         "rowwise_adagrad, lr: 0.05}"
                       : "optimizer must be a mapping such as {name: adam, lr: 0.001}");
    OptimizerConfig o = base ? *base : OptimizerConfig{};
    if (!base || n["name"]) {
      const YAML::Node name = require(n, "name", "");
      const std::string given = scalar_string(name, "", "optimizer name");
      const std::vector<std::string>& names = optimizer_names();
      if (std::find(names.begin(), names.end(), given) == names.end())
        fail(name, "", "unknown optimizer '" + given + "'" + did_you_mean(given, names) +
                           "; use sgd, adam, adamw, adagrad, rowwise_adagrad or sparse_adam");
      if (!base || given != base->name) o = optimizer_defaults(given);
    }
    std::set<std::string> keys;
    if (o.name == "sgd") keys = {"name", "lr", "momentum", "dampening", "nesterov", "weight_decay"};
    else if (o.name == "adam" || o.name == "adamw") keys = {"name", "lr", "betas", "eps", "weight_decay"};
    else if (o.name == "adagrad") keys = {"name", "lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps"};
    else if (o.name == "rowwise_adagrad") keys = {"name", "lr", "lr_decay", "initial_accumulator_value", "eps"};
    else keys = {"name", "lr", "betas", "eps"};  // sparse_adam
    if (base) keys.insert("params");
    check_keys(n, keys, "", "key of the " + o.name + " optimizer" + (base ? " group" : ""));
    auto non_negative = [&](const char* key, double& out) {
      if (const YAML::Node v = n[key]) {
        out = scalar_number(v, "", key);
        if (out < 0) fail(v, "", std::string(key) + " must not be negative");
      }
    };
    non_negative("lr", o.lr);
    non_negative("momentum", o.momentum);
    non_negative("dampening", o.dampening);
    non_negative("weight_decay", o.weight_decay);
    non_negative("eps", o.eps);
    non_negative("lr_decay", o.lr_decay);
    non_negative("initial_accumulator_value", o.initial_accumulator_value);
    if (n["nesterov"]) o.nesterov = scalar_bool(n["nesterov"], "", "nesterov");
    if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
      fail(n["nesterov"] ? n["nesterov"] : n, "", "nesterov needs momentum > 0 and dampening 0 (as in torch.optim.SGD)");
    if (const YAML::Node b = n["betas"]) {
      if (!b.IsSequence() || b.size() != 2) fail(b, "", "betas must be a list of two numbers such as [0.9, 0.999]");
      o.beta1 = scalar_number(b[0], "", "beta1");
      o.beta2 = scalar_number(b[1], "", "beta2");
      for (size_t i = 0; i < 2; ++i) {
        double v = i == 0 ? o.beta1 : o.beta2;
        if (v < 0 || v >= 1) fail(b[i], "", "betas must lie within [0, 1)");
      }
    }
    return o;
  }

  // `optimizer_groups:`: a list of {params: PATTERN | [PATTERNS], name: ..., lr: ..., ...}.
  std::vector<OptimizerGroup> load_optimizer_groups(const YAML::Node& n, const OptimizerConfig& base) {
    if (!n.IsSequence())
      fail(n, "", "optimizer_groups must be a list such as [{params: [tables.*], name: rowwise_adagrad, lr: 0.05}]; got " +
                      kind_of(n));
    std::vector<OptimizerGroup> groups;
    for (const YAML::Node& entry : n) {
      OptimizerGroup g;
      g.optimizer = load_optimizer(entry, &base);
      const YAML::Node params = require(entry, "params", "");
      if (params.IsScalar()) {
        g.params.push_back(scalar_string(params, "", "params pattern"));
        g.params_at.push_back(where(params).str());
      } else if (params.IsSequence() && params.size() > 0) {
        for (const YAML::Node& p : params) {
          g.params.push_back(scalar_string(p, "", "params pattern"));
          g.params_at.push_back(where(p).str());
        }
      } else {
        fail(params, "", "params must be a pattern or a list of patterns over parameter names or layer paths, such as "
                         "[tables.*, 'emb_*.weight']");
      }
      for (size_t i = 0; i < g.params.size(); ++i)
        if (g.params[i].empty()) fail(params.IsScalar() ? params : params[i], "", "a params pattern must not be empty");
      groups.push_back(std::move(g));
    }
    return groups;
  }

  ScheduleConfig load_schedule(const YAML::Node& n) {
    if (!n.IsMap()) fail(n, "", "schedule must be a mapping such as {name: cosine, warmup_steps: 100}");
    const YAML::Node name = require(n, "name", "");
    ScheduleConfig s;
    s.name = scalar_string(name, "", "schedule name");
    if (s.name == "constant") check_keys(n, {"name"}, "", "key of the constant schedule");
    else if (s.name == "step") check_keys(n, {"name", "step_size", "gamma"}, "", "key of the step schedule");
    else if (s.name == "cosine") check_keys(n, {"name", "warmup_steps", "total_steps", "min_lr"}, "", "key of the cosine schedule");
    else fail(name, "", "unknown schedule '" + s.name + "'" + did_you_mean(s.name, {"constant", "step", "cosine"}) +
                            "; use constant, step or cosine");
    if (s.name == "step") {
      const YAML::Node size = require(n, "step_size", "");
      s.step_size = scalar_int(size, "", "step_size");
      if (s.step_size < 1) fail(size, "", "step_size must be at least 1");
      if (n["gamma"]) s.gamma = scalar_number(n["gamma"], "", "gamma");
    }
    auto count = [&](const char* key, int64_t& out) {
      if (const YAML::Node v = n[key]) {
        out = scalar_int(v, "", key);
        if (out < 0) fail(v, "", std::string(key) + " must not be negative");
      }
    };
    count("warmup_steps", s.warmup_steps);
    count("total_steps", s.total_steps);
    if (n["min_lr"]) s.min_lr = scalar_number(n["min_lr"], "", "min_lr");
    return s;
  }

  // GradScaler's arguments, refused where its constructor asserts (growth_factor > 1,
  // backoff_factor < 1) and where a scale could not be a positive finite float.
  LossScalingConfig load_loss_scaling(const YAML::Node& n) {
    if (!n.IsMap())
      fail(n, "", "loss_scaling must be a mapping such as {init_scale: 65536, growth_interval: 2000}");
    check_keys(n, {"enabled", "init_scale", "growth_factor", "backoff_factor", "growth_interval"}, "",
               "key of loss_scaling");
    LossScalingConfig c;
    if (n["enabled"]) c.enabled = scalar_bool(n["enabled"], "", "loss_scaling enabled");
    if (const YAML::Node v = n["init_scale"]) {
      c.init_scale = scalar_number(v, "", "init_scale");
      if (!(c.init_scale > 0) || c.init_scale > 3.4e38)
        fail(v, "", "init_scale must be a positive number that a float32 holds (torch's default: 65536)");
    }
    if (const YAML::Node v = n["growth_factor"]) {
      c.growth_factor = scalar_number(v, "", "growth_factor");
      if (!(c.growth_factor > 1) || c.growth_factor > 3.4e38) fail(v, "", "growth_factor must be greater than 1 (default 2)");
    }
    if (const YAML::Node v = n["backoff_factor"]) {
      c.backoff_factor = scalar_number(v, "", "backoff_factor");
      if (!(c.backoff_factor > 0 && c.backoff_factor < 1))
        fail(v, "", "backoff_factor must lie strictly between 0 and 1 (default 0.5)");
    }
    if (const YAML::Node v = n["growth_interval"]) {
      c.growth_interval = scalar_int(v, "", "growth_interval");
      if (c.growth_interval < 1 || c.growth_interval > 2147483647)
        fail(v, "", "growth_interval must be a whole number from 1 to 2147483647 (default 2000)");
    }
    return c;
  }

  DataSpec load_data_spec(const YAML::Node& n) {
    if (!n.IsMap()) fail(n, "", "data must be a mapping such as {path: train.csv, format: csv}");
    check_keys(n, {"path", "format", "header", "columns"}, "", "key of data");
    DataSpec d;
    const YAML::Node path = require(n, "path", "");
    d.path = scalar_string(path, "", "data path");
    d.named_at = where(path).str();
    // next to the model file, as an include would be: a model trains from any directory
    const std::filesystem::path model_dir = std::filesystem::path(where(path).file).parent_path();
    if (!d.path.empty() && std::filesystem::path(d.path).is_relative() && !model_dir.empty())
      d.path = (model_dir / d.path).lexically_normal().string();
    if (const YAML::Node f = n["format"]) {
      d.format = scalar_string(f, "", "data format");
      if (d.format != "csv" && d.format != "safetensors") fail(f, "", "data format must be csv or safetensors");
    }
    if (n["header"]) d.header = scalar_bool(n["header"], "", "header");
    if (const YAML::Node c = n["columns"]) {
      if (!c.IsMap()) fail(c, "", "columns must map input and target names to column ranges such as \"0:64\"");
      for (auto it = c.begin(); it != c.end(); ++it) {
        std::string name = scalar_string(it->first, "", "a column name");
        bool known = std::any_of(graph_.inputs.begin(), graph_.inputs.end(), [&](auto& g) { return g.name == name; }) ||
                     std::any_of(graph_.targets.begin(), graph_.targets.end(), [&](auto& g) { return g.name == name; });
        if (!known) fail(it->first, "", "columns: '" + name + "' is neither an input nor a target");
        d.columns[name] = scalar_string(it->second, "", "a column range");
      }
    }
    return d;
  }


 private:
  const Graph& graph_;
};

}  // namespace

TrainingSpec read_training_section(const YamlReader& yaml, const YAML::Node& n, const Graph& graph) {
  return SectionReader(yaml, graph).load_training(n);
}

PlacementSpec read_placement_section(const YamlReader& yaml, const YAML::Node& n) {
  static const Graph none;
  return SectionReader(yaml, none).load_placement(n);
}

}  // namespace tandem
