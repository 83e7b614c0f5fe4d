"""tandem.from_torch: a PyTorch nn.Module as a Tandem model, by tracing it with torch.fx.

Each module call becomes a layer at the module's path and each torch function a layer
beside it, so the parameters are named as the module's state_dict; the YAML is what a
person would write (docs/python.md, "From PyTorch"). What cannot be converted is named with
where the module's forward calls it, all of it in one error.
"""
import inspect
import os
import re
import warnings

import numpy
import torch
import torch.nn as nn
import torch.nn.functional as F

from . import _tandem
from ._oracle.tandem_torch import OPS as _OP_DEFAULTS, _REQ
from .fx_tracing import grown_batch, is_getitem, propagate_shapes, trace_module
from .torch_names import TorchNames
from .torch_ops import (LEAF_MODULES, SCALAR, Alias, Composite, Pieces, Sub, Unsupported, convert_call,
                        layer_norm_owner, owns_weights,
                        convert_module, supported_modules)
from .yaml_emit import EmitError, Layer, emit_model

__all__ = ["ConversionError", "from_torch", "LOSSES"]


class ConversionError(_tandem.ModelError):
    """A torch module from_torch cannot convert; the message lists every operation it
    cannot, with where the module's forward calls it."""


# torch loss modules -> Tandem's loss: (op, attributes read from the module)
LOSSES = {
    nn.CrossEntropyLoss: ("cross_entropy", ("ignore_index", "label_smoothing")),
    nn.NLLLoss: ("nll_loss", ("ignore_index",)),
    nn.MSELoss: ("mse_loss", ()),
    nn.BCEWithLogitsLoss: ("binary_cross_entropy_with_logits", ()),
}
_LOSS_DEFAULTS = {"ignore_index": -100, "label_smoothing": 0.0, "reduction": "mean"}


# With the separator: torchvision's models lie beside torch, and are the user's code here.
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def _where(node):
    """'model.py:12 (y = self.conv(x))': the line of the user's code that made `node` (the
    innermost frame outside torch and this package)."""
    lines = (getattr(node, "stack_trace", None) or "").splitlines()
    for i, line in enumerate(lines):  # innermost frame first
        if not line.strip().startswith("File "):
            continue
        try:
            file = line.split('"')[1]
            number = line.split("line ")[1].split(",")[0]
        except IndexError:
            continue
        if os.path.abspath(file).startswith((_PACKAGE_DIR, _TORCH_DIR)):
            continue
        code = lines[i + 1].strip() if i + 1 < len(lines) else ""
        return "%s:%s%s" % (os.path.basename(file), number, " (%s)" % code if code else "")
    return ""


def _dtype_name(dtype):
    return {torch.float32: "float32", torch.int64: "int64", torch.bool: "int64"}.get(dtype)


class _Context:
    """What converters may ask about a node: its values at the two batch sizes."""

    def __init__(self, values, grown, batch, grown_batch_size):
        self.values, self.grown, self.batch, self.grown_batch = values, grown, batch, grown_batch_size

    def value(self, node):
        return self.values[node]

    def is_tensor(self, node):
        return isinstance(self.values.get(node), torch.Tensor)

    def is_tuple_of_tensors(self, node):
        """A tuple (or list) of tensors, nested ones, and Nones (MultiheadAttention's
        weights with need_weights=False), with a tensor in it."""
        def tensors_or_none(v):
            if isinstance(v, (tuple, list)):
                return all(tensors_or_none(x) for x in v)
            return v is None or isinstance(v, torch.Tensor)

        def has_tensor(v):
            return isinstance(v, torch.Tensor) or (isinstance(v, (tuple, list)) and any(has_tensor(x) for x in v))
        v = self.values.get(node)
        return isinstance(v, (tuple, list)) and tensors_or_none(v) and has_tensor(v)

    def reshape_target(self, node):
        """A reshape's shape in Tandem's terms: sizes that stay, `batch` for the one that
        follows the batch, -1 for the one that grows with it otherwise."""
        shape = list(self.values[node].shape)
        if self.grown is None:
            return shape
        other = list(self.grown[node].shape)
        if len(other) != len(shape):
            raise Unsupported("the result has %d dimensions at batch %s and %d at batch %s (a squeeze of a batch of "
                              "1?); give an example batch of 2 or more" % (len(shape), self.batch, len(other),
                                                                            self.grown_batch))
        out, varying = [], 0
        for a, b in zip(shape, other):
            if a == b:
                out.append(a)
            elif a == self.batch and b == self.grown_batch:
                out.append("batch")
            else:
                out.append(-1)
                varying += 1
        if varying > 1:
            raise Unsupported("reshape to %s: %d of its dimensions grow with the batch; Tandem infers one (-1)"
                              % (shape, varying))
        return out


def _drop_defaults(op, attrs):
    """Attributes at Tandem's default are left out, as a person would write the file (the
    defaults are the oracle's table of the format, docs/yaml-format.md's)."""
    defaults = _OP_DEFAULTS.get(op, ({}, None))[0]

    def at_default(k, v):
        d = defaults.get(k, _REQ)
        return d is not _REQ and d == v and isinstance(d, bool) == isinstance(v, bool) and \
            (d is None) == (v is None)
    return {k: v for k, v in attrs.items() if not at_default(k, v)}


def _normalize_inputs(module, example_inputs):
    """[(name, tensor)] in forward's order."""
    if isinstance(example_inputs, dict):
        return list(example_inputs.items())
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    names = [n for n, p in inspect.signature(module.forward).parameters.items()
             if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(example_inputs) > len(names):
        raise ConversionError("from_torch: %d example inputs, but %s.forward takes %d" %
                              (len(example_inputs), type(module).__name__, len(names)))
    return list(zip(names, example_inputs))


def _batch_dims(batch_dim, names):
    if batch_dim is None or isinstance(batch_dim, int):
        return {n: batch_dim for n in names}
    return {n: batch_dim.get(n, 0) for n in names}


class _ReadsFailed(Exception):
    """A node reads one that could not be converted: no error of its own."""


class _Converter:
    """Walks the traced graph in order, making each node a layer (or an alias, or nothing),
    and collects what it cannot convert."""

    def __init__(self, traced, ctx, names):
        self.traced, self.ctx, self.names = traced, ctx, names
        self.refs = {}        # node -> ("input", name) / ("layer", path) / SCALAR / ("tuple", layer, outputs)
        self.devices = {}     # node -> device tag (str) or None
        self.layers = []      # Layer, in execution order
        self.by_path = {}
        self.errors = []
        self.selections = {}  # tuple-valued layer path -> {select values read}
        self.called = {}      # module path -> the nodes calling it
        self.failed = set()   # nodes that could not be converted, or read one that could not
        self.used_paths = names.all_paths()  # a layer of a call's own takes none of these
        self.block_paths = set()  # the blocks the layers' paths make (a Composite's own path)
        self.piece_bases = set()  # the names a chunk's or split's pieces take after them
        self.last_ref = None      # the latest tensor made: what a parameter layer reads (see convert_attribute)
        # F.layer_norm nodes that read their module's own weight and bias -> that module's
        # path (convnext's LayerNorm2d): the layer takes the module's path, so that its
        # parameters keep their state_dict names, and the module's other calls are named
        # beside it ('1_permute' beside the layer '1').
        self.norm_owners = {}
        # buffer layers' contents by path: a module's buffers (read from the module as
        # converted, persistent or not) and the constants converters compute (swin's mask)
        self.constants = {}
        self.constant_paths = {}  # fx's _tensor_constantN -> its buffer layer's path

    def fail(self, node, what, message):
        where = _where(node)
        self.errors.append("%s%s: %s" % (what, ", at " + where if where else "", message))

    def path_in_scope(self, node):
        """A function's layer: under the module that called it, named after the function
        ('add', not fx's graph-wide 'add_7'), numbered only where its module has one already."""
        torch_scope = self.traced.scopes.get(node, "")
        name = re.sub(r"_\d+$", "", node.name)
        if node in self.norm_owners:
            return self.names(self.norm_owners[node])
        if torch_scope in self.norm_owners.values():  # the layer_norm is the module's layer
            return self.free_path(self.names(torch_scope) + "_" + name)
        scope = self.names(torch_scope)
        return self.free_path((scope + "." if scope else "") + name)

    def free_path(self, base):
        """`base`, or `base_1`, `base_2`, ...: the first no layer, block, module or parameter has."""
        path, k = base, 1
        while path in self.by_path or path in self.used_paths or path in self.block_paths:
            path, k = "%s_%d" % (base, k), k + 1
        return path

    def resolve(self, node, x, what):
        """The reference for input `x` of `node`."""
        if isinstance(x, torch.fx.Node):
            if x in self.failed:
                raise _ReadsFailed()
            ref = self.refs.get(x)
            if ref is None:
                raise Unsupported("%s is %s, which Tandem cannot make (see the error for it)" % (what, x.name)
                                  if x.op != "get_attr" else
                                  "%s is the tensor attribute '%s', which is neither an nn.Parameter nor a "
                                  "registered buffer (a constant): outside a layer Tandem holds only a module's "
                                  "parameters and buffers (ops parameter and buffer); register it with "
                                  "register_buffer"
                                  % (what, x.target))
            if ref is SCALAR:
                raise Unsupported("%s is a number computed from a shape (%s); Tandem's layers take tensors"
                                  % (what, x.name))
            if ref[0] in ("tuple", "pieces"):
                raise Unsupported("%s is the whole tuple that '%s' returns; take one element ([0])" % (what, ref[1]))
            return ref[:2]
        raise Unsupported("%s is %r, not a tensor" % (what, x))

    def device_of(self, inputs, module=None):
        if module is not None:
            for p in list(module.parameters()) + list(module.buffers()):
                if p.device.type != "cpu":
                    return str(p.device)
        for x in inputs:
            if isinstance(x, torch.fx.Node) and self.devices.get(x):
                return self.devices[x]
        return None

    def add_layer(self, node, path, op, device, sub_refs=None):
        inputs, reads_failed = [], False
        for i, x in enumerate(op.inputs):  # an input of its own that Tandem cannot take is an error of this node's
            if isinstance(x, Sub):
                inputs.append(("layer", sub_refs[x.name]))
                continue
            try:
                inputs.append(self.resolve(node, x, "input %d" % i))
            except _ReadsFailed:
                reads_failed = True
        if reads_failed:
            raise _ReadsFailed()
        attrs = _drop_defaults(op.op, op.attrs)
        where = _where(node)
        layer = Layer(path, op.op, attrs, inputs, device, ", at " + where if where else "")
        if op.value is not None:
            self.constants[path] = op.value
        self.layers.append(layer)
        self.by_path[path] = layer
        self.last_ref = ("layer", layer.path)
        parts = path.split(".")
        self.block_paths.update(".".join(parts[:k]) for k in range(1, len(parts)))
        return ("layer", layer.path)

    def convert(self, live):
        graph = self.traced.graph_module.graph
        for node in graph.nodes:
            if node.op == "call_function" and node.target is F.layer_norm and layer_norm_owner(node) is not None:
                self.norm_owners[node] = layer_norm_owner(node)
        for node in graph.nodes:
            if node.op == "placeholder":
                self.refs[node] = ("input", node.target)
                self.last_ref = self.last_ref or self.refs[node]
                continue
            if node.op == "output" or node not in live:
                continue
            try:
                self.convert_node(node)
            except _ReadsFailed:
                self.failed.add(node)  # its input's error says it: one error per cause
            except Unsupported as e:
                self.failed.add(node)
                self.fail(node, self.describe(node), str(e))
            except Exception as e:  # noqa: BLE001 - a converter's own bug, still named with its line
                self.failed.add(node)
                if any(x in self.failed for x in node.all_input_nodes):
                    continue  # it met what an input it reads could not be: that input's error says it
                self.fail(node, self.describe(node), "from_torch failed on it (%s: %s); please report it"
                          % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""))

    def describe(self, node):
        if node.op == "call_module":
            m = self.traced.module_paths[node.target]
            return "'%s' (%s.%s)" % (node.target, "torch.nn" if type(m).__module__.startswith("torch.nn")
                                     else type(m).__module__, type(m).__name__)
        if node.op == "get_attr":
            return "attribute '%s'" % node.target
        scope = self.traced.scopes.get(node, "")
        return "'%s'%s" % (node.name, " in '%s'" % scope if scope else "")

    def convert_node(self, node):
        if node.op == "get_attr":
            return self.convert_attribute(node)
        if is_getitem(node) and node.args[0] in self.failed:
            raise _ReadsFailed()  # an element of what could not be converted (shufflenet's chunk)
        if is_getitem(node) and isinstance(self.refs.get(node.args[0]), tuple) and \
                self.refs[node.args[0]][0] == "tuple":
            _, path, outputs = self.refs[node.args[0]]
            chosen = outputs[node.args[1]]
            self.devices[node] = self.devices.get(node.args[0])
            if isinstance(chosen, tuple):
                self.refs[node] = ("tuple", path, chosen)
                return
            self.selections.setdefault(path, set()).add(chosen)
            self.refs[node] = ("layer", path)
            return
        if is_getitem(node) and isinstance(self.refs.get(node.args[0]), tuple) and \
                self.refs[node.args[0]][0] == "pieces":
            return self.convert_piece(node)
        if node.op == "call_module":
            module = self.traced.module_paths[node.target]
            calls = self.called.setdefault(node.target, [])
            if calls and _holds_state(module):
                raise Unsupported("called a second time (first as '%s'): a Tandem layer owns its parameters, so give "
                                  "each call its own module" % calls[0].name)
            calls.append(node)
            result = convert_module(module, node, self.ctx)
            # a module without parameters or buffers (ResNet's self.relu) is a layer per call
            path = self.names(node.target)
            if len(calls) > 1:
                path = self.free_path("%s_%d" % (path, len(calls) - 1))
            device = self.device_of(node.args, module)
        else:
            result = convert_call(node, self.ctx)
            path = self.path_in_scope(node)
            device = self.device_of(list(node.args) + list(node.kwargs.values()))
        if result is SCALAR:
            self.refs[node] = SCALAR
            return
        if isinstance(result, Alias):
            if result.source in self.failed:
                raise _ReadsFailed()
            self.refs[node] = self.refs.get(result.source) if isinstance(result.source, torch.fx.Node) else None
            if self.refs[node] is None:
                raise Unsupported("its input is not a tensor Tandem makes")
            self.devices[node] = result.device or self.devices.get(result.source)
            return
        if isinstance(result, Pieces):  # a layer for each piece read, when it is read
            base, k = path, 1
            while base in self.piece_bases:  # a second chunk in the module: chunk_1_0, chunk_1_1
                base, k = "%s_%d" % (path, k), k + 1
            self.piece_bases.add(base)
            self.refs[node] = ("pieces", base, result.narrows)
            self.devices[node] = device
            return
        if isinstance(result, Composite):
            subs = {}
            scope = self.names(self.traced.scopes.get(node, ""))
            for relative, op in result.layers:
                if relative in result.owned:  # a submodule whose weights the call reads: its own path
                    subs[relative] = self.names(result.owned[relative])
                elif result.scoped:  # beside the calling module's other layers
                    subs[relative] = self.free_path((scope + "." if scope else "") + relative)
                else:
                    subs[relative] = path + "." + relative
                if subs[relative] in self.by_path:
                    raise Unsupported("'%s' is made a second time: a Tandem layer owns its parameters"
                                      % subs[relative])
                self.add_layer(node, subs[relative], op, device, sub_refs=subs)
            self.refs[node] = ("layer", subs[result.layers[-1][0]])
            self.devices[node] = device
            return
        ref = self.add_layer(node, path, result, device)
        self.devices[node] = device
        if result.outputs is not None:
            self.refs[node] = ("tuple", ref[1], result.outputs)
            self.by_path[path].tuple_outputs = result.outputs
        else:
            self.refs[node] = ref

    def convert_attribute(self, node):
        """A tensor attribute read in a forward. A layer_norm's own weight or bias is its
        layer's (norm_owners), as are the weights a leaf function reads for a linear layer it
        makes (swin's attn.qkv.weight). An nn.Parameter (vit's class token, convnext's layer
        scale) is a `parameter` layer named by its path, so the state_dict name stays; it
        reads the latest tensor made, which places and orders it there. A registered buffer
        (swin's and maxvit's relative_position_index) is a `buffer` layer the same way,
        holding the buffer's values. Another tensor (a constant attribute) is refused where a
        layer reads it (resolve)."""
        if all(user in self.norm_owners or owns_weights(user, node) for user in node.users):
            return
        value = self.traced.graph_module
        for part in node.target.split("."):
            value = getattr(value, part)
        owner, _, name = node.target.rpartition(".")
        module = self.traced.graph_module.get_submodule(owner) if owner else self.traced.graph_module
        is_buffer = not isinstance(value, nn.Parameter) and name in module._buffers
        if not isinstance(value, nn.Parameter) and not is_buffer:
            return
        if node.target.startswith("_tensor_constant"):
            # a tensor fx computed while tracing and holds as a constant (maxvit's
            # relative_position_index.view(-1), a plain tensor attribute): a buffer named
            # 'constant' in the module that reads it
            scope = self.names(self.traced.scopes.get(node, ""))
            path = self.constant_paths.get(node.target) or self.free_path((scope + "." if scope else "") + "constant")
            self.constant_paths[node.target] = path
        else:
            path = self.names(node.target)
        if path in self.by_path:  # read again: the same layer's output
            self.refs[node] = ("layer", path)
            return
        what = "buffer" if is_buffer else "parameter"
        if self.last_ref is None:
            raise Unsupported("a %s read before any input: Tandem's %s layer reads a tensor" % (what, what))
        attrs = {"shape": list(value.shape)}
        if not attrs["shape"]:
            if not is_buffer:
                raise Unsupported("the parameter '%s' is a number (a 0-dimensional tensor): Tandem's parameter layer "
                                  "holds a tensor of one dimension or more" % node.target)
            attrs["shape"], value = [1], value.reshape(1)  # broadcasts as the number does
        if is_buffer:
            if value.dtype not in (torch.float32, torch.int64):
                raise Unsupported("the buffer '%s' is %s: Tandem's buffer layer holds float32 or int64"
                                  % (node.target, value.dtype))
            if value.dtype == torch.int64:
                attrs["dtype"] = "int64"
            self.constants[path] = value.detach().clone()
        layer = Layer(path, what, attrs, [self.last_ref], None,
                      ", at " + _where(node) if _where(node) else "")
        self.layers.append(layer)
        self.by_path[path] = layer
        parts = path.split(".")
        self.block_paths.update(".".join(parts[:k]) for k in range(1, len(parts)))
        self.refs[node] = ("layer", path)
        self.devices[node] = str(value.device) if value.device.type != "cpu" else None

    def convert_piece(self, node):
        """pieces[i] of a chunk or split: its narrow, named after the split ('chunk_1')."""
        _, base, narrows = self.refs[node.args[0]]
        i = node.args[1]
        if not isinstance(i, int):
            raise Unsupported("indexing the pieces of '%s' with %r: take one element ([0])" % (base, i))
        if narrows[i] is None:
            raise Unsupported("element %d of '%s' is empty: Tandem has no empty tensors" % (i, base))
        path = self.free_path("%s_%d" % (base, i % len(narrows)))
        device = self.devices.get(node.args[0])
        self.refs[node] = self.add_layer(node, path, narrows[i], device)
        self.devices[node] = device

    def apply_selections(self):
        for layer in self.layers:
            outputs = getattr(layer, "tuple_outputs", None)
            if outputs is None:
                continue
            chosen = self.selections.get(layer.path, set())
            if "attention weights" in chosen:
                self.errors.append("'%s' (torch.nn.MultiheadAttention): its attention weights are read; Tandem's "
                                   "multi_head_attention gives the output only" % layer.path)
            chosen.discard("attention weights")
            if len(chosen) > 1:
                self.errors.append("'%s' (%s): both %s are read; a Tandem layer has one output (select): give each "
                                   "its own module" % (layer.path, layer.op, " and ".join(sorted(chosen))))
            elif layer.op in ("gru", "lstm") and chosen and chosen != {"output"}:
                layer.attrs["select"] = next(iter(chosen))
            layer.tuple_outputs = None


def _holds_state(module):
    """Whether `module` has parameters or buffers, which a Tandem layer would own."""
    return any(True for _ in module.parameters()) or any(True for _ in module.buffers())


def _live_nodes(graph):
    """Nodes the outputs depend on: a call nothing reads (an attention's unused weights)
    makes no layer."""
    output = next(n for n in graph.nodes if n.op == "output")
    live, stack = set(), [output]
    while stack:
        n = stack.pop()
        if n in live:
            continue
        live.add(n)
        stack.extend(n.all_input_nodes)
    return live


def _output_refs(converter, output_node, output_names):
    value = output_node.args[0]
    if isinstance(value, torch.fx.Node):
        items = [("output", value)]
    elif isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, (tuple, list)):
        items = [("output_%d" % i, v) for i, v in enumerate(value)]
    else:
        raise ConversionError("from_torch: forward returns %r; Tandem's outputs are tensors" % (value,))
    if output_names:
        if len(output_names) != len(items):
            raise ConversionError("from_torch: output_names has %d names for %d outputs" % (len(output_names), len(items)))
        items = [(n, v) for n, (_, v) in zip(output_names, items)]
    out = {}
    for name, node in items:
        if node in converter.failed:
            continue
        try:
            ref = converter.resolve(output_node, node, "output '%s'" % name)
        except Unsupported as e:
            converter.errors.append("output '%s': %s" % (name, e))
            continue
        if ref[0] == "input":
            converter.errors.append("output '%s' is the input '%s' itself; Tandem's outputs are layers' outputs"
                                    % (name, ref[1]))
        out[str(name)] = ref
    return out


_DP_KEYS = {"devices", "output_device", "dim"}


def _data_parallel_spec(wrapper, path, given):
    """The data_parallel: entry of nn.DataParallel `wrapper` at `path` ('module' for a
    wrapped whole model). A torch without CUDA keeps neither the wrapper's device_ids nor
    its dim nor output_device: then `given` must say them (a spec, or specs by path)."""
    if given and not set(given) <= _DP_KEYS:
        given = given.get(path)
    where = "nn.DataParallel at '%s'" % path
    ids = list(getattr(wrapper, "device_ids", []))
    as_device = lambda d: "cuda:%d" % (d.index if isinstance(d, torch.device) else d) \
        if isinstance(d, (int, torch.device)) else str(d)  # noqa: E731
    if given:
        unknown = set(given) - _DP_KEYS
        if unknown:
            raise ConversionError("from_torch: data_parallel for '%s': unknown key(s) %s (it takes devices, "
                                  "output_device and dim)" % (path, sorted(unknown)))
        devices = [as_device(d) for d in given.get("devices", ids)]
        dim = given.get("dim", getattr(wrapper, "dim", 0))
        output_device = given.get("output_device", getattr(wrapper, "output_device", None) if ids else None)
    elif ids:
        devices, dim, output_device = [as_device(d) for d in ids], wrapper.dim, wrapper.output_device
    else:
        raise ConversionError("from_torch: %s: this torch has no CUDA, so the wrapper kept neither its device_ids "
                              "nor its dim; say them with data_parallel={'devices': ['cuda:0', 'cuda:1'], 'dim': 0} "
                              "(or such a spec by wrapper path: {'%s': {...}})" % (where, path))
    if not devices:
        raise ConversionError("from_torch: %s spreads over no devices; give data_parallel={'devices': [...]}" % where)
    spec = {"devices": devices, "output_device": as_device(output_device) if output_device is not None else devices[0]}
    if dim != 0:
        spec["dim"] = dim
    return spec


def _loss_section(loss, output_refs, loss_input, target_name):
    if isinstance(loss, str):
        op, attrs = loss, {}
    else:
        for t, (op, keys) in LOSSES.items():
            if type(loss) is t:
                break
        else:
            raise ConversionError("from_torch: loss %s: Tandem's losses are %s" % (
                type(loss).__name__, ", ".join(t.__name__ for t in LOSSES)))
        if getattr(loss, "weight", None) is not None or getattr(loss, "pos_weight", None) is not None:
            raise ConversionError("from_torch: loss %s with class weights: Tandem's losses weigh every class alike"
                                  % type(loss).__name__)
        if loss.reduction not in ("mean", "sum"):
            raise ConversionError("from_torch: loss reduction '%s': Tandem's losses reduce to mean or sum"
                                  % loss.reduction)
        attrs = {k: getattr(loss, k) for k in keys + ("reduction",)}
        attrs = {k: v for k, v in attrs.items() if v != _LOSS_DEFAULTS[k]}
    if loss_input is None:
        if len(output_refs) != 1:
            raise ConversionError("from_torch: the module has outputs %s: say which one the loss scores with "
                                  "loss_input=" % list(output_refs))
        loss_input = next(iter(output_refs))
    if loss_input not in output_refs:
        raise ConversionError("from_torch: loss_input '%s' is not an output (%s)" % (loss_input, list(output_refs)))
    return dict({"op": op, "input": output_refs[loss_input], "target": target_name}, **attrs)


def _named_wrapper(inner, names, child="module"):
    """A module holding `inner` as its child `child`, called with forward's argument
    names (fx reads them from the code): nn.DataParallel's layout (child `module`), for
    tracing."""
    namespace = {}
    args = ", ".join(names)
    exec("def forward(self, %s):\n    return self.%s(%s)\n" % (args, child, args), namespace)  # noqa: S102
    wrapper = type("DataParallelTrace", (nn.Module,), {"forward": namespace["forward"]})()
    setattr(wrapper, child, inner)
    return wrapper


def _shape_spec(tensor, dim, symbols=None):
    shape = list(tensor.shape)
    if dim is not None:
        shape[dim] = "batch"
    for d, symbol in (symbols or {}).items():
        shape[d] = symbol
    return shape


def _holds_tensors(module):
    """Whether the module has parameters or buffers, which its state_dict names."""
    return any(True for _ in module.parameters()) or any(True for _ in module.buffers())


def _two_examples(example_inputs):
    """Whether example_inputs is [example, example] (each a tuple or dict), not a list of tensors."""
    return isinstance(example_inputs, list) and len(example_inputs) == 2 and \
        all(isinstance(e, (tuple, dict)) for e in example_inputs)


def _dims_that_differ(inputs, other, model_name):
    """{input: [dims]} where the two examples differ in length."""
    other = dict(other)
    if set(other) != {n for n, _ in inputs}:
        raise ConversionError("from_torch(%s): the two examples give different inputs (%s and %s)"
                              % (model_name, [n for n, _ in inputs], list(other)))
    dims = {}
    for n, t in inputs:
        o = other[n]
        if not isinstance(o, torch.Tensor) or o.dim() != t.dim():
            raise ConversionError("from_torch(%s): input '%s' has %d dimensions in the first example and %s in the "
                                  "second; give both examples the same ranks" % (
                                      model_name, n, t.dim(), o.dim() if isinstance(o, torch.Tensor) else "none"))
        differ = [d for d in range(t.dim()) if t.shape[d] != o.shape[d]]
        if differ:
            dims[n] = differ
    if not dims:
        raise ConversionError("from_torch(%s): the two examples have the same shapes; give the variable-length "
                              "inputs another length in the second" % model_name)
    return dims


def _dynamic_symbols(dynamic, inputs, model_name):
    """{input: {dim: symbol}} for dynamic= ({input: dim or [dims]})."""
    if not dynamic:
        return {}
    if not isinstance(dynamic, dict):
        raise ConversionError("from_torch(%s): dynamic= is {input name: dim}, not %r" % (model_name, dynamic))
    shapes = {n: t.shape for n, t in inputs}
    symbols = {}
    for n, dims in dynamic.items():
        if n not in shapes:
            raise ConversionError("from_torch(%s): dynamic= names '%s', which is no input (%s)"
                                  % (model_name, n, ", ".join(shapes)))
        dims = list(dims) if isinstance(dims, (list, tuple)) else [dims]
        rank = len(shapes[n])
        if not all(isinstance(d, int) and -rank <= d < rank for d in dims):
            raise ConversionError("from_torch(%s): dynamic= gives input '%s' (%d dimensions) the dimension(s) %s"
                                  % (model_name, n, rank, dims))
        dims = sorted({d % rank for d in dims})
        symbols[n] = {d: "%s_len" % n if len(dims) == 1 else "%s_len%d" % (n, d) for d in dims}
    return symbols


def from_torch(module, example_inputs, *, name=None, batch_dim=0, output_names=None, loss=None,
               example_targets=None, loss_input=None, train=None, data_parallel=None, check=True,
               save_to=None, dynamic=None):
    """A tandem.Model computing what `module` computes, with its weights.

    example_inputs: a tensor, a tuple of them (forward's positional arguments), or a dict
    by argument name; forward's other arguments keep their defaults. float32 and int64
    tensors (bool masks become int64 inputs, nonzero meaning masked).
    batch_dim: which dimension of each input is the batch (the symbol `batch`): an int for
    all, a dict by input (and target) name, or None for fixed shapes. Found out by running
    the module at the example's batch and one more.
    output_names: names for forward's outputs (default: 'output', or 'output_0', ... for a
    tuple, or a returned dict's keys).
    loss, example_targets, loss_input, train: to train it: a torch loss module
    (nn.CrossEntropyLoss, NLLLoss, MSELoss, BCEWithLogitsLoss) or Tandem's loss name, an
    example target (a tensor, or {name: tensor}), which output it scores, and a train:
    section ({'epochs': 3, 'optimizer': {'name': 'adam', 'lr': 1e-3}, ...}).
    data_parallel: {'devices': [...], 'dim': ..., 'output_device': ...} for the
    nn.DataParallel wrappers (or such specs by wrapper path): needed where torch has no
    CUDA, as its wrappers then keep neither device_ids nor dim; it overrides them elsewhere.
    check: run the converted model on the example inputs on the cpu and compare with
    torch's outputs (eval mode), raising ConversionError on a difference.
    save_to: a path prefix: writes PREFIX.yaml and PREFIX.safetensors.
    dynamic: {input name: dim (or [dims])}: dimensions of variable length other than the
    batch, each its own symbol NAME_len (NAME_len<dim> for several): the flat ids an
    EmbeddingBag reads with offsets, dynamic={"ids": 0}. Or give example_inputs as a list
    of two examples at the same batch whose variable-length inputs differ in length: the
    dimensions that differ are those.

    Devices: a tensor moved with .to('cuda:1') / .cuda(1) puts the layers that read it on
    cuda:1 (`device:`), as do parameters on a GPU; nn.DataParallel wrappers become
    data_parallel: blocks named as torch names them ('module' for a wrapped whole model).

    Names torch takes and Tandem does not ('block1-0') become legal ones ('block1_0'); the
    weights still load from the module's state_dict, and to_torch gives torch's names back.
    Whatever stops the conversion is a ConversionError (a tandem.ModelError).
    """
    try:
        return _convert(module, example_inputs, name, batch_dim, output_names, loss, example_targets, loss_input,
                        train, data_parallel, check, save_to, dynamic)
    except _tandem.ModelError:
        raise
    except Exception as e:  # noqa: BLE001 - a bug of the converter's: still a ConversionError, with what it was
        model_name = name or type(module).__name__
        raise ConversionError("from_torch(%s): the conversion failed (%s: %s); please report it"
                              % (model_name, type(e).__name__, str(e).splitlines()[0] if str(e) else "")) from e


def _convert(module, example_inputs, name, batch_dim, output_names, loss, example_targets, loss_input, train,
             data_parallel, check, save_to, dynamic):
    dp_top = module if isinstance(module, nn.DataParallel) else None
    inner = module.module if dp_top is not None else module
    model_name = name or type(inner).__name__
    other_example = None
    if _two_examples(example_inputs):
        example_inputs, other_example = example_inputs
        other_example = _normalize_inputs(inner, other_example)
    inputs = _normalize_inputs(inner, example_inputs)
    names = [n for n, _ in inputs]
    _check_example_inputs(inputs, model_name)
    if other_example is not None:
        dynamic = _dims_that_differ(inputs, other_example, model_name)
    if dp_top is not None:
        root = _named_wrapper(inner, names)  # torch's state_dict says module.*: so do the layers
    elif any(type(inner) is t for t in LEAF_MODULES) and not _holds_tensors(inner):
        # a lone nn.Softmax, nn.ReLU, ...: nothing to name after torch's state_dict, so its
        # one layer is named after its type
        root = _named_wrapper(inner, names, child=type(inner).__name__.lower())
    elif any(type(inner) is t for t in LEAF_MODULES):
        raise ConversionError("from_torch: the module is a single %s, whose parameters have no layer name "
                              "('weight', not 'fc.weight'); wrap it, as nn.Sequential(module), to convert it"
                              % type(inner).__name__)
    else:
        root = inner
    target_names = list(example_targets) if isinstance(example_targets, dict) else ["target"]
    batch_dims = _batch_dims(batch_dim, names + target_names)
    symbols = _dynamic_symbols(dynamic, inputs, model_name)
    for n, dims in symbols.items():
        if batch_dims[n] in dims:
            batch_dims[n] = None  # flat ids: their length is their own, not the batch
    batch = _batch_size(inputs, batch_dims)

    traced = _trace(root, names, model_name)
    placeholders = [n.target for n in traced.graph_module.graph.nodes if n.op == "placeholder"]
    by_name = dict(inputs)
    values, grown = _values_at_two_batches(module, traced, [by_name[p] for p in placeholders],
                                           [batch_dims[p] for p in placeholders], batch, model_name,
                                           [list(symbols.get(p, {})) for p in placeholders], real=check)
    specs = {p: {"shape": _shape_spec(by_name[p], batch_dims[p], symbols.get(p)), "dtype": _dtype_name(by_name[p].dtype)}
             for p in placeholders}

    torch_names = TorchNames(root)
    converter = _Converter(traced, _Context(values, grown, batch, batch + 1 if batch is not None else None), torch_names)
    converter.convert(_live_nodes(traced.graph_module.graph))
    output_node = next(n for n in traced.graph_module.graph.nodes if n.op == "output")
    outputs = _output_refs(converter, output_node, output_names)
    converter.apply_selections()
    if converter.errors:
        raise ConversionError("from_torch(%s): cannot convert %d operation(s):\n  " % (model_name, len(converter.errors))
                              + "\n  ".join(converter.errors) + "\n(from_torch converts torch.nn's %s, and the torch "
                              "functions and tensor methods docs/python.md lists)" % supported_modules())

    blocks = {"module": _data_parallel_spec(dp_top, "module", data_parallel)} if dp_top is not None else {}
    for path, wrapper in traced.data_parallel.items():
        blocks[torch_names(path)] = _data_parallel_spec(wrapper, path, data_parallel)
    _settle_devices(converter.layers, blocks)
    targets, loss_section = None, None
    if loss is not None:
        targets = _target_specs(example_targets, batch_dims)
        loss_section = _loss_section(loss, outputs, loss_input, next(iter(targets)))

    returns = _return_form(output_node.args[0])
    header = ["Converted from the PyTorch module %s.%s by tandem.from_torch (torch.fx)."
              % (type(module).__module__, type(module).__qualname__),
              "%s%s" % (RETURNS_MARK, returns)] + ([torch_names.header()] if torch_names.renamed else [])
    try:
        text = emit_model(model_name, specs, converter.layers, blocks, outputs, targets, loss_section, train, header)
    except EmitError as e:
        raise ConversionError("from_torch(%s): %s" % (model_name, e)) from None
    try:
        # every parameter is loaded from the state_dict next (or the conversion fails):
        # drawing them first cost vgg11 a second
        model = _tandem.Model.from_yaml(text, model_name + ".yaml", weights_follow=True)
    except _tandem.ModelError as e:
        raise ConversionError("from_torch(%s): Tandem refuses the converted model: %s\n--- the model:\n%s"
                              % (model_name, e, text)) from None
    weights = torch_names.state_dict(root.state_dict())
    weights.update(converter.constants)  # buffers not in the state_dict, and the converter's constants
    missing, _unused = model.load_state_dict(weights, strict=False)
    if missing:
        raise ConversionError("from_torch(%s): no weights for %s in the module's state_dict" % (model_name, missing))
    if check:
        on_cpu = all(layer.device is None for layer in converter.layers) and not blocks
        _check(model, text, inputs, model_name, values[output_node], on_cpu)
    model._torch_returns = returns  # to_torch gives back what the module's forward returned
    if save_to is not None:
        _save_converted(os.fspath(save_to), text, model)
    return model


# The header line of a converted model that says what the module's forward returned:
# to_torch's twin returns the same (a tensor, a tuple or list in the outputs' order, a dict).
RETURNS_MARK = "forward returns: "


def _return_form(value):
    if isinstance(value, torch.fx.Node):
        return "tensor"
    if isinstance(value, dict):
        return "dict"
    return "list" if isinstance(value, list) else "tuple"


def _save_converted(prefix, text, model):
    """PREFIX.yaml and PREFIX.safetensors, refused as the CLI refuses an output path whose
    directory is missing or not writable (exit code 2 there; a ModelError here)."""
    folder = os.path.dirname(prefix) or "."
    if not os.path.isdir(folder):
        raise _tandem.ModelError("save_to '%s': the directory '%s' does not exist; create it first" % (prefix, folder))
    if not os.access(folder, os.W_OK):
        raise _tandem.ModelError("save_to '%s': the directory '%s' is not writable; give save_to= a directory you "
                                 "may write in" % (prefix, folder))
    try:
        with open(prefix + ".yaml", "w") as f:
            f.write(text)
    except OSError as e:
        raise _tandem.ModelError("save_to '%s': cannot write %s.yaml: %s" % (prefix, prefix, e.strerror)) from None
    model.save_weights(prefix + ".safetensors")


def _check_example_inputs(inputs, model_name):
    errors = []
    for n, t in inputs:
        if not isinstance(t, torch.Tensor):
            raise ConversionError("from_torch: example input '%s' is a %s; give tensors" % (n, type(t).__name__))
        if _dtype_name(t.dtype) is None:
            errors.append("input '%s' is %s: Tandem's inputs are float32 or int64 (give an example of one of those)"
                          % (n, t.dtype))
    if errors:
        raise ConversionError("from_torch(%s): cannot convert:\n  " % model_name + "\n  ".join(errors))


def _batch_size(inputs, batch_dims):
    """The example's batch, which every input's batch dimension must agree on; None when
    no input has one."""
    sizes = {t.shape[batch_dims[n]] for n, t in inputs if batch_dims[n] is not None}
    if len(sizes) > 1:
        raise ConversionError("from_torch: the example inputs' batch dimensions differ in size (%s): give each "
                              "input's batch dimension with batch_dim={name: dim} (None: no batch)" % sorted(sizes))
    return sizes.pop() if sizes else None


def _trace(root, names, model_name):
    try:
        return trace_module(root, names, list(LEAF_MODULES))
    except Exception as e:  # noqa: BLE001 - fx's TraceError, or the module's own on a proxy
        raise ConversionError("from_torch(%s): torch.fx cannot trace the module's forward: %s: %s (Tandem "
                              "converts what fx can trace: no Python control flow that depends on tensor values)"
                              % (model_name, type(e).__name__, str(e).splitlines()[0] if str(e) else "")) from None


def _values_at_two_batches(module, traced, tensors, batch_dims, batch, model_name, dynamic_dims, real=True):
    """Every node's value at the example's batch, and at one more (None without a batch
    or dynamic dimensions, which grow by one too): which dimensions follow the batch is what
    tells them apart. `real`: the example's values are computed (check= compares the
    converted model's outputs with them); else shapes on torch's meta device suffice, as for
    the grown batch, and the module runs for real only where it cannot run there (its own
    forward was half of regnet_y_128gf's conversion)."""
    was_training = module.training
    module.eval()  # batch norm must not update its statistics while shapes are found
    try:
        try:
            values = None if real else _shapes_on_meta(traced, tensors)
            if values is None:
                values = propagate_shapes(traced, tensors)
        except Exception as e:  # noqa: BLE001 - the module's own error on its example
            raise ConversionError("from_torch(%s): the module fails on the example inputs (%s: %s)"
                                  % (model_name, type(e).__name__, str(e).splitlines()[0] if str(e) else ""))
        if batch is None and not any(dynamic_dims):
            return values, None
        bigger = []
        for t, d, dims in zip(tensors, batch_dims, dynamic_dims):
            for grows in ([d] if d is not None else []) + dims:
                t = grown_batch(t, grows)
            bigger.append(t)
        grown = _shapes_on_meta(traced, bigger)
        if grown is not None:
            return values, grown
        try:
            return values, propagate_shapes(traced, bigger)
        except Exception as e:  # noqa: BLE001 - the module's own error, reported with the advice
            raise ConversionError("from_torch(%s): the module fails at %s (%s: %s), so which dimensions "
                                  "follow the batch cannot be found; give batch_dim= (None: fixed shapes)"
                                  % (model_name, "batch %d" % (batch + 1) if batch is not None else
                                     "one more of each dynamic= length", type(e).__name__, str(e).splitlines()[0]))
    finally:
        module.train(was_training)


def _shapes_on_meta(traced, tensors):
    """Every node's value for `tensors` computed on torch's meta device (shapes without
    data, the module's parameters and buffers swapped for meta ones while it runs): only
    the shapes at the grown batch are read, and computing them cost vgg11 1.3 s of its
    conversion. None where an op has no meta kernel, or needs data (the caller runs it for
    real then, and reports the module's own errors)."""
    graph_module = traced.graph_module
    state = {n: t.to("meta") for n, t in list(graph_module.named_parameters()) + list(graph_module.named_buffers())}
    try:
        from torch.nn.utils.stateless import _reparametrize_module  # torch 1.13's; not in every version
        with warnings.catch_warnings(), _reparametrize_module(graph_module, state):
            warnings.simplefilter("ignore")  # the module's warnings are seen at the real run
            return propagate_shapes(traced, [t.to("meta") for t in tensors])
    except Exception:  # noqa: BLE001 - no meta kernel, a tensor that is not a parameter, .item(): run it
        return None


def _settle_devices(layers, data_parallel):
    """Inside a data_parallel block the replicas' devices are the block's; a model all on
    the cpu says nothing of devices."""
    in_parallel = lambda path: any(path == p or path.startswith(p + ".") for p in data_parallel)  # noqa: E731
    for layer in layers:
        if layer.device is not None and in_parallel(layer.path):
            layer.device = None
    if all(layer.device in (None, "cpu") for layer in layers):
        for layer in layers:
            layer.device = None


def _target_specs(example_targets, batch_dims):
    if example_targets is None:
        raise ConversionError("from_torch: loss= needs example_targets= (a target tensor, or {name: tensor})")
    if isinstance(example_targets, torch.Tensor):
        example_targets = {"target": example_targets}
    if len(example_targets) != 1:
        raise ConversionError("from_torch: Tandem's loss scores one target; example_targets has %d"
                              % len(example_targets))
    targets = {}
    for n, t in example_targets.items():
        if _dtype_name(t.dtype) is None or t.dtype == torch.bool:
            raise ConversionError("from_torch: target '%s' is %s: give float32 or int64" % (n, t.dtype))
        targets[n] = {"shape": _shape_spec(t, batch_dims.get(n, batch_dims.get("target"))),
                      "dtype": _dtype_name(t.dtype)}
    return targets


def _check(model, text, inputs, model_name, traced_outputs, model_on_cpu):
    """The converted model on the cpu against torch in eval mode, on the example inputs:
    `traced_outputs`, what the module's traced graph gave for them (its own submodules, in
    eval mode, the moves between devices left out), so that the module is not run a third
    time (regnet_y_128gf's three runs took 7 s each). A model all on the cpu
    (`model_on_cpu`) is run itself; one placed elsewhere, a copy on the cpu."""
    expected = traced_outputs
    if model_on_cpu:
        on_cpu = model  # a second model and a copy of its weights cost vgg11 a second
    else:
        on_cpu = _tandem.Model.from_yaml(text, model_name + ".yaml", weights_follow=True)
        on_cpu.load_state_dict(model.state_dict())
        on_cpu.to("cpu")
    feed = {n: (t.long() if t.dtype == torch.bool else t) for n, t in inputs}
    got = on_cpu(**feed)
    if isinstance(expected, torch.Tensor):
        expected = [expected]
    elif isinstance(expected, dict):
        expected = list(expected.values())
    for (out_name, value), want in zip(got.items(), expected):
        want = want.detach().numpy()
        value = numpy.asarray(value)
        if value.shape != want.shape:
            raise ConversionError("from_torch(%s): output '%s' has shape %s, torch's %s" % (
                model_name, out_name, list(value.shape), list(want.shape)))
        scale = max(1.0, float(numpy.abs(want).max())) if want.size else 1.0
        error = float(numpy.abs(value - want).max()) if want.size else 0.0
        if not error <= 1e-4 * scale:
            raise ConversionError("from_torch(%s): output '%s' differs from torch's by %.3g (the converted model "
                                  "does not compute what the module does; please report it)\n--- the model:\n%s"
                                  % (model_name, out_name, error, text))
