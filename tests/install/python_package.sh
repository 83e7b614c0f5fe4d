#!/usr/bin/env bash
# The Python package installed two ways, each imported from a directory outside the source
# and build trees (docs/python.md, "Installing"):
#   - `cmake --install BUILD --prefix P`, found through PYTHONPATH=P/lib/python3.X/dist-packages;
#   - `pip install --no-build-isolation SOURCE/python` into a virtual environment that sees
#     the system's packages, offline (--no-index), reusing BUILD (TANDEM_BUILD_DIR).
# Each loads a bundled model (and to_torch's module, with the files it takes from tests/oracle), draws its weights from a seed and runs a forward on fixed
# inputs; the outputs must be those of the package in BUILD/python.
# Usage: python_package.sh BUILD_DIR SOURCE_DIR PYTHON
set -euo pipefail
build=$1 source=$2 python=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/elsewhere"
cat >"$work/forward.py" <<'PY'
import os, sys
import numpy, tandem
import tandem.torch_twin  # to_torch's module: the oracle's twin, installed beside the package
where = os.path.dirname(tandem.__file__)
assert where.startswith(sys.argv[2]), "tandem imported from %s, not from %s" % (where, sys.argv[2])
model = tandem.Model.load(os.path.join(sys.argv[1], "configs", "digits_mlp.yaml"))
model.init_parameters(7)
x = numpy.random.default_rng(7).standard_normal((4, 64)).astype(numpy.float32)
out = model(x)["fc3"]
print(" ".join("%.6e" % v for v in numpy.asarray(out).ravel()))
PY
forward() {  # forward PYTHON PACKAGE_ROOT [PYTHONPATH]
  (cd "$work/elsewhere" && PYTHONPATH=${3:-} "$1" "$work/forward.py" "$source" "$2")
}
in_tree=$(forward "$python" "$build/python" "$build/python")

cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"
site=$(cd "$work/prefix" && ls -d lib/python3*/dist-packages)
test -f "$work/prefix/$site/tandem/__init__.py" || { echo "cmake --install put no tandem package in $site"; exit 1; }
installed=$(forward "$python" "$work/prefix/$site" "$work/prefix/$site")
[[ "$installed" == "$in_tree" ]] || { printf 'cmake --install:\n%s\nbuild/python:\n%s\n' "$installed" "$in_tree"; exit 1; }
echo "cmake --install: tandem from $work/prefix/$site runs digits_mlp as build/python does"

"$python" -m venv --system-site-packages --without-pip "$work/venv"
# the system's pip, run by the environment's Python, installs into the environment
if ! TANDEM_BUILD_DIR=$build "$work/venv/bin/python" -m pip install --no-build-isolation --no-index \
       "$source/python" >"$work/pip.log" 2>&1; then
  cat "$work/pip.log"; exit 1
fi
piped=$(forward "$work/venv/bin/python" "$work/venv/lib")
[[ "$piped" == "$in_tree" ]] || { printf 'pip install:\n%s\nbuild/python:\n%s\n' "$piped" "$in_tree"; exit 1; }
# setuptools left nothing beside the sources
left=$(cd "$source/python" && ls -d build *.egg-info 2>/dev/null || true)
[[ -z "$left" ]] || { echo "pip install left $left in $source/python"; exit 1; }
echo "pip install: tandem in $work/venv runs digits_mlp as build/python does"
