"""Writing a Tandem model file (docs/yaml-format.md) from layers in execution order, each
named by its full path: the blocks the paths imply, the references each layer needs to
reach its inputs from where it sits, and the other sections. For from_torch, whose layer
paths are the PyTorch module paths, so that parameter names are the state_dict's."""
import math
import re

__all__ = ["EmitError", "Layer", "emit_model", "scalar"]

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:\-]*$")
_RESERVED = {"true", "false", "yes", "no", "on", "off", "null", "none", "y", "n"}


class EmitError(Exception):
    """The layers cannot be written as a model file (the message says why and where)."""


class Layer:
    """A leaf layer. `inputs`: ("input", name) or ("layer", path) each; `device`: a string
    or None; `where`: for messages."""

    def __init__(self, path, op, attrs, inputs, device=None, where=""):
        self.path, self.op, self.attrs, self.inputs, self.device, self.where = path, op, attrs, inputs, device, where


class _Block:
    def __init__(self, parts):
        self.parts = parts
        self.children = []  # _Block or Layer, in order
        self.data_parallel = None

    def child_names(self):
        return [c.parts[-1] if isinstance(c, _Block) else c.path.split(".")[-1] for c in self.children]


def scalar(value):
    """A YAML scalar both yaml-cpp and PyYAML read back as `value`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value)
        if "e" in text and "." not in text.split("e")[0]:  # YAML 1.1 (PyYAML) wants 1.0e-05
            text = text.replace("e", ".0e")
        return text
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(scalar(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join("%s: %s" % (k, scalar(v)) for k, v in value.items()) + "}"
    text = str(value)
    if (_PLAIN.match(text) and text.lower() not in _RESERVED) or text.isdigit():
        return text
    return "'" + text.replace("'", "''") + "'"


def _build_tree(layers):
    root = _Block(())
    stack = [root]
    closed = set()
    for layer in layers:
        parents = tuple(layer.path.split(".")[:-1])
        while len(stack) - 1 > len(parents) or stack[-1].parts != parents[:len(stack) - 1]:
            closed.add(stack.pop().parts)
        for depth in range(len(stack), len(parents) + 1):
            parts = parents[:depth]
            if parts in closed:
                raise EmitError("layer '%s'%s: its module '%s' was left and is entered again (its layers are "
                                "called between those of another module); a Tandem block holds consecutive "
                                "layers" % (layer.path, layer.where, ".".join(parts)))
            block = _Block(parts)
            if parts[-1] in stack[-1].child_names():
                raise EmitError("'%s' is both a layer and a module" % ".".join(parts))
            stack[-1].children.append(block)
            stack.append(block)
        stack[-1].children.append(layer)
    return root


class _Writer:
    def __init__(self, input_names):
        self.lines = []
        self.input_names = input_names
        self.previous = None  # the previous leaf in execution order

    def reference(self, ancestors, layer, ref):
        """The reference that resolves to `ref` from `layer`, whose enclosing blocks are
        `ancestors` (outermost first, each with the children written so far)."""
        r = layer.path.split(".")
        if ref[0] == "input":
            target, depth = [ref[1]], 0
        else:
            target = ref[1].split(".")
            depth = 0
            while depth < len(r) - 1 and depth < len(target) - 1 and r[depth] == target[depth]:
                depth += 1
        first = target[depth]
        # a layer named `first` in a scope searched before the one meant would be taken instead
        for block in ancestors[depth + 1 if ref[0] == "layer" else 0:]:
            earlier = block.child_names()[:-1] if block is not ancestors[-1] else block.child_names()
            if first in earlier:
                raise EmitError("layer '%s'%s reads '%s', but a layer '%s' in '%s' comes first in the lookup; rename "
                                "one of them" % (layer.path, layer.where, ".".join(target) if ref[0] == "layer" else
                                                 "input " + ref[1], first, ".".join(block.parts) or "the top level"))
        return ".".join(target[depth:])

    def write_block(self, block, ancestors, indent):
        pad = " " * indent
        shown = _Block(block.parts)  # the children written so far: what a reference may see
        chain = ancestors + [shown]
        for child in block.children:
            if isinstance(child, _Block):
                self.lines.append(pad + "- name: %s" % scalar(child.parts[-1]))
                if child.data_parallel:
                    self.lines.append(pad + "  data_parallel: %s" % scalar(child.data_parallel))
                self.lines.append(pad + "  layers:")
                shown.children.append(child)
                self.write_block(child, chain, indent + 4)
            else:
                self.write_leaf(child, chain, pad)
                shown.children.append(child)

    def write_leaf(self, layer, chain, pad):
        fields = [("name", layer.path.split(".")[-1]), ("op", layer.op)]
        refs = [self.reference(chain, layer, ref) for ref in layer.inputs]
        default = self.previous is not None and layer.inputs == [("layer", self.previous.path)]
        if not default:
            fields.append(("inputs", refs[0] if len(refs) == 1 else refs))
        fields += list(layer.attrs.items())
        if layer.device:
            fields.append(("device", layer.device))
        if getattr(layer, "data_parallel", None):
            fields.append(("data_parallel", layer.data_parallel))
        self.lines.append(pad + "- {" + ", ".join("%s: %s" % (k, scalar(v)) for k, v in fields) + "}")
        self.previous = layer


def emit_model(name, inputs, layers, data_parallel=None, outputs=None, targets=None, loss=None, train=None,
               header=None):
    """The model file's text. inputs, targets: {name: {"shape": [...], "dtype": ...}};
    layers: [Layer] in execution order; data_parallel: {block path: spec dict}; outputs:
    {output name: ref}; loss: a dict whose "input" is a ref; train: the train: section."""
    root = _build_tree(layers)
    blocks = {}

    def index(block):
        blocks[".".join(block.parts)] = block
        for c in block.children:
            if isinstance(c, _Block):
                index(c)
    index(root)
    leaves = {layer.path: layer for layer in layers}
    for path, spec in (data_parallel or {}).items():
        if path in blocks:
            blocks[path].data_parallel = spec
        elif path in leaves:  # a wrapped leaf: nn.DataParallel(nn.Linear(...))
            leaves[path].data_parallel = spec
        else:
            raise EmitError("data_parallel block '%s' holds no layer" % path)

    writer = _Writer(list(inputs))
    lines = writer.lines
    if header:
        lines += ["# " + h for h in header]
    lines.append("name: %s" % scalar(name))

    def declare(title, entries):
        lines.append(title + ":")
        for n, info in entries.items():
            spec = {"shape": info["shape"]}
            if info.get("dtype", "float32") != "float32":
                spec["dtype"] = info["dtype"]
            lines.append("  %s: %s" % (scalar(n), scalar(spec)))

    declare("inputs", inputs)
    if targets:
        declare("targets", targets)
    lines.append("layers:")
    writer.write_block(root, [], 2)
    top = _Block(())
    top.children = list(root.children)
    end = Layer("<end>", "", {}, [])
    if outputs:
        lines.append("outputs: %s" % scalar({n: writer.reference([top], end, ref) for n, ref in outputs.items()}))
    if loss:
        loss = dict(loss)
        loss["input"] = writer.reference([top], end, loss["input"])
        lines.append("loss: %s" % scalar(loss))
    if train:
        lines.append("train: %s" % scalar(train))
    return "\n".join(lines) + "\n"
