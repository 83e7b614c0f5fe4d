#!/usr/bin/env bash
# Configures and builds Tandem into build/ (Release, Ninja): everything, or only the targets
# named with --target (scripts/demo.sh builds the CLI alone). Other arguments go to CMake,
# e.g. scripts/build.sh -DTANDEM_CUDA=OFF, scripts/build.sh --target tandem
set -euo pipefail
cd "$(dirname "$0")/.."
cmake_args=() targets=()
while (($#)); do
  if [[ "$1" == --target ]]; then
    (($# >= 2)) || { echo "build.sh: --target needs a target's name" >&2; exit 2; }
    targets+=(--target "$2")
    shift 2
  else
    cmake_args+=("$1")
    shift
  fi
done
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${cmake_args[@]}" >/dev/null
cmake --build build --parallel "$(nproc)" "${targets[@]}"
