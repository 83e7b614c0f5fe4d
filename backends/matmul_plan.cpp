#include "backends/matmul_plan.h"

#include <algorithm>

#include "core/error.h"

namespace tandem {

MatmulPlan plan_matmul(const Shape& a_in, const Shape& b_in) {
  MatmulPlan p;
  Shape a = a_in, b = b_in;
  if (a.empty() || b.empty()) throw UserError("matmul: both inputs must have rank >= 1");
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  p.m = a[a.size() - 2];
  p.k = a.back();
  p.n = b.back();
  if (b[b.size() - 2] != p.k)
    throw UserError("matmul: inner dims differ: " + shape_str(a_in) + " @ " + shape_str(b_in));
  const size_t rank = std::max(a.size(), b.size());
  a.insert(a.begin(), rank - a.size(), 1);
  b.insert(b.begin(), rank - b.size(), 1);
  Shape out(rank);
  for (size_t i = 0; i + 2 < rank; ++i) {
    if (a[i] != b[i] && a[i] != 1 && b[i] != 1)
      throw UserError("matmul: batch dims of " + shape_str(a_in) + " and " + shape_str(b_in) + " do not broadcast");
    out[i] = a[i] == 1 ? b[i] : a[i];  // a 1 broadcasts to the other, 0 included (torch: 0 with 1 is 0)
    p.batches *= out[i];
    p.a_broadcast = p.a_broadcast || (a[i] == 1 && out[i] != 1);
    p.b_broadcast = p.b_broadcast || (b[i] == 1 && out[i] != 1);
  }
  out[rank - 2] = p.m;
  out[rank - 1] = p.n;
  int64_t sa = p.m * p.k, sb = p.k * p.n;
  p.batch_dims.resize(rank - 2);
  p.batch_stride_a.resize(rank - 2);
  p.batch_stride_b.resize(rank - 2);
  for (size_t i = rank - 2; i-- > 0;) {
    p.batch_dims[i] = out[i];
    p.batch_stride_a[i] = a[i] == 1 ? 0 : sa;
    p.batch_stride_b[i] = b[i] == 1 ? 0 : sb;
    sa *= a[i];
    sb *= b[i];
  }
  p.a = std::move(a);
  p.b = std::move(b);
  p.out = std::move(out);
  return p;
}

}  // namespace tandem
