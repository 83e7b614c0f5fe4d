#include "backends/attention_plan.h"

#include "core/error.h"

namespace tandem {

AttentionPlan plan_attention(const KernelSpec& spec) {
  const Attributes& a = *spec.attrs;
  AttentionPlan p;
  p.e = a.get_int("embed_dim");
  p.heads = a.get_int("num_heads");
  p.d = p.e / p.heads;
  p.has_bias = a.get_bool("bias");
  p.batch_first = a.get_bool("batch_first");
  p.causal = a.get_bool("causal");
  p.dropout = a.get_float("dropout");
  const std::string& masks = a.get_string("masks");
  const int64_t n_masks = masks == "none" ? 0 : masks == "both" ? 2 : 1;
  p.qkv = static_cast<int64_t>(spec.inputs.size()) - n_masks;
  TANDEM_ASSERT(p.qkv == 1 || p.qkv == 3, "multi_head_attention: wrong input count");
  int64_t slot = p.qkv;
  if (masks == "key_padding_mask" || masks == "both") p.key_padding_slot = slot++;
  if (masks == "attn_mask" || masks == "both") {
    p.mask_slot = slot++;
    const TensorDesc& mask = spec.inputs.at(static_cast<size_t>(p.mask_slot));
    p.mask_float = mask.dtype == DType::float32;
    p.mask_per_head = mask.shape.size() == 3;
  }
  const Shape& q = spec.inputs.at(0).shape;
  const Shape& k = spec.inputs.at(p.qkv == 3 ? 1 : 0).shape;
  p.n = p.batch_first ? q.at(0) : q.at(1);
  p.l = p.batch_first ? q.at(1) : q.at(0);
  p.s = p.batch_first ? k.at(1) : k.at(0);
  return p;
}

}  // namespace tandem
