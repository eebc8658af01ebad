#!/bin/sh
# Build steermoe's default model steer-olmoe-small and its drafter steer-drafter-small from
# scratch: corpus, tokenizer, training (resumable), export, reference outputs, calibration,
# routing statistics (PyTorch and engine), statistics over training, drafter acceptance, plots.
# The drafter sees the same number of tokens as the target (STEPS x 32 x 256).
# Run from the repository root. Training is deterministic for a given step count and thread
# count; it is resumable: run the script again (same WORK) and it continues from the last
# checkpoint (train.py --resume). Keep WORK outside the work tree to carry it across sessions.
#   sh tools/train/run_all.sh                          # everything (training: ~4.5 h model + ~1.5 h drafter, 1 thread)
#   INSTALL=0 sh tools/train/run_all.sh                # without the installs
#   MAX_MINUTES=100 sh tools/train/run_all.sh          # train at most 100 minutes this time, then stop
# steer-olmoe-tiny (the previous default) was built by this script's version at commit 459839e
# with the three-source corpus (`prepare_data.py --corpus tiny`); see its model card.
set -eu
STEPS=${STEPS:-2000}
SEED=${SEED:-20261201}
THREADS=${THREADS:-1}
MAX_MINUTES=${MAX_MINUTES:-0}
WORK=${WORK:-/work/train-small}
DRAFT_WORK=${DRAFT_WORK:-$WORK-drafter}
OUT=${OUT:-models/steer-olmoe-small}
DRAFTER=${DRAFTER:-models/steer-drafter-small}
BUILD=${BUILD:-build}
PY=/usr/bin/python3
if [ "${INSTALL:-1}" = 1 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-numpy python3-matplotlib python3-pip \
    bible-kjv bible-kjv-text python3.11-doc libpython3.11-stdlib perl-doc linux-doc \
    postgresql-doc-15 dict-gcide debian-reference-en
  $PY -m pip install -q --break-system-packages torch==2.15.0 tokenizers==0.23.3
fi
export OMP_NUM_THREADS=$THREADS
mkdir -p "$WORK" "$DRAFT_WORK"
if [ ! -f "$WORK/train.u16" ]; then
  $PY tools/train/prepare_data.py --corpus small --workdir "$WORK" --textdir data/text-small
  $PY tools/train/train_tokenizer.py --workdir "$WORK" --vocab 4096
fi
for f in train.u16 eval.u16 heldout.u16 eval.jsonl tokenizer.json; do ln -sf "$(realpath "$WORK/$f")" "$DRAFT_WORK/$f"; done
SNAPS=0,25,50,100,200,300,400,600,800,1000,1250,1500,1750,2000
# train.py exits 75 when --max-minutes stopped it before --steps: stop here (nothing half-trained
# is exported); the next run resumes from the checkpoint.
train() {
  status=0
  $PY tools/train/train.py "$@" --max-minutes "$MAX_MINUTES" || status=$?
  if [ "$status" = 75 ]; then
    echo "run_all: training stopped by MAX_MINUTES=$MAX_MINUTES before the last step; run again (same WORK) to resume" >&2
    exit 0
  fi
  [ "$status" = 0 ] || exit "$status"
}
train --workdir "$WORK" --resume --seed "$SEED" --steps "$STEPS" --batch 32 --seq 256 \
  --lr 3e-3 --warmup 100 --threads "$THREADS" --hidden 128 --expert-ffn 64 --layers 8 --heads 2 \
  --experts 64 --topk 8 --eval-every 50 --ckpt-every-min 5 --snapshots "$SNAPS"
train --workdir "$DRAFT_WORK" --resume --arch qwen3 --seed 20261202 --steps "$STEPS" \
  --batch 32 --seq 256 --lr 3e-3 --warmup 100 --threads "$THREADS" --hidden 128 --layers 2 --heads 2 \
  --kv-heads 1 --dense-ffn 384 --eval-every 50 --ckpt-every-min 5
$PY tools/train/export.py --workdir "$WORK" --out "$OUT"
$PY tools/train/export.py --workdir "$DRAFT_WORK" --out "$DRAFTER"
$PY tools/train/reference.py --workdir "$WORK" --model "$OUT" --sources code:,pgsql:,bible:
$PY tools/train/pregate_reference.py --model "$OUT"
$PY tools/train/reference.py --workdir "$WORK" --model "$DRAFTER" --sources code:,pgsql:,bible:
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" --target steermoe
$PY tools/train/routing_report.py --model "$OUT" --steermoe "$BUILD/steermoe" --calibrate \
  --text data/text-small/eval.txt --heldout data/text-small/heldout.txt --threads "$THREADS"
$PY tools/train/routing_over_training.py --workdir "$WORK" --model "$OUT" --steermoe "$BUILD/steermoe" \
  --residency 0.5 0.25 --threads "$THREADS"
$PY tools/train/simulate_policies.py --model "$OUT" --steermoe "$BUILD/steermoe"
$PY tools/train/drafter_acceptance.py --target "$OUT" --drafter "$DRAFTER" --threads "$THREADS" \
  --out "$DRAFTER/acceptance.json"
$PY tools/train/plot_curve.py --log "$WORK/train_log.jsonl" --out "$OUT/training_curve.png" --title "steer-olmoe-small training"
$PY tools/train/plot_curve.py --log "$DRAFT_WORK/train_log.jsonl" --out "$DRAFTER/training_curve.png" --title "steer-drafter-small training"
cp "$WORK/train_log.jsonl" "$OUT/train_log.jsonl"
cp "$DRAFT_WORK/train_log.jsonl" "$DRAFTER/train_log.jsonl"
