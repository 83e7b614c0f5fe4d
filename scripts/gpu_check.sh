#!/usr/bin/env bash
# The GPU check, in one call on a machine with a GPU and CUDA 13 (no Debian -dev packages
# needed): every GPU test, compute-sanitizer's memcheck over them, and the GPU benchmarks,
# with one summary. It runs from the bundle that scripts/gpu_bundle.sh packs here, inside a
# copy of the repository (the configs and bench scripts are read from there):
#
#   scripts/gpu_bundle.sh                     # here: build and pack gpu-bundle/
#   gpu-bundle/gpu_check.sh OUT_DIR           # there, from the repository's root
#
# OUT_DIR gets summary.md (what passed, the figures against their targets), and the logs:
# devices.txt, tests.txt, memcheck.txt, gemm.jsonl, copy.jsonl, bench_gpu.json. Exit 0 when
# every test passed and memcheck found nothing; 1 otherwise; 77 when there is no GPU.
# Budget: about 6 minutes on an H100. Every step has a deadline, so a hang costs its step only:
# TESTS_SECONDS (default 240), BENCH_SECONDS (180), MEMCHECK_SECONDS (180), and BENCH_ROUNDS
# trims the benchmark. memcheck runs last: it is the slowest and the figures matter more.
set -uo pipefail
bundle=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$bundle/.." && pwd)
out=${1:-${OUT:-$repo/gpu-check-out}}
mkdir -p "$out"
export TANDEM_SOURCE_DIR="$repo"   # the GPU tests read configs/ from the repository's copy
# the digits the configs train on: scikit-learn's copy where Debian's path is not there
if [ -z "${TANDEM_DIGITS_CSV:-}" ] && [ ! -e /usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz ]; then
  TANDEM_DIGITS_CSV=$(python3 -c 'import os, sklearn.datasets as d; print(os.path.join(os.path.dirname(d.__file__), "data", "digits.csv.gz"))' 2>/dev/null)
  export TANDEM_DIGITS_CSV
fi
run="$bundle/run.sh"
memcheck_seconds=${MEMCHECK_SECONDS:-180}
tests_seconds=${TESTS_SECONDS:-240}
bench_seconds=${BENCH_SECONDS:-180}
rounds=${BENCH_ROUNDS:-3}
summary="$out/summary.md"
status=0

section() { printf '\n== %s\n' "$1"; }

section "devices"
"$run" tandem devices | tee "$out/devices.txt"
if ! "$run" tandem devices --json | grep -q '"cuda:0"'; then
  echo "gpu_check: no GPU here" | tee "$summary"
  exit 77
fi
gpu=$(grep -m1 '^cuda:0' "$out/devices.txt")

# Every GPU test, CUDA lanes in a trace among them (tests/gpu/trace_test.cpp: a split model
# trained under a trace in a child process; memcheck leaves it out, as the child runs
# outside the sanitizer)
section "GPU tests (tandem_gpu_tests)"
start=$(date +%s)
timeout -k 5 "$tests_seconds" "$run" tandem_gpu_tests --reporter compact --durations yes 2>&1 | tee "$out/tests.txt"
tests_rc=${PIPESTATUS[0]}
[ "$tests_rc" -ne 124 ] || echo "gpu_check: the GPU tests did not finish within ${tests_seconds} s" | tee -a "$out/tests.txt"
tests_s=$(( $(date +%s) - start ))
[ "$tests_rc" -eq 0 ] || status=1
tests_line=$(grep -E '^(All tests passed|Passed all|Failed|test cases:)' "$out/tests.txt" | tail -1)

section "GEMM: Tandem's wrapper against cuBLAS called directly (target >= 0.97)"
timeout -k 5 120 "$run" bench_cuda_gemm | tee "$out/gemm.jsonl"
section "copies: Tandem's against bare pinned cudaMemcpyAsync (target H2D >= 0.9)"
timeout -k 5 120 "$run" bench_cuda_copy | tee "$out/copy.jsonl"

section "training steps against PyTorch CUDA (target <= 0.7 at batch 32); embeddings on the cpu against all on the GPU"
(cd "$repo" && PYTHONUNBUFFERED=1 timeout -k 5 "$bench_seconds" python3 bench/bench_gpu.py --tandem "$run" tandem --rounds "$rounds" \
   --json "$out/bench_gpu.json") 2>&1 | tee "$out/bench_gpu.txt"

# memcheck looks for bad memory accesses; API errors it does not report, since the tests
# provoke them on purpose (out of memory, a device that does not exist, a bad copy) and
# Tandem checks every CUDA call's result itself.
section "compute-sanitizer memcheck (the GPU tests but the zoo's and the training runs, ${memcheck_seconds} s at most)"
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$sanitizer" ]; then
  start=$(date +%s)
  timeout "$memcheck_seconds" "$run" "$sanitizer" --tool memcheck --leak-check no --report-api-errors no --error-exitcode 9 \
    "$bundle/bin/tandem_gpu_tests" --reporter compact '~[zoo]~[precision]~[trace]' > "$out/memcheck.txt" 2>&1
  memcheck_rc=$?
  memcheck_s=$(( $(date +%s) - start ))
  case $memcheck_rc in
    0) memcheck="no errors (${memcheck_s} s)" ;;
    124) memcheck="stopped at ${memcheck_seconds} s; no error before: $(grep -c 'ERROR SUMMARY: 0' "$out/memcheck.txt") clean summaries" ;;
    9) memcheck="ERRORS: $(grep -m1 'ERROR SUMMARY' "$out/memcheck.txt")"; status=1 ;;
    *) memcheck="exit $memcheck_rc (see memcheck.txt)"; status=1 ;;
  esac
  tail -5 "$out/memcheck.txt"
else
  memcheck="compute-sanitizer not found"
fi
echo "$memcheck"

# ---- the summary --------------------------------------------------------------------------
python3 - "$out" "$gpu" "$tests_line" "$tests_rc" "$tests_s" "$memcheck" > "$summary" <<'PY'
import json, os, sys
out, gpu, tests_line, tests_rc, tests_s, memcheck = sys.argv[1:]
def lines(name):
    p = os.path.join(out, name)
    if not os.path.exists(p):
        return []
    rows = []
    for line in open(p):
        line = line.strip()
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
    return rows
print("# GPU check\n")
print("- device: %s" % gpu)
print("- GPU tests: %s (exit %s, %s s)" % (tests_line or "no summary line", tests_rc, tests_s))
print("- memcheck: %s" % memcheck)
gemm = [r for r in lines("gemm.jsonl") if "ratio" in r]
if gemm:
    worst = min(r["ratio"] for r in gemm)
    print("- GEMM vs cuBLAS: worst ratio %.3f over %d shapes (target >= 0.97: %s)" % (worst, len(gemm), "met" if worst >= 0.97 else "MISSED"))
    for r in gemm:
        print("  - %s %dx%dx%d: %.1f / %.1f TFLOP/s = %.3f" % (r["dtype"], r["m"], r["n"], r["k"], r["tandem_tflops"], r["cublas_tflops"], r["ratio"]))
copy = [r for r in lines("copy.jsonl") if "h2d_ratio" in r]
if copy:
    worst = min(r["h2d_ratio"] for r in copy)
    print("- H2D vs bare pinned, the runtime's path (pinned host tensors): worst ratio %.3f (target >= 0.9: %s)"
          % (worst, "met" if worst >= 0.9 else "MISSED"))
    for r in copy:
        print("  - %d B: H2D %.3f, D2H %.3f; from pageable memory: staged H2D %.3f, D2H %.3f "
              "(%.1f and %.1f GB/s; the driver's own %.1f and %.1f GB/s)" % (
              r["bytes"], r["h2d_ratio"], r["d2h_ratio"], r["staged_h2d_ratio"], r["staged_d2h_ratio"],
              r["tandem_staged_h2d_gbps"], r["tandem_staged_d2h_gbps"], r["driver_pageable_h2d_gbps"],
              r["driver_pageable_d2h_gbps"]))
p = os.path.join(out, "bench_gpu.json")
if os.path.exists(p):
    b = json.load(open(p))
    print("- PyTorch: %s" % b.get("torch"))
    for r in b["training"]:
        ratio = r.get("ratio")
        verdict = ""
        if r["batch"] == 32 and ratio is not None:
            verdict = " (target <= %.1f: %s)" % (b["target_at_32"], "met" if ratio <= b["target_at_32"] else "MISSED")
        print("- training step %s batch %d: tandem %.3f ms, torch %s ms, ratio %s%s" % (
            r["model"], r["batch"], r["tandem_ms"], "%.3f" % r["torch_ms"] if r["torch_ms"] else "-",
            "%.3f" % ratio if ratio else "-", verdict))
    for r in b.get("precision", []):
        speed = r.get("bf16_speedup")
        print("- mlp training step batch %d: fp32 %s, bf16 %s, fp16 %s ms; torch fp32 %s, autocast bf16 %s ms; "
              "bf16 speedup %s (target >= 2: %s); bf16 / torch autocast %s" % (
              r["batch"], *["%.3f" % r[k] if k in r else "-" for k in
                            ("fp32_ms", "bf16_ms", "fp16_ms", "torch_fp32_ms", "torch_autocast_bf16_ms")],
              "%.2fx" % speed if speed else "-", ("met" if speed >= 2 else "MISSED") if speed else "-",
              "%.3f" % r["bf16_vs_torch_autocast"] if "bf16_vs_torch_autocast" in r else "-"))
        for k, v in r.items():
            if k.endswith("_error"):
                print("  - %s: %s" % (k, v))
    for r in b["placement"]:
        print("- recommender batch %d: embeddings on the cpu %.0f samples/s, all on the GPU %.0f samples/s" % (
            r["batch"], r["embeddings_on_cpu_samples_per_s"], r["all_on_gpu_samples_per_s"]))
else:
    print("- bench_gpu: no result (see bench_gpu.txt)")
PY
section "summary ($summary)"
cat "$summary"
exit $status
