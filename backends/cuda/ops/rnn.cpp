// gru and lstm on a GPU: the CPU kernel's ops (backends/cpu/ops/rnn.cpp has the shapes,
// parameters and `select`), with torch's formulas: the gates and states in fp32, the
// products in the layer's matmul precision (precision_gemms.h), as torch.autocast runs a
// recurrent layer's GEMMs in 16 bits on a GPU.
//
// Per layer and direction: one GEMM projects the whole input sequence (xp = x W_ih^T +
// b_ih, [T N, G H]); then each time step is a GEMM of the hidden state (hp = h W_hh^T +
// b_hh) and one cell kernel (kernels/rnn.cuh) for the gates. The reverse direction walks
// the steps from the last. The two directions write their halves of the layer's [T, N,
// 2 H] output side by side, which the next layer reads whole. Dropout between layers is
// the CPU's mask (inner_dropout_seed), so a seed drops the same elements on both.
//
// Forward keeps, per layer and direction, xp's gates (the saved activations), the hidden
// (and cell) states of every step, and the layer's output; backward walks the steps back,
// then takes the weight gradients in four GEMMs over the whole sequence: dW_ih += dxp^T x,
// dW_hh += dhp^T h_prev, and the biases as products with a column of ones.
#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "backends/dropout_mask.h"
#include "backends/rnn_plan.h"
#include "backends/cuda/cuda_error.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/precision_gemms.h"
#include "backends/cuda/kernels/dropout.cuh"
#include "backends/cuda/kernels/pointwise.cuh"
#include "backends/cuda/kernels/rnn.cuh"
#include "backends/cuda/ops/op_factories.h"

namespace tandem::cuda {
namespace {

/// What forward leaves for backward, per layer.
struct RnnLayerState {
  int64_t in = 0;               // C_l: input_size for layer 0, D H above
  Tensor out;                   // [T, N, D H]
  Tensor dropped;               // out after dropout (training, below the last layer)
  std::vector<Tensor> saved;    // per direction [T, N, S H], in step order
  std::vector<Tensor> states;   // per direction [T + 1, N, H]: h before each step, then h_n
  std::vector<Tensor> cells;    // lstm: the same for c
};

class RnnKernel final : public Kernel {
 public:
  RnnKernel(CudaContext& ctx, const KernelSpec& spec, bool lstm)
      : ctx_(ctx), p_(plan_rnn(spec, lstm)), gemms_(ctx, matmul_precision_of(spec.precision, ctx)) {
    saved_ = lstm ? 5 : 4;
    Allocator& alloc = ctx.allocator();
    ones_ = Tensor::empty({std::max<int64_t>(p_.t * p_.n, 1)}, DType::float32, alloc);
    fill(ones_.data<float>(), 1.f, ones_.numel(), ctx.stream().get());
    hn_ = Tensor::empty({p_.layers * p_.dirs * p_.n * p_.h}, DType::float32, alloc);
    if (p_.lstm) cn_ = Tensor::empty(hn_.shape(), DType::float32, alloc);
    layer_.resize(static_cast<size_t>(p_.layers));
    for (int64_t l = 0; l < p_.layers; ++l) {
      RnnLayerState& L = layer_[static_cast<size_t>(l)];
      L.in = l == 0 ? p_.c : p_.dirs * p_.h;
      L.out = Tensor::empty({p_.t * p_.n * p_.dirs * p_.h}, DType::float32, alloc);
      for (int64_t d = 0; d < p_.dirs; ++d) {
        L.saved.push_back(Tensor::empty({p_.t * p_.n * saved_ * p_.h}, DType::float32, alloc));
        L.states.push_back(Tensor::empty({(p_.t + 1) * p_.n * p_.h}, DType::float32, alloc));
        if (p_.lstm) L.cells.push_back(Tensor::empty({(p_.t + 1) * p_.n * p_.h}, DType::float32, alloc));
      }
    }
  }

  void forward(const KernelArgs& args) override {
    dropping_ = args.training && p_.dropout > 0 && p_.layers > 1;
    seed_ = args.seed;
    const cudaStream_t stream = ctx_.stream().get();
    Allocator& alloc = ctx_.allocator();
    const int64_t tn = p_.t * p_.n, gh = p_.gates * p_.h, nh = p_.n * p_.h, dh = p_.dirs * p_.h;
    const float* x = time_major_input(args.inputs[0].data<float>());
    Tensor xp = Tensor::empty({tn * gh}, DType::float32, alloc), hp = Tensor::empty({p_.n * gh}, DType::float32, alloc);
    for (int64_t l = 0; l < p_.layers; ++l) {
      RnnLayerState& L = layer_[static_cast<size_t>(l)];
      const float* in = l == 0 ? x : layer_input(l);
      for (int64_t d = 0; d < p_.dirs; ++d) {
        const Weights w = weights(args.params, l, d);
        project(in, tn, L.in, w.ih, w.b_ih, xp.data<float>());
        const int64_t at = (l * p_.dirs + d) * nh;  // this layer and direction's [N, H] of h0 / h_n
        float* states = L.states[static_cast<size_t>(d)].data<float>();
        initial_state(args.inputs, 1, at, states);
        float* cells = p_.lstm ? L.cells[static_cast<size_t>(d)].data<float>() : nullptr;
        if (p_.lstm) initial_state(args.inputs, 2, at, cells);
        float* saved = L.saved[static_cast<size_t>(d)].data<float>();
        const CellShape shape{.batch = p_.n, .hidden = p_.h, .out_stride = dh};
        for (int64_t k = 0; k < p_.t; ++k) {
          const int64_t t = d == 0 ? k : p_.t - 1 - k;
          project(states + k * nh, p_.n, p_.h, w.hh, w.b_hh, hp.data<float>());
          float* h_out = L.out.data<float>() + t * p_.n * dh + d * p_.h;
          if (p_.lstm)
            lstm_cell_forward(shape, xp.data<float>() + t * p_.n * gh, hp.data<float>(), cells + k * nh, h_out,
                              states + (k + 1) * nh, cells + (k + 1) * nh, saved + k * p_.n * saved_ * p_.h, stream);
          else
            gru_cell_forward(shape, xp.data<float>() + t * p_.n * gh, hp.data<float>(), states + k * nh, h_out,
                             states + (k + 1) * nh, saved + k * p_.n * saved_ * p_.h, stream);
        }
        copy(states + p_.t * nh, hn_.data<float>() + at, nh);
        if (p_.lstm) copy(cells + p_.t * nh, cn_.data<float>() + at, nh);
      }
      if (dropping_ && l + 1 < p_.layers) {
        if (!L.dropped.defined()) L.dropped = Tensor::empty(L.out.shape(), DType::float32, alloc);
        dropout_mask_apply(L.out.data<float>(), L.dropped.data<float>(), L.out.numel(), static_cast<float>(p_.dropout),
                           inner_dropout_seed(seed_, static_cast<uint64_t>(l)), stream);
      }
    }
    float* y = args.outputs[0].data<float>();
    if (p_.select == "h_n") copy(hn_.data<float>(), y, hn_.numel());
    else if (p_.select == "c_n") copy(cn_.data<float>(), y, cn_.numel());
    else if (p_.batch_first) swap_time_and_batch(layer_.back().out.data<float>(), y, p_.t, p_.n, dh, stream);
    else copy(layer_.back().out.data<float>(), y, tn * dh);
  }

  bool backward_reads_output() const override { return false; }  // the kernel keeps every layer's output

  void backward(const BackwardArgs& args) override {
    const cudaStream_t stream = ctx_.stream().get();
    Allocator& alloc = ctx_.allocator();
    const int64_t tn = p_.t * p_.n, gh = p_.gates * p_.h, nh = p_.n * p_.h, dh_cols = p_.dirs * p_.h;
    const float* x = time_major_input(args.inputs[0].data<float>());
    const float* dy = args.grad_outputs[0].data<float>();
    // the gradient of the last layer's output, time-major (zero when `select` is a state)
    Tensor d_out = Tensor::empty({tn * dh_cols}, DType::float32, alloc);
    if (p_.select != "output") TANDEM_CUDA_CHECK(cudaMemsetAsync(d_out.raw_data(), 0, d_out.nbytes(), stream));
    else if (p_.batch_first) swap_time_and_batch(dy, d_out.data<float>(), p_.n, p_.t, dh_cols, stream);
    else copy(dy, d_out.data<float>(), tn * dh_cols);
    const Tensor& dx_arg = args.grad_inputs[0];
    float* dh0 = p_.has_state && args.grad_inputs[1].defined() ? args.grad_inputs[1].data<float>() : nullptr;
    float* dc0 = p_.lstm && p_.has_state && args.grad_inputs[2].defined() ? args.grad_inputs[2].data<float>() : nullptr;

    Tensor dxp = Tensor::empty({tn * gh}, DType::float32, alloc), dhp = Tensor::empty({tn * gh}, DType::float32, alloc);
    Tensor dh = Tensor::empty({nh}, DType::float32, alloc), dc = Tensor::empty({nh}, DType::float32, alloc);
    Tensor dh_step = Tensor::empty({nh}, DType::float32, alloc);
    Tensor d_above = d_out;  // the gradient of the current layer's output
    for (int64_t l = p_.layers - 1; l >= 0; --l) {
      RnnLayerState& L = layer_[static_cast<size_t>(l)];
      const float* in = l == 0 ? x : layer_input(l);
      // the gradient of this layer's input: dx (time-major) for layer 0, else the next d_above
      Tensor d_in;
      if (l > 0) d_in = Tensor::empty({tn * L.in}, DType::float32, alloc);
      else if (dx_arg.defined()) d_in = p_.batch_first ? Tensor::empty({tn * p_.c}, DType::float32, alloc) : dx_arg;
      for (int64_t d = 0; d < p_.dirs; ++d) {
        const Weights w = weights(args.params, l, d);
        const WeightGrads g = weight_grads(args.grad_params, l, d);
        const int64_t at = (l * p_.dirs + d) * nh;
        start_state(p_.select == "h_n" ? dy + at : nullptr, dh.data<float>());
        if (p_.lstm) start_state(p_.select == "c_n" ? dy + at : nullptr, dc.data<float>());
        const float* states = L.states[static_cast<size_t>(d)].data<float>();
        const float* cells = p_.lstm ? L.cells[static_cast<size_t>(d)].data<float>() : nullptr;
        const float* saved = L.saved[static_cast<size_t>(d)].data<float>();
        const CellShape shape{.batch = p_.n, .hidden = p_.h, .out_stride = dh_cols};
        for (int64_t k = p_.t - 1; k >= 0; --k) {
          const int64_t t = d == 0 ? k : p_.t - 1 - k;
          // this step's output gradient plus what the next step sent back
          gather_columns(d_above.data<float>() + t * p_.n * dh_cols + d * p_.h, p_.n, p_.h, dh_cols, dh_step.data<float>(),
                         stream);
          accumulate(dh_step.data<float>(), dh.data<float>(), 1.f, nh, stream);
          float* dxp_t = dxp.data<float>() + t * p_.n * gh;
          float* dhp_k = dhp.data<float>() + k * p_.n * gh;
          const float* saved_k = saved + k * p_.n * saved_ * p_.h;
          float beta = 0.f;
          if (p_.lstm) {
            lstm_cell_backward(shape, dh_step.data<float>(), dc.data<float>(), cells + k * nh, saved_k, dhp_k, stream);
            copy(dhp_k, dxp_t, p_.n * gh);
          } else {
            gru_cell_backward(shape, dh_step.data<float>(), states + k * nh, saved_k, dxp_t, dhp_k, dh.data<float>(),
                              stream);
            beta = 1.f;  // dh holds z dh: the part that skips W_hh
          }
          // dh_prev (+)= dhp W_hh
          gemms_.gemm({.m = p_.n, .n = p_.h, .k = gh, .a = dhp_k, .b = w.hh, .beta = beta, .c = dh.data<float>()});
        }
        if (dh0) copy(dh.data<float>(), dh0 + at, nh);
        if (dc0) copy(dc.data<float>(), dc0 + at, nh);
        // the weights over the whole sequence: dW_ih += dxp^T x, dW_hh += dhp^T h_prev
        if (g.ih) gemms_.gemm({.trans_a = true, .m = gh, .n = L.in, .k = tn, .a = dxp.data<float>(), .b = in, .beta = 1.f, .c = g.ih});
        if (g.hh)
          gemms_.gemm({.trans_a = true, .m = gh, .n = p_.h, .k = tn, .a = dhp.data<float>(), .b = states, .beta = 1.f, .c = g.hh});
        if (g.b_ih)
          gemms_.gemm({.trans_a = true, .m = gh, .n = 1, .k = tn, .a = dxp.data<float>(), .b = ones_.data<float>(), .beta = 1.f, .c = g.b_ih});
        if (g.b_hh)
          gemms_.gemm({.trans_a = true, .m = gh, .n = 1, .k = tn, .a = dhp.data<float>(), .b = ones_.data<float>(), .beta = 1.f, .c = g.b_hh});
        // the input's gradient: the directions add up
        if (d_in.defined())
          gemms_.gemm({.m = tn, .n = L.in, .k = gh, .a = dxp.data<float>(), .b = w.ih, .beta = d > 0 ? 1.f : 0.f,
                        .c = d_in.data<float>()});
      }
      if (l > 0) {
        if (dropping_)  // through the dropout between layer l - 1 and this one: the same mask
          dropout_mask_apply(d_in.data<float>(), d_in.data<float>(), d_in.numel(), static_cast<float>(p_.dropout),
                             inner_dropout_seed(seed_, static_cast<uint64_t>(l - 1)), stream);
        d_above = d_in;
      } else if (dx_arg.defined() && p_.batch_first) {
        swap_time_and_batch(d_in.data<float>(), dx_arg.data<float>(), p_.t, p_.n, p_.c, stream);
      }
    }
  }

 private:
  struct Weights {
    const float* ih = nullptr;
    const float* hh = nullptr;
    const float* b_ih = nullptr;
    const float* b_hh = nullptr;
  };
  struct WeightGrads {
    float* ih = nullptr;
    float* hh = nullptr;
    float* b_ih = nullptr;
    float* b_hh = nullptr;
  };

  /// torch's order: per layer, per direction, weight_ih, weight_hh[, bias_ih, bias_hh].
  Weights weights(std::span<const Tensor> params, int64_t l, int64_t d) const {
    auto at = [&](int64_t k) { return params[p_.param_index(l, d, k)].data<float>(); };
    Weights w{at(0), at(1)};
    if (p_.has_bias) w.b_ih = at(2), w.b_hh = at(3);
    return w;
  }
  WeightGrads weight_grads(std::span<Tensor> grads, int64_t l, int64_t d) const {
    auto at = [&](int64_t k) {
      const Tensor& g = grads[p_.param_index(l, d, k)];
      return g.defined() ? g.data<float>() : nullptr;
    };
    WeightGrads g{at(0), at(1)};
    if (p_.has_bias) g.b_ih = at(2), g.b_hh = at(3);
    return g;
  }

  /// out [rows, G H] = x [rows, cols] W^T (+ 1 b^T), W [G H, cols].
  void project(const float* x, int64_t rows, int64_t cols, const float* w, const float* b, float* out) {
    const int64_t gh = p_.gates * p_.h;
    float beta = 0.f;
    if (b) {
      gemms_.gemm({.m = rows, .n = gh, .k = 1, .a = ones_.data<float>(), .b = b, .c = out});
      beta = 1.f;
    }
    gemms_.gemm({.trans_b = true, .m = rows, .n = gh, .k = cols, .a = x, .b = w, .beta = beta, .c = out});
  }

  /// x [T, N, C] as given, or moved there from batch_first [N, T, C] into x_tnc_.
  const float* time_major_input(const float* x) {
    if (!p_.batch_first) return x;
    if (!x_tnc_.defined()) x_tnc_ = Tensor::empty({p_.t * p_.n * p_.c}, DType::float32, ctx_.allocator());
    swap_time_and_batch(x, x_tnc_.data<float>(), p_.n, p_.t, p_.c, ctx_.stream().get());
    return x_tnc_.data<float>();
  }

  /// What layer l (> 0) read: the layer below's output, after dropout in training.
  const float* layer_input(int64_t l) const {
    const RnnLayerState& below = layer_[static_cast<size_t>(l - 1)];
    return dropping_ ? below.dropped.data<float>() : below.out.data<float>();
  }

  /// states[0] = the initial state input `slot` (h0 or c0) at `at`, or zeros without one.
  void initial_state(std::span<const Tensor> inputs, size_t slot, int64_t at, float* states) {
    if (p_.has_state && slot < inputs.size()) copy(inputs[slot].data<float>() + at, states, p_.n * p_.h);
    else TANDEM_CUDA_CHECK(cudaMemsetAsync(states, 0, sizeof(float) * p_.n * p_.h, ctx_.stream().get()));
  }

  /// The gradient that enters a direction's last step: `from` (a selected state's), or zero.
  void start_state(const float* from, float* state) {
    if (from) copy(from, state, p_.n * p_.h);
    else TANDEM_CUDA_CHECK(cudaMemsetAsync(state, 0, sizeof(float) * p_.n * p_.h, ctx_.stream().get()));
  }

  void copy(const float* from, float* to, int64_t n) {
    if (n > 0)
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(to, from, sizeof(float) * n, cudaMemcpyDeviceToDevice, ctx_.stream().get()));
  }

  CudaContext& ctx_;
  const RnnPlan p_;  // shapes and options
  PrecisionGemms gemms_;  // every product, in the layer's matmul precision
  int64_t saved_ = 4;  // activations a step saves per hidden unit: gru 4, lstm 5
  bool dropping_ = false;  // the last forward dropped between layers (backward follows it)
  uint64_t seed_ = 0;      // ... with this seed
  Tensor ones_;            // [max(T N, 1)] of 1.0: biases as rank-1 products
  Tensor hn_, cn_;         // [L D, N, H]: the last forward's final states
  Tensor x_tnc_;           // a batch_first input, time-major
  std::vector<RnnLayerState> layer_;
};

}  // namespace

std::unique_ptr<Kernel> make_gru_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<RnnKernel>(ctx, spec, false);
}

std::unique_ptr<Kernel> make_lstm_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<RnnKernel>(ctx, spec, true);
}

}  // namespace tandem::cuda
