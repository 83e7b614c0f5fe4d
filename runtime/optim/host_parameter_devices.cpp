// The host's ParameterDevices: every parameter in host memory, updated by the calling thread
// alone or with its OpenMP team (Note [which threads update] in backends/optimizer_update.h).
#include <cstring>

#include "backends/optimizer_update.h"
#include "runtime/optim/optimizer.h"

namespace tandem {
namespace {

void require_host(const Tensor& t, const char* what) {
  TANDEM_ASSERT(t.device() == Device::cpu(), std::string(what) + " on " + t.device().str() +
                                                 " without devices to run it: the optimizer needs set_devices()");
}

class HostParameterDevices final : public ParameterDevices {
 public:
  explicit HostParameterDevices(HostThreads threads) : threads_(threads) {}

  Tensor zeros_like(const Tensor& param) override {
    require_host(param, "optimizer state for a parameter");
    return Tensor::zeros(param.shape(), DType::float32);
  }
  void sgd(const optim_detail::SgdScalars& s, const Tensor& p, const Tensor& g, const Tensor& buf, bool first) override {
    require_host(p, "an sgd update of a parameter");
    Bf16Copy* copy = p.bf16_copy();  // written beside the master (Note [a weight's bf16 copy])
    sgd_update_host(s, p.data<float>(), g.data<float>(), buf.defined() ? buf.data<float>() : nullptr, p.numel(), first,
                    threads_, copy ? copy->data() : nullptr);
    if (copy) copy->rewritten();
  }
  void adam(const optim_detail::AdamScalars& s, const Tensor& p, const Tensor& g, const Tensor& m,
            const Tensor& v) override {
    require_host(p, "an adam update of a parameter");
    Bf16Copy* copy = p.bf16_copy();
    adam_update_host(s, p.data<float>(), g.data<float>(), m.data<float>(), v.data<float>(), p.numel(), threads_,
                     copy ? copy->data() : nullptr);
    if (copy) copy->rewritten();
  }
  double sum_of_squares(const Tensor& g) override {
    require_host(g, "the norm of a gradient");
    return sum_of_squares_host(g.data<float>(), g.numel(), threads_);
  }
  void scale(const Tensor& g, float factor) override {
    require_host(g, "scaling a gradient");
    scale_host(g.data<float>(), g.numel(), factor, threads_);
  }
  Tensor to_host(const Tensor& t) override {
    require_host(t, "a copy of optimizer state");
    return t.clone();
  }
  void from_host(const Tensor& t, const Tensor& from) override {
    require_host(t, "optimizer state");
    std::memcpy(t.raw_data(), from.raw_data(), t.nbytes());
  }
  HostThreads host_threads() const override { return threads_; }

 private:
  HostThreads threads_;
};

}  // namespace

ParameterDevices& host_parameter_devices(HostThreads threads) {
  static HostParameterDevices team(HostThreads::team), one(HostThreads::one);
  return threads == HostThreads::team ? team : one;
}

}  // namespace tandem
