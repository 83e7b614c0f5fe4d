#!/usr/bin/env bash
# Trains the model zoo (docs/zoo/) on data Debian ships, after scripts/demo.sh or
# scripts/build.sh: the digits CNN on sklearn's 8x8 digits (the digits MLP's data and
# seeded split), then the character GRU on the GPL-3 text, whose windows
# scripts/make_char_data.py writes into build/ first, then the BERT-mini encoder on the
# synthetic masked tokens of scripts/make_mlm_data.py, then the DLRM click model (8
# tables of 1,000,000 x 64: about 4 GiB of memory in training) on the synthetic clicks of
# scripts/make_click_data.py.
# The GRU, BERT-mini and DLRM configs put blocks on two GPUs: without GPUs here they run
# every layer on the cpu (--place '*=cpu'; the same computation, as their docs measured it).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/tandem ] || scripts/build.sh
place=()
build/tandem devices --json | grep -q '"cuda:1"' || place=(--place '*=cpu')
build/tandem train configs/digits_cnn.yaml
echo
/usr/bin/python3 scripts/make_char_data.py build/gpl3_chars.safetensors
build/tandem train configs/char_gru.yaml "${place[@]}"
echo
/usr/bin/python3 scripts/make_mlm_data.py build/mlm.safetensors
build/tandem train configs/bert_mini.yaml "${place[@]}"
echo
/usr/bin/python3 scripts/make_click_data.py build/clicks.safetensors
build/tandem train configs/dlrm.yaml "${place[@]}"
