#!/usr/bin/env bash
# Installs the build into a fresh prefix, builds examples/run_model.cpp and the README's C++
# program out of tree against it with find_package(Tandem) and Tandem::tandem alone, checks
# that run_model computes what the in-tree example computes, and runs the README's program.
# Usage: build_outside.sh BUILD_DIR SOURCE_DIR IN_TREE_RUN_MODEL
set -euo pipefail
build=$1 source=$2 in_tree=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"
mkdir "$work/app"
cp "$source/tests/install/CMakeLists.txt" "$source/examples/run_model.cpp" "$source/examples/find_config.h" "$work/app/"
# the README's C++ program, as a reader copies it: the first cpp block after "## The C++ API"
awk '/^## The C\+\+ API/ {api = 1} api && /^```cpp/ {copy = 1; next} copy && /^```/ {exit} copy' \
  "$source/README.md" >"$work/app/readme_program.cpp"
grep -q "int main" "$work/app/readme_program.cpp" || { echo "README.md has no C++ program under '## The C++ API'"; exit 1; }
cmake -S "$work/app" -B "$work/app/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DTANDEM_EXAMPLE_SOURCE_DIR="$source" >"$work/configure.log" || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/app/build" >"$work/build.log" || { cat "$work/build.log"; exit 1; }
# nothing of the source or build tree on the way: only the prefix's headers and libraries
if grep -q -- "-I$source\b\|-I$build\b\|-isystem $source\b" "$work/app/build/compile_commands.json"; then
  echo "the outside build used the source tree's headers"; exit 1
fi
outside=$("$work/app/build/run_model" digits_mlp.yaml)
inside=$("$in_tree" digits_mlp.yaml)
if [[ "$outside" != "$inside" ]]; then
  printf 'outside:\n%s\nin tree:\n%s\n' "$outside" "$inside"; exit 1
fi
grep -q "\[4, 10\]: " <<<"$outside"  # the digits MLP's outputs, printed
# the README's program runs from the source tree (it names configs/char_gru.yaml)
readme=$(cd "$source" && "$work/app/build/readme_program")
grep -q "one step's loss [0-9]" <<<"$readme" || { echo "the README's program printed: $readme"; exit 1; }
echo "the README's C++ program: $readme"
echo "run_model built against $work/prefix computes what the in-tree example computes:"
echo "$outside"
