"""torch.nn.parallel's primitives over Tandem's devices, for composing data parallelism by
hand as PyTorch users learn to (docs/python.md, "The parallel primitives"):

    replicas = parallel.replicate(model, ["cuda:0", "cuda:1"])
    chunks = parallel.scatter({"x": x}, ["cuda:0", "cuda:1"], dim=0)
    outputs = parallel.parallel_apply(replicas[:len(chunks)], chunks)
    y = parallel.gather(outputs, "cuda:0", dim=0)

computes what the same layers in a `data_parallel: {devices: [cuda:0, cuda:1], dim: 0}`
block compute. The semantics are torch's: chunks as torch.chunk makes them (ceil(n / k)
rows each, the last smaller, fewer chunks than devices for a small batch), objects that
are not tensors passed to every replica, outputs concatenated along `dim`.

What differs, and why: Tandem's tensors seen from Python live in host memory, and a model
moves its inputs to its devices itself. So a scattered chunk is a view of the input (no
copy) that replica k's model takes to devices[k] when it runs, and a gathered output is
host memory whatever `output_device` says. And replicate() copies the weights once (a
snapshot): train the model, not its replicas.
"""
import threading

from . import _tandem

__all__ = ["replicate", "scatter", "gather", "parallel_apply", "data_parallel", "device_name"]


def device_name(device):
    """'cuda:1' for 1, 'cuda:1', or a torch.device('cuda', 1); 'cpu' for 'cpu'."""
    if isinstance(device, int):
        return "cuda:%d" % device
    text = str(device)
    return "cuda:0" if text == "cuda" else text


def _all_gpus():
    return [d["device"] for d in _tandem.devices() if d["device"] != "cpu"]


def _is_torch(obj):
    return type(obj).__module__ == "torch" and type(obj).__name__ in ("Tensor", "Parameter")


def _is_tensor(obj):
    return _is_torch(obj) or (type(obj).__module__ == "numpy" and type(obj).__name__ == "ndarray")


def _chunk(tensor, chunks, dim):
    """torch.chunk(tensor, chunks, dim) for torch tensors and numpy arrays alike: views."""
    if _is_torch(tensor):
        return list(tensor.chunk(chunks, dim))
    n = tensor.shape[dim]
    size = -(-n // chunks) if n else 0
    if size == 0:
        return [tensor]
    return [tensor[(slice(None),) * (dim % tensor.ndim) + (slice(start, start + size),)] for start in range(0, n, size)]


def scatter(inputs, target_devices, dim=0):
    """Splits every tensor of `inputs` (a tensor, or tuples, lists and dicts of them) into
    chunks along `dim`, one per device as torch.chunk makes them; anything else is passed to
    each. Returns one entry per chunk: chunk k is for target_devices[k]."""
    devices = [device_name(d) for d in target_devices]
    if not devices:
        raise ValueError("scatter: no target devices")

    def scatter_map(obj):
        if _is_tensor(obj):
            return _chunk(obj, len(devices), dim)
        if isinstance(obj, tuple) and obj:
            return list(zip(*map(scatter_map, obj)))
        if isinstance(obj, list) and obj:
            return [list(i) for i in zip(*map(scatter_map, obj))]
        if isinstance(obj, dict) and obj:
            return [type(obj)(i) for i in zip(*map(scatter_map, obj.items()))]
        return [obj for _ in devices]

    return scatter_map(inputs)


def replicate(model, devices):
    """One copy of `model` per device, with its weights, copy k running every layer on
    devices[k] (its model.to(devices[k])), on the devices `model` was placed on
    (model.place(sim_gpus=N)) where it was. Each replica calls the forward hooks `model`
    has now (register_forward_hook), as torch's replicas call the module's.

    A model that holds a data_parallel block is refused (tandem.ModelError): its replicas
    would each run the block over the block's own devices, not on devices[k]. torch does
    the same to a module holding an nn.DataParallel (replicate copies its device_ids), and
    then fails at run time on every replica but the one on device_ids[0] ("module must have
    its parameters and buffers on device ..."): nested data parallelism is a mistake there,
    and Tandem refuses nested data_parallel blocks in a model file too. Here it is refused
    up front, saying which block and what to do instead."""
    _refuse_data_parallel_blocks(model, "replicate")
    state = model.state_dict()
    replicas = []
    for device in devices:
        replica = _tandem.Model.from_yaml(model.yaml, model.source, weights_follow=True)
        replica.load_state_dict(state)  # strict: every parameter written
        replica._copy_forward_hooks_of(model)  # as torch's replicas call the module's hooks
        # on the model's own devices: after model.place(sim_gpus=2), its cuda:0 and cuda:1
        replicas.append(replica._to_devices_of(model, device_name(device)))
    return replicas


def _refuse_data_parallel_blocks(model, what):
    blocks = model.data_parallel_blocks
    if not blocks:
        return
    block = blocks[0]
    devices = block["devices"] if isinstance(block["devices"], str) else ", ".join(block["devices"])
    raise _tandem.ModelError(
        "parallel.%s: model '%s' holds data_parallel block '%s' (devices: %s), which splits each batch over its "
        "own devices already: each replica would run it there again, not on the replica's device (torch's "
        "replicate of a module holding an nn.DataParallel keeps its device_ids the same way, and its replicas "
        "off device_ids[0] then fail). Call the model itself (model(x)) to use the block's data parallelism, or "
        "replicate a model whose file has no data_parallel: key" % (what, model.name, block["path"], devices))


def parallel_apply(modules, inputs, kwargs_tup=None, devices=None):
    """modules[k] applied to inputs[k] (a dict: by name; a tuple or list: positional; else
    one positional input), with kwargs_tup[k], each on its own thread (Tandem releases the
    GIL while it computes, so the replicas run at once). Returns the outputs in order; the
    first error is raised. `devices` is accepted for torch's signature: each replica runs
    where replicate() put it."""
    if len(modules) != len(inputs):
        raise ValueError("parallel_apply: %d modules but %d inputs" % (len(modules), len(inputs)))
    kwargs_tup = kwargs_tup or [{}] * len(modules)
    results = [None] * len(modules)
    errors = [None] * len(modules)

    def run(k):
        try:
            args, kwargs = inputs[k], dict(kwargs_tup[k])
            if isinstance(args, dict):
                results[k] = modules[k](**args, **kwargs)
            elif isinstance(args, (tuple, list)):
                results[k] = modules[k](*args, **kwargs)
            else:
                results[k] = modules[k](args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - re-raised on the caller's thread
            errors[k] = e

    threads = [threading.Thread(target=run, args=(k,)) for k in range(1, len(modules))]
    for t in threads:
        t.start()
    if modules:
        run(0)
    for t in threads:
        t.join()
    for e in errors:
        if e is not None:
            raise e
    return results


def gather(outputs, target_device, dim=0):
    """Concatenates the replicas' outputs along `dim`: tensors, or dicts, tuples and lists
    of them (each entry gathered). `target_device` names the device the result is for; the
    result is host memory (see the module's notes)."""
    device_name(target_device)

    def gather_map(items):
        first = items[0]
        if first is None:
            return None
        if _is_tensor(first):
            if _is_torch(first):
                import torch
                return torch.cat(items, dim)
            import numpy
            return numpy.concatenate(items, axis=dim)
        if isinstance(first, dict):
            return type(first)((k, gather_map([d[k] for d in items])) for k in first)
        if isinstance(first, (tuple, list)):
            return type(first)(map(gather_map, zip(*items)))
        raise TypeError("gather: cannot concatenate %s outputs" % type(first).__name__)

    return gather_map(list(outputs))


def data_parallel(module, inputs=(), device_ids=None, output_device=None, dim=0, module_kwargs=None):
    """torch.nn.parallel.data_parallel for a tandem.Model: replicate, scatter the positional
    `inputs` and `module_kwargs` (named inputs), apply in parallel, gather on output_device
    (default device_ids[0]). device_ids default: every GPU of this machine (or simulated)."""
    _refuse_data_parallel_blocks(module, "data_parallel")
    devices = [device_name(d) for d in (device_ids if device_ids is not None else _all_gpus())]
    if not devices:
        raise ValueError("data_parallel: no GPUs (give device_ids, or simulate some with TANDEM_SIM_GPUS=N)")
    if not isinstance(inputs, tuple):
        inputs = (inputs,)
    scattered = scatter(inputs, devices, dim) if inputs else []
    scattered_kwargs = scatter(module_kwargs, devices, dim) if module_kwargs else []
    n = max(len(scattered), len(scattered_kwargs))
    scattered = scattered or [()] * n
    scattered_kwargs = scattered_kwargs or [{}] * n
    replicas = replicate(module, devices[:n])
    outputs = parallel_apply(replicas, scattered, scattered_kwargs)
    return gather(outputs, output_device if output_device is not None else devices[0], dim)
