"""What each torch operation becomes in a Tandem model, for from_torch: torch.nn modules
(called as leaves of the fx graph) and torch functions and tensor methods.

A converter returns an Op (a Tandem layer: op, attributes, inputs), a Composite (layers
under the module's path: nn.TransformerEncoderLayer and nn.TransformerEncoder, which fx
cannot trace through), an Alias (the node is its input: x.contiguous(), x.to(device)),
Pieces (the tuple chunk and split give: a narrow per element read) or SCALAR (a size
computed from a shape, which only reshapes read). Anything else raises
Unsupported with what Tandem lacks; from_torch adds where it was called."""
import inspect
import math
import operator

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["Unsupported", "Op", "Composite", "Sub", "Alias", "Pieces", "SCALAR", "LEAF_MODULES", "convert_module",
           "convert_call", "supported_modules", "layer_norm_owner", "owns_weights"]


class Unsupported(Exception):
    """A torch operation Tandem cannot express; the message says what and, where it can,
    what to write instead."""


class Op:
    """One Tandem layer. `inputs`: fx nodes (or Sub names inside a Composite). `outputs`:
    for a module returning a tuple (GRU, LSTM, MultiheadAttention), the Tandem `select`
    value of each tuple position (nested for LSTM's (h_n, c_n)); None otherwise. `value`:
    a `buffer` layer's contents, which the converter computed (swin's attention mask) and
    from_torch loads with the module's state_dict."""

    def __init__(self, op, attrs=None, inputs=(), outputs=None, value=None):
        self.op, self.attrs, self.inputs, self.outputs = op, dict(attrs or {}), list(inputs), outputs
        self.value = value


class Sub:
    """Inside a Composite: the output of its layer `name`."""

    def __init__(self, name):
        self.name = name


class Composite:
    """Layers under the module's path, in order: [(relative path, Op)]; the last is the
    module's output. `scoped`: the layers of a function call sit in the module that called
    it, beside its other layers (swin's shifted_window_attention inside its attn module),
    not in a block of the call's own. `owned`: {relative name: module path} for the layers
    that are a submodule whose weights the function reads (attn.qkv, attn.proj): they take
    that module's path, so that their parameters keep their state_dict names."""

    def __init__(self, layers, scoped=False, owned=None):
        self.layers, self.scoped, self.owned = layers, scoped, dict(owned or {})


class Alias:
    """The node's value is `source`'s; `device` (a string) when the node moved it there."""

    def __init__(self, source, device=None):
        self.source, self.device = source, device


class Pieces:
    """The tuple of slices torch.chunk / split / tensor_split give. A Tandem layer has one
    output, so each element read (pieces[i]) becomes a narrow of its own, made when it is
    read: `narrows[i]` is that Op, or None for an empty piece (which no narrow gives)."""

    def __init__(self, narrows):
        self.narrows = narrows


SCALAR = object()


def _is_node(x):
    return isinstance(x, torch.fx.Node)


def _pair(v):
    """An int, or [h, w] for a pair that differs (Tandem's kernel_size, stride, ...)."""
    if isinstance(v, (tuple, list)):
        return v[0] if len(v) == 2 and v[0] == v[1] else list(v)
    return v


def _single(v):
    """An int for torch's one-element tuple (Tandem's kernel_size, stride, ... of a 1-D op
    take an int or [k])."""
    if isinstance(v, (tuple, list)) and len(v) == 1:
        return v[0]
    return list(v) if isinstance(v, (tuple, list)) else v


def _bind(function, node):
    """node's arguments by parameter name of `function`'s signature, defaults filled."""
    bound = inspect.signature(function).bind(None, *node.args, **node.kwargs)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    arguments.pop(next(iter(arguments)))  # self
    return arguments


def _tensor(node, value, what):
    if not _is_node(value):
        raise Unsupported("%s is %r, not a tensor: Tandem's layers take tensors only" % (what, value))
    return value


# ----------------------------------------------------------------------------- modules

def _linear(m, node, ctx):
    a = _bind(nn.Linear.forward, node)
    return Op("linear", {"in_features": m.in_features, "out_features": m.out_features, "bias": m.bias is not None},
              [_tensor(node, a["input"], "the input")])


def _embedding(m, node, ctx):
    a = _bind(nn.Embedding.forward, node)
    if m.max_norm is not None:
        raise Unsupported("max_norm=%s: Tandem's embedding renormalises no rows (max_norm: null only)" % m.max_norm)
    return Op("embedding", {"num_embeddings": m.num_embeddings, "embedding_dim": m.embedding_dim,
                            "padding_idx": m.padding_idx, "scale_grad_by_freq": m.scale_grad_by_freq,
                            "sparse": m.sparse}, [_tensor(node, a["input"], "the indices")])


def _embedding_bag(m, node, ctx):
    a = _bind(nn.EmbeddingBag.forward, node)
    if m.max_norm is not None:
        raise Unsupported("max_norm=%s: Tandem's embedding_bag renormalises no rows (max_norm: null only)" % m.max_norm)
    if a["per_sample_weights"] is not None:
        raise Unsupported("per_sample_weights: Tandem's embedding_bag weighs every index alike")
    inputs = [_tensor(node, a["input"], "the indices")]
    if a["offsets"] is not None:
        inputs.append(_tensor(node, a["offsets"], "the offsets"))
    return Op("embedding_bag", {"num_embeddings": m.num_embeddings, "embedding_dim": m.embedding_dim,
                                "mode": m.mode, "padding_idx": m.padding_idx,
                                "include_last_offset": m.include_last_offset,
                                "scale_grad_by_freq": m.scale_grad_by_freq, "sparse": m.sparse}, inputs)


def _conv2d(m, node, ctx):
    a = _bind(nn.Conv2d.forward, node)
    if m.padding_mode != "zeros":
        raise Unsupported("padding_mode='%s': Tandem's conv2d pads with zeros only" % m.padding_mode)
    return Op("conv2d", {"in_channels": m.in_channels, "out_channels": m.out_channels,
                         "kernel_size": _pair(m.kernel_size), "stride": _pair(m.stride),
                         "padding": m.padding if isinstance(m.padding, str) else _pair(m.padding),
                         "dilation": _pair(m.dilation), "groups": m.groups, "bias": m.bias is not None},
              [_tensor(node, a["input"], "the input")])


def _conv1d(m, node, ctx):
    a = _bind(nn.Conv1d.forward, node)
    if m.padding_mode != "zeros":
        raise Unsupported("padding_mode='%s': Tandem's conv1d pads with zeros only" % m.padding_mode)
    return Op("conv1d", {"in_channels": m.in_channels, "out_channels": m.out_channels,
                         "kernel_size": _single(m.kernel_size), "stride": _single(m.stride),
                         "padding": m.padding if isinstance(m.padding, str) else _single(m.padding),
                         "dilation": _single(m.dilation), "groups": m.groups, "bias": m.bias is not None},
              [_tensor(node, a["input"], "the input")])


def _max_pool2d(m, node, ctx):
    a = _bind(nn.MaxPool2d.forward, node)
    if m.return_indices:
        raise Unsupported("return_indices=True: Tandem's max_pool2d returns the values only")
    return Op("max_pool2d", {"kernel_size": _pair(m.kernel_size), "stride": _pair(m.stride),
                             "padding": _pair(m.padding), "dilation": _pair(m.dilation), "ceil_mode": m.ceil_mode},
              [_tensor(node, a["input"], "the input")])


def _avg_pool2d(m, node, ctx):
    a = _bind(nn.AvgPool2d.forward, node)
    if m.divisor_override is not None:
        raise Unsupported("divisor_override=%s: Tandem's avg_pool2d divides by the window" % m.divisor_override)
    return Op("avg_pool2d", {"kernel_size": _pair(m.kernel_size), "stride": _pair(m.stride),
                             "padding": _pair(m.padding), "ceil_mode": m.ceil_mode,
                             "count_include_pad": m.count_include_pad}, [_tensor(node, a["input"], "the input")])


def _max_pool1d(m, node, ctx):
    a = _bind(nn.MaxPool1d.forward, node)
    if m.return_indices:
        raise Unsupported("return_indices=True: Tandem's max_pool1d returns the values only")
    return Op("max_pool1d", {"kernel_size": _single(m.kernel_size), "stride": _single(m.stride),
                             "padding": _single(m.padding), "dilation": _single(m.dilation),
                             "ceil_mode": m.ceil_mode}, [_tensor(node, a["input"], "the input")])


def _avg_pool1d(m, node, ctx):
    a = _bind(nn.AvgPool1d.forward, node)
    return Op("avg_pool1d", {"kernel_size": _single(m.kernel_size), "stride": _single(m.stride),
                             "padding": _single(m.padding), "ceil_mode": m.ceil_mode,
                             "count_include_pad": m.count_include_pad}, [_tensor(node, a["input"], "the input")])


def _fixed_window_pool(op, x, output_size, ctx):
    """An adaptive pool of `x` to `output_size` where the input divides evenly into the
    output (a global pool, (1, 1), most often): the fixed window that computes the same.
    A 1-D op's window is along the last dimension only (_fixed_window_pool1d)."""
    if op.endswith("1d"):
        return _fixed_window_pool1d(op, x, output_size, ctx)
    h, w = ctx.value(x).shape[-2:]
    size = output_size if isinstance(output_size, (tuple, list)) else (output_size, output_size)
    out = [h if s is None else s for s in size[:1]] + [w if s is None else s for s in size[1:2]]
    if h % out[0] or w % out[1]:
        raise Unsupported("output size %s of a %dx%d input: Tandem pools with fixed windows, which fit only an "
                          "input that divides into the output" % (list(size), h, w))
    kernel = _pair([h // out[0], w // out[1]])
    return Op(op, {"kernel_size": kernel, "stride": kernel}, [x])


def _fixed_window_pool1d(op, x, output_size, ctx):
    """_fixed_window_pool along the last dimension of an [N, C, L] (or [C, L]) input: an
    adaptive pool to a length that divides L (1, a global pool, most often)."""
    length = ctx.value(x).shape[-1]
    size = output_size[0] if isinstance(output_size, (tuple, list)) else output_size
    out = length if size is None else size
    if length % out:
        raise Unsupported("output size %d of a length-%d input: Tandem pools with fixed windows, which fit only an "
                          "input that divides into the output" % (out, length))
    return Op(op, {"kernel_size": length // out, "stride": length // out}, [x])


def _adaptive_pool(op):
    """nn.AdaptiveAvgPool1d/2d / AdaptiveMaxPool1d/2d: a fixed window (_fixed_window_pool)."""
    def convert(m, node, ctx):
        if getattr(m, "return_indices", False):
            raise Unsupported("return_indices=True: Tandem's %s returns the values only" % op)
        return _fixed_window_pool(op, _tensor(node, node.args[0], "the input"), m.output_size, ctx)
    return convert


def _batch_norm2d(m, node, ctx):
    a = _bind(nn.BatchNorm2d.forward, node)
    return Op("batch_norm2d", {"num_features": m.num_features, "eps": m.eps, "momentum": m.momentum,
                               "affine": m.affine, "track_running_stats": m.track_running_stats},
              [_tensor(node, a["input"], "the input")])


def _batch_norm1d(m, node, ctx):
    """nn.BatchNorm1d, of [N, C] (after a linear) or [N, C, L]."""
    a = _bind(nn.BatchNorm1d.forward, node)
    return Op("batch_norm1d", {"num_features": m.num_features, "eps": m.eps, "momentum": m.momentum,
                               "affine": m.affine, "track_running_stats": m.track_running_stats},
              [_tensor(node, a["input"], "the input")])


def _layer_norm(m, node, ctx):
    a = _bind(nn.LayerNorm.forward, node)
    shape = list(m.normalized_shape)
    return Op("layer_norm", {"normalized_shape": shape[0] if len(shape) == 1 else shape, "eps": m.eps,
                             "elementwise_affine": m.elementwise_affine}, [_tensor(node, a["input"], "the input")])


def _rnn(m, node, ctx):
    op = "gru" if isinstance(m, nn.GRU) else "lstm"
    a = _bind(type(m).forward, node)
    if op == "lstm" and m.proj_size:
        raise Unsupported("proj_size=%d: Tandem's lstm has no projection (proj_size: 0 only)" % m.proj_size)
    inputs = [_tensor(node, a["input"], "the sequence")]
    hx = a["hx"]
    if hx is not None:
        states = list(hx) if op == "lstm" else [hx]
        inputs += [_tensor(node, s, "the initial state") for s in states]
    attrs = {"input_size": m.input_size, "hidden_size": m.hidden_size, "num_layers": m.num_layers, "bias": m.bias,
             "batch_first": m.batch_first, "dropout": float(m.dropout), "bidirectional": m.bidirectional}
    outputs = ("output", "h_n") if op == "gru" else ("output", ("h_n", "c_n"))
    return Op(op, attrs, inputs, outputs)


def _attention_op(m, query, key, value, key_padding_mask, attn_mask, causal=False):
    """multi_head_attention for nn.MultiheadAttention `m` called on these nodes."""
    if m.bias_k is not None or m.add_zero_attn:
        raise Unsupported("add_bias_kv / add_zero_attn: Tandem's multi_head_attention has neither")
    if not m._qkv_same_embed_dim:
        raise Unsupported("kdim/vdim other than embed_dim: Tandem's multi_head_attention projects with one "
                          "in_proj_weight")
    inputs = [query] if query is key is value else [query, key, value]
    masks = []
    if key_padding_mask is not None:
        inputs.append(key_padding_mask)
        masks.append("key_padding_mask")
    if attn_mask is not None:
        inputs.append(attn_mask)
        masks.append("attn_mask")
    attrs = {"embed_dim": m.embed_dim, "num_heads": m.num_heads, "dropout": float(m.dropout),
             "bias": m.in_proj_bias is not None, "batch_first": m.batch_first, "causal": causal,
             "masks": "both" if len(masks) == 2 else (masks[0] if masks else "none")}
    for x in inputs:
        if not (_is_node(x) or isinstance(x, Sub)):
            raise Unsupported("an argument %r that is not a tensor" % (x,))
    return Op("multi_head_attention", attrs, inputs)


def _multihead_attention(m, node, ctx):
    a = _bind(nn.MultiheadAttention.forward, node)
    op = _attention_op(m, a["query"], a["key"], a["value"], a["key_padding_mask"], a["attn_mask"])
    op.outputs = ("output", "attention weights")
    return op


def _activation_op(activation):
    if activation is F.relu or isinstance(activation, nn.ReLU):
        return Op("relu")
    if activation is F.gelu:
        return Op("gelu")
    if isinstance(activation, nn.GELU):
        return Op("gelu", {"approximate": activation.approximate})
    raise Unsupported("activation %r: Tandem's encoder layers take relu or gelu" % (activation,))


def _encoder_layer_parts(m, src, src_mask, key_padding_mask, prefix=""):
    """The layers of nn.TransformerEncoderLayer `m`, torch's forward written out (its
    submodules' names where they hold parameters), under `prefix`."""
    p = float(m.dropout.p)
    norm = lambda mod: {"normalized_shape": mod.normalized_shape[0], "eps": mod.eps}  # noqa: E731
    layers = []
    add = lambda name, op: layers.append((prefix + name, op))  # noqa: E731
    sub = lambda name: Sub(prefix + name)  # noqa: E731
    attend = lambda x: _attention_op(m.self_attn, x, x, x, key_padding_mask, src_mask)  # noqa: E731

    if m.norm_first:
        add("norm1", Op("layer_norm", norm(m.norm1), [src]))
        add("self_attn", attend(sub("norm1")))
        add("dropout1", Op("dropout", {"p": p}, [sub("self_attn")]))
        add("res1", Op("add", {}, [src, sub("dropout1")]))
        add("norm2", Op("layer_norm", norm(m.norm2), [sub("res1")]))
        add("linear1", Op("linear", {"in_features": m.linear1.in_features, "out_features": m.linear1.out_features},
                          [sub("norm2")]))
    else:
        add("self_attn", attend(src))
        add("dropout1", Op("dropout", {"p": p}, [sub("self_attn")]))
        add("res1", Op("add", {}, [src, sub("dropout1")]))
        add("norm1", Op("layer_norm", norm(m.norm1), [sub("res1")]))
        add("linear1", Op("linear", {"in_features": m.linear1.in_features, "out_features": m.linear1.out_features},
                          [sub("norm1")]))
    activation = _activation_op(m.activation)
    activation.inputs = [sub("linear1")]
    add("activation", activation)
    add("dropout", Op("dropout", {"p": p}, [sub("activation")]))
    add("linear2", Op("linear", {"in_features": m.linear2.in_features, "out_features": m.linear2.out_features},
                      [sub("dropout")]))
    add("dropout2", Op("dropout", {"p": p}, [sub("linear2")]))
    if m.norm_first:
        add("res2", Op("add", {}, [sub("res1"), sub("dropout2")]))
    else:
        add("res2", Op("add", {}, [sub("norm1"), sub("dropout2")]))
        add("norm2", Op("layer_norm", norm(m.norm2), [sub("res2")]))
    return layers


def _transformer_encoder_layer(m, node, ctx):
    a = _bind(nn.TransformerEncoderLayer.forward, node)
    return Composite(_encoder_layer_parts(m, a["src"], a["src_mask"], a["src_key_padding_mask"]))


def _transformer_encoder(m, node, ctx):
    a = _bind(nn.TransformerEncoder.forward, node)
    layers, x = [], a["src"]
    for i, layer in enumerate(m.layers):
        if not isinstance(layer, nn.TransformerEncoderLayer) or type(layer).forward is not \
                nn.TransformerEncoderLayer.forward:
            raise Unsupported("layers.%d is a %s, not a torch.nn.TransformerEncoderLayer" % (i, type(layer).__name__))
        parts = _encoder_layer_parts(layer, x, a["mask"], a["src_key_padding_mask"], "layers.%d." % i)
        layers += parts
        x = Sub(parts[-1][0])
    if m.norm is not None:
        if not isinstance(m.norm, nn.LayerNorm):
            raise Unsupported("norm is a %s: Tandem writes a LayerNorm only" % type(m.norm).__name__)
        layers.append(("norm", Op("layer_norm", {"normalized_shape": list(m.norm.normalized_shape)[0],
                                                 "eps": m.norm.eps}, [x])))
    return Composite(layers)


def _unary(op, **fixed):
    def convert(m, node, ctx):
        if len(node.args) != 1 or node.kwargs:
            raise Unsupported("called with %d arguments" % (len(node.args) + len(node.kwargs)))
        return Op(op, {k: getattr(m, v) for k, v in fixed.items()}, [_tensor(node, node.args[0], "the input")])
    return convert


def _softmax_module(op):
    def convert(m, node, ctx):
        if m.dim is None:
            raise Unsupported("dim=None (an implicit dimension): give %s a dim" % type(m).__name__)
        return Op(op, {"dim": m.dim}, [_tensor(node, node.args[0], "the input")])
    return convert


def _constant_pad(m, node, ctx):
    """nn.ZeroPad2d and nn.ConstantPad1d/2d/3d: pad with their padding and value."""
    return Op("pad", {"pad": list(m.padding), "value": float(m.value)}, [_tensor(node, node.args[0], "the input")])


def _upsample(m, node, ctx):
    """nn.Upsample (and UpsamplingNearest2d / UpsamplingBilinear2d, which set its mode and
    align_corners): interpolate with the module's settings."""
    x = _tensor(node, node.args[0], "the input")
    return _interpolate_op(node, ctx, x, m.size, m.scale_factor, m.mode, m.align_corners,
                           getattr(m, "recompute_scale_factor", None), False)


def _identity(m, node, ctx):
    return Alias(_tensor(node, node.args[0], "the input"))


def _dropout_module(m, node, ctx):
    """nn.Dropout; at p = 0 (vit's default) the identity, as torch's, and no layer: vit's
    encoder reads its own `dropout` from inside blocks that have one of their own, a name
    that a layer would shadow."""
    if m.p == 0:
        return _identity(m, node, ctx)
    return _unary("dropout", p="p")(m, node, ctx)


# torch.nn types from_torch converts, and how; fx leaves them unexpanded (fx_tracing.py).
LEAF_MODULES = {
    nn.Linear: _linear,
    nn.Embedding: _embedding,
    nn.EmbeddingBag: _embedding_bag,
    nn.Conv1d: _conv1d,
    nn.Conv2d: _conv2d,
    nn.MaxPool1d: _max_pool1d,
    nn.MaxPool2d: _max_pool2d,
    nn.AvgPool1d: _avg_pool1d,
    nn.AvgPool2d: _avg_pool2d,
    nn.AdaptiveAvgPool1d: _adaptive_pool("avg_pool1d"),
    nn.AdaptiveAvgPool2d: _adaptive_pool("avg_pool2d"),
    nn.AdaptiveMaxPool1d: _adaptive_pool("max_pool1d"),
    nn.AdaptiveMaxPool2d: _adaptive_pool("max_pool2d"),
    nn.BatchNorm1d: _batch_norm1d,
    nn.BatchNorm2d: _batch_norm2d,
    nn.LayerNorm: _layer_norm,
    nn.GRU: _rnn,
    nn.LSTM: _rnn,
    nn.MultiheadAttention: _multihead_attention,
    nn.TransformerEncoderLayer: _transformer_encoder_layer,
    nn.TransformerEncoder: _transformer_encoder,
    nn.ReLU: _unary("relu"),
    nn.GELU: _unary("gelu", approximate="approximate"),
    nn.Tanh: _unary("tanh"),
    nn.Sigmoid: _unary("sigmoid"),
    nn.ReLU6: _unary("relu6"),
    nn.Hardswish: _unary("hardswish"),
    nn.Hardsigmoid: _unary("hardsigmoid"),
    nn.SiLU: _unary("silu"),
    nn.Mish: _unary("mish"),
    nn.Softmax: _softmax_module("softmax"),
    nn.LogSoftmax: _softmax_module("log_softmax"),
    nn.Dropout: _dropout_module,
    nn.Flatten: _unary("flatten", start_dim="start_dim", end_dim="end_dim"),
    nn.Identity: _identity,
    nn.ZeroPad2d: _constant_pad,
    nn.ConstantPad1d: _constant_pad,
    nn.ConstantPad2d: _constant_pad,
    nn.ConstantPad3d: _constant_pad,
    nn.Upsample: _upsample,
}


def convert_module(module, node, ctx):
    for t, converter in LEAF_MODULES.items():
        if type(module) is t or (isinstance(module, t) and type(module).forward is t.forward):
            return converter(module, node, ctx)
    name = type(module).__module__ + "." + type(module).__qualname__
    if name.startswith("torch.nn.modules."):
        name = "torch.nn." + type(module).__qualname__
    raise Unsupported("%s: Tandem has no such op" % name)


def supported_modules():
    """'AvgPool2d, BatchNorm2d, ...': the torch.nn modules from_torch converts."""
    return ", ".join(sorted(t.__name__ for t in LEAF_MODULES))


# ----------------------------------------------------------------------------- functions and methods

def _args(node, names, defaults=None):
    """node's arguments by position then keyword, named `names`."""
    out = dict(defaults or {})
    for name, value in zip(names, node.args):
        out[name] = value
    for name, value in node.kwargs.items():
        if name not in names:
            raise Unsupported("argument %s=%r" % (name, value))
        out[name] = value
    return out


def _binary(op, negate=False):
    def convert(node, ctx):
        a = _args(node, ["input", "other", "alpha"], {"alpha": 1})
        x, y = a["input"], a["other"]
        if op == "mul":  # a tensor times a number (attention's q * head_dim ** -0.5): scale
            tensors = [v for v in (x, y) if _is_node(v) and ctx.is_tensor(v)]
            numbers = [v for v in (x, y) if v not in tensors]
            if len(tensors) == 1 and len(numbers) == 1:
                factor = _constant(ctx, numbers[0], "the factor")
                if isinstance(factor, (int, float)) and not isinstance(factor, bool):
                    return Op("scale", {"factor": float(factor)}, tensors)
        alpha = -a["alpha"] if negate else a["alpha"]
        if op == "add":  # a tensor plus or minus a number (x + 1, 1 - x): scale with a shift
            tensor_x, tensor_y = (_is_node(v) and ctx.is_tensor(v) for v in (x, y))
            if tensor_x != tensor_y:
                number = _constant(ctx, y if tensor_x else x, "the number")
                if isinstance(number, (int, float)) and not isinstance(number, bool):
                    if tensor_x:  # x + alpha * number
                        return Op("scale", {"factor": 1.0, "shift": float(alpha * number)}, [x])
                    return Op("scale", {"factor": float(alpha), "shift": float(number)}, [y])  # number + alpha * y
        for operand in (x, y):
            if not (_is_node(operand) and ctx.is_tensor(operand)):
                shown = ctx.value(operand) if _is_node(operand) else operand
                raise Unsupported("%s with the number %r: Tandem's %s takes two tensors" % (op, shown, op))
        if op == "mul":
            return Op("mul", {}, [x, y])
        return Op("add", {"alpha": float(alpha)}, [x, y])
    return convert


def _negative(node, ctx):
    """-x: scale by -1."""
    return Op("scale", {"factor": -1.0}, [_tensor(node, node.args[0], "the input")])


def _divide(node, ctx):
    """x / number (torch.div without a rounding mode): scale by its reciprocal. A tensor
    divisor is refused: Tandem has no elementwise division."""
    a = _args(node, ["input", "other", "rounding_mode"], {"rounding_mode": None})
    x, y = a["input"], a["other"]
    if a["rounding_mode"] is not None:
        raise Unsupported("division with rounding_mode=%r: Tandem's division is true division" % a["rounding_mode"])
    if not (_is_node(x) and ctx.is_tensor(x)) or (_is_node(y) and ctx.is_tensor(y)):
        raise Unsupported("division by a tensor: Tandem divides a tensor by a number only")
    number = _constant(ctx, y, "the divisor")
    if isinstance(number, bool) or not isinstance(number, (int, float)) or number == 0:
        raise Unsupported("division by %r: Tandem divides a tensor by a nonzero number" % (number,))
    return Op("scale", {"factor": 1.0 / float(number)}, [x])


def _cat(node, ctx):
    a = _args(node, ["tensors", "dim"], {"dim": 0})
    tensors = list(a["tensors"])
    for t in tensors:
        _tensor(node, t, "an input of cat")
    if len(tensors) == 1:
        return Alias(tensors[0])  # densenet's first layer joins the one tensor it has
    return Op("cat", {"dim": a["dim"]}, tensors)


def _flatten(node, ctx):
    a = _args(node, ["input", "start_dim", "end_dim"], {"start_dim": 0, "end_dim": -1})
    return Op("flatten", {"start_dim": a["start_dim"], "end_dim": a["end_dim"]}, [_tensor(node, a["input"], "the input")])


def _reshape(node, ctx):
    return Op("reshape", {"shape": ctx.reshape_target(node)}, [_tensor(node, node.args[0], "the input")])


def _matmul(node, ctx):
    a = _args(node, ["input", "other"])
    return Op("matmul", {}, [_tensor(node, a["input"], "the left operand"), _tensor(node, a["other"], "the right one")])


def _narrow(node, ctx):
    a = _args(node, ["input", "dim", "start", "length"])
    for k in ("dim", "start", "length"):
        if not isinstance(a[k], int):
            raise Unsupported("narrow's %s is computed (%r): Tandem's narrow takes numbers" % (k, a[k]))
    return Op("narrow", {"dim": a["dim"], "start": a["start"], "length": a["length"]},
              [_tensor(node, a["input"], "the input")])


def _permutation(node, ctx, x, dims):
    """Op permute of `x` by `dims` (torch.permute's), or the Alias of `x` for the identity."""
    rank = ctx.value(x).dim()
    if not all(isinstance(d, int) for d in dims):
        raise Unsupported("permute's dims are computed (%r): Tandem's permute takes numbers" % (dims,))
    if sorted(d % rank if rank else d for d in dims) != list(range(rank)) or len(dims) != rank:
        raise Unsupported("dims %s is not a permutation of the %d dimensions" % (list(dims), rank))
    normalized = [d % rank for d in dims]
    if normalized == list(range(rank)):
        return Alias(x)
    return Op("permute", {"dims": list(dims)}, [x])


def _permute(node, ctx):
    """torch.permute(x, dims), x.permute(dims) and x.permute(*dims)."""
    x = _tensor(node, node.args[0], "the input")
    rest = list(node.args[1:])
    if "dims" in node.kwargs:
        rest = [node.kwargs["dims"]]
    dims = rest[0] if len(rest) == 1 and isinstance(rest[0], (tuple, list)) else rest
    return _permutation(node, ctx, x, list(dims))


def _transpose(node, ctx):
    """torch.transpose(x, a, b), x.transpose(a, b), x.swapaxes(a, b): a permute swapping two
    dims (channel shuffle's transpose(1, 2)); x.t() of a matrix."""
    x = _tensor(node, node.args[0], "the input")
    rank = ctx.value(x).dim()
    if node.target in ("t",):
        if rank < 2:
            return Alias(x)
        a, b = 0, 1
    else:
        names = ["input", "dim0", "dim1"]
        given = _args(node, names + ["axis0", "axis1"])
        a, b = given.get("dim0", given.get("axis0")), given.get("dim1", given.get("axis1"))
    dims = list(range(rank))
    if not (isinstance(a, int) and isinstance(b, int)):
        raise Unsupported("transpose's dims are computed (%r, %r): Tandem's permute takes numbers" % (a, b))
    dims[a], dims[b] = dims[b], dims[a]
    return _permutation(node, ctx, x, dims)


def _pieces(kind):
    """torch.chunk(x, chunks, dim), torch.split(x, size or sizes, dim), torch.tensor_split
    (x, sections or indices, dim): the slices' extents as torch made them on the example,
    each a narrow; refused along a dimension that grows with the batch (the slices would)."""
    def convert(node, ctx):
        names = {"chunk": ["input", "chunks", "dim"], "split": ["input", "split_size_or_sections", "dim"],
                 "tensor_split": ["input", "indices_or_sections", "dim"]}[kind]
        a = _args(node, names + ["split_size", "sections", "indices"], {"dim": 0})
        x = _tensor(node, a["input"], "the input")
        dim = a["dim"]
        if not isinstance(dim, int):
            raise Unsupported("%s's dim is computed (%r): Tandem's narrow takes numbers" % (kind, dim))
        pieces = ctx.value(node)
        sizes = [t.shape[dim] for t in pieces]
        if ctx.grown is not None and [t.shape[dim] for t in ctx.grown[node]] != sizes:
            raise Unsupported("%s along dim %d, which grows with the batch: its pieces' sizes would change; Tandem's "
                              "narrow slices a fixed extent" % (kind, dim))
        narrows, start = [], 0
        for size in sizes:
            narrows.append(Op("narrow", {"dim": dim, "start": start, "length": size}, [x]) if size else None)
            start += size
        return Pieces(narrows)
    return convert


def _expand(node, ctx):
    """x.expand(n, -1, -1) (vit's class token repeated over the batch): an expand to the
    result's shape, `batch` where it follows the batch."""
    x = _tensor(node, node.args[0], "the input")
    shape = ctx.reshape_target(node)
    if -1 in shape:
        raise Unsupported("expand to %s: a size that grows with the batch but is not the batch; Tandem's expand "
                          "takes sizes and the batch" % (list(ctx.value(node).shape),))
    return Op("expand", {"shape": shape}, [x])


def _layer_norm_function(node, ctx):
    """F.layer_norm(x, normalized_shape, weight, bias, eps): a layer_norm; with a module's
    own weight and bias (convnext's LayerNorm2d reads self.weight and self.bias) the layer
    owns them, and torch_import names it after that module (see owner_of_weights)."""
    a = _args(node, ["input", "normalized_shape", "weight", "bias", "eps"], {"weight": None, "bias": None,
                                                                            "eps": 1e-5})
    shape = list(a["normalized_shape"])
    if a["weight"] is None and a["bias"] is not None:
        raise Unsupported("F.layer_norm with a bias but no weight: Tandem's layer_norm has a bias only beside a weight")
    if (a["weight"] is not None or a["bias"] is not None) and layer_norm_owner(node) is None:
        raise Unsupported("F.layer_norm with a weight and bias that are not the parameters 'weight' and 'bias' of one "
                          "module: a Tandem layer_norm owns its weights; use nn.LayerNorm")
    return Op("layer_norm", {"normalized_shape": shape[0] if len(shape) == 1 else shape, "eps": float(a["eps"]),
                             "elementwise_affine": a["weight"] is not None, "bias": a["bias"] is not None},
              [_tensor(node, a["input"], "the input")])


def layer_norm_owner(node):
    """The module path whose own `weight` (and `bias`) an F.layer_norm node reads, or None."""
    args = list(node.args) + [None] * 5
    weight = node.kwargs.get("weight", args[2])
    bias = node.kwargs.get("bias", args[3])
    if not (_is_node(weight) and weight.op == "get_attr" and weight.target.endswith("weight")):
        return None
    owner = weight.target[:-len("weight")].rstrip(".")
    if bias is None or (_is_node(bias) and bias.op == "get_attr" and bias.target == (owner + "." if owner else "") +
                        "bias"):
        return owner
    return None


def _getitem(node, ctx):
    """x[:, 2:5] is a narrow; x[:, -1] (the last step of a sequence) a narrow of one, then a
    reshape without that dimension; swin's x[:, :H, :W, :] (bounds read from shapes) a narrow
    per dimension sliced. A slice of a whole dimension is no layer."""
    x, index = node.args
    if not isinstance(ctx.value(x), torch.Tensor):
        raise Unsupported("indexing the %s that %s gives: Tandem indexes tensors, and the tuples of the layers that "
                          "return several (GRU, LSTM, MultiheadAttention)" % (type(ctx.value(x)).__name__, x.name))
    if _is_node(index) and ctx.is_tensor(index):
        return _take_rows(node, ctx, x, index)
    index = index if isinstance(index, tuple) else (index,)
    refused = Unsupported("indexing %s: Tandem indexes dimensions with [a:b] or [i] (no steps, ..., None or "
                          "tensors)" % (index,))
    if any(i is Ellipsis or i is None or not isinstance(i, (slice, int)) for i in index):
        raise refused
    shape = ctx.value(x).shape
    narrows, dropped = [], False  # (dim, start, length)
    for dim, i in enumerate(index):
        size = shape[dim]
        if isinstance(i, int):
            narrows.append((dim, i + size if i < 0 else i, 1))
            dropped = True
            continue
        bounds = [_constant(ctx, v, "a slice bound") for v in (i.start, i.stop, i.step)]
        if bounds[2] not in (None, 1) or not all(isinstance(v, int) or v is None for v in bounds[:2]):
            raise refused
        start, stop, _ = slice(bounds[0], bounds[1]).indices(size)
        if (start, stop) != (0, size):
            narrows.append((dim, start, stop - start))
    if not narrows:
        return Alias(x)
    layers, source = [], x
    for k, (dim, start, length) in enumerate(narrows):
        name = "narrow" if k == 0 else "narrow_%d" % k
        layers.append((name, Op("narrow", {"dim": dim, "start": start, "length": length}, [source])))
        source = Sub(name)
    if dropped:
        layers.append(("reshape", Op("reshape", {"shape": ctx.reshape_target(node)}, [source])))
    return layers[0][1] if len(layers) == 1 else Composite(layers)


def _take_rows(node, ctx, x, index):
    """table[index] with an int64 tensor index (maxvit's relative position bias table read
    at its relative_position_index): index_select along dim 0, the index flattened first
    and the result given the index's shape where it has more than one dimension."""
    ids = ctx.value(index)
    if ids.dtype != torch.int64:
        raise Unsupported("indexing with a %s tensor: Tandem indexes rows by int64 indices (no masks)" % ids.dtype)
    if ids.dim() == 1:
        return Op("index_select", {"dim": 0}, [x, index])
    if ctx.grown is not None and index in ctx.grown and ctx.grown[index].shape != ids.shape:
        raise Unsupported("indexing with a %d-dimensional index that grows with the batch: Tandem takes a 1-D index "
                          "or one of fixed shape" % ids.dim())
    return Composite([("flat_index", Op("reshape", {"shape": [-1]}, [index])),
                      ("rows", Op("index_select", {"dim": 0}, [x, Sub("flat_index")])),
                      ("reshape", Op("reshape", {"shape": ctx.reshape_target(node)}, [Sub("rows")]))])


def _einsum(node, ctx):
    """torch.einsum of two operands that is a batched matrix product ('bhid,bhjd->bhij',
    maxvit's attention): each operand permuted to [batch dims, free, contracted] (or
    [.., contracted, free] for the right one), a matmul, and the result permuted to the
    equation's order. One free index per operand and one contracted index; repeated or
    summed-out indices, '...' and other numbers of operands are refused."""
    equation, *operands = node.args
    if len(operands) == 1 and isinstance(operands[0], (tuple, list)):
        operands = list(operands[0])
    if not isinstance(equation, str) or "->" not in equation or "." in equation or len(operands) != 2:
        raise Unsupported("einsum %r of %d operands: Tandem writes einsum as a matmul, for two operands and an "
                          "explicit '->' output" % (equation, len(operands)))
    left, right = [_tensor(node, t, "an operand of einsum") for t in operands]
    inputs, output = equation.replace(" ", "").split("->")
    a, b = inputs.split(",") if inputs.count(",") == 1 else ("", "")
    refused = Unsupported("einsum %r is not a batched matrix product (one free index per operand, one contracted, "
                          "the rest batch indices in both and the output): Tandem writes einsum as a matmul"
                          % equation)
    if not a or len(set(a)) != len(a) or len(set(b)) != len(b) or len(set(output)) != len(output):
        raise refused
    batch = [i for i in output if i in a and i in b]
    free_a = [i for i in a if i not in b]
    free_b = [i for i in b if i not in a]
    contracted = [i for i in a if i in b and i not in output]
    if len(free_a) != 1 or len(free_b) != 1 or len(contracted) != 1 or \
            sorted(output) != sorted(batch + free_a + free_b) or len(batch) + 2 != len(a) or len(batch) + 2 != len(b):
        raise refused
    layers, refs = [], []
    for name, operand, letters, order in (("left", left, a, batch + free_a + contracted),
                                          ("right", right, b, batch + contracted + free_b)):
        dims = [letters.index(i) for i in order]
        if dims == list(range(len(dims))):
            refs.append(operand)
        else:
            layers.append((name, Op("permute", {"dims": dims}, [operand])))
            refs.append(Sub(name))
    product = batch + free_a + free_b
    layers.append(("matmul", Op("matmul", {}, refs)))
    dims = [product.index(i) for i in output]
    if dims != list(range(len(dims))):
        layers.append(("permute", Op("permute", {"dims": dims}, [Sub("matmul")])))
    return layers[0][1] if len(layers) == 1 else Composite(layers)


def _constant(ctx, v, what):
    """`v` with the numbers the model computed from shapes (swin pads to whole windows by
    sizes it reads from x.shape) replaced by their values at the example; refused where a
    value changes with the batch."""
    if isinstance(v, (tuple, list)):
        return [_constant(ctx, item, what) for item in v]
    if not _is_node(v):
        return v
    value = ctx.value(v)
    # a shape's slice (segmentation heads interpolate to x.shape[-2:]): a tuple of numbers
    numbers = isinstance(value, (int, float)) or (isinstance(value, (tuple, list)) and
                                                  all(isinstance(item, (int, float)) for item in value))
    if ctx.is_tensor(v) or not numbers:
        raise Unsupported("%s is computed from a tensor's values (%r): Tandem's layers take numbers" % (what, v))
    if isinstance(value, (tuple, list)):
        value = list(value)
    grown = ctx.grown.get(v) if ctx.grown is not None else None
    if isinstance(grown, (tuple, list)):
        grown = list(grown)
    if ctx.grown is not None and v in ctx.grown and grown != value:
        raise Unsupported("%s changes with the batch size (%r at batch %s, %r at batch %s): Tandem's layers take "
                          "fixed numbers" % (what, value, ctx.batch, grown, ctx.grown_batch))
    return value


def _pad(node, ctx):
    """F.pad(x, pad, mode='constant', value=0): pad, torch's order of (before, after) pairs
    from the last dim; negative entries crop."""
    a = _args(node, ["input", "pad", "mode", "value"], {"mode": "constant", "value": None})
    if a["mode"] != "constant":
        raise Unsupported("pad mode %r: Tandem's pad is constant only (no reflect, replicate or circular)"
                          % (a["mode"],))
    pad = _constant(ctx, a["pad"], "pad")
    value = _constant(ctx, a["value"], "pad's value")
    return Op("pad", {"pad": list(pad), "value": float(value or 0.0)}, [_tensor(node, a["input"], "the input")])


def _roll(node, ctx):
    """torch.roll(x, shifts, dims) and x.roll(shifts, dims): roll (swin's cyclic shift);
    without dims, of the flattened tensor."""
    a = _args(node, ["input", "shifts", "dims"], {"dims": None})
    listed = lambda v: list(v) if isinstance(v, (tuple, list)) else [v]  # noqa: E731
    shifts = listed(_constant(ctx, a["shifts"], "roll's shifts"))
    dims = _constant(ctx, a["dims"], "roll's dims")
    dims = listed(dims) if dims not in (None, [], ()) else None
    return Op("roll", {"shifts": shifts, "dims": dims}, [_tensor(node, a["input"], "the input")])


def _interpolate_op(node, ctx, x, size, scale_factor, mode, align_corners, recompute_scale_factor, antialias):
    """interpolate for F.interpolate's arguments (nn.Upsample's attributes)."""
    if mode not in ("nearest", "bilinear"):
        raise Unsupported("interpolate mode %r: Tandem has modes nearest and bilinear" % (mode,))
    if antialias:
        raise Unsupported("interpolate with antialias=True: Tandem's bilinear does not antialias")
    attrs = {"mode": mode}
    if mode == "bilinear":
        attrs["align_corners"] = bool(align_corners)
    size, scale_factor = _constant(ctx, size, "interpolate's size"), _constant(ctx, scale_factor, "scale_factor")
    if scale_factor is not None and recompute_scale_factor:
        size = list(ctx.value(node).shape[2:])  # torch then reads positions by in / out, as a size does
    if size is not None:
        attrs["size"] = list(size) if isinstance(size, (tuple, list)) else size
        return Op("interpolate", attrs, [x])
    factors = scale_factor if isinstance(scale_factor, (tuple, list)) else [scale_factor]
    if len(set(factors)) != 1:
        raise Unsupported("interpolate with scale_factor %r, one per dim: Tandem's interpolate takes one scale "
                          "factor for all (or give size, or recompute_scale_factor=True)" % (scale_factor,))
    attrs["scale_factor"] = float(factors[0])
    return Op("interpolate", attrs, [x])


def _interpolate(node, ctx):
    """F.interpolate(x, size, scale_factor, mode, align_corners, recompute_scale_factor,
    antialias)."""
    a = _args(node, ["input", "size", "scale_factor", "mode", "align_corners", "recompute_scale_factor", "antialias"],
              {"size": None, "scale_factor": None, "mode": "nearest", "align_corners": None,
               "recompute_scale_factor": None, "antialias": False})
    return _interpolate_op(node, ctx, _tensor(node, a["input"], "the input"), a["size"], a["scale_factor"], a["mode"],
                           a["align_corners"], a["recompute_scale_factor"], a["antialias"])


def _activation(op, params=()):
    def convert(node, ctx):
        a = _args(node, ["input"] + [p for p, _ in params] + ["inplace"],
                  dict(params, inplace=False))
        return Op(op, {p: a[p] for p, _ in params}, [_tensor(node, a["input"], "the input")])
    return convert


def _softmax(op):
    def convert(node, ctx):
        a = _args(node, ["input", "dim", "_stacklevel", "dtype"], {"dim": None, "dtype": None})
        if a["dim"] is None:
            raise Unsupported("%s without dim: give it a dim" % op)
        if a["dtype"] is not None:
            raise Unsupported("%s with dtype=%s: Tandem computes in float32" % (op, a["dtype"]))
        return Op(op, {"dim": a["dim"]}, [_tensor(node, a["input"], "the input")])
    return convert


def _normalize(node, ctx):
    """F.normalize(x, p, dim, eps): Tandem's normalize, the Euclidean norm only."""
    a = _args(node, ["input", "p", "dim", "eps", "out"], {"p": 2.0, "dim": 1, "eps": 1e-12, "out": None})
    if a["p"] != 2:
        raise Unsupported("F.normalize with p=%r: Tandem's normalize divides by the Euclidean norm (p=2) only" % a["p"])
    if a["out"] is not None:
        raise Unsupported("F.normalize with out=: Tandem's layers write their own outputs")
    return Op("normalize", {"dim": _constant(ctx, a["dim"], "dim"), "eps": float(_constant(ctx, a["eps"], "eps"))},
              [_tensor(node, a["input"], "the input")])


def _clamp(node, ctx):
    """torch.clamp(x, min, max) and x.clamp(...), x.clamp_min / clamp_max (fx passes the
    method's name: the bound it sets), between numbers: Tandem's clamp."""
    names = {"clamp_min": ["input", "min"], "clamp_max": ["input", "max"]}.get(node.target, ["input", "min", "max"])
    a = _args(node, names, {"min": None, "max": None})
    bounds = {}
    for key in ("min", "max"):
        if _is_node(a[key]) and ctx.is_tensor(a[key]):
            raise Unsupported("clamp with a tensor %s: Tandem's clamp takes numbers" % key)
        bounds[key] = None if a[key] is None else float(_constant(ctx, a[key], key))
    if bounds["min"] is None and bounds["max"] is None:
        raise Unsupported("clamp without min or max: give it a bound")
    return Op("clamp", bounds, [_tensor(node, a["input"], "the input")])


def _pool(op):
    """F.max_pool1d/2d / F.avg_pool1d/2d: the modules' attributes, by the functions'
    arguments (F.avg_pool1d has no divisor_override)."""
    size = _single if op.endswith("1d") else _pair

    def convert(node, ctx):
        if op.startswith("max_pool"):
            a = _args(node, ["input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"],
                      {"stride": None, "padding": 0, "dilation": 1, "ceil_mode": False, "return_indices": False})
            if a["return_indices"]:
                raise Unsupported("return_indices=True: Tandem's %s returns the values only" % op)
        else:
            names = ["input", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad"]
            a = _args(node, names + ([] if op.endswith("1d") else ["divisor_override"]),
                      {"stride": None, "padding": 0, "ceil_mode": False, "count_include_pad": True,
                       "divisor_override": None})
            if a["divisor_override"] is not None:
                raise Unsupported("divisor_override: Tandem's %s divides by the window" % op)
        stride = a["stride"] if a["stride"] not in (None, [], ()) else a["kernel_size"]
        attrs = {"kernel_size": size(a["kernel_size"]), "stride": size(stride), "padding": size(a["padding"]),
                 "ceil_mode": a["ceil_mode"]}
        if op.startswith("max_pool"):
            attrs["dilation"] = size(a["dilation"])
        else:
            attrs["count_include_pad"] = a["count_include_pad"]
        return Op(op, attrs, [_tensor(node, a["input"], "the input")])
    return convert


def _adaptive_pool_function(op):
    """F.adaptive_avg_pool1d/2d / F.adaptive_max_pool1d/2d (densenet's head): a fixed window."""
    def convert(node, ctx):
        a = _args(node, ["input", "output_size", "return_indices"], {"return_indices": False})
        if a["return_indices"]:
            raise Unsupported("return_indices=True: Tandem's %s returns the values only" % op)
        return _fixed_window_pool(op, _tensor(node, a["input"], "the input"), a["output_size"], ctx)
    return convert


def _reduction(op):
    """torch.sum, mean, amax, amin and their tensor methods over `dim` (an int, a tuple, or
    none: every dimension), with keepdim: the op of that name."""
    def convert(node, ctx):
        a = _args(node, ["input", "dim", "keepdim", "dtype", "out"],
                  {"dim": None, "keepdim": False, "dtype": None, "out": None})
        x = _tensor(node, a["input"], "the input")
        if a["dtype"] is not None:
            raise Unsupported("%s with dtype=%s: Tandem casts no tensors" % (op, a["dtype"]))
        if ctx.value(x).dtype != torch.float32:
            raise Unsupported("%s of a %s tensor: Tandem's reductions take float32" % (op, ctx.value(x).dtype))
        attrs = {}  # as a person writes it: no dim for every dimension, keepdim only when true
        dim = a["dim"]
        if isinstance(dim, (tuple, list)) and len(dim) > 0:
            attrs["dim"] = [int(d) for d in dim]
        elif isinstance(dim, int):
            attrs["dim"] = dim
        elif dim not in (None, (), []):
            raise Unsupported("%s over dim=%r: give an int or a tuple of ints" % (op, dim))
        if a["keepdim"]:
            attrs["keepdim"] = True
        return Op(op, attrs, [x])
    return convert


def _mean(node, ctx):
    """x.mean([2, 3]) / torch.mean(x, (-2, -1), keepdim=True) of an [N, C, H, W] tensor (the
    global pool mnasnet ends with): avg_pool2d over the whole plane, which the cpu's inference
    regions fuse with the convolution before, then a reshape that drops the two dimensions
    unless keepdim. Any other mean is the mean op."""
    a = _args(node, ["input", "dim", "keepdim", "dtype"], {"dim": None, "keepdim": False, "dtype": None})
    x = _tensor(node, a["input"], "the input")
    rank = ctx.value(x).dim()
    dims = a["dim"] if isinstance(a["dim"], (tuple, list)) else [a["dim"]]
    if a["dtype"] is not None or rank != 4 or sorted(d % rank for d in dims if isinstance(d, int)) != [2, 3]:
        return _reduction("mean")(node, ctx)
    h, w = ctx.value(x).shape[-2:]
    pool = Op("avg_pool2d", {"kernel_size": _pair([h, w]), "stride": _pair([h, w])}, [x])
    if a["keepdim"]:
        return pool
    return Composite([("pool", pool), ("reshape", Op("reshape", {"shape": ctx.reshape_target(node)}, [Sub("pool")]))])


def _dropout(node, ctx):
    a = _args(node, ["input", "p", "training", "inplace"], {"p": 0.5, "training": True, "inplace": False})
    if not a["training"]:
        return Alias(a["input"])  # F.dropout(x, p, self.training) traced in eval mode
    return Op("dropout", {"p": float(a["p"])}, [_tensor(node, a["input"], "the input")])


def _stochastic_depth(node, ctx):
    """torchvision.ops.stochastic_depth (efficientnet, convnext, swin), which its module calls
    with its own `training`, as F.dropout(x, p, self.training): traced in eval mode (or at
    p = 0) the identity, so that the residual add stays in the cpu's inference regions;
    traced in training mode the stochastic_depth op, which drops whole samples (mode row) or
    the batch (mode batch) in Tandem's training passes and is the identity in inference."""
    a = _args(node, ["input", "p", "mode", "training"], {"mode": "row", "training": True})
    x = _tensor(node, a["input"], "the input")
    p = _constant(ctx, a["p"], "p")
    if p == 0 or not a["training"]:
        return Alias(x)
    if a["mode"] not in ("row", "batch"):
        raise Unsupported("stochastic depth with mode=%r: torchvision's modes are row and batch" % (a["mode"],))
    return Op("stochastic_depth", {"p": float(p), "mode": a["mode"]}, [x])


def _batch_or_size(ctx, x, dim):
    """'batch' where dimension `dim` of `x` follows the batch, else its size: a shape entry
    for a reshape the converter writes itself."""
    size = ctx.value(x).shape[dim]
    if ctx.grown is not None and x in ctx.grown and ctx.grown[x].shape[dim] != size:
        if dim != 0:
            raise Unsupported("dimension %d grows with the batch: Tandem writes this reshape for a leading batch" % dim)
        return "batch"
    return size


def _patch_merging_pad(node, ctx):
    """torchvision's swin _patch_merging_pad: [B, H, W, C] padded to even H and W, and the
    four pixels of each 2x2 patch side by side, [B, H/2, W/2, 4C] (x[..., 0::2, 0::2, :],
    x[..., 1::2, 0::2, :], x[..., 0::2, 1::2, :], x[..., 1::2, 1::2, :] joined). Tandem
    slices by narrow only, so each strided slice is a reshape to [B, H/2, 2, W/2, 2, C],
    a narrow of one along each 2 and a reshape back."""
    x = _tensor(node, node.args[0], "the input")
    shape = list(ctx.value(x).shape)
    if len(shape) != 4:
        raise Unsupported("_patch_merging_pad of a %d-dimensional tensor: Tandem takes [B, H, W, C]" % len(shape))
    _, h, w, c = shape
    batch = _batch_or_size(ctx, x, 0)
    layers, source = [], x
    if h % 2 or w % 2:
        layers.append(("pad", Op("pad", {"pad": [0, 0, 0, w % 2, 0, h % 2]}, [x])))
        source = Sub("pad")
    hh, ww = (h + h % 2) // 2, (w + w % 2) // 2
    layers.append(("patches", Op("reshape", {"shape": [batch, hh, 2, ww, 2, c]}, [source])))
    pieces = []
    for k, (i, j) in enumerate([(0, 0), (1, 0), (0, 1), (1, 1)]):
        layers.append(("rows_%d" % k, Op("narrow", {"dim": 2, "start": i, "length": 1}, [Sub("patches")])))
        layers.append(("pixels_%d" % k, Op("narrow", {"dim": 4, "start": j, "length": 1}, [Sub("rows_%d" % k)])))
        layers.append(("x%d" % k, Op("reshape", {"shape": [batch, hh, ww, c]}, [Sub("pixels_%d" % k)])))
        pieces.append(Sub("x%d" % k))
    layers.append(("cat", Op("cat", {"dim": -1}, pieces)))
    return Composite(layers)


def _relative_position_bias(node, ctx):
    """torchvision's swin _get_relative_position_bias(table, index, window_size): the
    learned table [(2w-1)^2, heads] read at the fixed relative_position_index [N*N] (an
    index_select of its rows), viewed [N, N, heads] and turned to [1, heads, N, N]. The
    table is a parameter layer and the index a buffer layer of the attention module; these
    layers sit beside them."""
    a = _args(node, ["relative_position_bias_table", "relative_position_index", "window_size"])
    table = _tensor(node, a["relative_position_bias_table"], "the table")
    index = _tensor(node, a["relative_position_index"], "the index")
    n = ctx.value(node).shape[-1]
    heads = ctx.value(table).shape[-1]
    return Composite([
        ("bias_rows", Op("index_select", {"dim": 0}, [table, index])),
        ("bias_grid", Op("reshape", {"shape": [n, n, heads]}, [Sub("bias_rows")])),
        ("bias_heads", Op("permute", {"dims": [2, 0, 1]}, [Sub("bias_grid")])),
        ("relative_position_bias", Op("reshape", {"shape": [1, heads, n, n]}, [Sub("bias_heads")])),
    ], scoped=True)


def _linear_owner(weight, bias, what):
    """The module path whose `weight` (and `bias`) a functional F.linear inside a leaf reads
    (swin's attn.qkv, attn.proj), or Unsupported."""
    if not (_is_node(weight) and weight.op == "get_attr" and weight.target.endswith(".weight")):
        raise Unsupported("%s's weight is not a module's parameter 'weight': Tandem's linear layer owns its weights"
                          % what)
    owner = weight.target[:-len(".weight")]
    if bias is not None and not (_is_node(bias) and bias.op == "get_attr" and bias.target == owner + ".bias"):
        raise Unsupported("%s's bias is not the 'bias' of '%s', whose weight it reads: Tandem's linear layer owns both"
                          % (what, owner))
    return owner


def owns_weights(user, attribute):
    """Whether call node `user` reads get_attr node `attribute` as the weights of a layer it
    makes (swin's shifted_window_attention reads attn.qkv.weight and attn.proj.weight), so
    that `attribute` is no parameter layer of its own."""
    if user.op != "call_function" or OTHER_FUNCTIONS.get(
            (getattr(user.target, "__module__", None), getattr(user.target, "__name__", None))) is not \
            _shifted_window_attention:
        return False
    weights = list(user.args[1:3]) + [user.kwargs.get("qkv_bias"), user.kwargs.get("proj_bias")] + \
        list(user.args[9:11])
    return any(w is attribute for w in weights)


def _swin_attention_mask(pad_h, pad_w, window, shift):
    """swin's shifted-window attention mask [nW, 1, N, N], 0 within a region and -100
    across, computed as torchvision's shifted_window_attention computes it."""
    mask = torch.zeros((pad_h, pad_w))
    h_slices = ((0, -window[0]), (-window[0], -shift[0]), (-shift[0], None))
    w_slices = ((0, -window[1]), (-window[1], -shift[1]), (-shift[1], None))
    count = 0
    for h in h_slices:
        for w in w_slices:
            mask[h[0]:h[1], w[0]:w[1]] = count
            count += 1
    windows = (pad_h // window[0]) * (pad_w // window[1])
    mask = mask.view(pad_h // window[0], window[0], pad_w // window[1], window[1])
    mask = mask.permute(0, 2, 1, 3).reshape(windows, window[0] * window[1])
    mask = mask.unsqueeze(1) - mask.unsqueeze(2)
    mask = mask.masked_fill(mask != 0, float(-100.0)).masked_fill(mask == 0, float(0.0))
    return mask.unsqueeze(1).contiguous()


def _shifted_window_attention(node, ctx):
    """torchvision's swin shifted_window_attention (an fx leaf), written out as its code
    runs: [B, H, W, C] padded to whole windows, rolled back by the shift, cut into windows
    [B*nW, N, C]; the qkv linear (the module's attn.qkv), heads split, q scaled by
    head_dim ** -0.5, q k^T plus the relative position bias, plus the fixed attention mask
    across shifted regions (a buffer layer holding it, [nW, 1, N, N]), softmax, times v;
    the proj linear (attn.proj), the windows joined, rolled forward and cropped. The
    layers sit in the attention module, beside its table and index."""
    a = _args(node, ["input", "qkv_weight", "proj_weight", "relative_position_bias", "window_size", "num_heads",
                     "shift_size", "attention_dropout", "dropout", "qkv_bias", "proj_bias", "logit_scale"],
              {"attention_dropout": 0.0, "dropout": 0.0, "qkv_bias": None, "proj_bias": None, "logit_scale": None})
    logit_scale = a["logit_scale"]
    if logit_scale is not None:
        logit_scale = _tensor(node, logit_scale, "logit_scale")
        if list(ctx.value(logit_scale).shape) != [_constant(ctx, a["num_heads"], "num_heads"), 1, 1]:
            raise Unsupported("logit_scale of shape %s: Tandem's swin v2 attention takes [num_heads, 1, 1]"
                              % list(ctx.value(logit_scale).shape))
    for key in ("attention_dropout", "dropout"):
        if _constant(ctx, a[key], key):
            raise Unsupported("shifted_window_attention with %s=%g: torchvision applies that dropout even in eval "
                              "mode (F.dropout without training=), Tandem's dropout only in training; set it to 0"
                              % (key, a[key]))
    x = _tensor(node, a["input"], "the input")
    bias = _tensor(node, a["relative_position_bias"], "the relative position bias")
    qkv = _linear_owner(a["qkv_weight"], a["qkv_bias"], "qkv")
    proj = _linear_owner(a["proj_weight"], a["proj_bias"], "proj")
    window = list(_constant(ctx, a["window_size"], "window_size"))
    shift = list(_constant(ctx, a["shift_size"], "shift_size"))
    heads = _constant(ctx, a["num_heads"], "num_heads")
    shape = list(ctx.value(x).shape)
    if len(shape) != 4:
        raise Unsupported("shifted_window_attention of a %d-dimensional tensor: Tandem takes [B, H, W, C]" % len(shape))
    _, h, w, c = shape
    batch = _batch_or_size(ctx, x, 0)
    pad_r, pad_b = (window[1] - w % window[1]) % window[1], (window[0] - h % window[0]) % window[0]
    pad_h, pad_w = h + pad_b, w + pad_r
    if window[0] >= pad_h:
        shift[0] = 0
    if window[1] >= pad_w:
        shift[1] = 0
    rows, cols, n, d = pad_h // window[0], pad_w // window[1], window[0] * window[1], c // heads
    windows = rows * cols
    layers = []

    def add(name, op):
        layers.append((name, op))
        return Sub(name)
    y = x
    if pad_r or pad_b:
        y = add("pad", Op("pad", {"pad": [0, 0, 0, pad_r, 0, pad_b]}, [y]))
    if sum(shift) > 0:
        y = add("shift", Op("roll", {"shifts": [-shift[0], -shift[1]], "dims": [1, 2]}, [y]))
    y = add("partition", Op("reshape", {"shape": [batch, rows, window[0], cols, window[1], c]}, [y]))
    y = add("partition_order", Op("permute", {"dims": [0, 1, 3, 2, 4, 5]}, [y]))
    y = add("windows", Op("reshape", {"shape": [-1, n, c]}, [y]))
    owned = {"qkv": qkv, "proj": proj}
    if logit_scale is not None and a["qkv_bias"] is not None:
        y = _qkv_with_zero_k_bias(add, owned, qkv, c, y)
    else:
        y = add("qkv", Op("linear", {"in_features": c, "out_features": 3 * c, "bias": a["qkv_bias"] is not None},
                          [y]))
    y = add("heads", Op("reshape", {"shape": [-1, n, 3, heads, d]}, [y]))
    y = add("heads_order", Op("permute", {"dims": [2, 0, 3, 1, 4]}, [y]))
    parts = []
    for k, name in enumerate("qkv"):
        piece = add(name + "_slice", Op("narrow", {"dim": 0, "start": k, "length": 1}, [y]))
        parts.append(add(name, Op("reshape", {"shape": [-1, heads, n, d]}, [piece])))
    q, k, v = parts
    if logit_scale is not None:  # cosine attention: unit q and k, times a learned scale per head up to 100
        q = add("q_unit", Op("normalize", {"dim": -1, "eps": 1e-12}, [q]))
        k = add("k_unit", Op("normalize", {"dim": -1, "eps": 1e-12}, [k]))
        k = add("k_t", Op("permute", {"dims": [0, 1, 3, 2]}, [k]))
        y = add("cosines", Op("matmul", {}, [q, k]))
        s = add("logit_scale_bounded", Op("clamp", {"min": None, "max": math.log(100.0)}, [logit_scale]))
        s = add("logit_scale_exp", Op("exp", {}, [s]))
        y = add("scores", Op("mul", {}, [y, s]))
    else:
        q = add("q_scaled", Op("scale", {"factor": float(d ** -0.5)}, [q]))
        k = add("k_t", Op("permute", {"dims": [0, 1, 3, 2]}, [k]))
        y = add("scores", Op("matmul", {}, [q, k]))
    y = add("biased", Op("add", {}, [y, bias]))
    if sum(shift) > 0:
        mask = _swin_attention_mask(pad_h, pad_w, window, shift)
        y = add("by_window", Op("reshape", {"shape": [batch, windows, heads, n, n]}, [y]))
        m = add("attn_mask", Op("buffer", {"shape": list(mask.shape)}, [y], value=mask))
        y = add("masked", Op("add", {}, [y, m]))
        y = add("masked_scores", Op("reshape", {"shape": [-1, heads, n, n]}, [y]))
    y = add("attention", Op("softmax", {"dim": -1}, [y]))
    y = add("mixed", Op("matmul", {}, [y, v]))
    y = add("mixed_order", Op("permute", {"dims": [0, 2, 1, 3]}, [y]))
    y = add("merged", Op("reshape", {"shape": [-1, n, c]}, [y]))
    y = add("proj", Op("linear", {"in_features": c, "out_features": c, "bias": a["proj_bias"] is not None}, [y]))
    y = add("departition", Op("reshape", {"shape": [batch, rows, cols, window[0], window[1], c]}, [y]))
    y = add("departition_order", Op("permute", {"dims": [0, 1, 3, 2, 4, 5]}, [y]))
    y = add("joined", Op("reshape", {"shape": [batch, pad_h, pad_w, c]}, [y]))
    if sum(shift) > 0:
        y = add("unshift", Op("roll", {"shifts": [shift[0], shift[1]], "dims": [1, 2]}, [y]))
    if pad_b:
        y = add("crop_h", Op("narrow", {"dim": 1, "start": 0, "length": h}, [y]))
    if pad_r:
        y = add("crop_w", Op("narrow", {"dim": 2, "start": 0, "length": w}, [y]))
    return Composite(layers, scoped=True, owned=owned)


def _qkv_with_zero_k_bias(add, owned, qkv, c, x):
    """swin v2's qkv projection: F.linear(x, weight, bias) with the bias's middle third (k's)
    zeroed on a clone, so that k has no bias and that third's gradient is 0. Written as the
    linear's own arithmetic in a block at the module's path (attn.qkv), so its weight and bias
    keep their state_dict names: x times the weight's transpose, plus the bias times a fixed
    mask (1, 0 over k's third, 1), a buffer, which passes no gradient to the zeroed entries."""
    def own(name, op, inputs, value=None):
        owned["qkv_" + name] = qkv + "." + name
        return add("qkv_" + name, Op(op["op"], op.get("attrs"), inputs, value=value))
    weight = own("weight", {"op": "parameter", "attrs": {"shape": [3 * c, c]}}, [x])
    weight_t = own("weight_t", {"op": "permute", "attrs": {"dims": [1, 0]}}, [weight])
    product = own("product", {"op": "matmul"}, [x, weight_t])
    bias = own("bias", {"op": "parameter", "attrs": {"shape": [3 * c]}}, [x])
    mask = torch.ones(3 * c)
    mask[c:2 * c] = 0
    mask = own("k_bias_mask", {"op": "buffer", "attrs": {"shape": [3 * c]}}, [x], value=mask)
    bias = own("bias_without_k", {"op": "mul"}, [bias, mask])
    return own("output", {"op": "add"}, [product, bias])


def _same(node, ctx):
    return Alias(_tensor(node, node.args[0], "the input"))


def _moved(node, ctx):
    """x.to(device), x.cuda(k), x.cpu(): the tensor, now read on that device."""
    x = node.args[0]
    if node.target == "cpu":
        return Alias(x, "cpu")
    rest = list(node.args[1:]) + list(node.kwargs.values())
    if node.target == "cuda":
        k = rest[0] if rest else 0
        return Alias(x, "cuda:%d" % k if isinstance(k, int) else str(k))
    devices = [r for r in rest if isinstance(r, (str, torch.device))]
    dtypes = [r for r in rest if isinstance(r, torch.dtype)]
    if dtypes and ctx.value(x).dtype not in dtypes:
        raise Unsupported("x.to(%s) of a %s tensor: Tandem casts no tensors" % (dtypes[0], ctx.value(x).dtype))
    return Alias(x, str(devices[0]) if devices else None)


def _cast(dtype):
    def convert(node, ctx):
        x = node.args[0]
        if ctx.value(x).dtype != dtype:
            raise Unsupported("%s() of a %s tensor: Tandem casts no tensors" % (node.target, ctx.value(x).dtype))
        return Alias(x)
    return convert


FUNCTIONS = {
    operator.add: _binary("add"), torch.add: _binary("add"), operator.iadd: _binary("add"),
    operator.sub: _binary("add", negate=True), torch.sub: _binary("add", negate=True),
    operator.isub: _binary("add", negate=True),
    operator.mul: _binary("mul"), torch.mul: _binary("mul"), operator.imul: _binary("mul"),
    operator.neg: _negative, torch.neg: _negative, operator.truediv: _divide, torch.div: _divide,
    operator.itruediv: _divide,
    torch.cat: _cat, torch.concat: _cat,
    torch.flatten: _flatten, torch.reshape: _reshape,
    torch.matmul: _matmul, operator.matmul: _matmul, torch.bmm: _matmul, torch.mm: _matmul,
    torch.narrow: _narrow, operator.getitem: _getitem,
    torch.permute: _permute, torch.transpose: _transpose, torch.swapaxes: _transpose, torch.t: _transpose,
    torch.chunk: _pieces("chunk"), torch.split: _pieces("split"), torch.tensor_split: _pieces("tensor_split"),
    torch.relu: _activation("relu"), F.relu: _activation("relu"),
    torch.tanh: _activation("tanh"), F.tanh: _activation("tanh"),
    torch.sigmoid: _activation("sigmoid"), F.sigmoid: _activation("sigmoid"),
    F.gelu: _activation("gelu", [("approximate", "none")]),
    F.relu6: _activation("relu6"), F.hardswish: _activation("hardswish"),
    F.hardsigmoid: _activation("hardsigmoid"), F.silu: _activation("silu"), F.mish: _activation("mish"),
    F.softmax: _softmax("softmax"), torch.softmax: _softmax("softmax"),
    F.log_softmax: _softmax("log_softmax"), torch.log_softmax: _softmax("log_softmax"),
    F.dropout: _dropout,
    F.max_pool1d: _pool("max_pool1d"), F.avg_pool1d: _pool("avg_pool1d"),
    F.max_pool2d: _pool("max_pool2d"), F.avg_pool2d: _pool("avg_pool2d"),
    F.adaptive_avg_pool1d: _adaptive_pool_function("avg_pool1d"),
    F.adaptive_max_pool1d: _adaptive_pool_function("max_pool1d"),
    F.adaptive_avg_pool2d: _adaptive_pool_function("avg_pool2d"),
    F.adaptive_max_pool2d: _adaptive_pool_function("max_pool2d"), torch.mean: _mean,
    torch.sum: _reduction("sum"), torch.amax: _reduction("amax"), torch.amin: _reduction("amin"),
    torch.squeeze: _reshape, torch.unsqueeze: _reshape,
    F.pad: _pad, torch.roll: _roll, F.interpolate: _interpolate,
    torch.squeeze: _reshape, torch.unsqueeze: _reshape, F.layer_norm: _layer_norm_function,
    torch.einsum: _einsum,
    F.normalize: _normalize, torch.clamp: _clamp, torch.clip: _clamp, torch.exp: _activation("exp"),
}

METHODS = {
    "add": _binary("add"), "sub": _binary("add", negate=True), "mul": _binary("mul"),
    "neg": _negative, "div": _divide,
    "flatten": _flatten, "view": _reshape, "reshape": _reshape, "squeeze": _reshape, "unsqueeze": _reshape,
    "view_as": _reshape, "reshape_as": _reshape, "relu_": _activation("relu"),
    "matmul": _matmul, "bmm": _matmul, "mm": _matmul, "narrow": _narrow,
    "permute": _permute, "transpose": _transpose, "swapaxes": _transpose, "t": _transpose,
    "chunk": _pieces("chunk"), "split": _pieces("split"), "tensor_split": _pieces("tensor_split"),
    "relu": _activation("relu"), "tanh": _activation("tanh"), "sigmoid": _activation("sigmoid"),
    "softmax": _softmax("softmax"), "log_softmax": _softmax("log_softmax"),
    "contiguous": _same, "clone": _same, "mean": _mean, "expand": _expand,
    "sum": _reduction("sum"), "amax": _reduction("amax"), "amin": _reduction("amin"),
    "to": _moved, "cuda": _moved, "cpu": _moved,
    "float": _cast(torch.float32), "long": _cast(torch.int64),
    "roll": _roll,
    "clamp": _clamp, "clip": _clamp, "clamp_min": _clamp, "clamp_max": _clamp, "exp": _activation("exp"),
}


# Functions of packages from_torch does not import, by module and name (fx's leaves:
# torchvision wraps them with torch.fx.wrap).
OTHER_FUNCTIONS = {
    ("torchvision.ops.stochastic_depth", "stochastic_depth"): _stochastic_depth,
    ("torchvision.models.swin_transformer", "_patch_merging_pad"): _patch_merging_pad,
    ("torchvision.models.swin_transformer", "_get_relative_position_bias"): _relative_position_bias,
    ("torchvision.models.swin_transformer", "shifted_window_attention"): _shifted_window_attention,
}


def convert_call(node, ctx):
    """A call_function or call_method node."""
    if not ctx.is_tensor(node) and not ctx.is_tuple_of_tensors(node):
        return SCALAR  # x.size(0), x.shape[1] * 2: read by the reshapes that use them
    if node.op == "call_method":
        converter = METHODS.get(node.target)
        what = "tensor method .%s()" % node.target
    else:
        converter = FUNCTIONS.get(node.target) or OTHER_FUNCTIONS.get(
            (getattr(node.target, "__module__", None), getattr(node.target, "__name__", None)))
        what = "%s.%s" % (getattr(node.target, "__module__", None) or "", getattr(node.target, "__name__", node.target))
        what = what.replace("_operator.", "operator ").replace("torch._C._VariableFunctions.", "torch.")
    if converter is None:
        raise Unsupported("%s: Tandem has no such op" % what)
    return converter(node, ctx)
