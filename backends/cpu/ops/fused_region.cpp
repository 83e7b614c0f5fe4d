// The cpu's inference regions (backends/region_spec.h): a run of conv2d, batch_norm2d,
// activations, add, mul and pooling layers computed as one kernel, in one of oneDNN's own
// layouts from its first layer to its last (fp32: its channel blocks, nChw16c or nChw8c by
// the ISA, backends/cpu/cpu_channel_block.h; bf16: channels-last), as torch.jit.freeze with
// oneDNN fusion or ONNX Runtime would run them:
//   - the region's inputs are reordered to that layout once, its output back to NCHW once; no
//     reorder sits between two of its layers (the layer-by-layer kernels reorder to
//     oneDNN's blocked layouts and back around every convolution);
//   - a convolution absorbs what follows it while each tensor in between has that one
//     reader: a batch_norm2d (eval: its running statistics folded into the weight and bias,
//     W' = W s, b' = (b - mean) s + beta, s = gamma / sqrt(var + eps)), activations
//     (oneDNN eltwise post-ops) and one residual add (a sum post-op: the convolution adds
//     itself onto the other operand, in place when the add was that operand's last reader);
//   - add and mul (broadcast of [N, C, 1, 1], squeeze-excitation's) absorb the activations
//     after them as post-ops, and every single-reader activation, batch norm or binary op
//     writes in place over its input;
//   - a bf16 convolution (precision: bf16 on a CPU with avx512_bf16) reads a bf16 copy of
//     its input and its folded weight; it writes fp32, as the layer-by-layer kernel.
// The region's tensors live in a few buffers reused by liveness, laid out in the workspace
// the runtime allocates from the device's memory (Kernel::workspace_bytes); the folded weights are made again when params_version or the parameters'
// storage changes. Folding changes the rounding of a convolution + batch norm by about one
// ulp of fp32 (torch.jit.freeze folds the same way).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/cpu_channel_block.h"
#include "backends/cpu/cpu_precision.h"
#include "backends/cpu/ops/op_factories.h"
#include "backends/cpu/ops/op_util.h"
#include "graph/ops/window2d.h"

namespace tandem {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using DataType = memory::data_type;
using Algorithm = dnnl::algorithm;

/// One oneDNN eltwise step of an activation: most are one; hardsigmoid, which oneDNN 2.6
/// lacks, is x / 6 + 1/2 clipped to [0, 1].
struct EltwiseStep {
  Algorithm alg;
  float alpha = 0.f, beta = 0.f;
};

std::vector<EltwiseStep> eltwise_steps(const KernelSpec& spec) {
  const std::string& op = spec.op;
  if (op == "relu") return {{Algorithm::eltwise_relu}};
  if (op == "relu6") return {{Algorithm::eltwise_clip_v2, 0.f, 6.f}};
  if (op == "hardswish") return {{Algorithm::eltwise_hardswish}};
  if (op == "hardsigmoid") return {{Algorithm::eltwise_linear, 1.f / 6.f, 0.5f}, {Algorithm::eltwise_clip_v2, 0.f, 1.f}};
  if (op == "silu") return {{Algorithm::eltwise_swish, 1.f}};
  if (op == "sigmoid") return {{Algorithm::eltwise_logistic}};
  if (op == "tanh") return {{Algorithm::eltwise_tanh}};
  if (op == "mish") return {{Algorithm::eltwise_mish}};
  if (op == "gelu") {
    const std::string& approximate = spec.attrs->get_string("approximate");
    if (approximate == "none") return {{Algorithm::eltwise_gelu_erf}};
    if (approximate == "tanh") return {{Algorithm::eltwise_gelu_tanh}};
  }
  return {};
}

bool image(const TensorDesc& t) { return t.shape.size() == 4 && t.dtype == DType::float32; }

/// [N, C, 1, 1] or [1, C, 1, 1] against `full` [N, C, H, W]: a per-channel operand.
bool per_channel_of(const Shape& s, const Shape& full) {
  return s.size() == 4 && (s[0] == full[0] || s[0] == 1) && s[1] == full[1] && s[2] == 1 && s[3] == 1;
}

/// The operand of a binary op that has the output's shape (0 or 1), when the other one has
/// it too or is per-channel; -1 otherwise.
int full_operand(const KernelSpec& spec) {
  const Shape& out = spec.outputs[0].shape;
  const Shape &a = spec.inputs[0].shape, &b = spec.inputs[1].shape;
  if (a == out && (b == out || per_channel_of(b, out))) return 0;
  if (b == out && per_channel_of(a, out)) return 1;
  return -1;
}

/// Whether a region reads an input of `channels` where it is, in NCHW, rather than in its
/// blocks: an image's few channels (a network's stem), which a convolution reads best so and
/// whole blocks would pad. fp32 regions only (a bf16 one reads a channels-last copy).
bool read_in_place(int64_t channels, bool bf16) { return !bf16 && channels < cpu::channel_block(); }

/// Whether oneDNN 2.6 has a fast kernel for the convolution `spec` in a region's layouts,
/// asked of oneDNN itself: where it has none it runs its reference convolution, a hundred
/// times slower. Seen: a grouped convolution whose groups are not whole channel blocks
/// (with AVX-512: regnet_y_400mf's 8 channels, resnext50_32x4d's 4, regnet_y_128gf's 264;
/// regnet_y_400mf's forward took 4.3 s, 25 ms without those) and, with AVX2, a dilation of
/// 4 or more (FCN's and DeepLab's backbones and ASPP: an FCN-ResNet50 forward at 256 px took
/// 236 s). Layer by layer oneDNN picks its own layouts for such a convolution and has a
/// fast kernel for them (im2col and GEMM for the dilated ones).
bool fast_in_region(const KernelSpec& spec) {
  static const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  const Shape &x = spec.inputs[0].shape, &y = spec.outputs[0].shape, &w = spec.params.at(0).shape;
  const int64_t groups = spec.attrs->get_int("groups");
  const bool bf16 = cpu::kernel_precision(spec).precision == Precision::bf16;
  const DataType type = bf16 ? DataType::bf16 : DataType::f32;
  const Tag blocked = bf16 ? Tag::nhwc : cpu::blocked_activation_tag();
  const Tag src_tag = read_in_place(x[1], bf16) ? Tag::nchw : blocked;
  const memory::dims w_dims = groups == 1 ? memory::dims{w[0], w[1], w[2], w[3]}
                                          : memory::dims{groups, w[0] / groups, w[1], w[2], w[3]};
  const Window2d win = conv2d_window(*spec.attrs);
  try {
    dnnl::convolution_forward::primitive_desc pd(
        dnnl::convolution_forward::desc(
            dnnl::prop_kind::forward_inference, Algorithm::convolution_direct,
            memory::desc(memory::dims(x.begin(), x.end()), type, src_tag), memory::desc(w_dims, type, Tag::any),
            memory::desc(memory::dims(y.begin(), y.end()), bf16 ? type : DataType::f32, blocked),
            {win.stride[0], win.stride[1]}, {win.dilation[0] - 1, win.dilation[1] - 1}, {win.pad_l[0], win.pad_l[1]},
            {win.pad_r[0], win.pad_r[1]}),
        eng);
    return !cpu::is_reference_kernel(pd);
  } catch (const dnnl::error&) {
    return false;  // layer by layer, the convolution's own kernel says why
  }
}

bool unit_alpha(const KernelSpec& spec) { return spec.op != "add" || spec.attrs->get_float("alpha") == 1.0; }

/// avg_pool2d with count_include_pad whose ceil_mode window passes the padding: torch's
/// divisor there is none of oneDNN's (pooling.cpp rescales; a region does not).
bool pool_rescaled(const KernelSpec& spec) {
  if (spec.op != "avg_pool2d" || !spec.attrs->get_bool("count_include_pad")) return false;
  const Window2d win = pool2d_window(*spec.attrs);
  const Shape& x = spec.inputs[0].shape;
  return win.effective_pad_r({x[2], x[3]}) != win.pad_r;
}

memory::dims dims_of(const Shape& s) { return memory::dims(s.begin(), s.end()); }

}  // namespace

bool cpu_region_fusable(const KernelSpec& spec) {
  for (const TensorDesc& t : spec.inputs)
    if (!image(t)) return false;
  if (spec.outputs.size() != 1 || !image(spec.outputs[0])) return false;
  const std::string& op = spec.op;
  if (op == "conv2d") return fast_in_region(spec);
  if (op == "batch_norm2d") return spec.attrs->get_bool("track_running_stats");
  if (op == "add" || op == "mul") return spec.inputs.size() == 2 && unit_alpha(spec) && full_operand(spec) >= 0;
  if (op == "max_pool2d" || op == "avg_pool2d") return !pool_rescaled(spec);
  return !eltwise_steps(spec).empty();
}

namespace {

/// Where a oneDNN argument's memory is at run time.
struct Place {
  enum class Kind { buffer, input, output, param, owned } kind = Kind::buffer;
  int index = 0;                // buffer, input or param index
  const void* owned = nullptr;  // Kind::owned: the step's own memory
};

/// One oneDNN primitive of the region with where each of its arguments is.
struct Step {
  cpu::DnnlCall call;
  std::vector<std::pair<size_t, Place>> places;  // DnnlCall slot -> where
};

/// A convolution's weight and bias as the primitive reads them, made from the layer's
/// parameters (and its batch norm's, when folded).
struct ConvWeights {
  int node = 0, norm = -1;       // the conv2d node, the batch_norm2d folded into it
  int64_t out_channels = 0, per_output = 0;
  bool has_bias = false, bn_affine = false;
  float eps = 0.f;
  memory::desc plain, packed;    // f32 [g,] O, C/g, kh, kw; the primitive's
  std::optional<cpu::DnnlCall> pack;  // plain -> packed, when they differ
  size_t pack_from = 0, pack_to = 0;
  std::vector<float> folded, bias;
  memory packed_memory;
  std::vector<const void*> made_from;  // the parameters' storage they were made from
  uint64_t version = kUnknownParamsVersion;
};

class RegionKernel final : public Kernel {
 public:
  RegionKernel(CpuContext& ctx, const RegionSpec& region) : ctx_(ctx), region_(region) {
    const size_t n_inputs = region.inputs.size(), n_nodes = region.nodes.size();
    values_.resize(n_inputs + n_nodes);
    for (size_t i = 0; i < n_inputs; ++i) values_[i].shape = region.inputs[i].shape;
    for (size_t k = 0; k < n_nodes; ++k) {
      const RegionNode& node = region.nodes[k];
      values_[n_inputs + k].shape = node.spec.outputs[0].shape;
      for (int in : node.inputs) values_[value_of(in)].readers.push_back(static_cast<int>(k));
      if (node.spec.op == "conv2d" && cpu::kernel_precision(node.spec).precision == Precision::bf16)
        storage_ = DataType::bf16;
    }
    // oneDNN 2.6's fp32 convolutions are fastest on its channel blocks (16 with AVX-512, 8
    // with AVX2: cpu/cpu_channel_block.h), its AMX bf16 ones on channels-last (both measured
    // on resnet50)
    tag_ = storage_ == DataType::bf16 ? Tag::nhwc : cpu::blocked_activation_tag();
    output_ = static_cast<int>(values_.size()) - 1;
    plan();
  }

  size_t workspace_bytes() const override { return workspace_bytes_; }

  void forward(const KernelArgs& args) override {
    TANDEM_ASSERT(args.workspace != nullptr || workspace_bytes_ == 0, "a fused region was run without its workspace");
    for (ConvWeights& w : convs_) prepare(w, args);
    for (Step& step : steps_) {
      for (const auto& [slot, place] : step.places) step.call.set(slot, where(place, args));
      step.call.run(ctx_);
    }
  }

  void backward(const BackwardArgs&) override {
    throw UserError("a fused inference region has no backward: regions are compiled for inference only");
  }

 private:
  struct Value {
    Shape shape;
    std::vector<int> readers;  // nodes, in order (one entry per input that reads it)
    memory::desc md;           // how it is stored
    Place home{Place::Kind::buffer, -1};  // where: a buffer, or the caller's input itself
    std::vector<std::pair<memory::desc, int>> copies;  // in other layouts or types: buffers
    int uses_left = 0;         // while planning
  };

  int value_of(int node_input) const {
    return node_input >= 0 ? node_input : static_cast<int>(region_.inputs.size()) + ~node_input;
  }
  int value_of_node(int k) const { return static_cast<int>(region_.inputs.size()) + k; }
  const KernelSpec& spec_of(int k) const { return region_.nodes[k].spec; }
  int param(int k, int j) const { return static_cast<int>(region_.nodes[k].first_param) + j; }
  memory::desc layout(const Shape& s, DataType type) const { return memory::desc(dims_of(s), type, tag_); }
  static memory::desc plain(const Shape& s) { return memory::desc(dims_of(s), DataType::f32, Tag::nchw); }

  // ---- planning ------------------------------------------------------------------------

  /// Lays out the steps in node order, each layer absorbed into the convolution or binary
  /// op before it where it can be, and the buffers by liveness.
  void plan() {
    const int n_nodes = static_cast<int>(region_.nodes.size());
    // a node's output is consumed when each reader has run; absorbed readers run with
    // the step that absorbs them, so their uses are counted down there
    for (Value& v : values_) v.uses_left = static_cast<int>(v.readers.size());
    values_[output_].uses_left += 1;  // the region's output is read after the last step
    absorbed_.assign(n_nodes, false);
    for (size_t i = 0; i < region_.inputs.size(); ++i) {
      Value& v = values_[i];
      const Place input{Place::Kind::input, static_cast<int>(i)};
      if (read_in_place(v.shape[1], storage_ == DataType::bf16)) {
        v.md = plain(v.shape);
        v.home = input;
        continue;
      }
      v.md = layout(v.shape, storage_);
      v.home = Place{Place::Kind::buffer, take(v.md)};
      add_reorder(input, plain(v.shape), v.home, v.md);
    }
    for (int k = 0; k < n_nodes; ++k) {
      if (absorbed_[k]) continue;
      const std::string& op = spec_of(k).op;
      if (op == "conv2d") plan_conv(k);
      else if (op == "batch_norm2d") plan_batch_norm(k);
      else if (op == "add" || op == "mul") plan_binary(k);
      else if (op == "max_pool2d" || op == "avg_pool2d") plan_pool(k);
      else plan_eltwise(k);
    }
    const Value& out = values_[output_];
    add_reorder(out.home, out.md, Place{Place::Kind::output}, plain(out.shape));
    // the buffers one after another in the workspace, each on a cache line
    for (size_t bytes : buffer_bytes_) {
      buffer_offsets_.push_back(workspace_bytes_);
      workspace_bytes_ += (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    }
  }

  /// The one reader of `value` when it has exactly one and is not the region's output;
  /// -1 otherwise.
  int only_reader(int value) const {
    const Value& v = values_[value];
    if (value == output_ || v.readers.size() != 1) return -1;
    return v.readers[0];
  }

  /// Takes the activations that follow `value` (each the only reader of the one before) as
  /// eltwise post-ops; returns the last value absorbed (or `value`).
  int absorb_activations(int value, dnnl::post_ops& post, std::string& key) {
    for (int r = only_reader(value); r >= 0 && !absorbed_[r]; r = only_reader(value)) {
      const std::vector<EltwiseStep> steps = eltwise_steps(spec_of(r));
      if (steps.empty()) break;
      for (const EltwiseStep& s : steps) {
        post.append_eltwise(1.f, s.alg, s.alpha, s.beta);
        key += "|e" + std::to_string(static_cast<int>(s.alg)) + ":" + std::to_string(s.alpha) + ":" + std::to_string(s.beta);
      }
      absorbed_[r] = true;
      value = value_of_node(r);
    }
    return value;
  }

  /// `value` as `wanted` describes it: where it is, or a copy made now (kept, and let go
  /// with the value).
  Place place_as(int value, const memory::desc& wanted) {
    Value& v = values_[value];
    if (v.md == wanted) return v.home;
    for (const auto& [md, buffer] : v.copies)
      if (md == wanted) return Place{Place::Kind::buffer, buffer};
    const int buffer = take(wanted);
    add_reorder(v.home, v.md, Place{Place::Kind::buffer, buffer}, wanted);
    v.copies.emplace_back(wanted, buffer);
    return Place{Place::Kind::buffer, buffer};
  }

  /// Counts down a read of `value` by a step that runs now; its buffers go back when no
  /// read is left.
  void consume(int value) {
    Value& v = values_[value];
    if (--v.uses_left > 0) return;
    if (v.home.kind == Place::Kind::buffer && v.home.index >= 0) give(v.home.index);
    for (const auto& copy : v.copies) give(copy.second);
    v.home.index = -1;
    v.copies.clear();
  }

  /// Whether a step of `node`, running now, may write its output of `md` over `value`:
  /// node is the last of its readers, and it lives in a buffer of that layout.
  bool may_write_over(int value, int node, const memory::desc& md) const {
    const Value& v = values_[value];
    return value != output_ && v.uses_left == 1 && !v.readers.empty() && v.readers.back() == node &&
           v.home.kind == Place::Kind::buffer && v.md == md;
  }

  /// Stores `out` as `md`: over `input` where node k may write over it (the input lets go
  /// of its buffer), else in a buffer of its own.
  void store(int out, const memory::desc& md, int input, int k) {
    Value& v = values_[out];
    v.md = md;
    if (input >= 0 && may_write_over(input, k, md)) {
      v.home = values_[input].home;
      values_[input].home.index = -1;
    } else {
      v.home = Place{Place::Kind::buffer, take(md)};
    }
  }

  void plan_conv(int k) {
    const KernelSpec& spec = spec_of(k);
    const Attributes& a = *spec.attrs;
    const Shape& x = spec.inputs[0].shape;
    const Shape& w = spec.params[0].shape;
    const Shape& y = spec.outputs[0].shape;
    const int64_t groups = a.get_int("groups");
    const bool bf16 = cpu::kernel_precision(spec).precision == Precision::bf16;
    const DataType low = bf16 ? DataType::bf16 : DataType::f32;
    const Window2d win = conv2d_window(a);
    std::string key = cpu::spec_key(spec) + "#region";

    ConvWeights weights;
    weights.node = k;
    weights.out_channels = w[0];
    weights.per_output = w[1] * w[2] * w[3];
    weights.has_bias = a.get_bool("bias");
    // the batch norm right after it, its only reader, folds into the weight and bias
    int value = value_of_node(k);
    if (const int r = only_reader(value); r >= 0 && spec_of(r).op == "batch_norm2d") {
      weights.norm = r;
      weights.bn_affine = spec_of(r).attrs->get_bool("affine");
      weights.eps = static_cast<float>(spec_of(r).attrs->get_float("eps"));
      absorbed_[r] = true;
      value = value_of_node(r);
      key += "|bn";
    }
    // then activations, one residual add (a sum post-op), activations again; a sum after
    // an activation (efficientnet_v2's conv, silu, add) has only oneDNN 2.6's reference
    // kernel (efficientnet_v2_s's forward took 6.7 s, 3.4 s in one convolution), so such an
    // add runs as its own step
    dnnl::post_ops post;
    value = absorb_activations(value, post, key);
    int residual = -1, add_node = -1;
    const int r = only_reader(value);
    if (r >= 0 && post.len() == 0 && spec_of(r).op == "add" && unit_alpha(spec_of(r)) &&
        spec_of(r).inputs[0].shape == spec_of(r).inputs[1].shape) {
      const RegionNode& add = region_.nodes[r];
      const int other = value_of(add.inputs[0]) == value ? value_of(add.inputs[1]) : value_of(add.inputs[0]);
      // the other operand must be there before this convolution runs
      const bool ready = other != value && (other < static_cast<int>(region_.inputs.size()) || other < value_of_node(k));
      if (ready) {
        residual = other;
        add_node = r;
        post.append_sum(1.f);
        key += "|sum";
        absorbed_[r] = true;
        value = absorb_activations(value_of_node(r), post, key);
      }
    }

    dnnl::primitive_attr attr = user_scratchpad_attr();
    attr.set_post_ops(post);
    const memory::dims w_dims = groups == 1 ? memory::dims{w[0], w[1], w[2], w[3]}
                                            : memory::dims{groups, w[0] / groups, w[1], w[2], w[3]};
    weights.plain = memory::desc(w_dims, DataType::f32, groups == 1 ? Tag::oihw : Tag::goihw);
    const bool any_bias = weights.has_bias || weights.norm >= 0;
    memory::desc bias_md({w[0]}, DataType::f32, Tag::x);
    // it reads its input as stored where the type is its own (the stem's plain image too),
    // else a copy in the region's layout; it writes the region's storage type (bf16 only
    // from a bf16 convolution)
    const int input = value_of(region_.nodes[k].inputs[0]);
    const memory::desc src_md = values_[input].md.data_type() == low ? values_[input].md : layout(x, low);
    const memory::desc dst_md = layout(y, bf16 ? storage_ : DataType::f32);
    const memory::desc w_any(w_dims, low, Tag::any);
    key += md_key(src_md) + md_key(dst_md);  // the same layer reads another layout in another region
    const memory::dims strides{win.stride[0], win.stride[1]}, dilates{win.dilation[0] - 1, win.dilation[1] - 1};
    const memory::dims pad_l{win.pad_l[0], win.pad_l[1]}, pad_r{win.pad_r[0], win.pad_r[1]};
    const auto fwd = dnnl::prop_kind::forward_inference;
    const auto direct = Algorithm::convolution_direct;
    auto desc = any_bias ? dnnl::convolution_forward::desc(fwd, direct, src_md, w_any, bias_md, dst_md, strides,
                                                            dilates, pad_l, pad_r)
                         : dnnl::convolution_forward::desc(fwd, direct, src_md, w_any, dst_md, strides, dilates,
                                                            pad_l, pad_r);
    const int64_t flops = y[0] * y[1] * y[2] * y[3] * weights.per_output;
    std::optional<cpu::ScopedMaxThreads> one_thread;
    if (flops <= cpu::kSingleThreadMaxFlops) one_thread.emplace(1);
    dnnl::engine& eng = ctx_.engine();
    dnnl::convolution_forward::primitive_desc pd(desc, attr, eng);
    weights.packed = pd.weights_desc();
    if (weights.packed != weights.plain) {
      weights.pack.emplace(ctx_.cached_primitive(key + "#pack", [&] {
        return dnnl::reorder(dnnl::reorder::primitive_desc(eng, weights.plain, eng, weights.packed, user_scratchpad_attr()));
      }));
      weights.pack_from = weights.pack->bind(DNNL_ARG_FROM, weights.plain, eng);
      weights.pack_to = weights.pack->bind(DNNL_ARG_TO, weights.packed, eng);
    }
    weights.packed_memory = memory(weights.packed, eng);
    weights.folded.resize(static_cast<size_t>(w[0] * weights.per_output));
    if (any_bias) weights.bias.resize(static_cast<size_t>(w[0]));

    const Place src = place_as(input, src_md);
    // where it writes: over the residual when the add was its last reader, else a buffer of
    // its own that the residual is copied into first
    if (residual >= 0) {
      store(value, dst_md, residual, add_node);
      if (values_[residual].home.index >= 0)  // not written over: copied
        add_reorder(values_[residual].home, values_[residual].md, values_[value].home, dst_md);
    } else {
      store(value, dst_md, -1, k);
    }

    Step step;
    step.call = cpu::DnnlCall(ctx_.cached_primitive(key, [&] { return dnnl::convolution_forward(pd); }));
    step.places.push_back({step.call.bind(DNNL_ARG_SRC, src_md, eng), src});
    step.places.push_back({step.call.bind(DNNL_ARG_DST, dst_md, eng), values_[value].home});
    step.call.bind(DNNL_ARG_WEIGHTS, weights.packed_memory);
    weights.made_from.assign(weights.norm >= 0 ? 6 : 2, nullptr);
    convs_.push_back(std::move(weights));
    if (any_bias) {
      const size_t slot = step.call.bind(DNNL_ARG_BIAS, bias_md, eng);
      step.places.push_back({slot, Place{Place::Kind::owned, 0, convs_.back().bias.data()}});
    }
    steps_.push_back(std::move(step));
    consume(input);
    if (residual >= 0) consume(residual);
  }

  void plan_batch_norm(int k) {
    const KernelSpec& spec = spec_of(k);
    const bool affine = spec.attrs->get_bool("affine");
    const int input = value_of(region_.nodes[k].inputs[0]);
    const memory::desc md = values_[input].md;
    auto flags = dnnl::normalization_flags::use_global_stats | dnnl::normalization_flags::use_scale |
                 dnnl::normalization_flags::use_shift;
    dnnl::engine& eng = ctx_.engine();
    dnnl::batch_normalization_forward::primitive_desc pd(
        dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_inference, md,
                                                static_cast<float>(spec.attrs->get_float("eps")), flags),
        user_scratchpad_attr(), eng);
    Step step;
    step.call = cpu::DnnlCall(ctx_.cached_primitive(cpu::spec_key(spec) + "#region" + md_key(md), [&] {
      return dnnl::batch_normalization_forward(pd);
    }));
    const int first_stat = affine ? 2 : 0;
    const int channels = static_cast<int>(spec.inputs[0].shape[1]);
    if (!affine) {  // oneDNN's scale and shift stay in use: 1 and 0
      owned_.emplace_back(static_cast<size_t>(channels), 1.f);
      owned_.emplace_back(static_cast<size_t>(channels), 0.f);
    }
    memory::desc channel_md({channels}, DataType::f32, Tag::x);
    step.places.push_back({step.call.bind(DNNL_ARG_SRC, md, eng), values_[input].home});
    step.places.push_back({step.call.bind(DNNL_ARG_MEAN, channel_md, eng), Place{Place::Kind::param, param(k, first_stat)}});
    step.places.push_back(
        {step.call.bind(DNNL_ARG_VARIANCE, channel_md, eng), Place{Place::Kind::param, param(k, first_stat + 1)}});
    const Place scale = affine ? Place{Place::Kind::param, param(k, 0)} : Place{Place::Kind::owned, 0, owned_[owned_.size() - 2].data()};
    const Place shift = affine ? Place{Place::Kind::param, param(k, 1)} : Place{Place::Kind::owned, 0, owned_.back().data()};
    step.places.push_back({step.call.bind(DNNL_ARG_SCALE, channel_md, eng), scale});
    step.places.push_back({step.call.bind(DNNL_ARG_SHIFT, channel_md, eng), shift});
    const int out = value_of_node(k);
    store(out, md, input, k);
    step.places.push_back({step.call.bind(DNNL_ARG_DST, md, eng), values_[out].home});
    steps_.push_back(std::move(step));
    consume(input);
  }

  void plan_binary(int k) {
    const KernelSpec& spec = spec_of(k);
    const int full = full_operand(spec);
    const int a = value_of(region_.nodes[k].inputs[full]), b = value_of(region_.nodes[k].inputs[1 - full]);
    std::string key = cpu::spec_key(spec) + "#region";
    dnnl::post_ops post;
    const int out = absorb_activations(value_of_node(k), post, key);
    dnnl::primitive_attr attr = user_scratchpad_attr();
    attr.set_post_ops(post);
    const memory::desc a_md = values_[a].md;
    // the other operand in the full one's type (its own layout: a per-channel one's is all
    // the same)
    memory::desc b_md = values_[b].md;
    if (b_md.data_type() != a_md.data_type()) b_md = layout(values_[b].shape, a_md.data_type());
    const Place a_place = values_[a].home, b_place = place_as(b, b_md);
    key += md_key(a_md) + md_key(b_md);
    dnnl::engine& eng = ctx_.engine();
    dnnl::binary::primitive_desc pd(
        dnnl::binary::desc(spec.op == "add" ? Algorithm::binary_add : Algorithm::binary_mul, a_md, b_md, a_md), attr,
        eng);
    Step step;
    step.call = cpu::DnnlCall(ctx_.cached_primitive(key, [&] { return dnnl::binary(pd); }));
    step.places.push_back({step.call.bind(DNNL_ARG_SRC_0, a_md, eng), a_place});
    step.places.push_back({step.call.bind(DNNL_ARG_SRC_1, b_md, eng), b_place});
    store(out, a_md, a != b ? a : -1, k);  // in place over the full operand, unless b is it too
    step.places.push_back({step.call.bind(DNNL_ARG_DST, a_md, eng), values_[out].home});
    steps_.push_back(std::move(step));
    consume(a);
    consume(b);
  }

  void plan_pool(int k) {
    const KernelSpec& spec = spec_of(k);
    const Attributes& a = *spec.attrs;
    const Shape& x = spec.inputs[0].shape;
    const Window2d win = pool2d_window(a);
    const std::array<int64_t, 2> pad_r = win.effective_pad_r({x[2], x[3]});
    Algorithm alg = Algorithm::pooling_max;
    if (spec.op == "avg_pool2d")
      alg = a.get_bool("count_include_pad") ? Algorithm::pooling_avg_include_padding
                                            : Algorithm::pooling_avg_exclude_padding;
    const int input = value_of(region_.nodes[k].inputs[0]);
    const int out = value_of_node(k);
    const memory::desc src_md = values_[input].md;
    const memory::desc dst_md = layout(values_[out].shape, src_md.data_type());
    dnnl::engine& eng = ctx_.engine();
    dnnl::pooling_v2_forward::primitive_desc pd(
        dnnl::pooling_v2_forward::desc(dnnl::prop_kind::forward_inference, alg, src_md, dst_md,
                                       {win.stride[0], win.stride[1]}, {win.kernel[0], win.kernel[1]},
                                       {win.dilation[0] - 1, win.dilation[1] - 1}, {win.pad_l[0], win.pad_l[1]},
                                       {pad_r[0], pad_r[1]}),
        user_scratchpad_attr(), eng);
    Step step;
    step.call = cpu::DnnlCall(ctx_.cached_primitive(cpu::spec_key(spec) + "#region" + md_key(src_md), [&] {
      return dnnl::pooling_v2_forward(pd);
    }));
    step.places.push_back({step.call.bind(DNNL_ARG_SRC, src_md, eng), values_[input].home});
    store(out, dst_md, -1, k);
    step.places.push_back({step.call.bind(DNNL_ARG_DST, dst_md, eng), values_[out].home});
    steps_.push_back(std::move(step));
    consume(input);
  }

  /// An activation on its own (after a pool, a batch norm or a region input): one in-place
  /// primitive per oneDNN step.
  void plan_eltwise(int k) {
    const int input = value_of(region_.nodes[k].inputs[0]);
    const memory::desc md = values_[input].md;
    const int out = value_of_node(k);
    Place from = values_[input].home;
    store(out, md, input, k);
    dnnl::engine& eng = ctx_.engine();
    const std::vector<EltwiseStep> eltwise = eltwise_steps(spec_of(k));
    for (size_t i = 0; i < eltwise.size(); ++i) {
      const EltwiseStep& e = eltwise[i];
      dnnl::eltwise_forward::primitive_desc pd(
          dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, e.alg, md, e.alpha, e.beta),
          user_scratchpad_attr(), eng);
      Step step;
      step.call = cpu::DnnlCall(
          ctx_.cached_primitive(cpu::spec_key(spec_of(k)) + "#region" + std::to_string(i) + md_key(md), [&] {
            return dnnl::eltwise_forward(pd);
          }));
      step.places.push_back({step.call.bind(DNNL_ARG_SRC, md, eng), from});
      step.places.push_back({step.call.bind(DNNL_ARG_DST, md, eng), values_[out].home});
      steps_.push_back(std::move(step));
      from = values_[out].home;
    }
    consume(input);
  }

  /// A primitive-cache key's part for a layout and type.
  static std::string md_key(const memory::desc& md) {
    return "|t" + std::to_string(static_cast<int>(md.data_type())) + "s" + std::to_string(md.data.format_desc.blocking.strides[1]) +
           "b" + std::to_string(md.data.format_desc.blocking.inner_nblks);
  }

  void add_reorder(Place from, const memory::desc& from_md, Place to, const memory::desc& to_md) {
    dnnl::engine& eng = ctx_.engine();
    Step step;
    step.call = cpu::DnnlCall(dnnl::reorder(dnnl::reorder::primitive_desc(eng, from_md, eng, to_md, user_scratchpad_attr())));
    step.places.push_back({step.call.bind(DNNL_ARG_FROM, from_md, eng), from});
    step.places.push_back({step.call.bind(DNNL_ARG_TO, to_md, eng), to});
    steps_.push_back(std::move(step));
  }

  // ---- buffers -------------------------------------------------------------------------

  /// A free buffer for a tensor of `md` (the smallest that holds it; else the largest,
  /// grown).
  int take(const memory::desc& md) {
    const size_t need = md.get_size();
    int best = -1;
    for (int b : free_)
      if (buffer_bytes_[b] >= need && (best < 0 || buffer_bytes_[b] < buffer_bytes_[best])) best = b;
    if (best < 0 && !free_.empty()) {
      best = free_[0];
      for (int b : free_)
        if (buffer_bytes_[b] > buffer_bytes_[best]) best = b;
      buffer_bytes_[best] = need;
    }
    if (best < 0) {
      buffer_bytes_.push_back(need);
      return static_cast<int>(buffer_bytes_.size()) - 1;
    }
    free_.erase(std::find(free_.begin(), free_.end(), best));
    return best;
  }
  void give(int buffer) { free_.push_back(buffer); }

  void* where(const Place& p, const KernelArgs& args) const {
    switch (p.kind) {
      case Place::Kind::buffer: return static_cast<std::byte*>(args.workspace) + buffer_offsets_[p.index];
      case Place::Kind::input: return args.inputs[p.index].raw_data();
      case Place::Kind::output: return args.outputs[0].raw_data();
      case Place::Kind::param: return args.params[p.index].raw_data();
      case Place::Kind::owned: return const_cast<void*>(p.owned);
    }
    return nullptr;
  }

  // ---- folded weights ------------------------------------------------------------------

  /// Makes `w`'s weight and bias again when the parameters changed since they were made.
  void prepare(ConvWeights& w, const KernelArgs& args) {
    std::vector<const void*> now;
    const int n_conv = w.has_bias ? 2 : 1;
    for (int j = 0; j < n_conv; ++j) now.push_back(args.params[param(w.node, j)].raw_data());
    const int n_norm = w.norm < 0 ? 0 : (w.bn_affine ? 4 : 2);
    for (int j = 0; j < n_norm; ++j) now.push_back(args.params[param(w.norm, j)].raw_data());
    now.resize(w.made_from.size(), nullptr);
    if (w.version == args.params_version && args.params_version != kUnknownParamsVersion && now == w.made_from) return;
    const float* weight = args.params[param(w.node, 0)].data<float>();
    const float* bias = w.has_bias ? args.params[param(w.node, 1)].data<float>() : nullptr;
    for (int64_t o = 0; o < w.out_channels; ++o) {
      float scale = 1.f, shift = 0.f;
      if (w.norm >= 0) {
        const int stats = w.bn_affine ? 2 : 0;
        const float gamma = w.bn_affine ? args.params[param(w.norm, 0)].data<float>()[o] : 1.f;
        const float beta = w.bn_affine ? args.params[param(w.norm, 1)].data<float>()[o] : 0.f;
        const float mean = args.params[param(w.norm, stats)].data<float>()[o];
        const float var = args.params[param(w.norm, stats + 1)].data<float>()[o];
        scale = static_cast<float>(gamma / std::sqrt(static_cast<double>(var) + w.eps));
        shift = beta - mean * scale;
      }
      const float* from = weight + o * w.per_output;
      float* to = w.folded.data() + o * w.per_output;
      for (int64_t i = 0; i < w.per_output; ++i) to[i] = from[i] * scale;
      if (!w.bias.empty()) w.bias[o] = (bias ? bias[o] : 0.f) * scale + shift;
    }
    if (w.pack) {
      w.pack->set(w.pack_from, w.folded.data());
      w.pack->set(w.pack_to, w.packed_memory.get_data_handle());
      w.pack->run(ctx_);
    } else {
      std::memcpy(w.packed_memory.get_data_handle(), w.folded.data(), w.folded.size() * sizeof(float));
    }
    w.made_from = std::move(now);
    w.version = args.params_version;
  }

  CpuContext& ctx_;
  const RegionSpec region_;
  DataType storage_ = DataType::f32;  // bf16 where a convolution runs bf16
  Tag tag_ = Tag::nchw;  // set by the constructor
  std::vector<Value> values_;  // the region's inputs, then each node's output
  int output_ = 0;
  std::vector<bool> absorbed_;
  std::vector<Step> steps_;
  std::vector<ConvWeights> convs_;
  std::vector<size_t> buffer_bytes_;
  std::vector<int> free_;
  std::vector<size_t> buffer_offsets_;  // in the workspace
  size_t workspace_bytes_ = 0;
  std::vector<std::vector<float>> owned_;  // per-channel constants steps read (their data stays put)
};

}  // namespace

std::unique_ptr<Kernel> make_region_kernel(CpuContext& ctx, const RegionSpec& region) {
  try {
    return std::make_unique<RegionKernel>(ctx, region);
  } catch (const dnnl::error&) {
    return nullptr;  // a combination this oneDNN does not implement: the layers run one by one
  }
}

}  // namespace tandem
