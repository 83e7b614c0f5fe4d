#!/usr/bin/env bash
# The layout rules of docs/architecture.md and issue 26, checked on the source tree:
#   (a) runtime/ names no concrete backend: only the device registry
#       (runtime/device_registry.cpp, or runtime/devices/device_registry.cpp) includes
#       backends/cpu/, backends/cuda/ or backends/sim/;
#   (b) core/, graph/, placement/ and backends/ include nothing of runtime/;
#   (c) the reference ops (tests/support/reference/) are test support: nothing outside
#       tests/ includes them, and no CMake file outside tests/ builds or links them;
#   (d) the layer seed mixer (the constant 0x9e3779b97f4a7c15) is written in one file of
#       runtime/ and backends/;
#   (e) no source under runtime/exec/ (the executors and the units they share) passes 400
#       lines;
#   (f) the removed executors and Model methods (CompiledForward, CompiledTraining,
#       MultiDeviceForward, MultiDeviceTraining, placed_backward, placed_loss_and_backward,
#       placed_evaluate_loss, placed_for, placed_training_for) are named nowhere in *.cpp,
#       *.h, *.py or *.md, except in the docs that record history (HISTORY_DOCS below);
#   (g) no Catch2 test name under tests/ holds a ';': CMake splits lists on it, so
#       catch_discover_tests registers the name cut there, which matches no test, and ctest
#       counts the test passed without running it.
# Prints each rule, then each violation as file:line and what to do; exits 1 on any.
#
# Usage: scripts/check_layout.sh [ROOT]   (ROOT: the source tree, by default this one)
# Files are those git tracks or would track (build folders and .git left out); outside a
# git checkout, every file but .git/, build*/ and gpu-bundle/.
set -euo pipefail

ROOT="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$ROOT"

# Docs that record history, where old names may stay: measurements of past versions, and
# change logs.
HISTORY_DOCS_REGEX='^(docs/benchmarks\.md|docs/history/.*|(.*/)?(CHANGELOG|HISTORY)[^/]*\.md)$'

violations=0
report() {  # report FILE:LINE MESSAGE
  echo "  $1: $2"
  violations=$((violations + 1))
}
rule() { echo "check_layout: $*"; }
included() { sed -E 's/^[^<"]*//' <<<"$1"; }  # the <path> or "path" of an #include line

# Every file of the tree, relative to ROOT, one a line.
list_files() {
  if git -C . rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files --cached --others --exclude-standard
  else
    find . \( -name .git -o -name 'build*' -o -name gpu-bundle \) -prune -o -type f -print | sed 's|^\./||'
  fi
}
mapfile -t FILES < <(list_files | sort -u)
existing=()
for f in "${FILES[@]}"; do [[ -f "$f" ]] && existing+=("$f"); done  # a tracked file deleted here is not there
FILES=("${existing[@]}")

# The files matching an extended regex, one a line.
files_matching() { ((${#FILES[@]})) || return 0; printf '%s\n' "${FILES[@]}" | grep -E "$1" || true; }
# grep -n over the files on stdin (none: nothing), printing file:line:text.
grep_files() {
  local pattern="$1"
  shift
  local list
  mapfile -t list < <(grep -v '^$' || true)
  ((${#list[@]})) || return 0
  grep -nHE "$@" -- "$pattern" "${list[@]}" || true
}

SOURCES='\.(c|cc|cpp|cxx|h|hh|hpp|cu|cuh)$'
INCLUDE='^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"](\.\./)*'

# (a) ------------------------------------------------------------------------------
rule "(a) runtime/ includes no concrete backend (backends/cpu/, backends/cuda/, backends/sim/);" \
     "only runtime/device_registry.cpp or runtime/devices/device_registry.cpp opens them"
while IFS=: read -r file line text; do
  [[ -n "$file" ]] || continue
  report "$file:$line" "includes a concrete backend ($(included "$text")): reach devices through backends/backend.h and the registry (runtime/device_registry.h), or move this code into the registry"
done < <(files_matching "^runtime/.*$SOURCES" |
         grep -vE '^runtime/(devices/)?device_registry\.cpp$' |
         grep_files "${INCLUDE}backends/(cpu|cuda|sim)/")

# (b) ------------------------------------------------------------------------------
rule "(b) core/, graph/, placement/ and backends/ include nothing of runtime/"
while IFS=: read -r file line text; do
  [[ -n "$file" ]] || continue
  report "$file:$line" "includes the runtime ($(included "$text")) from a layer beneath it: move what both need down into this layer (or core/), or pass it in through an interface"
done < <(files_matching "^(core|graph|placement|backends)/.*$SOURCES" | grep_files "${INCLUDE}runtime/")

# (c) ------------------------------------------------------------------------------
rule "(c) nothing outside tests/ includes the reference ops (tests/support/reference/) or builds them"
while IFS=: read -r file line text; do
  [[ -n "$file" ]] || continue
  report "$file:$line" "includes the reference ops ($(included "$text")), which are test support: compare against them in a test under tests/, never in the library"
done < <(files_matching "$SOURCES" | grep -v '^tests/' |
         grep_files "${INCLUDE}([^\">]*/)?(support/reference/|reference_ops\.h)")
while IFS=: read -r file line text; do
  [[ -n "$file" ]] || continue
  report "$file:$line" "builds or links the reference ops outside tests/: only tests link tandem_test_reference (tests/CMakeLists.txt)"
done < <(files_matching '(^|/)(CMakeLists\.txt|[^/]*\.cmake)$' | grep -v '^tests/' |
         grep_files 'tandem_test_reference|support/reference')

# (d) ------------------------------------------------------------------------------
rule "(d) the layer seed mixer (0x9e3779b97f4a7c15) is written in at most one file of runtime/ and backends/"
mapfile -t mixers < <(files_matching '^(runtime|backends)/' | grep_files '0x9e3779b97f4a7c15' -il)
if ((${#mixers[@]} > 1)); then
  while IFS=: read -r file line text; do
    report "$file:$line" "the seed mixer is written out in ${#mixers[@]} files: keep it in one function (beside backends/dropout_mask.h's) and call that, so that every device and executor derives a layer's seed alike"
  done < <(printf '%s\n' "${mixers[@]}" | grep_files '0x9e3779b97f4a7c15' -i)
fi

# (e) ------------------------------------------------------------------------------
rule "(e) no source under runtime/exec/ (the executors and what they share) passes 400 lines"
while read -r file; do
  [[ -n "$file" ]] || continue
  lines=$(wc -l <"$file")
  if ((lines > 400)); then
    report "$file:401" "$lines lines, past 400: split it, one concept per file (a pass, a schedule, a copy rule each in its own unit)"
  fi
done < <(files_matching '^runtime/exec/.*\.(cpp|h)$')

# (f) ------------------------------------------------------------------------------
OLD_NAMES='CompiledForward|CompiledTraining|MultiDeviceForward|MultiDeviceTraining|placed_backward|placed_loss_and_backward|placed_evaluate_loss|placed_for|placed_training_for'
rule "(f) the removed executors and Model methods (${OLD_NAMES//|/, }) are named nowhere" \
     "in *.cpp, *.h, *.py, *.md but the docs of history"
while IFS=: read -r file line text; do
  [[ -n "$file" ]] || continue
  name=$(grep -owE "$OLD_NAMES" <<<"$text" | head -1 || true)
  report "$file:$line" "names $name, which is gone (one forward and one training executor run every plan, runtime/exec/): name what replaced it, or drop the mention"
done < <(files_matching '\.(cpp|h|py|md)$' | grep -vE "$HISTORY_DOCS_REGEX" | grep_files "$OLD_NAMES" -w)

# (g) ------------------------------------------------------------------------------
rule "(g) no TEST_CASE name under tests/ holds a ';' (ctest would register it cut there and never run it)"
while IFS=: read -r file line _; do
  [[ -n "$file" ]] || continue
  report "$file:$line" "a test name with ';': CMake cuts it there and ctest runs nothing under that name; write ',' or ':'"
done < <(files_matching '^tests/.*\.cpp$' | grep_files 'TEST_CASE\("[^"]*;')

# ------------------------------------------------------------------------------------
if ((violations > 0)); then
  echo "check_layout: $violations violation(s)"
  exit 1
fi
echo "check_layout: every rule holds"
