#!/bin/sh
# Rebuild steer-olmoe-tiny from scratch: data, tokenizer, training, export, reference logits,
# statistics, plot. Run from the repository root. Deterministic for a given STEPS and thread
# count (1): the shipped model used STEPS and STOP_STEP as recorded in
# models/steer-olmoe-tiny/README.md.
#   sh tools/train/run_all.sh                 # full rebuild with the recorded step count
#   INSTALL=0 sh tools/train/run_all.sh       # skip apt-get/pip
set -eu
STEPS=${STEPS:-382}
STOP_STEP=${STOP_STEP:-0}
SEED=${SEED:-20261201}
WORK=${WORK:-build-train}
OUT=${OUT:-models/steer-olmoe-tiny}
PY=/usr/bin/python3
if [ "${INSTALL:-1}" = 1 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-torch python3-numpy python3-matplotlib \
    python3-pip libopenblas0-openmp bible-kjv bible-kjv-text python3.11-doc libpython3.11-stdlib
  $PY -m pip install -q --break-system-packages tokenizers==0.23.3
fi
export OMP_NUM_THREADS=1
$PY tools/train/prepare_data.py --workdir "$WORK" --textdir data/text
$PY tools/train/train_tokenizer.py --workdir "$WORK" --vocab 4096
$PY tools/train/train.py --workdir "$WORK" --seed "$SEED" --steps "$STEPS" --stop-step "$STOP_STEP" --threads 1
$PY tools/train/export.py --workdir "$WORK" --out "$OUT"
$PY tools/train/reference.py --workdir "$WORK" --model "$OUT"
$PY tools/train/pregate_reference.py --model "$OUT"
$PY tools/train/stats.py --workdir "$WORK" --model "$OUT" --out "$OUT/routing_stats.json"
$PY tools/train/plot_curve.py --log "$WORK/train_log.jsonl" --out "$OUT/training_curve.png"
cp "$WORK/train_log.jsonl" "$OUT/train_log.jsonl"
