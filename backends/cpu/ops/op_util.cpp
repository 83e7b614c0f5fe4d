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
  if (spec.precision != Precision::fp32) key += "@" + std::string(precision_name(spec.precision));
  return key;
}

bool is_reference_kernel(const dnnl::primitive_desc_base& pd) {
  return std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
}

DnnlCall::DnnlCall(dnnl::primitive prim) : prim_(std::move(prim)) {
  const_dnnl_primitive_desc_t pd = prim_.get_primitive_desc();
  const_dnnl_primitive_attr_t attr = nullptr;
  dnnl_scratchpad_mode_t mode = dnnl_scratchpad_mode_library;
  TANDEM_ASSERT(dnnl_primitive_desc_get_attr(pd, &attr) == dnnl_success &&
                    dnnl_primitive_attr_get_scratchpad_mode(attr, &mode) == dnnl_success &&
                    mode == dnnl_scratchpad_mode_user,
                "a oneDNN primitive built without user_scratchpad_attr()");
  if (const dnnl_memory_desc_t* md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0))
    scratchpad_md_ = dnnl::memory::desc(*md);
}

size_t DnnlCall::bind(int arg, const dnnl::memory::desc& md, dnnl::engine& engine, void* handle) {
  return bind(arg, dnnl::memory(md, engine, handle));
}

size_t DnnlCall::bind(int arg, dnnl::memory mem) {
  args_.push_back({arg, mem.get()});
  mems_.push_back(std::move(mem));  // keeps the handle in args_ alive
  return mems_.size() - 1;
}

void DnnlCall::run(CpuContext& ctx) {
  if (size_t bytes = scratchpad_md_.get_size()) {
    if (scratchpad_slot_ == kNoSlot) scratchpad_slot_ = bind(DNNL_ARG_SCRATCHPAD, scratchpad_md_, ctx.engine());
    set(scratchpad_slot_, ctx.scratchpad(bytes));
  }
  dnnl::stream& stream = ctx.stream();
  dnnl_status_t status =
      dnnl_primitive_execute(prim_.get(), stream.get(), static_cast<int>(args_.size()), args_.data());
  TANDEM_ASSERT(status == dnnl_success, "oneDNN primitive execution failed with status " + std::to_string(status));
  stream.wait();
}

void check_indices(const int64_t* idx, int64_t n, int64_t bound, const char* op) {
  for (int64_t i = 0; i < n; ++i) {
    if (idx[i] < 0 || idx[i] >= bound) [[unlikely]]
      throw UserError(std::string(op) + ": index " + std::to_string(idx[i]) + " at position " + std::to_string(i) +
                      " is out of range [0, " + std::to_string(bound) + ")");
  }
}

void add_into(const Tensor& into, const Tensor& from) {
  TANDEM_ASSERT(into.numel() == from.numel(), "add_into of tensors of different sizes");
  float* a = into.data<float>();
  const float* b = from.data<float>();
  parallel_for(into.numel(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) a[i] += b[i];
  });
}

}  // namespace tandem::cpu
