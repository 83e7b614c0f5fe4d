#!/usr/bin/env bash
# Sets up, builds and runs Tandem's main job: train the digits MLP on sklearn's
# handwritten digits (1,797 real 8x8 images, shipped by Debian's python3-sklearn) with a
# seeded 80/20 split, and show the validation accuracy; then run the trained model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh --target tandem  # the CLI alone: scripts/test.sh builds the rest
echo
build/tandem devices
echo
build/tandem train configs/digits_mlp.yaml --save build/digits.ckpt.safetensors
echo
build/tandem run configs/digits_mlp.yaml --weights build/digits.ckpt.safetensors --batch 4
