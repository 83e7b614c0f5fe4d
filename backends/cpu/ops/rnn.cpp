// gru and lstm: x [T, N, C] ([N, T, C] with batch_first), optional h0 (and c0)
// [L * D, N, H] -> output [T, N, D * H] ([N, T, D * H]), or h_n / c_n [L * D, N, H] by
// the attribute `select`; torch.nn.GRU / torch.nn.LSTM. Parameters per layer l and
// direction d, torch's: weight_ih [G * H, C_l], weight_hh [G * H, H], bias_ih, bias_hh [G * H].
//
// One oneDNN RNN primitive per layer (bidirectional_concat for D = 2), not one for the
// whole stack: oneDNN's multi-layer primitive needs C == H and stacks each direction on
// its own, where torch feeds both directions' concatenated output to the next layer.
// torch's GRU applies the reset gate after the hidden matmul, which is oneDNN's
// lbr_gru (linear-before-reset), not vanilla_gru; LSTM is vanilla_lstm.
//
// Layouts: torch's weights are gate-major [G, H, in], oneDNN's plain `ldgoi` (per layer
// and direction: gate, output, input) in the same order, so a weight is one copy per gate
// into a kernel-owned [1, D, in, G, H] ldgoi buffer (the two directions are separate
// torch tensors), then a reorder to the layout the primitive chose (format_tag::any).
// Both are kept while params_version and the weights' storage hold (DerivedParams): in
// training they are redone once per optimizer step, for the forward and for the backward
// layouts, not on every call; at inference, once.
// Gate order: torch's LSTM (i, f, g, o) is oneDNN's; torch's GRU (r, z, n) is oneDNN's
// (u = z, r, o = n) with the first two swapped. Biases: LSTM adds b_ih + b_hh; lbr_gru has
// four bias gates (u, r, the input's n, the hidden's n): [b_iz + b_hz, b_ir + b_hr, b_in, b_hn].
//
// Forward is always forward_training and keeps, per layer, its output and oneDNN's
// workspace in the kernel (as max_pool2d keeps its workspace), so that a backward can
// follow any forward; backward reads x and those, not the layer's output tensor.
// Backward runs the layers from the last down: a layer's diff_src_layer is the
// diff_dst_layer of the one below. oneDNN accumulates its weight gradients, so their
// buffers are zeroed first, then added (gate-permuted) into torch's gradients.
// Dropout between layers (torch's `dropout`, training only): layer l's output, for every
// l below the last, is dropped before layer l + 1 reads it, with the mask of
// apply_dropout(inner_dropout_seed(seed, l)) over the time-major [T, N, D * H] tensor;
// backward drops the gradient of that input with the same mask. Inference ignores it.
#include <cstring>

#include "backends/cpu/ops/derived_params.h"
#include "backends/rnn_plan.h"
#include "backends/cpu/ops/dnnl_relayout.h"
#include "backends/cpu/ops/apply_dropout.h"
#include "backends/cpu/ops/op_factories.h"
#include "backends/cpu/ops/op_util.h"

namespace tandem {
namespace {

using dnnl::memory;
using Relayout = cpu::Relayout;

/// One layer: its primitives, its plain (ldgoi) weights and what forward leaves for backward.
struct RnnLayer {
  int64_t in = 0;  // C_l: input_size for layer 0, D * H above
  cpu::DnnlCall fwd, bwd;
  size_t f_src = 0, f_src_iter = 0, f_src_iter_c = 0, f_wl = 0, f_wi = 0, f_bias = 0, f_dst = 0, f_dst_iter = 0,
         f_dst_iter_c = 0;
  size_t b_src = 0, b_src_iter = 0, b_src_iter_c = 0, b_wl = 0, b_wi = 0, b_bias = 0, b_dst = 0, b_dst_iter = 0,
         b_dst_iter_c = 0, b_dsrc = 0, b_dsrc_iter = 0, b_dsrc_iter_c = 0, b_dwl = 0, b_dwi = 0, b_dbias = 0,
         b_ddst = 0, b_ddst_iter = 0, b_ddst_iter_c = 0;
  Relayout wl_fwd, wi_fwd, wl_bwd, wi_bwd, dwl_out, dwi_out;
  memory::desc dwl_md, dwi_md;  // the layouts the backward writes its weight gradients in
  std::vector<float> wl, wi, bias;  // plain: [D, G, H, in], [D, G, H, H], [D, Gb, H]
  const void* wl_fwd_mem = nullptr;  // the weights in the forward primitive's layouts
  const void* wi_fwd_mem = nullptr;
  const void* wl_bwd_mem = nullptr;  // ... and in the backward's
  const void* wi_bwd_mem = nullptr;
  std::vector<float> dwl, dwi, dbias;
  std::vector<float> out;     // [T, N, D * H]: this layer's output
  std::vector<float> dropped; // [T, N, D * H]: out after dropout (training, below the last layer)
  std::vector<float> d_in;    // [T, N, in]: gradient of this layer's input (layers above 0)
  memory workspace;
};

class RnnKernel final : public Kernel {
 public:
  RnnKernel(CpuContext& ctx, const KernelSpec& spec, bool lstm) : ctx_(ctx), p_(plan_rnn(spec, lstm)) {
    const auto f32 = memory::data_type::f32;
    const auto tag = memory::format_tag::any;
    const auto dir = p_.dirs == 2 ? dnnl::rnn_direction::bidirectional_concat
                                : dnnl::rnn_direction::unidirectional_left2right;
    dnnl::engine& eng = ctx_.engine();
    const std::string key = cpu::spec_key(spec);
    const int64_t state = p_.dirs * p_.n * p_.h;
    zeros_.assign(static_cast<size_t>(std::max(state, p_.t * p_.n * p_.dirs * p_.h)), 0.f);
    hn_.resize(static_cast<size_t>(p_.layers * state));
    if (p_.lstm) cn_.resize(hn_.size());
    layer_.resize(static_cast<size_t>(p_.layers));
    for (int64_t l = 0; l < p_.layers; ++l) {
      RnnLayer& L = layer_[static_cast<size_t>(l)];
      L.in = l == 0 ? p_.c : p_.dirs * p_.h;
      memory::desc src({p_.t, p_.n, L.in}, f32, memory::format_tag::tnc);
      memory::desc dst({p_.t, p_.n, p_.dirs * p_.h}, f32, memory::format_tag::tnc);
      memory::desc iter({1, p_.dirs, p_.n, p_.h}, f32, memory::format_tag::ldnc);
      memory::desc wl_any({1, p_.dirs, L.in, p_.gates, p_.h}, f32, tag), wi_any({1, p_.dirs, p_.h, p_.gates, p_.h}, f32, tag);
      memory::desc wl_user({1, p_.dirs, L.in, p_.gates, p_.h}, f32, memory::format_tag::ldgoi);
      memory::desc wi_user({1, p_.dirs, p_.h, p_.gates, p_.h}, f32, memory::format_tag::ldgoi);
      memory::desc bias({1, p_.dirs, bias_gates_, p_.h}, f32, memory::format_tag::ldgo);
      const std::string lkey = key + "#layer" + std::to_string(l);
      const auto train = dnnl::prop_kind::forward_training;
      const auto bwd_kind = dnnl::prop_kind::backward;

      dnnl::primitive fwd_prim, bwd_prim;
      memory::desc fwd_wl, fwd_wi, bwd_wl, bwd_wi, ws;
      if (p_.lstm) {
        dnnl::lstm_forward::primitive_desc fpd(
            dnnl::lstm_forward::desc(train, dir, src, iter, iter, wl_any, wi_any, bias, dst, iter, iter), user_scratchpad_attr(), eng);
        dnnl::lstm_backward::primitive_desc bpd(
            dnnl::lstm_backward::desc(bwd_kind, dir, src, iter, iter, wl_any, wi_any, bias, dst, iter, iter, src, iter,
                                      iter, wl_any, wi_any, bias, dst, iter, iter),
            user_scratchpad_attr(), eng, fpd);
        fwd_prim = ctx_.cached_primitive(lkey + "#fwd", [&] { return dnnl::lstm_forward(fpd); });
        bwd_prim = ctx_.cached_primitive(lkey + "#bwd", [&] { return dnnl::lstm_backward(bpd); });
        fwd_wl = fpd.weights_layer_desc(), fwd_wi = fpd.weights_iter_desc(), ws = fpd.workspace_desc();
        bwd_wl = bpd.weights_layer_desc(), bwd_wi = bpd.weights_iter_desc();
        L.dwl_md = bpd.diff_weights_layer_desc(), L.dwi_md = bpd.diff_weights_iter_desc();
      } else {
        dnnl::lbr_gru_forward::primitive_desc fpd(
            dnnl::lbr_gru_forward::desc(train, dir, src, iter, wl_any, wi_any, bias, dst, iter), user_scratchpad_attr(), eng);
        dnnl::lbr_gru_backward::primitive_desc bpd(
            dnnl::lbr_gru_backward::desc(bwd_kind, dir, src, iter, wl_any, wi_any, bias, dst, iter, src, iter, wl_any,
                                         wi_any, bias, dst, iter),
            user_scratchpad_attr(), eng, fpd);
        fwd_prim = ctx_.cached_primitive(lkey + "#fwd", [&] { return dnnl::lbr_gru_forward(fpd); });
        bwd_prim = ctx_.cached_primitive(lkey + "#bwd", [&] { return dnnl::lbr_gru_backward(bpd); });
        fwd_wl = fpd.weights_layer_desc(), fwd_wi = fpd.weights_iter_desc(), ws = fpd.workspace_desc();
        bwd_wl = bpd.weights_layer_desc(), bwd_wi = bpd.weights_iter_desc();
        L.dwl_md = bpd.diff_weights_layer_desc(), L.dwi_md = bpd.diff_weights_iter_desc();
      }
      L.workspace = memory(ws, eng);

      L.fwd = cpu::DnnlCall(fwd_prim);
      L.f_src = L.fwd.bind(DNNL_ARG_SRC_LAYER, src, eng);
      L.f_src_iter = L.fwd.bind(DNNL_ARG_SRC_ITER, iter, eng);
      L.f_wl = L.fwd.bind(DNNL_ARG_WEIGHTS_LAYER, fwd_wl, eng);
      L.f_wi = L.fwd.bind(DNNL_ARG_WEIGHTS_ITER, fwd_wi, eng);
      L.f_bias = L.fwd.bind(DNNL_ARG_BIAS, bias, eng);
      L.f_dst = L.fwd.bind(DNNL_ARG_DST_LAYER, dst, eng);
      L.f_dst_iter = L.fwd.bind(DNNL_ARG_DST_ITER, iter, eng);
      if (p_.lstm) {
        L.f_src_iter_c = L.fwd.bind(DNNL_ARG_SRC_ITER_C, iter, eng);
        L.f_dst_iter_c = L.fwd.bind(DNNL_ARG_DST_ITER_C, iter, eng);
      }
      L.fwd.bind(DNNL_ARG_WORKSPACE, L.workspace);

      L.bwd = cpu::DnnlCall(bwd_prim);
      L.b_src = L.bwd.bind(DNNL_ARG_SRC_LAYER, src, eng);
      L.b_src_iter = L.bwd.bind(DNNL_ARG_SRC_ITER, iter, eng);
      L.b_wl = L.bwd.bind(DNNL_ARG_WEIGHTS_LAYER, bwd_wl, eng);
      L.b_wi = L.bwd.bind(DNNL_ARG_WEIGHTS_ITER, bwd_wi, eng);
      L.b_bias = L.bwd.bind(DNNL_ARG_BIAS, bias, eng);
      L.b_dst = L.bwd.bind(DNNL_ARG_DST_LAYER, dst, eng);
      L.b_dst_iter = L.bwd.bind(DNNL_ARG_DST_ITER, iter, eng);
      L.b_dsrc = L.bwd.bind(DNNL_ARG_DIFF_SRC_LAYER, src, eng);
      L.b_dsrc_iter = L.bwd.bind(DNNL_ARG_DIFF_SRC_ITER, iter, eng);
      L.b_dwl = L.bwd.bind(DNNL_ARG_DIFF_WEIGHTS_LAYER, L.dwl_md, eng);
      L.b_dwi = L.bwd.bind(DNNL_ARG_DIFF_WEIGHTS_ITER, L.dwi_md, eng);
      L.b_dbias = L.bwd.bind(DNNL_ARG_DIFF_BIAS, bias, eng);
      L.b_ddst = L.bwd.bind(DNNL_ARG_DIFF_DST_LAYER, dst, eng);
      L.b_ddst_iter = L.bwd.bind(DNNL_ARG_DIFF_DST_ITER, iter, eng);
      if (p_.lstm) {
        L.b_src_iter_c = L.bwd.bind(DNNL_ARG_SRC_ITER_C, iter, eng);
        L.b_dst_iter_c = L.bwd.bind(DNNL_ARG_DST_ITER_C, iter, eng);
        L.b_dsrc_iter_c = L.bwd.bind(DNNL_ARG_DIFF_SRC_ITER_C, iter, eng);
        L.b_ddst_iter_c = L.bwd.bind(DNNL_ARG_DIFF_DST_ITER_C, iter, eng);
      }
      L.bwd.bind(DNNL_ARG_WORKSPACE, L.workspace);

      L.wl_fwd = Relayout(ctx_, lkey + "#wl_fwd", wl_user, fwd_wl, Relayout::Kind::input);
      L.wi_fwd = Relayout(ctx_, lkey + "#wi_fwd", wi_user, fwd_wi, Relayout::Kind::input);
      L.wl_bwd = Relayout(ctx_, lkey + "#wl_bwd", wl_user, bwd_wl, Relayout::Kind::input);
      L.wi_bwd = Relayout(ctx_, lkey + "#wi_bwd", wi_user, bwd_wi, Relayout::Kind::input);
      L.dwl_out = Relayout(ctx_, lkey + "#dwl", wl_user, L.dwl_md, Relayout::Kind::output);
      L.dwi_out = Relayout(ctx_, lkey + "#dwi", wi_user, L.dwi_md, Relayout::Kind::output);
      L.wl.resize(static_cast<size_t>(p_.dirs * p_.gates * p_.h * L.in));
      L.wi.resize(static_cast<size_t>(p_.dirs * p_.gates * p_.h * p_.h));
      L.bias.assign(static_cast<size_t>(p_.dirs * bias_gates_ * p_.h), 0.f);
      L.out.resize(static_cast<size_t>(p_.t * p_.n * p_.dirs * p_.h));
    }
  }

  void forward(const KernelArgs& args) override {
    dropping_ = args.training && p_.dropout > 0 && p_.layers > 1;
    seed_ = args.seed;
    if (!fwd_weights_.current(args.params_version, args.params)) {
      pack_weights(args.params_version, args.params);
      for (RnnLayer& L : layer_) {
        L.wl_fwd_mem = L.wl_fwd.read(L.wl.data());
        L.wi_fwd_mem = L.wi_fwd.read(L.wi.data());
      }
      fwd_weights_.mark(args.params_version, args.params);
    }
    const float* x = time_major(args.inputs[0].data<float>(), x_tnc_, p_.c);
    const int64_t state = p_.dirs * p_.n * p_.h;
    for (int64_t l = 0; l < p_.layers; ++l) {
      RnnLayer& L = layer_[static_cast<size_t>(l)];
      L.fwd.set(L.f_src, l == 0 ? x : layer_input(l));
      L.fwd.set(L.f_src_iter, initial(args.inputs, 1, l));
      L.fwd.set(L.f_wl, L.wl_fwd_mem);
      L.fwd.set(L.f_wi, L.wi_fwd_mem);
      L.fwd.set(L.f_bias, L.bias.data());
      L.fwd.set(L.f_dst, L.out.data());
      L.fwd.set(L.f_dst_iter, hn_.data() + l * state);
      if (p_.lstm) {
        L.fwd.set(L.f_src_iter_c, initial(args.inputs, 2, l));
        L.fwd.set(L.f_dst_iter_c, cn_.data() + l * state);
      }
      L.fwd.run(ctx_);
      if (dropping_ && l + 1 < p_.layers) {
        L.dropped.resize(L.out.size());
        cpu::apply_dropout(L.out.data(), L.dropped.data(), static_cast<int64_t>(L.out.size()),
                           inner_dropout_seed(seed_, static_cast<uint64_t>(l)), static_cast<float>(p_.dropout));
      }
    }
    float* y = args.outputs[0].data<float>();
    if (p_.select == "h_n") std::memcpy(y, hn_.data(), hn_.size() * sizeof(float));
    else if (p_.select == "c_n") std::memcpy(y, cn_.data(), cn_.size() * sizeof(float));
    else store_output(layer_.back().out.data(), y, p_.dirs * p_.h);
  }

  bool backward_reads_output() const override { return false; }  // the kernel keeps every layer's output

  void backward(const BackwardArgs& args) override {
    if (!bwd_weights_.current(args.params_version, args.params)) {
      pack_weights(args.params_version, args.params);
      for (RnnLayer& L : layer_) {
        L.wl_bwd_mem = L.wl_bwd.read(L.wl.data());
        L.wi_bwd_mem = L.wi_bwd.read(L.wi.data());
      }
      bwd_weights_.mark(args.params_version, args.params);
    }
    const int64_t state = p_.dirs * p_.n * p_.h;
    const float* x = time_major(args.inputs[0].data<float>(), x_tnc_, p_.c);
    const float* dy = args.grad_outputs[0].data<float>();
    const float* d_out = zeros_.data();  // diff_dst_layer of the last layer
    if (p_.select == "output") d_out = time_major(dy, dy_tnc_, p_.dirs * p_.h);
    float* dx = args.grad_inputs[0].defined() ? args.grad_inputs[0].data<float>() : nullptr;
    if (p_.batch_first || !dx) dx_tnc_.resize(static_cast<size_t>(p_.t * p_.n * p_.c));
    float* dh0 = p_.has_state && args.grad_inputs[1].defined() ? args.grad_inputs[1].data<float>() : nullptr;
    float* dc0 = p_.lstm && p_.has_state && args.grad_inputs[2].defined() ? args.grad_inputs[2].data<float>() : nullptr;
    d_state_.resize(static_cast<size_t>(state));
    for (int64_t l = p_.layers - 1; l >= 0; --l) {
      RnnLayer& L = layer_[static_cast<size_t>(l)];
      L.bwd.set(L.b_src, l == 0 ? x : layer_input(l));
      L.bwd.set(L.b_src_iter, initial(args.inputs, 1, l));
      L.bwd.set(L.b_wl, L.wl_bwd_mem);
      L.bwd.set(L.b_wi, L.wi_bwd_mem);
      L.bwd.set(L.b_bias, L.bias.data());
      L.bwd.set(L.b_dst, L.out.data());
      L.bwd.set(L.b_dst_iter, hn_.data() + l * state);
      const float* d_dst = d_out;  // the gradient of this layer's output
      if (l < p_.layers - 1) {
        RnnLayer& above = layer_[static_cast<size_t>(l + 1)];
        d_dst = above.d_in.data();
        if (dropping_) {  // through the dropout between the two: the same mask
          cpu::apply_dropout(above.d_in.data(), above.d_in.data(), static_cast<int64_t>(above.d_in.size()),
                             inner_dropout_seed(seed_, static_cast<uint64_t>(l)), static_cast<float>(p_.dropout));
        }
      }
      L.bwd.set(L.b_ddst, d_dst);
      L.bwd.set(L.b_ddst_iter, p_.select == "h_n" ? dy + l * state : zeros_.data());
      float* d_in = nullptr;
      if (l > 0) {
        L.d_in.resize(static_cast<size_t>(p_.t * p_.n * L.in));
        d_in = L.d_in.data();
      } else {
        d_in = dx && !p_.batch_first ? dx : dx_tnc_.data();
      }
      L.bwd.set(L.b_dsrc, d_in);
      L.bwd.set(L.b_dsrc_iter, dh0 ? dh0 + l * state : d_state_.data());
      if (p_.lstm) {
        L.bwd.set(L.b_src_iter_c, initial(args.inputs, 2, l));
        L.bwd.set(L.b_dst_iter_c, cn_.data() + l * state);
        L.bwd.set(L.b_ddst_iter_c, p_.select == "c_n" ? dy + l * state : zeros_.data());
        L.bwd.set(L.b_dsrc_iter_c, dc0 ? dc0 + l * state : d_state_.data());
      }
      // oneDNN adds its weight gradients to these buffers: start them at zero
      L.dwl.resize(L.wl.size());
      L.dwi.resize(L.wi.size());
      L.dbias.assign(L.bias.size(), 0.f);
      void* dwl = L.dwl_out.target(L.dwl.data());
      void* dwi = L.dwi_out.target(L.dwi.data());
      std::memset(dwl, 0, L.dwl_md.get_size());
      std::memset(dwi, 0, L.dwi_md.get_size());
      L.bwd.set(L.b_dwl, dwl);
      L.bwd.set(L.b_dwi, dwi);
      L.bwd.set(L.b_dbias, L.dbias.data());
      L.bwd.run(ctx_);
      L.dwl_out.finish(L.dwl.data());
      L.dwi_out.finish(L.dwi.data());
      accumulate_param_grads(l, args.grad_params);
    }
    if (dx && p_.batch_first) store_output(dx_tnc_.data(), dx, p_.c);
  }

 private:
  /// What layer l > 0 reads: the output of the layer below, dropped in a training forward.
  const float* layer_input(int64_t l) const {
    const RnnLayer& below = layer_[static_cast<size_t>(l - 1)];
    return dropping_ ? below.dropped.data() : below.out.data();
  }

  /// torch's gate for oneDNN's gate `g` (GRU: oneDNN u, r, o are torch's z, r, n).
  int64_t torch_gate(int64_t g) const { return p_.lstm || g == 2 ? g : 1 - g; }

  /// torch's weights and biases into each layer's plain ldgoi / ldgo buffers, unless they
  /// already hold these (the forward packed them and the backward follows).
  void pack_weights(uint64_t version, std::span<const Tensor> params) {
    if (plain_weights_.current(version, params)) return;
    plain_weights_.mark(version, params);
    const int64_t h = p_.h;
    for (int64_t l = 0; l < p_.layers; ++l) {
      RnnLayer& L = layer_[static_cast<size_t>(l)];
      for (int64_t d = 0; d < p_.dirs; ++d) {
        const float* wih = params[p_.param_index(l, d, 0)].data<float>();
        const float* whh = params[p_.param_index(l, d, 1)].data<float>();
        for (int64_t g = 0; g < p_.gates; ++g) {
          const int64_t tg = torch_gate(g);
          std::memcpy(L.wl.data() + (d * p_.gates + g) * h * L.in, wih + tg * h * L.in, h * L.in * sizeof(float));
          std::memcpy(L.wi.data() + (d * p_.gates + g) * h * h, whh + tg * h * h, h * h * sizeof(float));
        }
        if (!p_.has_bias) continue;
        const float* bih = params[p_.param_index(l, d, 2)].data<float>();
        const float* bhh = params[p_.param_index(l, d, 3)].data<float>();
        float* b = L.bias.data() + d * bias_gates_ * h;
        for (int64_t g = 0; g < 4; ++g)
          for (int64_t i = 0; i < h; ++i) {
            if (p_.lstm) b[g * h + i] = bih[g * h + i] + bhh[g * h + i];
            else if (g < 2) b[g * h + i] = bih[torch_gate(g) * h + i] + bhh[torch_gate(g) * h + i];
            else if (g == 2) b[g * h + i] = bih[2 * h + i];  // the input's n
            else b[g * h + i] = bhh[2 * h + i];              // the hidden's n, inside r * (...)
          }
      }
    }
  }

  /// Adds layer l's plain gradients, un-permuted, into torch's parameter gradients.
  void accumulate_param_grads(int64_t l, std::span<Tensor> grads) const {
    const RnnLayer& L = layer_[static_cast<size_t>(l)];
    const int64_t h = p_.h;
    auto add = [](float* to, const float* from, int64_t n) {
      for (int64_t i = 0; i < n; ++i) to[i] += from[i];
    };
    for (int64_t d = 0; d < p_.dirs; ++d) {
      const Tensor& gih = grads[p_.param_index(l, d, 0)];
      const Tensor& ghh = grads[p_.param_index(l, d, 1)];
      for (int64_t g = 0; g < p_.gates; ++g) {
        const int64_t tg = torch_gate(g);
        if (gih.defined())
          add(gih.data<float>() + tg * h * L.in, L.dwl.data() + (d * p_.gates + g) * h * L.in, h * L.in);
        if (ghh.defined()) add(ghh.data<float>() + tg * h * h, L.dwi.data() + (d * p_.gates + g) * h * h, h * h);
      }
      if (!p_.has_bias) continue;
      const Tensor& gbi = grads[p_.param_index(l, d, 2)];
      const Tensor& gbh = grads[p_.param_index(l, d, 3)];
      const float* db = L.dbias.data() + d * bias_gates_ * h;
      for (int64_t g = 0; g < 4; ++g) {
        const bool to_ih = p_.lstm || g != 3, to_hh = p_.lstm || g != 2;
        const int64_t tg = p_.lstm ? g : g < 2 ? torch_gate(g) : 2;
        if (to_ih && gbi.defined()) add(gbi.data<float>() + tg * h, db + g * h, h);
        if (to_hh && gbh.defined()) add(gbh.data<float>() + tg * h, db + g * h, h);
      }
    }
  }

  /// The initial state (input `slot`: 1 = h0, 2 = c0) of layer l, or zeros.
  const float* initial(std::span<const Tensor> inputs, size_t slot, int64_t l) const {
    if (!p_.has_state) return zeros_.data();
    return inputs[slot].data<float>() + l * p_.dirs * p_.n * p_.h;
  }

  /// `src` as [T, N, width]: itself, or transposed from [N, T, width] into `buf`.
  const float* time_major(const float* src, std::vector<float>& buf, int64_t width) const {
    if (!p_.batch_first) return src;
    buf.resize(static_cast<size_t>(p_.t * p_.n * width));
    for (int64_t n = 0; n < p_.n; ++n)
      for (int64_t t = 0; t < p_.t; ++t)
        std::memcpy(buf.data() + (t * p_.n + n) * width, src + (n * p_.t + t) * width, width * sizeof(float));
    return buf.data();
  }

  /// [T, N, width] into `dst` in the user's layout ([N, T, width] with batch_first).
  void store_output(const float* src, float* dst, int64_t width) const {
    if (!p_.batch_first) {
      std::memcpy(dst, src, static_cast<size_t>(p_.t * p_.n * width) * sizeof(float));
      return;
    }
    for (int64_t n = 0; n < p_.n; ++n)
      for (int64_t t = 0; t < p_.t; ++t)
        std::memcpy(dst + (n * p_.t + t) * width, src + (t * p_.n + n) * width, width * sizeof(float));
  }

  CpuContext& ctx_;
  const RnnPlan p_;  // shapes and options
  bool dropping_ = false;  // the last forward dropped between layers (backward follows it)
  uint64_t seed_ = 0;      // ... with this seed
  int64_t bias_gates_ = 4;  // lstm: i, f, g, o; lbr_gru: u, r, n(input), n(hidden)
  std::vector<RnnLayer> layer_;
  cpu::DerivedParams plain_weights_, fwd_weights_, bwd_weights_;  // what wl/wi/bias and the *_mem hold
  std::vector<float> hn_, cn_;  // [L * D, N, H]: the last forward's final states
  std::vector<float> zeros_;    // absent initial states and unselected gradients
  std::vector<float> x_tnc_, dy_tnc_, dx_tnc_, d_state_;
};

}  // namespace

std::unique_ptr<Kernel> make_gru_kernel(CpuContext& ctx, const KernelSpec& spec) {
  return std::make_unique<RnnKernel>(ctx, spec, false);
}

std::unique_ptr<Kernel> make_lstm_kernel(CpuContext& ctx, const KernelSpec& spec) {
  return std::make_unique<RnnKernel>(ctx, spec, true);
}

}  // namespace tandem
