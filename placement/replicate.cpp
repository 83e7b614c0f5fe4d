#include "placement/replicate.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/tensor.h"
#include "graph/gather_dim.h"
#include "graph/op_schema.h"
#include "graph/sample_order.h"

namespace tandem {

std::vector<int64_t> data_parallel_chunks(int64_t extent, int devices, const std::vector<int64_t>& requested,
                                          const std::string& block) {
  TANDEM_ASSERT(extent >= 1 && devices >= 1, "data_parallel_chunks of nothing");
  if (!requested.empty()) {
    std::string where = "data_parallel block '" + block + "': chunk_sizes ";
    if (static_cast<int>(requested.size()) > devices)
      throw UserError(where + "lists " + std::to_string(requested.size()) + " chunks for " + std::to_string(devices) +
                      " devices; give at most one chunk per device");
    int64_t total = 0;
    for (int64_t c : requested) {
      if (c < 1) throw UserError(where + "must be positive; got " + std::to_string(c));
      total += c;
    }
    if (total != extent)
      throw UserError(where + "add up to " + std::to_string(total) + ", but the batch being scattered has " +
                      std::to_string(extent) + "; make them add up to the batch size you run with");
    return requested;
  }
  // torch.chunk: chunks of ceil(extent / devices), the last one what is left
  const int64_t size = (extent + devices - 1) / devices;
  std::vector<int64_t> chunks;
  for (int64_t start = 0; start < extent; start += size) chunks.push_back(std::min(size, extent - start));
  return chunks;
}

std::vector<int64_t> chunks_by_memory(int64_t extent, const std::vector<size_t>& memory) {
  const size_t n = std::min(memory.size(), static_cast<size_t>(extent));
  long double total = 0;
  for (size_t k = 0; k < n; ++k) total += static_cast<long double>(std::max<size_t>(memory[k], 1));
  std::vector<int64_t> chunks(n);
  std::vector<std::pair<long double, size_t>> remainders;  // (fraction left over, device)
  int64_t given = 0;
  for (size_t k = 0; k < n; ++k) {
    long double share = extent * static_cast<long double>(std::max<size_t>(memory[k], 1)) / total;
    chunks[k] = std::max<int64_t>(1, static_cast<int64_t>(share));  // no device sits idle
    given += chunks[k];
    remainders.emplace_back(share - static_cast<long double>(static_cast<int64_t>(share)), k);
  }
  std::stable_sort(remainders.begin(), remainders.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; given < extent; ++i, ++given) ++chunks[remainders[i % n].second];
  while (given > extent) {  // the minimum of one row overshot: take from the largest
    --*std::max_element(chunks.begin(), chunks.end());
    --given;
  }
  return chunks;
}

namespace {

std::string chunk_list(const std::vector<int64_t>& chunks) {
  std::string s;
  for (size_t k = 0; k < chunks.size(); ++k) s += (k ? ", " : "") + std::to_string(chunks[k]);
  return s;
}

int data_parallel_block_of(const Graph& g, const Node& n) {
  for (int b = n.block; b >= 0; b = g.blocks[b].parent)
    if (g.blocks[b].data_parallel) return b;
  return -1;
}

TensorType concrete(const TensorType& type, const Bindings& bindings, const std::string& what) {
  TensorType out = type;
  for (Dim& d : out.shape) {
    std::optional<int64_t> v = d.evaluate(bindings);
    TANDEM_ASSERT(v.has_value(), "replicating: a symbol of '" + what + "' is unbound");
    d = Dim(*v);
  }
  return out;
}

class Replicator {
 public:
  Replicator(const Graph& g, const Bindings& bindings, bool parallel_loss, const std::function<size_t(Device)>& memory_of)
      : g_(g), bindings_(bindings), parallel_loss_(parallel_loss && g.loss && g.loss->parallel), memory_of_(memory_of) {
    out_ = std::make_shared<Graph>(g);
    out_->nodes.clear();
  }

  std::shared_ptr<const Graph> run() {
    for (size_t i = 0; i < g_.nodes.size();) {
      int b = data_parallel_block_of(g_, g_.nodes[i]);
      if (b < 0) {
        out_->nodes.push_back(g_.nodes[i++]);
        continue;
      }
      expand(b);
      i = static_cast<size_t>(g_.blocks[b].end_node);
    }
    // Producers anew: the block's original inner values are left unread (and unproduced).
    for (Value& v : out_->values) v.producer = -1;
    for (size_t k = 0; k < out_->nodes.size(); ++k) out_->values[out_->nodes[k].output].producer = static_cast<int>(k);
    return out_;
  }

 private:
  int add_value(const std::string& name, TensorType type) {
    out_->values.push_back(Value{name, std::move(type), -1});
    return static_cast<int>(out_->values.size()) - 1;
  }

  void expand(int b) {
    const Block& block = g_.blocks[b];
    const DataParallelSpec& dp = *block.data_parallel;
    const int first = block.first_node, end = block.end_node;
    auto inside = [&](int producer) { return producer >= first && producer < end; };

    // The block's inputs (read inside, made outside) and outputs (made inside, read outside).
    std::vector<int> inputs;
    for (int n = first; n < end; ++n)
      for (int v : g_.nodes[n].inputs)
        if (!inside(g_.values[v].producer) && std::find(inputs.begin(), inputs.end(), v) == inputs.end())
          inputs.push_back(v);
    std::set<int> read_by_layers, read_outside;
    for (int n = 0; n < static_cast<int>(g_.nodes.size()); ++n)
      if (!inside(n)) read_by_layers.insert(g_.nodes[n].inputs.begin(), g_.nodes[n].inputs.end());
    read_outside = read_by_layers;
    for (const GraphOutput& o : g_.outputs) read_outside.insert(o.value);
    if (g_.loss) read_outside.insert(g_.loss->input);
    std::vector<int> outputs;
    for (int n = first; n < end; ++n)
      if (read_outside.count(g_.nodes[n].output)) outputs.push_back(g_.nodes[n].output);
    TANDEM_ASSERT(!inputs.empty(), "data_parallel block '" + block.path + "' reads nothing");

    // What is scattered, and into which chunks.
    std::vector<TensorType> input_types;
    for (int v : inputs) input_types.push_back(concrete(g_.values[v].type, bindings_, g_.values[v].name));
    const int64_t rank = static_cast<int64_t>(input_types[0].shape.size());
    const int64_t dim = dp.dim < 0 ? dp.dim + rank : dp.dim;
    TANDEM_ASSERT(dim >= 0 && dim < rank, "data_parallel dim outside its first input (the loader checks)");
    const std::map<int, SampleOrder> orders = sample_orders(g_, block, dim);  // how the outputs hold the batch
    const int64_t extent = input_types[0].shape[dim].constant();
    std::vector<int64_t> chunks;
    if (dp.chunk_by_memory && memory_of_) {
      std::vector<size_t> memory;
      for (Device d : dp.devices) memory.push_back(memory_of_(d));
      chunks = chunks_by_memory(extent, memory);
    } else {
      chunks = data_parallel_chunks(extent, static_cast<int>(dp.devices.size()), dp.chunk_sizes, block.path);
    }
    const std::optional<std::string> chunk_symbol = g_.values[inputs[0]].type.shape[dim].as_symbol();
    std::vector<bool> scattered;
    for (const TensorType& t : input_types)
      scattered.push_back(static_cast<int64_t>(t.shape.size()) > dim && t.shape[dim].constant() == extent);

    const int replicas = static_cast<int>(chunks.size());
    std::vector<std::map<int, int>> replica_value(replicas);  // original value -> replica k's
    // Of the values replica k reads, as its layers' shape inference sees them: concrete, but
    // for the scattered dim, which stays the chunk symbol where the block's input had it, so
    // that a layer naming it (reshape: {shape: [batch, 9, 64]}) infers as it did at load
    // time; the replica's values get these types with the symbol bound to the chunk.
    std::vector<std::map<int, TensorType>> replica_types(replicas);
    std::vector<Bindings> replica_bindings(replicas, bindings_);
    int64_t offset = 0;
    for (int k = 0; k < replicas; ++k) {
      const std::string tag = std::to_string(k);
      if (chunk_symbol) replica_bindings[k][*chunk_symbol] = chunks[k];
      std::map<int, int>& remap = replica_value[k];
      std::map<int, TensorType>& types = replica_types[k];
      for (size_t i = 0; i < inputs.size(); ++i) {
        const int v = inputs[i];
        if (!scattered[i]) {  // broadcast: every replica reads it whole
          remap[v] = v;
          types[v] = input_types[i];
          continue;
        }
        Node scatter;
        scatter.path = block.path + "@scatter" + tag + "(" + g_.values[v].name + ")";
        scatter.op = "narrow";
        scatter.schema = find_op_schema("narrow");
        scatter.attrs.set("dim", dim);
        scatter.attrs.set("start", offset);
        scatter.attrs.set("length", chunks[k]);
        scatter.inputs = {v};
        scatter.block = block.parent;
        scatter.location = block.location;
        scatter.replica = ReplicaRole{ReplicaRole::Kind::scatter, b, k, replicas};
        TensorType chunk_type = input_types[i];
        chunk_type.shape[dim] = Dim(chunks[k]);
        scatter.output = add_value(scatter.path, chunk_type);
        remap[v] = scatter.output;
        TensorType seen = chunk_type;
        if (chunk_symbol && g_.values[v].type.shape[dim] == Dim::symbol(*chunk_symbol))
          seen.shape[dim] = Dim::symbol(*chunk_symbol);
        types[scatter.output] = seen;
        out_->nodes.push_back(std::move(scatter));
      }
      offset += chunks[k];
    }
    // Layer by layer, each layer's replicas one after the other: the order a runtime submits
    // them in, so that the replicas of a layer reach their devices together and can run side
    // by side (runtime/exec/replica_groups.h).
    for (int n = first; n < end; ++n) {
      for (int k = 0; k < replicas; ++k) {
        std::map<int, int>& remap = replica_value[k];
        std::map<int, TensorType>& types = replica_types[k];
        Node r = g_.nodes[n];
        r.path = g_.nodes[n].path + "@" + std::to_string(k);
        std::vector<TensorType> in_types;
        for (int& v : r.inputs) {
          v = remap.at(v);
          in_types.push_back(types.at(v));
        }
        TensorType seen;
        try {
          seen = r.schema->infer(in_types, r.attrs);
        } catch (const SchemaError& e) {
          // a chunk a layer cannot take: the block is cut along a dimension its layers need whole
          throw UserError(block.location.str() + ": layer '" + g_.nodes[n].path + "' in data_parallel block '" +
                          block.path + "' cannot take replica " + std::to_string(k) + "'s chunk: " + e.what() +
                          ". The block cuts '" + g_.values[inputs[0]].name + "' " +
                          sym_shape_str(g_.values[inputs[0]].type.shape) + " along dim " + std::to_string(dim) +
                          " into chunks of " + chunk_list(chunks) + ", and each replica runs every layer of the "
                          "block on its chunk: scatter along the batch's dimension (dim:), or move this layer out of "
                          "the block");
        }
        r.output = add_value(r.path, concrete(seen, replica_bindings[k], r.path));
        r.device = dp.devices[k];
        r.replica = ReplicaRole{ReplicaRole::Kind::replica, b, k, replicas};
        remap[g_.nodes[n].output] = r.output;
        types[r.output] = seen;
        out_->nodes.push_back(std::move(r));
      }
    }
    for (int o : outputs) {
      if (parallel_loss_ && o == g_.loss->input) {
        // Each replica scores its own chunk: no gather unless a layer reads the whole (graph
        // outputs are not needed in training).
        ParallelLoss loss{dim, {}};
        int64_t start = 0;
        for (int k = 0; k < replicas; ++k) {
          loss.parts.push_back({replica_value[k].at(o), start, chunks[k]});
          start += chunks[k];
        }
        out_->parallel_loss = std::move(loss);
        if (!read_by_layers.count(o)) continue;
      }
      Node gather;
      gather.path = block.path + "@gather(" + g_.values[o].name + ")";
      gather.op = "cat";
      gather.schema = find_op_schema("cat");
      const int64_t gather_at = gather_dim(b, o, inputs[0], dim, chunks, replica_value);
      gather.attrs.set("dim", gather_at);
      for (int k = 0; k < replicas; ++k) gather.inputs.push_back(replica_value[k].at(o));
      gather.output = o;  // the original value: its readers outside are unchanged
      gather.device = dp.output_device;
      gather.block = block.parent;
      gather.location = block.location;
      gather.replica = ReplicaRole{ReplicaRole::Kind::gather, b, 0, replicas};
      const int64_t runs = runs_of(orders, o);
      std::optional<Node> merged;
      if (runs > 1) merged = gather_run_by_run(gather, gather_at, runs, dp.devices, b, replicas);
      out_->nodes.push_back(std::move(gather));
      if (merged) out_->nodes.push_back(std::move(*merged));
    }
  }

  /// How many runs of the batch output `o` holds along its batch dimension (graph/sample_order.h):
  /// 1 when it is ordered by sample.
  static int64_t runs_of(const std::map<int, SampleOrder>& orders, int o) {
    const auto it = orders.find(o);
    if (it == orders.end() || it->second.kind != SampleOrder::Kind::runs || !it->second.runs.is_constant()) return 1;
    return it->second.runs.constant();
  }

  /// An output whose batch dimension holds `runs` runs of the batch, one after another (a
  /// [T·batch, V] flatten of [T, batch, V], a cat along the batch's dimension): each
  /// replica's [.., runs·c_k, ..] is viewed as [.., runs, c_k, ..], the views concatenated
  /// along the chunk's dimension, and the whole viewed back as [.., runs·batch, ..], so that
  /// run r of every replica comes before run r+1, as the block computes it unwrapped.
  /// Rewrites `gather` (the plain cat) into the cat of the views, adds the views, and
  /// returns the view back, which follows the cat.
  Node gather_run_by_run(Node& gather, int64_t at, int64_t runs, const std::vector<Device>& devices, int b, int replicas) {
    const int o = gather.output;
    const TensorType whole = concrete(g_.values[o].type, bindings_, g_.values[o].name);
    auto shape_attr = [](const SymShape& shape) {
      std::vector<std::string> items;
      for (const Dim& d : shape) items.push_back(std::to_string(d.constant()));
      return items;
    };
    auto split = [&](SymShape shape) {  // [.., runs·c, ..] as [.., runs, c, ..]
      const int64_t c = shape[static_cast<size_t>(at)].constant() / runs;
      shape[static_cast<size_t>(at)] = Dim(c);
      shape.insert(shape.begin() + at, Dim(runs));
      return shape;
    };
    for (int k = 0; k < replicas; ++k) {
      const int part = gather.inputs[static_cast<size_t>(k)];
      TensorType viewed = out_->values[part].type;
      viewed.shape = split(viewed.shape);
      Node view;
      view.path = gather.path + "@runs" + std::to_string(k);
      view.op = "reshape";
      view.schema = find_op_schema("reshape");
      view.attrs.set("shape", shape_attr(viewed.shape));
      view.inputs = {part};
      view.output = add_value(view.path, viewed);
      view.device = devices[static_cast<size_t>(k)];
      view.block = gather.block;
      view.location = gather.location;
      view.replica = ReplicaRole{ReplicaRole::Kind::replica, b, k, replicas};
      gather.inputs[static_cast<size_t>(k)] = view.output;
      out_->nodes.push_back(std::move(view));
    }
    TensorType runs_whole = whole;
    runs_whole.shape = split(whole.shape);
    gather.attrs.set("dim", at + 1);
    gather.output = add_value(gather.path + "@runs", runs_whole);
    Node merge;
    merge.path = gather.path + "@merged";
    merge.op = "reshape";
    merge.schema = find_op_schema("reshape");
    merge.attrs.set("shape", shape_attr(whole.shape));
    merge.inputs = {gather.output};
    merge.output = o;  // the original value: its readers outside are unchanged
    merge.device = gather.device;
    merge.block = gather.block;
    merge.location = gather.location;
    return merge;
  }

  // The dimension along which output `o` of block `b` is gathered: the one that carries the
  // batch (graph/gather_dim.h). With a fixed extent no symbol tells, so the replicas' shapes
  // do: the dimension where replica k has chunk k's rows (or a fixed multiple of them, at
  // the scatter dim) and every other dimension is the whole output's.
  int64_t gather_dim(int b, int o, int first_input, int64_t scatter_dim, const std::vector<int64_t>& chunks,
                     const std::vector<std::map<int, int>>& replica_value) const {
    const Block& block = g_.blocks[b];
    const SymShape& declared = g_.values[o].type.shape;
    const Dim& extent_dim = g_.values[first_input].type.shape[scatter_dim];
    GatherDim verdict = gather_dim_of(declared, extent_dim, scatter_dim);
    if (!verdict.dim && verdict.why_not.empty()) {
      const Shape whole = to_shape(concrete(g_.values[o].type, bindings_, g_.values[o].name));
      int64_t extent = 0;
      for (int64_t c : chunks) extent += c;
      std::vector<int64_t> exact, multiple;
      for (size_t d = 0; d < whole.size(); ++d) {
        bool is_exact = true, is_multiple = whole[d] % extent == 0, others_whole = true;
        for (size_t k = 0; k < chunks.size(); ++k) {
          const Shape part = to_shape(out_->values[replica_value[k].at(o)].type);
          if (part.size() != whole.size()) return refuse(block, o, "its replicas' outputs differ in rank from it");
          is_exact = is_exact && part[d] == chunks[k] && whole[d] == extent;
          is_multiple = is_multiple && part[d] * extent == whole[d] * chunks[k];
          for (size_t e = 0; e < whole.size(); ++e) others_whole = others_whole && (e == d || part[e] == whole[e]);
        }
        if (!others_whole) continue;
        if (is_exact) exact.push_back(static_cast<int64_t>(d));
        if (is_multiple) multiple.push_back(static_cast<int64_t>(d));
      }
      if (chunks.size() == 1 && !whole.empty()) return std::min<int64_t>(scatter_dim, static_cast<int64_t>(whole.size()) - 1);
      if (exact.size() == 1) return exact[0];
      if (std::find(multiple.begin(), multiple.end(), scatter_dim) != multiple.end()) return scatter_dim;
      // the one dimension holding each replica's rows several times over (by sample, or in runs
      // of the batch: gathered run by run); the loader refused orders no gather can undo
      if (exact.empty() && multiple.size() == 1) return multiple[0];
      verdict.why_not = exact.empty() ? "no dimension of it holds each replica's rows of the batch of " +
                                            std::to_string(extent) + " (chunks of " + chunk_list(chunks) + ")"
                                      : "several of its dimensions have the batch's size " + std::to_string(extent) +
                                            ", so which one holds the batch is ambiguous; give the batch a symbol "
                                            "(batch) in the model's inputs";
    }
    if (verdict.dim) return *verdict.dim;
    return refuse(block, o, verdict.why_not);
  }

  [[noreturn]] int64_t refuse(const Block& block, int o, const std::string& why) const {
    const bool parallel_loss_input = g_.loss && g_.loss->parallel && g_.loss->input == o;
    throw UserError(block.location.str() + ": layer '" + g_.values[o].name + "': its output " +
                    sym_shape_str(g_.values[o].type.shape) + " leaves data_parallel block '" + block.path +
                    "', but cannot be gathered: " + why +
                    (parallel_loss_input ? ". Training scores it replica by replica (loss: parallel: true) without "
                                           "gathering it, but this pass needs it whole; compute what inference returns "
                                           "from an output that keeps the batch in a dimension of its own"
                                         : ""));
  }

  static Shape to_shape(const TensorType& t) {
    Shape s;
    for (const Dim& d : t.shape) s.push_back(d.constant());
    return s;
  }

  const Graph& g_;
  const Bindings& bindings_;
  const bool parallel_loss_;
  const std::function<size_t(Device)>& memory_of_;
  std::shared_ptr<Graph> out_;
};

}  // namespace

std::shared_ptr<const Graph> replicate_data_parallel(const Graph& graph, const Bindings& bindings, bool training,
                                                     const std::function<size_t(Device)>& memory_of) {
  bool any = std::any_of(graph.blocks.begin(), graph.blocks.end(), [](const Block& b) { return b.data_parallel.has_value(); });
  if (!any) return nullptr;
  return Replicator(graph, bindings, training, memory_of).run();
}

}  // namespace tandem
