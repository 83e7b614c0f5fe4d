// multi_head_attention (torch.nn.MultiheadAttention, need_weights=False).
//
// Inputs: query, key, value (or query alone: self-attention, q = k = v), then the masks
// named by the attribute `masks` in this order: key_padding_mask, attn_mask. Tandem has
// no bool tensors, so a mask that torch takes as bool is int64 here (nonzero = masked,
// torch's True); attn_mask may also be float32, added to the scores as torch's float
// masks are. `causal: true` masks key positions after the query's (torch >= 2's
// is_causal, which torch 1.13's MultiheadAttention lacks), on top of any other mask.
#include <cmath>

#include "graph/ops/op_schemas.h"

namespace tandem {

/// How many of the inputs are masks, from the attribute `masks`.
int64_t attention_mask_count(const Attributes& a) {
  const std::string& m = a.get_string("masks");
  return m == "none" ? 0 : m == "both" ? 2 : 1;
}

namespace {

OpSchema multi_head_attention() {
  OpSchema s;
  s.name = "multi_head_attention";
  s.summary = "multi-head scaled dot-product attention with in/out projections (torch.nn.MultiheadAttention)";
  s.attrs = {{"embed_dim", AttrType::integer, {}, true, false, {}, 1.0},
             {"num_heads", AttrType::integer, {}, true, false, {}, 1.0},
             {"dropout", AttrType::number, 0.0, false, false, {}, 0.0, 1.0},
             {"bias", AttrType::boolean, true},
             {"add_bias_kv", AttrType::boolean, false},
             {"add_zero_attn", AttrType::boolean, false},
             {"kdim", AttrType::integer, {}, false, true, {}, 1.0},
             {"vdim", AttrType::integer, {}, false, true, {}, 1.0},
             {"batch_first", AttrType::boolean, false},
             {"causal", AttrType::boolean, false},
             {"masks", AttrType::string, std::string("none"), false, false,
              {"none", "key_padding_mask", "attn_mask", "both"}}};
  s.min_inputs = 1;
  s.max_inputs = 5;
  s.validate = [](Attributes& a) {
    const int64_t e = a.get_int("embed_dim"), h = a.get_int("num_heads");
    if (e % h != 0)
      throw SchemaError("embed_dim " + std::to_string(e) + " must be divisible by num_heads " + std::to_string(h));
    for (const char* k : {"kdim", "vdim"})
      if (!a.is_null(k) && a.get_int(k) != e)
        throw SchemaError(std::string(k) + " other than embed_dim is not supported (got " +
                          std::to_string(a.get_int(k)) + ", embed_dim " + std::to_string(e) + ")");
    if (a.get_bool("add_bias_kv")) throw SchemaError("add_bias_kv is not supported (false only)");
    if (a.get_bool("add_zero_attn")) throw SchemaError("add_zero_attn is not supported (false only)");
  };
  s.index_bound = [](int slot, const Attributes& a, bool*) -> std::optional<int64_t> {
    // only masks can be int64: random ones are 0/1
    if (slot >= 1 && a.get_string("masks") != "none") return 2;
    return std::nullopt;
  };
  s.params = [](const Attributes& a) {
    // torch's _reset_parameters: xavier_uniform_ in_proj_weight ([3E, E]: fan_in E,
    // fan_out 3E), zero biases; out_proj keeps nn.Linear's kaiming-uniform weight.
    const int64_t e = a.get_int("embed_dim");
    const double xavier = std::sqrt(6.0 / static_cast<double>(e + 3 * e));
    const double linear = 1.0 / std::sqrt(static_cast<double>(e));
    std::vector<ParamSpec> p{{"in_proj_weight", {3 * e, e}, {ParamInit::Kind::uniform, -xavier, xavier}}};
    if (a.get_bool("bias")) p.push_back({"in_proj_bias", {3 * e}, {ParamInit::Kind::zeros}});
    p.push_back({"out_proj.weight", {e, e}, {ParamInit::Kind::uniform, -linear, linear}});
    if (a.get_bool("bias")) p.push_back({"out_proj.bias", {e}, {ParamInit::Kind::zeros}});
    return p;
  };
  s.infer = [](const std::vector<TensorType>& in, const Attributes& a) {
    const int64_t masks = attention_mask_count(a);
    const int64_t qkv = static_cast<int64_t>(in.size()) - masks;
    if (qkv != 1 && qkv != 3)
      throw SchemaError("takes query, key, value (or query alone, for self-attention) followed by " +
                        std::to_string(masks) + " mask input(s) (masks: " + a.get_string("masks") + "), got " +
                        std::to_string(in.size()) + " inputs");
    const bool bf = a.get_bool("batch_first");
    const int64_t e = a.get_int("embed_dim");
    const char* names[] = {"query", "key", "value"};
    for (int64_t i = 0; i < qkv; ++i) {
      require_dtype(in[i], DType::float32, names[i]);
      if (in[i].shape.size() != 3)
        throw SchemaError(std::string(names[i]) + " must be " + (bf ? "[N, L, E] (batch_first)" : "[L, N, E]") +
                          ", got shape " + sym_shape_str(in[i].shape) +
                          (in[i].shape.size() == 2 ? " (unbatched input is not supported: add a batch dimension)" : ""));
      if (!(in[i].shape[2] == Dim(e)))
        throw SchemaError(std::string(names[i]) + "'s last dimension is " + in[i].shape[2].str() +
                          " but embed_dim is " + std::to_string(e));
    }
    const SymShape& q = in[0].shape;
    const SymShape& k = in[qkv == 3 ? 1 : 0].shape;
    const Dim n = bf ? q[0] : q[1], l = bf ? q[1] : q[0];
    const Dim s_len = bf ? k[1] : k[0];
    if (qkv == 3) {
      if (!(in[1].shape == in[2].shape))
        throw SchemaError("key " + sym_shape_str(in[1].shape) + " and value " + sym_shape_str(in[2].shape) +
                          " must have the same shape");
      if (!((bf ? k[0] : k[1]) == n))
        throw SchemaError("query " + sym_shape_str(q) + " and key " + sym_shape_str(k) +
                          " have different batch sizes");
    }
    int64_t slot = qkv;
    const std::string& which = a.get_string("masks");
    if (which == "key_padding_mask" || which == "both") {
      const TensorType& m = in[slot++];
      require_dtype(m, DType::int64, "key_padding_mask (nonzero = ignore that key, torch's bool True)");
      if (!(m.shape == SymShape{n, s_len}))
        throw SchemaError("key_padding_mask must be [N, S] = " + sym_shape_str({n, s_len}) + ", got " +
                          sym_shape_str(m.shape));
    }
    if (which == "attn_mask" || which == "both") {
      const TensorType& m = in[slot++];
      const SymShape two{l, s_len}, three{n * Dim(a.get_int("num_heads")), l, s_len};
      if (!(m.shape == two || m.shape == three))
        throw SchemaError("attn_mask must be [L, S] = " + sym_shape_str(two) + " or [N * num_heads, L, S] = " +
                          sym_shape_str(three) + ", got " + sym_shape_str(m.shape));
    }
    return TensorType{q, DType::float32};
  };
  return s;
}

}  // namespace

std::vector<OpSchema> attention_schemas() { return {multi_head_attention()}; }

}  // namespace tandem
