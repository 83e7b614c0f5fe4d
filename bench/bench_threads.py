#!/usr/bin/python3
"""Threads on a shared machine (issue 18): one epoch of the character GRU, quiet and beside
two busy processes, as Tandem ran before and as it runs now.

    /usr/bin/python3 bench/bench_threads.py [--tandem build/tandem] [--rounds 5] [--json OUT]

The epoch: `tandem train configs/char_gru.yaml --place '*=cpu' --epochs 1` on the GPL-3
text's windows (scripts/make_char_data.py writes them into build/ first), timed by the
wall clock around the whole command. Three settings, alternating round by round:

  before    GOMP_SPINCOUNT=300000, libgomp's default: OpenMP's threads spin 300,000 rounds
            at a barrier before they sleep, as every Tandem did until the CLI chose
            otherwise (Note [waiting threads], runtime/threads.h)
  now       the CLI's default: the usable cores' threads, spinning 1,000 rounds
  passive   OMP_WAIT_POLICY=passive: they sleep at once
  1 thread  OMP_NUM_THREADS=1, the advice for a busy machine before

"Busy" is two more processes spinning on the machine's two cores (a loop each), started
before the rounds and stopped after. Medians, in seconds.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SETTINGS = {"before": {"GOMP_SPINCOUNT": "300000"}, "now": {}, "passive": {"OMP_WAIT_POLICY": "passive"},
            "1 thread": {"OMP_NUM_THREADS": "1"}}


def epoch_seconds(tandem, env_extra):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")}
    env.update(env_extra)
    start = time.perf_counter()
    subprocess.run([tandem, "train", os.path.join(ROOT, "configs", "char_gru.yaml"), "--place", "*=cpu", "--epochs", "1"],
                   check=True, env=env, stdout=subprocess.DEVNULL, timeout=1800)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tandem", default=os.path.join(ROOT, "build", "tandem"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    data = os.path.join(ROOT, "build", "gpl3_chars.safetensors")
    if not os.path.exists(data):
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "scripts", "make_char_data.py"), data], check=True)
    results = {}
    for load in ("quiet", "beside two busy processes"):
        busy = []
        if load != "quiet":
            busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
            time.sleep(1)
        try:
            times = {name: [] for name in SETTINGS}
            for _ in range(args.rounds):
                for name, env in SETTINGS.items():
                    times[name].append(epoch_seconds(args.tandem, env))
        finally:
            for p in busy:
                p.kill()
        results[load] = {name: statistics.median(t) for name, t in times.items()}
    print("| machine | before (300,000 spins) | now (1,000 spins) | passive | 1 thread |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for load, r in results.items():
        print("| %s | %.2f s | %.2f s | %.2f s | %.2f s |" % (load, r["before"], r["now"], r["passive"], r["1 thread"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rounds": args.rounds, "epoch_seconds": results}, f, indent=2)


if __name__ == "__main__":
    main()
