// multi_head_attention's CUDA kernel against the CPU's, forward and backward, on fresh random
// tensors (the seed is printed; TANDEM_TEST_SEED repeats it): self- and cross-attention,
// sequence-first and batch_first, every mask the op takes, causal, and dropout in training
// (the same seed drops the same weights on both).
#include "gpu_test_util.h"

namespace tandem::test {
namespace {

struct AttentionCase {
  int64_t l, s, n, e, heads;
  bool self, batch_first, bias, causal;
  std::string masks;  // none, key_padding_mask, attn_mask, both
  DType mask_dtype;   // attn_mask: float32 (added) or int64 (nonzero masks)
  bool per_head;      // attn_mask [N H, L, S] rather than [L, S]
  double dropout;
};

OpCase attention_case(const AttentionCase& k, std::mt19937& gen) {
  Attributes a;
  a.set("embed_dim", k.e);
  a.set("num_heads", k.heads);
  a.set("bias", k.bias);
  a.set("batch_first", k.batch_first);
  a.set("causal", k.causal);
  a.set("dropout", k.dropout);
  a.set("masks", k.masks);
  OpCase c("multi_head_attention", a);
  auto seq = [&](int64_t len) { return k.batch_first ? Shape{k.n, len, k.e} : Shape{len, k.n, k.e}; };
  c.inputs = {random_tensor(seq(k.l), gen)};
  if (!k.self) {
    c.inputs.push_back(random_tensor(seq(k.s), gen));
    c.inputs.push_back(random_tensor(seq(k.s), gen));
  }
  const int64_t s = k.self ? k.l : k.s;
  if (k.masks == "key_padding_mask" || k.masks == "both") {
    Tensor kpm = random_indices({k.n, s}, 2, gen);
    for (int64_t n = 0; n < k.n; ++n) kpm.data<int64_t>()[n * s] = 0;  // every row keeps a key
    c.inputs.push_back(kpm);
  }
  if (k.masks == "attn_mask" || k.masks == "both") {
    const Shape shape = k.per_head ? Shape{k.n * k.heads, k.l, s} : Shape{k.l, s};
    if (k.mask_dtype == DType::float32) {
      c.inputs.push_back(random_tensor(shape, gen));
    } else {
      Tensor m = random_indices(shape, 2, gen);
      for (int64_t r = 0; r < m.numel() / s; ++r) m.data<int64_t>()[r * s] = 0;  // key 0 stays for every query
      c.inputs.push_back(m);
    }
  }
  const float bound = 1.f / std::sqrt(static_cast<float>(k.e));
  c.params = {random_tensor({3 * k.e, k.e}, gen, -bound, bound)};
  if (k.bias) c.params.push_back(random_tensor({3 * k.e}, gen, -bound, bound));
  c.params.push_back(random_tensor({k.e, k.e}, gen, -bound, bound));
  if (k.bias) c.params.push_back(random_tensor({k.e}, gen, -bound, bound));
  c.out_shape = seq(k.l);
  c.training = k.dropout > 0;
  c.seed = gen();
  return c;
}

TEST_CASE("multi_head_attention on a GPU matches the CPU, masks and dropout included", "[gpu][attention]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  const DType f = DType::float32, i = DType::int64;
  for (const AttentionCase& k : std::vector<AttentionCase>{
           // l, s, n, e, heads, self, batch_first, bias, causal, masks, mask dtype, per_head, dropout
           {5, 5, 3, 8, 2, true, false, true, false, "none", f, false, 0},
           {7, 4, 2, 12, 3, false, false, true, false, "none", f, false, 0},
           {6, 9, 4, 16, 4, false, true, false, false, "none", f, false, 0},
           {8, 8, 2, 8, 1, true, true, true, true, "none", f, false, 0},
           {5, 6, 3, 8, 2, false, false, true, false, "key_padding_mask", f, false, 0},
           {5, 6, 3, 8, 2, false, true, true, false, "attn_mask", f, false, 0},
           {5, 6, 3, 8, 2, false, false, true, false, "attn_mask", f, true, 0},
           {5, 6, 3, 8, 2, false, true, true, false, "attn_mask", i, false, 0},
           {6, 6, 2, 8, 2, true, false, true, true, "both", i, true, 0},
           {6, 6, 2, 8, 2, true, false, true, false, "both", f, false, 0},
           {10, 10, 4, 32, 4, true, true, true, false, "none", f, false, 0.25},
           {64, 64, 8, 256, 4, true, true, true, false, "key_padding_mask", f, false, 0.1},
       }) {
    INFO("l " << k.l << " s " << k.s << " n " << k.n << " e " << k.e << " heads " << k.heads << " self " << k.self
              << " batch_first " << k.batch_first << " causal " << k.causal << " masks " << k.masks << " per_head "
              << k.per_head << " dropout " << k.dropout);
    check_gpu_against_cpu(attention_case(k, gen), gen, 2e-5);
  }
}

TEST_CASE("multi_head_attention in bf16 or fp16 on a GPU: its products in half, within 1e-2 of the cpu", "[gpu][attention][mixed]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (Precision precision : {Precision::bf16, Precision::fp16}) {
    INFO("precision " << precision_name(precision));
    for (bool self : {true, false}) {
      OpCase c = attention_case({7, 9, 3, 32, 4, self, !self, true, false, "key_padding_mask", DType::int64, false, 0}, gen);
      c.precision = precision;  // the cpu runs bf16 too (fp16: fp32)
      check_gpu_against_cpu(c, gen, 1e-2);
      CHECK(gpu_forward_differs_from_fp32(c));
    }
  }
}

}  // namespace
}  // namespace tandem::test
