"""Tandem's names for a torch module's paths, for from_torch and to_torch.

A Tandem layer name is letters, digits and _ (docs/yaml-format.md); torch takes any name
without a dot, and torchvision uses that (regnet's `trunk_output.block1.block1-0`). Each
name Tandem cannot take becomes one it can ('-' and every other character to '_', with a
number added where a sibling already has that name), and the converted model remembers
the torch names: from_torch loads the module's state_dict through them, and to_torch's
module is named as the torch module was."""
import json
import re

__all__ = ["TorchNames", "RENAMED_MARK", "restore_torch_names"]

_ILLEGAL = re.compile(r"[^A-Za-z0-9_]")

# The header line of a converted model that lists the names it changed, as JSON:
# {Tandem path: torch's name of its last part}.
RENAMED_MARK = "torch names: "


def _legal(name):
    return _ILLEGAL.sub("_", name) or "_"


class TorchNames:
    """The Tandem path of every module, parameter and buffer path of `root`."""

    def __init__(self, root):
        self._tandem = {"": ""}  # torch path -> Tandem path
        self.renamed = {}        # Tandem path -> torch's name of its last part (only those that changed)
        self._visit(root, "", "")

    def _visit(self, module, torch_path, tandem_path):
        names = list(module._modules) + list(module._parameters) + list(module._buffers)
        taken = {n for n in names if _legal(n) == n}
        for name in names:
            legal = _legal(name)
            if legal != name:
                base, k = legal, 1
                while legal in taken:
                    legal, k = "%s_%d" % (base, k), k + 1
                taken.add(legal)
            here = torch_path + "." + name if torch_path else name
            there = tandem_path + "." + legal if tandem_path else legal
            self._tandem[here] = there
            if legal != name:
                self.renamed[there] = name
            if module._modules.get(name) is not None:
                self._visit(module._modules[name], here, there)

    def __call__(self, torch_path):
        """The Tandem path of a module (or parameter) path of the root; a path that is not
        one (a call's own name under its module) keeps its last part."""
        if torch_path in self._tandem:
            return self._tandem[torch_path]
        scope, _, last = torch_path.rpartition(".")
        return (self(scope) + "." if scope else "") + last

    def all_paths(self):
        """Every module, parameter and buffer path, in Tandem's names."""
        return set(self._tandem.values()) - {""}

    def state_dict(self, torch_state):
        """`torch_state` (a state_dict) keyed by Tandem's names."""
        return {self(key): value for key, value in torch_state.items()}

    def header(self):
        """The model file's header line that records the renamed paths; None where none was."""
        return RENAMED_MARK + json.dumps(self.renamed, sort_keys=True) if self.renamed else None


def restore_torch_names(module, yaml_text):
    """Renames `module`'s children (a to_torch twin, built under Tandem's names) back to
    the torch names a converted model's header records."""
    renamed = {}
    for line in yaml_text.splitlines():
        if line.startswith("# " + RENAMED_MARK):
            renamed = json.loads(line[len("# " + RENAMED_MARK):])
            break
    # deepest first: a parent is found by its Tandem path until its own turn
    for path in sorted(renamed, key=lambda p: p.count("."), reverse=True):
        parent = module
        *scope, last = path.split(".")
        for part in scope:
            parent = parent._modules.get(part) if parent is not None else None
        if parent is None:
            continue  # a module none of whose calls became a layer
        for table in (parent._modules, parent._parameters, parent._buffers):
            if last in table:
                items = [(renamed[path] if k == last else k, v) for k, v in table.items()]
                table.clear()
                table.update(items)
    return module
