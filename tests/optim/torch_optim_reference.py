"""Reference trajectories from torch.optim for tests/optim/torch_reference_test.cpp.

One run writes every case into --out: the parameters after every step of SGD, Adam and
AdamW (single-tensor implementations, foreach=False), the learning rates of StepLR and
LambdaLR for the schedules of docs/training.md, and torch.nn.utils.clip_grad_norm_'s
results. Files: text indexes (*.txt) and raw little-endian arrays (*.f32, *.f64).
"""
import argparse
import math
import os

import numpy as np
import torch

SHAPES = [[7], [3, 5], [37], [16, 33]]
STEPS = 50

# name, optimizer, lr, momentum, dampening, nesterov, weight_decay, beta1, beta2, eps, varying lr
CASES = [
    ("sgd_plain", "sgd", 0.1, 0.0, 0.0, False, 0.0, 0, 0, 0, False),
    ("sgd_momentum", "sgd", 0.05, 0.9, 0.0, False, 0.0, 0, 0, 0, False),
    ("sgd_dampening", "sgd", 0.05, 0.9, 0.3, False, 0.0, 0, 0, 0, False),
    ("sgd_nesterov", "sgd", 0.05, 0.9, 0.0, True, 0.0, 0, 0, 0, False),
    ("sgd_weight_decay", "sgd", 0.05, 0.0, 0.0, False, 0.01, 0, 0, 0, False),
    ("sgd_momentum_weight_decay", "sgd", 0.05, 0.8, 0.1, False, 0.05, 0, 0, 0, False),
    ("sgd_nesterov_weight_decay_varying_lr", "sgd", 0.05, 0.9, 0.0, True, 0.01, 0, 0, 0, True),
    ("adam", "adam", 1e-2, 0, 0, False, 0.0, 0.9, 0.999, 1e-8, False),
    ("adam_weight_decay", "adam", 1e-2, 0, 0, False, 0.1, 0.9, 0.999, 1e-8, False),
    ("adam_betas_eps_varying_lr", "adam", 3e-3, 0, 0, False, 0.0, 0.8, 0.99, 1e-6, True),
    ("adamw", "adamw", 1e-2, 0, 0, False, 0.01, 0.9, 0.999, 1e-8, False),
    ("adamw_strong_decay_varying_lr", "adamw", 1e-2, 0, 0, False, 0.3, 0.85, 0.995, 1e-7, True),
]

# name, kind, base_lr, step_size, gamma, warmup_steps, total_steps, min_lr, steps
SCHEDULES = [
    ("step", "step", 0.1, 7, 0.5, 0, 0, 0.0, 60),
    ("step_every", "step", 0.01, 1, 0.9, 0, 0, 0.0, 30),
    ("cosine_warmup", "cosine", 1e-3, 1, 0.1, 10, 60, 1e-5, 70),
    ("cosine", "cosine", 0.01, 1, 0.1, 0, 40, 0.0, 45),
    ("cosine_long_warmup", "cosine", 0.5, 1, 0.1, 25, 20, 0.1, 30),
]

# name, max_norm as a fraction of the gradients' norm
CLIPS = [("clip", 0.3), ("no_clip", 5.0)]


def write(path, values, dtype):
    np.ascontiguousarray(np.asarray(values, dtype=dtype)).tofile(path)


def flat(tensors):
    return np.concatenate([t.detach().numpy().reshape(-1) for t in tensors])


def run_optimizer(case, init, grads):
    name, kind, lr, momentum, dampening, nesterov, wd, beta1, beta2, eps, varying = case
    params = [torch.nn.Parameter(t.clone()) for t in init]
    if kind == "sgd":
        opt = torch.optim.SGD(params, lr=lr, momentum=momentum, dampening=dampening, nesterov=nesterov,
                              weight_decay=wd, foreach=False)
    elif kind == "adam":
        opt = torch.optim.Adam(params, lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=wd, foreach=False)
    else:
        opt = torch.optim.AdamW(params, lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=wd, foreach=False)
    lrs, traj = [], []
    for k in range(STEPS):
        step_lr = lr * (0.5 + 0.5 * math.cos(math.pi * k / STEPS)) if varying else lr
        for group in opt.param_groups:
            group["lr"] = step_lr
        for p, g in zip(params, grads[k]):
            p.grad = g.clone()
        opt.step()
        lrs.append(step_lr)
        traj.append(flat(params))
    return lrs, np.stack(traj)


def cosine_factor(base_lr, warmup, total, min_lr):
    def factor(step):
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return (min_lr + (base_lr - min_lr) * (1 + math.cos(math.pi * progress)) / 2) / base_lr
    return factor


def run_schedule(s):
    name, kind, base_lr, step_size, gamma, warmup, total, min_lr, steps = s
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=base_lr)
    if kind == "step":
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=step_size, gamma=gamma)
    else:
        sched = torch.optim.lr_scheduler.LambdaLR(opt, cosine_factor(base_lr, warmup, total, min_lr))
    lrs = []
    for _ in range(steps):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(args.seed)
    out = lambda name: os.path.join(args.out, name)

    with open(out("shapes.txt"), "w") as f:
        for shape in SHAPES:
            f.write(" ".join(map(str, shape)) + "\n")
    init = [torch.randn(shape) for shape in SHAPES]
    # Gradients of different scales per parameter, so the moments differ in size.
    grads = [[torch.randn(shape) * 10.0 ** (i % 3 - 1) for i, shape in enumerate(SHAPES)] for _ in range(STEPS)]
    write(out("init.f32"), flat(init), np.float32)
    write(out("grads.f32"), np.stack([flat(g) for g in grads]), np.float32)

    with open(out("cases.txt"), "w") as f:
        for case in CASES:
            name, kind, lr, momentum, dampening, nesterov, wd, beta1, beta2, eps, _ = case
            f.write(f"{name} {kind} {lr!r} {momentum!r} {dampening!r} {int(nesterov)} {wd!r} "
                    f"{float(beta1)!r} {float(beta2)!r} {float(eps)!r}\n")
            lrs, traj = run_optimizer(case, init, grads)
            write(out(f"{name}.lr.f64"), lrs, np.float64)
            write(out(f"{name}.traj.f32"), traj, np.float32)

    with open(out("schedules.txt"), "w") as f:
        for s in SCHEDULES:
            f.write(" ".join(repr(x) for x in s).replace("'", "") + "\n")
            write(out(f"{s[0]}.sched.f64"), run_schedule(s), np.float64)

    with open(out("clips.txt"), "w") as f:
        for name, fraction in CLIPS:
            gs = [torch.randn(shape) * 3 for shape in SHAPES]
            write(out(f"{name}.in.f32"), flat(gs), np.float32)
            norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in gs))
            max_norm = fraction * norm
            params = [torch.nn.Parameter(torch.zeros(shape)) for shape in SHAPES]
            for p, g in zip(params, gs):
                p.grad = g.clone()
            total = torch.nn.utils.clip_grad_norm_(params, max_norm)
            write(out(f"{name}.out.f32"), flat([p.grad for p in params]), np.float32)
            f.write(f"{name} {max_norm!r} {float(total)!r}\n")

    with open(out("done"), "w") as f:
        f.write("ok\n")


if __name__ == "__main__":
    main()
