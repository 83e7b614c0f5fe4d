// The YAML front end. It walks the document once, expanding blocks, modules and repeats
// into leaf nodes in declaration order, resolving references through a chain of scopes
// (earlier siblings, then enclosing blocks outwards, then graph inputs), and inferring
// every tensor's type as it goes, so that each error can point at the line that causes it.
#include "graph/load_graph.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "core/readable_file.h"
#include "graph/batch_dim.h"
#include "graph/gather_dim.h"
#include "graph/sample_order.h"
#include "graph/layer_init.h"
#include "graph/model_sections.h"
#include "graph/text_similarity.h"
#include "graph/yaml_document.h"
#include "graph/yaml_reader.h"

namespace tandem {
namespace {

constexpr size_t kMaxFileBytes = 16 << 20;
constexpr int kMaxNesting = 64;          // blocks inside blocks, modules included
constexpr int64_t kMaxRepeat = 100000;
constexpr size_t kMaxNodes = 200000;     // leaf layers after expansion

const std::set<std::string> kLayerKeys = {"name", "op", "layers", "module", "repeat", "inputs", "device",
                                          "data_parallel", "init", "precision"};

// A name visible to references: a layer's output, and for a block its children.
struct Entry {
  std::string name;
  int value = -1;
  std::vector<Entry> children;
};

struct Scope {
  const Scope* parent = nullptr;
  const std::vector<Entry>* entries = nullptr;  // earlier siblings
};

class GraphLoader : private YamlReader {
 public:
  explicit GraphLoader(std::string file) : YamlReader(file) { graph_.file = std::move(file); }

  Graph load(const YAML::Node& root) {
    if (!root.IsMap()) fail(root, "", "a model file must be a mapping with name, inputs and layers; got " + kind_of(root));
    // oracle (skip), oracle_steps, oracle_mode, oracle_train, oracle_tolerance and oracle_grad_tolerance are
    // read by the test oracle (tests/oracle) and ignored here
    check_keys(root, {"name", "inputs", "layers", "modules", "outputs", "targets", "loss", "train", "oracle",
                      "oracle_steps", "oracle_mode", "oracle_train", "oracle_grad_tolerance", "oracle_tolerance", "placement",
                      "precision"}, "",
               "top-level key");
    const YAML::Node name = require(root, "name", "");
    graph_.name = scalar_string(name, "", "name");
    if (const YAML::Node p = root["precision"]) graph_.precision = read_precision(p, "");
    load_inputs(require(root, "inputs", ""));
    if (root["modules"]) load_modules(root["modules"]);
    const YAML::Node layers = require(root, "layers", "");
    if (!layers.IsSequence() || layers.size() == 0)
      fail(layers, "", "layers must be a non-empty list of layers; got " + kind_of(layers));
    std::vector<int> graph_inputs;
    for (const GraphInput& in : graph_.inputs) graph_inputs.push_back(in.value);
    std::vector<Entry> top;
    Scope scope{nullptr, &top};
    expand_list(layers, "", graph_inputs, scope, -1, std::nullopt, false, top, 0);
    check_unused_modules();
    load_outputs(root["outputs"], top, root);
    check_symbols_known();
    if (root["targets"]) graph_.targets = load_tensor_decls(root["targets"], "target");
    if (root["loss"]) graph_.loss = load_loss(root["loss"], top);
    check_data_parallel_outputs();
    if (root["train"]) graph_.training = read_training_section(*this, root["train"], graph_);
    if (root["placement"]) graph_.placement = read_placement_section(*this, root["placement"]);
    return std::move(graph_);
  }

 private:
  // ---- graph inputs ---------------------------------------------------------------
  void load_inputs(const YAML::Node& inputs) { graph_.inputs = load_tensor_decls(inputs, "input"); }

  // `inputs:` and `targets:`: name -> {shape, dtype, high}.
  std::vector<GraphInput> load_tensor_decls(const YAML::Node& inputs, const std::string& kind) {
    std::vector<GraphInput> decls;
    if (!inputs.IsMap() || inputs.size() == 0)
      fail(inputs, "", kind + "s must be a mapping of " + kind + " names to {shape, dtype}; got " + kind_of(inputs));
    std::set<std::string> names;
    for (auto it = inputs.begin(); it != inputs.end(); ++it) {
      std::string name = scalar_string(it->first, "", "a " + kind + " name");
      if (!is_identifier(name)) fail(it->first, "", kind + " name '" + name + "' must be letters, digits and _ only");
      if (!names.insert(name).second || (kind == "target" && std::any_of(graph_.inputs.begin(), graph_.inputs.end(),
                                                                      [&](const GraphInput& in) { return in.name == name; })))
        fail(it->first, "", "duplicate " + kind + " '" + name + "'");
      const YAML::Node spec = it->second;
      if (!spec.IsMap()) fail(spec, "", kind + " '" + name + "' must be a mapping {shape: [...], dtype: ...}");
      check_keys(spec, {"shape", "dtype", "high"}, "", "key of " + kind + " '" + name + "'");
      const YAML::Node shape_node = require(spec, "shape", "");
      if (!shape_node.IsSequence())
        fail(shape_node, "", "the shape of input '" + name + "' must be a list such as [batch, 10]");
      TensorType type;
      for (size_t i = 0; i < shape_node.size(); ++i) {
        const YAML::Node d = shape_node[i];
        if (auto v = try_int(d)) {
          if (*v < 1) fail(d, "", kind + " '" + name + "': dimensions must be positive; got " + std::to_string(*v));
          type.shape.push_back(Dim(*v));
        } else if (d.IsScalar() && is_identifier(d.Scalar()) && !std::isdigit(static_cast<unsigned char>(d.Scalar()[0]))) {
          type.shape.push_back(Dim::symbol(d.Scalar()));
        } else {
          fail(d, "", kind + " '" + name + "': a dimension must be a positive integer or a symbol such as batch; got " +
                          kind_of(d));
        }
      }
      if (spec["dtype"]) {
        std::string text = scalar_string(spec["dtype"], "", "dtype");
        auto dtype = parse_dtype(text);
        if (!dtype) fail(spec["dtype"], "", kind + " '" + name + "': unknown dtype '" + text + "'; use float32 or int64");
        type.dtype = *dtype;
      }
      GraphInput input{name, add_value(name, type, -1), std::nullopt, where(it->first)};
      if (spec["high"]) {
        if (type.dtype != DType::int64) fail(spec["high"], "", kind + " '" + name + "': high applies to int64 inputs only");
        input.high = scalar_int(spec["high"], "", "high");
        if (*input.high < 1) fail(spec["high"], "", kind + " '" + name + "': high must be at least 1");
      }
      decls.push_back(input);
    }
    return decls;
  }

  int add_value(const std::string& name, TensorType type, int producer) {
    graph_.values.push_back({name, std::move(type), producer});
    return static_cast<int>(graph_.values.size()) - 1;
  }

  // ---- modules --------------------------------------------------------------------
  void load_modules(const YAML::Node& modules) {
    if (!modules.IsMap()) fail(modules, "", "modules must be a mapping of module names to {layers: [...]}");
    for (auto it = modules.begin(); it != modules.end(); ++it) {
      std::string name = scalar_string(it->first, "", "a module name");
      if (!is_identifier(name)) fail(it->first, "", "module name '" + name + "' must be letters, digits and _ only");
      if (find_op_schema(name)) fail(it->first, "", "module name '" + name + "' is already the name of an op");
      if (modules_.count(name)) fail(it->first, "", "duplicate module '" + name + "'");
      const YAML::Node def = it->second;
      if (!def.IsMap()) fail(def, "", "module '" + name + "' must be a mapping with layers: [...]");
      check_keys(def, {"layers"}, "", "key of module '" + name + "'");
      const YAML::Node layers = require(def, "layers", "");
      if (!layers.IsSequence() || layers.size() == 0)
        fail(layers, "", "module '" + name + "': layers must be a non-empty list");
      modules_[name] = layers;
    }
  }

  // ---- layers ---------------------------------------------------------------------
  // Expands a list of layers into `entries`; returns the output value of the last one.
  int expand_list(const YAML::Node& list, const std::string& prefix, const std::vector<int>& block_inputs,
                  const Scope& outer, int block, std::optional<Device> device, bool in_data_parallel,
                  std::vector<Entry>& entries, int depth) {
    Scope scope{&outer, &entries};
    // The top level's scope is `outer` itself (its entries are `entries`).
    if (outer.entries == &entries) scope = outer;
    std::vector<int> previous = block_inputs;
    std::set<std::string> names;
    for (size_t i = 0; i < list.size(); ++i) {
      const YAML::Node layer = list[i];
      if (!layer.IsMap()) fail(layer, prefix, "each layer must be a mapping such as {name: fc, op: linear, ...}; got " + kind_of(layer));
      std::string name = std::to_string(i);
      if (layer["name"]) {
        name = scalar_string(layer["name"], prefix, "name");
        if (!is_identifier(name)) fail(layer["name"], prefix, "layer name '" + name + "' must be letters, digits and _ only");
      }
      if (!names.insert(name).second) fail(layer["name"] ? layer["name"] : layer, prefix, "duplicate layer name '" + name + "'");
      std::string path = prefix.empty() ? name : prefix + "." + name;
      Entry entry{name, -1, {}};
      entry.value = expand_layer(layer, path, previous, scope, block, device, in_data_parallel, entry, depth);
      entries.push_back(std::move(entry));
      previous = {entries.back().value};
    }
    return previous.at(0);
  }

  int expand_layer(const YAML::Node& layer, const std::string& path, const std::vector<int>& default_inputs,
                   const Scope& scope, int parent_block, std::optional<Device> device, bool in_data_parallel,
                   Entry& entry, int depth) {
    int kinds = (layer["op"] ? 1 : 0) + (layer["layers"] ? 1 : 0) + (layer["module"] ? 1 : 0);
    if (kinds != 1)
      fail(layer, path, kinds == 0 ? "a layer needs op: (a leaf), layers: (a block) or module: (a module use)"
                                   : "a layer has exactly one of op:, layers: and module:");
    std::vector<int> inputs = default_inputs;
    if (const YAML::Node refs = layer["inputs"]) inputs = resolve_inputs(refs, scope, path);
    if (const YAML::Node d = layer["device"]) device = parse_device(d, path, "device");
    // A block's precision reaches every layer inside it that does not declare its own.
    const std::optional<Precision> outer_precision = precision_;
    struct RestorePrecision {
      std::optional<Precision>& current;
      std::optional<Precision> saved;
      ~RestorePrecision() { current = saved; }
    } restore{precision_, outer_precision};
    if (const YAML::Node p = layer["precision"]) precision_ = read_precision(p, path);
    std::optional<DataParallelSpec> dp;
    if (const YAML::Node d = layer["data_parallel"]) {
      if (in_data_parallel)
        fail(d, path, "data_parallel inside another data_parallel block is not supported: the outer block already "
                      "replicates everything in it; remove one of the two");
      dp = parse_data_parallel(d, path, inputs);
    }
    if (layer["op"]) {
      if (layer["repeat"]) fail(layer["repeat"], path, "repeat applies to blocks (layers: or module:), not to a single op; wrap the op in layers:");
      if (dp) {
        // A data-parallel leaf is a block of one layer with the same parameter names.
        int block = open_block(path, parent_block, device, dp, layer, depth);
        int out = expand_leaf(layer, path, inputs, device, block);
        close_block(block);
        return out;
      }
      return expand_leaf(layer, path, inputs, device, parent_block);
    }
    check_keys(layer, kLayerKeys, path, "key of a block");
    if (layer["init"])
      fail(layer["init"], path, "init applies to a leaf layer's parameters (an op), not to a block; put it on the layer");
    const YAML::Node body = layer["layers"] ? layer["layers"] : module_layers(layer["module"], path);
    if (layer["layers"] && (!body.IsSequence() || body.size() == 0))
      fail(body, path, "layers must be a non-empty list of layers; got " + kind_of(body));
    std::string module_name = layer["module"] ? layer["module"].Scalar() : "";
    if (!module_name.empty()) {
      if (std::find(module_stack_.begin(), module_stack_.end(), module_name) != module_stack_.end())
        fail(layer["module"], path, "module '" + module_name + "' uses itself");
      module_stack_.push_back(module_name);
    }
    int block = open_block(path, parent_block, device, dp, layer, depth);
    bool child_dp = in_data_parallel || dp.has_value();
    int out;
    if (const YAML::Node r = layer["repeat"]) {
      int64_t n = scalar_int(r, path, "repeat");
      if (n < 1 || n > kMaxRepeat) fail(r, path, "repeat must be between 1 and " + std::to_string(kMaxRepeat) + "; got " + std::to_string(n));
      std::vector<int> copy_inputs = inputs;
      for (int64_t i = 0; i < n; ++i) {
        std::string copy_path = path + "." + std::to_string(i);
        Entry copy{std::to_string(i), -1, {}};
        int copy_block = open_block(copy_path, block, device, std::nullopt, layer, depth + 1);
        copy.value = expand_list(body, copy_path, copy_inputs, scope_for(scope, entry), copy_block, device, child_dp,
                                 copy.children, depth + 2);
        close_block(copy_block);
        copy_inputs = {copy.value};
        entry.children.push_back(std::move(copy));
      }
      out = copy_inputs[0];
    } else {
      out = expand_list(body, path, inputs, scope, block, device, child_dp, entry.children, depth + 1);
    }
    close_block(block);
    if (!module_name.empty()) module_stack_.pop_back();
    return out;
  }

  // `precision:` on the model, a block or a layer.
  Precision read_precision(const YAML::Node& p, const std::string& path) const {
    const std::string text = scalar_string(p, path, "precision");
    const std::optional<Precision> precision = parse_precision(text);
    if (!precision) fail(p, path, "unknown precision '" + text + "'; use " + std::string(kPrecisionChoices));
    return *precision;
  }

  // A repeated block's copies see the enclosing scope, not each other.
  static const Scope& scope_for(const Scope& scope, const Entry&) { return scope; }

  const YAML::Node module_layers(const YAML::Node& ref, const std::string& path) {
    std::string name = scalar_string(ref, path, "module");
    auto it = modules_.find(name);
    if (it == modules_.end()) {
      std::vector<std::string> known;
      for (const auto& [k, v] : modules_) known.push_back(k);
      fail(ref, path, "unknown module '" + name + "'" + did_you_mean(name, known) +
                          (known.empty() ? "; define it under modules: at the top level" : ""));
    }
    used_modules_.insert(name);
    return it->second;
  }

  int open_block(const std::string& path, int parent, std::optional<Device> device, std::optional<DataParallelSpec> dp,
                 const YAML::Node& at, int depth) {
    if (depth > kMaxNesting) fail(at, path, "blocks are nested more than " + std::to_string(kMaxNesting) + " deep");
    Block b;
    b.path = path;
    b.parent = parent;
    b.first_node = b.end_node = static_cast<int>(graph_.nodes.size());
    b.device = device;
    b.data_parallel = std::move(dp);
    b.location = where(at);
    graph_.blocks.push_back(std::move(b));
    return static_cast<int>(graph_.blocks.size()) - 1;
  }

  void close_block(int block) { graph_.blocks[block].end_node = static_cast<int>(graph_.nodes.size()); }

  DataParallelSpec parse_data_parallel(const YAML::Node& d, const std::string& path, const std::vector<int>& inputs) {
    if (!d.IsMap()) fail(d, path, "data_parallel must be a mapping {devices: [cuda:0, cuda:1], output_device: cuda:0, dim: 0}");
    check_keys(d, {"devices", "output_device", "dim", "chunk_sizes", "chunking"}, path, "key of data_parallel");
    const YAML::Node devices = require(d, "devices", path);
    DataParallelSpec spec;
    spec.all_devices = devices.IsScalar() && devices.Scalar() == "all";
    if (!spec.all_devices && (!devices.IsSequence() || devices.size() == 0))
      fail(devices, path, "data_parallel devices must be all (every GPU) or a non-empty list such as [cuda:0, cuda:1]");
    for (size_t i = 0; !spec.all_devices && i < devices.size(); ++i) {
      Device dev = parse_device(devices[i], path, "data_parallel device");
      if (dev.kind != DeviceKind::cuda)
        fail(devices[i], path, "data_parallel replicates over GPUs; '" + dev.str() + "' is not a cuda device");
      if (std::find(spec.devices.begin(), spec.devices.end(), dev) != spec.devices.end())
        fail(devices[i], path, "device '" + dev.str() + "' is listed twice in data_parallel devices");
      spec.devices.push_back(dev);
    }
    // with devices: all, the first GPU, as nn.DataParallel's device_ids[0]
    spec.output_device = d["output_device"]   ? parse_device(d["output_device"], path, "output_device")
                         : spec.all_devices ? Device::cuda(0)
                                            : spec.devices[0];
    if (d["dim"]) spec.dim = scalar_int(d["dim"], path, "data_parallel dim");
    for (int v : inputs) {
      int64_t rank = static_cast<int64_t>(graph_.values[v].type.shape.size());
      if (spec.dim < -rank || spec.dim >= rank)
        fail(d["dim"] ? d["dim"] : d, path, "data_parallel dim " + std::to_string(spec.dim) + " does not exist in input '" +
                                           graph_.values[v].name + "' of shape " + sym_shape_str(graph_.values[v].type.shape));
    }
    if (const YAML::Node c = d["chunk_sizes"]) {
      if (spec.all_devices)
        fail(c, path, "chunk_sizes gives one size per device, but devices: all leaves the count to the machine; list "
                      "the devices, or size the chunks with chunking: equal or memory");
      if (!c.IsSequence() || c.size() != spec.devices.size())
        fail(c, path, "chunk_sizes must list one positive size per device (" + std::to_string(spec.devices.size()) + ")");
      for (size_t i = 0; i < c.size(); ++i) {
        int64_t v = scalar_int(c[i], path, "a chunk size");
        if (v < 1) fail(c[i], path, "chunk sizes must be positive; got " + std::to_string(v));
        spec.chunk_sizes.push_back(v);
      }
    }
    if (const YAML::Node c = d["chunking"]) {
      std::string how = scalar_string(c, path, "chunking");
      if (how != "equal" && how != "memory")
        fail(c, path, "chunking must be equal (torch.chunk's sizes) or memory (sized by each device's memory); got '" +
                          how + "'");
      if (how == "memory" && !spec.chunk_sizes.empty())
        fail(c, path, "chunking: memory and chunk_sizes both size the chunks; keep one");
      spec.chunk_by_memory = how == "memory";
    }
    return spec;
  }

  // The schema `op:` names; an unknown op fails with the nearest name.
  const OpSchema* op_schema_of(const YAML::Node& op_node, const std::string& path) {
    std::string op = scalar_string(op_node, path, "op");
    const OpSchema* schema = find_op_schema(op);
    if (!schema) {
      std::vector<std::string> names;
      for (const OpSchema* s : all_op_schemas()) names.push_back(s->name);
      for (const auto& [k, v] : modules_) names.push_back(k);
      std::string hint = did_you_mean(op, names);
      if (modules_.count(op)) hint = " ('" + op + "' is a module: write module: " + op + ")";
      fail(op_node, path, "unknown op '" + op + "'" + hint);
    }
    return schema;
  }

  // A module no layer uses is checked too, as far as it can be without an input to infer
  // shapes from: its ops, their attributes and the modules it names. A mistake in it is
  // reported now, not when a layer first uses it.
  void check_unused_modules() {
    const std::set<std::string> used = used_modules_;
    for (const auto& [name, layers] : modules_)
      if (!used.count(name)) check_module_layers(layers, "modules." + name, 0);
  }

  void check_module_layers(const YAML::Node& layers, const std::string& prefix, int depth) {
    if (depth > kMaxNesting) fail(layers, prefix, "blocks are nested more than " + std::to_string(kMaxNesting) + " deep");
    for (size_t i = 0; i < layers.size(); ++i) {
      const YAML::Node layer = layers[i];
      if (!layer.IsMap()) fail(layer, prefix, "a layer must be a mapping such as {name: fc, op: linear, ...}");
      const YAML::Node name = layer["name"];
      const std::string path = prefix + "." + (name && name.IsScalar() ? name.Scalar() : std::to_string(i));
      if (const YAML::Node op = layer["op"]) parse_attributes(layer, *op_schema_of(op, path), path);
      if (const YAML::Node inner = layer["layers"]; inner && inner.IsSequence())
        check_module_layers(inner, path, depth + 1);
      if (const YAML::Node ref = layer["module"]) module_layers(ref, path);
    }
  }

  int expand_leaf(const YAML::Node& layer, const std::string& path, const std::vector<int>& inputs,
                  std::optional<Device> device, int block) {
    if (graph_.nodes.size() >= kMaxNodes)
      fail(layer, path, "the model expands to more than " + std::to_string(kMaxNodes) + " layers");
    const YAML::Node op_node = layer["op"];
    const OpSchema* schema = op_schema_of(op_node, path);
    const std::string op = schema->name;
    Node node;
    node.path = path;
    node.op = op;
    node.schema = schema;
    node.device = device;
    node.precision = precision_;
    node.block = block;
    node.location = where(layer);
    node.attrs = parse_attributes(layer, *schema, path);
    int n_in = static_cast<int>(inputs.size());
    if (n_in < schema->min_inputs || (schema->max_inputs >= 0 && n_in > schema->max_inputs)) {
      std::string want = schema->max_inputs < 0 ? "at least " + std::to_string(schema->min_inputs)
                         : schema->min_inputs == schema->max_inputs ? std::to_string(schema->min_inputs)
                         : std::to_string(schema->min_inputs) + " or " + std::to_string(schema->max_inputs);
      std::string got;
      for (int v : inputs) got += (got.empty() ? "" : ", ") + graph_.values[v].name;
      fail(layer["inputs"] ? layer["inputs"] : layer, path,
           op + " takes " + want + " input(s) but receives " + std::to_string(n_in) + " (" + got + ")" +
               (layer["inputs"] ? "" : "; name the tensors it reads with inputs: [...]"));
    }
    std::vector<TensorType> types;
    for (int v : inputs) types.push_back(graph_.values[v].type);
    TensorType out;
    try {
      out = schema->infer(types, node.attrs);
      if (schema->params)
        for (ParamSpec p : schema->params(node.attrs)) {
          shape_numel(p.shape);
          p.name = p.name.empty() ? path : path + "." + p.name;  // parameter's own name is its path
          node.params.push_back(std::move(p));
        }
    } catch (const SchemaError& e) {
      fail(layer, path, e.what());
    } catch (const UserError& e) {
      fail(layer, path, e.what());
    }
    if (const YAML::Node init = layer["init"]) read_layer_init(*this, init, path, node.params);
    node.inputs = inputs;
    node.output = add_value(path, out, static_cast<int>(graph_.nodes.size()));
    graph_.nodes.push_back(std::move(node));
    return graph_.nodes.back().output;
  }

  Attributes parse_attributes(const YAML::Node& layer, const OpSchema& schema, const std::string& path) {
    Attributes attrs;
    std::vector<std::string> names;
    for (const AttrSpec& a : schema.attrs) names.push_back(a.name);
    std::set<std::string> seen;
    for (auto it = layer.begin(); it != layer.end(); ++it) {
      if (!it->first.IsScalar()) fail(it->first, path, "keys must be plain names");
      const std::string& key = it->first.Scalar();
      if (!seen.insert(key).second) fail(it->first, path, "duplicate key '" + key + "'");
      if (kLayerKeys.count(key)) continue;
      auto spec = std::find_if(schema.attrs.begin(), schema.attrs.end(), [&](const AttrSpec& a) { return a.name == key; });
      if (spec == schema.attrs.end()) {
        std::string accepted;
        for (const std::string& n : names) accepted += (accepted.empty() ? "" : ", ") + n;
        fail(it->first, path, "unknown attribute '" + key + "' for op '" + schema.name + "'" + did_you_mean(key, names) +
                                  (accepted.empty() ? "; it takes no attributes" : "; it takes: " + accepted));
      }
      attrs.set(key, parse_attribute(it->second, *spec, path));
    }
    for (const AttrSpec& a : schema.attrs) {
      if (attrs.has(a.name)) continue;
      if (a.required) fail(layer, path, "op '" + schema.name + "' needs attribute '" + a.name + "'");
      attrs.set(a.name, a.default_value);
    }
    if (schema.validate) {
      try {
        schema.validate(attrs);
      } catch (const SchemaError& e) {
        fail(layer, path, e.what());
      }
    }
    return attrs;
  }

  AttrValue parse_attribute(const YAML::Node& n, const AttrSpec& spec, const std::string& path) {
    std::string what = "attribute '" + spec.name + "'";
    if (n.IsNull()) {
      if (spec.nullable) return std::monostate{};
      fail(n, path, what + " cannot be null");
    }
    auto check_range = [&](double v) {
      if (spec.min && v < *spec.min) fail(n, path, what + " must be at least " + fmt_number(*spec.min) + "; got " + n.Scalar());
      if (spec.max && v > *spec.max) fail(n, path, what + " must be at most " + fmt_number(*spec.max) + "; got " + n.Scalar());
    };
    switch (spec.type) {
      case AttrType::integer: {
        int64_t v = scalar_int(n, path, what);
        check_range(static_cast<double>(v));
        return v;
      }
      case AttrType::number: {
        double v = scalar_number(n, path, what);
        check_range(v);
        return v;
      }
      case AttrType::boolean: return scalar_bool(n, path, what);
      case AttrType::string: {
        std::string v = scalar_string(n, path, what);
        if (!spec.choices.empty() && std::find(spec.choices.begin(), spec.choices.end(), v) == spec.choices.end()) {
          std::string list;
          for (const auto& c : spec.choices) list += (list.empty() ? "" : ", ") + c;
          fail(n, path, what + " must be one of " + list + "; got '" + v + "'" + did_you_mean(v, spec.choices));
        }
        return v;
      }
      case AttrType::int_list: {
        // a word among `choices` stands for a rule (conv2d's padding: 'same', 'valid')
        if (n.IsScalar() && std::find(spec.choices.begin(), spec.choices.end(), n.Scalar()) != spec.choices.end())
          return n.Scalar();
        if (n.IsScalar()) {
          int64_t v = scalar_int(n, path, what);
          check_range(static_cast<double>(v));
          return std::vector<int64_t>{v};
        }
        if (!n.IsSequence()) fail(n, path, what + " must be an integer or a list of integers; got " + kind_of(n));
        std::vector<int64_t> list;
        for (size_t i = 0; i < n.size(); ++i) {
          int64_t v = scalar_int(n[i], path, what + " entry");
          if (spec.min && v < *spec.min) fail(n[i], path, what + " entries must be at least " + fmt_number(*spec.min));
          list.push_back(v);
        }
        return list;
      }
      case AttrType::shape: {
        if (!n.IsSequence() || n.size() == 0) fail(n, path, what + " must be a list such as [batch, -1, 4]; got " + kind_of(n));
        std::vector<std::string> items;
        for (size_t i = 0; i < n.size(); ++i) {
          if (!n[i].IsScalar()) fail(n[i], path, what + " entries must be sizes, -1 or symbols; got " + kind_of(n[i]));
          items.push_back(n[i].Scalar());
        }
        return items;
      }
    }
    fail(n, path, what + ": unsupported attribute type");
  }

  static std::string fmt_number(double v) {
    std::ostringstream out;
    out << v;
    return out.str();
  }

  // ---- data-parallel outputs ---------------------------------------------------------
  // Every output of a data_parallel block (read by a layer after it, a graph output, the
  // loss's input) is gathered along the dimension that carries the batch
  // (graph/gather_dim.h); one without such a dimension is refused here, so that `check`
  // refuses what `run` could not gather.
  void check_data_parallel_outputs() const {
    for (const Block& block : graph_.blocks) {
      if (!block.data_parallel) continue;
      auto inside = [&](int producer) { return producer >= block.first_node && producer < block.end_node; };
      const int first_input = scattered_input(graph_, block);
      if (first_input < 0) continue;
      const SymShape& scattered = graph_.values[first_input].type.shape;
      const int64_t rank = static_cast<int64_t>(scattered.size());
      const int64_t dim = block.data_parallel->dim < 0 ? block.data_parallel->dim + rank : block.data_parallel->dim;
      if (dim < 0 || dim >= rank) continue;  // refused with the block
      const std::vector<int64_t>& chunks = block.data_parallel->chunk_sizes;
      if (!chunks.empty() && scattered[dim].is_constant()) {  // every batch has this extent: check it now
        int64_t total = 0;
        for (int64_t c : chunks) total += c;
        if (total != scattered[dim].constant())
          throw ModelError(block.location.str() + ": data_parallel block '" + block.path + "': chunk_sizes add up to " +
                               std::to_string(total) + ", but the block scatters dim " + std::to_string(dim) + " of '" +
                               graph_.values[first_input].name + "' " + sym_shape_str(scattered) + ", of " +
                               scattered[dim].str() + "; make them add up to " + scattered[dim].str(),
                           block.location);
      }
      std::set<int> read_outside;
      for (int n = 0; n < static_cast<int>(graph_.nodes.size()); ++n)
        if (!inside(n)) read_outside.insert(graph_.nodes[n].inputs.begin(), graph_.nodes[n].inputs.end());
      for (const GraphOutput& o : graph_.outputs) read_outside.insert(o.value);
      if (graph_.loss) read_outside.insert(graph_.loss->input);
      // A parallel loss's input that no layer after the block reads is scored replica by
      // replica in training, never gathered there (a sequence model's [T·batch, V] logits):
      // only an inference pass would gather it, and place() refuses that pass, saying why.
      const bool scored_apart = graph_.loss && graph_.loss->parallel;
      const std::map<int, SampleOrder> orders = sample_orders(graph_, block, dim);
      for (int n = block.first_node; n < block.end_node; ++n) {
        const Value& out = graph_.values[graph_.nodes[n].output];
        const int v = graph_.nodes[n].output;
        if (!read_outside.count(v)) continue;
        if (scored_apart && v == graph_.loss->input && !read_by_layers_outside(block, v)) continue;
        const GatherDim gather = gather_dim_of(out.type.shape, scattered[dim], dim);
        const std::string why_not = gather.why_not.empty() ? sample_order_problem(graph_, orders, v) : gather.why_not;
        if (why_not.empty()) continue;
        throw ModelError(graph_.nodes[n].location.str() + ": layer '" + graph_.nodes[n].path + "': its output " +
                             sym_shape_str(out.type.shape) + " leaves data_parallel block '" + block.path +
                             "' (scattered along dim " + std::to_string(dim) + " of '" +
                             graph_.values[first_input].name + "' " + sym_shape_str(scattered) +
                             "), but cannot be gathered: " + why_not,
                         graph_.nodes[n].location);
      }
    }
  }

  bool read_by_layers_outside(const Block& block, int value) const {
    for (int n = 0; n < static_cast<int>(graph_.nodes.size()); ++n)
      if ((n < block.first_node || n >= block.end_node) &&
          std::find(graph_.nodes[n].inputs.begin(), graph_.nodes[n].inputs.end(), value) != graph_.nodes[n].inputs.end())
        return true;
    return false;
  }

  // ---- loss and training -----------------------------------------------------------
  // The data_parallel block that makes `value`, or -1.
  int data_parallel_block_making(int value) const {
    int producer = graph_.values[value].producer;
    if (producer < 0) return -1;
    for (int b = graph_.nodes[producer].block; b >= 0; b = graph_.blocks[b].parent)
      if (graph_.blocks[b].data_parallel) return b;
    return -1;
  }

  // A parallel loss splits its target into the replicas' rows as the block splits its first
  // input: along the block's dim where the target has the batch there (a sequence-first
  // [T, batch] target), else along dim 0. The target must have the batch at that dim, or
  // the replicas would score their rows against other rows' targets.
  void check_parallel_target(const YAML::Node& n, const LossSpec& loss) {
    const Block& block = graph_.blocks[data_parallel_block_making(loss.input)];
    const DataParallelSpec& dp = *block.data_parallel;
    int first_input = -1;
    for (int node = block.first_node; node < block.end_node && first_input < 0; ++node)
      for (int v : graph_.nodes[node].inputs) {
        const int producer = graph_.values[v].producer;
        if (producer < block.first_node || producer >= block.end_node) {
          first_input = v;
          break;
        }
      }
    if (first_input < 0) return;  // the block reads nothing: refused where its layers are
    const SymShape& scattered = graph_.values[first_input].type.shape;
    const int64_t rank = static_cast<int64_t>(scattered.size());
    const int64_t dim = dp.dim < 0 ? dp.dim + rank : dp.dim;
    if (dim < 0 || dim >= rank) return;  // refused with the block
    const Dim& batch = scattered[dim];
    const SymShape& target = graph_.values[loss.target].type.shape;
    const bool at_dim = static_cast<int64_t>(target.size()) > dim && target[dim] == batch;
    if (at_dim || (!target.empty() && target[0] == batch)) return;
    const std::string where = dim == 0 ? "dim 0" : "dim " + std::to_string(dim) + " (or 0)";
    fail(n, "", "parallel: true scores each replica's chunk against its own rows of target '" +
                    graph_.values[loss.target].name + "' " + sym_shape_str(target) + ", cut at " + where +
                    " as block '" + block.path + "' cuts '" + graph_.values[first_input].name + "' " +
                    sym_shape_str(scattered) + " into chunks of " + batch.str() + "; but the target has no " +
                    batch.str() + " there. Put " + batch.str() + " at " + where + " of the target, or drop parallel");
  }

  LossSpec load_loss(const YAML::Node& n, const std::vector<Entry>& top) {
    if (!n.IsMap()) fail(n, "", "loss must be a mapping such as {op: cross_entropy, input: head, target: label}");
    check_keys(n, {"op", "input", "target", "reduction", "ignore_index", "label_smoothing", "parallel"}, "", "key of loss");
    static const std::vector<std::string> ops = {"cross_entropy", "nll_loss", "mse_loss",
                                                 "binary_cross_entropy_with_logits"};
    LossSpec loss;
    const YAML::Node op = require(n, "op", "");
    loss.op = scalar_string(op, "", "loss op");
    if (std::find(ops.begin(), ops.end(), loss.op) == ops.end())
      fail(op, "", "unknown loss '" + loss.op + "'" + did_you_mean(loss.op, ops) +
                       "; use cross_entropy, nll_loss, mse_loss or binary_cross_entropy_with_logits");
    Scope scope{nullptr, &top};
    loss.input = n["input"] ? resolve(n["input"], scope, "") : graph_.outputs.at(0).value;
    if (graph_.targets.empty()) fail(n, "", "the loss needs a target: declare it under targets: (like inputs:)");
    if (const YAML::Node t = n["target"]) {
      std::string name = scalar_string(t, "", "loss target");
      auto it = std::find_if(graph_.targets.begin(), graph_.targets.end(), [&](const GraphInput& g) { return g.name == name; });
      if (it == graph_.targets.end()) {
        std::vector<std::string> names;
        for (const GraphInput& g : graph_.targets) names.push_back(g.name);
        fail(t, "", "unknown target '" + name + "'" + did_you_mean(name, names) + "; targets are declared under targets:");
      }
      loss.target = it->value;
    } else if (graph_.targets.size() == 1) {
      loss.target = graph_.targets[0].value;
    } else {
      fail(n, "", "there are several targets: name the loss's with target:");
    }
    if (const YAML::Node r = n["reduction"]) {
      loss.reduction = scalar_string(r, "", "reduction");
      if (loss.reduction != "mean" && loss.reduction != "sum")
        fail(r, "", "reduction must be mean or sum for a training loss; got '" + loss.reduction + "'");
    }
    bool classification = loss.op == "cross_entropy" || loss.op == "nll_loss";
    if (const YAML::Node i = n["ignore_index"]) {
      if (!classification) fail(i, "", "ignore_index applies to cross_entropy and nll_loss");
      loss.ignore_index = scalar_int(i, "", "ignore_index");
    }
    if (const YAML::Node l = n["label_smoothing"]) {
      if (loss.op != "cross_entropy") fail(l, "", "label_smoothing applies to cross_entropy");
      loss.label_smoothing = scalar_number(l, "", "label_smoothing");
      if (loss.label_smoothing < 0 || loss.label_smoothing > 1) fail(l, "", "label_smoothing must be within [0, 1]");
    }
    if (const YAML::Node p = n["parallel"]) {
      loss.parallel = scalar_bool(p, "", "loss parallel");
      if (loss.parallel && data_parallel_block_making(loss.input) < 0)
        fail(p, "", "parallel: true computes the loss on each replica of a data_parallel block, but its input '" +
                        graph_.values[loss.input].name + "' is not made inside one; wrap the layers that make it in "
                        "data_parallel: or drop parallel");
    }
    const TensorType& in = graph_.values[loss.input].type;
    const TensorType& target = graph_.values[loss.target].type;
    std::string shapes = " (input " + sym_shape_str(in.shape) + " " + std::string(dtype_name(in.dtype)) + ", target " +
                         sym_shape_str(target.shape) + " " + std::string(dtype_name(target.dtype)) + ")";
    if (in.dtype != DType::float32) fail(n, "", loss.op + " needs a float32 input" + shapes);
    if (classification) {
      // A target of several dimensions is read flattened, as torch's
      // cross_entropy(logits.view(-1, C), y.view(-1)): a sequence model's logits, flattened to
      // [T·batch, C] by a layer, are scored against a target [T, batch] that no layer can reshape.
      if (in.shape.size() != 2 || target.shape.empty() || target.dtype != DType::int64 ||
          !(in.shape[0] == sym_numel(target.shape)))
        fail(n, "", loss.op + " needs an input [N, classes] and an int64 target [N] of class indices (or of N " +
                        "elements in any shape, read flattened)" + shapes);
      if (!in.shape[1].is_constant()) fail(n, "", loss.op + ": the number of classes must be a fixed size" + shapes);
    } else if (target.dtype != DType::float32 || !(in.shape == target.shape)) {
      fail(n, "", loss.op + " needs a float32 target of the input's shape" + shapes);
    }
    if (loss.parallel) check_parallel_target(n["parallel"], loss);
    return loss;
  }

  // ---- references -----------------------------------------------------------------
  std::vector<int> resolve_inputs(const YAML::Node& refs, const Scope& scope, const std::string& path) {
    std::vector<int> values;
    if (refs.IsScalar()) {
      values.push_back(resolve(refs, scope, path));
    } else if (refs.IsSequence() && refs.size() > 0) {
      for (size_t i = 0; i < refs.size(); ++i) values.push_back(resolve(refs[i], scope, path));
    } else {
      fail(refs, path, "inputs must name a tensor or a list of tensors; got " + kind_of(refs));
    }
    return values;
  }

  int resolve(const YAML::Node& ref, const Scope& scope, const std::string& path) {
    std::string text = scalar_string(ref, path, "an input reference");
    std::vector<std::string> parts;
    std::stringstream ss(text);
    for (std::string part; std::getline(ss, part, '.');) parts.push_back(part);
    if (parts.empty() || std::any_of(parts.begin(), parts.end(), [](const std::string& p) { return p.empty(); }))
      fail(ref, path, "'" + text + "' is not a tensor name");
    for (const Scope* s = &scope; s; s = s->parent) {
      for (const Entry& e : *s->entries) {
        if (e.name != parts[0]) continue;
        const Entry* cur = &e;
        for (size_t i = 1; i < parts.size(); ++i) {
          auto next = std::find_if(cur->children.begin(), cur->children.end(),
                                   [&](const Entry& c) { return c.name == parts[i]; });
          if (next == cur->children.end()) {
            std::vector<std::string> names;
            for (const Entry& c : cur->children) names.push_back(c.name);
            fail(ref, path, "'" + text + "': '" + parts[i - 1] + "' has no layer '" + parts[i] + "'" + did_you_mean(parts[i], names));
          }
          cur = &*next;
        }
        return cur->value;
      }
    }
    if (parts.size() == 1)
      for (const GraphInput& in : graph_.inputs)
        if (in.name == text) return in.value;
    std::vector<std::string> visible;
    for (const Scope* s = &scope; s; s = s->parent)
      for (const Entry& e : *s->entries) visible.push_back(e.name);
    for (const GraphInput& in : graph_.inputs) visible.push_back(in.name);
    fail(ref, path, "unknown input '" + text + "'" + did_you_mean(parts[0], visible) +
                        "; a layer reads graph inputs and layers declared before it");
  }

  // Every size must be computable once the inputs are given: a symbol that only a
  // layer introduces (reshape's shape: [seq, -1]) must also appear in an input shape.
  void check_symbols_known() const {
    std::vector<std::string> known = graph_.symbols();
    for (const Node& node : graph_.nodes)
      for (const Dim& d : graph_.values[node.output].type.shape)
        for (const std::string& s : d.symbols())
          if (std::find(known.begin(), known.end(), s) == known.end()) {
            throw ModelError(node.location.str() + ": layer '" + node.path + "': symbol '" + s +
                                 "' does not appear in any input shape, so its value would be unknown" +
                                 did_you_mean(s, known),
                             node.location);
          }
  }

  void load_outputs(const YAML::Node& outputs, const std::vector<Entry>& top, const YAML::Node& root) {
    Scope scope{nullptr, &top};
    if (!outputs.IsDefined() || outputs.IsNull()) {
      graph_.outputs.push_back({top.back().name, top.back().value});
      return;
    }
    std::set<std::string> names;
    auto add = [&](const std::string& name, const YAML::Node& ref, const YAML::Node& at) {
      if (!names.insert(name).second) fail(at, "", "duplicate output '" + name + "'");
      graph_.outputs.push_back({name, resolve(ref, scope, "")});
    };
    if (outputs.IsSequence() && outputs.size() > 0) {
      for (size_t i = 0; i < outputs.size(); ++i) add(scalar_string(outputs[i], "", "an output"), outputs[i], outputs[i]);
    } else if (outputs.IsMap() && outputs.size() > 0) {
      for (auto it = outputs.begin(); it != outputs.end(); ++it) {
        std::string name = scalar_string(it->first, "", "an output name");
        if (!is_identifier(name)) fail(it->first, "", "output name '" + name + "' must be letters, digits and _ only");
        add(name, it->second, it->first);
      }
    } else {
      fail(outputs, "", "outputs must be a list of tensor names or a mapping name: tensor; got " + kind_of(outputs));
    }
    (void)root;
  }

  Graph graph_;
  std::map<std::string, YAML::Node> modules_;
  std::set<std::string> used_modules_;  // those a layer expanded; the others are checked apart
  std::vector<std::string> module_stack_;
  std::optional<Precision> precision_;  // the enclosing blocks' precision: (none: the model's)
};

}  // namespace

Graph load_graph_from_string(const std::string& text, const std::string& file_name) {
  if (text.size() > kMaxFileBytes)
    throw ModelError(file_name + ": the file is larger than 16 MiB; a model file holds the layer graph, not weights",
                     {file_name, 1, 1});
  YAML::Node root = load_yaml_document(text, file_name);
  if (!root.IsDefined() || root.IsNull())
    throw ModelError(file_name + ":1:1: the file is empty; a model needs name, inputs and layers", {file_name, 1, 1});
  try {
    return GraphLoader(file_name).load(root);
  } catch (const ModelError&) {
    throw;
  } catch (const YAML::Exception& e) {
    SourceLocation loc{file_name, std::max(1, e.mark.line + 1), std::max(1, e.mark.column + 1)};
    throw ModelError(loc.str() + ": " + e.msg, loc);
  }
}

Graph load_graph(const std::string& path) {
  std::string text;
  try {
    ReadableFile file(path);
    if (file.size() > kMaxFileBytes)
      throw UserError(path + ": the file is larger than 16 MiB; a model file holds the layer graph, not weights");
    text = file.read_all();
  } catch (const UserError& e) {
    throw ModelError(e.what(), {path, 0, 0});
  }
  return load_graph_from_string(text, path);
}

}  // namespace tandem
