#include "runtime/model.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>
#include <string_view>

#include "backends/optimizer_update.h"
#include "backends/trace.h"
#include "graph/load_graph.h"
#include "graph/loss_reach.h"
#include "graph/row_gradient_tables.h"
#include "graph/text_similarity.h"
#include "runtime/checkpoint_metadata.h"
#include "runtime/devices/device_registry.h"
#include "runtime/exec/forward_executor.h"
#include "runtime/exec/training_executor.h"
#include "runtime/optim/optimizer.h"
#include "runtime/params/parameter_devices.h"
#include "runtime/io/safetensors.h"
#include "core/random.h"

namespace tandem {

Model Model::load(const std::string& yaml_path, Start start) { return Model(load_graph(yaml_path), start); }

Model::Model(Graph graph, Start start)
    : graph_(std::make_unique<const Graph>(std::move(graph))), plan_(plan_on_cpu(*graph_)) {
  const std::set<std::string> row_tables = row_gradient_tables(*graph_);
  for (const ParamSpec& p : graph_->parameters()) {
    try {
      params_.emplace(p.name, Tensor::empty(p.shape, p.dtype));
      if (p.trainable) {  // buffers have no gradient
        // the dense gradients themselves wait for training (allocate_gradients)
        TouchedRows& rows = grad_rows_.emplace(p.name, TouchedRows(p.shape.empty() ? 1 : p.shape[0])).first->second;
        if (row_tables.count(p.name)) rows.hold_values(p.shape.at(1));
      }
    } catch (const UserError& e) {
      throw UserError("parameter '" + p.name + "' of model '" + graph_->name + "': " + e.what());
    }
  }
  if (start == Start::seeded) init_parameters(0);
}

void Model::set_precision(Precision precision) {
  if (precision == graph_->precision) return;
  if (!passes_.empty())
    throw UserError("the precision of model '" + graph_->name +
                    "' is set before its first pass; load the model again to run it in " +
                    std::string(precision_name(precision)));
  auto graph = std::make_unique<Graph>(*graph_);
  graph->precision = precision;
  graph_ = std::move(graph);
  plan_ = plan_on_cpu(*graph_);
}

Model::Model(Model&& other) noexcept { *this = std::move(other); }

Model& Model::operator=(Model&& other) noexcept {
  if (this == &other) return *this;
  passes_.clear();  // they refer to this model's cache and devices: before those go
  last_pass_ = nullptr;
  parameter_devices_.reset();
  device_params_.reset();
  graph_ = std::move(other.graph_);
  plan_ = std::move(other.plan_);
  params_ = std::move(other.params_);
  params_version_ = other.params_version_;
  grads_ = std::move(other.grads_);
  gradients_allocated_ = other.gradients_allocated_;
  grad_rows_ = std::move(other.grad_rows_);
  on_cpu_only_ = other.on_cpu_only_;
  registry_ = std::move(other.registry_);
  cpu_alone_ = std::move(other.cpu_alone_);
  policy_ = std::move(other.policy_);
  masters_on_host_ = other.masters_on_host_;
  device_totals_ = std::move(other.device_totals_);
  forward_hook_ = std::move(other.forward_hook_);
  inference_regions_ = other.inference_regions_;
  // The parameter cache and the executors refer to the maps just moved: those of the cpu
  // alone are made again at the next pass. A placed model's keep their GPUs' masters.
  if (registry_) {
    device_params_ = std::move(other.device_params_);
    parameter_devices_ = std::move(other.parameter_devices_);
    passes_ = std::move(other.passes_);
    last_pass_ = other.last_pass_;
  } else {
    other.passes_.clear();
    other.device_params_.reset();
  }
  other.last_pass_ = nullptr;
  return *this;
}
Model::~Model() = default;

void Model::init_parameters(uint64_t seed) {
  for (const ParamSpec& p : graph_->parameters()) {
    if (p.dtype == DType::int64) {  // a counter buffer (num_batches_tracked) starts at 0
      TANDEM_ASSERT(p.init.kind == ParamInit::Kind::zeros, "an int64 buffer starts at zero");
      for (int64_t& v : params_.at(p.name).span<int64_t>()) v = 0;
      continue;
    }
    float* data = params_.at(p.name).data<float>();
    int64_t n = shape_numel(p.shape);
    Rng rng(seed, p.name);
    switch (p.init.kind) {
      case ParamInit::Kind::uniform:
        for (int64_t i = 0; i < n; ++i) data[i] = static_cast<float>(rng.uniform(p.init.a, p.init.b));
        break;
      case ParamInit::Kind::normal:
        for (int64_t i = 0; i < n; ++i) data[i] = static_cast<float>(p.init.a + p.init.b * rng.normal());
        break;
      case ParamInit::Kind::ones: std::fill(data, data + n, 1.0f); break;
      case ParamInit::Kind::zeros: std::fill(data, data + n, 0.0f); break;
    }
    if (p.init.zero_row) {
      int64_t width = p.shape[1];
      std::fill(data + *p.init.zero_row * width, data + (*p.init.zero_row + 1) * width, 0.0f);
    }
  }
  ++params_version_;
  if (device_params_) device_params_->host_written();
}

namespace {

/// How many names of each kind of mismatch a message lists before it counts the rest.
constexpr size_t kListedMismatches = 20;

/// "N WHAT: a, b, and 3 more".
std::string counted_list(const std::vector<std::string>& items, const std::string& what) {
  std::string s = std::to_string(items.size()) + " " + what + ": ";
  for (size_t i = 0; i < items.size() && i < kListedMismatches; ++i) s += (i ? ", " : "") + items[i];
  if (items.size() > kListedMismatches) s += ", and " + std::to_string(items.size() - kListedMismatches) + " more";
  return s;
}

std::string quoted(const std::string& name) { return "'" + name + "'"; }

constexpr std::string_view kDataParallelPrefix = "module.";

/// torch's nn.DataParallel saves a wrapped model's state_dict under "module.". When every
/// name carries it and the names match the model better without it, it is taken off and
/// a note says so; otherwise the names are left for set_weights to judge.
std::optional<std::string> strip_data_parallel_prefix(TensorMap& weights, const TensorMap& params,
                                                      const std::string& source) {
  if (weights.empty()) return std::nullopt;
  size_t as_is = 0, stripped = 0;
  for (const auto& [name, t] : weights) {
    if (!name.starts_with(kDataParallelPrefix)) return std::nullopt;
    as_is += params.count(name);
    stripped += params.count(name.substr(kDataParallelPrefix.size()));
  }
  if (stripped <= as_is) return std::nullopt;
  TensorMap renamed;
  for (auto& [name, t] : weights) renamed.emplace(name.substr(kDataParallelPrefix.size()), std::move(t));
  weights = std::move(renamed);
  return source + ": every name began with 'module.' (saved from torch's nn.DataParallel); loaded without it";
}

}  // namespace

void Model::set_weights(const TensorMap& weights, const std::string& source) {
  // Every mismatch is listed, not only the first: a file from another version of the
  // model differs in many places at once, and fixing them one run at a time is slow.
  std::vector<std::string> missing, unknown, names, shapes, dtypes, unknown_names;
  for (const auto& [name, target] : params_) {
    names.push_back(name);
    auto it = weights.find(name);
    if (it == weights.end())
      missing.push_back(quoted(name));
    else if (it->second.shape() != target.shape())
      shapes.push_back(quoted(name) + " is " + shape_str(it->second.shape()) + ", the model's " +
                       shape_str(target.shape()));
    else if (it->second.dtype() != target.dtype())
      dtypes.push_back(quoted(name) + " is " + std::string(dtype_name(it->second.dtype())) + ", the model's " +
                       std::string(dtype_name(target.dtype())));
  }
  for (const auto& [name, t] : weights)
    if (!params_.count(name)) unknown.push_back(quoted(name)), unknown_names.push_back(name);
  if (!missing.empty() || !unknown.empty() || !shapes.empty() || !dtypes.empty()) {
    std::vector<std::string> parts;
    if (!missing.empty()) parts.push_back(counted_list(missing, "parameter(s) missing"));
    if (!unknown.empty())
      parts.push_back(counted_list(unknown, "tensor(s) the model does not have") +
                      (unknown.size() == 1 ? did_you_mean(unknown_names[0], names) : ""));
    if (!shapes.empty()) parts.push_back(counted_list(shapes, "of the wrong shape"));
    if (!dtypes.empty()) parts.push_back(counted_list(dtypes, "of the wrong dtype"));
    std::string message = source + " does not fit model '" + graph_->name + "': ";
    for (size_t i = 0; i < parts.size(); ++i) message += (i ? "; " : "") + parts[i];
    bool prefixed = std::any_of(unknown_names.begin(), unknown_names.end(),
                                [](const std::string& n) { return n.starts_with(kDataParallelPrefix); });
    if (prefixed)
      message += ". Names beginning with 'module.' come from torch's nn.DataParallel: save "
                 "model.module.state_dict() instead, or strip the prefix "
                 "({k.removeprefix('module.'): v for k, v in state_dict.items()})";
    throw UserError(message);
  }
  // copy in place: compiled kernels keep referring to the same storage
  for (auto& [name, target] : params_) std::memcpy(target.raw_data(), weights.at(name).raw_data(), target.nbytes());
  ++params_version_;
  if (device_params_) device_params_->host_written();
}

std::vector<std::string> Model::load_weights(const std::string& path) {
  // mapped, not read: the tensors are views of the file, copied once into the parameters
  TensorMap tensors = map_safetensors(path);
  // a training checkpoint holds the optimizer's state (and fp16's loss scaler's) beside the weights
  if (is_checkpoint_metadata(read_safetensors_metadata(path)))
    std::erase_if(tensors, [](const auto& entry) {
      return entry.first.starts_with("optimizer.") || entry.first.starts_with("loss_scaler.");
    });
  std::vector<std::string> notes;
  if (auto note = strip_data_parallel_prefix(tensors, params_, path)) notes.push_back(*note);
  set_weights(tensors, path);
  return notes;
}

void Model::save_weights(const std::string& path) const {
  write_safetensors(path, parameters(), {{"format", "pt"}, {"model", graph_->name}});
}

Bindings Model::bind(const TensorMap& inputs) const { return bind_declared(inputs, graph_->inputs, false); }

Bindings Model::bind_batch(const TensorMap& batch) const {
  std::vector<GraphInput> declared = graph_->inputs;
  declared.insert(declared.end(), graph_->targets.begin(), graph_->targets.end());
  return bind_declared(batch, declared, false);
}

Bindings Model::bind_declared(const TensorMap& inputs, const std::vector<GraphInput>& declared, bool allow_extra) const {
  std::vector<std::string> names;
  for (const GraphInput& in : declared) names.push_back(in.name);
  for (const auto& [name, t] : inputs)
    if (!allow_extra && std::find(names.begin(), names.end(), name) == names.end())
      throw UserError("model '" + graph_->name + "' has no input '" + name + "'" + did_you_mean(name, names));
  Bindings bindings;
  std::map<std::string, std::string> bound_by;
  for (const GraphInput& in : declared) {
    auto it = inputs.find(in.name);
    if (it == inputs.end()) throw UserError("input '" + in.name + "' of model '" + graph_->name + "' is missing");
    const Tensor& t = it->second;
    const TensorType& type = graph_->values[in.value].type;
    std::string expected = "input '" + in.name + "': expected " + std::string(dtype_name(type.dtype)) + " " +
                           sym_shape_str(type.shape) + ", got " + std::string(dtype_name(t.dtype())) + " " +
                           shape_str(t.shape());
    if (t.dtype() != type.dtype || t.dim() != static_cast<int64_t>(type.shape.size())) throw UserError(expected);
    if (t.device() != Device::cpu()) throw UserError("input '" + in.name + "' must be on the cpu");
    for (size_t d = 0; d < type.shape.size(); ++d) {
      const Dim& dim = type.shape[d];
      if (auto symbol = dim.as_symbol()) {
        auto [pos, fresh] = bindings.emplace(*symbol, t.size(d));
        if (!fresh && pos->second != t.size(d))
          throw UserError(expected + ": " + *symbol + " is " + std::to_string(pos->second) + " from input '" +
                          bound_by[*symbol] + "' but " + std::to_string(t.size(d)) + " here");
        bound_by.emplace(*symbol, in.name);
        if (t.size(d) < 1) throw UserError(expected + ": " + *symbol + " must be at least 1");
      } else if (dim.is_constant() && dim.constant() != t.size(d)) {
        throw UserError(expected + " (dimension " + std::to_string(d) + ")");
      }
    }
  }
  for (const GraphInput& in : declared) {  // dimensions written as expressions of symbols
    const TensorType& type = graph_->values[in.value].type;
    for (size_t d = 0; d < type.shape.size(); ++d)
      if (auto v = type.shape[d].evaluate(bindings); v && *v != inputs.at(in.name).size(d))
        throw UserError("input '" + in.name + "': dimension " + std::to_string(d) + " must be " + type.shape[d].str() +
                        " = " + std::to_string(*v) + ", got " + std::to_string(inputs.at(in.name).size(d)));
  }
  return bindings;
}

TensorMap Model::random_inputs(const Bindings& bindings, uint64_t seed) const {
  TensorMap inputs;
  for (const GraphInput& in : graph_->inputs) {
    const TensorType& type = graph_->values[in.value].type;
    Shape shape;
    for (const Dim& d : type.shape) {
      auto v = d.evaluate(bindings);
      if (!v) {
        std::string missing;
        for (const std::string& s : d.symbols())
          if (!bindings.count(s)) missing = s;
        throw UserError("input '" + in.name + "' has symbol '" + missing + "' in its shape; give its value with " +
                        (missing == "batch" ? std::string("--batch N") : "--bind " + missing + "=N"));
      }
      if (*v < 1) throw UserError("input '" + in.name + "': dimension " + d.str() + " must be at least 1");
      shape.push_back(*v);
    }
    Rng rng(seed, "input:" + in.name);
    Tensor t;
    try {
      t = Tensor::empty(shape, type.dtype);
    } catch (const OutOfMemory& e) {
      throw e.in("random input '" + in.name + "' " + shape_str(shape));
    }
    if (type.dtype == DType::float32) {
      for (float& x : t.span<float>()) x = static_cast<float>(rng.normal());
      inputs.emplace(in.name, std::move(t));
      continue;
    }
    // An index input: its bound, and whether it is embedding_bag offsets, come from its readers.
    std::optional<int64_t> bound = in.high;
    bool offsets = false;
    int64_t offsets_end = 0;
    for (const Node& node : graph_->nodes)
      for (size_t slot = 0; slot < node.inputs.size(); ++slot) {
        if (node.inputs[slot] != in.value || !node.schema->index_bound) continue;
        bool is_offsets = false;
        auto b = node.schema->index_bound(static_cast<int>(slot), node.attrs, &is_offsets);
        if (is_offsets) {
          offsets = true;
          offsets_end = sym_numel(graph_->values[node.inputs[0]].type.shape).evaluate(bindings).value_or(0);
        } else if (b && !in.high) {
          bound = bound ? std::min(*bound, *b) : *b;
        }
      }
    auto data = t.span<int64_t>();
    if (offsets) {
      for (int64_t& x : data) x = rng.below(offsets_end + 1);
      std::sort(data.begin(), data.end());
      if (!data.empty()) data[0] = 0;
    } else {
      int64_t high = bound.value_or(2);
      for (int64_t& x : data) x = rng.below(high);
    }
    inputs.emplace(in.name, std::move(t));
  }
  return inputs;
}

}  // namespace tandem

namespace tandem {

void Model::allocate_gradients() const {
  if (gradients_allocated_) return;
  for (const auto& [name, rows] : grad_rows_)
    if (!rows.holds_values()) {
      try {
        grads_.emplace(name, Tensor::zeros(params_.at(name).shape(), DType::float32));
      } catch (const OutOfMemory& e) {
        throw e.in("the gradient of parameter '" + name + "' " + shape_str(params_.at(name).shape()));
      }
    }
  gradients_allocated_ = true;
}

const TensorMap& Model::parameters() const {
  sync_parameters();
  return params_;
}

const TensorMap& Model::gradients() const {
  allocate_gradients();
  sync_parameters();
  return grads_;
}

Tensor Model::gradient(const std::string& name) const {
  allocate_gradients();
  sync_parameters();
  if (auto it = grads_.find(name); it != grads_.end()) return it->second;
  auto rows = grad_rows_.find(name);
  if (rows == grad_rows_.end()) throw UserError("model '" + graph_->name + "' has no trainable parameter '" + name + "'");
  if (rows->second.stepped())
    throw UserError("the gradient of '" + name + "' went into the table in its backward, as plain SGD allows " +
                    "(docs/training.md, \"Tables updated in their backward\"), and was not kept; train with " +
                    "update_tables_in_backward: false (--no-update-tables-in-backward) to read it after a step");
  // a row gradient (sparse: true), spread out: what torch's to_dense() gives
  const Tensor& weight = params_.at(name);
  Tensor dense = Tensor::zeros(weight.shape(), DType::float32);
  const int64_t width = rows->second.width();
  for (int64_t r : rows->second.list())
    std::memcpy(dense.data<float>() + r * width, rows->second.values_of(r), sizeof(float) * static_cast<size_t>(width));
  return dense;
}

void Model::zero_gradients() {
  if (device_params_) device_params_->zero_held_gradients();
  // On the thread that runs the cpu's kernels, over its OpenMP team (Note [which threads
  // update] in backends/optimizer_update.h): the caller's for the cpu alone, the cpu lane's
  // when placed (this thread waits meanwhile).
  auto zero = [this] {
    for (auto& [name, rows] : grad_rows_) {
      auto it = grads_.find(name);
      if (it == grads_.end()) {  // a row gradient (forgetting its rows zeroes it), or none yet
        rows.clear();
        continue;
      }
      Tensor& g = it->second;
      if (rows.all() || rows.rows() == 0) {
        zero_host(g.data<float>(), g.numel(), HostThreads::team);
      } else {
        const size_t row_bytes = g.nbytes() / static_cast<size_t>(rows.rows());
        char* base = static_cast<char*>(g.raw_data());
        for (int64_t r : rows.list()) std::memset(base + static_cast<size_t>(r) * row_bytes, 0, row_bytes);
      }
      rows.clear();
    }
  };
  if (!placed()) return zero();
  Lane& lane = registry_->backend(Device::cpu()).lane(LaneKind::compute);
  TraceLabel label("the host's gradients", "zeroed");
  lane.submit(zero);
  lane.synchronize();
}

TensorMap Model::random_targets(const Bindings& bindings, uint64_t seed) const {
  TensorMap targets;
  for (const GraphInput& tg : graph_->targets) {
    Shape shape;
    for (const Dim& d : graph_->values[tg.value].type.shape) {
      auto v = d.evaluate(bindings);
      if (!v) throw UserError("target '" + tg.name + "' has a symbol without a value: " + d.str());
      shape.push_back(*v);
    }
    Rng rng(seed, "target:" + tg.name);
    Tensor t = Tensor::empty(shape, graph_->values[tg.value].type.dtype);
    if (t.dtype() == DType::float32) {
      bool probability = graph_->loss && graph_->loss->target == tg.value && graph_->loss->op == "binary_cross_entropy_with_logits";
      for (float& x : t.span<float>()) x = static_cast<float>(probability ? rng.uniform(0, 1) : rng.normal());
    } else {
      int64_t high = tg.high.value_or(2);
      if (graph_->loss && graph_->loss->target == tg.value && !tg.high)
        high = graph_->values[graph_->loss->input].type.shape[1].constant();
      for (int64_t& x : t.span<int64_t>()) x = rng.below(high);
    }
    targets.emplace(tg.name, std::move(t));
  }
  return targets;
}

}  // namespace tandem
