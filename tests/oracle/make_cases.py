#!/usr/bin/python3
"""Writes oracle cases: PyTorch weights, inputs and expected outputs for Tandem models.

    make_cases.py --out DIR [--seed S] PATHS...

PATHS are YAML files or directories (their *.yaml, sorted), any number of them. For each
model, two inference cases: `<stem>-b1` (batch = 1) and `<stem>-b<N>` (batch = N, random
in 2..9); every other symbol is random in 1..12 per case. Each case directory holds
weights.safetensors (the state_dict), inputs.safetensors, expected.safetensors (outputs
by name) and, where torch can differentiate the model ("grads": true in the manifest),
grads.safetensors:
  grad_output.<output>  randn of the output's shape (the seed of the backward pass)
  grad.<param>          d(sum_o <grad_output.o, o>)/d param, for every state_dict entry
                        (zeros where the outputs do not depend on it)
  grad_input.<input>    the same for every float32 graph input
computed in eval mode (dropout is the identity), or with the YAML's top-level
`oracle_mode: train` in training mode (batch_norm2d uses the batch's statistics), where
  buffer.<name>         every buffer after that one training forward (running statistics)
is recorded too ("grads_training": true in the manifest). weights.safetensors holds every
state_dict entry as float32, except int64 counters (num_batches_tracked) kept int64.
Gradients must match to 1e-4 (relative to each tensor's largest value); a deep model's
YAML may loosen that with the top-level `oracle_grad_tolerance` ("grad_tolerance" in the
manifest), saying in a comment why.

A model whose top level says `precision: bf16` runs forward and backward under
torch.autocast("cpu", dtype=torch.bfloat16) (its outputs given back as float32); its case
also holds expected_fp32.safetensors and grads_fp32.safetensors, the same model's outputs
and gradients in fp32, and the manifest says "precision": "bf16". Its outputs must match to 1e-2 and its gradients to 2e-2 (the
YAML's `oracle_tolerance` and `oracle_grad_tolerance` may say otherwise): bf16 keeps 8
bits of mantissa, and torch rounds each autocast op's output to bf16 where Tandem keeps
fp32 (docs/precision.md).

A model with `loss:` and `train:` also gets a training case `<stem>-train`:
  weights.safetensors   the initial state_dict
  batches.safetensors   step<k>.<input or target name> for k in 0..S-1 (S = 50, or the
                        YAML's top-level `oracle_steps`), batch = train.batch
  expected.safetensors  loss [S] float32 (the loss of step k, before its update),
                        lr [S] float32 (the learning rate step k used),
                        final.<param> (the weights after S steps),
                        step0.grad.<param> (step 0's gradients, after clipping)
listed under "train_cases" in the manifest with the steps, batch, bindings and the
total_steps a cosine schedule without total_steps used (epochs * S: the case's data is
the S batches in order, one epoch = S steps). The model runs in training mode; dropout
must have p = 0 there.

DIR/manifest.json lists the cases. A YAML with the top-level key `oracle: skip` is
reported and skipped without being built (one the oracle cannot build, or one too large
for it, such as configs/dlrm.yaml's 2 GiB of tables, whose small twin is a train case); any
other YAML the oracle cannot build fails the run (exit 1).
"""
import argparse
import collections
import json
import os
import random
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import tandem_torch as tt  # noqa: E402


def collect(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".yaml"))
        elif os.path.isfile(p):
            files.append(p)
        else:
            raise SystemExit("make_cases: no such file or directory: %s" % p)
    seen, out = set(), []
    for f in files:
        r = os.path.realpath(f)
        if r not in seen:
            seen.add(r)
            out.append(os.path.abspath(f))
    return out


def perturb_norms(model):
    """layer_norm and batch norms start at weight 1, bias 0 (and running mean 0, var 1),
    multi_head_attention's biases at 0; move them so that loading them is tested."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.LayerNorm, tt.LayerNormNoBias, torch.nn.modules.batchnorm._BatchNorm)):
                for p in m.parameters(recurse=False):
                    p.add_(0.1 * torch.randn_like(p))
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.track_running_stats:
                m.running_mean.add_(0.2 * torch.randn_like(m.running_mean))
                m.running_var.mul_(torch.empty_like(m.running_var).uniform_(0.5, 2.0))
                m.num_batches_tracked.fill_(int(torch.randint(0, 100, ())))
            if isinstance(m, torch.nn.MultiheadAttention):
                # its biases start at zero: move them so that loading them is tested
                for b in (m.in_proj_bias, m.out_proj.bias):
                    if b is not None:
                        b.add_(0.1 * torch.randn_like(b))


def stored(t):
    """A state_dict entry as the weights file holds it: float32, or int64 for a counter
    buffer (batch_norm2d's num_batches_tracked, as torch saves it)."""
    t = t.detach().clone()
    return t if t.dtype == torch.int64 else t.float()


def train_mode(doc):
    """`oracle_mode: train` differentiates the model in training mode (batch statistics)."""
    mode = doc.get("oracle_mode", "eval") if isinstance(doc, dict) else "eval"
    if mode not in ("eval", "train"):
        raise tt.SpecError("oracle_mode must be eval or train, got %r" % (mode,))
    return mode == "train"


def precision_of(doc):
    """The model's top-level `precision:` as the oracle runs it: fp32 or bf16."""
    p = doc.get("precision", "fp32") if isinstance(doc, dict) else "fp32"
    if p not in ("fp32", "bf16"):
        raise tt.SpecError("the oracle runs precision fp32 or bf16 (torch.autocast on the cpu), got %r" % (p,))
    return p


def autocast(doc):
    """torch.autocast on the cpu in bf16 for a model whose top level says bf16, else nothing."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision_of(doc) == "bf16")


def norms_in_float32(model, doc):
    """Under autocast, layer_norm and the batch norms take their input as float32, as Tandem's
    (and later torch's autocast, whose fp32 list has layer_norm) do; torch 1.13's cpu
    autocast would hand them bf16 beside float32 weights, which they refuse."""
    if precision_of(doc) == "fp32":
        return
    for m in model.modules():
        if isinstance(m, (torch.nn.LayerNorm, tt.LayerNormNoBias, torch.nn.modules.batchnorm._BatchNorm)):
            m.register_forward_pre_hook(lambda _m, args: tuple(a.float() if torch.is_tensor(a) and a.is_floating_point()
                                                               else a for a in args))


def as_float32(outputs):
    """Autocast's bf16 outputs as float32 (what Tandem's outputs are)."""
    return collections.OrderedDict((k, v.float() if v.is_floating_point() else v) for k, v in outputs.items())


def make_case(yaml_path, doc, stem, batch_kind, seed, out_dir):
    rng = random.Random("%d:%s:%s" % (seed, stem, batch_kind))
    batch = 1 if batch_kind == "b1" else rng.randint(2, 9)
    model_seed = rng.randrange(2 ** 31)
    torch.manual_seed(model_seed)
    model, spec = tt.build_model(yaml_path, doc=doc)
    perturb_norms(model)
    norms_in_float32(model, doc)
    bindings = tt.draw_bindings(spec, rng, batch)
    gen = torch.Generator().manual_seed(rng.randrange(2 ** 31))
    inputs = tt.draw_inputs(spec, bindings, gen)
    with torch.no_grad(), autocast(doc):
        outputs = as_float32(model(inputs, bindings))
    name = "%s-b%d" % (stem, batch)
    case_dir = os.path.join(out_dir, name)
    os.makedirs(case_dir, exist_ok=True)
    for o, t in outputs.items():
        if t.dtype != torch.float32:
            raise tt.SpecError("output %r is %s, expected float32" % (o, t.dtype))
    tt.write_safetensors(os.path.join(case_dir, "weights.safetensors"),
                         {k: stored(v) for k, v in model.state_dict().items()})
    tt.write_safetensors(os.path.join(case_dir, "inputs.safetensors"), inputs)
    tt.write_safetensors(os.path.join(case_dir, "expected.safetensors"), dict(outputs))
    reduced = precision_of(doc) != "fp32"
    if reduced:
        with torch.no_grad():
            tt.write_safetensors(os.path.join(case_dir, "expected_fp32.safetensors"), dict(model(inputs, bindings)))
    training = train_mode(doc)
    grads_seed = rng.randrange(2 ** 31)
    grads = make_grads(model, spec, inputs, bindings, grads_seed, training, doc)
    gpath = os.path.join(case_dir, "grads.safetensors")
    if grads is not None:
        tt.write_safetensors(gpath, grads)
        if reduced:  # the same backward (the same grad_output) in fp32
            tt.write_safetensors(os.path.join(case_dir, "grads_fp32.safetensors"),
                                 make_grads(model, spec, inputs, bindings, grads_seed, training))
    elif os.path.exists(gpath):
        os.remove(gpath)
    return {
        "name": name,
        "model": os.path.abspath(yaml_path),
        "dir": os.path.abspath(case_dir),
        "bindings": bindings,
        "inputs": list(spec.inputs),
        "outputs": list(outputs),
        "shapes": {k: list(v.shape) for k, v in outputs.items()},
        "grads": grads is not None,
        "grads_training": training,
        "grad_tolerance": grad_tolerance(doc),
        "tolerance": output_tolerance(doc),
        "precision": precision_of(doc),
    }


def grad_tolerance(doc):
    """`oracle_grad_tolerance`: how close gradients must be (1e-4, 2e-2 in bf16, unless the
    YAML says)."""
    default = 2e-2 if precision_of(doc) == "bf16" else 1e-4
    tol = doc.get("oracle_grad_tolerance", default) if isinstance(doc, dict) else default
    if not isinstance(tol, (int, float)) or isinstance(tol, bool) or not 0 < tol <= 1e-1:
        raise tt.SpecError("oracle_grad_tolerance must be a number in (0, 1e-1], got %r" % (tol,))
    return float(tol)


def output_tolerance(doc):
    """`oracle_tolerance`: how close outputs must be (1e-5, 1e-2 in bf16, unless the YAML says)."""
    default = 1e-2 if precision_of(doc) == "bf16" else 1e-5
    tol = doc.get("oracle_tolerance", default) if isinstance(doc, dict) else default
    if not isinstance(tol, (int, float)) or isinstance(tol, bool) or not 0 < tol <= 1e-1:
        raise tt.SpecError("oracle_tolerance must be a number in (0, 1e-1], got %r" % (tol,))
    return float(tol)


def make_grads(model, spec, inputs, bindings, seed, training=False, doc=None):
    """grads.safetensors' tensors, or None when torch cannot differentiate the outputs.
    With `training`, the forward runs in training mode and the buffers it updated
    (batch_norm2d's running statistics) are recorded as buffer.<name>."""
    gen = torch.Generator().manual_seed(seed)
    ins = collections.OrderedDict()
    for n, t in inputs.items():
        ins[n] = t.clone().requires_grad_(True) if t.dtype == torch.float32 else t
    params = collections.OrderedDict(model.named_parameters())
    for p in params.values():
        p.grad = None
    try:
        with torch.enable_grad():
            model.train(training)
            try:
                with autocast(doc):
                    outputs = as_float32(model(ins, bindings))
            finally:
                model.eval()
            outs, seeds, named = [], [], collections.OrderedDict()
            for name, o in outputs.items():
                if o.dtype != torch.float32:
                    continue
                g = torch.randn(o.shape, generator=gen)
                named["grad_output." + name] = g
                if o.requires_grad:
                    outs.append(o)
                    seeds.append(g)
            if not outs:
                return None
            torch.autograd.backward(outs, seeds)
    except RuntimeError as e:
        print("make_cases: no grads for %s: %s" % (spec.name, e), file=sys.stderr)
        return None
    res = collections.OrderedDict(named)
    for n, p in params.items():
        res["grad." + n] = tt.dense(p.grad).detach().clone() if p.grad is not None else torch.zeros_like(p)
        p.grad = None
    for n, t in ins.items():
        if t.dtype == torch.float32:
            res["grad_input." + n] = t.grad.detach().clone() if t.grad is not None else torch.zeros_like(t)
    if training:
        for n, b in model.named_buffers():
            res["buffer." + n] = stored(b)
    return res


def make_train_case(yaml_path, doc, stem, seed, out_dir):
    if precision_of(doc) != "fp32":
        raise tt.SpecError("training cases run in fp32: a bf16 model is checked op by op, and trained by the "
                           "precision tests (tests/unit/precision_training_test.cpp)")
    rng = random.Random("%d:%s:train" % (seed, stem))
    torch.manual_seed(rng.randrange(2 ** 31))
    model, spec = tt.build_model(yaml_path, doc=doc)
    for s in spec.plan:
        p = s.attrs.get("p") if s.op == "dropout" else s.attrs.get("dropout")
        if p:  # torch's random stream is not Tandem's
            raise tt.SpecError("training case: layer '%s' (%s) drops with p = %s; training cases need p = 0"
                               % (s.path, s.op, p))
    perturb_norms(model)
    train = spec.train
    if doc.get("oracle_train", "full") not in ("full", "losses"):
        raise tt.SpecError("oracle_train must be full or losses")
    steps = doc.get("oracle_steps", 50)
    if not tt._is_int(steps) or steps < 1:
        raise tt.SpecError("oracle_steps must be a positive int")
    batch = train["batch"]
    bindings = tt.draw_bindings(spec, rng, batch)
    total_steps = train["epochs"] * steps
    gen = torch.Generator().manual_seed(rng.randrange(2 ** 31))
    weights = {k: stored(v) for k, v in model.state_dict().items()}
    opt, sched = tt.make_optimizer(model, train, total_steps)
    model.train()
    batches, losses, lrs, expected = collections.OrderedDict(), [], [], collections.OrderedDict()
    for k in range(steps):
        inputs = tt.draw_inputs(spec, bindings, gen)
        n_classes = None
        if spec.loss["op"] in tt.CLASS_LOSSES:
            with torch.no_grad():  # in eval mode: a training forward would move running statistics
                model.eval()
                n_classes = tt.loss_classes(spec, model.values(inputs, bindings))
                model.train()
        targets = tt.draw_targets(spec, bindings, gen, n_classes)
        for n, t in list(inputs.items()) + list(targets.items()):
            batches["step%d.%s" % (k, n)] = t
        lrs.append(opt.param_groups[0]["lr"])
        loss, grads = tt.train_step(model, opt, sched, inputs, targets, bindings, train["clip_grad_norm"])
        if not torch.isfinite(loss):
            raise tt.SpecError("training case: loss of step %d is %s" % (k, float(loss)))
        losses.append(float(loss))
        if k == 0:
            for n, g in grads.items():
                expected["step0.grad." + n] = tt.dense(g)
    expected["loss"] = torch.tensor(losses, dtype=torch.float32)
    expected["lr"] = torch.tensor(lrs, dtype=torch.float32)
    for n, p in model.state_dict().items():
        expected["final." + n] = stored(p)
    name = "%s-train" % stem
    case_dir = os.path.join(out_dir, name)
    os.makedirs(case_dir, exist_ok=True)
    tt.write_safetensors(os.path.join(case_dir, "weights.safetensors"), weights)
    tt.write_safetensors(os.path.join(case_dir, "batches.safetensors"), batches)
    tt.write_safetensors(os.path.join(case_dir, "expected.safetensors"), expected)
    return {
        "name": name,
        "model": os.path.abspath(yaml_path),
        "dir": os.path.abspath(case_dir),
        "steps": steps,
        "batch": batch,
        "bindings": bindings,
        "total_steps": total_steps,
        "inputs": list(spec.inputs),
        "targets": list(spec.targets),
        "params": list(weights),
        "first_loss": losses[0],
        "last_loss": losses[-1],
        # `oracle_train: losses`: deep ReLU nets whose per-element gradients flip at ReLU
        # kinks under float32 rounding (a few elements of a bias off by O(1)); the losses at
        # every step are compared, the gradients and final weights are not
        "losses_only": doc.get("oracle_train") == "losses",
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--seed", type=int, default=None, help="seed (default: fresh per run)")
    ap.add_argument("-q", "--quiet", action="store_true")
    ap.add_argument("paths", nargs="+")
    args = ap.parse_args(argv)

    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF
    print("make_cases: seed %d (rerun with --seed %d)" % (seed, seed), flush=True)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    t0 = time.time()
    os.makedirs(args.out, exist_ok=True)
    cases, train_cases, names, skipped = [], [], set(), []
    for path in collect(args.paths):
        stem = os.path.splitext(os.path.basename(path))[0]
        try:
            doc = tt.load_spec_doc(path)
            if isinstance(doc, dict) and doc.get("oracle") == "skip":
                print("make_cases: skipping %s (oracle: skip)" % path, file=sys.stderr)
                skipped.append(path)
                continue
            made = [make_case(path, doc, stem, kind, seed, args.out) for kind in ("b1", "bN")]
            trains = isinstance(doc, dict) and "loss" in doc and "train" in doc
            tmade = [make_train_case(path, doc, stem, seed, args.out)] if trains else []
        except Exception as e:  # noqa: BLE001
            msg = "%s: %s" % (type(e).__name__, e)
            print("make_cases: FAILED on %s: %s" % (path, msg), file=sys.stderr)
            if not isinstance(e, tt.SpecError):
                traceback.print_exc()
            return 1
        for c in made:
            if c["name"] in names:
                print("make_cases: FAILED: two cases named %s (same YAML stem twice?)" % c["name"], file=sys.stderr)
                return 1
            names.add(c["name"])
            cases.append(c)
            if not args.quiet:
                print("  %-32s %s -> %s" % (c["name"], json.dumps(c["bindings"]),
                                           ", ".join("%s%s" % (k, v) for k, v in c["shapes"].items())))
        for c in tmade:
            if c["name"] in names:
                print("make_cases: FAILED: two cases named %s (same YAML stem twice?)" % c["name"], file=sys.stderr)
                return 1
            names.add(c["name"])
            train_cases.append(c)
            if not args.quiet:
                print("  %-32s %d steps, batch %d, loss %.4g -> %.4g" % (c["name"], c["steps"], c["batch"],
                                                                       c["first_loss"], c["last_loss"]))
    manifest = {"seed": seed, "cases": cases, "train_cases": train_cases, "skipped": skipped}
    tmp = os.path.join(args.out, "manifest.json.tmp")
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1)
    os.replace(tmp, os.path.join(args.out, "manifest.json"))
    print("make_cases: %d cases from %d models (%d with grads), %d training cases, in %.1f s (seed %d)"
          % (len(cases), len(cases) // 2, sum(c["grads"] for c in cases), len(train_cases), time.time() - t0, seed),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
