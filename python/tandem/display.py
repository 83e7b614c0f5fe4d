"""A plan and a device report as Python objects: attribute access to what `tandem plan
--json` and `tandem run --report` give, printed as text tables and shown as HTML tables in
a notebook (_repr_html_)."""
import html
from types import SimpleNamespace

__all__ = ["Plan", "DeviceReport", "format_bytes"]


def format_bytes(n):
    """1536 -> '1.5 KiB', as the CLI prints sizes."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return ("%d B" % n) if unit == "B" else ("%.1f %s" % (n, unit))
        n /= 1024
    return "%.1f TiB" % n


def _text_table(headers, rows):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h))
              for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def _html_table(headers, rows):
    head = "".join("<th>%s</th>" % html.escape(str(h)) for h in headers)
    body = "".join("<tr>%s</tr>" % "".join("<td>%s</td>" % html.escape(str(c)) for c in r) for r in rows)
    return "<table><thead><tr>%s</tr></thead><tbody>%s</tbody></table>" % (head, body)


class Plan:
    """Where each layer runs, and why. Attributes: model, policy, training, batch, layers
    (path, op, device, precision, precision_reason, reason, parameter_bytes, activation_bytes:
    precision is what the layer's kernel runs in there), segments, copies (value,
    from_, to, bytes, direction, reason), devices (the memory estimate per device: parameter,
    activation, gradient, optimizer and peak bytes, capacity), notes."""

    def __init__(self, data):
        self.data = data  # the dict, as `tandem plan --json` prints it
        self.model = data["model"]
        self.policy = data["policy"]
        self.training = data["training"]
        self.batch = data["batch"]
        self.layers = [SimpleNamespace(**row) for row in data["layers"]]
        self.segments = [SimpleNamespace(**row) for row in data["segments"]]
        # `from` is a keyword: the attribute is from_
        self.copies = [SimpleNamespace(from_=row["from"], **{k: v for k, v in row.items() if k != "from"})
                       for row in data["copies"]]
        self.devices = [SimpleNamespace(**row) for row in data["devices"]]
        self.notes = list(data["notes"])

    def device_of(self, path):
        """The device layer `path` runs on (a data_parallel replica's path ends in @k)."""
        for layer in self.layers:
            if layer.path == path:
                return layer.device
        raise KeyError("plan of model '%s' has no layer '%s'" % (self.model, path))

    def _tables(self):
        layers = (["layer", "op", "device", "params", "output", "reason"],
                  [[l.path, l.op, l.device, format_bytes(l.parameter_bytes), format_bytes(l.activation_bytes),
                    l.reason] for l in self.layers])
        copies = (["value", "from", "to", "bytes", "direction", "reason"],
                  [[c.value, c.from_, c.to, format_bytes(c.bytes), c.direction, c.reason] for c in self.copies])
        devices = (["device", "parameters", "activations", "gradients", "optimizer", "peak", "capacity"],
                   [[d.device, format_bytes(d.parameter_bytes), format_bytes(d.activation_bytes),
                     format_bytes(d.gradient_bytes), format_bytes(d.optimizer_bytes), format_bytes(d.peak_bytes),
                     format_bytes(d.capacity_bytes) if d.capacity_bytes else "-"] for d in self.devices])
        return layers, copies, devices

    def _title(self):
        return "plan of '%s' (%s, batch %d, policy %s)" % (self.model, "training" if self.training else "inference",
                                                          self.batch, self.policy)

    def __repr__(self):
        layers, copies, devices = self._tables()
        parts = [self._title(), _text_table(*layers)]
        if copies[1]:
            parts += ["copies:", _text_table(*copies)]
        if devices[1]:
            parts += ["memory per device (estimate):", _text_table(*devices)]
        parts += ["note: " + n for n in self.notes]
        return "\n".join(parts)

    def _repr_html_(self):
        layers, copies, devices = self._tables()
        parts = ["<p><b>%s</b></p>" % html.escape(self._title()), _html_table(*layers)]
        if copies[1]:
            parts += ["<p>copies</p>", _html_table(*copies)]
        if devices[1]:
            parts += ["<p>memory per device (estimate)</p>", _html_table(*devices)]
        parts += ["<p>note: %s</p>" % html.escape(n) for n in self.notes]
        return "".join(parts)


class DeviceReport:
    """Per device, what passes did: a list of rows (device, peak_bytes, current_bytes,
    busy_ms, bytes_in, bytes_out, copies_in, copies_out); empty before a pass. A model on
    the cpu alone has one row, the cpu's."""

    def __init__(self, rows):
        self.rows = [SimpleNamespace(**row) for row in rows]

    def __iter__(self):
        return iter(self.rows)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, device):
        """The row of `device` ("cuda:0"), or by position."""
        if isinstance(device, int):
            return self.rows[device]
        for row in self.rows:
            if row.device == device:
                return row
        raise KeyError("no report for device '%s' (devices: %s)" % (device, ", ".join(r.device for r in self.rows)))

    def _table(self):
        return (["device", "peak", "busy ms", "bytes in", "copies in", "bytes out", "copies out"],
                [[r.device, format_bytes(r.peak_bytes), "%.3f" % r.busy_ms, format_bytes(r.bytes_in), r.copies_in,
                  format_bytes(r.bytes_out), r.copies_out] for r in self.rows])

    def __repr__(self):
        if not self.rows:
            return "device report: empty (no placed pass yet)"
        return _text_table(*self._table())

    def _repr_html_(self):
        if not self.rows:
            return "<p>device report: empty (no placed pass yet)</p>"
        return _html_table(*self._table())
