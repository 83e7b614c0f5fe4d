#!/usr/bin/env bash
# Configures a clang 14 build with sanitizers: scripts/configure_sanitized.sh address|thread
# prints the build directory it configured:
#   address  build-asan/: AddressSanitizer + UndefinedBehaviorSanitizer, and the libFuzzer
#            programs of tests/fuzz (TANDEM_FUZZ)
#   thread   build-tsan/: ThreadSanitizer
# RelWithDebInfo: optimised as the tests are timed to be, with line numbers in reports
# (-gline-tables-only: the symbolizer needs no more, and full debug info slows every compile
# and link).
# Without CUDA: the sanitizers watch the host code, which is all a machine without a GPU runs.
# CMAKE_CXX_COMPILER_LAUNCHER=ccache in the environment is honoured.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  address) dir=build-asan; options=(-DTANDEM_SANITIZE=address,undefined -DTANDEM_FUZZ=ON) ;;
  thread) dir=build-tsan; options=(-DTANDEM_SANITIZE=thread) ;;
  *) echo "usage: scripts/configure_sanitized.sh address|thread" >&2; exit 2 ;;
esac
CC=clang-14 CXX=clang++-14 cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -gline-tables-only -DNDEBUG" -DTANDEM_CUDA=OFF \
  "${options[@]}" >/dev/null
echo "$dir"
