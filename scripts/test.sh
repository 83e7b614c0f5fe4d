#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (ctest). GPU tests report themselves
# as skipped when there is no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd build
ctest --output-on-failure --timeout 900 -j "$(nproc)"
