"""Tracing a torch.nn.Module for from_torch: the torch.fx graph, the module path each node
was called from, and every value's shape at two batch sizes (which dimensions are the
batch is what a Tandem model needs to know and a single run cannot tell).

torch 1.13's fx records no module scope, so the tracer keeps its own stack; it traces
through nn.DataParallel (a leaf by fx's rule, and on a GPU machine its forward scatters)
as if the wrapped module were called, noting the wrapper; and it leaves the ops Tandem
has as leaves even when a user subclasses them without changing forward."""
import contextlib
import dis
import inspect
import operator

import torch
import torch.fx as fx
import torch.nn as nn

__all__ = ["Traced", "trace_module", "propagate_shapes", "grown_batch", "DEVICE_METHODS"]

# Moving a tensor between devices: identity in the trace (a CPU-only torch cannot run it),
# and a `device:` for what reads the result.
DEVICE_METHODS = ("to", "cuda", "cpu")


class Traced:
    """What tracing gives: the fx graph module, and per node the scope (the path of the
    module whose forward made the call, '' for the root) and the data_parallel wrappers."""

    def __init__(self, graph_module, scopes, data_parallel, module_paths):
        self.graph_module = graph_module
        self.scopes = scopes                  # node -> module path ('' at the root)
        self.data_parallel = data_parallel    # wrapper path -> nn.DataParallel
        self.module_paths = module_paths      # call_module target -> its nn.Module


class _Tracer(fx.Tracer):
    def __init__(self, leaf_types):
        super().__init__()
        self.record_stack_traces = True  # where in the user's forward each node came from
        self.leaf_types = leaf_types
        self.scope = [""]
        self.scopes = {}
        self.data_parallel = {}

    def is_leaf_module(self, m, qualified_name):
        for t in self.leaf_types:
            if isinstance(m, t) and type(m).forward is t.forward:
                return True
        if isinstance(m, (nn.DataParallel, nn.Sequential, nn.ModuleList, nn.ModuleDict)):
            return False
        return super().is_leaf_module(m, qualified_name)

    def call_module(self, m, forward, args, kwargs):
        path = self.path_of_module(m)
        if isinstance(m, nn.DataParallel):
            self.data_parallel[path] = m
            self.scope.append(path)
            try:
                return self.call_module(m.module, m.module.forward, args, kwargs)
            finally:
                self.scope.pop()
        if self.is_leaf_module(m, path):
            return self.create_proxy("call_module", path, args, kwargs)
        self.scope.append(path)
        try:
            return forward(*args, **kwargs)
        finally:
            self.scope.pop()

    def create_node(self, *args, **kwargs):
        node = super().create_node(*args, **kwargs)
        self.scopes[node] = self.scope[-1]
        return node


def _unpacking_iter(self):
    """Proxy.__iter__ for `a, b = proxy` that finds the UNPACK_SEQUENCE by its offset:
    torch 1.13's indexes dis' list by f_lasti // 2, which Python 3.11's hidden cache
    entries break (an IndexError, or the wrong instruction)."""
    calling_frame = inspect.currentframe().f_back
    for inst in dis.get_instructions(calling_frame.f_code):
        if inst.offset == calling_frame.f_lasti:
            if inst.opname == "UNPACK_SEQUENCE":
                return (self[i] for i in range(inst.argval))
            break
    return self.tracer.iter(self)


@contextlib.contextmanager
def _tuple_unpacking_that_works():
    original = fx.Proxy.__iter__
    fx.Proxy.__iter__ = _unpacking_iter
    try:
        yield
    finally:
        fx.Proxy.__iter__ = original


def trace_module(module, input_names, leaf_types):
    """Traces `module.forward` with `input_names` as its tensor arguments; the other
    arguments keep their defaults (fx's concrete_args)."""
    signature = inspect.signature(module.forward)
    concrete = {}
    for name, p in signature.parameters.items():
        if name in input_names or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.default is p.empty:
            raise ValueError("forward() argument '%s' of %s has no example input and no default"
                             % (name, type(module).__name__))
        concrete[name] = p.default
    tracer = _Tracer(leaf_types)
    with _tuple_unpacking_that_works():
        graph = tracer.trace(module, concrete_args=concrete or None)
    graph_module = fx.GraphModule(tracer.root, graph)
    module_paths = dict(module.named_modules())
    return Traced(graph_module, tracer.scopes, tracer.data_parallel, module_paths)


class _ShapeRecorder(fx.Interpreter):
    """Runs the graph, keeping every node's value; moves between devices are identities."""

    def __init__(self, graph_module):
        super().__init__(graph_module)
        self.values = {}

    def run_node(self, n):
        value = super().run_node(n)
        self.values[n] = value
        return value

    def call_method(self, target, args, kwargs):
        if target in DEVICE_METHODS and _only_moves_device(target, args, kwargs):
            return args[0]
        return super().call_method(target, args, kwargs)


def _only_moves_device(target, args, kwargs):
    if target != "to":
        return True
    rest = list(args[1:]) + list(kwargs.values())
    return all(isinstance(a, (str, torch.device, int)) or a is None for a in rest) and not any(
        isinstance(a, torch.dtype) for a in rest)


def propagate_shapes(traced, inputs):
    """Every node's value for `inputs` (a list in placeholder order), in eval mode and
    without gradients."""
    recorder = _ShapeRecorder(traced.graph_module)
    with torch.no_grad():
        recorder.run(*inputs)
    return recorder.values


def grown_batch(tensor, dim):
    """`tensor` with one more sample along `dim`, a copy of its last: index inputs stay in
    range, and embedding_bag offsets stay sorted (an empty bag more)."""
    return torch.cat([tensor, tensor.narrow(dim, tensor.shape[dim] - 1, 1)], dim)


def is_getitem(node):
    return node.op == "call_function" and node.target is operator.getitem
