// The state every optimizer shares: a step count and buffers shaped like the parameters.
#include <algorithm>
#include <set>

#include "runtime/optim/optimizer_impl.h"

namespace tandem::optim_detail {

namespace {

/// The host float32 tensor state[name], shaped `shape`; UserError naming it otherwise.
const Tensor& find_buffer(const TensorMap& state, const std::string& kind, const std::string& name,
                          const Shape& shape) {
  auto it = state.find(name);
  if (it == state.end()) throw UserError(kind + " optimizer state: missing tensor '" + name + "'");
  const Tensor& t = it->second;
  if (t.device() != Device::cpu())
    throw UserError(kind + " optimizer state: tensor '" + name + "' is on " + t.device().str() +
                    "; optimizer state lives in host memory");
  if (t.dtype() != DType::float32)
    throw UserError(kind + " optimizer state: tensor '" + name + "' is " + std::string(dtype_name(t.dtype())) +
                    ", expected float32");
  if (t.shape() != shape)
    throw UserError(kind + " optimizer state: tensor '" + name + "' has shape " + shape_str(t.shape()) +
                    ", the parameter has shape " + shape_str(shape));
  return t;
}

int64_t read_step(const TensorMap& state, const std::string& kind) {
  auto it = state.find("step");
  if (it == state.end()) throw UserError(kind + " optimizer state: missing tensor 'step'");
  const Tensor& t = it->second;
  if (t.dtype() != DType::int64 || t.shape() != Shape{1} || t.device() != Device::cpu())
    throw UserError(kind + " optimizer state: tensor 'step' must be a host int64 tensor of shape [1], got " +
                    std::string(dtype_name(t.dtype())) + " " + shape_str(t.shape()));
  int64_t step = t.data<int64_t>()[0];
  if (step < 1) throw UserError(kind + " optimizer state: 'step' is " + std::to_string(step) + ", expected >= 1");
  return step;
}

}  // namespace

BufferedOptimizer::BufferedOptimizer(std::string kind, std::vector<std::string> buffer_names)
    : kind_(std::move(kind)), buffer_names_(std::move(buffer_names)) {}

TensorMap BufferedOptimizer::state(std::span<const std::string> names) const {
  TensorMap out;
  if (steps_ == 0) return out;
  out.emplace("step", Tensor::from_vector<int64_t>({1}, {steps_}));
  for (size_t b = 0; b < buffers_.size(); ++b) {
    TANDEM_ASSERT(names.size() == buffers_[b].size(), kind_ + " state: " + std::to_string(names.size()) +
                                                          " names for " + std::to_string(buffers_[b].size()) +
                                                          " parameters");
    // Host copies: the optimizer keeps updating its buffers in place after this returns,
    // and a buffer may be on the GPU that holds its parameter.
    for (size_t i = 0; i < names.size(); ++i)
      out.emplace(names[i] + "." + buffer_names_[b], devices_->to_host(buffers_[b][i]));
  }
  return out;
}

void BufferedOptimizer::load_state(const TensorMap& state, std::span<const std::string> names,
                                   std::span<const Tensor> params) {
  TANDEM_ASSERT(names.size() == params.size(), kind_ + " load_state: " + std::to_string(names.size()) +
                                                   " names for " + std::to_string(params.size()) + " parameters");
  if (state.empty()) {  // what state() returns before the first step
    steps_ = 0;
    buffers_.clear();
    return;
  }
  std::set<std::string> expected{"step"};
  int64_t step = read_step(state, kind_);
  std::vector<std::vector<Tensor>> buffers(buffer_names_.size());
  for (size_t b = 0; b < buffer_names_.size(); ++b) {
    for (size_t i = 0; i < names.size(); ++i) {
      std::string name = names[i] + "." + buffer_names_[b];
      buffers[b].push_back(find_buffer(state, kind_, name, buffer_shape(b, params[i])).clone());
      expected.insert(std::move(name));
    }
  }
  for (const auto& [name, tensor] : state) {
    if (expected.count(name)) continue;
    std::string keeps = "'step'";
    for (const auto& b : buffer_names_) keeps += ", '<param>." + b + "'";
    throw UserError(kind_ + " optimizer state: unexpected tensor '" + name + "' (this optimizer keeps " + keeps +
                    ")");
  }
  steps_ = step;
  buffers_ = std::move(buffers);
}

bool BufferedOptimizer::begin_step(std::span<Tensor> params, std::span<const Tensor> grads) {
  TANDEM_ASSERT(params.size() == grads.size(), kind_ + " step: " + std::to_string(params.size()) +
                                                   " parameters, " + std::to_string(grads.size()) + " gradients");
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    const Tensor& g = grads[i];
    if (!g.defined()) {  // a row gradient: step_rows() reads it from its rows
      TANDEM_ASSERT(takes_row_gradients(), kind_ + " step: parameter " + std::to_string(i) + " has a row gradient");
      TANDEM_ASSERT(p.device() == Device::cpu() && p.dtype() == DType::float32, kind_ + " step: a row gradient's table");
      continue;
    }
    if (p.device() != g.device())
      throw UserError(kind_ + " optimizer: parameter " + std::to_string(i) + " is on " + p.device().str() +
                      " and its gradient on " + g.device().str() + "; both must be on one device");
    TANDEM_ASSERT(p.dtype() == DType::float32 && g.dtype() == DType::float32,
                  kind_ + " step: parameter " + std::to_string(i) + " is not float32");
    TANDEM_ASSERT(p.shape() == g.shape(), kind_ + " step: parameter " + std::to_string(i) + " has shape " +
                                              shape_str(p.shape()) + ", its gradient " + shape_str(g.shape()));
  }
  const bool first = steps_ == 0;
  if (first && buffers_.empty()) allocate_state(params);  // prepare_early() may have
  for (size_t b = 0; b < buffers_.size(); ++b) {
    auto& buffer = buffers_[b];
    TANDEM_ASSERT(buffer.size() == params.size(), kind_ + " step: " + std::to_string(params.size()) +
                                                      " parameters, the state holds " +
                                                      std::to_string(buffer.size()));
    for (size_t i = 0; i < params.size(); ++i) {
      TANDEM_ASSERT(buffer[i].shape() == buffer_shape(b, params[i]),
                    kind_ + " step: parameter " + std::to_string(i) + " changed shape");
      if (host_state_) continue;
      // The state lives where its parameter's master copy does: follow it when that moved
      // (to a GPU when placed training started, back to the host after Model::to(cpu)).
      if (buffer[i].device() != params[i].device()) {
        const bool on_host = buffer[i].device() == Device::cpu();
        Tensor host = on_host ? buffer[i] : devices_->to_host(buffer[i]);
        Tensor moved = devices_->zeros_like(params[i]);
        devices_->from_host(moved, host);
        buffer[i] = std::move(moved);
      }
    }
  }
  ++steps_;
  return first;
}

void BufferedOptimizer::allocate_state(std::span<Tensor> params) {
  buffers_.assign(buffer_names_.size(), {});
  for (size_t b = 0; b < buffers_.size(); ++b)
    for (const Tensor& p : params) {
      if (!host_state_) {
        buffers_[b].push_back(devices_->zeros_like(p));
        continue;
      }
      Tensor t = Tensor::zeros(buffer_shape(b, p), DType::float32);
      if (const float start = buffer_start(b); start != 0.0f) std::fill_n(t.data<float>(), t.numel(), start);
      buffers_[b].push_back(std::move(t));
    }
}

void BufferedOptimizer::prepare_early(std::span<Tensor> params) {
  TANDEM_ASSERT(takes_row_gradients(), kind_ + " cannot update a table in its backward");
  if (steps_ == 0 && buffers_.empty()) allocate_state(params);
  early_.assign(params.size(), 0);
}

void BufferedOptimizer::update_early(std::span<Tensor> params, size_t i, TouchedRows& rows, double lr,
                                     ParameterDevices& devices) {
  TANDEM_ASSERT(i < early_.size() && rows.holds_values(), kind_ + ": update_early() without prepare_early()");
  update_parameter(i, params[i], Tensor(), &rows, lr, steps_ + 1, devices);  // the step step_rows() will count
  early_[i] = 1;
}

void BufferedOptimizer::stepped_early(size_t i) {
  TANDEM_ASSERT(i < early_.size() && table_step(1.0), kind_ + ": stepped_early() without prepare_early()");
  early_[i] = 1;
}

void BufferedOptimizer::step_each(std::span<Tensor> params, std::span<const Tensor> grads,
                                  std::span<TouchedRows* const> rows, double lr) {
  begin_step(params, grads);
  for (size_t i = 0; i < params.size(); ++i)
    if (!updated_early(i)) update_parameter(i, params[i], grads[i], rows.empty() ? nullptr : rows[i], lr, steps_, *devices_);
  end_early();
}

}  // namespace tandem::optim_detail
