#!/usr/bin/env bash
# Trains the model zoo (docs/zoo/) on data Debian ships, after scripts/demo.sh or
# scripts/build.sh: the digits CNN on sklearn's 8x8 digits (the digits MLP's data and
# seeded split), then the character GRU on the GPL-3 text, whose windows
# scripts/make_char_data.py writes into build/ first, then the BERT-mini encoder on the
# synthetic masked tokens of scripts/make_mlm_data.py.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/tandem ] || scripts/build.sh
build/tandem train configs/digits_cnn.yaml
echo
/usr/bin/python3 scripts/make_char_data.py build/gpl3_chars.safetensors
build/tandem train configs/char_gru.yaml
echo
/usr/bin/python3 scripts/make_mlm_data.py build/mlm.safetensors
build/tandem train configs/bert_mini.yaml
