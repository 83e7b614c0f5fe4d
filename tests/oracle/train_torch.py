#!/usr/bin/python3
"""Trains a Tandem model file with PyTorch, as docs/training.md describes `tandem train`:
the reference for what a recipe reaches (not bit-compatible with Tandem: the shuffling
and initialisation generators differ).

    train_torch.py MODEL.yaml [--data FILE] [--epochs N] [--seed S] [--json]

Loads the CSV (.csv / .csv.gz; default column mapping: the inputs, then the targets, each
taking as many consecutive columns as its non-batch dimensions hold) or safetensors file
of `train.data`, holds out the last round(validation_split * N) samples of a seeded
permutation, trains `epochs` epochs of shuffled batches (cosine total_steps = epochs *
steps per epoch) and reports the training loss and, for a class loss, the validation
accuracy (argmax of the loss input), for binary_cross_entropy_with_logits the validation
ROC AUC (sklearn's roc_auc_score of the logits), after every epoch.
"""
import argparse
import gzip
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import tandem_torch as tt  # noqa: E402


def _batch_dim(shape):
    """Where the batch stands: the one symbolic dimension (docs/training.md)."""
    symbols = [i for i, d in enumerate(shape) if isinstance(d, str)]
    if len(symbols) != 1:
        raise tt.SpecError("data: exactly one dimension may be a symbol (the batch), got %s" % shape)
    return symbols[0]


def _sample_shape(shape):
    return [int(d) for i, d in enumerate(shape) if i != _batch_dim(shape)]


def _numel(shape):
    n = 1
    for d in _sample_shape(shape):
        n *= d
    return n


def model_layout(spec, batch):
    """A batch gathered from the data (samples first) as the model takes it: each
    tensor's sample dimension moved to where its declared shape has the batch."""
    infos = dict(spec.inputs, **spec.targets)
    return {k: t.movedim(0, _batch_dim(infos[k]["shape"])) for k, t in batch.items()}


def load_data(spec, data, base_dir):
    path = data["path"]
    if not os.path.isabs(path):
        path = os.path.join(base_dir, path)
    names = list(spec.inputs) + list(spec.targets)
    infos = dict(spec.inputs, **spec.targets)
    if data["format"] == "safetensors":
        t = tt.read_safetensors(path)
        return {n: t[n] for n in names}
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        lines = [ln for ln in f.read().splitlines() if ln.strip()]
    if data["header"]:
        lines = lines[1:]
    rows = torch.tensor([[float(c) for c in ln.split(",")] for ln in lines], dtype=torch.float64)
    out, col = {}, 0
    cols = data.get("columns") or {}
    for n in names:
        info = infos[n]
        k = _numel(info["shape"])
        if n in cols:
            c = cols[n]
            if isinstance(c, int):
                sel = rows[:, c:c + 1]
            else:
                a, b = (int(v) for v in str(c).split(":"))
                sel = rows[:, a:b]
        else:
            sel = rows[:, col:col + k]
            col += k
        shape = [rows.shape[0]] + _sample_shape(info["shape"])
        t = sel.reshape(shape)
        out[n] = t.long() if info["dtype"] == "int64" else t.float()
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--data")
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    doc = tt.load_spec_doc(args.model)
    if args.epochs is not None:
        doc["train"]["epochs"] = args.epochs
    if args.seed is not None:
        doc["train"]["seed"] = args.seed
    if args.data is not None:
        doc["train"]["data"] = {"path": args.data}
    train0 = doc["train"]
    torch.manual_seed(train0.get("seed", 0))
    model, spec = tt.build_model(args.model, doc=doc)
    train = spec.train
    if train["data"] is None:
        raise SystemExit("train_torch: no data (train.data or --data)")
    data = load_data(spec, train["data"], os.path.dirname(os.path.abspath(args.model)))
    n = next(iter(data.values())).shape[0]
    gen = torch.Generator().manual_seed(train["seed"])
    perm = torch.randperm(n, generator=gen)
    n_val = int(round(train["validation_split"] * n))
    tr_idx, va_idx = perm[:n - n_val], perm[n - n_val:]
    spe = tt.steps_per_epoch(train, len(tr_idx))
    opt, sched = tt.make_optimizer(model, train, train["epochs"] * spe)
    L = spec.loss
    history = []
    t0 = time.time()
    for epoch in range(train["epochs"]):
        model.train()
        order = tr_idx[torch.randperm(len(tr_idx), generator=gen)] if train["shuffle"] else tr_idx
        losses, sizes = [], []
        for s in range(spe):
            idx = order[s * train["batch"]:(s + 1) * train["batch"]]
            ins = model_layout(spec, {k: data[k][idx] for k in spec.inputs})
            tgs = model_layout(spec, {k: data[k][idx] for k in spec.targets})
            loss, _ = tt.train_step(model, opt, sched, ins, tgs, clip=train["clip_grad_norm"])
            losses.append(float(loss))
            sizes.append(len(idx) if L["reduction"] == "mean" else 1)
        # as Tandem's: each step's loss weighted by its samples (a sum loss's steps alike)
        rec = {"epoch": epoch + 1, "train_loss": sum(l * n for l, n in zip(losses, sizes)) / sum(sizes)}
        if n_val:
            model.eval()
            with torch.no_grad():
                vals = model.values(model_layout(spec, {k: data[k][va_idx] for k in spec.inputs}))
                tg = model_layout(spec, {k: data[k][va_idx] for k in spec.targets})
                rec["val_loss"] = float(tt.loss_fn(spec, vals, tg))
                if L["op"] in tt.CLASS_LOSSES:
                    pred = vals[L["input_key"]].argmax(-1)
                    y = tg[L["target"]].reshape(-1)  # a class target is read flattened
                    live = y != L["ignore_index"]
                    rec["val_accuracy"] = float((pred[live] == y[live]).float().mean())
                elif L["op"] == "binary_cross_entropy_with_logits":
                    y = tg[L["target"]].reshape(-1)
                    if bool(((y == 0) | (y == 1)).all()) and 0 < float(y.sum()) < len(y):
                        from sklearn.metrics import roc_auc_score  # Debian's python3-sklearn
                        rec["val_auc"] = float(roc_auc_score(y.numpy(), vals[L["input_key"]].reshape(-1).numpy()))
        history.append(rec)
        if not args.json:
            print(" ".join("%s %s" % (k, ("%.4f" % v) if isinstance(v, float) else v) for k, v in rec.items()),
                  flush=True)
    res = {"model": spec.name, "samples": n, "train": len(tr_idx), "validation": n_val, "steps_per_epoch": spe,
           "seconds": time.time() - t0, "final": history[-1], "history": history}
    if args.json:
        print(json.dumps(res))
    else:
        print("train_torch: %s: %d samples (%d validation), %d steps/epoch, %.1f s; final %s"
              % (spec.name, n, n_val, spe, res["seconds"], json.dumps(history[-1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
