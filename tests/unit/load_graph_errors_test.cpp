// Broken model files: each gives a ModelError that says what is wrong, at which line and
// column, and for which layer. None crashes, hangs, or throws anything else.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "graph/load_graph.h"

using namespace tandem;

namespace {

struct BrokenCase {
  const char* what;
  std::string yaml;
  const char* message;  // a fragment of the message
  int line;
  int column;
};

const std::string kHead = "name: m\ninputs:\n  x: {shape: [batch, 10]}\nlayers:\n";  // layers start on line 5
const std::string kSeq =  // layers start on line 6
    "name: m\ninputs:\n  x: {shape: [seq, batch, 6]}\n  h: {shape: [1, batch, 4]}\nlayers:\n";
const std::string kImage = "name: m\ninputs:\n  x: {shape: [batch, 4, 9, 11]}\nlayers:\n";  // the same, for images
const std::string kLine = "name: m\ninputs:\n  x: {shape: [batch, 4, 11]}\nlayers:\n";  // and for sequences

std::vector<BrokenCase> broken_cases() {
  return {
      {"unknown op", kHead + "  - {name: fc, op: linaer, in_features: 10, out_features: 4}\n",
       "layer 'fc': unknown op 'linaer' (did you mean 'linear'?)", 5, 20},
      {"torch.nn's class name", kHead + "  - {name: act, op: ReLU}\n",
       "layer 'act': unknown op 'ReLU' (did you mean 'relu'?)", 5, 21},
      {"torch.nn's CamelCase name", kHead + "  - {name: norm, op: LayerNorm, normalized_shape: 10}\n",
       "layer 'norm': unknown op 'LayerNorm' (did you mean 'layer_norm'?)", 5, 22},
      {"an unknown op in a module no layer uses",
       "name: m\ninputs:\n  x: {shape: [batch, 10]}\nmodules:\n  unused:\n    layers:\n"
       "      - {name: fc, op: linear, in_features: 10, out_features: 10}\n      - {name: act, op: relux}\n"
       "layers:\n  - {name: fc, op: linear, in_features: 10, out_features: 4}\n",
       "layer 'modules.unused.act': unknown op 'relux' (did you mean 'relu'?)", 8, 25},
      {"a bad attribute in a block of a module no layer uses",
       "name: m\ninputs:\n  x: {shape: [batch, 10]}\nmodules:\n  unused:\n    layers:\n"
       "      - name: inner\n        layers:\n          - {name: fc, op: linear, in_features: 10, out_feature: 2}\n"
       "layers:\n  - {name: fc, op: linear, in_features: 10, out_features: 4}\n",
       "layer 'modules.unused.inner.fc': unknown attribute 'out_feature' for op 'linear'", 9, 53},
      {"an unknown module named by a module no layer uses",
       "name: m\ninputs:\n  x: {shape: [batch, 10]}\nmodules:\n  unused:\n    layers:\n"
       "      - {name: b, module: nothere}\n"
       "layers:\n  - {name: fc, op: linear, in_features: 10, out_features: 4}\n",
       "unknown module 'nothere'", 7, 27},
      {"unknown attribute", kHead + "  - {name: fc, op: linear, in_feature: 10, out_features: 4}\n",
       "unknown attribute 'in_feature' for op 'linear' (did you mean 'in_features'?)", 5, 28},
      {"missing attribute", kHead + "  - {name: fc, op: linear, in_features: 10}\n",
       "layer 'fc': op 'linear' needs attribute 'out_features'", 5, 5},
      {"attribute of the wrong type", kHead + "  - {name: fc, op: linear, in_features: ten, out_features: 4}\n",
       "attribute 'in_features' must be an integer; got 'ten'", 5, 41},
      {"float where an int belongs", kHead + "  - {name: fc, op: linear, in_features: 10.5, out_features: 4}\n",
       "must be an integer; got '10.5'", 5, 41},
      {"quoted number", kHead + "  - {name: fc, op: linear, in_features: \"10\", out_features: 4}\n",
       "must be an integer; got the string '10'", 5, 41},
      {"bool of the wrong type", kHead + "  - {name: fc, op: linear, in_features: 10, out_features: 4, bias: maybe}\n",
       "attribute 'bias' must be true or false", 5, 68},
      {"value out of range", kHead + "  - {name: fc, op: linear, in_features: 10, out_features: 0}\n",
       "attribute 'out_features' must be at least 1; got 0", 5, 59},
      {"choice misspelt", kHead + "  - {name: act, op: gelu, approximate: tanhh}\n",
       "must be one of none, tanh; got 'tanhh' (did you mean 'tanh'?)", 5, 40},
      {"permute dims naming a dimension twice", kImage + "  - {name: nhwc, op: permute, dims: [0, 2, 2, 1]}\n",
       "layer 'nhwc': dims [0, 2, 2, 1] is not a permutation: it names dimension 2 twice", 5, 5},
      {"permute dims of another rank", kImage + "  - {name: nhwc, op: permute, dims: [0, 2, 1]}\n",
       "layer 'nhwc': dims [0, 2, 1] has 3 entries but the input [batch, 4, 9, 11] has 4 dimensions", 5, 5},
      {"permute dims out of range", kImage + "  - {name: nhwc, op: permute, dims: [0, 2, 3, 4]}\n",
       "layer 'nhwc': dims entry 4 is out of range for a tensor of rank 4", 5, 5},
      {"permute without dims", kImage + "  - {name: nhwc, op: permute}\n",
       "layer 'nhwc': op 'permute' needs attribute 'dims'", 5, 5},
      {"pad of an odd length", kImage + "  - {name: padded, op: pad, pad: [1, 2, 3]}\n",
       "layer 'padded': pad [1, 2, 3] must have an even number of entries", 5, 5},
      {"pad of more dims than the input has", kImage + "  - {name: padded, op: pad, pad: [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]}\n",
       "layer 'padded': pad [1, 1, 1, 1, 1, 1, 1, 1, 1, 1] pads 5 dimensions but the input [batch, 4, 9, 11] has 4", 5, 5},
      {"pad cropping past the size", kImage + "  - {name: padded, op: pad, pad: [-6, -6]}\n",
       "layer 'padded': pad -6, -6 of dimension 3 (size 11) leaves a negative size", 5, 5},
      {"pad mode reflect", kImage + "  - {name: padded, op: pad, pad: [1, 1], mode: reflect}\n",
       "layer 'padded': attribute 'mode' must be one of constant; got 'reflect'", 5, 48},
      {"roll shifts and dims of different lengths", kImage + "  - {name: shifted, op: roll, shifts: [1, 2], dims: [1]}\n",
       "layer 'shifted': shifts [1, 2] and dims [1] must have as many entries", 5, 5},
      {"roll dims out of range", kImage + "  - {name: shifted, op: roll, shifts: 1, dims: 4}\n",
       "layer 'shifted': dims entry 4 is out of range for a tensor of rank 4", 5, 5},
      {"roll of several shifts without dims", kImage + "  - {name: shifted, op: roll, shifts: [1, 2]}\n",
       "layer 'shifted': shifts [1, 2] without dims must be one shift", 5, 5},
      {"interpolate with both size and scale_factor",
       kImage + "  - {name: up, op: interpolate, size: [18, 22], scale_factor: 2}\n",
       "layer 'up': give one of size and scale_factor", 5, 5},
      {"interpolate with neither", kImage + "  - {name: up, op: interpolate}\n",
       "layer 'up': give one of size and scale_factor", 5, 5},
      {"interpolate mode bicubic", kImage + "  - {name: up, op: interpolate, scale_factor: 2, mode: bicubic}\n",
       "layer 'up': attribute 'mode' must be one of nearest, bilinear; got 'bicubic'", 5, 56},
      {"interpolate align_corners with nearest",
       kImage + "  - {name: up, op: interpolate, scale_factor: 2, align_corners: true}\n",
       "layer 'up': align_corners applies to mode bilinear only", 5, 5},
      {"interpolate size of another rank", kImage + "  - {name: up, op: interpolate, size: [3, 4, 5]}\n",
       "layer 'up': size has 3 entries for the 2 spatial dims of [batch, 4, 9, 11]", 5, 5},
      {"interpolate bilinear of a 3-D input", kHead + "  - {name: up, op: reshape, shape: [batch, 2, 5]}\n"
       "  - {name: up2, op: interpolate, scale_factor: 2, mode: bilinear}\n",
       "layer 'up2': mode bilinear takes an input of rank 4 [N, C, H, W], got [batch, 2, 5]", 6, 5},
      {"interpolate by a scale_factor of 0", kImage + "  - {name: up, op: interpolate, scale_factor: 0}\n",
       "layer 'up': scale_factor must be positive", 5, 5},
      {"expand of a dimension that is not 1", kImage + "  - {name: big, op: expand, shape: [batch, 8, 9, 11]}\n",
       "layer 'big': cannot expand [batch, 4, 9, 11] to shape=[batch, 8, 9, 11]: dimension 1 is 4, and only a size-1 "
       "dimension grows", 5, 5},
      {"expand to fewer dimensions", kImage + "  - {name: big, op: expand, shape: [9, 11]}\n",
       "layer 'big': shape shape=[9, 11] has fewer dimensions than the input [batch, 4, 9, 11]", 5, 5},
      {"expand with -1 in a new dimension", kImage + "  - {name: big, op: expand, shape: [-1, batch, 4, 9, 11]}\n",
       "layer 'big': -1 at dimension 0, which the input lacks: give its size", 5, 5},
      {"expand to a symbol no input has", kImage + "  - {name: big, op: expand, shape: [rows, -1, -1, -1, -1]}\n",
       "layer 'big': symbol 'rows' does not appear in any input shape", 5, 5},
      {"buffer of another dtype", kImage + "  - {name: index, op: buffer, shape: [4], dtype: float16}\n",
       "layer 'index': attribute 'dtype' must be one of float32, int64; got 'float16'", 5, 50},
      {"scale without a factor", kImage + "  - {name: q, op: scale}\n", "layer 'q': op 'scale' needs attribute 'factor'",
       5, 5},
      {"clamp without bounds", kImage + "  - {name: c, op: clamp}\n",
       "layer 'c': clamp needs min, max or both: both are null", 5, 5},
      {"normalize with p 1", kImage + "  - {name: n, op: normalize, p: 1}\n", "layer 'n': attribute 'p' must be at least 2; got 1", 5, 33},
      {"normalize along a dim out of range", kImage + "  - {name: n, op: normalize, dim: 4}\n", "layer 'n': dim",
       5, 5},
      {"index_select by float indices", kImage + "  - {name: rows, op: index_select, dim: 0, inputs: [x, x]}\n",
       "layer 'rows': the second input (the indices) must be int64", 5, 5},
      {"index_select along a dim out of range",
       kImage + "  - {name: ids, op: buffer, shape: [3], dtype: int64}\n"
                "  - {name: rows, op: index_select, dim: 4, inputs: [x, ids]}\n",
       "layer 'rows': dim", 6, 5},
      {"parameter without shape", kImage + "  - {name: token, op: parameter}\n",
       "layer 'token': op 'parameter' needs attribute 'shape'", 5, 5},
      {"parameter of size 0", kImage + "  - {name: token, op: parameter, shape: [1, 0, 8]}\n",
       "layer 'token': attribute 'shape' entries must be at least 1", 5, 45},
      {"dropout p above 1", kHead + "  - {op: dropout, p: 1.5}\n", "attribute 'p' must be at most 1", 5, 22},
      {"huge number", kHead + "  - {op: linear, in_features: 10, out_features: 123456789012345678901234}\n",
       "too large for a 64-bit integer", 5, 49},
      {"shape mismatch", kHead + "  - {name: fc, op: linear, in_features: 12, out_features: 4}\n",
       "layer 'fc': the input's last dimension is 10 but in_features is 12", 5, 5},
      {"shape mismatch inside a block",
       kHead + "  - name: enc\n    layers:\n      - {name: a, op: linear, in_features: 10, out_features: 8}\n"
               "      - {name: b, op: linear, in_features: 9, out_features: 8}\n",
       "layer 'enc.b': the input's last dimension is 8 but in_features is 9", 8, 9},
      {"missing input", kHead + "  - {name: fc, op: linear, in_features: 10, out_features: 4, inputs: y}\n",
       "layer 'fc': unknown input 'y'", 5, 70},
      {"unknown precision on a layer",
       kHead + "  - {name: fc, op: linear, in_features: 10, out_features: 4, precision: half}\n",
       "layer 'fc': unknown precision 'half'; use fp32, bf16 or fp16", 5, 73},
      {"unknown precision on a block",
       kHead + "  - name: enc\n    precision: fp64\n    layers:\n      - {name: a, op: relu}\n",
       "layer 'enc': unknown precision 'fp64'; use fp32, bf16 or fp16", 6, 16},
      {"unknown precision on the model", "name: m\nprecision: [bf16]\ninputs:\n  x: {shape: [batch, 10]}\nlayers:\n  - {op: relu}\n",
       "precision must be a string", 2, 12},
      {"misspelt input", kHead + "  - {name: first, op: relu}\n  - {name: sum, op: add, inputs: [frist, x]}\n",
       "unknown input 'frist' (did you mean 'first'?)", 6, 35},
      {"later layer (a cycle)", kHead + "  - {name: a, op: add, inputs: [x, b]}\n  - {name: b, op: relu, inputs: a}\n",
       "layer 'a': unknown input 'b'", 5, 36},
      {"self reference", kHead + "  - {name: a, op: relu, inputs: a}\n", "layer 'a': unknown input 'a'", 5, 33},
      {"duplicate layer name", kHead + "  - {name: a, op: relu}\n  - {name: a, op: tanh}\n",
       "duplicate layer name 'a'", 6, 12},
      {"duplicate key", kHead + "  - {name: a, op: relu, op: tanh}\n", "duplicate key 'op'", 5, 25},
      {"bad device", kHead + "  - {name: a, op: relu, device: gpu0}\n",
       "device 'gpu0' is not a device; write cpu, cuda or cuda:N", 5, 33},
      {"bad device index", kHead + "  - {name: a, op: relu, device: \"cuda:-1\"}\n", "is not a device", 5, 33},
      {"data_parallel on the cpu",
       kHead + "  - name: b\n    data_parallel: {devices: [cpu]}\n    layers: [{op: relu}]\n",
       "'cpu' is not a cuda device", 6, 31},
      {"data_parallel devices twice",
       kHead + "  - name: b\n    data_parallel: {devices: [cuda:0, cuda:0]}\n    layers: [{op: relu}]\n",
       "device 'cuda:0' is listed twice", 6, 39},
      {"nested data_parallel",
       kHead + "  - name: b\n    data_parallel: {devices: [cuda:0, cuda:1]}\n    layers:\n"
               "      - name: inner\n        data_parallel: {devices: [cuda:0]}\n        layers: [{op: relu}]\n",
       "layer 'b.inner': data_parallel inside another data_parallel block is not supported", 9, 24},
      {"data_parallel dim out of range",
       kHead + "  - name: b\n    data_parallel: {devices: [cuda:0], dim: 2}\n    layers: [{op: relu}]\n",
       "data_parallel dim 2 does not exist in input 'x' of shape [batch, 10]", 6, 45},
      {"chunk sizes per device",
       kHead + "  - name: b\n    data_parallel: {devices: [cuda:0, cuda:1], chunk_sizes: [3]}\n    layers: [{op: relu}]\n",
       "chunk_sizes must list one positive size per device (2)", 6, 61},
      {"unknown top-level key", "name: m\ninputs:\n  x: {shape: [4]}\nlayer:\n  - {op: relu}\n",
       "unknown top-level key 'layer' (did you mean 'layers'?)", 4, 1},
      {"missing layers", "name: m\ninputs:\n  x: {shape: [4]}\n", "missing required key 'layers'", 1, 1},
      {"empty layers", "name: m\ninputs:\n  x: {shape: [4]}\nlayers: []\n", "layers must be a non-empty list", 4, 9},
      {"not a mapping", "- just\n- a list\n", "a model file must be a mapping", 1, 1},
      {"bad input shape", "name: m\ninputs:\n  x: {shape: [batch, -3]}\nlayers: [{op: relu}]\n",
       "dimensions must be positive; got -3", 3, 22},
      {"bad dtype", "name: m\ninputs:\n  x: {shape: [4], dtype: float16}\nlayers: [{op: relu}]\n",
       "unknown dtype 'float16'; use float32 or int64", 3, 26},
      {"embedding of floats", kHead + "  - {op: embedding, num_embeddings: 10, embedding_dim: 4}\n",
       "the input (indices) must be int64, got float32", 5, 5},
      {"padding_idx out of range",
       "name: m\ninputs:\n  i: {shape: [batch], dtype: int64}\nlayers:\n"
       "  - {op: embedding, num_embeddings: 10, embedding_dim: 4, padding_idx: 10}\n",
       "padding_idx 10 must be within num_embeddings", 5, 5},
      {"scale_grad_by_freq on a max bag (torch refuses it too)",
       "name: m\ninputs:\n  i: {shape: [batch, 3], dtype: int64}\nlayers:\n"
       "  - {op: embedding_bag, num_embeddings: 10, embedding_dim: 4, mode: max, scale_grad_by_freq: true}\n",
       "scale_grad_by_freq: true does not apply to mode max (as in torch); use mode sum or mean", 5, 5},
      {"add that does not broadcast", kHead + "  - {name: h, op: linear, in_features: 10, out_features: 3}\n"
                                              "  - {name: s, op: add, inputs: [x, h]}\n",
       "shapes [batch, 10] and [batch, 3] do not broadcast", 6, 5},
      {"too many inputs", kHead + "  - {name: a, op: relu}\n  - {name: r, op: relu, inputs: [x, a]}\n",
       "relu takes 1 input(s) but receives 2 (x, a)", 6, 33},
      {"softmax dim out of range", kHead + "  - {op: softmax, dim: 2}\n", "dim 2 is out of range for a tensor of rank 2", 5, 5},
      {"reshape that does not divide", kHead + "  - {op: reshape, shape: [batch, 3, -1]}\n", "does not divide", 5, 5},
      {"reshape with an unknown symbol", kHead + "  - {op: reshape, shape: [seq, -1]}\n",
       "symbol 'seq' in shape is not a size of the input", 5, 5},
      {"unknown module", kHead + "  - {name: enc, module: ffm}\n", "unknown module 'ffm'", 5, 25},
      {"module that uses itself",
       "name: m\ninputs:\n  x: {shape: [4]}\nmodules:\n  loop:\n    layers: [{name: again, module: loop}]\n"
       "layers:\n  - {name: top, module: loop}\n",
       "module 'loop' uses itself", 6, 36},
      {"repeat on an op", kHead + "  - {op: relu, repeat: 3}\n", "repeat applies to blocks", 5, 24},
      {"repeat too large", kHead + "  - {name: r, repeat: 100000000, layers: [{op: relu}]}\n", "repeat must be between 1 and",
       5, 23},
      {"block and op together", kHead + "  - {name: b, op: relu, layers: [{op: tanh}]}\n",
       "exactly one of op:, layers: and module:", 5, 5},
      {"attribute on a block", kHead + "  - {name: b, in_features: 3, layers: [{op: tanh}]}\n",
       "unknown key of a block 'in_features'", 5, 15},
      {"bad output", kHead + "  - {name: a, op: relu}\noutputs: [b]\n", "unknown input 'b'", 6, 11},
      {"invalid YAML", kHead + "  - {name: a, op: relu\n", "invalid YAML", 6, 1},
      {"tab indentation", "name: m\ninputs:\n\tx: {shape: [4]}\n", "invalid YAML", 3, 3},
      {"empty file", "", "the file is empty", 1, 1},
      {"conv2d groups that do not divide", kImage + "  - {name: c, op: conv2d, in_channels: 4, out_channels: 6, kernel_size: 3, groups: 3}\n",
       "layer 'c': in_channels 4 is not divisible by groups 3", 5, 5},
      {"conv2d channel mismatch", kImage + "  - {name: c, op: conv2d, in_channels: 3, out_channels: 6, kernel_size: 3}\n",
       "the input has 4 channels (dimension 1 of [batch, 4, 9, 11]) but in_channels is 3", 5, 5},
      {"conv2d kernel larger than the padded input",
       kImage + "  - {name: c, op: conv2d, in_channels: 4, out_channels: 6, kernel_size: [12, 3], padding: 1}\n",
       "the height of the input is 9 (11 padded) but the window spans 12", 5, 5},
      {"conv2d same padding with a stride",
       kImage + "  - {name: c, op: conv2d, in_channels: 4, out_channels: 6, kernel_size: 3, stride: 2, padding: same}\n",
       "padding 'same' needs stride 1", 5, 5},
      {"conv2d kernel_size of three numbers",
       kImage + "  - {name: c, op: conv2d, in_channels: 4, out_channels: 6, kernel_size: [3, 3, 3]}\n",
       "kernel_size must be an int or a list of two ints [h, w]", 5, 5},
      {"conv2d on a symbolic height",
       "name: m\ninputs:\n  x: {shape: [batch, 4, h, 11]}\nlayers:\n"
       "  - {name: c, op: conv2d, in_channels: 4, out_channels: 6, kernel_size: 3}\n",
       "the input's height is the symbol h", 5, 5},
      {"conv2d on a 2-D input", kHead + "  - {name: c, op: conv2d, in_channels: 4, out_channels: 6, kernel_size: 3}\n",
       "the input must be [N, C, H, W] (or unbatched [C, H, W])", 5, 5},
      {"pool padding above half the kernel", kImage + "  - {name: p, op: max_pool2d, kernel_size: 2, padding: 2}\n",
       "padding must be between 0 and half the kernel size", 5, 5},
      {"avg_pool2d window larger than the input", kImage + "  - {name: p, op: avg_pool2d, kernel_size: 10}\n",
       "the height of the input is 9 (9 padded) but the window spans 10", 5, 5},
      {"batch_norm2d channel mismatch", kImage + "  - {name: bn, op: batch_norm2d, num_features: 5}\n",
       "layer 'bn': the input has 4 channels (dimension 1 of [batch, 4, 9, 11]) but num_features is 5", 5, 5},
      {"conv1d kernel_size of two numbers", kLine + "  - {name: c, op: conv1d, in_channels: 4, out_channels: 6, kernel_size: [3, 3]}\n",
       "layer 'c': kernel_size must be an int or a list of one int, got [3, 3]", 5, 5},
      {"conv1d channel mismatch", kLine + "  - {name: c, op: conv1d, in_channels: 3, out_channels: 6, kernel_size: 3}\n",
       "the input has 4 channels (dimension 1 of [batch, 4, 11]) but in_channels is 3", 5, 5},
      {"conv1d kernel longer than the padded input",
       kLine + "  - {name: c, op: conv1d, in_channels: 4, out_channels: 6, kernel_size: 14, padding: 1}\n",
       "the input's length is 11 (13 padded) but the window spans 14", 5, 5},
      {"conv1d same padding with a stride",
       kLine + "  - {name: c, op: conv1d, in_channels: 4, out_channels: 6, kernel_size: 3, stride: 2, padding: same}\n",
       "padding 'same' needs stride 1", 5, 5},
      {"conv1d on an image", kImage + "  - {name: c, op: conv1d, in_channels: 4, out_channels: 6, kernel_size: 3}\n",
       "the input must be [N, C, L] (or unbatched [C, L]), got shape [batch, 4, 9, 11]", 5, 5},
      {"conv1d on a symbolic length",
       "name: m\ninputs:\n  x: {shape: [batch, 4, l]}\nlayers:\n"
       "  - {name: c, op: conv1d, in_channels: 4, out_channels: 6, kernel_size: 3}\n",
       "the input's length is the symbol l", 5, 5},
      {"max_pool1d padding above half the kernel", kLine + "  - {name: p, op: max_pool1d, kernel_size: 2, padding: 2}\n",
       "padding must be between 0 and half the kernel size", 5, 5},
      {"avg_pool1d window longer than the input", kLine + "  - {name: p, op: avg_pool1d, kernel_size: 12}\n",
       "the input's length is 11 (11 padded) but the window spans 12", 5, 5},
      {"batch_norm1d feature mismatch", kHead + "  - {name: bn, op: batch_norm1d, num_features: 5}\n",
       "layer 'bn': the input has 10 channels (dimension 1 of [batch, 10]) but num_features is 5", 5, 5},
      {"batch_norm1d on an image", kImage + "  - {name: bn, op: batch_norm1d, num_features: 4}\n",
       "the input must be [N, C] or [N, C, L], got shape [batch, 4, 9, 11]", 5, 5},
      {"gru input_size mismatch", kSeq + "  - {name: r, op: gru, input_size: 5, hidden_size: 4}\n",
       "layer 'r': the input's last dimension is 6 but input_size is 5 (input shape [seq, batch, 6])", 6, 5},
      {"gru on a 2-D input", kHead + "  - {name: r, op: gru, input_size: 10, hidden_size: 4}\n",
       "the input must be [T, N, C], got shape [batch, 10] (an unbatched sequence is not supported", 5, 5},
      {"gru h0 of the wrong shape",
       kSeq + "  - {name: r, op: gru, input_size: 6, hidden_size: 4, num_layers: 2, inputs: [x, h]}\n",
       "h0 (input 2) must be [num_layers * num_directions, N, hidden_size] = [2, batch, 4], got [1, batch, 4]", 6, 5},
      {"gru select c_n", kSeq + "  - {name: r, op: gru, input_size: 6, hidden_size: 4, select: c_n}\n",
       "attribute 'select' must be one of output, h_n; got 'c_n'", 6, 63},
      {"lstm with h0 but no c0", kSeq + "  - {name: r, op: lstm, input_size: 6, hidden_size: 4, inputs: [x, h]}\n",
       "lstm takes h0 and c0 together", 6, 5},
      {"lstm proj_size", kSeq + "  - {name: r, op: lstm, input_size: 6, hidden_size: 4, proj_size: 2}\n",
       "proj_size is not supported (0 only)", 6, 5},
      {"attention heads that do not divide", kSeq + "  - {name: a, op: multi_head_attention, embed_dim: 6, num_heads: 4}\n",
       "layer 'a': embed_dim 6 must be divisible by num_heads 4", 6, 5},
      {"attention kdim", kSeq + "  - {name: a, op: multi_head_attention, embed_dim: 6, num_heads: 2, kdim: 3}\n",
       "kdim other than embed_dim is not supported (got 3, embed_dim 6)", 6, 5},
      {"attention add_zero_attn",
       kSeq + "  - {name: a, op: multi_head_attention, embed_dim: 6, num_heads: 2, add_zero_attn: true}\n",
       "add_zero_attn is not supported (false only)", 6, 5},
      {"attention two inputs", kSeq + "  - {name: a, op: multi_head_attention, embed_dim: 6, num_heads: 2, inputs: [x, x]}\n",
       "takes query, key, value (or query alone, for self-attention) followed by 0 mask input(s)", 6, 5},
      {"attention float key_padding_mask",
       kSeq + "  - {name: a, op: multi_head_attention, embed_dim: 6, num_heads: 2, masks: key_padding_mask, inputs: [x, h]}\n",
       "key_padding_mask (nonzero = ignore that key, torch's bool True) must be int64, got float32", 6, 5},
      {"attention mask of the wrong shape",
       kSeq + "  - {name: a, op: multi_head_attention, embed_dim: 6, num_heads: 2, masks: attn_mask, inputs: [x, h]}\n",
       "attn_mask must be [L, S] = [seq, seq] or [N * num_heads, L, S] = [2*batch, seq, seq], got [1, batch, 4]", 6, 5},
      {"init of a parameter the layer lacks",
       kHead + "  - {name: fc, op: linear, in_features: 10, out_features: 4, init: {wieght: zeros}}\n",
       "layer 'fc': init: no parameter 'wieght' (did you mean 'weight'?); this layer has weight, bias", 5, 69},
      {"init with an unknown distribution",
       kHead + "  - {name: fc, op: linear, in_features: 10, out_features: 4, init: {weight: {gauss: [0, 1]}}}\n",
       "init of 'weight': unknown distribution 'gauss'; write zeros, ones, {uniform: [low, high]} or {normal: "
       "[mean, std]}", 5, 78},
      {"init uniform backwards",
       kHead + "  - {name: fc, op: linear, in_features: 10, out_features: 4, init: {weight: {uniform: [1, -1]}}}\n",
       "init of 'weight': uniform needs low <= high", 5, 87},
      {"init normal with a negative std",
       kHead + "  - {name: fc, op: linear, in_features: 10, out_features: 4, init: {bias: {normal: [0, -1]}}}\n",
       "init of 'bias': normal needs std >= 0", 5, 84},
      {"init of a layer without parameters", kHead + "  - {name: act, op: relu, init: {weight: zeros}}\n",
       "layer 'act': init: this layer has no parameters", 5, 33},
      {"parallel loss whose target has no batch where the block cuts it",
       kHead + "  - name: net\n    data_parallel: {devices: [cuda:0, cuda:1]}\n    layers:\n"
               "      - {name: fc, op: linear, in_features: 10, out_features: 6}\n"
               "      - {name: r, op: reshape, shape: [batch, 3, 2]}\n"
               "      - {name: flat, op: flatten, start_dim: 0, end_dim: 1}\n"
               "targets:\n  y: {shape: [3, batch], dtype: int64}\n"
               "loss: {op: cross_entropy, input: net.flat, target: y, parallel: true}\n",
       "target 'y' [3, batch], cut at dim 0 as block 'net' cuts 'x' [batch, 10] into chunks of batch; but the "
       "target has no batch there", 13, 65},
      {"init on a block",
       kHead + "  - name: enc\n    init: {weight: zeros}\n    layers:\n      - {op: linear, in_features: 10, out_features: 8}\n",
       "layer 'enc': init applies to a leaf layer's parameters (an op), not to a block", 6, 11},
  };
}

}  // namespace

TEST_CASE("broken model files name what is wrong and where", "[graph][errors]") {
  for (const BrokenCase& c : broken_cases()) {
    DYNAMIC_SECTION(c.what) {
      INFO(c.yaml);
      try {
        load_graph_from_string(c.yaml, "bad.yaml");
        FAIL("no error for: " << c.what);
      } catch (const ModelError& e) {
        std::string message = e.what();
        INFO(message);
        CHECK_THAT(message, Catch::Contains(c.message));
        CHECK(e.location().line == c.line);
        CHECK(e.location().column == c.column);
        CHECK_THAT(message, Catch::StartsWith("bad.yaml:" + std::to_string(c.line) + ":" + std::to_string(c.column) + ": "));
      }
    }
  }
}

TEST_CASE("a missing file or directory or a binary file is refused", "[graph][errors]") {
  REQUIRE_THROWS_WITH(load_graph("/nonexistent/model.yaml"), Catch::Contains("No such file or directory"));
  REQUIRE_THROWS_WITH(load_graph("/tmp"), Catch::Contains("/tmp: cannot open: it is a directory, not a regular file"));
  REQUIRE_THROWS_WITH(load_graph_from_string(std::string("name: m\0\x01\x02", 10), "bin.yaml"),
                      Catch::Contains("not a YAML text file"));
  REQUIRE_THROWS_AS(load_graph_from_string(std::string(100000, '[') + std::string(100000, ']'), "deep.yaml"), ModelError);
  REQUIRE_THROWS_WITH(load_graph_from_string(std::string(17 << 20, ' '), "big.yaml"), Catch::Contains("larger than 16 MiB"));
}

TEST_CASE("modules and repeats cannot blow up the graph", "[graph][errors]") {
  // each level multiplies by 1000: a billion layers if expanded
  std::string yaml =
      "name: m\ninputs:\n  x: {shape: [4]}\nmodules:\n  a: {layers: [{op: relu}]}\n"
      "  b: {layers: [{module: a, repeat: 1000}]}\n  c: {layers: [{module: b, repeat: 1000}]}\n"
      "layers:\n  - {module: c, repeat: 1000}\n";
  REQUIRE_THROWS_WITH(load_graph_from_string(yaml, "bomb.yaml"), Catch::Contains("expands to more than"));
}

TEST_CASE("mutated and truncated configs never crash the loader", "[graph][fuzz]") {
  uint64_t seed = std::random_device{}();
  INFO("fuzz seed " << seed);
  std::mt19937_64 rng(seed);
  int loaded = 0, refused = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(TANDEM_SOURCE_DIR) + "/configs")) {
    std::ifstream in(entry.path());
    std::stringstream buffer;
    buffer << in.rdbuf();
    const std::string text = buffer.str();
    auto attempt = [&](const std::string& mutated) {
      try {
        load_graph_from_string(mutated, "fuzz.yaml");
        ++loaded;
      } catch (const ModelError& e) {
        CHECK(std::string(e.what()).starts_with("fuzz.yaml"));
        ++refused;
      }
    };
    for (size_t cut = 0; cut < text.size(); cut += 3) attempt(text.substr(0, cut));
    const std::string alphabet = "[]{}:,-&*!|>'\"#\n\t 0123456789abcxyz.~%@";
    for (int i = 0; i < 300; ++i) {
      std::string mutated = text;
      int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits && !mutated.empty(); ++e) {
        size_t pos = rng() % mutated.size();
        switch (rng() % 3) {
          case 0: mutated[pos] = alphabet[rng() % alphabet.size()]; break;
          case 1: mutated.erase(pos, 1 + rng() % 8); break;
          default: mutated.insert(pos, 1, alphabet[rng() % alphabet.size()]);
        }
      }
      attempt(mutated);
    }
  }
  CHECK(refused > 100);
  CHECK(loaded > 0);
}
