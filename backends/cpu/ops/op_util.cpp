#include "backends/cpu/ops/op_util.h"

namespace tandem::cpu {

std::string spec_key(const KernelSpec& spec) {
  std::string key = spec.op + ":";
  auto add = [&](const std::vector<TensorDesc>& descs) {
    for (const TensorDesc& d : descs) key += shape_str(d.shape) + std::string(dtype_name(d.dtype)) + ";";
    key += "|";
  };
  add(spec.inputs);
  add(spec.params);
  add(spec.outputs);
  if (spec.attrs) key += spec.attrs->str();
  return key;
}

size_t DnnlCall::bind(int arg, const dnnl::memory::desc& md, dnnl::engine& engine, void* handle) {
  return bind(arg, dnnl::memory(md, engine, handle));
}

size_t DnnlCall::bind(int arg, dnnl::memory mem) {
  args_.push_back({arg, mem.get()});
  mems_.push_back(std::move(mem));  // keeps the handle in args_ alive
  return mems_.size() - 1;
}

void DnnlCall::run(dnnl::stream& stream) {
  dnnl_status_t status =
      dnnl_primitive_execute(prim_.get(), stream.get(), static_cast<int>(args_.size()), args_.data());
  TANDEM_ASSERT(status == dnnl_success, "oneDNN primitive execution failed with status " + std::to_string(status));
  stream.wait();
}

}  // namespace tandem::cpu
