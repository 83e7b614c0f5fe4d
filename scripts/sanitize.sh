#!/usr/bin/env bash
# Builds Tandem with sanitizers (clang 14) and runs tests under them:
#   scripts/sanitize.sh address   the whole suite under AddressSanitizer + UBSan (build-asan/)
#   scripts/sanitize.sh thread    the multi-device, device and data tests under
#                                 ThreadSanitizer (build-tsan/): the simulated GPUs' queues and
#                                 engine, the staging ring, data parallelism, the loader's threads
# Further arguments go to ctest (-R PATTERN, -L zoo, ...). Any report fails its test.
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:-}"
shift || true
scripts/setup.sh
dir=$(scripts/configure_sanitized.sh "$kind")
source scripts/sanitizer_env.sh
if [[ "$kind" == thread ]]; then
  # The zoo's trainings (minutes under TSan) run the same executors as these tests.
  cmake --build "$dir" --parallel "$(nproc)" --target tandem_multidevice_tests tandem_device_tests tandem_data_tests
  tests=(-R '^(multidevice|devices|data):')
else
  cmake --build "$dir" --parallel "$(nproc)"
  tests=()
fi
cd "$dir"
ctest --output-on-failure --timeout 1800 -j "$(nproc)" "${tests[@]}" "$@"
