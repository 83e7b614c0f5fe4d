#!/usr/bin/python3
"""Training over processes: Tandem under mpirun against PyTorch DDP (issue 16).

    /usr/bin/python3 bench/bench_distributed.py [--tandem build/tandem] [--rounds 5] [--json OUT]

The same two models, the 4 x 1024 MLP (bench/configs/gpu_mlp_train.yaml, mse loss) and the
recommender (bench/configs/gpu_recommender_train.yaml: two embedding-bag tables and MLPs),
each trained with Adam at the same global batch by N = 1 and 2 processes, both launched by
the same `mpirun -np N`, each process with 2 / N OpenMP threads (this machine's 2 cores
shared out, nothing oversubscribed):

  tandem   mpirun -np N tandem train CFG --bench-steps K --batch G/N --json: each rank its
           own random batch, gradients averaged over the ranks in buckets during backward
           (MPI all-reduce of host buffers, docs/distributed.md);
  torch    mpirun -np N this script --worker: PyTorch 1.13's DistributedDataParallel over
           gloo (torch.distributed, env:// from mpirun's rank variables), float32, the
           same model built from the same YAML (tests/oracle/tandem_torch.py), the same
           batch per rank, zero_grad(set_to_none) + forward + loss + backward + Adam.

For each: samples per second over the job (global batch / the median step of rank 0),
Tandem's over torch's, and each one's scaling from 1 process to 2 on the same two cores
(samples/s at N=2 over N=1: 1.0 means the second process costs nothing); at N=2 also
Tandem with --shard-optimizer-state (ZeRO stage 1): its samples/s and the optimizer
state each rank holds; and gradients compressed to bf16 on the wire (Tandem's
--compress-gradients bf16, DDP's bf16_compress_hook where gloo takes bf16): samples/s of
each against its own float32 path (torch 1.13 refuses the hook without CUDA and NCCL:
then only Tandem's). Rounds alternate; medians.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "oracle"))

CORES = 2
MODELS = {  # name: (config, global batch, bindings beyond batch as functions of the per-rank batch)
    "mlp_4x1024": ("gpu_mlp_train.yaml", 256, {}),
    "recommender": ("gpu_recommender_train.yaml", 1024, {"tags": lambda b: 8 * b}),
}
MPIRUN = ["mpirun", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(ranks, command, env):
    """Runs `command` on `ranks` processes under mpirun; rank 0's stdout."""
    full = MPIRUN + ["-np", str(ranks)]
    for k, v in env.items():
        full += ["-x", "%s=%s" % (k, v)]
    done = subprocess.run(full + command, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit("failed: %s\n%s%s" % (" ".join(full + command), done.stdout[-3000:], done.stderr[-3000:]))
    return done.stdout


def json_of(text):
    return json.loads(text[text.index("{"):text.rindex("}") + 1])


def tandem_run(tandem, config, ranks, batch, steps, binds, extra=()):
    """(samples/s over the job, rank 0's optimizer state bytes)."""
    command = [tandem, "train", config, "--bench-steps", str(steps), "--batch", str(batch), "--json", *extra]
    for k, v in binds.items():
        command += ["--bind", "%s=%d" % (k, v)]
    doc = json_of(launch(ranks, command, {"OMP_NUM_THREADS": str(CORES // ranks)}))
    return doc["global_batch"] / (doc["timing"]["median_ms"] / 1e3), doc["optimizer_state_bytes"]


def torch_sps(config, ranks, batch, steps, binds, bf16_hook=False):
    """Samples/s over the job, or None where DDP could not run (gloo without bf16)."""
    command = ["/usr/bin/python3", os.path.abspath(__file__), "--worker", config, "--batch", str(batch), "--steps",
               str(steps)] + sum([["--bind", "%s=%d" % kv] for kv in binds.items()], [])
    if bf16_hook:
        command.append("--bf16-hook")
    env = {"OMP_NUM_THREADS": str(CORES // ranks), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    doc = json_of(launch(ranks, command, env))
    return batch * ranks / (doc["median_ms"] / 1e3) if doc.get("median_ms") else None


def worker(args):
    """One rank of PyTorch DDP over gloo; rank 0 prints {"median_ms": ...}."""
    import torch
    import torch.distributed as dist
    import tandem_torch as tt

    rank, world = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model, spec = tt.build_model(args.worker)
    model.train()
    bindings = {"batch": args.batch}
    for item in args.bind:
        k, v = item.split("=")
        bindings[k] = int(v)
    gen = torch.Generator().manual_seed(rank)
    inputs = tt.draw_inputs(spec, bindings, gen, pad_prob=0.0)
    targets = tt.draw_targets(spec, bindings, gen)

    class Loss(torch.nn.Module):  # DDP wraps a module whose forward returns the loss
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self):
            return tt.loss_fn(spec, self.inner.values(inputs, bindings), targets)

    net = Loss(model)
    if world > 1:
        net = torch.nn.parallel.DistributedDataParallel(net)
        if args.bf16_hook:
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
            try:
                net.register_comm_hook(None, default_hooks.bf16_compress_hook)
            except TypeError as e:  # torch 1.13 takes the bf16 hook with CUDA and NCCL only
                if rank == 0:
                    print(json.dumps({"median_ms": None, "error": str(e)}))
                dist.destroy_process_group()
                return 0
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        net().backward()
        opt.step()

    try:
        for _ in range(3):
            step()
    except RuntimeError as e:  # gloo's all-reduce may not take bf16
        if rank == 0:
            print(json.dumps({"median_ms": None, "error": str(e).splitlines()[0]}))
        return 0
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    if rank == 0:
        print(json.dumps({"median_ms": statistics.median(times) * 1e3}))
    if world > 1:
        dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tandem", default=os.environ.get("TANDEM", os.path.join(ROOT, "build", "tandem")))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--bind", action="append", default=[], help=argparse.SUPPRESS)
    parser.add_argument("--bf16-hook", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)

    results = []
    for name in args.models:
        config, global_batch, extra = MODELS[name]
        path = os.path.join(HERE, "configs", config)
        row = {"model": name, "global_batch": global_batch}
        for ranks in (1, 2):
            batch = global_batch // ranks
            binds = {k: f(batch) for k, f in extra.items()}
            tandem, torch, zero, tandem_bf16, torch_bf16 = [], [], [], [], []
            for _ in range(args.rounds):  # alternating, so that drifts in the machine hit both
                time.sleep(0.5)
                sps, row["tandem_state_bytes_n%d" % ranks] = tandem_run(args.tandem, path, ranks, batch, args.steps,
                                                                        binds)
                tandem.append(sps)
                time.sleep(0.5)
                torch.append(torch_sps(path, ranks, batch, args.steps, binds))
                if ranks > 1:  # ZeRO stage 1: Adam's moments shared out
                    time.sleep(0.5)
                    sps, row["tandem_zero_state_bytes_n%d" % ranks] = tandem_run(
                        args.tandem, path, ranks, batch, args.steps, binds, ["--shard-optimizer-state"])
                    zero.append(sps)
                    time.sleep(0.5)  # gradients in bf16 on the wire
                    tandem_bf16.append(tandem_run(args.tandem, path, ranks, batch, args.steps, binds,
                                                  ["--compress-gradients", "bf16"])[0])
                    time.sleep(0.5)
                    torch_bf16.append(torch_sps(path, ranks, batch, args.steps, binds, bf16_hook=True))
            if zero:
                row["tandem_zero_sps_n%d" % ranks] = statistics.median(zero)
                row["tandem_bf16_sps_n%d" % ranks] = statistics.median(tandem_bf16)
                ran = [t for t in torch_bf16 if t]
                row["torch_bf16_sps_n%d" % ranks] = statistics.median(ran) if ran else None
            row["tandem_sps_n%d" % ranks] = statistics.median(tandem)
            row["torch_sps_n%d" % ranks] = statistics.median(torch)
            row["ratio_n%d" % ranks] = row["tandem_sps_n%d" % ranks] / row["torch_sps_n%d" % ranks]
        for who in ("tandem", "torch"):
            row[who + "_scaling"] = row[who + "_sps_n2"] / row[who + "_sps_n1"]
        results.append(row)

    print("| model | global batch | N | Tandem samples/s | DDP (gloo) samples/s | Tandem / DDP |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        for n in (1, 2):
            print("| %s | %d | %d | %.0f | %.0f | %.2fx |" % (r["model"], r["global_batch"], n, r["tandem_sps_n%d" % n],
                                                            r["torch_sps_n%d" % n], r["ratio_n%d" % n]))
    print()
    for r in results:
        print("%s, 2 processes with --shard-optimizer-state (ZeRO 1): %.0f samples/s (%.2fx the plain path), "
              "optimizer state %.1f MiB a rank (%.1f MiB plain)" %
              (r["model"], r["tandem_zero_sps_n2"], r["tandem_zero_sps_n2"] / r["tandem_sps_n2"],
               r["tandem_zero_state_bytes_n2"] / 2**20, r["tandem_state_bytes_n2"] / 2**20))
    for r in results:
        hook = ("DDP's bf16_compress_hook %.0f samples/s (%.2fx DDP's float32)" %
                (r["torch_bf16_sps_n2"], r["torch_bf16_sps_n2"] / r["torch_sps_n2"])
                if r["torch_bf16_sps_n2"] else "DDP's bf16_compress_hook is refused without CUDA and NCCL")
        print("%s, 2 processes with --compress-gradients bf16: %.0f samples/s (%.2fx the float32 path); %s" %
              (r["model"], r["tandem_bf16_sps_n2"], r["tandem_bf16_sps_n2"] / r["tandem_sps_n2"], hook))
    for r in results:
        print("%s: from 1 to 2 processes on %d cores, Tandem keeps %.0f%% of its samples/s, DDP %.0f%%" %
              (r["model"], CORES, 100 * r["tandem_scaling"], 100 * r["torch_scaling"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rounds": args.rounds, "steps": args.steps, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
