#include "backends/broadcast_plan.h"

#include <string>

namespace tandem {

BroadcastPlan plan_broadcast(const Shape& a, const Shape& b, const Shape& out) {
  const size_t rank = out.size();
  auto padded_strides = [&](const Shape& s, const char* name) {
    TANDEM_ASSERT(s.size() <= rank, std::string("broadcast: input ") + name + " has higher rank than the output");
    std::vector<int64_t> strides(rank, 0);
    int64_t stride = 1;
    for (size_t i = 0; i < s.size(); ++i) {
      size_t d = s.size() - 1 - i, o = rank - 1 - i;
      TANDEM_ASSERT(s[d] == out[o] || s[d] == 1,
                    "broadcast: " + shape_str(s) + " does not broadcast to " + shape_str(out));
      strides[o] = (s[d] == 1 && out[o] != 1) ? 0 : stride;
      stride *= s[d];
    }
    return strides;
  };
  std::vector<int64_t> sa = padded_strides(a, "a"), sb = padded_strides(b, "b");
  BroadcastPlan plan;
  plan.numel = shape_numel(out);
  for (size_t i = 0; i < rank; ++i) {
    if (out[i] == 1) continue;
    if (!plan.dims.empty()) {
      int64_t d = out[i];
      bool a_merges = plan.stride_a.back() == sa[i] * d;
      bool b_merges = plan.stride_b.back() == sb[i] * d;
      if (a_merges && b_merges) {
        plan.dims.back() *= d;
        plan.stride_a.back() = sa[i];
        plan.stride_b.back() = sb[i];
        continue;
      }
    }
    plan.dims.push_back(out[i]);
    plan.stride_a.push_back(sa[i]);
    plan.stride_b.push_back(sb[i]);
  }
  if (plan.dims.empty()) {  // a scalar result
    plan.dims = {1};
    plan.stride_a = {0};
    plan.stride_b = {0};
  }
  return plan;
}

}  // namespace tandem
