// conv2d, max_pool2d, avg_pool2d and batch_norm2d, and their 1-D ops, on a GPU (cuDNN)
// against the CPU's kernels (oneDNN), forward and backward; and the geometries cuDNN
// cannot run are reported unsupported rather than run wrong.
#include "gpu_test_util.h"

namespace tandem::test {
namespace {

OpCase conv_case(std::mt19937& gen, Shape x, int64_t out, int64_t k, int64_t stride, int64_t pad, int64_t dilation,
                 int64_t groups, bool bias) {
  const int64_t c = x.end()[-3];
  OpCase oc{"conv2d", op_attrs("conv2d", {{"in_channels", c}, {"out_channels", out}, {"kernel_size", k},
                                          {"stride", stride}, {"padding", pad}, {"dilation", dilation},
                                          {"groups", groups}, {"bias", bias},
                                          {"padding_mode", std::string("zeros")}})};
  oc.inputs = {random_tensor(x, gen)};
  oc.params = {random_tensor({out, c / groups, k, k}, gen, -0.3f, 0.3f)};
  if (bias) oc.params.push_back(random_tensor({out}, gen));
  const auto size = [&](int64_t in) { return (in + 2 * pad - dilation * (k - 1) - 1) / stride + 1; };
  oc.out_shape = x;
  oc.out_shape.end()[-3] = out;
  oc.out_shape.end()[-2] = size(x.end()[-2]);
  oc.out_shape.end()[-1] = size(x.end()[-1]);
  oc.training = true;
  return oc;
}

TEST_CASE("conv2d on a GPU matches the CPU", "[gpu][conv2d]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  check_gpu_against_cpu(conv_case(gen, {4, 8, 12, 12}, 16, 3, 1, 1, 1, 1, true), gen);
  check_gpu_against_cpu(conv_case(gen, {2, 3, 17, 15}, 5, 5, 2, 2, 1, 1, false), gen);
  check_gpu_against_cpu(conv_case(gen, {2, 4, 16, 16}, 6, 3, 1, 2, 2, 2, true), gen);  // dilated, grouped
  check_gpu_against_cpu(conv_case(gen, {3, 9, 9}, 4, 1, 1, 0, 1, 1, true), gen);        // unbatched 1x1
  // the weight gradient sums 32 x 28 x 28 products per element, in another order on each
  // side: fp32 rounding alone reaches 2.3e-5 of the largest (seen once in 2 runs on an H200)
  check_gpu_against_cpu(conv_case(gen, {32, 64, 28, 28}, 64, 3, 1, 1, 1, 1, true), gen, 1e-4);
}

TEST_CASE("conv2d in bf16 or fp16 on a GPU: on tensor cores, within 1e-2 of the cpu", "[gpu][conv2d][mixed]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (Precision precision : {Precision::bf16, Precision::fp16}) {
    INFO("precision " << precision_name(precision));
    for (OpCase c : {conv_case(gen, {4, 8, 12, 12}, 16, 3, 1, 1, 1, 1, true),
                     conv_case(gen, {2, 4, 16, 16}, 6, 3, 1, 2, 2, 2, true)}) {  // dilated, grouped
      c.precision = precision;  // the cpu runs bf16 too (fp16: fp32)
      check_gpu_against_cpu(c, gen, 1e-2);
      CHECK(gpu_forward_differs_from_fp32(c));
    }
  }
}

TEST_CASE("conv2d padding cuDNN cannot express is unsupported, not wrong", "[gpu][conv2d]") {
  std::mt19937 gen(1);
  OpCase c = conv_case(gen, {1, 2, 8, 8}, 2, 4, 1, 0, 1, 1, true);
  c.attrs.set("padding", std::string("same"));  // kernel 4: one more after than before
  c.out_shape = {1, 2, 8, 8};
  cuda::CudaKernelChoice choice = cuda::make_cuda_kernel(gpu(), c.spec());
  CHECK(choice.kernel == nullptr);
  CHECK_THAT(choice.unsupported, Catch::Contains("symmetric"));
}

OpCase pool_case(std::mt19937& gen, const std::string& op, Shape x, int64_t k, int64_t stride, int64_t pad,
                 bool include_pad) {
  std::map<std::string, AttrValue> attrs{{"kernel_size", k}, {"stride", stride}, {"padding", pad},
                                         {"ceil_mode", false}};
  if (op == "max_pool2d") attrs.insert({{"dilation", int64_t{1}}, {"return_indices", false}});
  else attrs.insert({"count_include_pad", include_pad});
  OpCase oc{op, op_attrs(op, attrs)};
  oc.inputs = {random_tensor(x, gen)};
  const auto size = [&](int64_t in) { return (in + 2 * pad - k) / stride + 1; };
  oc.out_shape = x;
  oc.out_shape.end()[-2] = size(x.end()[-2]);
  oc.out_shape.end()[-1] = size(x.end()[-1]);
  return oc;
}

TEST_CASE("max_pool2d and avg_pool2d on a GPU match the CPU", "[gpu][pooling]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (const char* op : {"max_pool2d", "avg_pool2d"})
    for (bool include_pad : {true, false}) {
      INFO(op << " count_include_pad " << include_pad);
      check_gpu_against_cpu(pool_case(gen, op, {2, 3, 8, 8}, 2, 2, 0, include_pad), gen);
      check_gpu_against_cpu(pool_case(gen, op, {2, 3, 9, 7}, 3, 2, 1, include_pad), gen);
      check_gpu_against_cpu(pool_case(gen, op, {4, 5, 5}, 3, 1, 1, include_pad), gen);  // unbatched
    }
  OpCase ceil = pool_case(gen, "max_pool2d", {1, 1, 5, 5}, 2, 2, 0, true);
  ceil.attrs.set("ceil_mode", true);
  ceil.out_shape = {1, 1, 3, 3};
  CHECK(cuda::make_cuda_kernel(gpu(), ceil.spec()).kernel == nullptr);
}

OpCase bn_case(std::mt19937& gen, Shape x, bool affine, bool tracks, std::optional<double> momentum,
               const std::string& op = "batch_norm2d") {
  const int64_t c = x[1];
  OpCase oc{op, op_attrs(op, {{"num_features", c}, {"eps", 1e-5}, {"affine", affine}, {"track_running_stats", tracks},
                              {"momentum", momentum ? AttrValue{*momentum} : AttrValue{std::monostate{}}}})};
  oc.inputs = {random_tensor(x, gen, -3.f, 5.f)};
  if (affine) oc.params = {random_tensor({c}, gen), random_tensor({c}, gen)};
  if (tracks) {
    oc.params.push_back(random_tensor({c}, gen, -1.f, 1.f));
    oc.params.push_back(random_tensor({c}, gen, 0.5f, 2.f));
    oc.params.push_back(Tensor::from_vector<int64_t>({}, {3}));
  }
  oc.out_shape = x;
  return oc;
}

/// A batch norm updates its buffers in forward: both backends start from the same
/// values, and the buffers are compared after the forward along with the output.
void check_batch_norm(OpCase c, std::mt19937& gen) {
  INFO(c.op << " [" << c.attrs.str() << "] training " << c.training);
  std::vector<Tensor> start;
  for (const Tensor& p : c.params) start.push_back(p.clone());
  auto cpu_kernel = make_kernel(c);
  auto gpu_kernel = make_gpu_kernel(c);
  Tensor want = run_kernel(c, *cpu_kernel);  // updates c.params (the CPU's buffers)
  std::vector<Tensor> inputs = to_gpu(c.inputs), params = to_gpu(start);
  std::vector<Tensor> outputs{gpu_garbage(c.out_shape, DType::float32)};
  gpu_kernel->forward({inputs, params, outputs, c.training, 0, 0});
  require_close(to_cpu(outputs[0]), want, 2e-5);
  for (size_t i = 0; i < c.params.size(); ++i) {
    INFO("parameter or buffer " << i << " after forward");
    require_close(to_cpu(params[i]), c.params[i], 1e-5);
  }
  Tensor grad_out = random_tensor(c.out_shape, gen);
  std::vector<Tensor> grad_start;
  for (const Tensor& p : c.params)
    grad_start.push_back(p.dtype() == DType::float32 ? random_tensor(p.shape(), gen) : Tensor());
  Grads cpu_grads{{filled(c.inputs[0], NAN)}, {}};
  Grads gpu_grads = cpu_grads;
  for (size_t i = 0; i < c.params.size(); ++i) {  // only weight and bias get gradients
    const bool trainable = c.attrs.get_bool("affine") && i < 2;
    cpu_grads.params.push_back(trainable ? grad_start[i].clone() : Tensor());
    gpu_grads.params.push_back(trainable ? to_gpu(grad_start[i]) : Tensor());
  }
  gpu_grads.inputs[0] = to_gpu(gpu_grads.inputs[0]);
  std::vector<Tensor> outs{want}, grad_outs{grad_out}, gpu_outs{outputs[0]}, gpu_grad_outs{to_gpu(grad_out)};
  cpu_kernel->backward({c.inputs, c.params, outs, grad_outs, cpu_grads.inputs, cpu_grads.params, c.training, 0});
  gpu_kernel->backward({inputs, params, gpu_outs, gpu_grad_outs, gpu_grads.inputs, gpu_grads.params, c.training, 0});
  require_close(to_cpu(gpu_grads.inputs[0]), cpu_grads.inputs[0], 2e-5);
  for (size_t i = 0; i < cpu_grads.params.size(); ++i)
    if (cpu_grads.params[i].defined()) {
      INFO("grad of param " << i);
      require_close(to_cpu(gpu_grads.params[i]), cpu_grads.params[i], 2e-5);
    }
}

TEST_CASE("batch_norm2d on a GPU matches the CPU in training and eval, buffers included", "[gpu][batch_norm]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (bool training : {true, false})
    for (auto [affine, tracks] : {std::pair{true, true}, std::pair{false, true}, std::pair{true, false}})
      for (std::optional<double> momentum : {std::optional<double>{0.1}, std::optional<double>{}}) {
        OpCase c = bn_case(gen, {4, 3, 5, 6}, affine, tracks, momentum);
        c.training = training;
        check_batch_norm(c, gen);
      }
  OpCase big = bn_case(gen, {32, 64, 14, 14}, true, true, 0.1);
  big.training = true;
  check_batch_norm(big, gen);
}

OpCase conv1d_case(std::mt19937& gen, Shape x, int64_t out, int64_t k, int64_t stride, int64_t pad,
                   int64_t dilation, int64_t groups, bool bias) {
  const int64_t c = x.end()[-2];
  OpCase oc{"conv1d", op_attrs("conv1d", {{"in_channels", c}, {"out_channels", out}, {"kernel_size", k},
                                          {"stride", stride}, {"padding", pad}, {"dilation", dilation},
                                          {"groups", groups}, {"bias", bias},
                                          {"padding_mode", std::string("zeros")}})};
  oc.inputs = {random_tensor(x, gen)};
  oc.params = {random_tensor({out, c / groups, k}, gen, -0.3f, 0.3f)};
  if (bias) oc.params.push_back(random_tensor({out}, gen));
  oc.out_shape = x;
  oc.out_shape.end()[-2] = out;
  oc.out_shape.end()[-1] = (x.end()[-1] + 2 * pad - dilation * (k - 1) - 1) / stride + 1;
  oc.training = true;
  return oc;
}

OpCase pool1d_case(std::mt19937& gen, const std::string& op, Shape x, int64_t k, int64_t stride, int64_t pad) {
  std::map<std::string, AttrValue> attrs{{"kernel_size", k}, {"stride", stride}, {"padding", pad},
                                         {"ceil_mode", false}};
  if (op == "max_pool1d") attrs.insert({{"dilation", int64_t{1}}, {"return_indices", false}});
  else attrs.insert({"count_include_pad", false});
  OpCase oc{op, op_attrs(op, attrs)};
  oc.inputs = {random_tensor(x, gen)};
  oc.out_shape = x;
  oc.out_shape.end()[-1] = (x.end()[-1] + 2 * pad - k) / stride + 1;
  return oc;
}

TEST_CASE("conv1d, the 1-D pools and batch_norm1d on a GPU match the CPU", "[gpu][conv1d]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  check_gpu_against_cpu(conv1d_case(gen, {4, 8, 50}, 16, 3, 1, 1, 1, 1, true), gen);
  check_gpu_against_cpu(conv1d_case(gen, {2, 4, 33}, 6, 5, 2, 2, 2, 2, false), gen);  // dilated, grouped
  check_gpu_against_cpu(conv1d_case(gen, {3, 20}, 4, 3, 1, 1, 1, 1, true), gen);        // unbatched
  for (const char* op : {"max_pool1d", "avg_pool1d"}) {
    INFO(op);
    check_gpu_against_cpu(pool1d_case(gen, op, {2, 3, 16}, 2, 2, 0), gen);
    check_gpu_against_cpu(pool1d_case(gen, op, {2, 3, 17}, 3, 2, 1), gen);
  }
  for (bool training : {true, false})
    for (Shape x : {Shape{8, 5}, Shape{4, 3, 7}}) {
      OpCase c = bn_case(gen, x, true, true, 0.1, "batch_norm1d");
      c.training = training;
      check_batch_norm(c, gen);
    }
}

}  // namespace
}  // namespace tandem::test
