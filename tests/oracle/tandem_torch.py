"""An independent PyTorch implementation of the Tandem YAML model format (docs/yaml-format.md).

Used as the oracle in the tests and as the PyTorch side of the benchmarks.

    model, spec = build_model("configs/recommender.yaml")
    outputs = model({"dense": ..., "item_ids": ..., ...})   # OrderedDict name -> tensor

The module tree mirrors the YAML: each block (a `layers:` list, a `module:` use, or a
`repeat`) is a Sequential-like module holding its children under their names, so
`model.state_dict()` has exactly Tandem's parameter names (`hidden.0.fc.weight`).
`device:` and `data_parallel:` are validated and then ignored: everything runs on one
device and no `module.` prefix is added.
"""
import collections
import fnmatch
import math
import os
import re
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_np import read_safetensors, write_safetensors  # noqa: E402,F401

__all__ = ["SpecError", "build_model", "load_spec", "draw_bindings", "draw_inputs",
           "read_safetensors", "write_safetensors", "linear_flops",
           "loss_fn", "make_optimizer", "make_scheduler", "scheduled_lr", "train_step", "draw_targets"]


class SpecError(Exception):
    pass


_NAME_RE = re.compile(r"^[A-Za-z0-9_]+$")
_SYMBOL_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DEVICE_RE = re.compile(r"^(cpu|cuda|cuda:[0-9]+)$")

TOP_KEYS = {"name", "inputs", "layers", "modules", "outputs", "targets", "loss", "train"}
# Keys that other tools own (placement) or that steer the oracle itself.
# precision: is applied by the caller (make_cases.py runs a model whose top level says bf16
# under torch.autocast); a layer's or block's own precision: is not modelled here
IGNORED_TOP_KEYS = {"placement", "oracle", "oracle_steps", "oracle_mode", "oracle_train",
                    "oracle_grad_tolerance", "precision", "oracle_tolerance"}
LAYER_KEYS = {"name", "op", "layers", "module", "repeat", "inputs", "device", "data_parallel", "init", "precision"}

_REQ = object()  # marks a required attribute


class FreqScaledEmbeddingBag(nn.EmbeddingBag):
    """nn.EmbeddingBag(scale_grad_by_freq=True) as documented: each entry's gradient divided
    by its index's count among all the indices. torch's own CPU backward (1.13 up to 2.13)
    divides by the wrong count once a repeated index sorts before another
    (pytorch/pytorch#190063; its CUDA backward and nn.Embedding's are right), so the bag is
    built here from F.embedding(scale_grad_by_freq=True), whose counts are the same, and a
    per-bag sum or mean without padding_idx entries."""

    def forward(self, input, offsets=None, per_sample_weights=None):
        if input.dim() == 2:
            bag_of = torch.arange(input.shape[0]).repeat_interleave(input.shape[1])
            flat, bags = input.reshape(-1), input.shape[0]
        else:
            starts = offsets[:-1] if self.include_last_offset else offsets
            end = int(offsets[-1]) if self.include_last_offset else input.shape[0]
            flat, bags = input[:end], starts.shape[0]
            bag_of = torch.searchsorted(starts, torch.arange(end), right=True) - 1
        rows = F.embedding(flat, self.weight, scale_grad_by_freq=True)
        used = torch.ones(flat.shape[0]) if self.padding_idx is None else (flat != self.padding_idx).float()
        out = torch.zeros(bags, self.weight.shape[1]).index_add(0, bag_of, rows * used[:, None])
        if self.mode == "mean":
            count = torch.zeros(bags).index_add(0, bag_of, used)
            out = out / count.clamp(min=1)[:, None]
        return out

# The activations whose only attribute is inplace, by their torch.nn module.
_PLAIN_ACTIVATIONS = {"relu6": nn.ReLU6, "hardswish": nn.Hardswish, "hardsigmoid": nn.Hardsigmoid, "silu": nn.SiLU,
                      "mish": nn.Mish}

# op -> (attributes with defaults, (min inputs, max inputs or None))
OPS = {
    "linear": ({"in_features": _REQ, "out_features": _REQ, "bias": True}, (1, 1)),
    "embedding": ({"num_embeddings": _REQ, "embedding_dim": _REQ, "padding_idx": None, "max_norm": None,
                   "norm_type": 2.0, "scale_grad_by_freq": False, "sparse": False}, (1, 1)),
    "embedding_bag": ({"num_embeddings": _REQ, "embedding_dim": _REQ, "mode": "mean", "padding_idx": None,
                       "include_last_offset": False, "max_norm": None, "norm_type": 2.0,
                       "scale_grad_by_freq": False, "sparse": False}, (1, 2)),
    "relu": ({"inplace": False}, (1, 1)),
    "gelu": ({"approximate": "none"}, (1, 1)),
    "tanh": ({}, (1, 1)),
    "sigmoid": ({}, (1, 1)),
    "relu6": ({"inplace": False}, (1, 1)),
    "hardswish": ({"inplace": False}, (1, 1)),
    "hardsigmoid": ({"inplace": False}, (1, 1)),
    "silu": ({"inplace": False}, (1, 1)),
    "mish": ({"inplace": False}, (1, 1)),
    "softmax": ({"dim": _REQ}, (1, 1)),
    "sum": ({"dim": None, "keepdim": False}, (1, 1)),
    "mean": ({"dim": None, "keepdim": False}, (1, 1)),
    "amax": ({"dim": None, "keepdim": False}, (1, 1)),
    "amin": ({"dim": None, "keepdim": False}, (1, 1)),
    "log_softmax": ({"dim": _REQ}, (1, 1)),
    "normalize": ({"p": 2.0, "dim": 1, "eps": 1e-12}, (1, 1)),
    "exp": ({}, (1, 1)),
    "clamp": ({"min": None, "max": None}, (1, 1)),
    "layer_norm": ({"normalized_shape": _REQ, "eps": 1e-5, "elementwise_affine": True, "bias": True}, (1, 1)),
    "dropout": ({"p": 0.5, "inplace": False}, (1, 1)),
    "stochastic_depth": ({"p": _REQ, "mode": "row"}, (1, 1)),
    "add": ({"alpha": 1.0}, (2, 2)),
    "mul": ({}, (2, 2)),
    "cat": ({"dim": 0}, (2, None)),
    "narrow": ({"dim": _REQ, "start": _REQ, "length": _REQ}, (1, 1)),
    "flatten": ({"start_dim": 1, "end_dim": -1}, (1, 1)),
    "reshape": ({"shape": _REQ}, (1, 1)),
    "permute": ({"dims": _REQ}, (1, 1)),
    "pad": ({"pad": _REQ, "mode": "constant", "value": 0.0}, (1, 1)),
    "roll": ({"shifts": _REQ, "dims": None}, (1, 1)),
    "interpolate": ({"size": None, "scale_factor": None, "mode": "nearest", "align_corners": False}, (1, 1)),
    "expand": ({"shape": _REQ}, (1, 1)),
    "parameter": ({"shape": _REQ}, (1, 1)),
    "buffer": ({"shape": _REQ, "dtype": "float32"}, (1, 1)),
    "scale": ({"factor": _REQ, "shift": 0.0}, (1, 1)),
    "index_select": ({"dim": _REQ}, (2, 2)),
    "matmul": ({}, (2, 2)),
    "conv2d": ({"in_channels": _REQ, "out_channels": _REQ, "kernel_size": _REQ, "stride": 1, "padding": 0,
                "dilation": 1, "groups": 1, "bias": True, "padding_mode": "zeros"}, (1, 1)),
    "max_pool2d": ({"kernel_size": _REQ, "stride": None, "padding": 0, "dilation": 1, "return_indices": False,
                    "ceil_mode": False}, (1, 1)),
    "avg_pool2d": ({"kernel_size": _REQ, "stride": None, "padding": 0, "ceil_mode": False,
                    "count_include_pad": True}, (1, 1)),
    "batch_norm2d": ({"num_features": _REQ, "eps": 1e-5, "momentum": 0.1, "affine": True,
                      "track_running_stats": True}, (1, 1)),
    "conv1d": ({"in_channels": _REQ, "out_channels": _REQ, "kernel_size": _REQ, "stride": 1, "padding": 0,
                "dilation": 1, "groups": 1, "bias": True, "padding_mode": "zeros"}, (1, 1)),
    "max_pool1d": ({"kernel_size": _REQ, "stride": None, "padding": 0, "dilation": 1, "return_indices": False,
                    "ceil_mode": False}, (1, 1)),
    "avg_pool1d": ({"kernel_size": _REQ, "stride": None, "padding": 0, "ceil_mode": False,
                    "count_include_pad": True}, (1, 1)),
    "batch_norm1d": ({"num_features": _REQ, "eps": 1e-5, "momentum": 0.1, "affine": True,
                      "track_running_stats": True}, (1, 1)),
    "gru": ({"input_size": _REQ, "hidden_size": _REQ, "num_layers": 1, "bias": True, "batch_first": False,
             "dropout": 0.0, "bidirectional": False, "select": "output"}, (1, 2)),
    "lstm": ({"input_size": _REQ, "hidden_size": _REQ, "num_layers": 1, "bias": True, "batch_first": False,
              "dropout": 0.0, "bidirectional": False, "proj_size": 0, "select": "output"}, (1, 3)),
    "multi_head_attention": ({"embed_dim": _REQ, "num_heads": _REQ, "dropout": 0.0, "bias": True,
                              "add_bias_kv": False, "add_zero_attn": False, "kdim": None, "vdim": None,
                              "batch_first": False, "causal": False, "masks": "none"}, (1, 5)),
}

# multi_head_attention's `masks` attribute -> the mask inputs that follow q (and k, v), in order
MHA_MASKS = {"none": (), "key_padding_mask": ("key_padding_mask",), "attn_mask": ("attn_mask",),
             "both": ("key_padding_mask", "attn_mask")}


# ----------------------------------------------------------------------------- checks

def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _name_str(v):
    """YAML may read `name: 0` or `inputs: 1` as an int; Tandem reads scalars as text."""
    if _is_int(v):
        return str(v)
    if isinstance(v, str):
        return v
    raise TypeError


# ----------------------------------------------------------------------------- modules

class Block(nn.Module):
    """An nn.Sequential-like container: children under their YAML names, in order.
    Execution is driven by the Model's plan (references may skip around), not by forward."""

    def add_child(self, name, module):
        # Direct insertion: names such as `float` or `train` must not clash with nn.Module methods.
        self._modules[name] = module

    def forward(self, *args):  # pragma: no cover
        raise RuntimeError("blocks are executed through the Model's plan")


class Fn(nn.Module):
    """A parameterless op wrapping a torch function."""

    def __init__(self, fn, desc):
        super().__init__()
        self.fn = fn
        self.desc = desc

    def forward(self, *xs):
        return self.fn(*xs)

    def extra_repr(self):
        return self.desc


class LearnedTensor(nn.Module):
    """parameter: a bare nn.Parameter; buffer (is_buffer): a registered buffer, zeros until
    the weights come. It is registered on the enclosing block under the layer's name (so the
    state_dict name is the layer's path, as Tandem's), and this step returns it; the input it
    reads only orders it."""

    def __init__(self, shape, is_buffer=False, dtype=torch.float32):
        super().__init__()
        self.__dict__["is_buffer"] = is_buffer
        self.__dict__["value"] = torch.zeros(shape, dtype=dtype) if is_buffer else nn.Parameter(torch.randn(shape))
        self.__dict__["owner"] = None  # the block holding the parameter, and its name there

    def forward(self, x):
        block, name = self.__dict__["owner"]
        return (block._buffers if self.__dict__["is_buffer"] else block._parameters)[name]


class LayerNormNoBias(nn.Module):
    """layer_norm with elementwise_affine=true, bias=false (torch >= 2.1's LayerNorm(bias=False)):
    a weight-only affine; the parameter is named `weight` as in torch."""

    def __init__(self, normalized_shape, eps):
        super().__init__()
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(self.normalized_shape))

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, None, self.eps)

    def extra_repr(self):
        return "%s, eps=%s, elementwise_affine=True, bias=False" % (self.normalized_shape, self.eps)


class GRUSelect(nn.GRU):
    """nn.GRU returning one of (output, h_n) by Tandem's `select`; h0 optional."""

    def __init__(self, select, **kw):
        super().__init__(**kw)
        self.select = select

    def forward(self, x, h0=None):
        out, h_n = super().forward(x, h0)
        return out if self.select == "output" else h_n


class LSTMSelect(nn.LSTM):
    """nn.LSTM returning one of (output, h_n, c_n) by Tandem's `select`; (h0, c0) optional."""

    def __init__(self, select, **kw):
        super().__init__(**kw)
        self.select = select

    def forward(self, x, h0=None, c0=None):
        out, (h_n, c_n) = super().forward(x, None if h0 is None else (h0, c0))
        return {"output": out, "h_n": h_n, "c_n": c_n}[self.select]


class MHA(nn.MultiheadAttention):
    """nn.MultiheadAttention called as Tandem's multi_head_attention: inputs q[, k, v] then
    the masks `masks` names; int64 masks become torch's bool (nonzero = masked); `causal`
    adds torch 2's is_causal mask (key after query masked) to attn_mask."""

    def __init__(self, masks, causal, **kw):
        super().__init__(**kw)
        self.mask_names = MHA_MASKS[masks]
        self.causal = causal

    def forward(self, *xs):
        n_masks = len(self.mask_names)
        qkv = xs[:len(xs) - n_masks]
        q, k, v = (qkv[0], qkv[0], qkv[0]) if len(qkv) == 1 else qkv
        m = dict(zip(self.mask_names, xs[len(qkv):]))
        kpm = m.get("key_padding_mask")
        if kpm is not None:
            kpm = kpm != 0
        am = m.get("attn_mask")
        if am is not None and am.dtype == torch.int64:
            am = am != 0
        if self.causal:
            lq, sk = (q.shape[1], k.shape[1]) if self.batch_first else (q.shape[0], k.shape[0])
            c = torch.ones(lq, sk, dtype=torch.bool).triu(1)
            if am is None:
                am = c
            elif am.dtype == torch.bool:
                am = am | c
            else:
                am = am.masked_fill(c, float("-inf"))
        if torch.is_autocast_cpu_enabled() and q is k:
            # torch 1.13's fast path for self-attention (batch_first, no grad) calls
            # _native_multi_head_attention, which refuses autocast's bf16 beside its fp32
            # weights; distinct views of the same tensor take the general path, the same math
            k, v = q.view_as(q), q.view_as(q)
        return super().forward(q, k, v, key_padding_mask=kpm, need_weights=False, attn_mask=am)[0]


class Step:
    """One leaf layer in execution order."""

    def __init__(self, path, op, module, ins, attrs):
        self.path, self.op, self.module, self.ins, self.attrs = path, op, module, ins, attrs

    def __repr__(self):
        return "Step(%s: %s <- %s)" % (self.path, self.op, self.ins)


class Node:
    """What a reference can name: a leaf layer or a block (with children)."""

    def __init__(self, name, out, children=None):
        self.name, self.out, self.children = name, out, children


class ModelSpec:
    """What the oracle learned from the YAML."""

    def __init__(self):
        self.path = None
        self.raw = None
        self.name = None
        self.inputs = collections.OrderedDict()   # name -> {"shape": [...], "dtype": str, "high": int|None}
        self.symbols = []                        # symbols of the input shapes, first-seen order
        self.outputs = collections.OrderedDict()  # output name -> source key
        self.plan = []                           # [Step]
        self.targets = collections.OrderedDict()  # name -> {"shape", "dtype", "high"} (docs/training.md)
        self.loss = None                         # parsed `loss:` (see _parse_loss) or None
        self.train = None                        # parsed `train:` with every default filled, or None

    def input_key(self, name):
        return "input:" + name

    def consumers(self, input_name):
        """[(step, position)] of the leaf layers that read graph input `input_name` directly."""
        key = self.input_key(input_name)
        return [(s, i) for s in self.plan for i, k in enumerate(s.ins) if k == key]

    def bind(self, shape, bindings):
        out = []
        for d in shape:
            if isinstance(d, str):
                if d not in bindings:
                    raise SpecError("symbol %r is not bound" % d)
                out.append(int(bindings[d]))
            else:
                out.append(int(d))
        return out


class Model(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.__dict__["_spec"] = spec  # not a submodule

    @property
    def spec(self):
        return self.__dict__["_spec"]

    def add_child(self, name, module):
        self._modules[name] = module

    def infer_bindings(self, inputs, bindings=None):
        b = dict(bindings or {})
        for name, info in self.spec.inputs.items():
            t = inputs[name]
            if t.dim() != len(info["shape"]):
                raise SpecError("input %r: expected rank %d, got shape %s" % (name, len(info["shape"]), list(t.shape)))
            for d, n in zip(info["shape"], t.shape):
                if isinstance(d, str):
                    if d in b and int(b[d]) != n:
                        raise SpecError("input %r: symbol %r is %d here but %d elsewhere" % (name, d, n, b[d]))
                    b[d] = int(n)
                elif d != n:
                    raise SpecError("input %r: expected shape %s, got %s" % (name, info["shape"], list(t.shape)))
        return b

    def forward(self, inputs, bindings=None):
        vals = self.values(inputs, bindings)
        return collections.OrderedDict((name, vals[key]) for name, key in self.spec.outputs.items())

    def values(self, inputs, bindings=None):
        """Every tensor of one forward pass by key ("input:NAME", "layer:PATH"); what
        loss_fn reads its input from."""
        spec = self.spec
        missing = [n for n in spec.inputs if n not in inputs]
        extra = [n for n in inputs if n not in spec.inputs]
        if missing or extra:
            raise SpecError("inputs: missing %s, unexpected %s" % (missing, extra))
        for n, info in spec.inputs.items():
            want = torch.int64 if info["dtype"] == "int64" else torch.float32
            # float64 for a float32 input: the oracle's double-precision mode (model.double(), finite differences)
            if inputs[n].dtype != want and not (want == torch.float32 and inputs[n].dtype == torch.float64):
                raise SpecError("input %r: expected %s, got %s" % (n, want, inputs[n].dtype))
        b = self.infer_bindings(inputs, bindings)
        vals = {spec.input_key(n): inputs[n] for n in spec.inputs}
        for step in spec.plan:
            xs = [vals[k] for k in step.ins]
            if step.op == "reshape":
                y = torch.reshape(xs[0], spec.bind(step.attrs["shape"], b))
            elif step.op == "expand":
                y = xs[0].expand(*spec.bind(step.attrs["shape"], b))
            else:
                y = step.module(*xs)
            vals["layer:" + step.path] = y
        return vals


# ----------------------------------------------------------------------------- builder

class _Builder:
    def __init__(self, doc, where):
        self.doc = doc
        self.where = where
        self.spec = ModelSpec()
        self.module_defs = {}

    def err(self, path, msg):
        return SpecError("%s: layer '%s': %s" % (self.where, path, msg))

    # -- top level
    def build(self):
        doc, spec = self.doc, self.spec
        if not isinstance(doc, dict):
            raise SpecError("%s: the document must be a mapping" % self.where)
        unknown = set(doc) - TOP_KEYS - IGNORED_TOP_KEYS
        if unknown:
            raise SpecError("%s: unknown top-level key(s) %s" % (self.where, sorted(unknown)))
        for k in ("name", "inputs", "layers"):
            if k not in doc:
                raise SpecError("%s: missing required key '%s'" % (self.where, k))
        if not isinstance(doc["name"], str) or not doc["name"]:
            raise SpecError("%s: 'name' must be a non-empty string" % self.where)
        spec.name = doc["name"]
        self._parse_inputs(doc["inputs"])
        mods = doc.get("modules") or {}
        if not isinstance(mods, dict):
            raise SpecError("%s: 'modules' must be a mapping" % self.where)
        for mname, mdef in mods.items():
            if not isinstance(mdef, dict) or set(mdef) != {"layers"}:
                raise SpecError("%s: module '%s' must be a mapping with exactly the key 'layers'" % (self.where, mname))
            self.module_defs[str(mname)] = mdef
        model = Model(spec)
        graph_inputs = [spec.input_key(n) for n in spec.inputs]
        top_scope, last_name = self._build_list(doc["layers"], model, "", [], graph_inputs, (), False)
        self._parse_outputs(doc.get("outputs"), top_scope, last_name)
        if "targets" in doc:
            self._parse_inputs(doc["targets"], "targets", spec.targets)
            both = set(spec.targets) & set(spec.inputs)
            if both:
                raise SpecError("%s: %s named both in inputs and targets" % (self.where, sorted(both)))
        if "loss" in doc:
            spec.loss = _parse_loss(self, doc["loss"], top_scope)
        if "train" in doc:
            spec.train = _parse_train(self.where, doc["train"])
        return model

    def _parse_inputs(self, inputs, what="inputs", into=None):
        spec = self.spec
        into = spec.inputs if into is None else into
        kind = what[:-1]
        if not isinstance(inputs, dict) or not inputs:
            raise SpecError("%s: '%s' must be a non-empty mapping" % (self.where, what))
        for name, info in inputs.items():
            name = _name_str(name)
            if not _NAME_RE.match(name):
                raise SpecError("%s: %s name %r is not letters, digits and _" % (self.where, kind, name))
            if not isinstance(info, dict) or "shape" not in info or set(info) - {"shape", "dtype", "high"}:
                raise SpecError("%s: %s '%s' must be {shape, dtype, high}" % (self.where, kind, name))
            shape = info["shape"]
            if not isinstance(shape, list):
                raise SpecError("%s: %s '%s': shape must be a list" % (self.where, kind, name))
            for d in shape:
                if _is_int(d):
                    if d <= 0:
                        raise SpecError("%s: %s '%s': dimension %d is not positive" % (self.where, kind, name, d))
                elif not (isinstance(d, str) and _SYMBOL_RE.match(d)):
                    raise SpecError("%s: %s '%s': bad dimension %r" % (self.where, kind, name, d))
                elif d not in spec.symbols:
                    spec.symbols.append(d)
            dtype = info.get("dtype", "float32")
            if dtype not in ("float32", "int64"):
                raise SpecError("%s: %s '%s': dtype must be float32 or int64" % (self.where, kind, name))
            high = info.get("high")
            if high is not None and (dtype != "int64" or not _is_int(high) or high <= 0):
                raise SpecError("%s: %s '%s': high must be a positive int on an int64 input" % (self.where, kind, name))
            into[name] = {"shape": list(shape), "dtype": dtype, "high": high}

    def _parse_outputs(self, outputs, top_scope, last_name):
        spec = self.spec
        chain = [top_scope]
        if outputs is None:
            spec.outputs[last_name] = top_scope[last_name].out
        elif isinstance(outputs, list):
            if not outputs:
                raise SpecError("%s: 'outputs' is empty" % self.where)
            for ref in outputs:
                ref = self._ref_str(ref, "outputs")
                if ref in spec.outputs:
                    raise SpecError("%s: output %r listed twice" % (self.where, ref))
                spec.outputs[ref] = self._resolve(ref, chain, "outputs")
        elif isinstance(outputs, dict):
            if not outputs:
                raise SpecError("%s: 'outputs' is empty" % self.where)
            for oname, ref in outputs.items():
                spec.outputs[_name_str(oname)] = self._resolve(self._ref_str(ref, "outputs"), chain, "outputs")
        else:
            raise SpecError("%s: 'outputs' must be a list or a mapping" % self.where)

    # -- references
    def _ref_str(self, ref, path):
        try:
            ref = _name_str(ref)
        except TypeError:
            raise self.err(path, "a reference must be a string, got %r" % (ref,))
        if not ref or any(not p for p in ref.split(".")):
            raise self.err(path, "bad reference %r" % ref)
        return ref

    def _resolve(self, ref, chain, path):
        parts = ref.split(".")
        for scope in chain:  # innermost first; each scope holds only the earlier siblings
            if parts[0] in scope:
                node = scope[parts[0]]
                for i, p in enumerate(parts[1:], 1):
                    if node.children is None:
                        raise self.err(path, "reference %r: '%s' is not a block" % (ref, ".".join(parts[:i])))
                    if p not in node.children:
                        raise self.err(path, "reference %r: '%s' has no layer '%s'" % (ref, ".".join(parts[:i]), p))
                    node = node.children[p]
                return node.out
        if len(parts) == 1 and ref in self.spec.inputs:
            return self.spec.input_key(ref)
        raise self.err(path, "reference %r names no earlier layer and no graph input" % ref)

    # -- layers
    def _build_list(self, layers, parent, prefix, chain, block_inputs, module_stack, in_dp):
        if not isinstance(layers, list) or not layers:
            raise self.err(prefix or "<top>", "'layers' must be a non-empty list")
        scope = collections.OrderedDict()
        prev = block_inputs
        name = None
        for i, layer in enumerate(layers):
            if not isinstance(layer, dict):
                raise self.err(prefix + str(i), "a layer must be a mapping")
            name = layer.get("name", str(i))
            try:
                name = _name_str(name)
            except TypeError:
                raise self.err(prefix + str(i), "bad name %r" % (name,))
            path = prefix + name
            if not _NAME_RE.match(name):
                raise self.err(path, "name %r is not letters, digits and _" % name)
            if name in scope:
                raise self.err(path, "duplicate name %r" % name)
            node, module = self._build_layer(layer, name, path, [scope] + chain, prev, module_stack, in_dp)
            scope[name] = node
            if isinstance(module, LearnedTensor):  # the parameter itself sits in the block, the step reads it
                table = parent._buffers if module.__dict__["is_buffer"] else parent._parameters
                table[name] = module.__dict__["value"]
                module.__dict__["owner"] = (parent, name)
            else:
                parent.add_child(name, module)
            prev = [node.out]
        return scope, name

    def _check_device(self, path, dev, what):
        if not isinstance(dev, str) or not _DEVICE_RE.match(dev):
            raise self.err(path, "%s: bad device %r" % (what, dev))

    def _check_placement(self, layer, path, in_dp):
        if "device" in layer:
            self._check_device(path, layer["device"], "device")
        dp = layer.get("data_parallel")
        if "data_parallel" not in layer:
            return in_dp
        if in_dp:
            raise self.err(path, "data_parallel inside data_parallel")
        if not isinstance(dp, dict) or set(dp) - {"devices", "output_device", "dim", "chunk_sizes", "chunking"}:
            raise self.err(path, "data_parallel must be {devices, output_device, dim, chunk_sizes, chunking}")
        if dp.get("chunking", "equal") not in ("equal", "memory"):
            raise self.err(path, "data_parallel.chunking must be equal or memory")
        devs = dp.get("devices")
        if not isinstance(devs, list) or not devs:
            raise self.err(path, "data_parallel.devices must be a non-empty list")
        norm = []
        for d in devs:
            self._check_device(path, d, "data_parallel.devices")
            if not d.startswith("cuda"):
                raise self.err(path, "data_parallel.devices must be cuda devices")
            norm.append("cuda:0" if d == "cuda" else d)
        if len(set(norm)) != len(norm):
            raise self.err(path, "data_parallel.devices are not distinct")
        if "output_device" in dp:
            self._check_device(path, dp["output_device"], "data_parallel.output_device")
        if "dim" in dp and not _is_int(dp["dim"]):
            raise self.err(path, "data_parallel.dim must be an int")
        if "chunk_sizes" in dp:
            cs = dp["chunk_sizes"]
            if not isinstance(cs, list) or len(cs) != len(devs) or not all(_is_int(c) and c > 0 for c in cs):
                raise self.err(path, "data_parallel.chunk_sizes must be one positive int per device")
        return True

    def _build_layer(self, layer, name, path, chain, default_inputs, module_stack, in_dp):
        kinds = [k for k in ("op", "layers", "module") if k in layer]
        if len(kinds) != 1:
            raise self.err(path, "exactly one of op, layers, module must be present")
        kind = kinds[0]
        in_dp = self._check_placement(layer, path, in_dp)
        if "inputs" in layer:
            refs = layer["inputs"]
            if not isinstance(refs, list):
                refs = [refs]
            if not refs:
                raise self.err(path, "'inputs' is empty")
            ins = [self._resolve(self._ref_str(r, path), chain, path) for r in refs]
        else:
            ins = list(default_inputs)

        if kind == "op":
            if "repeat" in layer:
                raise self.err(path, "repeat is only allowed on a block or module use")
            return self._build_leaf(layer, path, ins)

        extra = set(layer) - LAYER_KEYS
        if extra:
            raise self.err(path, "unknown key(s) %s on a block" % sorted(extra))
        if "init" in layer:
            raise self.err(path, "init applies to a leaf layer (an op), not to a block")
        if kind == "layers":
            layers = layer["layers"]
        else:
            mname = layer["module"]
            if not isinstance(mname, str) or mname not in self.module_defs:
                raise self.err(path, "unknown module %r" % (mname,))
            if mname in module_stack:
                raise self.err(path, "module %r uses itself" % mname)
            layers = self.module_defs[mname]["layers"]
            module_stack = module_stack + (mname,)

        if "repeat" not in layer:
            block = Block()
            scope, last = self._build_list(layers, block, path + ".", chain, ins, module_stack, in_dp)
            return Node(name, scope[last].out, scope), block

        n = layer["repeat"]
        if not _is_int(n) or n < 1:
            raise self.err(path, "repeat must be a positive int")
        outer = Block()
        outer_scope = collections.OrderedDict()
        prev = ins
        for k in range(n):
            inner = Block()
            scope, last = self._build_list(layers, inner, "%s.%d." % (path, k), [outer_scope] + chain,
                                           prev, module_stack, in_dp)
            outer.add_child(str(k), inner)
            outer_scope[str(k)] = Node(str(k), scope[last].out, scope)
            prev = [scope[last].out]
        return Node(name, prev[0], outer_scope), outer

    def _build_leaf(self, layer, path, ins):
        op = layer["op"]
        if op not in OPS:
            raise self.err(path, "unknown op %r" % (op,))
        defaults, (lo, hi) = OPS[op]
        given = {k: v for k, v in layer.items() if k not in LAYER_KEYS}
        unknown = set(given) - set(defaults)
        if unknown:
            raise self.err(path, "op %s has no attribute(s) %s" % (op, sorted(unknown)))
        a = {}
        for k, d in defaults.items():
            if k in given:
                a[k] = given[k]
            elif d is _REQ:
                raise self.err(path, "op %s needs attribute '%s'" % (op, k))
            else:
                a[k] = d
        if len(ins) < lo or (hi is not None and len(ins) > hi):
            want = str(lo) if lo == hi else ("%d or more" % lo if hi is None else "%d to %d" % (lo, hi))
            raise self.err(path, "op %s takes %s input(s), got %d" % (op, want, len(ins)))
        module = self._make_op(op, a, path)
        if "init" in layer:
            self._init(module, layer["init"], path)
        self.spec.plan.append(Step(path, op, module, ins, a))
        return Node(path.rsplit(".", 1)[-1], "layer:" + path), module

    def _init(self, module, init, path):
        """`init: {weight: {uniform: [a, b]}, bias: zeros}`: torch.nn.init's uniform_, normal_,
        zeros_, ones_ on those parameters, after the module's own init (the whole tensor)."""
        params = dict(module.named_parameters())
        params.update((n, b) for n, b in module.named_buffers() if b.dtype == torch.float32)
        if not isinstance(init, dict) or not init:
            raise self.err(path, "init must map parameter names to distributions")
        for name, dist in init.items():
            if name not in params:
                raise self.err(path, "init: no parameter %r (has %s)" % (name, ", ".join(params)))
            t = params[name]
            with torch.no_grad():
                if dist == "zeros":
                    nn.init.zeros_(t)
                elif dist == "ones":
                    nn.init.ones_(t)
                elif isinstance(dist, dict) and len(dist) == 1 and set(dist) <= {"uniform", "normal"}:
                    (kind, ab), = dist.items()
                    if not (isinstance(ab, list) and len(ab) == 2 and all(_is_num(v) for v in ab)):
                        raise self.err(path, "init of %r: %s takes two numbers" % (name, kind))
                    if kind == "uniform":
                        self._need(path, ab[0] <= ab[1], "init of %r: uniform needs low <= high" % name)
                        nn.init.uniform_(t, ab[0], ab[1])
                    else:
                        self._need(path, ab[1] >= 0, "init of %r: normal needs std >= 0" % name)
                        nn.init.normal_(t, ab[0], ab[1])
                else:
                    raise self.err(path, "init of %r must be zeros, ones, {uniform: [a, b]} or {normal: [mean, std]}"
                                   % name)

    def _need(self, path, cond, msg):
        if not cond:
            raise self.err(path, msg)

    def _make_op(self, op, a, path):
        need = lambda cond, msg: self._need(path, cond, msg)  # noqa: E731
        pos = lambda k: need(_is_int(a[k]) and a[k] > 0, "%s must be a positive int" % k)  # noqa: E731
        boolean = lambda k: need(isinstance(a[k], bool), "%s must be true or false" % k)  # noqa: E731
        integer = lambda k: need(_is_int(a[k]), "%s must be an int" % k)  # noqa: E731
        number = lambda k: need(_is_num(a[k]), "%s must be a number" % k)  # noqa: E731

        if op == "linear":
            pos("in_features"), pos("out_features"), boolean("bias")
            return nn.Linear(a["in_features"], a["out_features"], bias=a["bias"])
        if op in ("embedding", "embedding_bag"):
            pos("num_embeddings"), pos("embedding_dim"), number("norm_type")
            boolean("scale_grad_by_freq"), boolean("sparse")
            need(a["max_norm"] is None, "max_norm is not supported (null only)")
            p = a["padding_idx"]
            n = a["num_embeddings"]
            if p is not None:
                need(_is_int(p) and -n <= p < n, "padding_idx must be an int in [-num_embeddings, num_embeddings)")
            # sparse: torch's gradient is a sparse tensor (SGD then updates only the rows
            # looked up); Tandem's is kept as those rows too (docs/training.md)
            # scale_grad_by_freq: each lookup's gradient divided by its index's count in the batch
            if op == "embedding":
                return nn.Embedding(n, a["embedding_dim"], padding_idx=p, sparse=a["sparse"],
                                    scale_grad_by_freq=a["scale_grad_by_freq"])
            need(a["mode"] in ("sum", "mean", "max"), "mode must be sum, mean or max")
            need(not (a["scale_grad_by_freq"] and a["mode"] == "max"), "scale_grad_by_freq does not apply to mode max")
            boolean("include_last_offset")
            bag = FreqScaledEmbeddingBag if a["scale_grad_by_freq"] else nn.EmbeddingBag
            return bag(n, a["embedding_dim"], mode=a["mode"], padding_idx=p,
                       include_last_offset=a["include_last_offset"], sparse=a["sparse"])
        if op == "relu":
            boolean("inplace")
            return nn.ReLU()
        if op == "gelu":
            need(a["approximate"] in ("none", "tanh"), "approximate must be none or tanh")
            return nn.GELU(approximate=a["approximate"])
        if op == "tanh":
            return nn.Tanh()
        if op == "sigmoid":
            return nn.Sigmoid()
        if op in _PLAIN_ACTIVATIONS:  # their inplace changes nothing that Tandem computes
            boolean("inplace")
            return _PLAIN_ACTIVATIONS[op]()
        if op in ("sum", "mean", "amax", "amin"):
            boolean("keepdim")
            dim = a["dim"]
            need(dim is None or _is_int(dim) or (isinstance(dim, list) and all(_is_int(d) for d in dim)),
                 "dim must be null, an int or a list of ints")
            fn, keepdim = getattr(torch, op), a["keepdim"]
            if dim is None:  # every dimension; torch.amax has no dim=None, and an empty list means all
                return Fn(lambda x: fn(x, dim=tuple(range(x.dim())), keepdim=keepdim), "%s keepdim=%s" % (op, keepdim))
            dims = tuple(dim) if isinstance(dim, list) else dim
            return Fn(lambda x: fn(x, dim=dims, keepdim=keepdim), "%s dim=%s keepdim=%s" % (op, dims, keepdim))
        if op == "softmax":
            integer("dim")
            return nn.Softmax(dim=a["dim"])
        if op == "log_softmax":
            integer("dim")
            return nn.LogSoftmax(dim=a["dim"])
        if op == "normalize":
            integer("dim"), number("p"), number("eps")
            need(a["p"] == 2, "p must be 2")
            dim, eps = a["dim"], float(a["eps"])
            return Fn(lambda x: F.normalize(x, p=2.0, dim=dim, eps=eps), "dim=%d, eps=%g" % (dim, eps))
        if op == "exp":
            return Fn(torch.exp, "exp")
        if op == "clamp":
            need(a["min"] is not None or a["max"] is not None, "clamp needs min or max")
            low, high = a["min"], a["max"]
            return Fn(lambda x: torch.clamp(x, min=low, max=high), "min=%s, max=%s" % (low, high))
        if op == "layer_norm":
            s = a["normalized_shape"]
            shape = [s] if _is_int(s) else s
            need(isinstance(shape, list) and shape and all(_is_int(d) and d > 0 for d in shape),
                 "normalized_shape must be a positive int or a non-empty list of them")
            number("eps"), boolean("elementwise_affine"), boolean("bias")
            need(a["eps"] >= 0, "eps must be >= 0")
            if a["elementwise_affine"] and not a["bias"]:
                return LayerNormNoBias(shape, float(a["eps"]))
            return nn.LayerNorm(shape, eps=float(a["eps"]), elementwise_affine=a["elementwise_affine"])
        if op == "dropout":
            number("p"), boolean("inplace")
            need(0 <= a["p"] <= 1, "p must be in [0, 1]")
            return nn.Dropout(p=float(a["p"]))
        if op == "stochastic_depth":
            number("p")
            need(0 <= a["p"] <= 1, "p must be in [0, 1]")
            need(a["mode"] in ("row", "batch"), "mode must be row or batch")
            from torchvision.ops import StochasticDepth  # Debian's python3-torchvision
            return StochasticDepth(float(a["p"]), a["mode"])
        if op == "add":
            number("alpha")
            alpha = a["alpha"]
            return Fn(lambda x, y: torch.add(x, y, alpha=alpha), "alpha=%s" % alpha)
        if op == "mul":
            return Fn(torch.mul, "mul")
        if op == "cat":
            integer("dim")
            dim = a["dim"]
            return Fn(lambda *xs: torch.cat(xs, dim=dim), "dim=%d" % dim)
        if op == "narrow":
            integer("dim"), integer("start"), integer("length")
            need(a["start"] >= 0 and a["length"] >= 1, "start must be >= 0 and length >= 1")
            dim, start, length = a["dim"], a["start"], a["length"]
            return Fn(lambda x: torch.narrow(x, dim, start, length).clone(), "dim=%d start=%d length=%d" % (dim, start, length))
        if op == "flatten":
            integer("start_dim"), integer("end_dim")
            return nn.Flatten(a["start_dim"], a["end_dim"])
        if op == "reshape":
            s = a["shape"]
            need(isinstance(s, list) and s, "shape must be a non-empty list")
            for d in s:
                if _is_int(d):
                    need(d > 0 or d == -1, "shape entries must be positive, -1 or symbols")
                else:
                    need(isinstance(d, str) and d in self.spec.symbols,
                         "shape entry %r is not an int or a symbol of the inputs" % (d,))
            need(sum(1 for d in s if d == -1) <= 1, "shape has more than one -1")
            return Fn(torch.reshape, "shape=%s" % s)  # the plan binds the symbols
        if op == "permute":
            d = a["dims"]
            dims = [d] if _is_int(d) else d
            need(isinstance(dims, list) and all(_is_int(v) for v in dims), "dims must be an int or a list of ints")
            return Fn(lambda x: x.permute(*dims).contiguous(), "dims=%s" % dims)
        if op == "pad":
            p = [a["pad"]] if _is_int(a["pad"]) else a["pad"]
            need(isinstance(p, list) and len(p) % 2 == 0 and all(_is_int(v) for v in p),
                 "pad must be a list of an even number of ints")
            need(a["mode"] == "constant", "mode must be constant"), number("value")
            return Fn(lambda x: F.pad(x, p, value=float(a["value"])), "pad=%s, value=%s" % (p, a["value"]))
        if op == "roll":
            ints = lambda v: [v] if _is_int(v) else v  # noqa: E731
            shifts, dims = ints(a["shifts"]), a["dims"]
            if dims is None:
                need(len(shifts) == 1, "shifts without dims must be one shift")
                return Fn(lambda x: torch.roll(x, shifts[0]), "shifts=%s" % shifts)
            dims = ints(dims)
            need(len(dims) == len(shifts), "shifts and dims must have as many entries")
            return Fn(lambda x: torch.roll(x, shifts, dims), "shifts=%s, dims=%s" % (shifts, dims))
        if op == "interpolate":
            need((a["size"] is None) != (a["scale_factor"] is None), "give one of size and scale_factor")
            need(a["mode"] in ("nearest", "bilinear"), "mode must be nearest or bilinear"), boolean("align_corners")
            kw = {"mode": a["mode"]}
            if a["mode"] == "bilinear":
                kw["align_corners"] = a["align_corners"]
            if a["size"] is not None:
                kw["size"] = a["size"]
            else:
                number("scale_factor")
                kw["scale_factor"] = float(a["scale_factor"])
            return Fn(lambda x: F.interpolate(x, **kw), ", ".join("%s=%s" % kv for kv in kw.items()))
        if op == "expand":
            s = a["shape"]
            need(isinstance(s, list) and s, "shape must be a non-empty list")
            for d in s:
                need((_is_int(d) and (d >= 0 or d == -1)) or (isinstance(d, str) and d in self.spec.symbols),
                     "shape entries must be sizes, -1 or symbols of the inputs")
            return Fn(lambda x: x, "shape=%s" % s)  # the plan expands, binding the symbols
        if op == "parameter":
            s = a["shape"]
            s = [s] if _is_int(s) else s
            need(isinstance(s, list) and s and all(_is_int(d) and d >= 1 for d in s), "shape must list positive sizes")
            return LearnedTensor(s)
        if op == "buffer":
            s = a["shape"]
            s = [s] if _is_int(s) else s
            need(isinstance(s, list) and s and all(_is_int(d) and d >= 1 for d in s), "shape must list positive sizes")
            need(a["dtype"] in ("float32", "int64"), "dtype must be float32 or int64")
            return LearnedTensor(s, True, torch.int64 if a["dtype"] == "int64" else torch.float32)
        if op == "scale":
            number("factor"), number("shift")
            factor, shift = float(a["factor"]), float(a["shift"])
            if shift == 0:
                return Fn(lambda x: x * factor, "factor=%s" % factor)
            return Fn(lambda x: x * factor + shift, "factor=%s, shift=%s" % (factor, shift))
        if op == "index_select":
            integer("dim")
            dim = a["dim"]
            return Fn(lambda x, index: torch.index_select(x, dim, index), "dim=%d" % dim)
        if op == "matmul":
            return Fn(torch.matmul, "matmul")
        if op in ("conv2d", "max_pool2d", "avg_pool2d"):
            def pair(k, lo, words=()):
                v = a[k]
                if isinstance(v, str) and v in words:
                    return v
                need((_is_int(v) and v >= lo) or (isinstance(v, list) and len(v) == 2
                                                  and all(_is_int(d) and d >= lo for d in v)),
                     "%s must be an int >= %d or a list of two" % (k, lo))
                return v if _is_int(v) else tuple(v)
            k = pair("kernel_size", 1)
            stride = None if a["stride"] is None else pair("stride", 1)
            if op == "conv2d":
                pos("in_channels"), pos("out_channels"), pos("groups"), boolean("bias")
                need(a["in_channels"] % a["groups"] == 0, "in_channels must be divisible by groups")
                need(a["out_channels"] % a["groups"] == 0, "out_channels must be divisible by groups")
                need(a["padding_mode"] == "zeros", "padding_mode must be zeros")
                return nn.Conv2d(a["in_channels"], a["out_channels"], k, stride=stride, padding=pair("padding", 0, ("same", "valid")),
                                 dilation=pair("dilation", 1), groups=a["groups"], bias=a["bias"])
            boolean("ceil_mode")
            if op == "max_pool2d":
                need(a["return_indices"] is False, "return_indices must be false")
                return nn.MaxPool2d(k, stride=stride, padding=pair("padding", 0), dilation=pair("dilation", 1),
                                    ceil_mode=a["ceil_mode"])
            boolean("count_include_pad")
            return nn.AvgPool2d(k, stride=stride, padding=pair("padding", 0), ceil_mode=a["ceil_mode"],
                                count_include_pad=a["count_include_pad"])
        if op in ("conv1d", "max_pool1d", "avg_pool1d"):
            def single(k, lo, words=()):
                v = a[k]
                if isinstance(v, str) and v in words:
                    return v
                need((_is_int(v) and v >= lo) or (isinstance(v, list) and len(v) == 1 and _is_int(v[0]) and v[0] >= lo),
                     "%s must be an int >= %d or a list of one" % (k, lo))
                return v if _is_int(v) else v[0]
            k = single("kernel_size", 1)
            stride = None if a["stride"] is None else single("stride", 1)
            if op == "conv1d":
                pos("in_channels"), pos("out_channels"), pos("groups"), boolean("bias")
                need(a["in_channels"] % a["groups"] == 0, "in_channels must be divisible by groups")
                need(a["out_channels"] % a["groups"] == 0, "out_channels must be divisible by groups")
                need(a["padding_mode"] == "zeros", "padding_mode must be zeros")
                return nn.Conv1d(a["in_channels"], a["out_channels"], k, stride=stride,
                                 padding=single("padding", 0, ("same", "valid")), dilation=single("dilation", 1),
                                 groups=a["groups"], bias=a["bias"])
            boolean("ceil_mode")
            if op == "max_pool1d":
                need(a["return_indices"] is False, "return_indices must be false")
                return nn.MaxPool1d(k, stride=stride, padding=single("padding", 0), dilation=single("dilation", 1),
                                    ceil_mode=a["ceil_mode"])
            boolean("count_include_pad")
            return nn.AvgPool1d(k, stride=stride, padding=single("padding", 0), ceil_mode=a["ceil_mode"],
                                count_include_pad=a["count_include_pad"])
        if op in ("batch_norm2d", "batch_norm1d"):
            pos("num_features"), number("eps"), boolean("affine"), boolean("track_running_stats")
            need(a["momentum"] is None or _is_num(a["momentum"]), "momentum must be a number or null")
            norm = nn.BatchNorm2d if op == "batch_norm2d" else nn.BatchNorm1d
            return norm(a["num_features"], eps=float(a["eps"]), momentum=a["momentum"], affine=a["affine"],
                        track_running_stats=a["track_running_stats"])
        if op in ("gru", "lstm"):
            pos("input_size"), pos("hidden_size"), pos("num_layers"), number("dropout")
            boolean("bias"), boolean("batch_first"), boolean("bidirectional")
            kw = dict(input_size=a["input_size"], hidden_size=a["hidden_size"], num_layers=a["num_layers"],
                      bias=a["bias"], batch_first=a["batch_first"], dropout=float(a["dropout"]),
                      bidirectional=a["bidirectional"])
            if op == "gru":
                need(a["select"] in ("output", "h_n"), "select must be output or h_n")
                return GRUSelect(a["select"], **kw)
            need(a["select"] in ("output", "h_n", "c_n"), "select must be output, h_n or c_n")
            need(a["proj_size"] == 0, "proj_size must be 0")
            return LSTMSelect(a["select"], **kw)
        if op == "multi_head_attention":
            pos("embed_dim"), pos("num_heads"), number("dropout"), boolean("bias"), boolean("batch_first")
            boolean("causal")
            need(a["masks"] in MHA_MASKS, "masks must be one of %s" % ", ".join(MHA_MASKS))
            need(not a["add_bias_kv"] and not a["add_zero_attn"], "add_bias_kv and add_zero_attn must be false")
            need(a["kdim"] in (None, a["embed_dim"]) and a["vdim"] in (None, a["embed_dim"]),
                 "kdim and vdim must be null or embed_dim")
            return MHA(a["masks"], a["causal"], embed_dim=a["embed_dim"], num_heads=a["num_heads"],
                       dropout=float(a["dropout"]), bias=a["bias"], batch_first=a["batch_first"])
        raise AssertionError(op)


# ----------------------------------------------------------------------------- public API

def load_spec_doc(yaml_path):
    import yaml
    with open(yaml_path) as f:
        return yaml.safe_load(f)


def build_model(yaml_path, doc=None):
    """Returns (model in eval mode, ModelSpec). Parameters are torch's default init under
    the current torch RNG state (call torch.manual_seed first for reproducibility)."""
    if doc is None:
        doc = load_spec_doc(yaml_path)
    b = _Builder(doc, str(yaml_path))
    model = b.build()
    b.spec.path = os.path.abspath(str(yaml_path))
    b.spec.raw = doc
    model.eval()
    return model, b.spec


def load_spec(yaml_path):
    return build_model(yaml_path)[1]


def _symbol_ranges(spec, batch, others):
    """Per-symbol (lo, hi): `others` by default; >= 2 where the symbol sizes an
    include_last_offset offsets input (at least one bag); and shifted up by batch - 1 where
    it sizes the 1-D indices of an offsets-style embedding_bag (about as many indices as
    bags or more, so that not every bag is empty)."""
    ranges = {}
    for name, info in spec.inputs.items():
        for step, pos in spec.consumers(name):
            if step.op != "embedding_bag" or len(step.ins) != 2:
                continue
            for d in info["shape"]:
                if not isinstance(d, str) or d == "batch":
                    continue
                lo, hi = ranges.get(d, others)
                if pos == 1 and step.attrs["include_last_offset"]:
                    lo = max(lo, 2)
                if pos == 0:
                    lo, hi = max(lo, others[0] + batch - 1), max(hi, others[1] + batch - 1)
                ranges[d] = (lo, max(lo, hi))
    return ranges


def draw_bindings(spec, rng, batch, others=(1, 12)):
    """batch -> `batch`; every other symbol -> rng.randint in `others` (1..12), adjusted as
    _symbol_ranges says for the symbols that size an embedding_bag's indices or offsets."""
    ranges = _symbol_ranges(spec, batch, others)
    b = {}
    for s in spec.symbols:
        if s == "batch":
            b[s] = int(batch)
        else:
            b[s] = rng.randint(*ranges.get(s, others))
    return b


def _index_info(spec, name):
    """For an int64 input: (high, [padding_idx normalised]) from `high:` or the consumers."""
    info = spec.inputs[name]
    highs, pads = [], []
    for step, pos in spec.consumers(name):
        if step.op in ("embedding", "embedding_bag") and pos == 0:
            n = step.attrs["num_embeddings"]
            highs.append(n)
            p = step.attrs["padding_idx"]
            if p is not None:
                pads.append(p + n if p < 0 else p)
        if step.op == "multi_head_attention" and pos >= 1:
            highs.append(2)
    high = info["high"] if info["high"] is not None else (min(highs) if highs else None)
    return high, pads


def _is_attention_mask(spec, name):
    return any(s.op == "multi_head_attention" and p >= 1 for s, p in spec.consumers(name))


def draw_inputs(spec, bindings, gen, pad_prob=0.2):
    """Random inputs for the bound shapes. float32: randn. int64 indices: uniform in
    [0, high), with each consumer's padding_idx mixed in at rate pad_prob. int64 offsets
    (2nd input of an embedding_bag): 0 first, sorted, each <= the number of indices
    (empty bags happen); with include_last_offset the last one is the number of indices."""
    out = collections.OrderedDict()
    offsets_of = {}
    for name, info in spec.inputs.items():
        shape = spec.bind(info["shape"], bindings)
        if info["dtype"] == "float32":
            out[name] = torch.randn(shape, generator=gen)
            continue
        offs = [(s, p) for s, p in spec.consumers(name) if s.op == "embedding_bag" and p == 1]
        if offs:
            offsets_of[name] = (offs[0][0], shape)
            continue
        high, pads = _index_info(spec, name)
        if high is None:
            raise SpecError("int64 input %r has no `high:` and feeds no embedding" % name)
        t = torch.randint(0, high, shape, generator=gen, dtype=torch.int64)
        if _is_attention_mask(spec, name) and t.numel():
            t[..., 0] = 0  # key 0 stays visible: a fully masked row is NaN in torch
        for p in pads:
            if p < high and t.numel():
                mask = torch.rand(shape, generator=gen) < pad_prob
                t[mask] = p
        out[name] = t
    for name, (step, shape) in offsets_of.items():
        idx_key = step.ins[0]
        if not idx_key.startswith("input:") or idx_key[6:] not in out:
            raise SpecError("offsets input %r: the indices of '%s' are not a graph input" % (name, step.path))
        n_idx = out[idx_key[6:]].numel()
        m = 1
        for d in shape:
            m *= d
        if step.attrs["include_last_offset"]:
            if m == 1:
                vals = [0]
            else:
                mid = torch.randint(0, n_idx + 1, (m - 2,), generator=gen).sort().values.tolist()
                vals = [0] + mid + [n_idx]
        else:
            mid = torch.randint(0, n_idx + 1, (m - 1,), generator=gen).sort().values.tolist()
            vals = [0] + mid
        out[name] = torch.tensor(vals, dtype=torch.int64).reshape(shape)
    # keep the declared order
    return collections.OrderedDict((n, out[n]) for n in spec.inputs)


def linear_flops(model, inputs):
    """2*M*K*N summed over the linear layers for one forward of `inputs`."""
    total = [0]

    def hook(mod, args, _out):
        x = args[0]
        m = x.numel() // x.shape[-1] if x.dim() else 1
        total[0] += 2 * m * mod.in_features * mod.out_features

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, nn.Linear)]
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        for h in handles:
            h.remove()
    return total[0]


# ----------------------------------------------------------------------------- training (docs/training.md)

LOSS_OPS = ("cross_entropy", "nll_loss", "mse_loss", "binary_cross_entropy_with_logits")
CLASS_LOSSES = ("cross_entropy", "nll_loss")
LOSS_KEYS = {"op", "input", "target", "reduction", "ignore_index", "label_smoothing", "parallel"}
TRAIN_KEYS = {"epochs", "batch", "shuffle", "drop_last", "seed", "validation_split", "optimizer", "optimizer_groups",
              "schedule", "clip_grad_norm", "data"}
# optimizer name -> its keys with defaults
OPTIMIZERS = {
    "sgd": {"lr": 0.01, "momentum": 0.0, "dampening": 0.0, "nesterov": False, "weight_decay": 0.0},
    "adam": {"lr": 0.001, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0},
    "adamw": {"lr": 0.001, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01},
    "adagrad": {"lr": 0.01, "lr_decay": 0.0, "weight_decay": 0.0, "initial_accumulator_value": 0.0, "eps": 1e-10},
    "rowwise_adagrad": {"lr": 0.01, "lr_decay": 0.0, "initial_accumulator_value": 0.0, "eps": 1e-10},
    "sparse_adam": {"lr": 0.001, "betas": [0.9, 0.999], "eps": 1e-8},
}
SCHEDULES = {
    "constant": {},
    "step": {"step_size": _REQ, "gamma": 0.1},
    "cosine": {"warmup_steps": 0, "total_steps": None, "min_lr": 0.0},
}


def _parse_loss(builder, loss, top_scope):
    where, spec = builder.where, builder.spec
    err = lambda msg: SpecError("%s: loss: %s" % (where, msg))  # noqa: E731
    if not isinstance(loss, dict):
        raise err("must be a mapping {op, input, target, reduction, ...}")
    unknown = set(loss) - LOSS_KEYS
    if unknown:
        raise err("unknown key(s) %s" % sorted(unknown))
    op = loss.get("op")
    if op not in LOSS_OPS:
        raise err("op must be one of %s, got %r" % (", ".join(LOSS_OPS), op))
    out = {"op": op}
    if "input" in loss:
        ref = builder._ref_str(loss["input"], "loss")
        out["input"] = ref
        out["input_key"] = builder._resolve(ref, [top_scope], "loss")
    else:
        first = next(iter(spec.outputs))
        out["input"], out["input_key"] = first, spec.outputs[first]
    if "target" in loss:
        try:
            t = _name_str(loss["target"])
        except TypeError:
            raise err("target must be a name")
        if t not in spec.targets:
            raise err("target %r is not in targets: %s" % (t, list(spec.targets)))
    else:
        if len(spec.targets) != 1:
            raise err("no target given and there is not exactly one target (%s)" % list(spec.targets))
        t = next(iter(spec.targets))
    out["target"] = t
    tinfo = spec.targets[t]
    red = loss.get("reduction", "mean")
    if red not in ("mean", "sum"):
        raise err("reduction must be mean or sum, got %r" % (red,))
    out["reduction"] = red
    if op in CLASS_LOSSES:
        # a target of several dimensions is read flattened (docs/training.md), as torch's
        # cross_entropy(logits.view(-1, C), y.view(-1)) of a sequence model
        if tinfo["dtype"] != "int64" or len(tinfo["shape"]) < 1:
            raise err("%s needs an int64 target of shape [N]; %r is %s %s" % (op, t, tinfo["dtype"], tinfo["shape"]))
        ii = loss.get("ignore_index", -100)
        if not _is_int(ii):
            raise err("ignore_index must be an int")
        out["ignore_index"] = ii
        out["ignore_index_given"] = "ignore_index" in loss
        ls = loss.get("label_smoothing", 0.0)
        if "label_smoothing" in loss and op != "cross_entropy":
            raise err("label_smoothing is a cross_entropy attribute")
        if not _is_num(ls) or not 0 <= ls <= 1:
            raise err("label_smoothing must be a number in [0, 1]")
        out["label_smoothing"] = float(ls)
    else:
        for k in ("ignore_index", "label_smoothing"):
            if k in loss:
                raise err("%s is not an attribute of %s" % (k, op))
        if tinfo["dtype"] != "float32":
            raise err("%s needs a float32 target; %r is %s" % (op, t, tinfo["dtype"]))
    # parallel: where the loss is computed (each data-parallel replica), not what: the
    # single-device reference ignores it
    if not isinstance(loss.get("parallel", False), bool):
        raise err("parallel must be true or false")
    return out


def _sub(where, what, given, defaults):
    """Checks a `{name: ..., keys}` mapping against `defaults` (name -> {key: default})."""
    if not isinstance(given, dict) or "name" not in given:
        raise SpecError("%s: train.%s must be a mapping with a name" % (where, what))
    name = given["name"]
    if name not in defaults:
        raise SpecError("%s: train.%s: unknown name %r (one of %s)" % (where, what, name, ", ".join(defaults)))
    unknown = set(given) - set(defaults[name]) - {"name"}
    if unknown:
        raise SpecError("%s: train.%s %s has no key(s) %s" % (where, what, name, sorted(unknown)))
    out = {"name": name}
    for k, d in defaults[name].items():
        if k in given:
            out[k] = given[k]
        elif d is _REQ:
            raise SpecError("%s: train.%s %s needs '%s'" % (where, what, name, k))
        else:
            out[k] = list(d) if isinstance(d, list) else d
    return out


def _parse_train(where, train):
    def err(msg):
        return SpecError("%s: train: %s" % (where, msg))
    if not isinstance(train, dict):
        raise err("must be a mapping")
    unknown = set(train) - TRAIN_KEYS
    if unknown:
        raise err("unknown key(s) %s" % sorted(unknown))
    t = {"epochs": 1, "batch": 32, "shuffle": True, "drop_last": False, "seed": 0, "validation_split": 0.0,
         "clip_grad_norm": None, "data": None}
    t.update({k: v for k, v in train.items() if k in t})
    for k in ("epochs", "batch"):
        if not _is_int(t[k]) or t[k] < 1:
            raise err("%s must be a positive int" % k)
    for k in ("shuffle", "drop_last"):
        if not isinstance(t[k], bool):
            raise err("%s must be true or false" % k)
    if not _is_int(t["seed"]) or t["seed"] < 0:
        raise err("seed must be an int >= 0")
    if not _is_num(t["validation_split"]) or not 0 <= t["validation_split"] < 1:
        raise err("validation_split must be a number in [0, 1)")
    if t["clip_grad_norm"] is not None and (not _is_num(t["clip_grad_norm"]) or t["clip_grad_norm"] <= 0):
        raise err("clip_grad_norm must be a positive number or null")
    o = _sub(where, "optimizer", train.get("optimizer", {"name": "sgd"}), OPTIMIZERS)
    for k in ("lr", "momentum", "dampening", "weight_decay", "eps"):
        if k in o and (not _is_num(o[k]) or o[k] < 0 or (k in ("lr", "eps") and o[k] <= 0)):
            raise err("optimizer.%s must be a %s number" % (k, "positive" if k in ("lr", "eps") else "non-negative"))
    if "nesterov" in o:
        if not isinstance(o["nesterov"], bool):
            raise err("optimizer.nesterov must be true or false")
        if o["nesterov"] and (o["momentum"] <= 0 or o["dampening"] != 0):
            raise err("optimizer: nesterov needs momentum > 0 and dampening 0 (as torch.optim.SGD)")
    if "betas" in o:
        b = o["betas"]
        if not (isinstance(b, list) and len(b) == 2 and all(_is_num(x) and 0 <= x < 1 for x in b)):
            raise err("optimizer.betas must be two numbers in [0, 1)")
    t["optimizer"] = o
    groups = train.get("optimizer_groups", [])
    if not isinstance(groups, list):
        raise err("optimizer_groups must be a list")
    t["optimizer_groups"] = []
    for g in groups:
        if not isinstance(g, dict) or "params" not in g:
            raise err("each entry of optimizer_groups needs params")
        pats = g["params"] if isinstance(g["params"], list) else [g["params"]]
        rest = {k: v for k, v in g.items() if k != "params"}
        if "name" not in rest or rest["name"] == o["name"]:  # torch's param_groups: the defaults, overridden
            rest = dict(o, **rest)
        t["optimizer_groups"].append({"params": pats, "optimizer": _sub(where, "optimizer_groups", rest, OPTIMIZERS)})
    s = _sub(where, "schedule", train.get("schedule", {"name": "constant"}), SCHEDULES)
    if s["name"] == "step":
        if not _is_int(s["step_size"]) or s["step_size"] < 1:
            raise err("schedule.step_size must be a positive int")
        if not _is_num(s["gamma"]) or s["gamma"] < 0:
            raise err("schedule.gamma must be a non-negative number")
    if s["name"] == "cosine":
        if not _is_int(s["warmup_steps"]) or s["warmup_steps"] < 0:
            raise err("schedule.warmup_steps must be an int >= 0")
        if s["total_steps"] is not None and (not _is_int(s["total_steps"]) or s["total_steps"] < 1):
            raise err("schedule.total_steps must be a positive int")
        if not _is_num(s["min_lr"]) or s["min_lr"] < 0:
            raise err("schedule.min_lr must be a non-negative number")
    t["schedule"] = s
    d = t["data"]
    if d is not None:
        if not isinstance(d, dict) or not isinstance(d.get("path"), str) or set(d) - {"path", "format", "header", "columns"}:
            raise err("data must be {path, format, header, columns}")
        d = dict(d)
        if "format" not in d:
            d["format"] = "safetensors" if d["path"].endswith(".safetensors") else "csv"
        if d["format"] not in ("csv", "safetensors"):
            raise err("data.format must be csv or safetensors")
        d.setdefault("header", False)
        d.setdefault("columns", None)
        t["data"] = d
    return t


def steps_per_epoch(train, n_samples):
    """Optimizer steps in one epoch over n_samples training samples."""
    b = train["batch"]
    return n_samples // b if train["drop_last"] else -(-n_samples // b)


def scheduled_lr(train, step, total_steps=None):
    """The learning rate of optimizer step `step` (from 0), docs/training.md's formulas."""
    lr = float(train["optimizer"]["lr"])
    s = train["schedule"]
    if s["name"] == "constant":
        return lr
    if s["name"] == "step":
        return lr * float(s["gamma"]) ** (step // s["step_size"])
    w = s["warmup_steps"]
    if step < w:
        return lr * (step + 1) / w
    total = s["total_steps"] if s["total_steps"] is not None else total_steps
    if total is None:
        raise SpecError("cosine schedule: no total_steps (give train.schedule.total_steps or the data size)")
    mn = float(s["min_lr"])
    frac = min(1.0, (step - w) / max(1, total - w))
    return mn + (lr - mn) * (1 + math.cos(math.pi * frac)) / 2


def make_scheduler(optimizer, train, total_steps=None, base=None):
    """A LambdaLR stepped once per optimizer step: step k runs with scheduled_lr(k) (from the
    group's own lr `base`, as a torch scheduler moves every param group)."""
    base = float(train["optimizer"]["lr"]) if base is None else float(base)
    scheduled_lr(train, 10 ** 9, total_steps)  # fail now, not mid-training, when total_steps is missing

    def factor(k):
        return scheduled_lr(dict(train, optimizer=dict(train["optimizer"], lr=base)), k, total_steps) / base
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class RowWiseAdagrad(torch.optim.Optimizer):
    """torchrec.optim.RowWiseAdagrad (FBGEMM's EXACT_ROWWISE_ADAGRAD) written out: one
    accumulator per row of a 2-D parameter, which grows by the mean of the row gradient's
    squares; p.addcdiv_(g, sqrt(sum) + eps, value=-lr / (1 + (step - 1) * lr_decay)). A
    sparse gradient (a `sparse: true` table) is coalesced first (duplicate ids summed); its
    absent rows have a zero gradient, which leaves them and their sums as they are."""

    def __init__(self, params, lr=1e-2, lr_decay=0.0, initial_accumulator_value=0.0, eps=1e-10):
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, eps=eps))
        for group in self.param_groups:
            for p in group["params"]:
                rows = p.shape[0] if p.dim() >= 1 else 1
                self.state[p]["step"] = 0
                self.state[p]["sum"] = torch.full((rows,), float(initial_accumulator_value))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad.coalesce().to_dense() if p.grad.is_sparse else p.grad
                st = self.state[p]
                st["step"] += 1
                clr = group["lr"] / (1 + (st["step"] - 1) * group["lr_decay"])
                g2 = g.reshape(g.shape[0] if g.dim() >= 1 else 1, -1)
                st["sum"] += g2.pow(2).mean(1)
                std = st["sum"].sqrt().add_(group["eps"])
                p.view_as(g2).addcdiv_(g2, std.view(-1, 1), value=-clr)


def _torch_optimizer(o, params):
    if o["name"] == "sgd":
        return torch.optim.SGD(params, lr=o["lr"], momentum=o["momentum"], dampening=o["dampening"],
                               nesterov=o["nesterov"], weight_decay=o["weight_decay"])
    if o["name"] == "adam":
        return torch.optim.Adam(params, lr=o["lr"], betas=tuple(o["betas"]), eps=o["eps"],
                                weight_decay=o["weight_decay"])
    if o["name"] == "adamw":
        return torch.optim.AdamW(params, lr=o["lr"], betas=tuple(o["betas"]), eps=o["eps"],
                                 weight_decay=o["weight_decay"])
    if o["name"] == "adagrad":
        return torch.optim.Adagrad(params, lr=o["lr"], lr_decay=o["lr_decay"], weight_decay=o["weight_decay"],
                                   initial_accumulator_value=o["initial_accumulator_value"], eps=o["eps"])
    if o["name"] == "sparse_adam":
        return torch.optim.SparseAdam(params, lr=o["lr"], betas=tuple(o["betas"]), eps=o["eps"])
    return RowWiseAdagrad(params, lr=o["lr"], lr_decay=o["lr_decay"],
                          initial_accumulator_value=o["initial_accumulator_value"], eps=o["eps"])


class Combined:
    """Several optimizers (or schedulers) stepped as one, as torchrec's CombinedOptimizer;
    param_groups are the first one's (the default group's lr is what a case records)."""

    def __init__(self, parts):
        self.parts = parts
        self.param_groups = [g for p in parts for g in getattr(p, "param_groups", [])]

    def step(self):
        for p in self.parts:
            p.step()


def make_optimizer(model, train, total_steps=None):
    """(torch.optim optimizer over model.parameters() in state_dict order, LambdaLR scheduler).
    With optimizer_groups, each parameter goes to the first group whose patterns match its
    name or its layer path (fnmatch), the rest to train.optimizer: one optimizer per group."""
    groups = train.get("optimizer_groups") or []
    if not groups:
        opt = _torch_optimizer(train["optimizer"], list(model.parameters()))
        return opt, make_scheduler(opt, train, total_steps)
    members = [[] for _ in range(len(groups) + 1)]
    for name, p in model.named_parameters():
        layer = name.rsplit(".", 1)[0]
        chosen = 0
        for i, g in enumerate(groups):
            if any(fnmatch.fnmatchcase(name, pat) or fnmatch.fnmatchcase(layer, pat) for pat in g["params"]):
                chosen = i + 1
                break
        members[chosen].append(p)
    configs = [train["optimizer"]] + [g["optimizer"] for g in groups]
    opts, scheds = [], []
    for o, params in zip(configs, members):
        if params:
            opt = _torch_optimizer(o, params)
            opts.append(opt)
            scheds.append(make_scheduler(opt, train, total_steps, base=o["lr"]))
    # the default group first, so that param_groups[0]["lr"] is train.optimizer's
    return Combined(opts), Combined(scheds)


def loss_fn(spec, values, targets):
    """The scalar loss. `values`: Model.values() (or any map holding the loss input's key,
    "layer:PATH" / "input:NAME"); `targets`: name -> tensor."""
    L = spec.loss
    if L is None:
        raise SpecError("%s: no loss: section" % spec.path)
    x = values[L["input_key"]]
    t = targets[L["target"]]
    op, red = L["op"], L["reduction"]
    if op in CLASS_LOSSES:
        if x.dim() != 2 or t.dim() < 1 or t.numel() != x.shape[0]:
            raise SpecError("%s: input [N, C] and target [N] (or N elements, read flattened) expected, got %s and %s"
                            % (op, list(x.shape), list(t.shape)))
        t = t.reshape(-1)
        C = x.shape[1]
        bad = (t != L["ignore_index"]) & ((t < 0) | (t >= C))
        if bool(bad.any()):
            raise SpecError("%s: target %d outside [0, %d)" % (op, int(t[bad][0]), C))
        if op == "nll_loss":
            return F.nll_loss(x, t, ignore_index=L["ignore_index"], reduction=red)
        return F.cross_entropy(x, t, ignore_index=L["ignore_index"], reduction=red,
                               label_smoothing=L["label_smoothing"])
    if x.shape != t.shape:
        raise SpecError("%s: input %s and target %s differ in shape" % (op, list(x.shape), list(t.shape)))
    if op == "mse_loss":
        return F.mse_loss(x, t, reduction=red)
    return F.binary_cross_entropy_with_logits(x, t, reduction=red)


def dense(grad):
    """A gradient as a dense tensor (a `sparse: true` table's is a sparse one)."""
    return grad.to_dense() if grad is not None and grad.is_sparse else grad


def train_step(model, optimizer, scheduler, inputs, targets, bindings=None, clip=None):
    """One step of docs/training.md: forward (the model's current mode), loss, backward,
    clip_grad_norm_, optimizer step with the scheduled lr, scheduler step. A parameter
    the loss does not reach gets a zero gradient (so weight decay and momentum still
    apply, as if Tandem's summed-over-every-use gradient of no use is zero).
    Returns (loss value as a float32 tensor, {param name: gradient after clipping}; a
    `sparse: true` table's gradient is a sparse tensor: dense() makes it a plain one)."""
    spec = model.spec
    for p in model.parameters():
        p.grad = None
    vals = model.values(inputs, bindings)
    loss = loss_fn(spec, vals, targets)
    loss.backward()
    for p in model.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    if clip is not None:
        torch.nn.utils.clip_grad_norm_(list(model.parameters()), max_norm=float(clip))
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}  # a sparse table's stays sparse
    optimizer.step()
    scheduler.step()
    return loss.detach().float(), grads


def loss_classes(spec, values):
    """C of a cross_entropy / nll_loss input [N, C] in `values`."""
    return int(values[spec.loss["input_key"]].shape[-1])


def draw_targets(spec, bindings, gen, n_classes=None, ignore_prob=0.1):
    """Random targets: the loss target as its op wants (class losses: [0, n_classes), with
    ~ignore_prob of them set to ignore_index when the loss gives one explicitly, never all
    of a batch; bce: uniform [0, 1); mse: randn); any other target: randn, or uniform
    [0, high) for int64."""
    out = collections.OrderedDict()
    L = spec.loss
    for name, info in spec.targets.items():
        shape = spec.bind(info["shape"], bindings)
        if L is not None and name == L["target"]:
            op = L["op"]
            if op in CLASS_LOSSES:
                if n_classes is None:
                    raise SpecError("draw_targets: the class count is needed")
                t = torch.randint(0, n_classes, shape, generator=gen, dtype=torch.int64)
                ii = L["ignore_index"]
                if L["ignore_index_given"] and t.numel():
                    t[torch.rand(shape, generator=gen) < ignore_prob] = ii
                    live = t != ii
                    if not bool(live.any()):
                        t[0] = (ii + 1) % n_classes if 0 <= ii < n_classes else 0
                out[name] = t
            elif op == "binary_cross_entropy_with_logits":
                out[name] = torch.rand(shape, generator=gen)
            else:
                out[name] = torch.randn(shape, generator=gen)
        elif info["dtype"] == "float32":
            out[name] = torch.randn(shape, generator=gen)
        else:
            if info["high"] is None:
                raise SpecError("int64 target %r has no `high:` and is not the loss target" % name)
            out[name] = torch.randint(0, info["high"], shape, generator=gen, dtype=torch.int64)
    return out
