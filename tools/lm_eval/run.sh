#!/usr/bin/env bash
# A real client end to end: lm-evaluation-harness's `local-completions` model against
# `steermoe serve` on the shipped model, with exact routing and with PSR; checks that every
# per-sample log-likelihood lm-eval logs equals the engine's own score (steermoe score), bit for
# bit; then the official openai client for chat, streaming and not. Needs PyPI (not run in CI).
#
#   tools/lm_eval/run.sh [BUILD_DIR] [OUT_DIR]
#   MODEL=models/steer-olmoe-tiny TEXT=data/text/heldout.txt tools/lm_eval/run.sh   # another model
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
OUT=${2:-$(mktemp -d /tmp/steermoe-lmeval.XXXX)}
VENV=${VENV:-$ROOT/.venv-lmeval}
MODEL=$(realpath "${MODEL:-$ROOT/models/steer-olmoe-small}")
TEXT=$(realpath "${TEXT:-$ROOT/data/text-small/heldout.txt}")
MODEL_NAME=$(basename "$MODEL")
N=${N:-40}
if [ ! -x "$VENV/bin/lm_eval" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "lm-eval[api]==0.4.13" openai
fi
python3 "$ROOT/tools/lm_eval/make_tasks.py" "$OUT/tasks" --n "$N" --text "$TEXT"
export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

run_one() {  # name, then serve flags
  local name=$1; shift
  "$BUILD/steermoe" serve -m "$MODEL" --port 0 --quiet "$@" > "$OUT/$name.port" 2> "$OUT/$name.serve.log" &
  local pid=$!
  for _ in $(seq 100); do grep -q "listening on port" "$OUT/$name.port" 2>/dev/null && break; sleep 0.1; done
  local port; port=$(awk '/listening on port/ {print $4}' "$OUT/$name.port")
  echo "== $name: steermoe serve on port $port ($*)"
  "$VENV/bin/lm_eval" --model local-completions \
    --model_args "base_url=http://127.0.0.1:$port/v1/completions,model=$MODEL_NAME,tokenizer_backend=remote,tokenized_requests=True,max_length=255,num_concurrent=1,max_retries=1,timeout=120" \
    --tasks heldout_cloze,heldout_gen --include_path "$OUT/tasks" --batch_size 4 \
    --log_samples --output_path "$OUT/$name" 2>&1 | tee "$OUT/$name.lm_eval.log" | grep -E "^\||Tasks" || true
  if [ "$name" = exact ]; then
    "$VENV/bin/python" "$ROOT/tools/lm_eval/openai_chat.py" "http://127.0.0.1:$port/v1"
  fi
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

run_one exact --policy exact:evict=lru
python3 "$ROOT/tools/lm_eval/check.py" --samples "$OUT/exact" --steermoe "$BUILD/steermoe" -m "$MODEL"
run_one psr --policy psr:lambda=0.3,n=1 --cache 32 --calib "$MODEL/calib.smcal"
python3 "$ROOT/tools/lm_eval/check.py" --samples "$OUT/psr" --steermoe "$BUILD/steermoe" -m "$MODEL" \
  --policy psr:lambda=0.3,n=1 --cache 32 --calib "$MODEL/calib.smcal"
echo "outputs in $OUT"
