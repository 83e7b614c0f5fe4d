#!/usr/bin/env bash
# Runs the libFuzzer programs of tests/fuzz, each for SECONDS (default 30), under ASan and
# UBSan, from their seeds and from the corpus earlier runs grew (build-asan/fuzz-corpus/):
#   scripts/fuzz.sh                  all five targets, 30 s each
#   scripts/fuzz.sh 3600 csv         one target for an hour
# Targets: yaml_model safetensors csv command_line numpy. A crash, a hang past 10 s or a run past
# 2 GiB is saved as tests/fuzz/regressions/TARGET/crash-* (timeout-*, oom-*) and the script
# fails: fix it and commit the file, which ctest then replays in every build.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-30}"
shift || true
targets=("$@")
((${#targets[@]})) || targets=(yaml_model safetensors csv command_line numpy)
scripts/setup.sh
dir=$(scripts/configure_sanitized.sh address)
cmake --build "$dir" --parallel "$(nproc)" --target "${targets[@]/#/fuzz_}"
source scripts/sanitizer_env.sh
failed=()
for target in "${targets[@]}"; do
  corpus="$dir/fuzz-corpus/$target"
  regressions="tests/fuzz/regressions/$target"
  mkdir -p "$corpus" "$regressions"
  mapfile -t seeds < "$dir/tests/fuzz/seeds_$target.txt"
  echo "fuzz: $target for ${seconds}s"
  # -timeout: an input that takes 10 s is a hang; -rss_limit_mb: one that takes 2 GiB a blow-up.
  if ! "$dir/tests/fuzz/fuzz_$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
       -print_final_stats=1 -artifact_prefix="$regressions/" "$corpus" "${seeds[@]}" \
       > "$dir/fuzz-$target.log" 2>&1; then
    failed+=("$target")
    tail -n 60 "$dir/fuzz-$target.log"
  fi
  grep -E "^stat::number_of_executed_units|^Done" "$dir/fuzz-$target.log" || true
done
if ((${#failed[@]})); then
  echo "fuzz: FAILED: ${failed[*]}; the inputs are in tests/fuzz/regressions/ (fix, then commit them)" >&2
  exit 1
fi
echo "fuzz: no crash, hang or blow-up in ${#targets[@]} target(s), ${seconds}s each"
