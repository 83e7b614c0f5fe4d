#!/usr/bin/env bash
# Installs the Debian packages Tandem needs to build, test and benchmark. Idempotent:
# when everything is there it only checks (about a second). Needs root or sudo.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config
  libdnnl-dev ocl-icd-opencl-dev      # oneDNN 2.x; its CMake config wants OpenCL headers
  libtbb-dev libyaml-cpp-dev
  libcli11-dev nlohmann-json3-dev libfmt-dev
  catch2
  zlib1g-dev python3-sklearn          # the data loader's gzip reader; sklearn ships digits.csv.gz
  libopenmpi-dev openmpi-bin
  python3-torch python3-numpy python3-yaml libopenblas0-pthread   # the PyTorch oracle and peer
  python3-torchvision                 # its classification models, which from_torch converts in the tests
  python3-dev pybind11-dev libdlpack-dev  # `import tandem` (python/), built for /usr/bin/python3
  python3-pytest python3-matplotlib       # its tests, and the example's loss curve
  python3-pip python3-venv python3-setuptools  # pip install of the package (tests/install/python_package.sh)
  graphviz                                # tandem plan --svg/--png renders the plan with its dot
  clang-14 libclang-rt-14-dev libfuzzer-14-dev libomp-14-dev        # sanitizers and fuzzing (scripts/sanitize.sh, fuzz.sh)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo=""
if ((EUID != 0)); then
  command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 2; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
