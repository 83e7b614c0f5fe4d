#include "runtime/distributed/distributed_data_parallel.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include <fmt/core.h>

#include "core/error.h"
#include "graph/symbolic.h"
#include "runtime/distributed/broadcast_tensors.h"
#include "runtime/devices/device_registry.h"
#include "runtime/model.h"

namespace tandem {
namespace {

std::string shape_text(const Tensor& t) {
  std::string s = std::string(dtype_name(t.dtype())) + " [";
  for (size_t d = 0; d < t.shape().size(); ++d) s += (d ? ", " : "") + std::to_string(t.shape()[d]);
  return s + "]";
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

/// Where `theirs` first differs from rank 0's `first`: "rank 0 has X, rank 2 has Y".
std::string first_difference(const std::string& first, const std::string& theirs, int rank) {
  const std::vector<std::string> a = lines_of(first), b = lines_of(theirs);
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string x = i < a.size() ? a[i] : "nothing more", y = i < b.size() ? b[i] : "nothing more";
    if (x != y) return "rank 0 has " + x + ", rank " + std::to_string(rank) + " has " + y;
  }
  return "they differ";
}

void broadcast_tensor(ProcessGroup& group, const Tensor& t, const std::string& what) {
  group.broadcast(t.raw_data(), t.nbytes(), 0, what);
}

}  // namespace

std::string model_fingerprint(const Model& model, const TrainingSpec& spec) {
  const Graph& graph = model.graph();
  std::string out = "model '" + graph.name + "'\n";
  auto value_line = [&](const char* kind, const std::string& name, int value) {
    const TensorType& type = graph.values[value].type;
    out += std::string(kind) + " '" + name + "' " + std::string(dtype_name(type.dtype)) + " " +
           sym_shape_str(type.shape) + "\n";
  };
  for (const GraphInput& in : graph.inputs) value_line("input", in.name, in.value);
  for (const GraphInput& t : graph.targets) value_line("target", t.name, t.value);
  for (const GraphOutput& o : graph.outputs) value_line("output", o.name, o.value);
  for (const Node& node : graph.nodes) out += "layer '" + node.path + "' (" + node.op + ")\n";
  // parameters() keeps a map: the same order on every rank
  for (const auto& [name, t] : model.parameters()) out += "parameter '" + name + "' " + shape_text(t) + "\n";
  if (graph.loss) out += "loss " + graph.loss->op + " (" + graph.loss->reduction + ")\n";
  out += fmt::format("training: batch {} per rank, accumulate {}, {} epochs, shuffle {}, drop_last {}\n",
                     spec.batch, spec.accumulate, spec.epochs, spec.shuffle, spec.drop_last);
  out += fmt::format("optimizer: {} lr {} momentum {} weight_decay {}\n", spec.optimizer.name, spec.optimizer.lr,
                     spec.optimizer.momentum, spec.optimizer.weight_decay);
  out += fmt::format("schedule: {}\n", spec.schedule.name);
  if (spec.clip_grad_norm) out += fmt::format("clip_grad_norm {}\n", *spec.clip_grad_norm);
  return out;
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<ProcessGroup> group, Model& model,
                                                 const TrainingSpec& spec, const std::vector<std::string>& trained,
                                                 const std::vector<TouchedRows*>& rows, DistributedOptions options)
    : group_(std::move(group)), model_(model) {
  TANDEM_ASSERT(group_ && group_->size() > 1, "DistributedDataParallel needs more than one rank");
  TANDEM_ASSERT(trained.size() == rows.size(), "a touched-rows entry per trained parameter");
  group_->set_phase("at the start");
  // The same model and settings everywhere, or a step would pair other tensors, or the
  // ranks would take different numbers of steps and wait for each other for ever.
  const std::string mine =
      model_fingerprint(model_, spec) +
      fmt::format("distributed: bucket cap {} bytes, find unused {}, sharded state {}, gradients in {}, "
                  "broadcast buffers {}, device collectives {}\n",
                  options.bucket_cap_bytes, options.find_unused_parameters, options.shard_optimizer_state,
                  options.gradient_compression == GradientCompression::bf16 ? "bf16" : "float32",
                  options.broadcast_buffers, options.device_collectives);
  const std::vector<std::string> all = group_->all_gather(mine, "the check that every rank loaded the same model");
  for (int r = 1; r < group_->size(); ++r)
    if (all[static_cast<size_t>(r)] != all[0])
      throw JobError("rank " + std::to_string(r) + " loaded another model or other training settings than rank 0 (" +
                      first_difference(all[0], all[static_cast<size_t>(r)], r) +
                      "): every rank must run the same model file with the same flags");
  // The seeds may differ (DDP users commonly seed each rank): rank 0's orders and splits
  // the data and draws the dropout masks for all, so the ranks' shards still partition one
  // permutation; the start is rank 0's broadcast below.
  const std::vector<std::string> seeds = group_->all_gather(std::to_string(spec.seed), "the ranks' seeds");
  rank0_seed_ = std::stoull(seeds[0]);
  if (std::any_of(seeds.begin(), seeds.end(), [&](const std::string& s) { return s != seeds[0]; })) {
    std::string listed;
    for (size_t r = 0; r < seeds.size(); ++r) listed += fmt::format("{}rank {}: {}", r ? ", " : "", r, seeds[r]);
    seed_note_ = "the ranks were given different seeds (" + listed +
                 "): rank 0's initial weights are broadcast to every rank, as DDP does, and rank 0's seed " +
                 seeds[0] + " shuffles and splits the data and draws the dropout masks for all";
  }
  // Rank 0's weights and buffers (running statistics) everywhere, as DDP broadcasts its
  // module's state at construction: ranks that initialised from other seeds or loaded
  // other weights train together from the same point.
  for (const auto& [name, t] : model_.parameters())
    broadcast_tensor(*group_, t, "the broadcast of rank 0's parameter '" + name + "'");
  model_.parameters_changed();
  // Gradients of parameters only GPUs run stay on them, summed between the ranks' GPUs,
  // where every rank's GPUs offer it. Not with a sharded optimizer state (each rank updates
  // its share on the host's tensors and sends it over MPI) nor with bf16 compression (its
  // rounding runs on the host): those keep every master on the host, as before.
  // Every rank asks alike (the options are the same everywhere: checked above), whatever
  // devices each has: the ranks compare those inside.
  if (options.device_collectives && !options.shard_optimizer_state &&
      options.gradient_compression == GradientCompression::none)
    collectives_ = DeviceCollectives::open(*group_, model_.device_registry());
  if (!collectives_) model_.keep_masters_on_host();  // the gradients to reduce come to the host

  // The gradients in the order backward completes them, which buckets them as DDP does.
  std::vector<ReducedGradient> grads;
  const TensorMap& dense = model_.gradients();
  for (const std::string& name : gradient_completion_order(model_.graph())) {
    auto it = std::find(trained.begin(), trained.end(), name);
    if (it == trained.end()) continue;
    TouchedRows* touched = rows[static_cast<size_t>(it - trained.begin())];
    auto g = dense.find(name);
    grads.push_back({name, g == dense.end() ? Tensor() : g->second, touched});
  }
  GradientReducerOptions reducer;
  reducer.bucket_cap_bytes = options.bucket_cap_bytes;
  reducer.first_bucket_bytes = std::min(reducer.first_bucket_bytes, options.bucket_cap_bytes);
  reducer.find_unused_parameters = options.find_unused_parameters;
  reducer.compress_bf16 = options.gradient_compression == GradientCompression::bf16;
  HeldGradientPath held;
  if (collectives_) {
    held.collectives = collectives_.get();
    held.held = [this](const std::string& name) { return model_.held_gradients(name); };
  }
  reducer_ = std::make_unique<GradientReducer>(*group_, std::move(grads), reducer, std::move(held));
  ready_ = [this](const std::string& name) { reducer_->ready(name); };
  if (options.broadcast_buffers)
    for (const ParamSpec& p : model_.graph().parameters())
      if (!p.trainable) buffers_.push_back(p.name);
}

void DistributedDataParallel::share_buffers() {
  if (buffers_.empty()) return;
  // the host's buffers, current after the step; not parameters(), which would bring every
  // parameter the GPUs hold to the host each step
  for (const std::string& name : buffers_)
    broadcast_tensor(*group_, model_.buffer(name), "the broadcast of rank 0's buffer '" + name + "'");
}

const GradientReady* DistributedDataParallel::start_backward(int64_t step) {
  group_->set_phase("in step " + std::to_string(step + 1));
  reducer_->start();
  return &ready_;
}

void DistributedDataParallel::finish_backward() { reducer_->finish(); }

void DistributedDataParallel::sum(std::vector<double>& values, const std::string& what) {
  group_->all_reduce_sum(values.data(), static_cast<int64_t>(values.size()), what);
}

std::vector<float> DistributedDataParallel::gather(const std::vector<float>& mine, const std::string& what) {
  std::string bytes(mine.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), mine.data(), bytes.size());
  std::vector<float> out;
  for (const std::string& theirs : group_->all_gather(bytes, what)) {
    const size_t start = out.size();
    out.resize(start + theirs.size() / sizeof(float));
    std::memcpy(out.data() + start, theirs.data(), theirs.size());
  }
  return out;
}

void DistributedDataParallel::broadcast(TensorMap& tensors, const std::string& what) {
  broadcast_tensors(*group_, tensors, 0, what);
}

void DistributedDataParallel::check_same(const std::string& what, const std::string& value) {
  const std::vector<std::string> all = group_->all_gather(value, "the check of " + what);
  for (int r = 1; r < group_->size(); ++r)
    if (all[static_cast<size_t>(r)] != all[0])
      throw JobError("rank " + std::to_string(r) + " has " + what + " " + all[static_cast<size_t>(r)] + ", rank 0 " +
                      all[0] + ": every rank must read the same data, or they would take different numbers of steps");
}

}  // namespace tandem
