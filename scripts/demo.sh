#!/usr/bin/env bash
# Sets up, builds and runs Tandem's main job on a bundled model: validate the
# recommender config and run inference on it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
echo
build/tandem devices
echo
build/tandem check configs/recommender.yaml
echo
build/tandem run configs/recommender.yaml --batch 256 --bind tags=2048 --repeat 50
