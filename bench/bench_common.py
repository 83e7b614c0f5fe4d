"""What the benchmarks share: symbol bindings from --bind expressions, finding the
Tandem CLI, and reading its JSON output. Imported by bench_inference.py and
bench_training.py (run from any directory: the scripts put bench/ on sys.path)."""
import json
import os
import shutil
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# PyTorch's OpenBLAS and OpenMP workers busy-wait for a while after its last call; on two
# cores they would take the CPU from the Tandem process measured next.
IDLE_BEFORE_TANDEM_S = 0.5


class BenchError(Exception):
    pass


def parse_binds(items):
    out = {"tags": "8*B"}
    for item in items:
        if "=" not in item:
            raise SystemExit("--bind wants NAME=EXPR, e.g. tags=8*B")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def eval_bind(expr, batch):
    try:
        v = eval(expr, {"__builtins__": {}}, {"B": batch})  # noqa: S307 - a tiny arithmetic expression
    except Exception as e:  # noqa: BLE001
        raise SystemExit("bad --bind expression %r: %s" % (expr, e))
    if int(v) != v or v < 1:
        raise SystemExit("--bind expression %r gives %r for B=%d" % (expr, v, batch))
    return int(v)


def bindings_for(spec, batch, bind_exprs):
    b = {}
    for s in spec.symbols:
        if s == "batch":
            b[s] = batch
        elif s in bind_exprs:
            b[s] = eval_bind(bind_exprs[s], batch)
        else:
            raise BenchError("%s: no value for symbol %r (use --bind %s=EXPR)" % (spec.path, s, s))
    return b


def find_tandem(path):
    if os.path.isabs(path) or os.path.exists(path):
        full = os.path.abspath(path)
    elif os.path.exists(os.path.join(ROOT, path)):
        full = os.path.join(ROOT, path)
    elif os.path.sep not in path and shutil.which(path):
        full = shutil.which(path)
    else:
        full = os.path.join(ROOT, path)
    if not os.path.isfile(full) or not os.access(full, os.X_OK):
        raise BenchError("Tandem CLI not found or not executable: %s\n"
                         "  build it (cmake --build build --target tandem), pass --tandem PATH or set TANDEM=PATH,\n"
                         "  or run with --torch-only" % full)
    return full


def parse_json_output(text):
    text = text.strip()
    try:
        return json.loads(text)
    except ValueError:
        pass
    # tolerate log lines around the JSON object
    start, end = text.find("{"), text.rfind("}")
    if start >= 0 and end > start:
        try:
            return json.loads(text[start:end + 1])
        except ValueError:
            pass
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    raise BenchError("no JSON in the Tandem output:\n%s" % text[-2000:])


def fmt(v, spec="%.3f"):
    return "-" if v is None else spec % v


def run_tandem_json(cmd, timeout, threads, pause=True):
    """Runs the Tandem CLI `cmd` on `threads` OpenMP threads (after the pause, unless
    pause is False) and returns its JSON document; BenchError on failure."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    if pause:
        time.sleep(IDLE_BEFORE_TANDEM_S)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError("timed out after %d s: %s" % (timeout, " ".join(cmd)))
    if r.returncode != 0:
        raise BenchError("exit %d from: %s\n%s%s" % (r.returncode, " ".join(cmd), r.stdout[-2000:], r.stderr[-2000:]))
    return parse_json_output(r.stdout)


def tandem_timing(doc):
    """(median ms, min ms) from a Tandem JSON document's "timing"."""
    timing = doc.get("timing") if isinstance(doc, dict) else None
    if not isinstance(timing, dict) or "median_ms" not in timing:
        raise BenchError("no timing.median_ms in the Tandem JSON: %s" % json.dumps(doc)[:2000])
    return float(timing["median_ms"]), float(timing.get("min_ms", timing["median_ms"]))
