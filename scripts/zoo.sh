#!/usr/bin/env bash
# Trains the model zoo (docs/zoo/) on data Debian ships, after scripts/demo.sh or
# scripts/build.sh: the digits CNN on sklearn's 8x8 digits (the digits MLP's data and
# seeded split), then the character GRU on the GPL-3 text, whose windows
# scripts/make_char_data.py writes into build/ first, then the BERT-mini encoder on the
# synthetic masked tokens of scripts/make_mlm_data.py, then the DLRM click model (8
# tables of 1,000,000 x 64: about 4 GiB of memory in training) on the synthetic clicks of
# scripts/make_click_data.py.
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
echo
/usr/bin/python3 scripts/make_click_data.py build/clicks.safetensors
build/tandem train configs/dlrm.yaml
